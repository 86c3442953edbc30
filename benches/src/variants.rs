//! The legs beside the grid that each price one serving choice or feature (issue 13): how
//! evenly workers share connections (`balance: handoff` vs `reuseport` vs shared mode, many
//! trials), pinned workers, a bursty upstream's streams against nginx (CPU and writes per
//! stream), peak RSS at high concurrency on one worker, a model group with a healthy primary vs
//! the direct model, the limiter counting in memory and in Redis, the Anthropic endpoints, and
//! the Responses API relayed and translated.
//! Each compares against a leg of the same run.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::args::CommaList;
use crate::gateway::{
    self, ANTHROPIC_MODEL, BEDROCK_MODEL, BENCH_KEY, BURST_MODEL, GEMINI_MODEL, GROUP_MODEL,
    Gateway, GatewaySpec, Limits, Mode, RESPONSES_MODEL, Upstreams,
};
use crate::grid::{Legs, UNARY_BODY};
use crate::loadgen::{self, Workload};
use crate::measure::{Rig, Subject, Timing};
use crate::mock::Mock;
use crate::nginx::Nginx;
use crate::process::{self, Child, CpuList};
use crate::report::{self, Pair, Results};

const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";
const RESPONSES: &str = "/v1/responses";

#[derive(Debug, Clone, clap::Args)]
pub struct VariantArgs {
    /// Gateway workers in the balance leg (handoff vs reuseport vs shared mode).
    #[arg(long, default_value_t = 2)]
    pub balance_workers: usize,
    /// CPUs for the balance leg's gateway [default: --gateway-cpus].
    #[arg(long)]
    pub balance_cpus: Option<CpuList>,
    /// Connections per balance point.
    #[arg(long, default_value = "2,4,8")]
    pub balance_concurrency: CommaList<usize>,
    /// Trials per balance point, each on fresh connections (so the kernel hashes them anew).
    #[arg(long, default_value_t = 20)]
    pub balance_trials: usize,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub balance_window: Duration,
    #[arg(long)]
    pub no_balance: bool,
    /// Connections in the feature legs (pinned workers, group, limiter, Anthropic); compared
    /// with the grid's leg at the same concurrency.
    #[arg(long, default_value = "32")]
    pub feature_concurrency: CommaList<usize>,
    /// Skip the `proxy.pin_workers: true` leg.
    #[arg(long)]
    pub no_pin: bool,
    /// Skip the model-group leg.
    #[arg(long)]
    pub no_group: bool,
    /// Limiter legs: where the limiter counts (memory, redis, cluster: a three-node Redis
    /// Cluster the harness starts).
    #[arg(long, default_value = "memory,redis")]
    pub limits: CommaList<LimiterStore>,
    #[arg(long)]
    pub no_limits: bool,
    /// The redis-server binary [default: redis-server on PATH].
    #[arg(long)]
    pub redis_bin: Option<PathBuf>,
    /// The Anthropic leg: `/v1/messages` passthrough and both translated paths beside the
    /// OpenAI passthrough (needs a gateway with the `anthropic` provider and `/v1/messages`).
    #[arg(long)]
    pub anthropic: bool,
    /// The Responses leg: `/v1/responses` relayed to a key that serves it and translated to
    /// chat completions, each beside the OpenAI chat passthrough.
    #[arg(long)]
    pub responses: bool,
    /// The providers leg: chat completions translated to Gemini's `generateContent` and to
    /// Bedrock's Converse (signed with SigV4) beside
    /// the OpenAI chat passthrough, unary (the feature grid) and streamed (the streaming leg).
    #[arg(long)]
    pub providers: bool,
    /// Connections in the one-worker peak-RSS leg (0: skip it).
    #[arg(long, default_value_t = 512)]
    pub rss_concurrency: usize,
    /// Connections in the OpenTelemetry legs (export on, and to a stalled collector), each
    /// compared with the grid's leg at the same concurrency.
    #[arg(long, default_value = "32,512")]
    pub otel_concurrency: CommaList<usize>,
    /// CPUs for the gateway's control thread (its main thread, which runs the OTLP exporter)
    /// in the OpenTelemetry legs, apart from its workers' [default: with them, on
    /// --gateway-cpus].
    #[arg(long)]
    pub otel_control_cpus: Option<CpuList>,
    /// Skip the OpenTelemetry legs.
    #[arg(long)]
    pub no_otel: bool,
    /// Skip the bursty-upstream streaming leg.
    #[arg(long)]
    pub no_burst: bool,
    /// Skip the hostile-neighbour leg.
    #[arg(long)]
    pub no_hostile: bool,
    /// Hostile neighbour: the size of the one SSE event it asks for, in MiB.
    #[arg(long, default_value_t = 50)]
    pub hostile_event_mib: usize,
    /// Hostile neighbour: the size of the non-streaming body it asks for, in MB (10^6 bytes).
    #[arg(long, default_value_t = 100)]
    pub hostile_body_mb: usize,
}

impl VariantArgs {
    pub fn apply_smoke(&mut self) {
        self.balance_concurrency = CommaList(vec![2]);
        self.balance_trials = self.balance_trials.min(2);
        self.balance_window = Duration::from_millis(300);
        self.feature_concurrency = CommaList(vec![8]);
        self.otel_concurrency = CommaList(vec![8]);
        self.rss_concurrency = self.rss_concurrency.min(32);
        self.hostile_event_mib = self.hostile_event_mib.min(4);
        self.hostile_body_mb = self.hostile_body_mb.min(8);
    }
}

/// Where the limiter counts in a limiter leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimiterStore {
    Memory,
    Redis,
    /// A three-node Redis Cluster the harness starts.
    Cluster,
}

impl std::str::FromStr for LimiterStore {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "memory" => Ok(LimiterStore::Memory),
            "redis" => Ok(LimiterStore::Redis),
            "cluster" => Ok(LimiterStore::Cluster),
            _ => Err(format!(
                "{s:?} is not a limiter store (memory, redis or cluster)"
            )),
        }
    }
}

/// The balance leg's gateways: (name, mode, handoff).
const BALANCE: [(&str, Mode, bool); 3] = [
    ("tpc-reuseport", Mode::ThreadPerCore, false),
    ("tpc-handoff", Mode::ThreadPerCore, true),
    ("shared", Mode::Shared, false),
];

/// The leg name of a balance gateway.
pub fn balance_leg(name: &str) -> String {
    format!("{}{name}", report::BALANCE_PREFIX)
}

/// A started gateway as a load subject.
fn subject(leg: &str, workers: usize, gateway: &Gateway) -> Subject {
    Subject {
        leg: leg.to_owned(),
        workers,
        pids: vec![gateway.pid()],
        addr: gateway.addr,
        metrics: gateway.metrics_addr,
    }
}

fn chat_body(model: &str) -> String {
    UNARY_BODY.replace("\"bench\"", &format!("\"{model}\""))
}

/// A one-turn Responses request, `store: false` as Codex sends it (nothing kept by either path).
fn responses_body(model: &str) -> String {
    format!(r#"{{"model":"{model}","input":"hello","store":false}}"#)
}

fn messages_body(model: &str) -> String {
    format!(
        r#"{{"model":"{model}","max_tokens":64,"messages":[{{"role":"user","content":"hello"}}]}}"#
    )
}

/// One variant leg, run with the results it adds to.
type Leg<'a> = Box<dyn Fn(&mut Results) -> Result<()> + 'a>;

impl Legs<'_> {
    /// Every variant leg asked for, in order; a failed leg becomes a note.
    pub(crate) fn variants(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let v = &self.args.variants;
        let base_mode = self
            .args
            .modes
            .0
            .first()
            .copied()
            .unwrap_or(Mode::ThreadPerCore);
        let mut legs: Vec<(String, Leg<'_>)> = Vec::new();
        if !v.no_balance {
            legs.push(("balance".into(), Box::new(|r| self.balance(bin, r))));
        }
        if !v.no_pin {
            legs.push(("pinned".into(), Box::new(|r| self.pinned(bin, r))));
        }
        if v.rss_concurrency > 0 {
            legs.push(("rss".into(), Box::new(|r| self.rss(bin, r))));
        }
        if !v.no_group {
            legs.push((
                "group".into(),
                Box::new(move |r| self.group(bin, base_mode, r)),
            ));
        }
        if !v.no_limits {
            for &store in &v.limits.0 {
                legs.push((
                    format!("limiter-{store:?}").to_lowercase(),
                    Box::new(move |r| self.limiter(bin, base_mode, store, r)),
                ));
            }
        }
        if v.anthropic {
            legs.push((
                "anthropic".into(),
                Box::new(move |r| self.anthropic(bin, base_mode, r)),
            ));
        }
        if v.responses {
            legs.push((
                "responses".into(),
                Box::new(move |r| self.responses(bin, base_mode, r)),
            ));
        }
        if v.providers {
            legs.push((
                "providers".into(),
                Box::new(move |r| self.providers(bin, base_mode, r)),
            ));
        }
        if !v.no_otel {
            legs.push((
                "otel".into(),
                Box::new(move |r| self.otel(bin, base_mode, r)),
            ));
        }
        if !v.no_burst && self.args.streams > 0 {
            legs.push(("burst".into(), Box::new(|r| self.burst(bin, r))));
        }
        if !v.no_hostile {
            legs.push(("hostile".into(), Box::new(|r| self.hostile(bin, r))));
        }
        for (name, leg) in legs {
            if let Err(error) = leg(results) {
                process::check_interrupted()?;
                eprintln!("[bench] leg {name} failed: {error:#}");
                results.notes.push(format!("leg {name} failed: {error:#}"));
            }
        }
        Ok(())
    }

    fn spec(&self, mode: Mode, workers: usize, cpus: Option<CpuList>) -> GatewaySpec {
        GatewaySpec::new(mode, workers, cpus, self.args.gateway_env.clone())
    }

    fn start(&self, bin: &Path, spec: &GatewaySpec, leg: &str) -> Result<Gateway> {
        let upstreams = Upstreams {
            mock: self.rig.mock.addr,
            burst: None,
        };
        let dir = self.work.join(leg.replace([' ', '+'], "_"));
        let gateway = Gateway::start(bin, spec, &upstreams, &dir)?;
        eprintln!(
            "[bench] {leg}: aisix pid {} on {}",
            gateway.pid(),
            gateway.addr
        );
        Ok(gateway)
    }

    /// Feature-leg grid: own load generator only, at `--feature-concurrency`.
    fn features_grid(
        &self,
        subject: &Subject,
        path: &str,
        body: &str,
        results: &mut Results,
    ) -> Result<()> {
        let concurrency = &self.args.variants.feature_concurrency.0;
        self.grid_with(subject, path, body, concurrency, false, results)
    }

    /// Each balance gateway with `--balance-workers` workers; at each concurrency,
    /// `--balance-trials` windows, each on fresh connections.
    fn balance(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let v = &self.args.variants;
        let cpus = v
            .balance_cpus
            .clone()
            .or_else(|| self.args.gateway_cpus.clone());
        let timing = Timing {
            warmup: Duration::from_millis(300),
            window: v.balance_window,
            reps: 1,
        };
        for (name, mode, handoff) in BALANCE {
            let leg = balance_leg(name);
            let mut spec = self.spec(mode, v.balance_workers, cpus.clone());
            spec.handoff = handoff;
            let mut gateway = self.start(bin, &spec, &leg)?;
            let subject = subject(&leg, spec.workers, &gateway);
            let request = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, UNARY_BODY);
            for &c in &v.balance_concurrency.0 {
                for trial in 1..=v.balance_trials.max(1) {
                    let mut rows =
                        self.rig
                            .unary(&subject, &request, c, &timing, &mut results.notes)?;
                    for row in &mut rows {
                        row.rep = trial;
                    }
                    self.progress(&rows);
                    results.windows.extend(rows);
                }
                gateway.ensure_running()?;
            }
            gateway.stop()?;
        }
        Ok(())
    }

    /// `proxy.pin_workers: true` (thread-per-core) against the grid's unpinned `aisix-tpc`.
    fn pinned(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let base = gateway::mode_leg(Mode::ThreadPerCore);
        let leg = format!("{base}-pinned");
        let mut spec = self.spec(
            Mode::ThreadPerCore,
            self.workers(),
            self.args.gateway_cpus.clone(),
        );
        spec.pin_workers = true;
        let gateway = self.start(bin, &spec, &leg)?;
        let subject = subject(&leg, spec.workers, &gateway);
        self.features_grid(&subject, CHAT, UNARY_BODY, results)?;
        gateway.stop()?;
        results
            .pairs
            .push(Pair::new("pinned/unpinned", &leg, &base));
        Ok(())
    }

    /// OTLP export on, to a collector that answers at once and to one that never answers,
    /// against the grid's leg of `mode` with export off; what was dropped goes to the notes.
    fn otel(&self, bin: &Path, mode: Mode, results: &mut Results) -> Result<()> {
        let base = gateway::mode_leg(mode);
        for (suffix, stalled) in [("otel", false), ("otel-stalled", true)] {
            let sink = crate::otlp_sink::Sink::start(stalled)?;
            let leg = format!("{base}-{suffix}");
            let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
            spec.env.extend([
                (
                    "AISIX_OBSERVABILITY__OTLP__ENABLED".to_owned(),
                    "true".to_owned(),
                ),
                (
                    "AISIX_OBSERVABILITY__OTLP__ENDPOINT".to_owned(),
                    sink.endpoint(),
                ),
            ]);
            let gateway = self.start(bin, &spec, &leg)?;
            if let Some(cpus) = &self.args.variants.otel_control_cpus {
                // The workers are started by now, with the process's CPUs: only the main
                // thread (and what it starts from here on) moves.
                cpus.pin_thread(gateway.pid())?;
                results
                    .notes
                    .push(format!("{leg}: control thread on CPUs {cpus}"));
            }
            let subject = subject(&leg, spec.workers, &gateway);
            let concurrency = &self.args.variants.otel_concurrency.0;
            self.grid_with(&subject, CHAT, UNARY_BODY, concurrency, false, results)?;
            if let Some(metrics) = gateway.metrics_addr {
                let dropped = gateway::read_metrics(metrics)?.otel_dropped;
                results
                    .notes
                    .push(format!("{leg}: aisix_otel_dropped_total {dropped:?}"));
            }
            gateway.stop()?;
            results
                .pairs
                .push(Pair::new(&format!("{suffix}/off"), &leg, &base));
        }
        Ok(())
    }

    /// One thread-per-core worker on the first gateway CPU at `--rss-concurrency`: the peak
    /// RSS column of its row is the figure.
    fn rss(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let leg = format!("{}-1w", gateway::mode_leg(Mode::ThreadPerCore));
        let cpus = self.args.gateway_cpus.as_ref().and_then(CpuList::first);
        let spec = self.spec(Mode::ThreadPerCore, 1, cpus);
        let gateway = self.start(bin, &spec, &leg)?;
        let subject = subject(&leg, 1, &gateway);
        let concurrency = [self.args.variants.rss_concurrency];
        self.grid_with(&subject, CHAT, UNARY_BODY, &concurrency, false, results)?;
        gateway.stop()
    }

    /// One gateway with a failover group whose primary is the direct model: the same load
    /// through the group and to the model directly.
    fn group(&self, bin: &Path, mode: Mode, results: &mut Results) -> Result<()> {
        let leg = format!("{}+group", gateway::mode_leg(mode));
        let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
        spec.features.group = true;
        let gateway = self.start(bin, &spec, &leg)?;
        let direct = subject(&format!("{leg} direct"), spec.workers, &gateway);
        let grouped = subject(&format!("{leg} via group"), spec.workers, &gateway);
        self.features_grid(&direct, CHAT, UNARY_BODY, results)?;
        self.features_grid(&grouped, CHAT, &chat_body(GROUP_MODEL), results)?;
        gateway.stop()?;
        results
            .pairs
            .push(Pair::new("group/direct", &grouped.leg, &direct.leg));
        Ok(())
    }

    /// A rate limit on the key (high enough never to refuse), counted in memory or in a Redis
    /// server the harness starts, against the grid's leg without one.
    fn limiter(
        &self,
        bin: &Path,
        mode: Mode,
        store: LimiterStore,
        results: &mut Results,
    ) -> Result<()> {
        let base = gateway::mode_leg(mode);
        let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
        let _redis;
        let _cluster;
        let (leg, limits) = match store {
            LimiterStore::Memory => (format!("{base}+limiter-memory"), Limits::Memory),
            LimiterStore::Redis => {
                let redis = Redis::start(
                    self.args.variants.redis_bin.as_deref(),
                    &self.work.join("redis"),
                )?;
                let addr = redis.addr;
                _redis = redis;
                (format!("{base}+limiter-redis"), Limits::Redis(addr))
            }
            LimiterStore::Cluster => {
                let cluster = RedisCluster::start(
                    self.args.variants.redis_bin.as_deref(),
                    &self.work.join("redis-cluster"),
                )?;
                let nodes = cluster.addrs();
                _cluster = cluster;
                (
                    format!("{base}+limiter-cluster"),
                    Limits::RedisCluster(nodes),
                )
            }
        };
        spec.features.limits = Some(limits);
        let gateway = self.start(bin, &spec, &leg)?;
        let subject = subject(&leg, spec.workers, &gateway);
        self.features_grid(&subject, CHAT, UNARY_BODY, results)?;
        gateway.stop()?;
        let what = format!("{}/off", leg.trim_start_matches(&format!("{base}+")));
        results.pairs.push(Pair::new(&what, &leg, &base));
        Ok(())
    }

    /// OpenAI passthrough, Anthropic passthrough and both translations, in one gateway.
    fn anthropic(&self, bin: &Path, mode: Mode, results: &mut Results) -> Result<()> {
        let leg = format!("{}+anthropic", gateway::mode_leg(mode));
        let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
        spec.features.anthropic = true;
        let gateway = self.start(bin, &spec, &leg)?;
        let openai = format!("{leg} openai→openai");
        let paths = [
            (openai.clone(), CHAT, UNARY_BODY.to_owned()),
            (
                format!("{leg} anthropic→anthropic"),
                MESSAGES,
                messages_body(ANTHROPIC_MODEL),
            ),
            (
                format!("{leg} openai→anthropic"),
                CHAT,
                chat_body(ANTHROPIC_MODEL),
            ),
            (
                format!("{leg} anthropic→openai"),
                MESSAGES,
                messages_body("bench"),
            ),
        ];
        for (name, path, body) in &paths {
            let subject = subject(name, spec.workers, &gateway);
            self.features_grid(&subject, path, body, results)?;
            if name != &openai {
                let what = format!("{}/openai passthrough", &name[leg.len() + 1..]);
                results.pairs.push(Pair::new(&what, name, &openai));
            }
        }
        gateway.stop()
    }

    /// OpenAI chat passthrough, Responses passthrough and Responses translated to chat
    /// completions, in one gateway.
    fn responses(&self, bin: &Path, mode: Mode, results: &mut Results) -> Result<()> {
        let leg = format!("{}+responses", gateway::mode_leg(mode));
        let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
        spec.features.responses = true;
        let gateway = self.start(bin, &spec, &leg)?;
        let openai = format!("{leg} chat→chat");
        let paths = [
            (openai.clone(), CHAT, UNARY_BODY.to_owned()),
            (
                format!("{leg} responses→responses"),
                RESPONSES,
                responses_body(RESPONSES_MODEL),
            ),
            (
                format!("{leg} responses→chat"),
                RESPONSES,
                responses_body("bench"),
            ),
        ];
        for (name, path, body) in &paths {
            let subject = subject(name, spec.workers, &gateway);
            self.features_grid(&subject, path, body, results)?;
            if name != &openai {
                let what = format!("{}/chat passthrough", &name[leg.len() + 1..]);
                results.pairs.push(Pair::new(&what, name, &openai));
            }
        }
        gateway.stop()
    }

    /// OpenAI chat passthrough and chat completions translated to each native provider
    /// dialect, in one gateway: the feature grid (unary) and the streaming leg of each.
    fn providers(&self, bin: &Path, mode: Mode, results: &mut Results) -> Result<()> {
        let leg = format!("{}+providers", gateway::mode_leg(mode));
        let mut spec = self.spec(mode, self.workers(), self.args.gateway_cpus.clone());
        spec.features.gemini = true;
        spec.features.bedrock = true;
        let gateway = self.start(bin, &spec, &leg)?;
        let openai = format!("{leg} chat→openai");
        for (name, model) in [
            (openai.clone(), "bench"),
            (format!("{leg} chat→gemini"), GEMINI_MODEL),
            (format!("{leg} chat→bedrock"), BEDROCK_MODEL),
        ] {
            let subject = subject(&name, spec.workers, &gateway);
            self.features_grid(&subject, CHAT, &chat_body(model), results)?;
            let stream = crate::grid::STREAM_BODY.replace("\"bench\"", &format!("\"{model}\""));
            let request = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, &stream);
            self.streams_on(self.rig, &subject, &request, results)?;
            if name != openai {
                let what = format!("{}/openai passthrough", &name[leg.len() + 1..]);
                results.pairs.push(Pair::new(&what, &name, &openai));
            }
        }
        gateway.stop()
    }

    /// A second mock that sends each stream in one write: the streaming leg and an strace
    /// window of streams (writes per stream) through the gateway and through nginx.
    fn burst(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let args = self.args;
        let mock_args = args.mock_args(self.mock_workers, true);
        let mock = Mock::start(
            &mock_args,
            args.mock_cpus.as_ref(),
            &self.work.join("mock-burst.log"),
        )?;
        let rig = Rig {
            mock: &mock,
            ..self.rig.clone()
        };
        let workload = Workload::Stream {
            frames: args.frames.max(1),
            stall: args.stall,
        };
        let streams = args.streams.min(args.syscall_concurrency.max(1));

        let leg = format!("{}-burst", gateway::mode_leg(Mode::ThreadPerCore));
        let spec = self.spec(
            Mode::ThreadPerCore,
            self.workers(),
            args.gateway_cpus.clone(),
        );
        let upstreams = Upstreams {
            mock: self.rig.mock.addr,
            burst: Some(mock.addr),
        };
        let mut gateway = Gateway::start(bin, &spec, &upstreams, &self.work.join(&leg))?;
        let aisix = subject(&leg, spec.workers, &gateway);
        let body = crate::grid::STREAM_BODY.replace("\"bench\"", &format!("\"{BURST_MODEL}\""));
        let request = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, &body);
        self.streams_on(&rig, &aisix, &request, results)?;
        self.syscalls_on(&rig, &aisix, &request, workload, streams, results)?;
        gateway.ensure_running()?;
        gateway.stop()?;

        let Some(nginx_bin) = self.nginx_bin() else {
            results
                .notes
                .push("nginx is not installed: no bursty-upstream reference.".into());
            return Ok(());
        };
        let mut nginx = Nginx::start(
            &nginx_bin,
            self.workers(),
            args.gateway_cpus.as_ref(),
            mock.addr,
            &self.work.join("nginx-burst"),
        )?;
        let reference = Subject {
            leg: format!("{}-burst", report::NGINX),
            workers: self.workers(),
            pids: nginx.pids(),
            addr: nginx.sse_addr,
            metrics: None,
        };
        let request = loadgen::post_request(
            nginx.sse_addr,
            CHAT,
            BENCH_KEY,
            crate::grid::DIRECT_STREAM_BODY,
        );
        self.streams_on(&rig, &reference, &request, results)?;
        self.syscalls_on(&rig, &reference, &request, workload, streams, results)?;
        nginx.ensure_running()?;
        nginx.stop();
        Ok(())
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn nginx_bin(&self) -> Option<PathBuf> {
        if self.args.no_nginx {
            return None;
        }
        self.args
            .nginx_bin
            .clone()
            .or_else(|| process::which("nginx"))
    }
}

/// A throwaway redis-server on a free port: no persistence, stopped on drop.
struct Redis {
    _child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start(bin: Option<&Path>, dir: &Path) -> Result<Redis> {
        Redis::start_with(bin, dir, &[])
    }

    fn start_with(bin: Option<&Path>, dir: &Path, extra: &[&str]) -> Result<Redis> {
        let Some(bin) = bin
            .map(Path::to_path_buf)
            .or_else(|| process::which("redis-server"))
        else {
            bail!("redis-server is not installed (scripts/test.sh installs it)");
        };
        std::fs::create_dir_all(dir)?;
        let port = gateway::free_port()?;
        let mut command = Command::new(bin);
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("redis.log"))?)
            .stderr(Stdio::inherit());
        let mut child = Child::spawn("redis-server", command, None)?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = child.try_exit() {
                bail!(
                    "redis-server exited at once ({status}); see {}",
                    dir.display()
                );
            }
            if Instant::now() > deadline {
                bail!("redis-server did not listen on {addr} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Redis {
            _child: child,
            addr,
        })
    }
}

/// Three throwaway redis-servers joined into one Redis Cluster (no replicas) by
/// `redis-cli --cluster create`; stopped on drop.
struct RedisCluster {
    nodes: Vec<Redis>,
}

impl RedisCluster {
    fn start(bin: Option<&Path>, dir: &Path) -> Result<RedisCluster> {
        let cluster_args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ];
        let nodes = (0..3)
            .map(|i| Redis::start_with(bin, &dir.join(format!("node-{i}")), &cluster_args))
            .collect::<Result<Vec<_>>>()?;
        let server = bin
            .map(Path::to_path_buf)
            .or_else(|| process::which("redis-server"));
        let Some(cli) = server
            .map(|s| s.with_file_name("redis-cli"))
            .filter(|cli| cli.is_file())
            .or_else(|| process::which("redis-cli"))
        else {
            bail!("redis-cli is not installed (it comes with redis-server)");
        };
        let mut create = Command::new(cli);
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(node.addr.to_string());
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()?;
        if !output.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|node| cluster_ok(node.addr)) {
            if Instant::now() > deadline {
                bail!("the Redis Cluster never reported cluster_state:ok");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(cluster)
    }

    fn addrs(&self) -> [SocketAddr; 3] {
        [self.nodes[0].addr, self.nodes[1].addr, self.nodes[2].addr]
    }
}

/// Whether the node at `addr` answers `CLUSTER INFO` with `cluster_state:ok`.
fn cluster_ok(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut conn) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    if conn.write_all(b"CLUSTER INFO\r\n").is_err() {
        return false;
    }
    let mut reply = vec![0; 4096];
    let n = conn.read(&mut reply).unwrap_or(0);
    String::from_utf8_lossy(&reply[..n]).contains("cluster_state:ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_the_model_asked_for() {
        let chat: serde_json::Value = serde_json::from_str(&chat_body(GROUP_MODEL)).unwrap();
        assert_eq!(chat["model"], GROUP_MODEL);
        assert_eq!(chat["messages"][0]["content"], "hello");
        let messages: serde_json::Value =
            serde_json::from_str(&messages_body(ANTHROPIC_MODEL)).unwrap();
        assert_eq!(messages["model"], ANTHROPIC_MODEL);
        assert!(messages["max_tokens"].as_u64().is_some());
    }

    #[test]
    fn limiter_stores_parse() {
        assert_eq!("redis".parse::<LimiterStore>(), Ok(LimiterStore::Redis));
        assert_eq!("cluster".parse::<LimiterStore>(), Ok(LimiterStore::Cluster));
        assert!("disk".parse::<LimiterStore>().is_err());
    }

    #[test]
    fn a_redis_server_is_started_and_answers_ping() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let redis = Redis::start(None, dir.path()).unwrap();
        let mut conn = TcpStream::connect(redis.addr).unwrap();
        conn.write_all(b"PING\r\n").unwrap();
        let mut answer = [0u8; 7];
        conn.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"+PONG\r\n");
    }

    #[test]
    fn a_redis_cluster_is_started_and_reports_ok() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = RedisCluster::start(None, dir.path()).unwrap();
        assert!(cluster.addrs().iter().all(|addr| cluster_ok(*addr)));
    }
}
