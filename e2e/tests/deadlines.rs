//! Every phase of a request has a deadline: a body that trickles gets 408 and holds nothing
//! past it (HTTP/1.1 and HTTP/2), an upstream that is slow to answer or to finish gets 504 or
//! an error event, and a model's own deadlines override the defaults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "sk-deadline-test-1";
const BIG: usize = 32 * 1024 * 1024;

fn resources(upstream: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: up, provider: openai, api_key: sk-up, api_base: "{upstream}"}}
models:
  - {{display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}}
  - {{display_name: patient, provider: openai, model_name: up-x, provider_key: up, first_token_timeout: 5000}}
api_keys:
  - {{display_name: k, key_env: DEADLINE_KEY, allowed_models: ["*"]}}
"#
    )
}

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(resources(&mock.base_url()))
        .env("DEADLINE_KEY", KEY)
        .metrics()
        .extra(
            "downstream:\n  request_body_timeout_secs: 1\n  sse_keepalive_interval_secs: 0\n\
             upstream:\n  first_token_timeout_ms: 800\n  timeout_ms: 2500\n  stream_idle_timeout_ms: 5000\n",
        )
}

/// A request body fed from a channel, a piece at a time.
struct Trickle(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Trickle {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|piece| piece.map(|b| Ok(http_body::Frame::data(b))))
    }
}

/// Sends 1 KiB every 100 ms into `tx` until the receiving side is gone.
fn trickle(tx: tokio::sync::mpsc::Sender<Bytes>) {
    tokio::spawn(async move {
        let piece = Bytes::from(format!(
            "{{\"model\":\"gpt-x\",\"pad\":\"{}",
            "x".repeat(1000)
        ));
        while tx.send(piece.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

async fn scrape(gateway: &Gateway) -> String {
    client::get(gateway.metrics_addr.unwrap(), "/metrics")
        .await
        .text()
}

both_modes! {
    async fn a_trickled_body_gets_408_and_holds_nothing_past_the_deadline(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        // HTTP/1.1: a 32 MiB body announced, 1 KiB sent every 100 ms.
        let mut stream = tokio::net::TcpStream::connect(gateway.addr()).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: {BIG}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        let writer = tokio::spawn(async move {
            let piece = vec![b'x'; 1024];
            while write.write_all(&piece).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut response = Vec::new();
        let mut buf = [0u8; 4096];
        // Read until the gateway closes the connection (EOF or reset), within a generous bound.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => response.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the HTTP/1.1 connection stayed open");
        writer.abort();
        let text = String::from_utf8_lossy(&response).to_lowercase();
        assert!(text.starts_with("http/1.1 408"), "{text}");
        assert!(text.contains("connection: close"), "{text}");
        assert!(text.contains("\"code\":\"request_timeout\""), "{text}");

        // HTTP/2: several streams on one connection, each trickling.
        let tcp = tokio::net::TcpStream::connect(gateway.addr()).await.unwrap();
        let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        let streams: Vec<_> = (0..4)
            .map(|_| {
                let mut sender = sender.clone();
                let addr = gateway.addr();
                tokio::spawn(async move {
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    trickle(tx);
                    let request = http::Request::post(format!("http://{addr}/v1/chat/completions"))
                        .header("authorization", format!("Bearer {KEY}"))
                        .header("content-type", "application/json")
                        .header("content-length", BIG.to_string())
                        .body(Trickle(rx))
                        .unwrap();
                    client::collect(sender.send_request(request).await.unwrap()).await
                })
            })
            .collect();
        for stream in streams {
            let reply = tokio::time::timeout(Duration::from_secs(10), stream).await.unwrap().unwrap();
            assert_eq!(reply.status, 408, "{}", reply.text());
            assert_eq!(reply.json()["error"]["code"], "request_timeout");
        }

        let page = scrape(&gateway).await;
        assert_eq!(sample(&page, "aisix_requests_in_flight", &[]), 0.0, "{page}");
        assert_eq!(
            sample(&page, "aisix_requests_total", &[("status_class", "4xx"), ("outcome", "client_error")]),
            5.0,
            "{page}"
        );
        assert_eq!(mock.request_count(), 0, "nothing reached the provider");
    }
}

async fn chat(gateway: &Gateway, model: &str, stream: bool) -> client::Reply {
    let body = serde_json::json!({"model": model, "stream": stream, "messages": []}).to_string();
    client::send(
        gateway.addr(),
        client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {KEY}"))],
            Some(&body),
        ),
    )
    .await
}

fn last_event_code(text: &str) -> Value {
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    let data = last
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or("null");
    serde_json::from_str::<Value>(data).unwrap_or(Value::Null)["error"]["code"].clone()
}

both_modes! {
    async fn each_upstream_phase_ends_on_its_own_deadline(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        // First byte (800 ms): a head that takes 1.5 s is a 504...
        mock.enqueue(Mock::openai().delay_head(Duration::from_millis(1500)));
        let reply = chat(&gateway, "gpt-x", false).await;
        assert_eq!(reply.status, 504, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "upstream_timeout");
        // ... unless the model allows more (first_token_timeout: 5000).
        mock.enqueue(Mock::openai().delay_head(Duration::from_millis(1500)));
        assert_eq!(chat(&gateway, "patient", false).await.status, 200);

        // Whole request (2.5 s): a head at once and a body 4 s later. The head is relayed as it
        // comes (whole answers are not held), so the late body is cut, not ended as if whole.
        mock.enqueue(Mock::openai().frame_delay(Duration::from_secs(4)));
        let body = serde_json::json!({"model": "patient", "messages": []}).to_string();
        let response = client::send_streaming(
            gateway.addr(),
            client::chat_request(KEY, "late-body", &body),
        )
        .await;
        assert_eq!(response.status(), 200);
        assert!(http_body_util::BodyExt::collect(response.into_body()).await.is_err());
        assert_eq!(gateway.access_line("late-body")["error"], "upstream_timeout");

        // A stream whose first event misses the first-byte deadline ends with an error event.
        mock.enqueue(Mock::sse([Frame::chat_delta("up-x", "late").after(Duration::from_millis(1500))]));
        let reply = chat(&gateway, "gpt-x", true).await;
        assert_eq!(reply.status, 200);
        let text = reply.text();
        assert_eq!(last_event_code(&text), "upstream_timeout", "{text}");
        assert!(!text.contains("late") && !text.contains("[DONE]"), "{text}");

        // A stream that keeps talking past the whole-request deadline is cut there.
        let frames = (0..10).map(|i| Frame::chat_delta("up-x", &format!("w{i}")).after(Duration::from_millis(400)));
        mock.enqueue(Mock::sse(frames));
        let text = chat(&gateway, "patient", true).await.text();
        assert!(text.contains("w0"), "{text}");
        assert!(!text.contains("w9") && !text.contains("[DONE]"), "{text}");
        assert_eq!(last_event_code(&text), "upstream_timeout", "{text}");

        let page = scrape(&gateway).await;
        assert_eq!(sample(&page, "aisix_upstream_errors_total", &[("provider", "up"), ("kind", "timeout")]), 4.0, "{page}");
    }
}
