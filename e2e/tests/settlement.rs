//! Every ending settled by one rule (README, "Settlement"), in both serving modes and with both
//! limit backends (memory, and a real `redis-server`): after each request the key's token
//! window holds exactly what the rule charges, the key's budget holds exactly what
//! `aisix_spend_usd_total` rose by, and the key's one concurrency slot is free again.
//!
//! Each ending runs in a window of its own (the limiter clock moves a minute), followed by an
//! anchor request of known usage, so that the probes that read the counts (requests the limits
//! must refuse, which count nothing) are always refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::limits::{advance, align, answer, number, read_deltas};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;
use aisix_e2e::third_party::redis::Redis;
use http_body_util::BodyExt;
use serde_json::json;

const KEY: &str = "sk-settlement-test-1";
const MINUTE: u64 = 60_000;
const DAY: u64 = 86_400_000;
const TPM: u64 = 10_000_000;
const MAX_TOKENS: u64 = 16;

/// Micro-dollars per input and per output token of `chat` ($0.001 and $0.002 per 1k), and of
/// `chat2` (three times dearer), so that every charge is whole micro-dollars. The key's budget
/// is $1 a day, far above what the endings spend.
const CHAT: (u64, u64) = (1, 2);
const CHAT2: (u64, u64) = (3, 6);

fn resources(base: &str, dead: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p, provider: openai, api_key: sk-p-secret, api_base: "{base}"}}
  - {{display_name: gone, provider: openai, api_key: sk-gone-secret, api_base: "{dead}"}}
  - {{display_name: billing, provider: openai, api_key: sk-billing-secret, api_base: "{base}", bill_prompt_on_error: true}}
models:
  - {{display_name: chat, provider: openai, model_name: up-chat, provider_key: p, cost: {{input_per_1k: 0.001, output_per_1k: 0.002}}}}
  - {{display_name: chat2, provider: openai, model_name: up-chat2, provider_key: p, cost: {{input_per_1k: 0.003, output_per_1k: 0.006}}}}
  - {{display_name: billed, provider: openai, model_name: up-billed, provider_key: billing, cost: {{input_per_1k: 0.001, output_per_1k: 0.002}}}}
  - {{display_name: dead, provider: openai, model_name: up-dead, provider_key: gone, cost: {{input_per_1k: 0.001, output_per_1k: 0.002}}}}
  - display_name: both
    routing:
      targets:
        - {{model: chat, priority: 1}}
        - {{model: chat2}}
api_keys:
  - {{display_name: team, key_env: SETTLEMENT_KEY, allowed_models: ["*"], rate_limit: {{tpm: {TPM}, concurrency: 1}}, budget: {{usd: 1, period: day}}}}
"#
    )
}

/// A port nothing listens on: bound, then closed.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

struct Rig {
    mock: MockProvider,
    gateway: Gateway,
    _redis: Option<Redis>,
}

impl Rig {
    fn start(mode: Mode, redis: bool) -> Rig {
        let mock = MockProvider::start();
        let redis = redis.then(Redis::start);
        let mut config = GatewayConfig::new(mode)
            .resources(resources(&mock.base_url(), &closed_port_url()))
            .env("SETTLEMENT_KEY", KEY)
            .metrics()
            .extra(
                "downstream:\n  sse_keepalive_interval_secs: 0\nupstream:\n  first_token_timeout_ms: 800\n  stream_idle_timeout_ms: 800\n  cooldown_ms: 1\n",
            );
        if let Some(redis) = &redis {
            config = config.extra(&format!(
                "ratelimit:\n  backend: redis\n  redis:\n    url: \"{}\"\n    on_error: deny\n",
                redis.url()
            ));
        }
        let gateway = Gateway::start(&config);
        Rig {
            mock,
            gateway,
            _redis: redis,
        }
    }

    async fn post(&self, path: &str, body: &str) -> client::Reply {
        client::send(self.gateway.addr(), request(path, body)).await
    }

    /// What the key's token window holds, read from a request asking for ten times the whole
    /// limit (refused while anything is counted; a refusal counts nothing).
    async fn tokens(&self) -> u64 {
        let reply = self
            .post("/v1/chat/completions", &chat_body("chat", TPM * 10, false))
            .await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        TPM - number(&reply, "x-ratelimit-remaining-tokens")
    }

    /// What the key's budget holds today, in micro-dollars, read from a request whose spend
    /// estimate is past the whole budget but whose tokens fit the window; `None` while the
    /// concurrency slot is still taken (its release may trail the answer).
    async fn budget_micros(&self) -> Option<u64> {
        let reply = self
            .post("/v1/chat/completions", &chat_body("chat", 600_000, false))
            .await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        if is_concurrency_refusal(&reply) {
            return None;
        }
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        let spent = message
            .split_once(" spent of ")
            .and_then(|(before, _)| before.rsplit_once('$'))
            .map(|(_, amount)| amount.to_owned())
            .unwrap_or_else(|| panic!("no spend in {message}"));
        Some(usd_to_micros(&spent))
    }

    async fn spend_metric_micros(&self) -> u64 {
        let page = client::get(self.gateway.metrics_addr.unwrap(), "/metrics")
            .await
            .text();
        let models = ["chat", "chat2", "dead", "billed"];
        let usd: f64 = models
            .iter()
            .map(|m| sample_or_zero(&page, &[("api_key", "team"), ("model", m)]))
            .sum();
        (usd * 1e6).round() as u64
    }

    /// Sends the anchor (a whole answer of 7 + 3 tokens on `chat`) until the key's one
    /// concurrency slot admits it: the slot of the ending before must come back.
    async fn anchor(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        self.mock.enqueue(answer(7, 3));
        loop {
            let reply = self
                .post(
                    "/v1/chat/completions",
                    &chat_body("chat", MAX_TOKENS, false),
                )
                .await;
            if reply.status == 200 {
                return;
            }
            assert!(is_concurrency_refusal(&reply), "{}", reply.text());
            assert!(
                tokio::time::Instant::now() < deadline,
                "the concurrency slot never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn is_concurrency_refusal(reply: &client::Reply) -> bool {
    reply.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("Concurrency limit reached"))
}

fn sample_or_zero(page: &str, labels: &[(&str, &str)]) -> f64 {
    if page.lines().any(|line| {
        line.starts_with("aisix_spend_usd_total{")
            && labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
    }) {
        sample(page, "aisix_spend_usd_total", labels)
    } else {
        0.0
    }
}

fn usd_to_micros(amount: &str) -> u64 {
    let (whole, fraction) = amount.split_once('.').unwrap_or((amount, ""));
    let fraction = format!("{fraction:0<6}");
    whole.parse::<u64>().unwrap() * 1_000_000 + fraction[..6].parse::<u64>().unwrap()
}

fn request(path: &str, body: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        path,
        &[
            ("authorization", &format!("Bearer {KEY}")),
            ("anthropic-version", "2023-06-01"),
        ],
        Some(body),
    )
}

fn chat_body(model: &str, max_tokens: u64, stream: bool) -> String {
    json!({
        "model": model,
        "stream": stream,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say hello to the world"}],
    })
    .to_string()
}

fn prompt_estimate(body: &str) -> u64 {
    (body.len() as u64).div_ceil(4)
}

/// Tokens and what they cost at `prices` (micro-dollars per input and output token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charged {
    tokens: u64,
    micros: u64,
}

fn charged(input: u64, output: u64, prices: (u64, u64)) -> Charged {
    Charged {
        tokens: input + output,
        micros: input * prices.0 + output * prices.1,
    }
}

const NOTHING: Charged = Charged {
    tokens: 0,
    micros: 0,
};

/// The role chunk and `pieces` content deltas on `chat`.
fn deltas(pieces: usize) -> Vec<Frame> {
    let mut frames = vec![Frame::chat_role("up-chat")];
    frames.extend((0..pieces).map(|i| Frame::chat_delta("up-chat", &format!("x{i}"))));
    frames
}

/// A stream of `pieces` content deltas and a finish chunk that reports no usage.
fn stream_without_usage(pieces: usize) -> Mock {
    let mut frames = deltas(pieces);
    frames.push(Frame::chat_finish("up-chat", "stop"));
    Mock::sse(frames)
}

/// A stream that breaks off after `pieces` content deltas: `then` says how.
fn broken_stream(pieces: usize, then: fn(Mock) -> Mock) -> Mock {
    then(Mock::sse(deltas(pieces)).without_done())
}

/// Reads `response` to its end.
async fn read_to_end(response: http::Response<hyper::body::Incoming>) -> String {
    let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
        .await
        .expect("the stream ends")
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    String::from_utf8_lossy(&body).into_owned()
}

/// A unary request the upstream answers with `status` (an error of `kind`), which the client
/// gets as `relayed`: an error before any output, charged nothing.
async fn refused_upstream(rig: &Rig, status: u16, kind: &str, relayed: u16) -> Charged {
    rig.mock
        .enqueue(Mock::openai_error(status, kind, "refused"));
    let unary = chat_body("chat", MAX_TOKENS, false);
    let reply = rig.post("/v1/chat/completions", &unary).await;
    assert_eq!(reply.status, relayed, "{}", reply.text());
    NOTHING
}

/// Runs one ending and returns what the rule charges for it.
async fn ending(rig: &Rig, name: &str) -> Charged {
    let unary = chat_body("chat", MAX_TOKENS, false);
    let streamed = chat_body("chat", MAX_TOKENS, true);
    match name {
        "2xx unary with usage" => {
            rig.mock.enqueue(answer(11, 5));
            let reply = rig.post("/v1/chat/completions", &unary).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            charged(11, 5, CHAT)
        }
        "2xx unary without usage: the estimate" => {
            rig.mock.enqueue(Mock::status(200).json(json!({
                "id": "x", "object": "chat.completion", "created": 1, "model": "up-chat",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
            })));
            let reply = rig.post("/v1/chat/completions", &unary).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            charged(prompt_estimate(&unary), MAX_TOKENS, CHAT)
        }
        "2xx stream with usage" => {
            rig.mock
                .enqueue(Mock::chat_stream("up-chat", &["a", "b", "c"], 9));
            let response = client::send_streaming(
                rig.gateway.addr(),
                request("/v1/chat/completions", &streamed),
            )
            .await;
            assert_eq!(response.status(), 200);
            let text = read_to_end(response).await;
            assert!(text.contains("[DONE]"), "{text}");
            charged(9, 3, CHAT)
        }
        "2xx stream without usage: prompt estimate and output counted" => {
            rig.mock.enqueue(stream_without_usage(4));
            let response = client::send_streaming(
                rig.gateway.addr(),
                request("/v1/chat/completions", &streamed),
            )
            .await;
            assert_eq!(response.status(), 200);
            read_to_end(response).await;
            // One token per content chunk, the finish chunk (the model's stop token) too.
            charged(prompt_estimate(&streamed), 4 + 1, CHAT)
        }
        "upstream 400" => refused_upstream(rig, 400, "invalid_request_error", 400).await,
        "upstream 500" => refused_upstream(rig, 500, "server_error", 502).await,
        "upstream 429" => refused_upstream(rig, 429, "rate_limit_error", 429).await,
        "upstream 500 from a provider that bills prompts on errors: the prompt" => {
            rig.mock
                .enqueue(Mock::openai_error(500, "server_error", "refused"));
            let body = chat_body("billed", MAX_TOKENS, false);
            let reply = rig.post("/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 502, "{}", reply.text());
            charged(prompt_estimate(&body), 0, CHAT)
        }
        "connection refused" => {
            let reply = rig
                .post(
                    "/v1/chat/completions",
                    &chat_body("dead", MAX_TOKENS, false),
                )
                .await;
            assert_eq!(reply.status, 502, "{}", reply.text());
            NOTHING
        }
        "first-byte timeout" => {
            rig.mock.enqueue(Mock::silence());
            let reply = rig.post("/v1/chat/completions", &unary).await;
            assert_eq!(reply.status, 504, "{}", reply.text());
            NOTHING
        }
        "stream idle timeout after output" => {
            rig.mock.enqueue(broken_stream(2, Mock::hang));
            let response = client::send_streaming(
                rig.gateway.addr(),
                request("/v1/chat/completions", &streamed),
            )
            .await;
            assert_eq!(response.status(), 200);
            let text = read_to_end(response).await;
            assert!(!text.contains("[DONE]"), "{text}");
            charged(prompt_estimate(&streamed), 2, CHAT)
        }
        "stream cut by the upstream" => {
            rig.mock.enqueue(broken_stream(3, Mock::disconnect));
            let response = client::send_streaming(
                rig.gateway.addr(),
                request("/v1/chat/completions", &streamed),
            )
            .await;
            assert_eq!(response.status(), 200);
            let text = read_to_end(response).await;
            assert!(!text.contains("[DONE]"), "{text}");
            charged(prompt_estimate(&streamed), 3, CHAT)
        }
        "client left during a stream" => {
            rig.mock.enqueue(broken_stream(3, Mock::hang));
            let mut response = client::send_streaming(
                rig.gateway.addr(),
                request("/v1/chat/completions", &streamed),
            )
            .await;
            assert_eq!(response.status(), 200);
            read_deltas(&mut response, 3).await;
            drop(response);
            assert!(
                rig.mock.wait_for_stream_cancelled(Duration::from_secs(10)),
                "the upstream stream was cancelled"
            );
            charged(prompt_estimate(&streamed), 3, CHAT)
        }
        "client left during a unary answer" => {
            let abandoned = rig.mock.requests_abandoned();
            rig.mock
                .enqueue(answer(7, 3).delay_head(Duration::from_millis(600)));
            let sent = tokio::time::timeout(
                Duration::from_millis(200),
                client::send(rig.gateway.addr(), request("/v1/chat/completions", &unary)),
            )
            .await;
            assert!(sent.is_err(), "the client left before the answer");
            let cancelled = rig
                .mock
                .wait_until_async(Duration::from_secs(10), |m| {
                    m.requests_abandoned() > abandoned
                })
                .await;
            assert!(cancelled, "the upstream call was abandoned");
            charged(prompt_estimate(&unary), 0, CHAT)
        }
        "count_tokens translated: the chat call's usage" => {
            rig.mock.enqueue(answer(12, 1));
            let body =
                json!({"model": "chat", "messages": [{"role": "user", "content": "count me"}]})
                    .to_string();
            let reply = rig.post("/v1/messages/count_tokens", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["input_tokens"], 12);
            charged(12, 1, CHAT)
        }
        "group fallback: the answering target's usage at its own prices" => {
            rig.mock
                .enqueue(Mock::openai_error(500, "server_error", "boom"));
            rig.mock.enqueue(answer(7, 4));
            let reply = rig
                .post(
                    "/v1/chat/completions",
                    &chat_body("both", MAX_TOKENS, false),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            charged(7, 4, CHAT2)
        }
        other => panic!("no ending {other}"),
    }
}

const ENDINGS: &[&str] = &[
    "2xx unary with usage",
    "2xx unary without usage: the estimate",
    "2xx stream with usage",
    "2xx stream without usage: prompt estimate and output counted",
    "upstream 400",
    "upstream 500",
    "upstream 429",
    "upstream 500 from a provider that bills prompts on errors: the prompt",
    "connection refused",
    "first-byte timeout",
    "stream idle timeout after output",
    "stream cut by the upstream",
    "client left during a stream",
    "client left during a unary answer",
    "count_tokens translated: the chat call's usage",
    "group fallback: the answering target's usage at its own prices",
];

async fn every_ending(mode: Mode, redis: bool) {
    let rig = Rig::start(mode, redis);
    align(&[&rig.gateway], 0, DAY, 3_600_000).await;
    let anchor = charged(7, 3, CHAT);
    let mut budget = 0;
    for name in ENDINGS {
        advance(&rig.gateway, Duration::from_millis(MINUTE)).await;
        let expected = ending(&rig, name).await;
        rig.anchor().await;
        budget += expected.micros + anchor.micros;

        // Settling may finish just after the answer (a client that left, the Redis queue).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (tokens, spent, metric) = (
                rig.tokens().await,
                rig.budget_micros().await,
                rig.spend_metric_micros().await,
            );
            let want = (expected.tokens + anchor.tokens, Some(budget), budget);
            if (tokens, spent, metric) == want {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: (tokens, budget, spend metric) = {:?}, want {want:?}",
                (tokens, spent, metric)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

both_modes! {
    async fn every_ending_is_settled_by_one_rule_in_memory(mode: Mode) {
        every_ending(mode, false).await;
    }
}

both_modes! {
    async fn every_ending_is_settled_by_one_rule_in_redis(mode: Mode) {
        every_ending(mode, true).await;
    }
}

/// The estimate reserves `max_tokens` for each of the `n` choices asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_are_reserved_n_times() {
    let rig = Rig::start(Mode::ThreadPerCore, false);
    align(&[&rig.gateway], 0, MINUTE, 1_000).await;
    let body = json!({"model": "chat", "n": 3, "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
    rig.mock.enqueue(answer(7, 3));
    let reply = rig.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        number(&reply, "x-ratelimit-remaining-tokens"),
        TPM - prompt_estimate(&body) - 3 * 1000
    );
}

#[test]
fn usd_amounts_read_as_micro_dollars() {
    assert_eq!(usd_to_micros("0.001"), 1_000);
    assert_eq!(usd_to_micros("1"), 1_000_000);
    assert_eq!(usd_to_micros("0.000123"), 123);
}
