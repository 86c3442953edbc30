//! An OTLP/HTTP receiver built on OpenTelemetry's own protobuf definitions
//! (`e2e/python/otlp_receiver.py`, the `opentelemetry-proto` package): it records every span
//! and log record it decodes, and can be stalled (SIGSTOP), stopped (its port closed), and
//! made to refuse (503) to test the exporter's faults. [`Receiver::start_grpc`] starts it as
//! an OTLP/gRPC collector instead (grpcio, with opentelemetry-proto's service stubs).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ServerProcess, json_lines, listener};
use crate::sdk;

const RECORD_FILE: &str = "otlp.jsonl";

/// How a gRPC receiver speaks: plain, over TLS, over mutual TLS.
#[derive(Clone, Copy)]
enum Tls {
    None,
    OneWay,
    Mutual,
}

/// A running receiver; stopped on drop.
pub struct Receiver {
    process: Option<ServerProcess>,
    listener: Option<TcpListener>,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts the receiver on an ephemeral 127.0.0.1 port and waits until it serves.
    pub fn start() -> Receiver {
        let dir = tempfile::tempdir().expect("temp dir for the OTLP receiver");
        let listener = listener();
        let addr = listener.local_addr().expect("listener address");
        let mut receiver = Receiver {
            process: None,
            listener: None,
            addr,
            dir,
        };
        receiver.spawn(listener);
        receiver
    }

    /// Starts the receiver as an OTLP/gRPC collector, on a 127.0.0.1 port it binds itself
    /// (grpcio takes no socket), and waits until it serves. It cannot be stopped and
    /// restarted.
    pub fn start_grpc() -> Receiver {
        Self::grpc(false)
    }

    /// [`Receiver::start_grpc`] over TLS, with a new self-signed certificate for `localhost`
    /// ([`Receiver::certificate`]).
    pub fn start_grpc_tls() -> Receiver {
        Self::grpc(true)
    }

    /// [`Receiver::start_grpc_tls`], with a certificate its own CA signed
    /// ([`Receiver::authority`]), asking every client for one the same CA signed (mutual
    /// TLS; [`Receiver::client_identity`] is one).
    pub fn start_grpc_mtls() -> Receiver {
        Self::grpc_with(Tls::Mutual)
    }

    /// The certificate a TLS receiver serves, to trust (`SSL_CERT_FILE`).
    pub fn certificate(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The CA that signed a mutual-TLS receiver's certificate and the clients' it accepts.
    pub fn authority(&self) -> PathBuf {
        self.dir.path().join("collector-ca.pem")
    }

    /// A client certificate and key the mutual-TLS receiver accepts (common name
    /// `aisix-exporter`).
    pub fn client_identity(&self) -> (PathBuf, PathBuf) {
        let dir = self.dir.path();
        (
            dir.join("aisix-exporter.pem"),
            dir.join("aisix-exporter-key.pem"),
        )
    }

    fn grpc(tls: bool) -> Receiver {
        Self::grpc_with(if tls { Tls::OneWay } else { Tls::None })
    }

    fn grpc_with(tls: Tls) -> Receiver {
        let dir = tempfile::tempdir().expect("temp dir for the OTLP receiver");
        match tls {
            Tls::None => {}
            Tls::OneWay => {
                crate::tls::self_signed(dir.path());
            }
            Tls::Mutual => {
                let authority = crate::tls::Authority::new(dir.path(), "collector");
                let (cert, key) = authority.issue("localhost-collector");
                std::fs::rename(cert, dir.path().join("cert.pem")).expect("cert.pem");
                std::fs::rename(key, dir.path().join("key.pem")).expect("key.pem");
                std::fs::copy(&authority.cert, dir.path().join("client-ca.pem"))
                    .expect("client-ca.pem");
                authority.issue("aisix-exporter");
            }
        }
        let mut receiver = Receiver {
            process: None,
            listener: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
        };
        let mode = match tls {
            Tls::None => "grpc",
            Tls::OneWay => "grpc-tls",
            Tls::Mutual => "grpc-mtls",
        };
        receiver.process = Some(receiver.run(mode, None));
        let port = json_lines(&receiver.record_path())
            .iter()
            .find_map(|l| l["port"].as_u64())
            .expect("the gRPC receiver names its port");
        receiver.addr.set_port(u16::try_from(port).expect("a port"));
        receiver
    }

    fn spawn(&mut self, listener: TcpListener) {
        let fd = listener.as_raw_fd();
        self.process = Some(self.run(&fd.to_string(), Some(fd)));
        self.listener = Some(listener);
    }

    /// Runs the receiver script with `arg` (a listening fd, passed on, or `grpc`) until it
    /// has written its startup line.
    fn run(&self, arg: &str, fd: Option<i32>) -> ServerProcess {
        let mut command = Command::new(sdk::python());
        command
            .current_dir(self.dir.path())
            .arg(sdk::python_dir().join("otlp_receiver.py"))
            .arg(arg)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env("OTLP_RECORD", self.record_path());
        let before = self.startups();
        let mut process = ServerProcess::spawn(
            "otlp receiver",
            command,
            &self.dir.path().join("receiver.log"),
            fd,
        );
        let record = self.record_path();
        process.wait_until("serving", || {
            json_lines(&record)
                .iter()
                .filter(|l| l["signal"] == "startup")
                .count()
                > before
        });
        process
    }

    fn startups(&self) -> usize {
        json_lines(&self.record_path())
            .iter()
            .filter(|l| l["signal"] == "startup")
            .count()
    }

    fn record_path(&self) -> PathBuf {
        self.dir.path().join(RECORD_FILE)
    }

    /// The base URL an exporter is given (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span or log record received so far (`signal`: `traces` or `logs`).
    pub fn records(&self, signal: &str) -> Vec<Value> {
        json_lines(&self.record_path())
            .into_iter()
            .filter(|l| l["signal"] == signal)
            .collect()
    }

    /// The records of `signal` once `done` holds for them; panics after `timeout`.
    pub fn wait_for(
        &self,
        signal: &str,
        timeout: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.records(signal);
            if done(&records) {
                return records;
            }
            assert!(
                Instant::now() < deadline,
                "the OTLP receiver did not get the expected {signal} within {timeout:?}; it has:\n{}",
                serde_json::to_string_pretty(&records).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the receiver: connections are still accepted by the kernel, never answered.
    pub fn stall(&self) {
        if let Some(process) = &self.process {
            process.pause();
        }
    }

    pub fn resume(&self) {
        if let Some(process) = &self.process {
            process.resume();
        }
    }

    /// Answers every export with 503 (`on`), or decodes them again.
    pub fn refuse(&self, on: bool) {
        let flag = self.dir.path().join("refuse");
        if on {
            std::fs::write(flag, b"").expect("write the refuse flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// Accepts every export in part from now on: its reply's partial success rejects
    /// `rejected` records, for `message` (`None`: accepts every export whole again).
    pub fn accept_in_part(&self, partial: Option<(u64, &str)>) {
        let flag = self.dir.path().join("partial");
        match partial {
            Some((rejected, message)) => {
                let spec = serde_json::json!({"rejected": rejected, "message": message});
                std::fs::write(flag, spec.to_string()).expect("write the partial flag");
            }
            None => {
                let _ = std::fs::remove_file(flag);
            }
        }
    }

    /// Refuses the next export as a throttling collector does, asking for a wait of
    /// `seconds`: 429 with `Retry-After` over HTTP, RESOURCE_EXHAUSTED with a `RetryInfo`
    /// over gRPC.
    pub fn throttle_next(&self, seconds: u64) {
        std::fs::write(self.dir.path().join("throttle"), seconds.to_string())
            .expect("write the throttle flag");
    }

    /// Over gRPC, refuses every export RESOURCE_EXHAUSTED with no `RetryInfo` (`on`), or
    /// accepts them again.
    pub fn exhaust(&self, on: bool) {
        let flag = self.dir.path().join("exhausted");
        if on {
            std::fs::write(flag, b"").expect("write the exhausted flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// Over HTTP, pads every reply with 100 KiB past its message (`on`), or not.
    pub fn long_replies(&self, on: bool) {
        let flag = self.dir.path().join("long");
        if on {
            std::fs::write(flag, b"").expect("write the long flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// Every export the receiver was sent, in order: `kind` (`traces`, `logs`), `at` (Unix
    /// seconds), `answered` (`accepted`, `throttled`, `exhausted`, `refused`).
    pub fn tries(&self) -> Vec<Value> {
        self.records("try")
    }

    /// Stops the receiver and closes its port: connections are refused.
    pub fn stop(&mut self) {
        self.process = None;
        self.listener = None;
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).expect("bind the receiver's port again");
        self.spawn(listener);
    }
}
