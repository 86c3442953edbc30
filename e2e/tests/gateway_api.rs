//! The OpenAI-compatible API end to end: the real gateway in both serving modes in front of the
//! scriptable mock provider, asserting on statuses, envelopes, headers, SSE frames and what the
//! upstream received.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const TEAM_KEY: &str = "sk-team-0123456789";
const LOCAL_ONLY_KEY: &str = "sk-local-only-42";
const DISABLED_KEY: &str = "sk-disabled-77";
const EXPIRED_KEY: &str = "sk-expired-88";
const PROVIDER_KEY: &str = "sk-provider-secret-XYZ";

fn sha256_hex(text: &str) -> String {
    use std::fmt::Write;
    // The test checks the gateway's hashing against an independent implementation: sha256sum.
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    let mut s = String::new();
    write!(s, "{}", &hex[..64]).unwrap();
    s
}

fn resources(upstream: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: up
    provider: openai
    api_key: {PROVIDER_KEY}
    api_base: {upstream}
  - display_name: dead
    provider: openai
    api_base: http://127.0.0.1:1/v1
  - display_name: local
    provider: mock
models:
  - display_name: gpt-x
    provider: openai
    model_name: upstream-x
    provider_key: up
  - display_name: gpt-slow
    provider: openai
    model_name: upstream-slow
    provider_key: up
    timeout: 700
  - display_name: gpt-dead
    provider: openai
    model_name: whatever
    provider_key: dead
  - display_name: local-demo
    provider: mock
    model_name: mock-1
    provider_key: local
api_keys:
  - display_name: team
    key_env: TEAM_KEY
    allowed_models: ["gpt-*", "local-demo"]
  - display_name: local-only
    key_hash: {local_only}
    allowed_models: ["local-*"]
  - display_name: off
    key_hash: {disabled}
    allowed_models: ["*"]
    disabled: true
  - display_name: old
    key_hash: {expired}
    allowed_models: ["*"]
    expires_at: "2001-01-01T00:00:00Z"
"#,
        local_only = sha256_hex(LOCAL_ONLY_KEY),
        disabled = sha256_hex(DISABLED_KEY),
        expired = sha256_hex(EXPIRED_KEY),
    )
}

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(resources(&mock.base_url()))
        .env("TEAM_KEY", TEAM_KEY)
        .proxy("  request_body_limit_bytes: 4096\n")
        .extra("upstream:\n  stream_idle_timeout_ms: 1500\ndownstream:\n  sse_keepalive_interval_secs: 0\n")
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn post(gateway: &Gateway, path: &str, key: Option<&str>, body: &str) -> Reply {
    let auth = key.map(bearer);
    let mut headers = vec![];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    client::send(
        gateway.addr(),
        client::request("POST", path, &headers, Some(body)),
    )
    .await
}

async fn chat(gateway: &Gateway, key: &str, body: Value) -> Reply {
    post(
        gateway,
        "/v1/chat/completions",
        Some(key),
        &body.to_string(),
    )
    .await
}

fn assert_openai_error(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    let body = reply.json();
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert!(
        reply.header("x-request-id").is_some(),
        "errors carry x-request-id too"
    );
}

/// SSE events of a complete body, blank-line separated.
fn sse_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn data_json(event: &str) -> Option<Value> {
    event
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .and_then(|d| serde_json::from_str(d).ok())
}

both_modes! {
    async fn the_overhead_header_leaves_out_a_slow_upload(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let addr = gateway.addr();
        let response = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let body = r#"{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}"#;
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            let head = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {TEAM_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            // The client pauses between its head and its body: the upload is its own time.
            std::thread::sleep(Duration::from_secs(1));
            stream.write_all(body.as_bytes()).unwrap();
            client::read_response(&mut stream)
        })
        .await
        .unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let overhead: u64 = response
            .lines()
            .find_map(|l| l.strip_prefix("x-aisix-overhead-us: "))
            .expect("an x-aisix-overhead-us header")
            .trim()
            .parse()
            .unwrap();
        assert!(overhead < 500_000, "the 1 s upload counted as overhead: {overhead} µs");
    }
}

both_modes! {
    async fn chat_is_relayed_with_the_upstream_model_and_provider_key(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let reply = client::send(
            gateway.addr(),
            client::request(
                "POST",
                "/v1/chat/completions",
                &[("authorization", &bearer(TEAM_KEY)), ("x-api-key", TEAM_KEY), ("x-client-secret", "nope"), ("x-request-id", "trace-abc-1")],
                Some(r#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-x","temperature":0.25}"#),
            ),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], aisix_e2e::mock::openai::REPLY_TEXT);
        assert_eq!(reply.header("x-request-id"), Some("trace-abc-1"));
        assert!(reply.header("x-aisix-overhead-us").unwrap().parse::<u64>().is_ok());

        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/v1/chat/completions");
        assert_eq!(seen.body_json().unwrap()["model"], "upstream-x");
        // Unknown fields pass byte for byte; only the model value changed.
        assert_eq!(
            String::from_utf8_lossy(&seen.body),
            r#"{"messages":[{"role":"user","content":"hi"}],"model":"upstream-x","temperature":0.25}"#
        );
        assert_eq!(seen.header("authorization"), Some(format!("Bearer {PROVIDER_KEY}").as_str()));
        assert_eq!(seen.header("x-api-key"), None);
        assert_eq!(seen.header("x-client-secret"), None);
        assert_eq!(seen.header("x-request-id"), Some("trace-abc-1"));
        let all_headers = format!("{:?}", seen.headers);
        assert!(!all_headers.contains(TEAM_KEY), "client key leaked upstream: {all_headers}");
    }
}

both_modes! {
    async fn streaming_chat_relays_frames_and_hides_the_usage_chunk_unless_asked(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-x", "stream": true, "messages": []})).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        assert_eq!(reply.header("cache-control"), Some("no-cache"));
        assert_eq!(reply.header("x-accel-buffering"), Some("no"));
        let upstream_body = mock.last_request().unwrap().body_json().unwrap();
        assert_eq!(upstream_body["stream_options"]["include_usage"], true, "usage is always asked upstream");
        let events = sse_events(&reply.text());
        assert_eq!(events.last().unwrap(), "data: [DONE]");
        let chunks: Vec<Value> = events.iter().filter_map(|e| data_json(e)).collect();
        assert!(chunks.iter().all(|c| !c["choices"].as_array().unwrap().is_empty()), "usage-only chunk must be dropped");
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text, aisix_e2e::mock::openai::REPLY_TEXT);

        let reply = chat(
            &gateway,
            TEAM_KEY,
            json!({"model": "gpt-x", "stream": true, "stream_options": {"include_usage": true}, "messages": []}),
        )
        .await;
        let events = sse_events(&reply.text());
        assert_eq!(events.last().unwrap(), "data: [DONE]");
        let usage_chunk = data_json(&events[events.len() - 2]).unwrap();
        assert_eq!(usage_chunk["choices"], json!([]));
        assert!(usage_chunk["usage"]["total_tokens"].as_u64().unwrap() > 0);
    }
}

both_modes! {
    async fn streams_are_flushed_event_by_event(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        mock.enqueue(Mock::sse([
            Frame::chat_delta("upstream-x", "first"),
            Frame::chat_delta("upstream-x", "second").after(Duration::from_millis(400)),
        ]));
        let response = client::send_streaming(
            gateway.addr(),
            client::request("POST", "/v1/chat/completions", &[("authorization", &bearer(TEAM_KEY))], Some(r#"{"model":"gpt-x","stream":true}"#)),
        )
        .await;
        let mut body = response.into_body();
        // The first event arrives on its own, while the upstream still holds the second.
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let first = String::from_utf8_lossy(&first).into_owned();
        assert!(first.contains("first") && !first.contains("second"), "{first}");
        let rest = body.collect().await.unwrap().to_bytes();
        let rest = String::from_utf8_lossy(&rest);
        assert!(rest.contains("second") && rest.ends_with("data: [DONE]\n\n"), "{rest}");
    }
}

both_modes! {
    async fn completions_and_embeddings_and_models_work(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        let reply = post(&gateway, "/v1/completions", Some(TEAM_KEY), r#"{"model":"gpt-x","prompt":"say hi"}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["object"], "text_completion");
        assert_eq!(mock.last_request().unwrap().path, "/v1/completions");

        let reply = post(&gateway, "/v1/completions", Some(TEAM_KEY), r#"{"model":"gpt-x","prompt":"say hi","stream":true}"#).await;
        assert!(reply.text().ends_with("data: [DONE]\n\n"), "{}", reply.text());

        let reply = post(&gateway, "/v1/embeddings", Some(TEAM_KEY), r#"{"model":"gpt-x","input":["a","b"]}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["data"].as_array().unwrap().len(), 2);
        let seen = mock.last_request().unwrap().body_json().unwrap();
        assert_eq!(seen["model"], "upstream-x");
        assert!(seen.get("stream_options").is_none());

        // The built-in mock provider answers every endpoint offline.
        for (path, body) in [
            ("/v1/chat/completions", r#"{"model":"local-demo","messages":[{"role":"user","content":"x"}]}"#),
            ("/v1/completions", r#"{"model":"local-demo","prompt":"x"}"#),
            ("/v1/embeddings", r#"{"model":"local-demo","input":"x"}"#),
        ] {
            let reply = post(&gateway, path, Some(LOCAL_ONLY_KEY), body).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.text());
            assert!(reply.json()["usage"]["total_tokens"].as_u64().unwrap() > 0, "{path}");
        }

        // An `x-api-key` marks an Anthropic client, which gets Anthropic's list (tests/fidelity.rs).
        let models = client::send(gateway.addr(), client::request("GET", "/v1/models", &[("authorization", &bearer(LOCAL_ONLY_KEY))], None)).await;
        assert_eq!(models.status, 200);
        assert_eq!(models.json(), json!({"object": "list", "data": [{"id": "local-demo", "object": "model", "created": 0, "owned_by": "mock"}]}));
        let models = client::send(gateway.addr(), client::request("GET", "/v1/models", &[("authorization", &bearer(TEAM_KEY))], None)).await;
        let ids: Vec<String> = models.json()["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(ids, ["gpt-x", "gpt-slow", "gpt-dead", "local-demo"]);
        let one = client::send(gateway.addr(), client::request("GET", "/v1/models/gpt-x", &[("authorization", &bearer(TEAM_KEY))], None)).await;
        assert_eq!(one.json()["id"], "gpt-x");
        let hidden = client::send(gateway.addr(), client::request("GET", "/v1/models/gpt-x", &[("authorization", &bearer(LOCAL_ONLY_KEY))], None)).await;
        assert_openai_error(&hidden, 404, "model_not_found");
    }
}

both_modes! {
    async fn authentication_failures_are_401_before_the_body_is_read(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let broken_json = "{not json";
        for key in [None, Some("sk-unknown"), Some(DISABLED_KEY), Some(EXPIRED_KEY)] {
            let reply = post(&gateway, "/v1/chat/completions", key, broken_json).await;
            assert_openai_error(&reply, 401, "invalid_api_key");
            assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
            let text = reply.text();
            for secret in [DISABLED_KEY, EXPIRED_KEY, "sk-unknown", PROVIDER_KEY] {
                assert!(!text.contains(secret), "{text}");
            }
        }
        let models = client::get(gateway.addr(), "/v1/models").await;
        assert_openai_error(&models, 401, "invalid_api_key");
        assert_eq!(mock.request_count(), 0);
    }
}

both_modes! {
    async fn request_errors_have_their_status_and_envelope(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        let reply = chat(&gateway, LOCAL_ONLY_KEY, json!({"model": "gpt-x", "messages": []})).await;
        // A model the key may not use is answered as an unknown one (issue 15).
        assert_openai_error(&reply, 404, "model_not_found");
        let reply = chat(&gateway, TEAM_KEY, json!({"model": "no-such-model", "messages": []})).await;
        assert_openai_error(&reply, 404, "model_not_found");
        assert_eq!(reply.json()["error"]["param"], "model");
        let reply = post(&gateway, "/v1/chat/completions", Some(TEAM_KEY), "{not json").await;
        assert_openai_error(&reply, 400, "invalid_json");
        let reply = chat(&gateway, TEAM_KEY, json!({"messages": []})).await;
        assert_openai_error(&reply, 400, "invalid_request");
        assert_eq!(reply.json()["error"]["param"], "model");
        let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-x", "stream": "yes"})).await;
        assert_openai_error(&reply, 400, "invalid_request");

        // Over the 4096-byte limit: refused from Content-Length, and while reading a chunked body.
        let big = json!({"model": "gpt-x", "messages": [{"role": "user", "content": "x".repeat(5000)}]}).to_string();
        let reply = post(&gateway, "/v1/chat/completions", Some(TEAM_KEY), &big).await;
        assert_openai_error(&reply, 413, "request_too_large");
        let chunked = chunked_post(gateway.addr(), &big).await;
        assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");

        let reply = client::get(gateway.addr(), "/v1/chat/completions").await;
        assert_openai_error(&reply, 405, "method_not_allowed");
        let reply = post(&gateway, "/v1/nothing", Some(TEAM_KEY), "{}").await;
        assert_openai_error(&reply, 404, "unknown_url");
        assert_eq!(mock.request_count(), 0, "no bad request reached the upstream");
    }
}

/// POSTs `body` with `Transfer-Encoding: chunked` (no Content-Length) and returns the raw reply.
async fn chunked_post(addr: std::net::SocketAddr, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TEAM_KEY}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for piece in body.as_bytes().chunks(1000) {
        let chunk = format!("{:x}\r\n", piece.len());
        // The gateway may answer 413 and close before the whole body is sent.
        if stream.write_all(chunk.as_bytes()).await.is_err()
            || stream.write_all(piece).await.is_err()
            || stream.write_all(b"\r\n").await.is_err()
        {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

both_modes! {
    async fn upstream_failures_map_to_502_504_and_pass_through_4xx(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let upstream_host = mock.addr().to_string();
        let body = json!({"model": "gpt-x", "messages": []});

        mock.enqueue(Mock::status(500).json(json!({"error": {"message": "secret-upstream-detail at 10.0.0.7"}})));
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_openai_error(&reply, 502, "upstream_error");
        assert!(!reply.text().contains("secret-upstream-detail") && !reply.text().contains(&upstream_host), "{}", reply.text());

        mock.enqueue(Mock::status(503).header("retry-after", "7").body("overloaded"));
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_openai_error(&reply, 502, "upstream_error");
        assert_eq!(reply.header("retry-after"), Some("7"));

        mock.enqueue(Mock::openai_error(429, "rate_limit_exceeded", "slow down").header("retry-after", "3"));
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_eq!(reply.status, 429);
        assert_eq!(reply.header("retry-after"), Some("3"));
        assert_eq!(reply.json()["error"]["message"], "slow down");

        mock.enqueue(Mock::openai_error(400, "invalid_request_error", &format!("context too long for key {PROVIDER_KEY}")));
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_eq!(reply.status, 400);
        assert!(reply.json()["error"]["message"].as_str().unwrap().starts_with("context too long"));
        assert!(!reply.text().contains(PROVIDER_KEY), "{}", reply.text());

        mock.enqueue(Mock::openai_error(401, "invalid_request_error", "Incorrect API key provided: sk-pro***XYZ"));
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_eq!(reply.status, 401);
        assert!(!reply.text().contains("sk-pro"), "{}", reply.text());

        mock.enqueue(Mock::close());
        let reply = chat(&gateway, TEAM_KEY, body.clone()).await;
        assert_openai_error(&reply, 502, "upstream_unavailable");

        let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-dead", "messages": []})).await;
        assert_openai_error(&reply, 502, "upstream_unavailable");
        assert!(!reply.text().contains("127.0.0.1:1"), "{}", reply.text());

        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(3)));
        let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-slow", "messages": []})).await;
        assert_openai_error(&reply, 504, "upstream_timeout");

        let logs = gateway.logs();
        for secret in [TEAM_KEY, PROVIDER_KEY] {
            assert!(!logs.contains(secret), "secret in logs:\n{logs}");
        }
    }
}

both_modes! {
    async fn a_stream_cut_mid_way_ends_with_an_error_event_and_no_done(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let request = json!({"model": "gpt-x", "stream": true, "messages": []});

        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "partial")]).disconnect());
        let reply = chat(&gateway, TEAM_KEY, request.clone()).await;
        assert_eq!(reply.status, 200);
        let text = reply.text();
        assert!(text.contains("partial"), "{text}");
        assert!(!text.contains("[DONE]"), "{text}");
        let last = sse_events(&text).pop().unwrap();
        assert!(last.starts_with("event: error\n"), "{last}");
        assert_eq!(data_json(&last).unwrap()["error"]["code"], "stream_cut");

        // An upstream that ends its body without [DONE] is cut too.
        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "x")]).without_done());
        let text = chat(&gateway, TEAM_KEY, request.clone()).await.text();
        assert!(!text.contains("[DONE]") && text.contains("event: error"), "{text}");

        // An upstream that goes silent past stream_idle_timeout_ms (1.5s) is cut with a timeout.
        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "x")]).hang());
        let text = chat(&gateway, TEAM_KEY, request).await.text();
        let last = sse_events(&text).pop().unwrap();
        assert_eq!(data_json(&last).unwrap()["error"]["code"], "stream_timeout", "{text}");
        assert!(!text.contains("[DONE]"));
    }
}

both_modes! {
    async fn a_client_that_leaves_cancels_the_upstream_request(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "first")]).hang());
        let response = client::send_streaming(
            gateway.addr(),
            client::request("POST", "/v1/chat/completions", &[("authorization", &bearer(TEAM_KEY))], Some(r#"{"model":"gpt-x","stream":true}"#)),
        )
        .await;
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        drop(body);
        assert!(
            mock.wait_until_async(Duration::from_secs(10), |m| m.streams_cancelled() == 1).await,
            "the upstream stream was not cancelled"
        );
    }
}

both_modes! {
    async fn sequential_requests_reuse_upstream_connections(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock).workers(Some(1)));
        for _ in 0..40 {
            let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-x", "messages": []})).await;
            assert_eq!(reply.status, 200);
        }
        assert_eq!(mock.request_count(), 40);
        assert_eq!(mock.connections_accepted(), 1, "one worker, sequential requests: one pooled connection");
    }
}

both_modes! {
    async fn waves_of_512_concurrent_requests_reuse_upstream_connections(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock).workers(Some(2)));
        let addr = gateway.addr();
        let wave = || async {
            let tasks: Vec<_> = (0..512)
                .map(|_| {
                    tokio::spawn(async move {
                        client::send(
                            addr,
                            client::request("POST", "/v1/chat/completions", &[("authorization", &bearer(TEAM_KEY))], Some(r#"{"model":"gpt-x","messages":[]}"#)),
                        )
                        .await
                        .status
                    })
                })
                .collect();
            for task in tasks {
                assert_eq!(task.await.unwrap(), 200);
            }
        };
        // Hold every upstream response briefly so a wave really is 512 requests in flight.
        mock.set_default(Mock::openai().delay_head(Duration::from_millis(200)));
        wave().await;
        let after_first = mock.connections_accepted();
        assert!(after_first <= 512 + 8, "first wave opened {after_first} connections");
        for _ in 0..3 {
            wave().await;
        }
        // Churn is connections opened and closed per request. A worker's pool may still grow
        // when the kernel hands it more of a wave than before, but nothing is closed.
        let accepted = mock.connections_accepted();
        let closed = mock.connections_closed();
        assert!(closed <= 8, "the gateway closed {closed} upstream connections: the pool churns");
        assert!(
            accepted - after_first <= 128,
            "later waves opened {} new upstream connections for {} requests (first wave: {after_first})",
            accepted - after_first,
            3 * 512
        );
        assert_eq!(mock.request_count(), 4 * 512);
    }
}

both_modes! {
    async fn a_quiet_upstream_is_bridged_with_sse_keepalive_comments(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(resources(&mock.base_url()))
                .env("TEAM_KEY", TEAM_KEY)
                .extra("upstream:\n  stream_idle_timeout_ms: 10000\ndownstream:\n  sse_keepalive_interval_secs: 1\n"),
        );
        mock.enqueue(Mock::sse([
            Frame::chat_delta("upstream-x", "before"),
            Frame::chat_delta("upstream-x", "after").after(Duration::from_millis(2600)),
        ]));
        let reply = chat(&gateway, TEAM_KEY, json!({"model": "gpt-x", "stream": true, "messages": []})).await;
        let text = reply.text();
        let before = text.find("before").unwrap();
        let after = text.find("after").unwrap();
        let comments = text[before..after].matches(": keep-alive\n\n").count();
        assert!(comments >= 1, "no keep-alive comment while the upstream was silent:\n{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }
}

both_modes! {
    async fn connections_the_upstream_closes_are_not_reused(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock).workers(Some(1)));
        let body = json!({"model": "gpt-x", "messages": []});
        mock.enqueue(Mock::openai().header("connection", "close"));
        assert_eq!(chat(&gateway, TEAM_KEY, body.clone()).await.status, 200);
        assert!(mock.wait_for_connections_closed(1, Duration::from_secs(5)));
        for _ in 0..3 {
            assert_eq!(chat(&gateway, TEAM_KEY, body.clone()).await.status, 200);
        }
        assert_eq!(mock.connections_accepted(), 2, "one closed by the upstream, one reused");
    }
}

both_modes! {
    async fn idle_upstream_connections_are_closed_by_the_pool_timer(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &config(mode, &mock).workers(Some(1)).env("AISIX_UPSTREAM__POOL_IDLE_TIMEOUT_SECS", "1"),
        );
        assert_eq!(chat(&gateway, TEAM_KEY, json!({"model": "gpt-x", "messages": []})).await.status, 200);
        assert_eq!(mock.connections_closed(), 0);
        assert!(
            mock.wait_until_async(Duration::from_secs(10), |m| m.connections_closed() == 1).await,
            "the idle upstream connection was not closed"
        );
    }
}
