//! An API key's spending policy, in both serving modes: a key may not buy what its operator
//! left out of the cost model (more choices than `max_n`, a `service_tier` or an
//! `anthropic-beta` not on its lists). Refusals are 403 in the client's envelope, name the
//! field and reach no provider; what is allowed is forwarded as sent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply};
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::MockProvider;
use serde_json::{Value, json};

const KEY: &str = "sk-spending-test-1";

fn resources(openai: &MockProvider, anthropic: &MockProvider) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: oai, provider: openai, api_key: sk-oai-secret, api_base: "{openai}"}}
  - {{display_name: ant, provider: anthropic, api_key: sk-ant-secret, api_base: "{anthropic}"}}
models:
  - {{display_name: gpt, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - {{display_name: claude, provider: anthropic, model_name: claude-upstream, provider_key: ant}}
api_keys:
  - display_name: team
    key_env: SPENDING_KEY
    allowed_models: ["*"]
    spending:
      max_n: 2
      service_tiers: [default, auto]
      anthropic_betas: [prompt-caching-2024-07-31]
"#,
        openai = openai.base_url(),
        anthropic = anthropic.origin(),
    )
}

async fn post(gateway: &Gateway, path: &str, body: &Value, beta: Option<&str>) -> Reply {
    let auth = format!("Bearer {KEY}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("anthropic-version", "2023-06-01"),
    ];
    if let Some(beta) = beta {
        headers.push(("anthropic-beta", beta));
    }
    client::send(
        gateway.addr(),
        client::request("POST", path, &headers, Some(&body.to_string())),
    )
    .await
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

both_modes! {
    async fn a_key_buys_only_what_its_spending_policy_allows(mode: Mode) {
        let (openai, anthropic) = (MockProvider::start(), MockProvider::start_anthropic());
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(resources(&openai, &anthropic))
                .env("SPENDING_KEY", KEY),
        );

        let refused = post(&gateway, "/v1/chat/completions", &chat(json!({"n": 3})), None).await;
        assert_eq!(refused.status, 403, "{}", refused.text());
        assert_eq!(refused.json()["error"]["type"], "permission_error");
        assert_eq!(refused.json()["error"]["code"], "not_permitted_by_key");
        assert!(refused.json()["error"]["message"].as_str().unwrap().starts_with("n: "), "{}", refused.text());

        let refused = post(&gateway, "/v1/chat/completions", &chat(json!({"service_tier": "priority"})), None).await;
        assert_eq!(refused.status, 403, "{}", refused.text());
        assert!(refused.json()["error"]["message"].as_str().unwrap().contains("priority"), "{}", refused.text());
        assert_eq!(openai.request_count(), 0, "nothing refused reached the provider");

        for allowed in [json!({"n": 2}), json!({"service_tier": "auto"}), json!({})] {
            let reply = post(&gateway, "/v1/chat/completions", &chat(allowed.clone()), None).await;
            assert_eq!(reply.status, 200, "{allowed}: {}", reply.text());
        }
        let sent = openai.last_request().unwrap().body_json().unwrap();
        assert!(sent.get("service_tier").is_none());

        let messages = json!({"model": "claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
        let refused = post(&gateway, "/v1/messages", &messages, Some("prompt-caching-2024-07-31, computer-use-2024-10-22")).await;
        assert_eq!(refused.status, 403, "{}", refused.text());
        assert_eq!(refused.json()["type"], "error");
        assert_eq!(refused.json()["error"]["type"], "permission_error");
        assert!(refused.json()["error"]["message"].as_str().unwrap().contains("computer-use-2024-10-22"));
        assert_eq!(anthropic.request_count(), 0);

        let reply = post(&gateway, "/v1/messages", &messages, Some("prompt-caching-2024-07-31")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(anthropic.last_request().unwrap().header("anthropic-beta"), Some("prompt-caching-2024-07-31"));
    }
}
