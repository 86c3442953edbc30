#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The conformance matrix: servers this project did not write as the gateway's providers, with
//! the official `openai` Python SDK as the client, unary and streaming, in both serving modes.
//! Mocks are lenient where real servers are strict (a missing `Host` passed every mock here and
//! got a 400 from all of these), so each leg asserts what the real server received.
//!
//! | leg | server | upstream protocol |
//! |---|---|---|
//! | nginx | Debian's nginx reverse-proxying the mock, `proxy_buffering off` | HTTP/1.1 |
//! | uvicorn h11 / httptools | uvicorn serving `e2e/python/openai_asgi_app.py` | HTTP/1.1 |
//! | hypercorn | hypercorn serving the same app over TLS, ALPN `h2` | HTTP/2 |
//!
//! A missing tool fails the test with how to install it; `bash scripts/test.sh` installs all.

use std::collections::BTreeSet;

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::sdk::{self, CLIENT_KEY, CLIENT_KEY_ENV, UPSTREAM_KEY};
use aisix_e2e::third_party::asgi::{Asgi, AsgiServer};
use aisix_e2e::third_party::nginx::Nginx;
use serde_json::Value;

/// The gateway's workers; an upstream sees at most this many pools.
const WORKERS: usize = 2;

fn start_gateway(mode: Mode, api_base: &str, trust: Option<&std::path::Path>) -> Gateway {
    let mut config = GatewayConfig::new(mode)
        .workers(Some(WORKERS))
        .resources(sdk::relay_resources(api_base))
        .env(CLIENT_KEY_ENV, CLIENT_KEY);
    if let Some(ca) = trust {
        config = config.env("SSL_CERT_FILE", ca.to_str().expect("a UTF-8 temp path"));
    }
    Gateway::start(&config)
}

/// Runs the SDK script against `gateway`; fails with every log in `logs` if a check failed.
async fn run_sdk(gateway: &Gateway, embed_encoding: &str, logs: impl FnOnce() -> String) {
    let env = sdk::env(
        gateway,
        "relay-chat",
        "relay-embed",
        "relay-hidden",
        embed_encoding,
    );
    let (status, printed) = sdk::run_script(env).await;
    sdk::assert_passed(status, &printed, || {
        format!("--- gateway log ---\n{}\n{}", gateway.logs(), logs())
    });
    assert_answers_accounted(gateway);
}

/// Every answer the SDK got whole is recorded as a success, and every non-streaming one with
/// the usage its body reported: a real server's framing (HTTP/2's `END_STREAM` in a frame of
/// its own after the last data) must not make a delivered answer read as abandoned.
fn assert_answers_accounted(gateway: &Gateway) {
    // The script's last request is a streamed completion: once its line is written, every
    // earlier line is too (one writer per worker; a poll, not a timing assertion).
    let is_last = |line: &Value| {
        line["path"] == "/v1/completions" && line["stream"] == true && line["status"] == 200
    };
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = access_lines(gateway);
        if lines.iter().any(is_last) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let answered: Vec<&Value> = lines.iter().filter(|l| l["status"] == 200).collect();
    assert!(
        answered.iter().any(|l| is_last(l)),
        "no access line for the last request: {lines:#?}"
    );
    for line in answered {
        assert!(
            line["error"].is_null(),
            "a delivered answer recorded as failed: {line}"
        );
        if line["stream"] == false && line["method"] == "POST" {
            assert!(
                line["input_tokens"].as_u64().is_some(),
                "a delivered answer's usage was lost: {line}"
            );
        }
    }
}

fn access_lines(gateway: &Gateway) -> Vec<Value> {
    gateway
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "access")
        .collect()
}

fn str_of<'a>(record: &'a Value, key: &str) -> &'a str {
    record[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {record}"))
}

both_modes! {
    async fn nginx_in_front_of_the_mock_relays_sdk_unary_and_streaming_requests(mode: Mode) {
        let mock = MockProvider::start();
        let nginx = Nginx::start(mock.addr());
        let gateway = start_gateway(mode, &nginx.base_url(), None);
        // The mock answers embeddings as floats whatever `encoding_format` asks.
        run_sdk(&gateway, "float", || nginx.logs()).await;

        let log = nginx.access_log();
        let forwarded = mock.requests();
        assert_eq!(
            log.len(),
            forwarded.len(),
            "nginx finished {} requests but the mock got {}:\n{log:#?}",
            log.len(),
            forwarded.len()
        );
        let authority = nginx.addr.to_string();
        for line in &log {
            // Origin form and a Host naming nginx: what nginx answered 400 to before.
            let request = str_of(line, "request");
            let path = request
                .strip_prefix("POST ")
                .and_then(|rest| rest.strip_suffix(" HTTP/1.1"))
                .unwrap_or_else(|| panic!("not an origin-form HTTP/1.1 POST: {line}"));
            assert!(path.starts_with("/v1/"), "{line}");
            assert_eq!(str_of(line, "host"), authority, "{line}");
            assert_eq!(str_of(line, "status"), "200", "{line}");
            assert_eq!(str_of(line, "upstream_status"), "200", "{line}");
        }
        let streams = forwarded.iter().filter(|r| r.body_json().unwrap()["stream"] == true).count();
        let event_streams = log
            .iter()
            .filter(|line| str_of(line, "content_type").starts_with("text/event-stream"))
            .count();
        assert_eq!(event_streams, streams, "every stream went through nginx as SSE: {log:#?}");
        // The gateway keeps its connections to nginx alive across requests, streams included.
        let most_on_one_connection = log
            .iter()
            .map(|line| str_of(line, "connection_requests").parse::<u32>().unwrap())
            .max()
            .unwrap_or(0);
        assert!(
            most_on_one_connection >= 2,
            "every request to nginx came on a new connection: {log:#?}"
        );

        let relayed: Vec<sdk::Relayed> = forwarded.iter().map(sdk::Relayed::from).collect();
        sdk::assert_relayed(&relayed);
    }
}

/// The ASGI legs: the SDK through the gateway to `server` serving the app, then what the
/// server handed the app: HTTP version, scheme, Host (or `:authority`), framing, keys, models.
async fn asgi_leg(mode: Mode, server: AsgiServer) {
    let asgi = Asgi::start(server, UPSTREAM_KEY);
    let ca = asgi.ca_file();
    let gateway = start_gateway(mode, &asgi.base_url(), ca.as_deref());
    // The app serves base64 embeddings when asked, as the SDK does by default.
    run_sdk(&gateway, "sdk", || asgi.logs()).await;

    let records = asgi.requests();
    let (version, scheme) = if server.tls() {
        ("2", "https")
    } else {
        ("1.1", "http")
    };
    let authority = asgi.authority();
    for record in &records {
        assert_eq!(str_of(record, "http_version"), version, "{record}");
        assert_eq!(str_of(record, "scheme"), scheme, "{record}");
        // hypercorn hands HTTP/2's `:authority` to the app as `host`.
        assert_eq!(record["headers"]["host"], authority.as_str(), "{record}");
        assert_eq!(
            record["headers"]["content-type"], "application/json",
            "{record}"
        );
        if let Some(length) = record["headers"]["content-length"].as_str() {
            assert_eq!(
                length.parse::<u64>().ok(),
                record["body_bytes"].as_u64(),
                "content-length does not match the body after the model was rewritten: {record}"
            );
        }
        let headers = record["headers"].as_object().unwrap();
        assert!(
            !headers
                .values()
                .any(|v| v.as_str().unwrap_or_default().contains(CLIENT_KEY)),
            "the client's key went upstream: {record}"
        );
    }
    let connections: BTreeSet<&str> = records.iter().map(|r| str_of(r, "client")).collect();
    if server.tls() {
        assert!(
            connections.len() <= WORKERS,
            "HTTP/2 requests are multiplexed on one connection per worker, yet {} connections \
             carried {} requests",
            connections.len(),
            records.len()
        );
    } else {
        assert!(
            connections.len() < records.len(),
            "every request came on a new connection ({} requests): keep-alive is not reused",
            records.len()
        );
    }
    sdk::assert_relayed(&asgi.relayed());
}

both_modes! {
    async fn uvicorn_h11_serves_sdk_unary_and_streaming_requests(mode: Mode) {
        asgi_leg(mode, AsgiServer::UvicornH11).await;
    }
}

both_modes! {
    async fn uvicorn_httptools_serves_sdk_unary_and_streaming_requests(mode: Mode) {
        asgi_leg(mode, AsgiServer::UvicornHttptools).await;
    }
}

both_modes! {
    async fn hypercorn_over_tls_serves_sdk_unary_and_streaming_requests_on_http2(mode: Mode) {
        asgi_leg(mode, AsgiServer::HypercornTls).await;
    }
}
