//! The rig the routing tests share: two scriptable mock providers, each behind its own provider
//! key and direct model (`primary`, `backup`; `backup-vllm` is the backup's mock declared as a
//! server that continues with vLLM's `continue_final_message`), the groups a test declares
//! over them, and the gateway in front, with short cooldowns so a test sees them start and
//! end.

use std::time::Duration;

use serde_json::Value;

use crate::client;
use crate::gateway::{Gateway, GatewayConfig, Mode};
use crate::mock::MockProvider;

pub const KEY: &str = "sk-routing-test-1";

/// The bootstrap settings every routing test runs with: a one-second cooldown, no SSE
/// keep-alive comments, and metrics.
pub const BOOTSTRAP: &str = "downstream:\n  sse_keepalive_interval_secs: 0\nupstream:\n  cooldown_ms: 1000\n  first_token_timeout_ms: 3000\n  timeout_ms: 20000\n";

pub struct Rig {
    pub primary: MockProvider,
    pub backup: MockProvider,
    pub gateway: Gateway,
}

/// The resources file: `primary` and `backup` on their own mocks, then `groups` (YAML list
/// entries of `models:`, indented two spaces).
pub fn resources(primary: &str, backup: &str, groups: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p1, provider: openai, api_key: sk-p1-secret, api_base: "{primary}"}}
  - {{display_name: p2, provider: openai, api_key: sk-p2-secret, api_base: "{backup}"}}
models:
  - {{display_name: primary, provider: openai, model_name: up-primary, provider_key: p1}}
  - {{display_name: backup, provider: openai, model_name: up-backup, provider_key: p2}}
  - {{display_name: backup-vllm, provider: openai, model_name: up-backup, provider_key: p2, continuation: continue_final_message}}
{groups}api_keys:
  - {{display_name: team, key_env: ROUTING_KEY, allowed_models: ["*"]}}
"#
    )
}

/// A gateway serving `resources` (whose API key reads `ROUTING_KEY`) with [`BOOTSTRAP`] and
/// metrics.
pub fn config(mode: Mode, resources: String) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(resources)
        .env("ROUTING_KEY", KEY)
        .metrics()
        .extra(BOOTSTRAP)
}

/// A streamed or whole request to `path` with [`KEY`] as a bearer token (which Anthropic's
/// endpoints take too) and `anthropic-version`, tagged `id` for the access log.
pub async fn post(gateway: &Gateway, path: &str, id: &str, body: &Value) -> client::Reply {
    let auth = format!("Bearer {KEY}");
    let request = client::request(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("anthropic-version", "2023-06-01"),
            ("x-request-id", id),
        ],
        Some(&body.to_string()),
    );
    client::send(gateway.addr(), request).await
}

impl Rig {
    /// Starts both mocks and a gateway serving `groups`, with `env` (`AISIX_*` variables)
    /// overriding [`BOOTSTRAP`].
    pub fn start(mode: Mode, groups: &str, env: &[(&str, &str)]) -> Rig {
        let primary = MockProvider::start();
        let backup = MockProvider::start();
        let gateway = Gateway::start(&Rig::config(mode, &primary, &backup, groups, env));
        Rig {
            primary,
            backup,
            gateway,
        }
    }

    pub fn config(
        mode: Mode,
        primary: &MockProvider,
        backup: &MockProvider,
        groups: &str,
        env: &[(&str, &str)],
    ) -> GatewayConfig {
        let mut config = config(
            mode,
            resources(&primary.base_url(), &backup.base_url(), groups),
        );
        for (name, value) in env {
            config = config.env(name, value);
        }
        config
    }

    /// A chat completion to `model` (a group or a direct model), tagged `id` for the access
    /// log; `extra` fields are merged into the body.
    pub async fn chat(&self, model: &str, stream: bool, id: &str, extra: Value) -> client::Reply {
        let mut body = serde_json::json!({
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": "Say hello to the world"}],
        });
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        let request = client::request(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &format!("Bearer {KEY}")),
                ("x-request-id", id),
            ],
            Some(&body.to_string()),
        );
        client::send(self.gateway.addr(), request).await
    }

    /// The metrics page now.
    pub async fn scrape(&self) -> String {
        let addr = self.gateway.metrics_addr.expect("metrics enabled");
        client::get(addr, "/metrics").await.text()
    }
}

/// What a client made of an SSE body.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Streamed {
    /// The content deltas, concatenated.
    pub text: String,
    /// The `model` of every chunk, deduplicated in order.
    pub models: Vec<String>,
    /// The last chunk that carried usage.
    pub usage: Option<Value>,
    /// The stream ended with `data: [DONE]` (and nothing after it).
    pub done: bool,
    /// The code of an `event: error` event, if the stream ended with one.
    pub error: Option<String>,
}

/// Reads an SSE body as a client would.
pub fn streamed(body: &str) -> Streamed {
    let mut out = Streamed {
        done: body.ends_with("data: [DONE]\n\n"),
        ..Streamed::default()
    };
    for event in body.split("\n\n") {
        let is_error = event.lines().any(|l| l == "event: error");
        let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if is_error {
            out.error = value["error"]["code"].as_str().map(str::to_owned);
            continue;
        }
        if let Some(model) = value["model"].as_str()
            && out.models.last().map(String::as_str) != Some(model)
        {
            out.models.push(model.to_owned());
        }
        if let Some(content) = value["choices"][0]["delta"]["content"].as_str() {
            out.text.push_str(content);
        }
        if value["usage"].is_object() {
            out.usage = Some(value["usage"].clone());
        }
    }
    out
}

/// Waits until `done` holds for the mock, or panics naming `what`.
pub fn wait(mock: &MockProvider, what: &str, done: impl FnMut(&MockProvider) -> bool) {
    assert!(
        mock.wait_until(Duration::from_secs(10), done),
        "timed out waiting for {what}"
    );
}
