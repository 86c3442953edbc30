#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Translation fidelity end to end, in both serving modes: what real clients (Claude Code, the
//! Agents SDK, `llm`) send and expect of the gateway. The origin probe, system messages inside
//! Anthropic's `messages`, tool ids that survive a round trip, the output-token field an
//! upstream wants, the model list in the client's dialect, reasoning both ways and structured
//! output to an Anthropic provider.

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::MockProvider;
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-fidelity-e2e";
const ANTHROPIC_KEY: &str = "sk-ant-upstream-fidelity";
const OPENAI_KEY: &str = "sk-oai-upstream-fidelity";

/// An Anthropic mock and an OpenAI mock, and the gateway in front of them: `claude-custom`
/// goes to Anthropic, `claude-via-openai` and `o3-mini` to the OpenAI mock.
struct Rig {
    anthropic: MockProvider,
    openai: MockProvider,
    gateway: Gateway,
}

fn resources(anthropic: &MockProvider, openai: &MockProvider) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: ant
    provider: anthropic
    api_key: {ANTHROPIC_KEY}
    api_base: {anthropic}
  - display_name: oai
    provider: openai
    api_key: {OPENAI_KEY}
    api_base: {openai}
models:
  - {{display_name: claude-custom, provider: anthropic, model_name: claude-upstream, provider_key: ant}}
  - {{display_name: claude-via-openai, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - {{display_name: o3-mini, provider: openai, model_name: o3-mini, provider_key: oai}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        anthropic = anthropic.origin(),
        openai = openai.base_url(),
    )
}

fn start(mode: Mode) -> Rig {
    let anthropic = MockProvider::start_anthropic();
    let openai = MockProvider::start();
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources(&anthropic, &openai))
            .env("CLIENT_KEY", CLIENT_KEY)
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\n"),
    );
    Rig {
        anthropic,
        openai,
        gateway,
    }
}

impl Rig {
    async fn messages(&self, path: &str, body: &Value) -> Reply {
        let body = body.to_string();
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                path,
                &[
                    ("x-api-key", CLIENT_KEY),
                    ("anthropic-version", "2023-06-01"),
                ],
                Some(&body),
            ),
        )
        .await
    }

    async fn chat(&self, body: &Value) -> Reply {
        let auth = format!("Bearer {CLIENT_KEY}");
        let body = body.to_string();
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                "/v1/chat/completions",
                &[("authorization", &auth)],
                Some(&body),
            ),
        )
        .await
    }
}

both_modes! {
    async fn the_origin_answers_head_and_get_with_200(mode: Mode) {
        let rig = start(mode);
        let head = client::send(rig.gateway.addr(), request("HEAD", "/", &[], None)).await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty(), "a HEAD answer has no body");
        let get = client::get(rig.gateway.addr(), "/").await;
        assert_eq!(get.status, 200);
        assert_eq!(get.text().lines().count(), 1, "{}", get.text());
        let _ = (&rig.anthropic, &rig.openai);
    }
}
