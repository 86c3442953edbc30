//! Real Responses clients through the real gateway, in both serving modes: the Codex CLI
//! (`codex exec`, pinned and installed by `scripts/setup-codex.sh` under target/codex) against
//! a Responses-native mock, a chat-completions-only mock (translated) and an Anthropic mock,
//! all on 127.0.0.1 with its update checks and telemetry off; and the OpenAI Agents SDK
//! (`e2e/python/test_openai_agents.py`, pinned in requirements.txt) with its default Responses
//! model and one function tool, tracing off. Each run must end with the mock's answer; the
//! requests each client made upstream are recorded and asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::sdk;
use serde_json::{Value, json};

const KEY: &str = "sk-codex-client-1";

fn codex() -> PathBuf {
    let codex =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/codex/node_modules/.bin/codex");
    assert!(
        codex.exists(),
        "no Codex CLI: run `bash scripts/setup-codex.sh` (installs @openai/codex, pinned, under target/codex)"
    );
    codex
}

fn gateway(mode: Mode, openai: &MockProvider, anthropic: &MockProvider) -> Gateway {
    Gateway::start(
        &GatewayConfig::new(mode)
            .resources(format!(
                r#"_format_version: "1"
provider_keys:
  - {{display_name: native, provider: openai, api_base: "{}", responses: true}}
  - {{display_name: chat-only, provider: openai, api_base: "{}"}}
  - {{display_name: ant, provider: anthropic, api_key: sk-ant-1, api_base: "{}"}}
models:
  - {{display_name: native-model, provider: openai, model_name: gpt-up, provider_key: native}}
  - {{display_name: chat-model, provider: openai, model_name: gpt-chat, provider_key: chat-only}}
  - {{display_name: claude-model, provider: anthropic, model_name: claude-up, provider_key: ant}}
api_keys:
  - {{display_name: codex, key_env: CODEX_CLIENT_KEY, allowed_models: ["*"]}}
"#,
                openai.base_url(),
                openai.base_url(),
                anthropic.origin()
            ))
            .env("CODEX_CLIENT_KEY", KEY),
    )
}

/// Runs `codex exec PROMPT` on `model` through `gateway`; its exit status's success and output.
fn codex_exec(gateway: &Gateway, model: &str, prompt: &str) -> (bool, String) {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            r#"model = "{model}"
model_provider = "aisix"
check_for_update_on_startup = false

[model_providers.aisix]
name = "aisix"
base_url = "{}"
env_key = "AISIX_CODEX_KEY"
wire_api = "responses"

[analytics]
enabled = false

[otel]
exporter = "none"
"#,
            gateway.url("/v1")
        ),
    )
    .unwrap();
    let output = Command::new(codex())
        .args(["exec", "--skip-git-repo-check", "--color", "never", prompt])
        .current_dir(work.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .env("AISIX_CODEX_KEY", KEY)
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// `METHOD path` of every request `mock` received.
fn paths(mock: &MockProvider) -> Vec<String> {
    mock.requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

both_modes! {
    async fn codex_exec_finishes_with_the_mock_s_answer_on_every_path(mode: Mode) {
        let openai = MockProvider::start();
        let anthropic = MockProvider::start_anthropic();
        let gateway = gateway(mode, &openai, &anthropic);
        for (model, upstream, path) in [
            ("native-model", &openai, "POST /v1/responses"),
            ("chat-model", &openai, "POST /v1/chat/completions"),
            ("claude-model", &anthropic, "POST /v1/messages"),
        ] {
            let before = upstream.request_count();
            let (ok, printed) = tokio::task::block_in_place(|| codex_exec(&gateway, model, "Say hello."));
            assert!(ok, "{model}: codex failed:\n{printed}\n--- gateway ---\n{}", gateway.logs());
            assert!(printed.contains("Hello from the mock provider."), "{model}:\n{printed}");
            let seen = paths(upstream);
            assert!(seen.len() > before, "{model}: {seen:?}");
            assert!(seen[before..].iter().all(|p| p == path), "{model}: {seen:?}");
        }
        let first = openai.requests()[0].body_json().unwrap();
        assert_eq!(first["store"], false, "Codex sends store: false");
        let offered = first["tools"].as_array().unwrap();
        assert!(offered.iter().any(|t| t["type"] == "namespace"), "and a namespace tool");
        assert!(offered.iter().any(|t| t["type"] == "web_search"), "and, by default, OpenAI's web search");
        let logs = gateway.logs();
        let lines: Vec<Value> = logs
            .lines()
            .filter(|l| l.contains("\"type\":\"access\"") && l.contains("\"path\":\"/v1/responses\""))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!lines.is_empty());
        for line in &lines {
            assert_eq!(line["status"], 200, "{line}");
            // The translated paths leave the web search out and say so; the native one sends it.
            let dropped = if line["model"] == "native-model" { Value::Null } else { json!("web_search") };
            assert_eq!(line.get("dropped_tools").cloned().unwrap_or(Value::Null), dropped, "{line}");
        }
        let chat = openai.requests().into_iter().find(|r| r.path == "/v1/chat/completions").unwrap().body_json().unwrap();
        assert!(chat["tools"].as_array().unwrap().iter().all(|t| t["type"] == "function"), "{chat}");
    }
}

both_modes! {
    async fn codex_runs_the_shell_command_a_translated_model_calls_and_answers_after_it(mode: Mode) {
        let openai = MockProvider::start();
        let anthropic = MockProvider::start_anthropic();
        let gateway = gateway(mode, &openai, &anthropic);
        let chunk = |delta: Value, finish: Value| {
            Frame::json(json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-chat",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
        };
        openai.enqueue_for(
            "/v1/chat/completions",
            Mock::sse([
                chunk(json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_shell_1", "type": "function", "function": {"name": "exec_command", "arguments": ""}}]}), Value::Null),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"cmd\":\"echo aisix-shell-ok\"}"}}]}), Value::Null),
                chunk(json!({}), json!("tool_calls")),
            ]),
        );
        let (ok, printed) = tokio::task::block_in_place(|| codex_exec(&gateway, "chat-model", "Run echo."));
        assert!(ok, "codex failed:\n{printed}\n--- gateway ---\n{}", gateway.logs());
        assert!(printed.contains("Hello from the mock provider."), "{printed}");
        let requests = openai.requests();
        assert_eq!(paths(&openai), ["POST /v1/chat/completions", "POST /v1/chat/completions"]);
        let second = requests[1].body_json().unwrap();
        let messages = second["messages"].as_array().unwrap();
        let call = messages.iter().find(|m| m["role"] == "assistant" && m["tool_calls"].is_array()).expect("the call went back");
        assert_eq!(call["tool_calls"][0]["id"], "call_shell_1");
        let result = messages.iter().find(|m| m["role"] == "tool").expect("the command's output went back");
        assert_eq!(result["tool_call_id"], "call_shell_1");
        assert!(result["content"].as_str().unwrap().contains("aisix-shell-ok"), "{result}");
    }
}

both_modes! {
    async fn the_agents_sdk_default_model_calls_a_function_tool_through_aisix(mode: Mode) {
        let openai = MockProvider::start();
        let anthropic = MockProvider::start_anthropic();
        let gateway = gateway(mode, &openai, &anthropic);
        for (model, path) in [("native-model", "POST /v1/responses"), ("chat-model", "POST /v1/chat/completions")] {
            let before = openai.request_count();
            let env = vec![
                ("AISIX_SDK_BASE_URL", gateway.url("/v1")),
                ("AISIX_SDK_API_KEY", KEY.to_owned()),
                ("AISIX_SDK_MODEL", model.to_owned()),
            ];
            let (status, printed) = sdk::run_python("test_openai_agents.py", env).await;
            sdk::assert_passed(status, &printed, || format!("{model}\n--- gateway ---\n{}", gateway.logs()));
            let seen = paths(&openai);
            assert_eq!(&seen[before..], [path, path], "{model}: a tool turn and the answer");
        }
    }
}
