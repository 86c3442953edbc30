//! Every way a request can end is recorded as what it was, in `/metrics` and in the access log:
//! success, an upstream error, a timeout, and the client leaving, for whole answers and streams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;
use http_body_util::BodyExt;
use serde_json::Value;

const KEY: &str = "sk-endings-test-1";

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .openai(&mock.base_url(), &[("gpt-x", "up-x")], KEY)
        .metrics()
        .extra("downstream:\n  sse_keepalive_interval_secs: 0\nupstream:\n  first_token_timeout_ms: 800\n")
}

fn request(id: &str, stream: bool) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let body = serde_json::json!({"model": "gpt-x", "stream": stream, "messages": []}).to_string();
    client::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {KEY}")),
            ("x-request-id", id),
        ],
        Some(&body),
    )
}

both_modes! {
    async fn every_ending_is_recorded_as_what_it_was(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let addr = gateway.addr();

        // Whole answers.
        assert_eq!(client::send(addr, request("unary-ok", false)).await.status, 200);
        mock.enqueue(Mock::status(500).body("boom"));
        assert_eq!(client::send(addr, request("unary-error", false)).await.status, 502);
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(30)));
        assert_eq!(client::send(addr, request("unary-timeout", false)).await.status, 504);
        // Each cancelled upstream request is seen by the mock before the next one starts, so
        // the counts below belong to one request each (a late count cannot stand in for
        // another's).
        assert!(
            mock.wait_until_async(Duration::from_secs(25), |m| m.requests_abandoned() == 1).await,
            "the upstream request that missed its deadline was not cancelled"
        );
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(30)));
        let leaving = tokio::spawn(client::send(addr, request("unary-left", false)));
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 4).await);
        leaving.abort();
        assert!(
            // Well inside the mock's 30 s head delay; generous for a loaded CI machine.
            mock.wait_until_async(Duration::from_secs(25), |m| m.requests_abandoned() == 2).await,
            "the upstream request of a client that left was not cancelled"
        );

        // Streams.
        let text = client::send(addr, request("stream-ok", true)).await.text();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        mock.enqueue(Mock::sse([Frame::chat_delta("up-x", "partial")]).disconnect());
        assert!(client::send(addr, request("stream-error", true)).await.text().contains("stream_cut"));
        mock.enqueue(Mock::sse([Frame::chat_delta("up-x", "late").after(Duration::from_secs(30))]));
        assert!(client::send(addr, request("stream-timeout", true)).await.text().contains("upstream_timeout"));
        assert!(
            mock.wait_until_async(Duration::from_secs(25), |m| m.streams_cancelled() == 1).await,
            "the upstream stream that missed its deadline was not cancelled"
        );
        mock.enqueue(Mock::sse([Frame::chat_delta("up-x", "first")]).hang());
        let mut body = client::send_streaming(addr, request("stream-left", true)).await.into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data());
        drop(body);
        assert!(
            mock.wait_until_async(Duration::from_secs(25), |m| m.streams_cancelled() == 2).await,
            "the upstream stream of a client that left was not cancelled"
        );

        let expected = [
            ("unary-ok", 200, Value::Null),
            ("unary-error", 502, Value::from("upstream_error")),
            ("unary-timeout", 504, Value::from("upstream_timeout")),
            ("unary-left", 499, Value::from("client_closed")),
            ("stream-ok", 200, Value::Null),
            ("stream-error", 200, Value::from("stream_cut")),
            ("stream-timeout", 200, Value::from("upstream_timeout")),
            ("stream-left", 200, Value::from("client_closed")),
        ];
        for (id, status, error) in expected {
            let line = gateway.access_line(id);
            assert_eq!(line["status"], status, "{id}: {line}");
            assert_eq!(line["error"], error, "{id}: {line}");
            assert_eq!(line["stream"], id.starts_with("stream"), "{id}: {line}");
        }

        let page = client::get(gateway.metrics_addr.unwrap(), "/metrics").await.text();
        let count = |class: &str, outcome: &str| {
            sample(&page, "aisix_requests_total", &[("model", "gpt-x"), ("status_class", class), ("outcome", outcome)])
        };
        assert_eq!(count("2xx", "success"), 2.0, "{page}");
        assert_eq!(count("5xx", "upstream_error"), 2.0, "{page}");
        assert_eq!(count("2xx", "upstream_error"), 2.0, "{page}");
        assert_eq!(count("4xx", "client_closed"), 1.0, "the unary request whose client left: {page}");
        assert_eq!(count("2xx", "client_closed"), 1.0, "the stream whose client left: {page}");
        assert_eq!(count("1xx", "success"), 0.0, "{page}");
        assert_eq!(sample(&page, "aisix_upstream_errors_total", &[("kind", "timeout")]), 2.0, "{page}");
        assert_eq!(sample(&page, "aisix_requests_in_flight", &[]), 0.0, "{page}");
    }
}
