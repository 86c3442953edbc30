//! The rig the limit tests share: one scriptable mock provider behind the direct model `chat`,
//! the API key `team`, the limits a test declares on each, and the gateway in front, whose
//! limiter clock the test moves with the `test-hooks` build's `/__aisix/test/advance-clock`.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::client;
use crate::gateway::{Gateway, GatewayConfig, Mode};
use crate::mock::{MockProvider, Reply as Mock};

pub const KEY: &str = "sk-limits-test-1";

/// Limits on the model `chat` and on the key `team`, as YAML flow mappings of their fields
/// (`"rate_limit: {rpm: 5}"`); empty for none.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub model: String,
    pub key: String,
}

/// The resources file: `chat` on the mock at `base`, the key `team`.
pub fn resources(base: &str, limits: &Limits) -> String {
    let field = |text: &str| {
        if text.is_empty() {
            String::new()
        } else {
            format!(", {text}")
        }
    };
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p, provider: openai, api_key: sk-p-secret, api_base: "{base}"}}
models:
  - {{display_name: chat, provider: openai, model_name: up-chat, provider_key: p{}}}
api_keys:
  - {{display_name: team, key_env: LIMITS_KEY, allowed_models: ["*"]{}}}
"#,
        field(&limits.model),
        field(&limits.key),
    )
}

/// A gateway in front of one mock.
pub struct Rig {
    pub mock: MockProvider,
    pub gateway: Gateway,
}

impl Rig {
    /// The mock and a gateway with `limits`, `extra` bootstrap YAML appended.
    pub fn start(mode: Mode, limits: &Limits, extra: &str) -> Rig {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&Rig::config(mode, &mock, limits, extra));
        Rig { mock, gateway }
    }

    pub fn config(mode: Mode, mock: &MockProvider, limits: &Limits, extra: &str) -> GatewayConfig {
        GatewayConfig::new(mode)
            .resources(resources(&mock.base_url(), limits))
            .env("LIMITS_KEY", KEY)
            .metrics()
            .extra("downstream:\n  sse_keepalive_interval_secs: 1\n")
            .extra(extra)
    }

    /// The metrics page now.
    pub async fn scrape(&self) -> String {
        let addr = self.gateway.metrics_addr.expect("metrics enabled");
        client::get(addr, "/metrics").await.text()
    }
}

/// The body of a chat request to `chat` asking for at most `max_tokens`.
pub fn chat_body(max_tokens: u64, stream: bool) -> String {
    json!({
        "model": "chat",
        "stream": stream,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say hello to the world"}],
    })
    .to_string()
}

/// The limiter's token estimate of a request with this body: a quarter of its bytes, rounded
/// up, plus its `max_tokens`.
pub fn estimate(body: &str, max_tokens: u64) -> u64 {
    (body.len() as u64).div_ceil(4) + max_tokens
}

/// Sends `body` to `/v1/chat/completions` on `gateway` as the key `team`.
pub async fn chat(gateway: &Gateway, body: &str) -> client::Reply {
    client::send(gateway.addr(), chat_request(body)).await
}

pub fn chat_request(body: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(body),
    )
}

/// A complete chat answer that reports this usage.
pub fn answer(prompt_tokens: u64, completion_tokens: u64) -> Mock {
    Mock::status(200).json(json!({
        "id": "chatcmpl-limits",
        "object": "chat.completion",
        "created": 1,
        "model": "up-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
}

/// Moves each gateway's limiter clock (all at the same offset so far) to `into` milliseconds
/// after the start of the next window of `window_ms`, so a test runs well inside one window.
/// Returns the offset now applied.
pub async fn align(gateways: &[&Gateway], offset_ms: u64, window_ms: u64, into: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        + offset_ms;
    let by = window_ms - now % window_ms + into;
    for gateway in gateways {
        advance(gateway, Duration::from_millis(by)).await;
    }
    offset_ms + by
}

/// Moves the gateway's limiter clock forward by `by`.
pub async fn advance(gateway: &Gateway, by: Duration) {
    let path = format!("/__aisix/test/advance-clock?ms={}", by.as_millis());
    let reply = client::send(gateway.addr(), client::request("POST", &path, &[], None)).await;
    assert_eq!(reply.status, 204, "advance the clock: {}", reply.text());
}

/// A header of `reply` as a number.
pub fn number(reply: &client::Reply, name: &str) -> u64 {
    reply
        .header(name)
        .unwrap_or_else(|| panic!("no {name} on {} {}", reply.status, reply.text()))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// The `error.code` of an error reply.
pub fn code(reply: &client::Reply) -> Value {
    reply.json()["error"]["code"].clone()
}

/// Sends `n` copies of `body` at once; the replies in the order they finished.
pub async fn burst(gateway: &Gateway, body: &str, n: usize) -> Vec<client::Reply> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (addr, request) = (gateway.addr(), chat_request(body));
        set.spawn(async move { client::send(addr, request).await });
    }
    let mut replies = Vec::with_capacity(n);
    while let Some(reply) = set.join_next().await {
        replies.push(reply.expect("request task"));
    }
    replies
}

/// What the model's `tpm` window has counted so far, read from a probe the limit must refuse
/// (it asks for more than the whole limit, so it is refused while anything is counted, and a
/// refusal counts nothing).
pub async fn tokens_counted(gateway: &Gateway, tpm: u64) -> u64 {
    let reply = chat(gateway, &chat_body(tpm * 10, false)).await;
    assert_eq!(
        reply.status,
        429,
        "the probe was admitted: {}",
        reply.text()
    );
    tpm - number(&reply, "x-ratelimit-remaining-tokens")
}

/// Reads the streamed `response` until `n` content deltas (`"content":"x…"`) have arrived.
pub async fn read_deltas(response: &mut http::Response<hyper::body::Incoming>, n: usize) {
    use http_body_util::BodyExt;
    let mut text = String::new();
    while text.matches("\"content\":\"x").count() < n {
        let frame = tokio::time::timeout(Duration::from_secs(10), response.body_mut().frame())
            .await
            .expect("the stream sends its deltas")
            .expect("the stream is open")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
}
