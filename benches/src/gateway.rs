//! The gateway under test: finds (building it through cargo when missing or stale) the release
//! `aisix` binary, generates its config and resources files, starts it pinned to the gateway
//! CPUs, and waits for `/readyz`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::{self, Child, CpuList};
use crate::{loadgen, logfile};

/// The gateway's serving mode: the gateway's own type.
pub use aisix_obs::metrics::labels::Mode;

/// A mode's name in leg names and on the command line: `tpc`, `shared`.
pub fn short_name(mode: Mode) -> &'static str {
    match mode {
        Mode::ThreadPerCore => "tpc",
        Mode::Shared => "shared",
    }
}

/// A mode from the command line: `tpc` (or `thread-per-core`) or `shared`.
pub fn parse_mode(text: &str) -> Result<Mode, String> {
    match text {
        "tpc" | "thread-per-core" => Ok(Mode::ThreadPerCore),
        "shared" => Ok(Mode::Shared),
        _ => Err(format!("{text:?} is not a mode (tpc or shared)")),
    }
}

/// The grid's leg for a serving mode: `aisix-tpc`, `aisix-shared`.
pub fn mode_leg(mode: Mode) -> String {
    format!("aisix-{}", short_name(mode))
}

/// The API key the harness's client sends; handed to the gateway as `BENCH_KEY`.
pub const BENCH_KEY: &str = "sk-aisix-bench-0123456789";

/// The root of the workspace this harness was built from.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// A prebuilt binary named by `flag`, as an absolute path.
pub fn prebuilt(path: &Path, flag: &str) -> Result<PathBuf> {
    if !path.is_file() {
        bail!("{flag} {} does not exist", path.display());
    }
    // Legs start the gateway from their own folders: a relative path must not depend on it.
    Ok(path.canonicalize()?)
}

/// The `aisix` binary to run: `explicit` if given, else `cargo build --release -p aisix-server`
/// (a no-op when up to date) and the executable cargo reports. Cargo's JSON messages go to
/// `messages`; Ctrl-C stops the build.
pub fn binary(explicit: Option<&Path>, messages: &Path, features: &[&str]) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return prebuilt(path, "--aisix-bin");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let features: Vec<String> = if features.is_empty() {
        Vec::new()
    } else {
        vec!["--features".into(), features.join(",")]
    };
    eprintln!(
        "[bench] cargo build --release -p aisix-server {} (a no-op when up to date)",
        features.join(" ")
    );
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
        .args(&features)
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
    Ok(free_ports::<1>()?[0])
}

/// `N` ports free right now on 127.0.0.1, all different: each is held bound until the last is
/// picked (two ports bound and released one after the other may be the same one, which once
/// gave a gateway's metrics listener its proxy's port).
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let held = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&held) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// What the harness reads from the gateway's `/metrics` at each window edge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsReading {
    /// `aisix_access_log_dropped_total` (0 while the page has no such sample: nothing was ever
    /// dropped).
    pub dropped_log_lines: u64,
    /// `aisix_worker_requests_total` by `worker` label, sorted by label.
    pub worker_requests: Vec<(String, u64)>,
    /// `aisix_otel_dropped_total` by `signal`.
    pub otel_dropped: Vec<(String, u64)>,
    /// `aisix_alloc_calls_total` and `aisix_alloc_bytes_total`: only a gateway built with the
    /// `count-alloc` feature has them.
    pub allocs: Option<(u64, u64)>,
    /// `aisix_worker_longest_delay_seconds`, in ms: the longest a worker was held since the
    /// previous read (only a gateway built with the `poll-probe` feature has it).
    pub longest_delay_ms: Option<f64>,
    /// `aisix_worker_longest_poll_seconds`, in ms: the longest single poll of a connection's
    /// task since the previous read (the same builds).
    pub longest_poll_ms: Option<f64>,
    /// `aisix_worker_longest_poll_cpu_seconds`, in ms: the most CPU one such poll took.
    pub longest_poll_cpu_ms: Option<f64>,
}

/// Reads the gateway's `/metrics` page.
pub fn read_metrics(metrics: SocketAddr) -> Result<MetricsReading> {
    let (status, page) = loadgen::fetch(metrics, "/metrics", Duration::from_secs(5))?;
    if status != 200 {
        bail!("/metrics answered {status}");
    }
    let page = String::from_utf8_lossy(&page);
    Ok(MetricsReading {
        dropped_log_lines: counter(&page, DROPPED_LOG_LINES)?,
        worker_requests: by_label(&page, WORKER_REQUESTS, "worker")?,
        otel_dropped: by_label(&page, "aisix_otel_dropped_total", "signal")?,
        allocs: match (
            sample(&page, "aisix_alloc_calls_total")?,
            sample(&page, "aisix_alloc_bytes_total")?,
        ) {
            (Some(calls), Some(bytes)) => Some((calls, bytes)),
            _ => None,
        },
        longest_delay_ms: gauge_ms(&page, "aisix_worker_longest_delay_seconds "),
        longest_poll_ms: gauge_ms(&page, "aisix_worker_longest_poll_seconds "),
        longest_poll_cpu_ms: gauge_ms(&page, "aisix_worker_longest_poll_cpu_seconds "),
    })
}

/// An unlabelled gauge in seconds (its name and a space given), in ms.
fn gauge_ms(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|seconds| seconds * 1e3)
}

const DROPPED_LOG_LINES: &str = "aisix_access_log_dropped_total";
const WORKER_REQUESTS: &str = "aisix_worker_requests_total";

/// The value of an unlabelled counter on a Prometheus text page; 0 when absent.
fn counter(page: &str, name: &str) -> Result<u64> {
    Ok(sample(page, name)?.unwrap_or(0))
}

/// The value of an unlabelled sample on a Prometheus text page, if it is there.
fn sample(page: &str, name: &str) -> Result<Option<u64>> {
    page.lines()
        .find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map(|value| parse_value(name, value))
        .transpose()
}

/// The samples of `name` with a single label `label`, by label value (sorted).
fn by_label(page: &str, name: &str, label: &str) -> Result<Vec<(String, u64)>> {
    let prefix = format!("{name}{{{label}=\"");
    let mut values = Vec::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((value_label, value)) = rest.split_once("\"} ") else {
            bail!("{name}: unexpected sample {line:?}");
        };
        values.push((value_label.to_owned(), parse_value(name, value)?));
    }
    values.sort();
    Ok(values)
}

fn parse_value(name: &str, value: &str) -> Result<u64> {
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
    /// `proxy.balance: handoff` (else `reuseport`).
    pub handoff: bool,
    /// `proxy.pin_workers`.
    pub pin_workers: bool,
    /// What the resources file holds besides the `bench` model.
    pub features: Features,
    /// Extra environment (`--gateway-env`), applied after the harness's own is cleared.
    pub env: Vec<(String, String)>,
    /// Start the floor proxy (`aisix-bench floor`, `floor.rs`) with this config instead of
    /// the gateway: the same serving settings, every request sent to the paced mock.
    pub floor: bool,
    /// A tool to run the process under (`aisix-bench instr`: valgrind and its options); empty:
    /// run it directly.
    pub wrap: Vec<std::ffi::OsString>,
}

/// Optional parts of the generated resources (and, for Redis, of the config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// A rate limit on the bench API key, high enough never to refuse, counted in memory or in
    /// a Redis server.
    pub limits: Option<Limits>,
    /// `bench-group`: a failover group whose healthy primary is `bench` (model groups, issue 9).
    pub group: bool,
    /// `bench-claude` on an `anthropic` provider key pointing at the mock (issue 10).
    pub anthropic: bool,
    /// `bench-responses` on an `openai` provider key at the mock that serves the Responses API
    /// (`responses: true`); `bench` stays on the chat-only key (issue 24).
    pub responses: bool,
    /// `bench-gemini` on a `gemini` provider key at the mock (`generateContent`, issue 26).
    pub gemini: bool,
    /// `bench-bedrock` on a `bedrock` provider key at the mock (Converse, SigV4-signed, issue 26).
    pub bedrock: bool,
    /// `bench-hostile`: the mock's hostile answers (one huge SSE event, one huge body), for the
    /// hostile-neighbour leg.
    pub hostile: bool,
}

/// Where the limiter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limits {
    Memory,
    Redis(SocketAddr),
    /// A Redis Cluster of three primaries (`ratelimit.redis.mode: cluster`).
    RedisCluster([SocketAddr; 3]),
}

/// The upstreams the generated resources point at.
#[derive(Debug, Clone, Copy)]
pub struct Upstreams {
    /// The paced mock: `bench` (and the group's and the Anthropic models).
    pub mock: SocketAddr,
    /// The bursty mock: `bench-burst`.
    pub burst: Option<SocketAddr>,
}

/// The model on the bursty mock.
pub const BURST_MODEL: &str = "bench-burst";
/// The failover group over `bench` (primary) and `bench-backup`.
pub const GROUP_MODEL: &str = "bench-group";
/// The model on the `anthropic` provider key.
pub const ANTHROPIC_MODEL: &str = "bench-claude";
/// The model on the mock's Responses-serving key.
pub const RESPONSES_MODEL: &str = "bench-responses";
/// The model on the `gemini` provider key.
pub const GEMINI_MODEL: &str = "bench-gemini";
/// The model on the `bedrock` provider key.
pub const BEDROCK_MODEL: &str = "bench-bedrock";
/// The model the mock answers with hostile answers (upstream name
/// [`aisix_testkit::mock::hostile::HOSTILE_MODEL`]).
pub const HOSTILE_MODEL: &str = "bench-hostile";

impl GatewaySpec {
    /// The thread-per-core or shared gateway the grid measures, with nothing optional on.
    pub fn new(
        mode: Mode,
        workers: usize,
        cpus: Option<CpuList>,
        env: Vec<(String, String)>,
    ) -> Self {
        Self {
            mode,
            workers,
            observability: true,
            cpus,
            handoff: false,
            pin_workers: false,
            features: Features::default(),
            env,
            floor: false,
            wrap: Vec::new(),
        }
    }

    /// The floor proxy on the same serving settings as [`GatewaySpec::new`]'s gateway; it has
    /// no metrics and no access log to switch on.
    pub fn floor(mode: Mode, workers: usize, cpus: Option<CpuList>) -> Self {
        Self {
            observability: false,
            floor: true,
            ..Self::new(mode, workers, cpus, Vec::new())
        }
    }

    fn config(&self, addr: SocketAddr, metrics_addr: SocketAddr) -> String {
        let ratelimit = match self.features.limits {
            Some(Limits::Redis(redis)) => {
                format!("ratelimit:\n  backend: redis\n  redis: {{url: \"redis://{redis}\"}}\n")
            }
            Some(Limits::RedisCluster(nodes)) => {
                let urls: Vec<String> = nodes.iter().map(|n| format!("redis://{n}")).collect();
                format!(
                    "ratelimit:\n  backend: redis\n  redis: {{mode: cluster, url: \"{}\"}}\n",
                    urls.join(",")
                )
            }
            _ => String::new(),
        };
        format!(
            "# Generated by aisix-bench.\n\
             proxy:\n  addr: {addr}\n  thread_per_core: {tpc}\n  workers: {workers}\n{balance}{pin}\
             observability:\n  log_level: warn\n  access_log: {obs}\n  metrics:\n    prometheus: {{enabled: {obs}, addr: \"{metrics_addr}\"}}\n\
             upstream:\n  pool_max_idle_per_host: 1024\n\
             {ratelimit}\
             resources_file: resources.yaml\n",
            tpc = self.mode == Mode::ThreadPerCore,
            workers = self.workers,
            // Written only when not the default, so that an earlier revision without these keys
            // (`aisix-bench instr --baseline-bin`, `compare`) reads the same config.
            balance = if self.handoff {
                "  balance: handoff\n"
            } else {
                ""
            },
            pin = if self.pin_workers {
                "  pin_workers: true\n"
            } else {
                ""
            },
            obs = self.observability,
        )
    }
}

fn resources(upstreams: &Upstreams, features: &Features) -> String {
    let mock = upstreams.mock;
    let mut keys =
        format!("  - {{display_name: mock, provider: openai, api_base: \"http://{mock}/v1\"}}\n");
    let mut models = String::from(
        "  - {display_name: bench, provider: openai, model_name: mock-model, provider_key: mock}\n",
    );
    if let Some(burst) = upstreams.burst {
        keys.push_str(&format!(
            "  - {{display_name: mock-burst, provider: openai, api_base: \"http://{burst}/v1\"}}\n"
        ));
        models.push_str(&format!(
            "  - {{display_name: {BURST_MODEL}, provider: openai, model_name: mock-model, provider_key: mock-burst}}\n"
        ));
    }
    if features.group {
        models.push_str(&format!(
            "  - {{display_name: bench-backup, provider: openai, model_name: mock-model, provider_key: mock}}\n\
             \x20 - display_name: {GROUP_MODEL}\n\
             \x20   routing:\n\
             \x20     strategy: failover\n\
             \x20     targets:\n\
             \x20       - {{model: bench, priority: 1}}\n\
             \x20       - {{model: bench-backup, priority: 0}}\n"
        ));
    }
    if features.anthropic {
        keys.push_str(&format!(
            "  - {{display_name: mock-anthropic, provider: anthropic, api_base: \"http://{mock}\"}}\n"
        ));
        models.push_str(&format!(
            "  - {{display_name: {ANTHROPIC_MODEL}, provider: anthropic, model_name: mock-claude, provider_key: mock-anthropic}}\n"
        ));
    }
    if features.responses {
        keys.push_str(&format!(
            "  - {{display_name: mock-responses, provider: openai, api_base: \"http://{mock}/v1\", responses: true}}\n"
        ));
        models.push_str(&format!(
            "  - {{display_name: {RESPONSES_MODEL}, provider: openai, model_name: mock-model, provider_key: mock-responses}}\n"
        ));
    }
    if features.gemini {
        keys.push_str(&format!(
            "  - {{display_name: mock-gemini, provider: gemini, api_key: bench-gemini-key, api_base: \"http://{mock}/v1beta\"}}\n"
        ));
        models.push_str(&format!(
            "  - {{display_name: {GEMINI_MODEL}, provider: gemini, model_name: mock-gemini, provider_key: mock-gemini}}\n"
        ));
    }
    if features.bedrock {
        keys.push_str(&format!(
            "  - {{display_name: mock-bedrock, provider: bedrock, region: us-east-1, access_key_id: AKIDBENCHBENCH, secret_access_key: bench-bedrock-secret, api_base: \"http://{mock}\"}}\n"
        ));
        models.push_str(&format!(
            "  - {{display_name: {BEDROCK_MODEL}, provider: bedrock, model_name: \"amazon.nova-lite-v1:0\", provider_key: mock-bedrock}}\n"
        ));
    }
    if features.hostile {
        models.push_str(&format!(
            "  - {{display_name: {HOSTILE_MODEL}, provider: openai, model_name: {}, provider_key: mock}}\n",
            aisix_testkit::mock::hostile::HOSTILE_MODEL
        ));
    }
    let limit = if features.limits.is_some() {
        ", rate_limit: {rpm: 4000000000, tpm: 4000000000000, concurrency: 1000000}"
    } else {
        ""
    };
    format!(
        "# Generated by aisix-bench.\n\
         _format_version: \"1\"\n\
         provider_keys:\n{keys}\
         models:\n{models}\
         api_keys:\n  - {{display_name: bench, key_env: BENCH_KEY, allowed_models: [\"*\"]{limit}}}\n"
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
    pub fn start(
        bin: &Path,
        spec: &GatewaySpec,
        upstreams: &Upstreams,
        dir: &Path,
    ) -> Result<Gateway> {
        std::fs::create_dir_all(dir)?;
        let [port, metrics_port] = free_ports()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let metrics_addr: SocketAddr = ([127, 0, 0, 1], metrics_port).into();
        let config = dir.join("config.yaml");
        std::fs::write(&config, spec.config(addr, metrics_addr))?;
        std::fs::write(
            dir.join("resources.yaml"),
            resources(upstreams, &spec.features),
        )?;
        let log = dir.join("aisix.log");

        let mut command = if spec.floor {
            let exe = std::env::current_exe().context("locate the aisix-bench executable")?;
            let mut command = Command::new(exe);
            command
                .arg("floor")
                .arg("--upstream")
                .arg(format!("http://{}", upstreams.mock));
            command
        } else {
            Command::new(bin)
        };
        command.arg("--config").arg(&config);
        let mut command = process::wrapped(command, &spec.wrap);
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
    fn ports_picked_together_are_all_different() {
        for _ in 0..200 {
            let [a, b, c] = free_ports().unwrap();
            assert!(a != b && b != c && a != c, "{a} {b} {c}");
        }
    }

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
    fn allocation_totals_are_read_from_the_page_the_count_alloc_gateway_renders() {
        let page = aisix_obs::alloc_count::render();
        assert!(sample(&page, "aisix_alloc_calls_total").unwrap().is_some());
        assert!(sample(&page, "aisix_alloc_bytes_total").unwrap().is_some());
        assert_eq!(
            sample("aisix_build_info 1\n", "aisix_alloc_calls_total").unwrap(),
            None
        );
    }

    #[test]
    fn requests_per_worker_are_read_by_label() {
        let page = "# TYPE aisix_worker_requests_total counter\n\
                    aisix_worker_requests_total{worker=\"tpc-1\"} 7\n\
                    aisix_worker_requests_total{worker=\"tpc-0\"} 12\n\
                    aisix_worker_requests_total_other{worker=\"tpc-0\"} 1\n";
        assert_eq!(
            by_label(page, WORKER_REQUESTS, "worker").unwrap(),
            [("tpc-0".to_owned(), 12), ("tpc-1".to_owned(), 7)]
        );
        assert!(by_label("", WORKER_REQUESTS, "worker").unwrap().is_empty());
    }

    /// Loads a generated config and its resources through the gateway's own strict loaders.
    fn load(
        spec: &GatewaySpec,
        upstreams: &Upstreams,
    ) -> (aisix_config::Bootstrap, aisix_config::Resources) {
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
            resources(upstreams, &spec.features),
        )
        .unwrap();
        let bootstrap = aisix_config::load_bootstrap(Some(&config), Vec::new()).unwrap();
        let resources_file = bootstrap.resources_file.clone().unwrap();
        let env = |name: &str| (name == "BENCH_KEY").then(|| BENCH_KEY.to_owned());
        let resources = aisix_config::load_resources(&resources_file, &env).unwrap();
        (bootstrap, resources)
    }

    #[test]
    fn generated_config_passes_the_gateways_strict_loader() {
        let mut spec = GatewaySpec::new(Mode::Shared, 3, None, Vec::new());
        spec.observability = false;
        let upstreams = Upstreams {
            mock: "127.0.0.1:9".parse().unwrap(),
            burst: None,
        };
        let (bootstrap, resources) = load(&spec, &upstreams);
        assert!(!bootstrap.proxy.thread_per_core);
        assert_eq!(bootstrap.proxy.workers.map(usize::from), Some(3));
        assert_eq!(bootstrap.proxy.balance, aisix_config::Balance::ReusePort);
        assert!(!bootstrap.proxy.pin_workers);
        assert!(!bootstrap.observability.access_log);
        assert!(!bootstrap.observability.metrics.prometheus.enabled);
        assert_eq!(bootstrap.upstream.pool_max_idle_per_host, 1024);
        assert_eq!(resources.models.len(), 1);
        assert_eq!(resources.api_keys.len(), 1);
        assert!(resources.api_keys[0].rate_limit.is_empty());
    }

    /// The knobs and features the gateway knows today. The Anthropic provider (issue 10 phase
    /// 2) is written in the shape that issue specifies and is only loadable by a gateway that
    /// has it, so it is not checked here.
    #[test]
    fn generated_knobs_burst_model_group_and_limits_pass_the_strict_loader() {
        let mut spec = GatewaySpec::new(Mode::ThreadPerCore, 2, None, Vec::new());
        spec.handoff = true;
        spec.pin_workers = true;
        spec.features.group = true;
        spec.features.hostile = true;
        let upstreams = Upstreams {
            mock: "127.0.0.1:9".parse().unwrap(),
            burst: Some("127.0.0.1:10".parse().unwrap()),
        };
        for limits in [
            Limits::Memory,
            Limits::Redis("127.0.0.1:6390".parse().unwrap()),
            Limits::RedisCluster([
                "127.0.0.1:7000".parse().unwrap(),
                "127.0.0.1:7001".parse().unwrap(),
                "127.0.0.1:7002".parse().unwrap(),
            ]),
        ] {
            spec.features.limits = Some(limits);
            let (bootstrap, resources) = load(&spec, &upstreams);
            assert_eq!(bootstrap.proxy.balance, aisix_config::Balance::Handoff);
            assert!(bootstrap.proxy.pin_workers);
            assert!(
                resources
                    .models
                    .iter()
                    .any(|m| m.display_name == BURST_MODEL)
            );
            assert!(
                resources
                    .groups
                    .iter()
                    .any(|g| g.display_name == GROUP_MODEL)
            );
            assert!(
                resources
                    .models
                    .iter()
                    .any(|m| m.display_name == HOSTILE_MODEL
                        && m.model_name == aisix_testkit::mock::hostile::HOSTILE_MODEL)
            );
            assert!(!resources.api_keys[0].rate_limit.is_empty());
            let redis = matches!(
                bootstrap.ratelimit.backend,
                aisix_config::RateLimitBackend::Redis(_)
            );
            assert_eq!(
                redis,
                matches!(limits, Limits::Redis(_) | Limits::RedisCluster(_))
            );
            if let aisix_config::RateLimitBackend::Redis(config) = &bootstrap.ratelimit.backend {
                assert_eq!(
                    matches!(config.mode, aisix_config::RedisMode::Cluster(_)),
                    matches!(limits, Limits::RedisCluster(_))
                );
            }
        }
    }
}
