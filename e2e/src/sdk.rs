//! The official `openai` Python SDK as the gateway's client: the interpreter of the venv that
//! `scripts/setup-python.sh` builds, the script `e2e/python/test_openai_sdk.py`, its settings,
//! and a resources file that routes the script's models to an OpenAI-compatible upstream.
//!
//! The interpreter is `AISIX_E2E_PYTHON`, or else `target/e2e-venv/bin/python`.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::gateway::Gateway;
use crate::mock::RecordedRequest;

/// The key the SDK presents to the gateway.
pub const CLIENT_KEY: &str = "sk-sdk-e2e-client";
/// The key the gateway presents upstream, on relayed routes.
pub const UPSTREAM_KEY: &str = "sk-sdk-e2e-upstream";
/// The environment variable that holds [`CLIENT_KEY`] for the gateway's `key_env`.
pub const CLIENT_KEY_ENV: &str = "SDK_TEST_KEY";
/// The whole script: a dozen requests to a local gateway, each with its own 30 s limit.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The Python interpreter that has the pinned packages of `e2e/python/requirements.txt`.
/// Panics, saying how to create it, when there is none: a missing tool is a failed test.
pub fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("AISIX_E2E_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-venv/bin/python");
    assert!(
        venv.exists(),
        "no Python for the SDK tests: {} does not exist. Create it with \
         `bash scripts/setup-python.sh` (python3 -m venv target/e2e-venv && \
         target/e2e-venv/bin/pip install -r e2e/python/requirements.txt), or point \
         AISIX_E2E_PYTHON at an interpreter that has the pinned packages",
        venv.display()
    );
    venv
}

/// `e2e/python`: the SDK script and the ASGI app of the conformance matrix.
pub fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The models a relayed gateway serves: `relay-chat` and `relay-embed` for the SDK's key,
/// `relay-hidden` that the key may not use, all through `provider: openai` at `api_base`.
pub fn relay_resources(api_base: &str) -> String {
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
    key_env: {CLIENT_KEY_ENV}
    allowed_models: ["relay-chat", "relay-embed"]
"#
    )
}

/// The upstream model names [`relay_resources`] sends, for assertions on what arrived.
pub const RELAY_UPSTREAM_MODELS: [&str; 2] = ["gpt-4o", "text-embedding-3-small"];

/// The script's settings for a gateway whose key may use `chat` and `embed` but not `hidden`.
/// `embed_encoding` is `sdk` (the SDK asks for base64 and decodes it), `float` or `base64`.
pub fn env(
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

/// Runs `e2e/python/test_openai_sdk.py` with `env` (its `AISIX_SDK_*` settings); returns its
/// exit status and everything it printed, stdout and stderr interleaved.
pub async fn run_script(env: Vec<(&'static str, String)>) -> (ExitStatus, String) {
    run_python("test_openai_sdk.py", env).await
}

/// Runs the script `e2e/python/<script>` with `env`; returns its exit status and everything
/// it printed, stdout and stderr interleaved.
pub async fn run_python(
    script: &'static str,
    env: Vec<(&'static str, String)>,
) -> (ExitStatus, String) {
    let python = python();
    tokio::task::spawn_blocking(move || {
        let mut output = tempfile::tempfile().expect("temp file for the script's output");
        let mut command = Command::new(&python);
        command.arg(python_dir().join(script));
        // Only what this test sets may steer the SDKs: no proxy, no OPENAI_* or ANTHROPIC_*
        // defaults.
        for (key, _) in std::env::vars() {
            let upper = key.to_ascii_uppercase();
            if upper.starts_with("AISIX_SDK_")
                || upper.starts_with("AISIX_ANTHROPIC_")
                || upper.starts_with("OPENAI_")
                || upper.starts_with("ANTHROPIC_")
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

/// Fails the test with the script's output and `context()` (logs of the servers involved)
/// unless the script exited 0.
pub fn assert_passed(status: ExitStatus, printed: &str, context: impl FnOnce() -> String) {
    if !status.success() {
        panic!(
            "the SDK script failed ({status}):\n{printed}\n{}",
            context()
        );
    }
}

/// One request as an upstream received it from the gateway, for [`assert_relayed`].
#[derive(Debug)]
pub struct Relayed {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: serde_json::Value,
}

impl From<&RecordedRequest> for Relayed {
    fn from(request: &RecordedRequest) -> Relayed {
        Relayed {
            method: request.method.to_string(),
            path: request.path.clone(),
            authorization: request.header("authorization").map(str::to_owned),
            body: request.body_json().unwrap_or_else(|e| {
                panic!(
                    "{} went upstream with a body that is not JSON: {e}",
                    request.path
                )
            }),
        }
    }
}

/// The script's traffic reached the upstream as the gateway must relay it: chat completions
/// (unary and streamed), legacy completions and embeddings all arrived; each carried the
/// provider key, never the client's; each named the upstream model; and every stream asked
/// for usage (`stream_options.include_usage`), which the gateway forces so usage is exact.
pub fn assert_relayed(requests: &[Relayed]) {
    let seen = |path: &str, stream: bool| {
        requests
            .iter()
            .any(|r| r.path == path && (r.body["stream"] == true) == stream)
    };
    for (path, stream) in [
        ("/v1/chat/completions", false),
        ("/v1/chat/completions", true),
        ("/v1/completions", false),
        ("/v1/completions", true),
        ("/v1/embeddings", false),
    ] {
        assert!(
            seen(path, stream),
            "no {} {path} reached the upstream: {requests:#?}",
            if stream { "streamed" } else { "unary" }
        );
    }
    let upstream_auth = format!("Bearer {UPSTREAM_KEY}");
    for request in requests {
        assert_eq!(request.method, "POST", "{request:#?}");
        assert_eq!(
            request.authorization.as_deref(),
            Some(upstream_auth.as_str()),
            "{} went upstream without the provider key (or with the client's)",
            request.path
        );
        let model = &request.body["model"];
        assert!(
            RELAY_UPSTREAM_MODELS.iter().any(|m| model == *m),
            "{} went upstream with model {model}, not the upstream's name",
            request.path
        );
        if request.body["stream"] == true {
            assert_eq!(
                request.body["stream_options"]["include_usage"], true,
                "a stream went upstream without asking for usage: {request:#?}"
            );
        }
    }
}
