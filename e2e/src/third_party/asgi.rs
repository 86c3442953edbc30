//! The OpenAI-like ASGI app `e2e/python/openai_asgi_app.py` served by a real ASGI server:
//! uvicorn with its h11 or its httptools HTTP/1.1 parser, or hypercorn over TLS offering h2 by
//! ALPN. The app records, per request, what the server handed it (HTTP version, scheme,
//! method, path, headers, body), so a test asserts on what really arrived.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{ServerProcess, json_lines, listener};
use crate::sdk;

/// Which server serves the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsgiServer {
    /// uvicorn, HTTP/1.1 parsed by h11 (pure Python).
    UvicornH11,
    /// uvicorn, HTTP/1.1 parsed by httptools (llhttp, Node.js's parser).
    UvicornHttptools,
    /// hypercorn over TLS with ALPN `h2, http/1.1`; its HTTP/2 is the `h2` package.
    HypercornTls,
}

impl AsgiServer {
    fn name(self) -> &'static str {
        match self {
            AsgiServer::UvicornH11 => "uvicorn (h11)",
            AsgiServer::UvicornHttptools => "uvicorn (httptools)",
            AsgiServer::HypercornTls => "hypercorn (TLS)",
        }
    }

    pub fn tls(self) -> bool {
        self == AsgiServer::HypercornTls
    }
}

/// Idle keep-alive the servers allow (their defaults are 5 s), so that a slow moment on a
/// shared machine cannot race the gateway's reuse of a pooled connection against the close.
const KEEP_ALIVE_SECS: &str = "60";

/// The app's record, in the server's temp dir.
const RECORD_FILE: &str = "record.jsonl";

/// A running ASGI server with the app, stopped on drop.
pub struct Asgi {
    process: ServerProcess,
    pub addr: SocketAddr,
    server: AsgiServer,
    dir: tempfile::TempDir,
    /// Held so the port stays ours; the server accepts on its own copy.
    _listener: TcpListener,
}

impl Asgi {
    /// Starts `server` with the app, accepting only `api_key`, on an ephemeral 127.0.0.1 port
    /// (a socket bound here and handed over by fd, so no other test can take the port), and
    /// waits until the server has started the app.
    pub fn start(server: AsgiServer, api_key: &str) -> Asgi {
        let dir = tempfile::tempdir().expect("temp dir for the ASGI server");
        let listener = listener();
        let addr = listener.local_addr().expect("listener address");
        let fd = listener.as_raw_fd();
        let mut command = Command::new(sdk::python());
        command.current_dir(dir.path());
        match server {
            AsgiServer::UvicornH11 | AsgiServer::UvicornHttptools => {
                let http = if server == AsgiServer::UvicornH11 {
                    "h11"
                } else {
                    "httptools"
                };
                command
                    .args(["-m", "uvicorn", "openai_asgi_app:app", "--fd"])
                    .arg(fd.to_string())
                    .args(["--http", http, "--loop", "asyncio", "--lifespan", "on"])
                    .args(["--timeout-keep-alive", KEEP_ALIVE_SECS]);
            }
            AsgiServer::HypercornTls => {
                let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
                    .expect("a self-signed certificate");
                std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).expect("cert.pem");
                std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem())
                    .expect("key.pem");
                command
                    .args(["-m", "hypercorn", "openai_asgi_app:app", "--bind"])
                    .arg(format!("fd://{fd}"))
                    .args(["--certfile", "cert.pem", "--keyfile", "key.pem"])
                    .args(["--keep-alive", KEEP_ALIVE_SECS])
                    .args(["--access-logfile", "-", "--error-logfile", "-"]);
            }
        }
        command
            .env("PYTHONPATH", sdk::python_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env("CONFORMANCE_API_KEY", api_key)
            .env("CONFORMANCE_RECORD", dir.path().join(RECORD_FILE));
        let process = ServerProcess::spawn(
            server.name(),
            command,
            &dir.path().join("server.log"),
            Some(fd),
        );
        let mut asgi = Asgi {
            process,
            addr,
            server,
            dir,
            _listener: listener,
        };
        let record = asgi.record_path();
        asgi.process.wait_until("starting the app", || {
            std::fs::read_to_string(&record).is_ok_and(|text| text.contains(r#""type": "startup""#))
        });
        asgi
    }

    /// `host:port` as a client names this server: `localhost` for the TLS server (the name
    /// its certificate is for), the address otherwise.
    pub fn authority(&self) -> String {
        if self.server.tls() {
            format!("localhost:{}", self.addr.port())
        } else {
            self.addr.to_string()
        }
    }

    /// The provider `api_base`: `http://127.0.0.1:PORT/v1` or `https://localhost:PORT/v1`.
    pub fn base_url(&self) -> String {
        let scheme = if self.server.tls() { "https" } else { "http" };
        format!("{scheme}://{}/v1", self.authority())
    }

    /// The certificate to trust (through `SSL_CERT_FILE`) for the TLS server.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.server.tls().then(|| self.dir.path().join("cert.pem"))
    }

    /// What the app recorded per request, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        json_lines(&self.record_path())
            .into_iter()
            .filter(|event| event["type"] == "request")
            .collect()
    }

    /// [`Asgi::requests`] as the SDK assertions take them.
    pub fn relayed(&self) -> Vec<sdk::Relayed> {
        self.requests()
            .into_iter()
            .map(|record| sdk::Relayed {
                method: record["method"].as_str().unwrap_or_default().to_owned(),
                path: record["path"].as_str().unwrap_or_default().to_owned(),
                authorization: record["headers"]["authorization"]
                    .as_str()
                    .map(str::to_owned),
                body: record["body"].clone(),
            })
            .collect()
    }

    /// The server's own log, for failure messages.
    pub fn logs(&self) -> String {
        format!("--- {} log ---\n{}", self.server.name(), self.process.log())
    }

    fn record_path(&self) -> PathBuf {
        self.dir.path().join(RECORD_FILE)
    }
}
