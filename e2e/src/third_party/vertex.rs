//! A Vertex AI stand-in (`e2e/python/vertex_asgi_app.py`), served by uvicorn: Google's OAuth2
//! token endpoint, which verifies the gateway's RS256 service-account assertion with PyJWT
//! against a key pair the app generates at start (and writes as a service-account key file),
//! and the Gemini (validated by the `google-genai` SDK's types, through the Gemini mock) and
//! Anthropic (`rawPredict`, validated by the `anthropic` SDK's types) publisher endpoints, with
//! a text-embedding model's `:predict` (checked against google-genai's own Vertex converter) and
//! both publishers' token counters. The app records each token request and each publisher call.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{ServerProcess, json_lines, listener};
use crate::sdk;

const RECORD_FILE: &str = "record.jsonl";

/// How the token endpoint behaves.
#[derive(Debug, Clone, Copy)]
pub struct TokenSettings {
    /// The tokens' `expires_in`.
    pub lifetime: Duration,
    /// How long the token endpoint takes to answer.
    pub delay: Duration,
}

impl Default for TokenSettings {
    fn default() -> Self {
        Self {
            lifetime: Duration::from_secs(3600),
            delay: Duration::ZERO,
        }
    }
}

/// The running app, stopped on drop.
pub struct VertexMock {
    process: ServerProcess,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    _listener: TcpListener,
}

impl VertexMock {
    /// Starts the app for `project` in `location` on an ephemeral 127.0.0.1 port and waits
    /// until it has written its service-account key file.
    pub fn start(project: &str, location: &str, tokens: TokenSettings) -> VertexMock {
        let dir = tempfile::tempdir().expect("temp dir for the Vertex mock");
        let listener = listener();
        let addr = listener.local_addr().expect("listener address");
        let fd = listener.as_raw_fd();
        let record = dir.path().join(RECORD_FILE);
        let mut command = Command::new(sdk::python());
        command
            .current_dir(dir.path())
            .args(["-m", "uvicorn", "vertex_asgi_app:app", "--fd"])
            .arg(fd.to_string())
            .args(["--http", "h11", "--loop", "asyncio", "--lifespan", "on"])
            .args(["--timeout-keep-alive", "60"])
            .env("PYTHONPATH", sdk::python_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env("VERTEX_PORT", addr.port().to_string())
            .env("VERTEX_PROJECT", project)
            .env("VERTEX_LOCATION", location)
            .env(
                "VERTEX_TOKEN_LIFETIME",
                tokens.lifetime.as_secs().to_string(),
            )
            .env("VERTEX_TOKEN_DELAY", tokens.delay.as_secs_f64().to_string())
            .env("VERTEX_RECORD", &record)
            .env("GEMINI_RECORD", &record);
        let process = ServerProcess::spawn(
            "vertex mock (uvicorn)",
            command,
            &dir.path().join("server.log"),
            Some(fd),
        );
        let mut mock = VertexMock {
            process,
            addr,
            dir,
            _listener: listener,
        };
        mock.process.wait_until("starting the app", || {
            std::fs::read_to_string(&record).is_ok_and(|text| text.contains(r#""type": "startup""#))
        });
        mock
    }

    /// The provider `api_base`: `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The service-account key file the app generated (its `token_uri` is the app's).
    pub fn credentials_file(&self) -> PathBuf {
        self.dir.path().join("sa.json")
    }

    /// Makes the token endpoint fail (503) from now on, or answer again.
    pub fn fail_tokens(&self, fail: bool) {
        let flag = self.dir.path().join("token_fail");
        if fail {
            std::fs::write(flag, b"").expect("write the token_fail flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// Every event of `kind` (`token`, `vertex`, or the Gemini mock's `request`), in order.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        json_lines(&self.dir.path().join(RECORD_FILE))
            .into_iter()
            .filter(|event| event["type"] == kind)
            .collect()
    }

    /// The last event of `kind`.
    pub fn last(&self, kind: &str) -> Value {
        self.events(kind)
            .pop()
            .unwrap_or_else(|| panic!("the Vertex mock recorded no {kind}\n{}", self.logs()))
    }

    /// The server's own log, for failure messages.
    pub fn logs(&self) -> String {
        format!("--- vertex mock log ---\n{}", self.process.log())
    }
}
