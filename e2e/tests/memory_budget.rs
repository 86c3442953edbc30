//! The worker's memory budget (`proxy.max_buffered_bytes_per_worker`), in both serving modes: a
//! request whose body would take the worker past it waits for room within its own body
//! deadline, then gets 503 `gateway_overloaded` with `Retry-After`; once the room is given back
//! the next request is served. A body is charged as it arrives, never from its declared length,
//! so idle uploads hold no room; one key holds at most its share
//! (`proxy.max_buffered_percent_per_key`) and other keys are served meanwhile. A whole upstream
//! answer held to translate has its room reserved before the upstream call: one without room is
//! refused before the provider is asked, never after it answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock, anthropic};
use aisix_e2e::resources;
use serde_json::json;

const KEY: &str = "sk-budget-test-1";

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .workers(Some(1))
        .openai(&mock.base_url(), &[("gpt-x", "up-x")], KEY)
        .proxy("  max_buffered_bytes_per_worker: 1048576\n  request_body_limit_bytes: 1048576\n")
        .extra("downstream:\n  request_body_timeout_secs: 1\n")
}

/// A chat request whose body is about `size` bytes.
fn request(size: usize, id: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let body = serde_json::json!({
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "x".repeat(size)}],
    })
    .to_string();
    client::chat_request(KEY, id, &body)
}

both_modes! {
    async fn a_request_past_the_worker_budget_waits_then_gets_503_with_retry_after(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let addr = gateway.addr();

        // The first request holds 700 KiB of the 1 MiB budget while its answer takes 4 s.
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(4)));
        let first = tokio::spawn(client::send(addr, request(700 * 1024, "holder")));
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);

        let refused = client::send(addr, request(700 * 1024, "refused")).await;
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert_eq!(refused.json()["error"]["code"], "gateway_overloaded");
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(mock.request_count(), 1, "the refused request never went upstream");

        assert_eq!(first.await.unwrap().status, 200);
        let after = client::send(addr, request(700 * 1024, "after")).await;
        assert_eq!(after.status, 200, "{}", after.text());
    }
}

/// Whether nothing came back on `stream` and it is still open.
fn silent_and_open(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let silent =
        matches!(stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    stream.set_nonblocking(false).unwrap();
    silent
}

both_modes! {
    async fn idle_uploads_declaring_the_body_limit_hold_no_room_and_a_request_is_served_meanwhile(mode: Mode) {
        let mock = MockProvider::start();
        // One worker with the default budget (256 MiB) and body limit (32 MiB).
        let gateway = Gateway::start(&GatewayConfig::new(mode)
            .workers(Some(1))
            .openai(&mock.base_url(), &[("gpt-x", "up-x")], KEY));
        let addr = gateway.addr();

        // Eight uploads declare 32 MiB each, 256 MiB in all, and send nothing more.
        let mut uploads: Vec<TcpStream> = (0..8)
            .map(|i| {
                let mut stream = TcpStream::connect(addr).unwrap();
                write!(stream, "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\nx-request-id: idle-{i}\r\ncontent-type: application/json\r\ncontent-length: 33554432\r\n\r\n").unwrap();
                stream
            })
            .collect();

        let normal = client::send(addr, request(60, "normal")).await;
        assert_eq!(normal.status, 200, "{}", normal.text());
        for upload in &mut uploads {
            assert!(silent_and_open(upload), "the idle uploads are still open and waiting");
        }
        drop(uploads);
        assert_eq!(mock.request_count(), 1);
    }
}

const OTHER_KEY: &str = "sk-budget-test-2";

both_modes! {
    async fn a_key_at_its_share_waits_while_another_key_is_served(mode: Mode) {
        let mock = MockProvider::start();
        // A 4 MiB budget: each key's share is 25 %, 1 MiB.
        let gateway = Gateway::start(&GatewayConfig::new(mode)
            .workers(Some(1))
            .resources(resources::openai(&mock.base_url(), &[("gpt-x", "up-x")], "BUDGET_KEY")
                + &resources::api_key("other", "OTHER_KEY", &["*"]))
            .env("BUDGET_KEY", KEY)
            .env("OTHER_KEY", OTHER_KEY)
            .proxy("  max_buffered_bytes_per_worker: 4194304\n  request_body_limit_bytes: 1048576\n  max_buffered_percent_per_key: 25\n")
            .extra("downstream:\n  request_body_timeout_secs: 1\n"));
        let addr = gateway.addr();

        // The first key holds 700 KiB of its 1 MiB share while its answer takes 6 s.
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(6)));
        let holder = tokio::spawn(client::send(addr, request(700 * 1024, "holder")));
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);

        // Its next requests find no room in its share, though the worker has 3 MiB free.
        let more: Vec<_> = (0..3)
            .map(|i| tokio::spawn(client::send(addr, request(700 * 1024, &format!("more-{i}")))))
            .collect();
        // The other key's are served meanwhile.
        for i in 0..3 {
            let body = json!({"model": "gpt-x", "messages": [{"role": "user", "content": "x".repeat(700 * 1024)}]}).to_string();
            let reply = client::send(addr, client::chat_request(OTHER_KEY, &format!("other-{i}"), &body)).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
        assert!(!holder.is_finished(), "served while the first key sat at its share");
        for refused in more {
            let refused = refused.await.unwrap();
            assert_eq!(refused.status, 503, "{}", refused.text());
            assert_eq!(refused.json()["error"]["code"], "gateway_overloaded");
            assert_eq!(refused.header("retry-after"), Some("1"));
        }
        assert_eq!(mock.request_count(), 4, "the refused requests never went upstream");
        assert_eq!(holder.await.unwrap().status, 200);
        let after = client::send(addr, request(700 * 1024, "after")).await;
        assert_eq!(after.status, 200, "{}", after.text());
    }
}

/// A gateway translating both ways under a 1 MiB budget, holding answers of at most 450 KiB
/// (two fit at once): `claude` is an Anthropic model for OpenAI clients, `gpt` an OpenAI model
/// for Anthropic clients.
fn translating(mode: Mode, claude: &MockProvider, gpt: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .workers(Some(1))
        .resources(format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: ant, provider: anthropic, api_key: sk-ant, api_base: "{}"}}
  - {{display_name: oai, provider: openai, api_key: sk-oai, api_base: "{}"}}
models:
  - {{display_name: claude, provider: anthropic, model_name: claude-up, provider_key: ant}}
  - {{display_name: gpt, provider: openai, model_name: gpt-up, provider_key: oai}}
api_keys:
  - {{display_name: k, key_env: BUDGET_KEY, allowed_models: ["*"]}}
"#,
            claude.origin(),
            gpt.base_url()
        ))
        .env("BUDGET_KEY", KEY)
        .proxy("  max_buffered_bytes_per_worker: 1048576\n  request_body_limit_bytes: 65536\n  max_buffered_percent_per_key: 100\n")
        .extra("downstream:\n  request_body_timeout_secs: 1\nupstream:\n  max_response_bytes: 460800\n")
}

/// A whole answer sent but for its last bytes, which follow `pause` later.
fn slow_answer(body: &str, pause: Duration) -> Mock {
    let (first, rest) = body.split_at(body.len() - 64);
    Mock::sse([
        Frame::raw(first.to_owned()),
        Frame::raw(rest.to_owned()).after(pause),
    ])
    .without_done()
}

/// Sends `count` copies of `request` at once; the statuses, and every refusal checked to be
/// `gateway_overloaded`'s 503 with `Retry-After` in the client's envelope.
async fn at_once(
    addr: std::net::SocketAddr,
    count: usize,
    request: impl Fn(usize) -> http::Request<http_body_util::Full<bytes::Bytes>>,
    refused_as: impl Fn(&serde_json::Value) -> bool,
) -> Vec<u16> {
    let sent: Vec<_> = (0..count)
        .map(|i| tokio::spawn(client::send(addr, request(i))))
        .collect();
    let mut statuses = Vec::new();
    for reply in sent {
        let reply = reply.await.unwrap();
        if reply.status == 503 {
            assert!(refused_as(&reply.json()), "{}", reply.text());
            assert_eq!(reply.header("retry-after"), Some("1"));
        } else {
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
        statuses.push(reply.status.as_u16());
    }
    statuses.sort_unstable();
    statuses
}

both_modes! {
    async fn held_answers_without_room_are_refused_before_the_upstream_is_asked(mode: Mode) {
        let claude = MockProvider::start_anthropic();
        let gpt = MockProvider::start();
        let gateway = Gateway::start(&translating(mode, &claude, &gpt));
        let addr = gateway.addr();
        // Room for two answers of up to 14000 tokens (450 KiB reserved each, the bound): four
        // asked at once, each answer arriving but for its last bytes, which come 2 s later.
        // Two wait for room past their 1 s body deadline.
        let text = "z".repeat(400 * 1024);
        let pause = Duration::from_secs(2);

        let message = anthropic::message_body("msg_big", "claude-up", json!([{"type": "text", "text": text}]),
            "end_turn", None, json!({"input_tokens": 1, "output_tokens": 1})).to_string();
        claude.set_default(slow_answer(&message, pause));
        let chat = json!({"model": "claude", "max_tokens": 14000, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let statuses = at_once(addr, 4, |i| client::chat_request(KEY, &format!("chat-{i}"), &chat),
            |error| error["error"]["code"] == "gateway_overloaded").await;
        assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");
        let served = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(claude.request_count(), served, "every refusal came before the upstream call: {statuses:?}");
        claude.clear_default();

        // The other way round: an Anthropic client's answers from an OpenAI model.
        let completion = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).to_string();
        gpt.set_default(slow_answer(&completion, pause));
        let messages = json!({"model": "gpt", "max_tokens": 14000, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let statuses = at_once(addr, 4, |_| client::request("POST", "/v1/messages",
            &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], Some(&messages)),
            |error| error["type"] == "error" && error["error"]["type"] == "overloaded_error").await;
        assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");
        let served = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(gpt.request_count(), served, "every refusal came before the upstream call: {statuses:?}");

        // The room was given back: the next answer, held or relayed, is served.
        claude.enqueue(Mock::status(200).json(serde_json::from_str(&message).unwrap()));
        let after = client::send(addr, client::chat_request(KEY, "after", &chat)).await;
        assert_eq!(after.status, 200, "{}", after.text());
        assert_eq!(after.json()["choices"][0]["message"]["content"].as_str().map(str::len), Some(text.len()));
    }
}

both_modes! {
    async fn a_held_answer_longer_than_its_request_expected_waits_for_room_and_is_served(mode: Mode) {
        let claude = MockProvider::start_anthropic();
        let gpt = MockProvider::start();
        let gateway = Gateway::start(&translating(mode, &claude, &gpt));
        let addr = gateway.addr();
        let text = "z".repeat(400 * 1024);

        // Two Anthropic clients' answers of up to 14000 tokens hold 900 KiB of the 1 MiB for 2 s.
        let completion = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).to_string();
        gpt.set_default(slow_answer(&completion, Duration::from_secs(2)));
        let messages = json!({"model": "gpt", "max_tokens": 14000, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let holders: Vec<_> = (0..2)
            .map(|_| tokio::spawn(client::send(addr, client::request("POST", "/v1/messages",
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], Some(&messages)))))
            .collect();
        assert!(gpt.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 2).await);

        // An answer to a 5-token request reserves little, then arrives at 400 KiB: it waits
        // for the room the others give back rather than being refused.
        let message = anthropic::message_body("msg_big", "claude-up", json!([{"type": "text", "text": text}]),
            "end_turn", None, json!({"input_tokens": 1, "output_tokens": 1})).to_string();
        claude.enqueue(Mock::status(200).json(serde_json::from_str(&message).unwrap()));
        let chat = json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let reply = client::send(addr, client::chat_request(KEY, "grows", &chat)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"].as_str().map(str::len), Some(text.len()));
        for holder in holders {
            let holder = holder.await.unwrap();
            assert_eq!(holder.status, 200, "{}", holder.text());
        }
        assert_eq!(claude.request_count(), 1);
    }
}
