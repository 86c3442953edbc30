//! Connecting under pressure and failure: the per-host connection cap makes requests wait their
//! turn within their own deadline, and requests queued behind a connection attempt that fails
//! learn of it at once instead of each timing out in turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;

const KEY: &str = "sk-pool-test-1";

fn config(mode: Mode, provider_keys: &str, models: &str, extra: &str) -> GatewayConfig {
    GatewayConfig::new(mode)
        .workers(Some(1))
        .resources(format!(
            "_format_version: \"1\"\nprovider_keys:\n{provider_keys}models:\n{models}api_keys:\n  - {{display_name: k, key_env: POOL_KEY, allowed_models: [\"*\"]}}\n"
        ))
        .env("POOL_KEY", KEY)
        .metrics()
        .extra(extra)
}

async fn chat(addr: std::net::SocketAddr, model: &str) -> client::Reply {
    let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
    client::send(
        addr,
        client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {KEY}"))],
            Some(&body),
        ),
    )
    .await
}

both_modes! {
    async fn requests_past_the_connection_cap_wait_for_a_free_connection(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(
            mode,
            &format!("  - {{display_name: up, provider: openai, api_base: \"{}\"}}\n", mock.base_url()),
            "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n",
            "upstream:\n  pool_max_connections_per_host: 2\n",
        ));
        mock.set_default(Mock::openai().delay_head(Duration::from_millis(300)));
        let addr = gateway.addr();
        let tasks: Vec<_> = (0..6).map(|_| tokio::spawn(chat(addr, "gpt-x"))).collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().status, 200);
        }
        assert_eq!(mock.request_count(), 6);
        assert_eq!(mock.connections_accepted(), 2, "one worker, a cap of 2 connections");
    }
}

both_modes! {
    async fn a_request_that_waits_past_its_deadline_for_a_connection_gets_504(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(
            mode,
            &format!("  - {{display_name: up, provider: openai, api_base: \"{}\"}}\n", mock.base_url()),
            "  - {display_name: slow, provider: openai, model_name: up-x, provider_key: up}\n  - {display_name: quick, provider: openai, model_name: up-x, provider_key: up, first_token_timeout: 800}\n",
            "upstream:\n  pool_max_connections_per_host: 1\n",
        ));
        mock.enqueue(Mock::openai().delay_head(Duration::from_millis(2500)));
        let addr = gateway.addr();
        let slow = tokio::spawn(chat(addr, "slow"));
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);
        let quick = chat(addr, "quick").await;
        assert_eq!(quick.status, 504, "{}", quick.text());
        assert_eq!(quick.json()["error"]["code"], "upstream_timeout");
        assert_eq!(mock.request_count(), 1, "the waiting request never got a connection");
        assert_eq!(slow.await.unwrap().status, 200);
        assert_eq!(mock.connections_accepted(), 1);
    }
}

/// A listener whose accept queue is full and never drained: connection attempts to it hang
/// (the kernel drops their SYNs) until the connector gives up.
async fn blackhole() -> (tokio::net::TcpListener, tokio::net::TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let filler = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    (listener, filler)
}

both_modes! {
    async fn requests_queued_behind_a_failed_connect_learn_its_failure_at_once(mode: Mode) {
        let (hole, _filler) = blackhole().await;
        let port = hole.local_addr().unwrap().port();
        // A connect takes 0.5 s to fail and every request may wait 3 s for its first byte: eight
        // requests failing one after another would take 4 s, and the last ones would get 504.
        let gateway = Gateway::start(&config(
            mode,
            &format!(
                "  - {{display_name: plain, provider: openai, api_base: \"http://127.0.0.1:{port}/v1\"}}\n  - {{display_name: tls, provider: openai, api_base: \"https://127.0.0.1:{port}/v1\"}}\n"
            ),
            "  - {display_name: capped, provider: openai, model_name: m, provider_key: plain}\n  - {display_name: probed, provider: openai, model_name: m, provider_key: tls}\n",
            "upstream:\n  pool_max_connections_per_host: 1\n  connect_timeout_ms: 500\n  first_token_timeout_ms: 3000\n",
        ));
        let addr = gateway.addr();
        // `capped`: one connection allowed, seven requests in line behind it. `probed`: an https
        // host whose protocol is unknown, so everyone waits for the first attempt.
        for model in ["capped", "probed"] {
            let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(chat(addr, model))).collect();
            for task in tasks {
                let reply = task.await.unwrap();
                assert_eq!(reply.status, 502, "{model}: {}", reply.text());
                assert_eq!(reply.json()["error"]["code"], "upstream_unavailable");
            }
        }
        let page = client::get(gateway.metrics_addr.unwrap(), "/metrics").await.text();
        assert_eq!(sample(&page, "aisix_upstream_errors_total", &[("kind", "connect")]), 16.0, "{page}");
        assert_eq!(sample(&page, "aisix_upstream_errors_total", &[("kind", "timeout")]), 0.0, "{page}");
    }
}

both_modes! {
    async fn sequential_streams_reuse_their_upstream_connection(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(
            mode,
            &format!("  - {{display_name: up, provider: openai, api_base: \"{}\"}}\n", mock.base_url()),
            "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n",
            "",
        ));
        let body = r#"{"model":"gpt-x","stream":true,"messages":[]}"#;
        for _ in 0..20 {
            let reply = client::send(
                gateway.addr(),
                client::request("POST", "/v1/chat/completions", &[("authorization", &format!("Bearer {KEY}"))], Some(body)),
            )
            .await;
            assert!(reply.text().ends_with("data: [DONE]\n\n"), "{}", reply.text());
        }
        // The client's stream ends at [DONE]; the upstream connection goes back to the pool when
        // the upstream's final chunk follows, which may come a moment after the next request
        // started. Churn would be one connection per stream.
        assert!(mock.connections_accepted() <= 3, "{} connections for 20 sequential streams", mock.connections_accepted());
        assert_eq!(mock.connections_closed(), 0, "no upstream connection was thrown away");
    }
}
