#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The official `openai` Python SDK against the real gateway: `e2e/python/test_openai_sdk.py`
//! run with the venv's interpreter, once on the built-in `mock` provider and once through the
//! HTTP and SSE relay to a scriptable OpenAI-like upstream, in both serving modes.
//!
//! The interpreter is `AISIX_E2E_PYTHON`, or else `target/e2e-venv/bin/python`, which
//! `bash scripts/setup-python.sh` creates.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::MockProvider;

/// The key the SDK presents to the gateway.
const CLIENT_KEY: &str = "sk-sdk-e2e-client";
/// The key the gateway presents upstream, on the relayed route.
const UPSTREAM_KEY: &str = "sk-sdk-e2e-upstream";
/// The whole script: a dozen requests to a local gateway, each with its own 30 s limit.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

const BUILTIN_RESOURCES: &str = r#"_format_version: "1"
provider_keys:
  - display_name: local-mock
    provider: mock
models:
  - {display_name: chat-model, provider: mock, model_name: mock-chat, provider_key: local-mock}
  - {display_name: embed-model, provider: mock, model_name: mock-embed, provider_key: local-mock}
  - {display_name: hidden-model, provider: mock, model_name: mock-hidden, provider_key: local-mock}
api_keys:
  - display_name: sdk
    key_env: SDK_TEST_KEY
    allowed_models: ["chat-model", "embed-model"]
"#;

/// Models routed through `provider: openai` to the mock at `api_base`.
fn relay_resources(api_base: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: upstream
    provider: openai
    api_key: {UPSTREAM_KEY}
    api_base: {api_base}
models:
  - display_name: relay-chat
    provider: openai
    model_name: gpt-4o
    provider_key: upstream
  - display_name: relay-embed
    provider: openai
    model_name: text-embedding-3-small
    provider_key: upstream
  - display_name: relay-hidden
    provider: openai
    model_name: gpt-4o-mini
    provider_key: upstream
api_keys:
  - display_name: sdk
    key_env: SDK_TEST_KEY
    allowed_models: ["relay-chat", "relay-embed"]
"#
    )
}

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("AISIX_E2E_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-venv/bin/python");
    assert!(
        venv.exists(),
        "no Python for the openai SDK test: {} does not exist. Create it with \
         `bash scripts/setup-python.sh` (python3 -m venv target/e2e-venv && \
         target/e2e-venv/bin/pip install -r e2e/python/requirements.txt), or point \
         AISIX_E2E_PYTHON at an interpreter that has the pinned `openai` package",
        venv.display()
    );
    venv
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/test_openai_sdk.py")
}

/// Runs the SDK script under `python` with `env` (its `AISIX_SDK_*` settings); returns its exit
/// status and everything it printed, stdout and stderr interleaved.
async fn run_sdk_script(python: PathBuf, env: Vec<(&'static str, String)>) -> (ExitStatus, String) {
    tokio::task::spawn_blocking(move || {
        let mut output = tempfile::tempfile().expect("temp file for the script's output");
        let mut command = Command::new(&python);
        command.arg(script());
        // Only what this test sets may steer the SDK: no proxy, no OPENAI_* defaults.
        for (key, _) in std::env::vars() {
            let upper = key.to_ascii_uppercase();
            if upper.starts_with("AISIX_SDK_")
                || upper.starts_with("OPENAI_")
                || upper.ends_with("_PROXY")
            {
                command.env_remove(key);
            }
        }
        command
            .envs(env)
            // No __pycache__ left in the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("clone output file"))
            .stderr(output.try_clone().expect("clone output file"));
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}); create the venv with `bash scripts/setup-python.sh`",
                python.display()
            )
        });
        let deadline = Instant::now() + SCRIPT_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the SDK script") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut printed = String::new();
        output.rewind().expect("rewind output file");
        output
            .read_to_string(&mut printed)
            .expect("read the script's output");
        match status {
            Some(status) => (status, printed),
            None => panic!("the SDK script ran past {SCRIPT_TIMEOUT:?}:\n{printed}"),
        }
    })
    .await
    .expect("the SDK script runner panicked")
}

/// The script's settings for a gateway whose key may use `chat` and `embed` but not `hidden`.
fn sdk_env(
    gateway: &Gateway,
    chat: &str,
    embed: &str,
    hidden: &str,
    embed_encoding: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("AISIX_SDK_BASE_URL", gateway.url("/v1")),
        ("AISIX_SDK_API_KEY", CLIENT_KEY.to_owned()),
        ("AISIX_SDK_CHAT_MODEL", chat.to_owned()),
        ("AISIX_SDK_EMBED_MODEL", embed.to_owned()),
        ("AISIX_SDK_HIDDEN_MODEL", hidden.to_owned()),
        ("AISIX_SDK_EMBED_ENCODING", embed_encoding.to_owned()),
        ("AISIX_SDK_DETERMINISTIC", "1".to_owned()),
        ("AISIX_SDK_TIMEOUT", "30".to_owned()),
    ]
}

fn assert_script_passed(status: ExitStatus, printed: &str, gateway: &Gateway) {
    assert!(
        status.success(),
        "the openai SDK script failed ({status}):\n{printed}\n--- gateway log ---\n{}",
        gateway.logs()
    );
}

both_modes! {
    async fn openai_sdk_works_against_the_builtin_mock_provider(mode: Mode) {
        let python = python();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(BUILTIN_RESOURCES)
                .env("SDK_TEST_KEY", CLIENT_KEY),
        );
        // The SDK's default embedding request asks for base64, which the built-in mock serves.
        let env = sdk_env(&gateway, "chat-model", "embed-model", "hidden-model", "sdk");
        let (status, printed) = run_sdk_script(python, env).await;
        assert_script_passed(status, &printed, &gateway);
    }
}

both_modes! {
    async fn openai_sdk_works_through_the_http_and_sse_relay(mode: Mode) {
        let python = python();
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(relay_resources(&mock.base_url()))
                .env("SDK_TEST_KEY", CLIENT_KEY),
        );
        // The scripted upstream answers embeddings as floats whatever `encoding_format` asks.
        let env = sdk_env(&gateway, "relay-chat", "relay-embed", "relay-hidden", "float");
        let (status, printed) = run_sdk_script(python, env).await;
        assert_script_passed(status, &printed, &gateway);

        let requests = mock.requests();
        for path in ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"] {
            assert!(
                requests.iter().any(|r| r.path == path),
                "the SDK's traffic never reached the upstream's {path}: {:?}",
                requests.iter().map(|r| &r.path).collect::<Vec<_>>()
            );
        }
        let upstream_auth = format!("Bearer {UPSTREAM_KEY}");
        for request in &requests {
            assert_eq!(
                request.header("authorization"),
                Some(upstream_auth.as_str()),
                "{} went upstream without the provider key (or with the client's)",
                request.path
            );
            let model = request.body_json().unwrap()["model"].clone();
            assert!(
                model == "gpt-4o" || model == "text-embedding-3-small",
                "{} went upstream with model {model}, not the upstream's name",
                request.path
            );
        }
    }
}
