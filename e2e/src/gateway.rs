//! Spawning the real `aisix` binary with a generated config, and watching it from outside:
//! its address (from the startup log), its threads (`/proc/<pid>/task/*/comm`), its exit.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The serving mode a test runs the gateway in: the gateway's own type.
pub use aisix_obs::metrics::labels::Mode;

/// Builds the `aisix` binary once per test process (through cargo, so it is never stale) and
/// returns its path. `AISIX_E2E_BIN` points at a prebuilt binary instead. Debug test builds get
/// the `test-hooks` feature (the worker-crash hook); a release build refuses that feature.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("AISIX_E2E_BIN") {
            return PathBuf::from(path);
        }
        let release = !cfg!(debug_assertions);
        build(if release {
            Profile::Release
        } else {
            Profile::DebugWithTestHooks
        })
    })
}

/// The release binary a user runs (`cargo build --release`), built once per test process.
/// `E2E_AISIX_RELEASE_BIN` points at one already built (scripts/test.sh builds it first, so a
/// CI run links the slow fat-LTO binary once).
pub fn release_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("E2E_AISIX_RELEASE_BIN") {
        Some(path) => PathBuf::from(path),
        None => build(Profile::Release),
    })
}

enum Profile {
    Release,
    DebugWithTestHooks,
}

fn build(profile: Profile) -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "-p", "aisix-server", "--bin", "aisix"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let profile_name = match profile {
        Profile::Release => {
            cargo.arg("--release");
            "release"
        }
        Profile::DebugWithTestHooks => {
            cargo.args(["--features", "test-hooks"]);
            "debug"
        }
    };
    let status = cargo.status().expect("run cargo to build aisix");
    assert!(status.success(), "building aisix ({profile_name}) failed");
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile-name>/aisix
    let target_dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    target_dir
        .join(profile_name)
        .join(format!("aisix{}", std::env::consts::EXE_SUFFIX))
}

/// What to start a gateway with. Sections are YAML text appended to the generated config.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub mode: Mode,
    /// `proxy.workers`; `None` leaves it unset.
    pub workers: Option<usize>,
    /// Extra keys under `proxy:` (indented two spaces by the caller).
    pub proxy_extra: String,
    /// Extra top-level YAML appended verbatim.
    pub extra: String,
    /// The resources file content, written beside the config and referenced by it.
    pub resources: Option<String>,
    /// Serve `/metrics` on an ephemeral port.
    pub metrics: bool,
    pub env: Vec<(String, String)>,
    /// Run under `taskset -c <cpus>`.
    pub taskset: Option<String>,
    /// Run this binary instead of [`binary`] (e.g. [`release_binary`]).
    pub binary: Option<PathBuf>,
}

impl GatewayConfig {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            workers: Some(2),
            proxy_extra: String::new(),
            extra: String::new(),
            resources: None,
            metrics: false,
            env: Vec::new(),
            taskset: None,
            binary: None,
        }
    }

    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
    }

    pub fn workers(mut self, workers: Option<usize>) -> Self {
        self.workers = workers;
        self
    }

    pub fn proxy(mut self, yaml: &str) -> Self {
        self.proxy_extra.push_str(yaml);
        self
    }

    pub fn extra(mut self, yaml: &str) -> Self {
        self.extra.push_str(yaml);
        self
    }

    pub fn resources(mut self, yaml: impl Into<String>) -> Self {
        self.resources = Some(yaml.into());
        self
    }

    /// [`resources::openai`](crate::resources::openai)'s file for `models` at `upstream`, its
    /// API key `k` being `key` (through the variable `E2E_OPENAI_KEY`).
    pub fn openai(self, upstream: &str, models: &[(&str, &str)], key: &str) -> Self {
        self.resources(crate::resources::openai(upstream, models, "E2E_OPENAI_KEY"))
            .env("E2E_OPENAI_KEY", key)
    }

    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn taskset(mut self, cpus: &str) -> Self {
        self.taskset = Some(cpus.to_owned());
        self
    }

    fn render(&self) -> String {
        let mut yaml = format!(
            "proxy:\n  addr: 127.0.0.1:0\n  thread_per_core: {}\n",
            self.mode.is_thread_per_core()
        );
        if let Some(workers) = self.workers {
            yaml.push_str(&format!("  workers: {workers}\n"));
        }
        yaml.push_str(&self.proxy_extra);
        if self.resources.is_some() {
            yaml.push_str("resources_file: resources.yaml\n");
        }
        let metrics_addr = if self.metrics {
            "127.0.0.1:0"
        } else {
            "127.0.0.1:1"
        };
        yaml.push_str(&format!(
            "observability:\n  log_level: info\n  metrics:\n    prometheus:\n      enabled: {}\n      addr: {metrics_addr}\n",
            self.metrics
        ));
        yaml.push_str(&self.extra);
        yaml
    }
}

/// One thread of a running gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// `comm`: `tpc-0`, `tokio-rt-worker`, `aisix`, …
    pub name: String,
    /// `Cpus_allowed_list` as the kernel prints it: `0-1`, `3`.
    pub cpus_allowed: String,
}

/// A running (or exited) gateway process. Killed on drop if still running.
pub struct Gateway {
    child: Child,
    /// The proxy address, known once the gateway logged it.
    pub addr: Option<SocketAddr>,
    /// The metrics listener address, when enabled.
    pub metrics_addr: Option<SocketAddr>,
    log: Arc<Mutex<String>>,
    /// The threads copying stdout and stderr into `log`; they end at the pipes' end of file.
    readers: Vec<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
    exit: Option<ExitStatus>,
}

impl Gateway {
    /// Starts a gateway and waits until it serves `/readyz`.
    pub fn start(config: &GatewayConfig) -> Gateway {
        let mut gateway = Self::spawn(config);
        let addr = gateway.wait_for_addr();
        gateway.addr = Some(addr);
        if config.metrics {
            gateway.metrics_addr = Some(gateway.wait_for_log_addr("metrics listening"));
        }
        gateway.wait_ready();
        gateway
    }

    /// Starts `command` like [`Gateway::spawn_command`] and waits until it serves `/readyz`.
    pub fn start_command(command: Command, dir: tempfile::TempDir) -> Gateway {
        let mut gateway = Self::spawn_command(command, dir);
        let addr = gateway.wait_for_addr();
        gateway.addr = Some(addr);
        gateway.wait_ready();
        gateway
    }

    /// Starts a gateway and waits only until it logs its address (for TLS listeners, which a
    /// plain-HTTP readiness probe cannot reach) and, when enabled, its metrics address.
    pub fn start_listening(config: &GatewayConfig) -> Gateway {
        let mut gateway = Self::spawn(config);
        let addr = gateway.wait_for_addr();
        gateway.addr = Some(addr);
        if config.metrics {
            gateway.metrics_addr = Some(gateway.wait_for_log_addr("metrics listening"));
        }
        gateway
    }

    /// Spawns a gateway without waiting for anything (for tests of startup failures).
    pub fn spawn(config: &GatewayConfig) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config.render()).expect("write config");
        if let Some(resources) = &config.resources {
            std::fs::write(dir.path().join("resources.yaml"), resources).expect("write resources");
        }
        let bin = config.binary.as_deref().unwrap_or_else(|| binary());
        Self::spawn_binary(
            bin,
            &config_path,
            &config.env,
            config.taskset.as_deref(),
            dir,
        )
    }

    /// Spawns `aisix --config <path>` with the given extra environment.
    pub fn spawn_with(
        config_path: &Path,
        env: &[(String, String)],
        taskset: Option<&str>,
        dir: tempfile::TempDir,
    ) -> Gateway {
        Self::spawn_binary(binary(), config_path, env, taskset, dir)
    }

    /// Spawns `<bin> --config <path>` with the given extra environment.
    pub fn spawn_binary(
        bin: &Path,
        config_path: &Path,
        env: &[(String, String)],
        taskset: Option<&str>,
        dir: tempfile::TempDir,
    ) -> Gateway {
        let mut command = match taskset {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        command.arg("--config").arg(config_path);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        Self::spawn_command(command, dir)
    }

    /// Spawns `command` (which runs aisix, perhaps through a wrapper such as `unshare`) and
    /// collects its output, like every other spawn.
    pub fn spawn_command(mut command: Command, dir: tempfile::TempDir) -> Gateway {
        // The test's own environment must not leak configuration (or a proxy for the loopback
        // providers) into the gateway: only the variables the command sets itself reach it, and
        // a test that wants a proxy sets it there.
        let set: Vec<std::ffi::OsString> =
            command.get_envs().map(|(key, _)| key.to_owned()).collect();
        for (key, _) in std::env::vars() {
            let proxy = key.to_ascii_lowercase().ends_with("_proxy");
            let leaks = key.starts_with("AISIX_") || key == "RUST_LOG" || proxy;
            if leaks && !set.iter().any(|s| *s == *key) {
                command.env_remove(key);
            }
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn aisix");
        let (log, readers) = capture_output(&mut child);
        Gateway {
            child,
            addr: None,
            metrics_addr: None,
            log,
            readers,
            dir,
            exit: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The proxy address; panics if the gateway was not started with [`Gateway::start`].
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("gateway address known")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// Everything the process wrote to stderr and stdout so far.
    pub fn logs(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// Waits until the log contains `needle`; false on timeout.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.logs().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The access-log line of the request with this `x-request-id`, once written (within ten
    /// seconds; the log is flushed every 100 ms).
    pub fn access_line(&self, request_id: &str) -> serde_json::Value {
        let needle = format!("\"request_id\":\"{request_id}\"");
        assert!(
            self.wait_for_log(&needle, Duration::from_secs(10)),
            "no access line for {request_id}:\n{}",
            self.logs()
        );
        let logs = self.logs();
        let line = logs
            .lines()
            .find(|l| l.contains(&needle) && l.contains("\"type\":\"access\""))
            .expect("the access line");
        serde_json::from_str(line).expect("an access line is JSON")
    }

    fn wait_for_addr(&mut self) -> SocketAddr {
        self.wait_for_log_addr("listening addr=")
    }

    /// Finds `addr=<socket addr>` on the first log line containing `marker`.
    pub fn wait_for_log_addr(&mut self, marker: &str) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let logs = self.logs();
            if let Some(line) = logs.lines().find(|l| l.contains(marker))
                && let Some(addr) = parse_addr(line)
            {
                return addr;
            }
            if let Some(status) = self.try_exit() {
                panic!("aisix exited ({status}) before logging {marker:?}:\n{logs}");
            }
            assert!(
                Instant::now() < deadline,
                "aisix did not log {marker:?} in time:\n{logs}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = self.addr();
        loop {
            if crate::client::blocking_get_status(addr, "/readyz") == Some(200) {
                return;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "aisix exited ({status}) before it was ready:\n{}",
                    self.logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "aisix not ready in time:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The names of the process's threads, from `/proc/<pid>/task/*/comm`.
    pub fn thread_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.threads().into_iter().map(|t| t.name).collect();
        names.sort();
        names
    }

    /// The process's threads: name and the CPUs each may run on, from
    /// `/proc/<pid>/task/<tid>/{comm,status}`.
    pub fn threads(&self) -> Vec<Thread> {
        let mut threads = Vec::new();
        let tasks = format!("/proc/{}/task", self.pid());
        for entry in std::fs::read_dir(tasks)
            .expect("read /proc/<pid>/task")
            .flatten()
        {
            let (Ok(comm), Ok(status)) = (
                std::fs::read_to_string(entry.path().join("comm")),
                std::fs::read_to_string(entry.path().join("status")),
            ) else {
                continue; // the thread ended meanwhile
            };
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default();
            threads.push(Thread {
                name: comm.trim_end().to_owned(),
                cpus_allowed: cpus,
            });
        }
        threads
    }

    /// Sends a signal (`libc::SIGTERM`, ...) to the process.
    pub fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.pid()).expect("pid fits i32");
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// The exit status if the process has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait");
        }
        self.exit
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                // The process is gone: its pipes end once drained, and with them the readers.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Collects a child's stdout and stderr, line by line, into one shared log: a reader thread per
/// stream, ending with the stream, returned so the caller can join them.
pub fn capture_output(child: &mut Child) -> (Arc<Mutex<String>>, Vec<std::thread::JoinHandle<()>>) {
    let log = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    for stream in [
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let log = log.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut log = log.lock().expect("log lock");
                log.push_str(&line);
                log.push('\n');
            }
        }));
    }
    (log, readers)
}

fn parse_addr(line: &str) -> Option<SocketAddr> {
    let start = line.find("addr=")? + "addr=".len();
    let rest = &line[start..];
    let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
    rest[..end].trim_matches('"').parse().ok()
}

/// The resident memory of process `pid`, in bytes (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS in /proc/<pid>/status")
        * 1024
}
