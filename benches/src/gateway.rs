//! The gateway under test: finds (building it through cargo when missing or stale) the release
//! `aisix` binary, generates its config and resources files, starts it pinned to the gateway
//! CPUs, and waits for `/readyz`.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::{self, Child, CpuList};
use crate::{loadgen, logfile};

/// The gateway's serving mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ThreadPerCore,
    Shared,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ThreadPerCore => "tpc",
            Mode::Shared => "shared",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tpc" | "thread-per-core" => Ok(Mode::ThreadPerCore),
            "shared" => Ok(Mode::Shared),
            _ => Err(format!("{s:?} is not a mode (tpc or shared)")),
        }
    }
}

/// The API key the harness's client sends; handed to the gateway as `BENCH_KEY`.
pub const BENCH_KEY: &str = "sk-aisix-bench-0123456789";

/// The root of the workspace this harness was built from.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The `aisix` binary to run: `explicit` if given, else `cargo build --release -p aisix-server`
/// (a no-op when up to date) and the executable cargo reports. Cargo's JSON messages go to
/// `messages`; Ctrl-C stops the build.
pub fn binary(explicit: Option<&Path>, messages: &Path) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--aisix-bin {} does not exist", path.display());
        }
        // Legs start the gateway from their own folders: a relative path must not depend on it.
        return Ok(path.canonicalize()?);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("[bench] cargo build --release -p aisix-server (a no-op when up to date)");
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--release",
            "-p",
            "aisix-server",
            "--bin",
            "aisix",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(messages)?)
        .stderr(Stdio::inherit());
    let mut build = Child::spawn("cargo build", command, None)?;
    let status = loop {
        process::check_interrupted()?;
        if let Some(status) = build.try_exit() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !status.success() {
        bail!("building aisix failed ({status})");
    }
    let output = std::fs::read_to_string(messages)?;
    for line in output.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact"
            && message["target"]["name"] == "aisix"
            && let Some(exe) = message["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo built aisix-server but reported no aisix executable")
}

/// A port free right now on 127.0.0.1 (bound and released: the gateway is told its ports so the
/// harness needs no startup log line, which `log_level: warn` would hide).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `aisix_access_log_dropped_total` from the gateway's `/metrics` (0 while the page has no such
/// sample: nothing was ever dropped).
pub fn dropped_log_lines(metrics: SocketAddr) -> Result<u64> {
    let (status, page) = loadgen::fetch(metrics, "/metrics", Duration::from_secs(5))?;
    if status != 200 {
        bail!("/metrics answered {status}");
    }
    counter(&String::from_utf8_lossy(&page), DROPPED_LOG_LINES)
}

const DROPPED_LOG_LINES: &str = "aisix_access_log_dropped_total";

/// The value of an unlabelled counter on a Prometheus text page; 0 when absent.
fn counter(page: &str, name: &str) -> Result<u64> {
    let Some(value) = page.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
    }) else {
        return Ok(0);
    };
    let value: f64 = value
        .trim()
        .parse()
        .with_context(|| format!("{name} has a malformed value {value:?}"))?;
    Ok(value as u64)
}

/// One gateway configuration under test.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub mode: Mode,
    pub workers: usize,
    /// Prometheus listener and access log on (the default) or both off.
    pub observability: bool,
    pub cpus: Option<CpuList>,
    /// Extra environment (`--gateway-env`), applied after the harness's own is cleared.
    pub env: Vec<(String, String)>,
}

impl GatewaySpec {
    fn config(&self, addr: SocketAddr, metrics_addr: SocketAddr) -> String {
        format!(
            "# Generated by aisix-bench.\n\
             proxy:\n  addr: {addr}\n  thread_per_core: {tpc}\n  workers: {workers}\n\
             observability:\n  log_level: warn\n  access_log: {obs}\n  metrics:\n    prometheus: {{enabled: {obs}, addr: \"{metrics_addr}\"}}\n\
             upstream:\n  pool_max_idle_per_host: 1024\n\
             resources_file: resources.yaml\n",
            tpc = self.mode == Mode::ThreadPerCore,
            workers = self.workers,
            obs = self.observability,
        )
    }
}

fn resources(mock: SocketAddr) -> String {
    format!(
        "# Generated by aisix-bench.\n\
         _format_version: \"1\"\n\
         provider_keys:\n  - {{display_name: mock, provider: openai, api_base: \"http://{mock}/v1\"}}\n\
         models:\n  - {{display_name: bench, provider: openai, model_name: mock-model, provider_key: mock}}\n\
         api_keys:\n  - {{display_name: bench, key_env: BENCH_KEY, allowed_models: [\"*\"]}}\n"
    )
}

/// A running gateway.
pub struct Gateway {
    child: Child,
    pub addr: SocketAddr,
    /// The metrics listener, when observability is on.
    pub metrics_addr: Option<SocketAddr>,
    log: PathBuf,
}

impl Gateway {
    /// Writes `<dir>/config.yaml` and `<dir>/resources.yaml`, starts `bin` with them and waits
    /// until `/readyz` answers 200 and one chat completion goes through.
    pub fn start(bin: &Path, spec: &GatewaySpec, mock: SocketAddr, dir: &Path) -> Result<Gateway> {
        std::fs::create_dir_all(dir)?;
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let metrics_addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let config = dir.join("config.yaml");
        std::fs::write(&config, spec.config(addr, metrics_addr))?;
        std::fs::write(dir.join("resources.yaml"), resources(mock))?;
        let log = dir.join("aisix.log");

        let mut command = Command::new(bin);
        command.arg("--config").arg(&config);
        // The harness's own environment must not reconfigure the gateway under test.
        for (key, _) in std::env::vars_os() {
            if key
                .to_str()
                .is_some_and(|k| k.starts_with("AISIX_") || k == "RUST_LOG")
            {
                command.env_remove(key);
            }
        }
        command
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("BENCH_KEY", BENCH_KEY)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("aisix.stdout"))?)
            .stderr(std::fs::File::create(&log)?);
        let child = Child::spawn("the aisix gateway", command, spec.cpus.as_ref())?;
        let mut gateway = Gateway {
            child,
            addr,
            metrics_addr: spec.observability.then_some(metrics_addr),
            log,
        };
        gateway.wait_ready().with_context(|| gateway.log_tail())?;
        Ok(gateway)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    pub fn ensure_running(&mut self) -> Result<()> {
        self.child.ensure_running().with_context(|| self.log_tail())
    }

    /// SIGTERM and wait for the drain.
    pub fn stop(mut self) -> Result<()> {
        match self.child.stop(Duration::from_secs(15)) {
            Some(status) if status.success() => Ok(()),
            Some(status) => bail!("aisix exited with {status} on SIGTERM\n{}", self.log_tail()),
            None => bail!("aisix could not be stopped"),
        }
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let probe = loadgen::get_request(self.addr, "/readyz");
        loop {
            process::check_interrupted()?;
            self.child.ensure_running()?;
            if loadgen::one_request(self.addr, &probe, Duration::from_secs(2)).ok() == Some(200) {
                break;
            }
            if Instant::now() > deadline {
                bail!("aisix did not answer /readyz with 200 within 30 s");
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let request = loadgen::post_request(
            self.addr,
            "/v1/chat/completions",
            BENCH_KEY,
            crate::grid::UNARY_BODY,
        );
        let status = loadgen::one_request(self.addr, &request, Duration::from_secs(10))?;
        if status != 200 {
            bail!("a chat completion through aisix answered {status}, not 200");
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        format!(
            "aisix log ({}):\n{}",
            self.log.display(),
            logfile::tail(&self.log, 20)
        )
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.child.stop(Duration::from_secs(5));
        let _ = logfile::trim(&self.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dropped_lines_counter_is_read_from_a_metrics_page() {
        let page = "# HELP aisix_access_log_dropped_total lines\n\
                    # TYPE aisix_access_log_dropped_total counter\n\
                    aisix_access_log_dropped_total_other 9\n\
                    aisix_access_log_dropped_total 42\n";
        assert_eq!(counter(page, DROPPED_LOG_LINES).unwrap(), 42);
        assert_eq!(
            counter("aisix_build_info 1\n", DROPPED_LOG_LINES).unwrap(),
            0
        );
        assert!(counter("aisix_access_log_dropped_total x\n", DROPPED_LOG_LINES).is_err());
    }

    #[test]
    fn generated_config_passes_the_gateways_strict_loader() {
        let spec = GatewaySpec {
            mode: Mode::Shared,
            workers: 3,
            observability: false,
            cpus: None,
            env: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            spec.config(
                "127.0.0.1:4000".parse().unwrap(),
                "127.0.0.1:4001".parse().unwrap(),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("resources.yaml"),
            resources("127.0.0.1:9".parse().unwrap()),
        )
        .unwrap();

        let bootstrap = aisix_config::load_bootstrap(Some(&config), Vec::new()).unwrap();
        assert!(!bootstrap.proxy.thread_per_core);
        assert_eq!(bootstrap.proxy.workers.map(usize::from), Some(3));
        assert!(!bootstrap.observability.access_log);
        assert!(!bootstrap.observability.metrics.prometheus.enabled);
        assert_eq!(bootstrap.upstream.pool_max_idle_per_host, 1024);

        let resources_file = bootstrap.resources_file.unwrap();
        let env = |name: &str| (name == "BENCH_KEY").then(|| BENCH_KEY.to_owned());
        let resources = aisix_config::load_resources(&resources_file, &env).unwrap();
        assert_eq!(resources.models.len(), 1);
        assert_eq!(resources.api_keys.len(), 1);
    }
}
