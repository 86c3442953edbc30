//! A Python ASGI stand-in for a provider (`e2e/python/<module>.py`), served by uvicorn (h11) on
//! an ephemeral 127.0.0.1 port handed over by fd. The app records each request (path, headers,
//! body, and why it was refused if it was) as JSON lines in a file the harness reads.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{ServerProcess, json_lines, listener};
use crate::sdk;

const RECORD_FILE: &str = "record.jsonl";

/// The running app, stopped on drop.
pub struct RecordedApp {
    name: &'static str,
    process: ServerProcess,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    /// Held so the port stays ours; the server accepts on its own copy.
    _listener: TcpListener,
}

impl RecordedApp {
    /// Starts `module:app` under uvicorn with `env`, the record file's path in `record_var`,
    /// and waits until the app has recorded its startup.
    pub fn start(
        name: &'static str,
        module: &str,
        record_var: &str,
        env: &[(&str, &str)],
    ) -> RecordedApp {
        let dir = tempfile::tempdir().expect("temp dir for the mock");
        let listener = listener();
        let addr = listener.local_addr().expect("listener address");
        let fd = listener.as_raw_fd();
        let mut command = Command::new(sdk::python());
        command
            .current_dir(dir.path())
            .args(["-m", "uvicorn", &format!("{module}:app"), "--fd"])
            .arg(fd.to_string())
            .args(["--http", "h11", "--loop", "asyncio", "--lifespan", "on"])
            .args(["--timeout-keep-alive", "60"])
            .env("PYTHONPATH", sdk::python_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env(record_var, dir.path().join(RECORD_FILE));
        for (key, value) in env {
            command.env(key, value);
        }
        let process = ServerProcess::spawn(name, command, &dir.path().join("server.log"), Some(fd));
        let mut app = RecordedApp {
            name,
            process,
            addr,
            dir,
            _listener: listener,
        };
        let record = app.record_path();
        app.process.wait_until("starting the app", || {
            std::fs::read_to_string(&record).is_ok_and(|text| text.contains(r#""type": "startup""#))
        });
        app
    }

    /// What the app recorded per request, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.events("request")
    }

    /// What the app recorded of one `type`, in arrival order.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        json_lines(&self.record_path())
            .into_iter()
            .filter(|event| event["type"] == kind)
            .collect()
    }

    /// The last request recorded.
    pub fn last(&self) -> Value {
        self.requests()
            .pop()
            .unwrap_or_else(|| panic!("the {} saw no request\n{}", self.name, self.logs()))
    }

    /// The server's own log, for failure messages.
    pub fn logs(&self) -> String {
        format!("--- {} log ---\n{}", self.name, self.process.log())
    }

    fn record_path(&self) -> PathBuf {
        self.dir.path().join(RECORD_FILE)
    }
}
