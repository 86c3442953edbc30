//! The bytes an HTTP/1.1 upstream receives, captured on a raw socket: origin-form request line,
//! a `Host` header, and exactly the gateway's own header set. Real servers (nginx, uvicorn, Go)
//! refuse absolute-form requests without `Host`; a lenient mock would not notice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig};

/// Accepts one connection, reads one request (head and `Content-Length` body), answers a chat
/// completion, and hands back the raw head and body it read.
fn capture_one_request() -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = socket.read(&mut chunk).unwrap();
            assert!(
                n > 0,
                "upstream connection closed before the request head ended"
            );
            buf.extend_from_slice(&chunk[..n]);
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().unwrap())
            })
            .expect("a content-length header");
        while buf.len() < head_end + length {
            let n = socket.read(&mut chunk).unwrap();
            assert!(n > 0);
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = buf[head_end..head_end + length].to_vec();
        let answer = r#"{"id":"c","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
        write!(
            socket,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        )
        .unwrap();
        tx.send((head, body)).unwrap();
    });
    (port, rx)
}

both_modes! {
    async fn http1_upstream_gets_origin_form_with_host_and_only_the_gateways_headers(mode: Mode) {
        let (port, captured) = capture_one_request();
        let resources = format!(
            r#"_format_version: "1"
provider_keys:
  - display_name: raw
    provider: openai
    api_key: sk-upstream-secret
    api_base: http://127.0.0.1:{port}/v1
models:
  - display_name: m
    provider: openai
    model_name: upstream-m
    provider_key: raw
api_keys:
  - display_name: k
    key_env: WIRE_TEST_KEY
    allowed_models: ["*"]
"#
        );
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .workers(Some(1))
                .resources(resources)
                .env("WIRE_TEST_KEY", "sk-client-key"),
        );
        let reply = client::send(
            gateway.addr(),
            client::request(
                "POST",
                "/v1/chat/completions",
                &[
                    ("authorization", "Bearer sk-client-key"),
                    ("x-request-id", "wire-test-1"),
                    ("cookie", "session=client-only"),
                ],
                Some(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
            ),
        )
        .await;
        assert_eq!(reply.status, 200, "{}\n{}", reply.text(), gateway.logs());

        let (head, body) = captured.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("POST /v1/chat/completions HTTP/1.1"), "{head}");
        let mut headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (name, value) = l.split_once(':').unwrap();
                (name.to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        headers.sort();
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "accept",
                "authorization",
                "content-length",
                "content-type",
                "host",
                "user-agent",
                "x-request-id"
            ],
            "{head}"
        );
        let value = |name: &str| headers.iter().find(|(n, _)| n == name).unwrap().1.as_str();
        assert_eq!(value("host"), format!("127.0.0.1:{port}"));
        assert_eq!(value("authorization"), "Bearer sk-upstream-secret");
        assert_eq!(value("content-type"), "application/json");
        assert_eq!(value("accept"), "application/json");
        assert_eq!(value("x-request-id"), "wire-test-1");
        assert!(value("user-agent").starts_with("aisix/"));
        assert_eq!(value("content-length"), body.len().to_string());
        let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(sent["model"], "upstream-m");
    }
}
