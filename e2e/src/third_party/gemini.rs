//! A Gemini API stand-in built on Google's own `google-genai` SDK types
//! (`e2e/python/gemini_asgi_app.py`), served by uvicorn: every request body the gateway sends
//! is validated against the SDK's types and every answer is built from them. The app records
//! each request (path, query, headers, body, and why it was refused if it was).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{ServerProcess, json_lines, listener};
use crate::sdk;

const RECORD_FILE: &str = "record.jsonl";

/// The running app, stopped on drop.
pub struct GeminiMock {
    process: ServerProcess,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    /// Held so the port stays ours; the server accepts on its own copy.
    _listener: TcpListener,
}

impl GeminiMock {
    /// Starts the app under uvicorn (h11), accepting only `api_key` in `x-goog-api-key`, on an
    /// ephemeral 127.0.0.1 port handed over by fd, and waits until the app has started.
    pub fn start(api_key: &str) -> GeminiMock {
        let dir = tempfile::tempdir().expect("temp dir for the Gemini mock");
        let listener = listener();
        let addr = listener.local_addr().expect("listener address");
        let fd = listener.as_raw_fd();
        let mut command = Command::new(sdk::python());
        command
            .current_dir(dir.path())
            .args(["-m", "uvicorn", "gemini_asgi_app:app", "--fd"])
            .arg(fd.to_string())
            .args(["--http", "h11", "--loop", "asyncio", "--lifespan", "on"])
            .args(["--timeout-keep-alive", "60"])
            .env("PYTHONPATH", sdk::python_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env("GEMINI_API_KEY", api_key)
            .env("GEMINI_RECORD", dir.path().join(RECORD_FILE));
        let process = ServerProcess::spawn(
            "gemini mock (uvicorn)",
            command,
            &dir.path().join("server.log"),
            Some(fd),
        );
        let mut mock = GeminiMock {
            process,
            addr,
            dir,
            _listener: listener,
        };
        let record = mock.record_path();
        mock.process.wait_until("starting the app", || {
            std::fs::read_to_string(&record).is_ok_and(|text| text.contains(r#""type": "startup""#))
        });
        mock
    }

    /// The provider `api_base`: `http://127.0.0.1:PORT/v1beta`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// What the app recorded per request, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        json_lines(&self.record_path())
            .into_iter()
            .filter(|event| event["type"] == "request")
            .collect()
    }

    /// The last request recorded.
    pub fn last(&self) -> Value {
        self.requests()
            .pop()
            .unwrap_or_else(|| panic!("the Gemini mock saw no request\n{}", self.logs()))
    }

    /// The server's own log, for failure messages.
    pub fn logs(&self) -> String {
        format!("--- gemini mock log ---\n{}", self.process.log())
    }

    fn record_path(&self) -> PathBuf {
        self.dir.path().join(RECORD_FILE)
    }
}
