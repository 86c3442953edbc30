//! The Responses API's state shared through a real Redis (Debian's `redis-server`), in both
//! serving modes: with `ratelimit.backend: redis`, two aisix processes continue each other's
//! `previous_response_id` chains, on a translated path (the stored conversation) and on a
//! native one (the id → provider key pin), and answer `GET`/`DELETE /v1/responses/{id}` for
//! responses the other one made; a request that uses no Responses state writes nothing there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::third_party::redis::Redis;
use serde_json::{Value, json};

const KEY: &str = "sk-responses-redis-1";

/// A gateway whose limiter (and so its Responses state) is in `redis`: `chat` on a chat-only
/// key at `chat_mock`, `on-a` and `on-b` on two Responses-serving keys, and `duo` over both.
fn gateway(
    mode: Mode,
    redis: &Redis,
    chat_mock: &MockProvider,
    a: &MockProvider,
    b: &MockProvider,
) -> Gateway {
    Gateway::start(
        &GatewayConfig::new(mode)
            .resources(format!(
                r#"_format_version: "1"
provider_keys:
  - {{display_name: chat-only, provider: openai, api_base: "{}"}}
  - {{display_name: key-a, provider: openai, api_base: "{}", responses: true}}
  - {{display_name: key-b, provider: openai, api_base: "{}", responses: true}}
models:
  - {{display_name: chat, provider: openai, model_name: gpt-chat, provider_key: chat-only}}
  - {{display_name: on-a, provider: openai, model_name: gpt-a, provider_key: key-a}}
  - {{display_name: on-b, provider: openai, model_name: gpt-b, provider_key: key-b}}
  - {{display_name: duo, routing: {{strategy: round_robin, targets: [{{model: on-a}}, {{model: on-b}}]}}}}
api_keys:
  - {{display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}}
"#,
                chat_mock.base_url(),
                a.base_url(),
                b.base_url()
            ))
            .extra(&format!(
                "ratelimit:\n  backend: redis\n  redis:\n    url: \"{}\"\n    timeout_ms: 500\n",
                redis.url()
            ))
            .env("RESPONSES_KEY", KEY),
    )
}

async fn send(gateway: &Gateway, method: &str, path: &str, body: Option<&str>) -> client::Reply {
    client::send(
        gateway.addr(),
        client::request(
            method,
            path,
            &[("authorization", &format!("Bearer {KEY}"))],
            body,
        ),
    )
    .await
}

async fn post(gateway: &Gateway, body: Value) -> client::Reply {
    send(gateway, "POST", "/v1/responses", Some(&body.to_string())).await
}

/// Waits (bounded) until `redis` holds `key`: writes go through a background queue.
async fn written(redis: &Redis, key: &str) {
    for _ in 0..200 {
        if redis.command(&["EXISTS", key]).trim() == ":1" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{key} never reached Redis: {}",
        redis.command(&["KEYS", "*"])
    );
}

both_modes! {
    async fn two_processes_continue_each_other_s_translated_conversation(mode: Mode) {
        let redis = Redis::start();
        let (chat, a, b) = (MockProvider::start(), MockProvider::start(), MockProvider::start());
        let one = gateway(mode, &redis, &chat, &a, &b);
        let two = gateway(mode, &redis, &chat, &a, &b);

        let plain = send(&one, "POST", "/v1/chat/completions", Some(r#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#)).await;
        assert_eq!(plain.status, 200, "{}", plain.text());
        let unstored = post(&one, json!({"model": "chat", "input": "Forget me", "store": false})).await;
        assert_eq!(unstored.status, 200);

        let first = post(&one, json!({"model": "chat", "input": "My name is Ada"})).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let first_id = first.json()["id"].as_str().unwrap().to_owned();
        written(&redis, &format!("aisix:responses:{first_id}")).await;
        assert!(!redis.command(&["KEYS", "aisix:responses:*"]).contains(unstored.json()["id"].as_str().unwrap()), "store: false keeps nothing");
        let ttl: i64 = redis.command(&["PTTL", &format!("aisix:responses:{first_id}")]).trim().trim_start_matches(':').parse().unwrap();
        assert!(ttl > 0 && ttl <= 3_600_000, "kept for the store's TTL: {ttl}");

        let second = post(&two, json!({"model": "chat", "input": "What is my name?", "previous_response_id": first_id})).await;
        assert_eq!(second.status, 200, "the other process found the conversation: {}", second.text());
        let second_id = second.json()["id"].as_str().unwrap().to_owned();
        written(&redis, &format!("aisix:responses:{second_id}")).await;
        let third = post(&one, json!({"model": "chat", "input": "And again?", "previous_response_id": second_id, "stream": true})).await;
        assert_eq!(third.status, 200, "{}", third.text());
        let sent = chat.last_request().unwrap().body_json().unwrap();
        let texts: Vec<String> = sent["messages"].as_array().unwrap().iter().map(|m| m["content"].to_string()).collect();
        assert_eq!(texts.len(), 5, "three user turns and two answers: {texts:?}");
        assert!(texts[0].contains("My name is Ada") && texts[2].contains("What is my name?"), "{texts:?}");

        let got = send(&two, "GET", &format!("/v1/responses/{first_id}"), None).await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.json(), first.json(), "the answer as it was sent");
        let items = send(&two, "GET", &format!("/v1/responses/{second_id}/input_items?order=asc"), None).await;
        assert_eq!(items.status, 200, "{}", items.text());
        assert_eq!(items.json()["data"].as_array().unwrap().len(), 3, "{}", items.text());
        let deleted = send(&two, "DELETE", &format!("/v1/responses/{first_id}"), None).await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        let gone = send(&one, "GET", &format!("/v1/responses/{first_id}"), None).await;
        assert_eq!(gone.status, 404, "deleted for every process: {}", gone.text());
        let chained = post(&one, json!({"model": "chat", "input": "x", "previous_response_id": first_id})).await;
        assert_eq!(chained.status, 404);
        assert_eq!(chained.json()["error"]["param"], "previous_response_id");
    }
}

both_modes! {
    async fn a_native_chain_started_on_one_process_reaches_its_key_from_the_other(mode: Mode) {
        let redis = Redis::start();
        let (chat, a, b) = (MockProvider::start(), MockProvider::start(), MockProvider::start());
        let one = gateway(mode, &redis, &chat, &a, &b);
        let two = gateway(mode, &redis, &chat, &a, &b);
        let first = post(&one, json!({"model": "duo", "input": "Hi"})).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let (creator, other) = if a.request_count() == 1 { (&a, &b) } else { (&b, &a) };
        let id = first.json()["id"].as_str().unwrap().to_owned();
        written(&redis, &format!("aisix:responses:pin:{id}")).await;
        for turn in 0..3 {
            let next = post(&two, json!({"model": "duo", "input": format!("Turn {turn}"), "previous_response_id": id})).await;
            assert_eq!(next.status, 200, "{}", next.text());
        }
        assert_eq!(creator.request_count(), 4, "every turn reached the key that created the response");
        assert_eq!(other.request_count(), 0);
        let got = send(&two, "GET", &format!("/v1/responses/{id}"), None).await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(creator.last_request().unwrap().method.as_str(), "GET");
        let deleted = send(&two, "DELETE", &format!("/v1/responses/{id}"), None).await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        let after = send(&one, "GET", &format!("/v1/responses/{id}"), None).await;
        assert_eq!(after.status, 404, "the pin went with it: {}", after.text());
    }
}
