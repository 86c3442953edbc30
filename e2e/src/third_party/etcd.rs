//! etcd (Debian's `etcd-server`) on free loopback ports, its data in a temp dir, driven with
//! `etcdctl` (Debian's `etcd-client`): the resources store a fleet of gateways watches. Tests
//! stop it and start it again on the same ports with the same data. With [`EtcdTls`] its
//! client port speaks TLS only, and with a client pair demands mutual TLS.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use super::{ServerProcess, free_port};

/// An etcd server; stopped on drop.
pub struct Etcd {
    process: Option<ServerProcess>,
    pub addr: SocketAddr,
    peer: SocketAddr,
    dir: tempfile::TempDir,
    tls: Option<EtcdTls>,
}

/// TLS on etcd's client port (the peer port stays plain: one member, on loopback).
#[derive(Clone)]
pub struct EtcdTls {
    /// The CA that signed `cert` (and, with `client`, every client certificate etcd accepts).
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Mutual TLS: etcd demands a client certificate signed by `ca`; `etcdctl` presents this
    /// pair (certificate, key).
    pub client: Option<(PathBuf, PathBuf)>,
}

/// `name` on `PATH`, else Debian's `/usr/bin/<name>`. Panics, saying how to install it.
fn tool(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "{name} is not installed: `bash scripts/test.sh` installs it \
             (apt-get install etcd-server etcd-client)"
        )
    })
}

impl Etcd {
    /// Starts etcd on free ports of 127.0.0.1 and waits until it answers.
    pub fn start() -> Etcd {
        Etcd::start_with(None)
    }

    /// Starts etcd whose client port speaks only TLS, as `tls` says.
    pub fn start_tls(tls: EtcdTls) -> Etcd {
        Etcd::start_with(Some(tls))
    }

    fn start_with(tls: Option<EtcdTls>) -> Etcd {
        let mut etcd = Etcd {
            process: None,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            peer: SocketAddr::from(([127, 0, 0, 1], free_port())),
            dir: tempfile::tempdir().expect("temp dir for etcd"),
            tls,
        };
        etcd.restart();
        etcd
    }

    /// `http://127.0.0.1:PORT`, or `https://` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops the server (`SIGTERM`, waited for); its data stays.
    pub fn stop(&mut self) {
        drop(self.process.take());
    }

    /// Starts the server (again) on the same ports with the same data, and waits until it
    /// answers.
    pub fn restart(&mut self) {
        self.stop();
        let client = self.url();
        let peer = format!("http://{}", self.peer);
        let mut command = Command::new(tool("etcd"));
        command
            .args(["--name", "aisix-test"])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("aisix-test={peer}")])
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
            if tls.client.is_some() {
                command
                    .arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(&tls.ca);
            }
        }
        let log = self.dir.path().join("etcd.log");
        let mut process = ServerProcess::spawn("etcd", command, &log, None);
        let endpoint = self.url();
        let credentials = self.credentials();
        process.wait_until("answering", || {
            ctl(&endpoint, &credentials, &["endpoint", "health"]).is_ok()
        });
        self.process = Some(process);
    }

    /// Runs `etcdctl <args>` against this server; its stdout, or panics with its stderr.
    pub fn ctl(&self, args: &[&str]) -> String {
        ctl(&self.url(), &self.credentials(), args)
            .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"))
    }

    /// `etcdctl`'s TLS flags: the CA, and the client pair for mutual TLS.
    fn credentials(&self) -> Vec<OsString> {
        let Some(tls) = &self.tls else {
            return Vec::new();
        };
        let mut flags = vec!["--cacert".into(), tls.ca.clone().into()];
        if let Some((cert, key)) = &tls.client {
            flags.extend(["--cert".into(), cert.clone().into()]);
            flags.extend(["--key".into(), key.clone().into()]);
        }
        flags
    }

    pub fn put(&self, key: &str, value: &str) {
        self.ctl(&["put", key, value]);
    }

    pub fn delete(&self, key: &str) {
        self.ctl(&["del", key]);
    }

    /// The value at `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.ctl(&["get", key, "--print-value-only"]);
        let value = out.trim_end_matches('\n');
        (!value.is_empty()).then(|| value.to_owned())
    }

    /// The store's current revision.
    pub fn revision(&self) -> i64 {
        let out = self.ctl(&[
            "get",
            "/",
            "--prefix",
            "--keys-only",
            "--limit",
            "1",
            "-w",
            "json",
        ]);
        let json: serde_json::Value = serde_json::from_str(&out).expect("etcdctl json");
        json["header"]["revision"].as_i64().expect("revision")
    }

    /// Compacts the history up to the current revision.
    pub fn compact(&self) {
        let revision = self.revision();
        self.ctl(&["compact", &revision.to_string(), "--physical"]);
    }

    /// Every key under `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.ctl(&["get", prefix, "--prefix", "--keys-only"])
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(ServerProcess::log)
            .unwrap_or_default()
    }
}

fn ctl(endpoint: &str, credentials: &[OsString], args: &[&str]) -> Result<String, String> {
    let output = Command::new(tool("etcdctl"))
        .arg("--endpoints")
        .arg(endpoint)
        .args(credentials)
        .args(["--dial-timeout", "2s", "--command-timeout", "5s"])
        .args(args)
        .env("ETCDCTL_API", "3")
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}
