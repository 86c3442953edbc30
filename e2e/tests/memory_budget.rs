//! The worker's memory budget (`proxy.max_buffered_bytes_per_worker`), in both serving modes: a
//! request whose body would take the worker past it waits for room within its own body
//! deadline, then gets 503 `gateway_overloaded` with `Retry-After`; once the room is given back
//! the next request is served. Whole upstream answers held to translate are charged too, and
//! one without room is refused the same way, in the client's envelope.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
        .resources(resources::openai(
            &mock.base_url(),
            &[("gpt-x", "up-x")],
            "BUDGET_KEY",
        ))
        .env("BUDGET_KEY", KEY)
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

/// A gateway translating both ways under a 1 MiB budget: `claude` is an Anthropic model for
/// OpenAI clients, `gpt` an OpenAI model for Anthropic clients.
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
        .proxy("  max_buffered_bytes_per_worker: 1048576\n  request_body_limit_bytes: 1048576\n")
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
    async fn held_answers_past_the_worker_budget_are_refused_and_the_rest_served(mode: Mode) {
        let claude = MockProvider::start_anthropic();
        let gpt = MockProvider::start();
        let gateway = Gateway::start(&translating(mode, &claude, &gpt));
        let addr = gateway.addr();
        // Four 400 KiB answers held at once would take 1.6 MiB of the 1 MiB budget: each arrives
        // but for its last bytes, which come 2 s later, so at most two fit at a time.
        let text = "z".repeat(400 * 1024);
        let pause = Duration::from_secs(2);

        let message = anthropic::message_body("msg_big", "claude-up", json!([{"type": "text", "text": text}]),
            "end_turn", None, json!({"input_tokens": 1, "output_tokens": 1})).to_string();
        for _ in 0..4 {
            claude.enqueue(slow_answer(&message, pause));
        }
        let chat = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let statuses = at_once(addr, 4, |i| client::chat_request(KEY, &format!("chat-{i}"), &chat),
            |error| error["error"]["code"] == "gateway_overloaded").await;
        assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");

        // The other way round: an Anthropic client's answers from an OpenAI model.
        let completion = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).to_string();
        for _ in 0..4 {
            gpt.enqueue(slow_answer(&completion, pause));
        }
        let messages = json!({"model": "gpt", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let statuses = at_once(addr, 4, |_| client::request("POST", "/v1/messages",
            &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], Some(&messages)),
            |error| error["type"] == "error" && error["error"]["type"] == "overloaded_error").await;
        assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");

        // The room was given back: the next answer, held or relayed, is served.
        claude.enqueue(Mock::status(200).json(serde_json::from_str(&message).unwrap()));
        let after = client::send(addr, client::chat_request(KEY, "after", &chat)).await;
        assert_eq!(after.status, 200, "{}", after.text());
        assert_eq!(after.json()["choices"][0]["message"]["content"].as_str().map(str::len), Some(text.len()));
    }
}
