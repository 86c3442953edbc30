//! Rollouts that drop nothing: the readiness grace (503 on `/readyz` while still accepting), a
//! second stop signal that ends the drain at once, and a restart behind a real nginx.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;
use aisix_e2e::third_party::balancer::Balancer;

const KEY: &str = "sk-rollout-1";

fn config(mode: Mode, mock: &MockProvider, shutdown: &str) -> GatewayConfig {
    GatewayConfig::new(mode)
        .openai(&mock.base_url(), &[("gpt-x", "upstream-x")], KEY)
        .extra(shutdown)
}

fn chat() -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(r#"{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}"#),
    )
}

/// Polls `/readyz` on fresh connections until it answers `status`, for up to 20 s: on a loaded
/// machine the gateway may take seconds to be scheduled after a signal, and the grace only
/// starts once it has handled it.
async fn wait_readyz(gateway: &Gateway, status: u16) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if client::get(gateway.addr(), "/readyz").await.status == status {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

both_modes! {
    async fn during_the_readiness_grace_readyz_is_503_and_new_connections_are_still_served(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(
            mode,
            &mock,
            "shutdown:\n  readiness_grace_secs: 4\n  drain_timeout_secs: 10\n",
        ));
        gateway.signal(libc::SIGTERM);
        assert!(wait_readyz(&gateway, 503).await, "{}", gateway.logs());
        // The line that says so may reach the test's copy of the log a moment after the 503.
        assert!(gateway.wait_for_log("readiness grace", Duration::from_secs(10)), "{}", gateway.logs());
        assert!(!gateway.logs().contains("draining:"), "the grace ended too early: {}", gateway.logs());
        // A new connection during the grace is accepted and its request answered normally.
        let reply = client::send(gateway.addr(), chat()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(client::get(gateway.addr(), "/livez").await.status, 200);

        assert!(gateway.wait_for_log("draining:", Duration::from_secs(15)), "{}", gateway.logs());
        let status = gateway.wait_exit(Duration::from_secs(15)).expect("exits after the drain");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
        assert!(TcpStream::connect(gateway.addr()).is_err(), "no listener after exit");
    }
}

both_modes! {
    async fn without_a_grace_the_listeners_close_at_the_first_signal(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(mode, &mock, ""));
        gateway.signal(libc::SIGTERM);
        let status = gateway.wait_exit(Duration::from_secs(15)).expect("exits at once");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
        assert!(!gateway.logs().contains("readiness grace"), "{}", gateway.logs());
    }
}

both_modes! {
    async fn a_second_sigterm_during_the_drain_exits_at_once_non_zero(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(mode, &mock, "shutdown:\n  drain_timeout_secs: 60\n"));
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(50)));
        let addr = gateway.addr();
        let in_flight = tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
            tokio::spawn(conn);
            let mut request = chat();
            request.headers_mut().insert("host", addr.to_string().parse().unwrap());
            sender.send_request(request).await.map(|r| r.status())
        });
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);
        gateway.signal(libc::SIGTERM);
        assert!(gateway.wait_for_log("draining:", Duration::from_secs(5)), "{}", gateway.logs());
        gateway.signal(libc::SIGTERM);
        // Far sooner than the 50 s the request still needs, or the 60 s drain allows.
        let status = gateway.wait_exit(Duration::from_secs(10)).expect("exits at the second signal");
        assert!(!status.success(), "{}", gateway.logs());
        assert!(gateway.logs().contains("second stop signal"), "{}", gateway.logs());
        // The abandoned request ends without a response.
        assert!(in_flight.await.unwrap().is_err());
    }
}

both_modes! {
    async fn a_sigint_during_the_readiness_grace_exits_at_once_non_zero(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(
            mode,
            &mock,
            "shutdown:\n  readiness_grace_secs: 60\n  drain_timeout_secs: 60\n",
        ));
        gateway.signal(libc::SIGTERM);
        assert!(wait_readyz(&gateway, 503).await, "{}", gateway.logs());
        gateway.signal(libc::SIGINT);
        let status = gateway.wait_exit(Duration::from_secs(10)).expect("exits at the second signal");
        assert!(!status.success(), "{}", gateway.logs());
        assert!(gateway.logs().contains("second stop signal"), "{}", gateway.logs());
    }
}

fn chat_body(stream: bool) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(&format!(
            r#"{{"model":"gpt-x","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
        )),
    )
}

/// One client: requests through `addr` until `stop`, alternating unary and streaming; returns
/// how many it sent and every failure it saw.
async fn client_loop(addr: SocketAddr, stop: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let mut sent = 0;
    let mut failures = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let stream = sent % 2 == 1;
        let reply = client::send(addr, chat_body(stream)).await;
        sent += 1;
        let complete = if stream {
            reply.text().ends_with("data: [DONE]\n\n")
        } else {
            reply.json()["object"] == "chat.completion"
        };
        if reply.status != 200 || !complete {
            failures.push(format!("{} {}", reply.status, reply.text()));
        }
    }
    (sent, failures)
}

async fn requests_served(gateway: &Gateway) -> f64 {
    let page = client::get(gateway.metrics_addr.unwrap(), "/metrics")
        .await
        .text();
    sample(&page, "aisix_requests_total", &[("outcome", "success")])
}

both_modes! {
    async fn a_rolling_restart_behind_nginx_under_load_drops_nothing(mode: Mode) {
        let mock = MockProvider::start();
        // Slow enough that requests are always in flight on both instances.
        mock.set_default(Mock::openai().delay_head(Duration::from_millis(150)));
        let shutdown = "shutdown:\n  readiness_grace_secs: 3\n  drain_timeout_secs: 20\n";
        let mut old = Gateway::start(&config(mode, &mock, shutdown).metrics());
        let other = Gateway::start(&config(mode, &mock, shutdown).metrics());
        let mut nginx = Balancer::start(&[old.addr(), other.addr()]);

        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..8)
            .map(|_| tokio::spawn(client_loop(nginx.addr, stop.clone())))
            .collect();
        while requests_served(&old).await < 20.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The orchestrator's rollout: SIGTERM, take the instance out of rotation once its
        // readiness probe fails (within the grace), wait for it to drain, start the new one,
        // put it in rotation.
        old.signal(libc::SIGTERM);
        assert!(wait_readyz(&old, 503).await, "{}", old.logs());
        nginx.set_upstreams(&[other.addr()]);
        let status = old.wait_exit(Duration::from_secs(30)).expect("the old instance drains and exits");
        assert_eq!(status.code(), Some(0), "{}", old.logs());
        let new = Gateway::start(&config(mode, &mock, shutdown).metrics());
        nginx.set_upstreams(&[new.addr(), other.addr()]);
        while requests_served(&new).await < 20.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        stop.store(true, Ordering::Relaxed);
        let mut sent = 0;
        let mut failures = Vec::new();
        for client in clients {
            let (n, mut f) = client.await.unwrap();
            sent += n;
            failures.append(&mut f);
        }
        assert!(sent >= 80, "{sent} requests");
        assert!(failures.is_empty(), "{} of {sent} failed: {:?}\nnginx: {}", failures.len(), &failures[..failures.len().min(5)], nginx.logs());
    }
}
