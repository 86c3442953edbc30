//! `aisix-bench grid`: the whole saturation run. Starts the mock, then measures, in order: the
//! rig floor (load generator straight at the mock), the gateway in each serving mode, the gateway
//! with metrics and access log off, and nginx as the reference; then writes the report. A leg
//! that fails is noted and the run goes on; Ctrl-C stops everything it started.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::args::{self, CommaList};
use crate::bystander::Bystander;
use crate::gateway::{self, BENCH_KEY, Gateway, GatewaySpec, Mode, Upstreams};
use crate::loadgen::{self, Workload};
use crate::measure::{Rig, Subject, Timing};
use crate::mock::{Mock, MockArgs};
use crate::nginx::Nginx;
use crate::process::{self, CpuList};
use crate::report::{self, Pair, Results, WindowRow};
use crate::variants::VariantArgs;
use crate::wrk::Wrk;

/// The chat completion every unary request sends.
pub const UNARY_BODY: &str = r#"{"model":"bench","messages":[{"role":"user","content":"hello"}]}"#;
/// The streaming request (usage asked for, as SDKs commonly do).
pub(crate) const STREAM_BODY: &str = r#"{"model":"bench","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}"#;
/// What the rig floor sends to the mock directly: the model name the gateway would send.
pub(crate) const DIRECT_UNARY_BODY: &str =
    r#"{"model":"mock-model","messages":[{"role":"user","content":"hello"}]}"#;
/// The OpenAI chat endpoint, on the gateway and on the mock.
const CHAT: &str = "/v1/chat/completions";
pub(crate) const DIRECT_STREAM_BODY: &str = r#"{"model":"mock-model","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}"#;

#[derive(Debug, Clone, clap::Args)]
pub struct GridArgs {
    /// A few seconds in all: concurrency 1 and 8, one short window per leg, a tiny streaming
    /// leg. Checks the pipeline (every answer must be good), asserts no speed.
    #[arg(long)]
    pub smoke: bool,
    /// Gateway workers (and nginx worker_processes) [default: the CPUs in --gateway-cpus, else
    /// all CPUs].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Serving modes to measure, in order.
    #[arg(long, default_value = "tpc,shared", value_parser = args::modes)]
    pub modes: CommaList<Mode>,
    /// CPUs for the gateway and nginx (taskset -c syntax: 0, 0-3,8).
    #[arg(long)]
    pub gateway_cpus: Option<CpuList>,
    /// CPUs for the load generator's threads.
    #[arg(long)]
    pub load_cpus: Option<CpuList>,
    /// CPUs for the mock provider.
    #[arg(long)]
    pub mock_cpus: Option<CpuList>,
    /// Load generator threads [default: the CPUs in --load-cpus, else half the CPUs].
    #[arg(long)]
    pub load_threads: Option<usize>,
    /// Mock worker threads [default: the CPUs in --mock-cpus, else a quarter of the CPUs].
    #[arg(long)]
    pub mock_workers: Option<usize>,
    /// Connections (closed loop) for the non-streaming grid.
    #[arg(long, default_value = "1,8,32,128,512")]
    pub concurrency: CommaList<usize>,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// Windows per point.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Concurrent SSE streams in the streaming leg (0: skip it).
    #[arg(long, default_value_t = 512)]
    pub streams: usize,
    /// Content frames per stream.
    #[arg(long, default_value_t = 16)]
    pub frames: usize,
    /// The mock's time to first frame.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// The mock's gap between frames.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub gap: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub stream_window: Duration,
    /// A silence longer than this inside a stream counts it as stalled.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub stall: Duration,
    /// Connections during the strace window.
    #[arg(long, default_value_t = 32)]
    pub syscall_concurrency: usize,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub syscall_window: Duration,
    /// Skip the strace window even when strace is installed.
    #[arg(long)]
    pub no_strace: bool,
    /// Skip the nginx reference even when nginx is installed.
    #[arg(long)]
    pub no_nginx: bool,
    /// The nginx binary [default: nginx on PATH or in /usr/sbin].
    #[arg(long)]
    pub nginx_bin: Option<PathBuf>,
    /// Concurrencies at which the first mode runs again with metrics and access log off.
    #[arg(long, default_value = "32")]
    pub obs_off_concurrency: CommaList<usize>,
    /// Skip the metrics-and-access-log-off leg.
    #[arg(long)]
    pub no_obs_off: bool,
    /// Build the gateway with the `count-alloc` feature and report allocations per request
    /// and per stream (read from its `/metrics`). The counting costs a little CPU: compare CPU
    /// figures within runs that agree on this flag. With `--aisix-bin`, the binary must have been
    /// built with the feature for the figures to show.
    #[arg(long)]
    pub count_alloc: bool,
    /// Build the gateway with the `poll-probe` feature and report each window's longest worker
    /// delay (how long a worker's thread was held from its other tasks; 1 ms resolution).
    #[arg(long)]
    pub poll_probe: bool,
    /// Set by `aisix-bench compare`: the other build and its label. The run is then only the
    /// interleaved comparison of the two (`Legs::compare`).
    #[arg(skip)]
    pub compare: Option<(PathBuf, String)>,
    /// Skip the floor leg (the gateway's stack with no gateway logic, `aisix-bench floor`).
    #[arg(long)]
    pub no_floor: bool,
    /// Load generators for the non-streaming grid, reported side by side: `own` (this
    /// harness's) and `wrk` (Debian's wrk; noted and skipped when not installed).
    #[arg(long, default_value = "own,wrk")]
    pub loadgen: CommaList<Loadgen>,
    /// Open-loop arrival rates, in percent of each gateway leg's measured saturation (its best
    /// closed-loop req/s); `--no-open-loop` skips them.
    #[arg(long, default_value = "50,70,90")]
    pub open_loop: CommaList<u32>,
    #[arg(long)]
    pub no_open_loop: bool,
    #[command(flatten)]
    pub variants: VariantArgs,
    /// A prebuilt aisix binary [default: cargo build --release -p aisix-server].
    #[arg(long)]
    pub aisix_bin: Option<PathBuf>,
    /// Another aisix binary (an earlier commit's release build) measured on the unary grid
    /// right after the first mode's leg, with the same settings: its leg is
    /// `<mode leg>-baseline` and the report prices the first mode against it (`now/baseline`).
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// Extra environment for every gateway leg, e.g. `AISIX_OBSERVABILITY__ACCESS_LOG=false` to
    /// price one feature; repeatable.
    #[arg(long = "gateway-env", value_name = "KEY=VALUE", value_parser = args::key_value)]
    pub gateway_env: Vec<(String, String)>,
    /// Longest wait for one answer (one whole stream) before it counts as failed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Results folder; each run writes <out>/<UTC timestamp>/ [default: <workspace>/bench-results].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A load generator for the non-streaming grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loadgen {
    Own,
    Wrk,
}

impl std::str::FromStr for Loadgen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "own" => Ok(Loadgen::Own),
            "wrk" => Ok(Loadgen::Wrk),
            _ => Err(format!("{s:?} is not a load generator (own or wrk)")),
        }
    }
}

impl GridArgs {
    /// The mock these options describe, on any free port; `burst` sends each stream in one
    /// write.
    /// The `aisix-server` features the flags ask for.
    pub(crate) fn features(&self) -> Vec<&'static str> {
        let mut features = Vec::new();
        if self.count_alloc {
            features.push("count-alloc");
        }
        if self.poll_probe {
            features.push("poll-probe");
        }
        features
    }

    pub(crate) fn mock_args(&self, workers: usize, burst: bool) -> MockArgs {
        MockArgs {
            addr: ([127, 0, 0, 1], 0).into(),
            stats_addr: ([127, 0, 0, 1], 0).into(),
            workers,
            ttft: self.ttft,
            frames: self.frames.max(1),
            gap: self.gap,
            burst,
            hostile_event_mib: self.variants.hostile_event_mib,
            hostile_body_mb: self.variants.hostile_body_mb,
        }
    }

    fn apply_smoke(&mut self) {
        self.concurrency = CommaList(vec![1, 8]);
        self.warmup = Duration::from_millis(200);
        self.window = Duration::from_millis(500);
        self.reps = 1;
        self.streams = self.streams.min(16);
        self.frames = 4;
        self.ttft = Duration::from_millis(5);
        self.gap = Duration::from_millis(5);
        self.stream_window = Duration::from_millis(500);
        self.syscall_concurrency = 8;
        self.syscall_window = Duration::from_millis(500);
        self.obs_off_concurrency = CommaList(vec![8]);
        self.open_loop = CommaList(vec![50]);
        self.variants.apply_smoke();
    }
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Worker and thread counts, resolved from the options and the CPUs available.
struct Placement {
    workers: usize,
    load_threads: usize,
    mock_workers: usize,
    /// CPUs the load generator can use (for its CPU share).
    load_cpu_count: usize,
}

impl Placement {
    fn resolve(args: &GridArgs) -> Placement {
        let cpus = available_cpus();
        let count = |list: &Option<CpuList>, otherwise: usize| {
            list.as_ref().map_or(otherwise, CpuList::len)
        };
        let load_threads = args
            .load_threads
            .unwrap_or_else(|| count(&args.load_cpus, (cpus / 2).max(1)))
            .max(1);
        Placement {
            workers: args
                .workers
                .unwrap_or_else(|| count(&args.gateway_cpus, cpus))
                .max(1),
            load_threads,
            mock_workers: args
                .mock_workers
                .unwrap_or_else(|| count(&args.mock_cpus, (cpus / 4).max(1)))
                .max(1),
            load_cpu_count: count(&args.load_cpus, cpus).min(load_threads),
        }
    }
}

/// The report header lines and the JSON settings of a run.
fn describe(
    args: &GridArgs,
    placement: &Placement,
    aisix_bin: &Path,
    run_name: &str,
) -> (Vec<String>, serde_json::Value) {
    let place = |list: &Option<CpuList>| {
        list.as_ref()
            .map_or("any CPU".to_string(), |l| format!("CPUs {l}"))
    };
    let Placement {
        workers,
        load_threads,
        mock_workers,
        ..
    } = placement;
    let mut header = vec![
        format!("run {run_name} on {}", machine()),
        format!(
            "gateway: {workers} workers on {} ({}); mock: {mock_workers} workers on {}; load generator: {load_threads} threads on {}",
            place(&args.gateway_cpus),
            aisix_bin.display(),
            place(&args.mock_cpus),
            place(&args.load_cpus),
        ),
        format!(
            "grid: concurrency {:?}, warm-up {:?}, {} × {:?} windows per point{}",
            args.concurrency.0,
            args.warmup,
            args.reps,
            args.window,
            if args.smoke {
                " (smoke: no speed assertions)"
            } else {
                ""
            }
        ),
        format!(
            "streams: {} concurrent, {} frames, mock TTFT {:?}, gap {:?}, window {:?}",
            args.streams, args.frames, args.ttft, args.gap, args.stream_window
        ),
    ];
    if let Some(baseline) = &args.baseline_bin {
        header.push(format!("baseline: {}", baseline.display()));
    }
    let settings = json!({
        "smoke": args.smoke, "workers": workers, "modes": args.modes.0.iter().map(|&m| gateway::short_name(m)).collect::<Vec<_>>(),
        "gateway_cpus": args.gateway_cpus.as_ref().map(ToString::to_string),
        "load_cpus": args.load_cpus.as_ref().map(ToString::to_string),
        "mock_cpus": args.mock_cpus.as_ref().map(ToString::to_string),
        "load_threads": load_threads, "mock_workers": mock_workers,
        "concurrency": args.concurrency.0, "warmup_s": args.warmup.as_secs_f64(),
        "window_s": args.window.as_secs_f64(), "reps": args.reps, "streams": args.streams,
        "frames": args.frames, "ttft_ms": args.ttft.as_secs_f64() * 1e3, "gap_ms": args.gap.as_secs_f64() * 1e3,
        "machine": machine(), "aisix_bin": aisix_bin.display().to_string(),
        "baseline_bin": args.baseline_bin.as_ref().map(|b| b.display().to_string()),
    });
    (header, settings)
}

/// Runs the grid, prints the Markdown report and writes it with the JSON lines.
pub fn run(mut args: GridArgs) -> Result<()> {
    process::install_interrupt_handler();
    if args.smoke {
        args.apply_smoke();
    }
    let placement = Placement::resolve(&args);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| gateway::workspace_root().join("bench-results"));
    let run_name = utc_stamp();
    let work = out.join(&run_name).join("work");
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    // Legs run from their own folders: every path handed to them must be absolute.
    let work = work.canonicalize()?;
    let run_dir = work
        .parent()
        .map_or_else(|| work.clone(), Path::to_path_buf);
    eprintln!("[bench] results: {}", run_dir.display());

    let aisix_bin = gateway::binary(
        args.aisix_bin.as_deref(),
        &work.join("cargo-build.jsonl"),
        &args.features(),
    )?;
    let baseline_bin = match &args.baseline_bin {
        Some(path) => Some(gateway::prebuilt(path, "--baseline-bin")?),
        None => None,
    };
    let nginx_bin = if args.no_nginx {
        None
    } else {
        args.nginx_bin.clone().or_else(|| process::which("nginx"))
    };
    let wrk_bin = if args.loadgen.0.contains(&Loadgen::Wrk) {
        process::which("wrk")
    } else {
        None
    };
    let strace_bin = if args.no_strace {
        None
    } else {
        process::which("strace")
    };

    let mock_args = args.mock_args(placement.mock_workers, false);
    let mock = Mock::start(&mock_args, args.mock_cpus.as_ref(), &work.join("mock.log"))?;
    // Beside the poll probe, on the gateway's first CPU (see `bystander`).
    let bystander = match (
        args.poll_probe,
        args.gateway_cpus.as_ref().and_then(CpuList::first),
    ) {
        (true, Some(cpu)) => Some(Bystander::start(&cpu)?),
        _ => None,
    };
    let rig = Rig {
        mock: &mock,
        load_cpus: args.load_cpus.clone(),
        load_threads: placement.load_threads,
        load_cpu_count: placement.load_cpu_count,
        timeout: args.timeout,
        bystander: bystander.as_ref(),
    };

    let mut results = Results::default();
    (results.header, results.settings) = describe(&args, &placement, &aisix_bin, &run_name);
    let workers = placement.workers;

    let legs = Legs {
        args: &args,
        rig: &rig,
        timing: Timing {
            warmup: args.warmup,
            window: args.window,
            reps: args.reps.max(1),
        },
        stream_timing: Timing {
            warmup: args.warmup.min(Duration::from_secs(1)),
            window: args.stream_window,
            reps: 1,
        },
        strace: strace_bin.as_deref(),
        wrk: wrk_bin.as_deref().map(|bin| Wrk {
            bin,
            threads: placement.load_threads,
            cpus: args.load_cpus.as_ref(),
            timeout: args.timeout,
            work: &work,
        }),
        work: &work,
        mock_workers: placement.mock_workers,
        workers: placement.workers,
    };
    if wrk_bin.is_none() && args.loadgen.0.contains(&Loadgen::Wrk) {
        results
            .notes
            .push("wrk is not installed: the grid ran with the own load generator only.".into());
    }
    if strace_bin.is_none() && !args.no_strace {
        results
            .notes
            .push("strace is not installed: no system-call counts.".into());
    }

    // Each leg reports into `results`; a failed leg becomes a note unless the run was interrupted.
    let attempt = |results: &mut Results,
                   leg: &str,
                   f: &mut dyn FnMut(&mut Results) -> Result<()>|
     -> Result<()> {
        if let Err(error) = f(results) {
            process::check_interrupted()?;
            eprintln!("[bench] leg {leg} failed: {error:#}");
            results.notes.push(format!("leg {leg} failed: {error:#}"));
        }
        Ok(())
    };

    if let Some((base, label)) = &args.compare {
        attempt(&mut results, "compare", &mut |r| {
            legs.compare(&aisix_bin, base, label, r)
        })?;
    } else {
        attempt(&mut results, report::DIRECT, &mut |r| legs.direct(r))?;
        for &mode in &args.modes.0 {
            let spec = GatewaySpec::new(
                mode,
                workers,
                args.gateway_cpus.clone(),
                args.gateway_env.clone(),
            );
            let leg = gateway::mode_leg(mode);
            attempt(&mut results, &leg, &mut |r| {
                legs.gateway(&aisix_bin, &spec, &leg, &args.concurrency.0, true, r)
            })?;
        }
        if let (Some(baseline), Some(&mode)) = (&baseline_bin, args.modes.0.first()) {
            let spec = GatewaySpec::new(
                mode,
                workers,
                args.gateway_cpus.clone(),
                args.gateway_env.clone(),
            );
            let now = gateway::mode_leg(mode);
            let leg = format!("{now}-baseline");
            results.pairs.push(Pair::new("now/baseline", &now, &leg));
            attempt(&mut results, &leg, &mut |r| {
                legs.gateway(baseline, &spec, &leg, &args.concurrency.0, false, r)
            })?;
        }
        if !args.no_floor {
            attempt(&mut results, report::FLOOR, &mut |r| legs.floor(workers, r))?;
        }
        if !args.no_obs_off
            && let Some(&mode) = args.modes.0.first()
        {
            let mut spec = GatewaySpec::new(
                mode,
                workers,
                args.gateway_cpus.clone(),
                args.gateway_env.clone(),
            );
            spec.observability = false;
            let leg = format!("{}-obs-off", gateway::mode_leg(mode));
            results.obs_pair = Some((leg.clone(), gateway::mode_leg(mode)));
            attempt(&mut results, &leg, &mut |r| {
                legs.gateway(
                    &aisix_bin,
                    &spec,
                    &leg,
                    &args.obs_off_concurrency.0,
                    false,
                    r,
                )
            })?;
        }
        match &nginx_bin {
            Some(bin) => attempt(&mut results, report::NGINX, &mut |r| {
                legs.nginx(bin, workers, r)
            })?,
            None if !args.no_nginx => results
                .notes
                .push("nginx is not installed: no reference leg.".into()),
            None => {}
        }
        legs.variants(&aisix_bin, &mut results)?;
    }
    drop(rig);
    drop(mock);

    let markdown = results.markdown();
    println!("{markdown}");
    std::fs::write(run_dir.join("report.md"), &markdown)?;
    std::fs::write(run_dir.join("results.jsonl"), results.json_lines())?;
    eprintln!(
        "[bench] wrote {0}/report.md and {0}/results.jsonl",
        run_dir.display()
    );
    if !results.all_valid() || results.notes.iter().any(|n| n.starts_with("leg ")) {
        bail!("some windows were invalid or a leg failed; see the notes in the report");
    }
    Ok(())
}

/// The legs of a run, sharing its settings.
pub(crate) struct Legs<'a> {
    pub(crate) args: &'a GridArgs,
    pub(crate) rig: &'a Rig<'a>,
    pub(crate) timing: Timing,
    pub(crate) stream_timing: Timing,
    pub(crate) strace: Option<&'a Path>,
    pub(crate) wrk: Option<Wrk<'a>>,
    pub(crate) work: &'a Path,
    pub(crate) mock_workers: usize,
    /// Gateway workers (and nginx worker processes) outside the balance and RSS legs.
    pub(crate) workers: usize,
}

impl Legs<'_> {
    /// `aisix-bench compare`: the first mode's unary grid and streaming leg of `now` and of
    /// `base`, interleaved (each rep one window per point of each, A B then B A, so drift hits
    /// both alike), each on a fresh gateway. Priced `now/<label>` per point and per stream.
    fn compare(&self, now: &Path, base: &Path, label: &str, results: &mut Results) -> Result<()> {
        let mode = self
            .args
            .modes
            .0
            .first()
            .copied()
            .unwrap_or(Mode::ThreadPerCore);
        let spec = GatewaySpec::new(
            mode,
            self.workers,
            self.args.gateway_cpus.clone(),
            self.args.gateway_env.clone(),
        );
        let now_leg = gateway::mode_leg(mode);
        let base_leg = format!("{now_leg}@{label}");
        let what = format!("now/{label}");
        for suffix in ["", crate::wrk::SUFFIX] {
            results.pairs.push(Pair::new(
                &format!("{what}{suffix}"),
                &format!("{now_leg}{suffix}"),
                &format!("{base_leg}{suffix}"),
            ));
        }
        results
            .stream_pairs
            .push(Pair::new(&what, &now_leg, &base_leg));
        let once = Legs {
            timing: Timing {
                reps: 1,
                ..self.timing
            },
            ..*self
        };
        for rep in 0..self.timing.reps {
            let mut order = [(now, &now_leg), (base, &base_leg)];
            if rep % 2 == 1 {
                order.reverse();
            }
            for (bin, leg) in order {
                once.gateway(bin, &spec, leg, &self.args.concurrency.0, false, results)?;
                let upstreams = Upstreams {
                    mock: self.rig.mock.addr,
                    burst: None,
                };
                let mut gateway = Gateway::start(
                    bin,
                    &spec,
                    &upstreams,
                    &self.work.join(format!("{leg}-streams-{rep}")),
                )?;
                let subject = Subject {
                    leg: leg.clone(),
                    workers: spec.workers,
                    pids: vec![gateway.pid()],
                    addr: gateway.addr,
                    metrics: gateway.metrics_addr,
                };
                let stream = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, STREAM_BODY);
                self.streams(&subject, &stream, results)?;
                gateway.ensure_running()?;
                gateway.stop()?;
            }
        }
        Ok(())
    }

    /// The rig floor: the load generator straight at the mock.
    fn direct(&self, results: &mut Results) -> Result<()> {
        let mock = self.rig.mock;
        let subject = Subject {
            leg: report::DIRECT.into(),
            workers: self.mock_workers,
            pids: vec![mock.pid()],
            addr: mock.addr,
            metrics: None,
        };
        let stream = loadgen::post_request(
            mock.addr,
            "/v1/chat/completions",
            BENCH_KEY,
            DIRECT_STREAM_BODY,
        );
        self.grid(
            &subject,
            CHAT,
            DIRECT_UNARY_BODY,
            &self.args.concurrency.0,
            results,
        )?;
        self.streams(&subject, &stream, results)
    }

    fn gateway(
        &self,
        bin: &Path,
        spec: &GatewaySpec,
        leg: &str,
        concurrency: &[usize],
        full: bool,
        results: &mut Results,
    ) -> Result<()> {
        let upstreams = Upstreams {
            mock: self.rig.mock.addr,
            burst: None,
        };
        let mut gateway = Gateway::start(bin, spec, &upstreams, &self.work.join(leg))?;
        eprintln!(
            "[bench] {leg}: aisix pid {} on {}",
            gateway.pid(),
            gateway.addr
        );
        let subject = Subject {
            leg: leg.to_owned(),
            workers: spec.workers,
            pids: vec![gateway.pid()],
            addr: gateway.addr,
            metrics: gateway.metrics_addr,
        };
        let unary = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, UNARY_BODY);
        let stream = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, STREAM_BODY);
        self.grid(&subject, CHAT, UNARY_BODY, concurrency, results)?;
        gateway.ensure_running()?;
        if full {
            self.open_loop(&subject, &unary, results)?;
            gateway.ensure_running()?;
            self.syscalls(&subject, &unary, results)?;
            self.streams(&subject, &stream, results)?;
            gateway.ensure_running()?;
        }
        gateway.stop()
    }

    /// The floor proxy in thread-per-core mode, on the gateway's CPUs and serving settings: the
    /// non-streaming grid, the strace window and the streaming leg, with the mock's own request
    /// bodies (it forwards them as they are, as nginx does). Priced: each aisix mode ÷ floor,
    /// floor ÷ nginx.
    fn floor(&self, workers: usize, results: &mut Results) -> Result<()> {
        let leg = report::FLOOR;
        let spec = GatewaySpec::floor(Mode::ThreadPerCore, workers, self.args.gateway_cpus.clone());
        let upstreams = Upstreams {
            mock: self.rig.mock.addr,
            burst: None,
        };
        // `bin` is unused for the floor: it is this executable.
        let mut floor = Gateway::start(Path::new(""), &spec, &upstreams, &self.work.join(leg))?;
        eprintln!("[bench] {leg}: pid {} on {}", floor.pid(), floor.addr);
        let subject = Subject {
            leg: leg.to_owned(),
            workers,
            pids: vec![floor.pid()],
            addr: floor.addr,
            metrics: None,
        };
        for mode in &self.args.modes.0 {
            let aisix = gateway::mode_leg(*mode);
            let what = format!("{aisix}/floor");
            for suffix in ["", crate::wrk::SUFFIX] {
                results.pairs.push(Pair::new(
                    &format!("{what}{suffix}"),
                    &format!("{aisix}{suffix}"),
                    &format!("{leg}{suffix}"),
                ));
            }
            results.stream_pairs.push(Pair::new(&what, &aisix, leg));
        }
        for suffix in ["", crate::wrk::SUFFIX] {
            results.pairs.push(Pair::new(
                &format!("floor/nginx{suffix}"),
                &format!("{leg}{suffix}"),
                &format!("{}{suffix}", report::NGINX),
            ));
        }
        results
            .stream_pairs
            .push(Pair::new("floor/nginx", leg, report::NGINX));
        let unary = loadgen::post_request(floor.addr, CHAT, BENCH_KEY, DIRECT_UNARY_BODY);
        let stream = loadgen::post_request(floor.addr, CHAT, BENCH_KEY, DIRECT_STREAM_BODY);
        self.grid(
            &subject,
            CHAT,
            DIRECT_UNARY_BODY,
            &self.args.concurrency.0,
            results,
        )?;
        floor.ensure_running()?;
        self.syscalls(&subject, &unary, results)?;
        self.streams(&subject, &stream, results)?;
        floor.ensure_running()?;
        floor.stop()
    }

    fn nginx(&self, bin: &Path, workers: usize, results: &mut Results) -> Result<()> {
        let mut nginx = Nginx::start(
            bin,
            workers,
            self.args.gateway_cpus.as_ref(),
            self.rig.mock.addr,
            &self.work.join("nginx"),
        )?;
        let pids = nginx.pids();
        let subject = |addr: SocketAddr| Subject {
            leg: report::NGINX.into(),
            workers,
            pids: pids.clone(),
            addr,
            metrics: None,
        };
        let buffered = subject(nginx.addr);
        eprintln!("[bench] nginx: pids {:?} on {}", buffered.pids, nginx.addr);
        let unary = loadgen::post_request(
            nginx.addr,
            "/v1/chat/completions",
            BENCH_KEY,
            DIRECT_UNARY_BODY,
        );
        let stream = loadgen::post_request(
            nginx.sse_addr,
            "/v1/chat/completions",
            BENCH_KEY,
            DIRECT_STREAM_BODY,
        );
        self.grid(
            &buffered,
            CHAT,
            DIRECT_UNARY_BODY,
            &self.args.concurrency.0,
            results,
        )?;
        nginx.ensure_running()?;
        self.syscalls(&buffered, &unary, results)?;
        self.streams(&subject(nginx.sse_addr), &stream, results)?;
        nginx.ensure_running()?;
        nginx.stop();
        Ok(())
    }

    /// The non-streaming grid: `body` POSTed to `path` at each concurrency, with each load
    /// generator asked for.
    fn grid(
        &self,
        subject: &Subject,
        path: &str,
        body: &str,
        concurrency: &[usize],
        results: &mut Results,
    ) -> Result<()> {
        self.grid_with(subject, path, body, concurrency, true, results)
    }

    /// [`Self::grid`], with wrk (when asked for) only if `wrk`.
    pub(crate) fn grid_with(
        &self,
        subject: &Subject,
        path: &str,
        body: &str,
        concurrency: &[usize],
        wrk: bool,
        results: &mut Results,
    ) -> Result<()> {
        let request = loadgen::post_request(subject.addr, path, BENCH_KEY, body);
        for &c in concurrency {
            let mut rows = Vec::new();
            if self.args.loadgen.0.contains(&Loadgen::Own) {
                rows.extend(self.rig.unary(
                    subject,
                    &request,
                    c,
                    &self.timing,
                    &mut results.notes,
                )?);
            }
            if let Some(wrk) = self.wrk.as_ref().filter(|_| wrk) {
                rows.extend(wrk.unary(self.rig, subject, path, body, c, &self.timing)?);
            }
            self.progress(&rows);
            results.windows.extend(rows);
        }
        Ok(())
    }

    /// Open-loop windows over as many pooled connections as the largest grid point, at each
    /// `--open-loop` share of the closed-loop req/s the leg made on that many connections (its
    /// saturation with the pool's connection count: the best point at fewer connections would
    /// put the higher shares past it).
    fn open_loop(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        results: &mut Results,
    ) -> Result<()> {
        if self.args.no_open_loop {
            return Ok(());
        }
        let connections = self.args.concurrency.0.iter().copied().max().unwrap_or(1);
        let saturation = results.saturation(&subject.leg, connections);
        if saturation <= 0.0 {
            results.notes.push(format!(
                "{}: no valid closed-loop point at c={connections}, so no open-loop leg",
                subject.leg
            ));
            return Ok(());
        }
        for &percent in &self.args.open_loop.0 {
            let rate = saturation * f64::from(percent) / 100.0;
            let leg = Subject {
                leg: report::open_loop_leg(&subject.leg, percent),
                ..subject.clone()
            };
            let rows = self.rig.open_loop(
                &leg,
                request,
                connections,
                rate,
                &self.timing,
                &mut results.notes,
            )?;
            self.progress(&rows);
            results.windows.extend(rows);
        }
        Ok(())
    }

    pub(crate) fn progress(&self, rows: &[WindowRow]) {
        for row in rows {
            eprintln!(
                "[bench] {} c={} rep {}/{}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, {:.1} µs CPU/req, {} failed, load CPU {:.0}%",
                row.leg,
                row.concurrency,
                row.rep,
                self.timing.reps,
                row.rps,
                row.p50_us / 1e3,
                row.p99_us / 1e3,
                row.cpu_us_per_req,
                row.failures,
                row.load_cpu_share * 100.0
            );
        }
    }

    fn syscalls(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        results: &mut Results,
    ) -> Result<()> {
        self.syscalls_on(
            self.rig,
            subject,
            request,
            Workload::Unary,
            self.args.syscall_concurrency,
            results,
        )
    }

    /// An strace window of `workload` at `concurrency` through `rig`'s mock.
    pub(crate) fn syscalls_on(
        &self,
        rig: &Rig<'_>,
        subject: &Subject,
        request: &Arc<[u8]>,
        workload: Workload,
        concurrency: usize,
        results: &mut Results,
    ) -> Result<()> {
        let Some(strace) = self.strace else {
            return Ok(());
        };
        let summary = self
            .work
            .join(format!("strace-{}.txt", subject.leg.replace(' ', "_")));
        match rig.syscalls(
            subject,
            request,
            (workload, concurrency),
            &Timing {
                warmup: self.timing.warmup.min(Duration::from_secs(1)),
                window: self.args.syscall_window,
                reps: 1,
            },
            strace,
            &summary,
        ) {
            Ok(row) => {
                eprintln!(
                    "[bench] {} strace: {} requests, {:.1} syscalls/req",
                    row.leg,
                    row.requests,
                    row.counts.total as f64 / row.requests.max(1) as f64
                );
                results.syscalls.push(row);
            }
            Err(error) => {
                process::check_interrupted()?;
                results.notes.push(format!(
                    "strace window for {} failed: {error:#}",
                    subject.leg
                ));
            }
        }
        Ok(())
    }

    fn streams(&self, subject: &Subject, request: &Arc<[u8]>, results: &mut Results) -> Result<()> {
        self.streams_on(self.rig, subject, request, results)
    }

    /// The streaming leg through `rig`'s mock.
    pub(crate) fn streams_on(
        &self,
        rig: &Rig<'_>,
        subject: &Subject,
        request: &Arc<[u8]>,
        results: &mut Results,
    ) -> Result<()> {
        if self.args.streams == 0 {
            return Ok(());
        }
        let row = rig.stream(
            subject,
            request,
            self.args.streams,
            Workload::Stream {
                frames: self.args.frames.max(1),
                stall: self.args.stall,
            },
            &self.stream_timing,
            &mut results.notes,
        )?;
        eprintln!(
            "[bench] {} streams={}: {} completed, TTFT p50 {:.2} ms p99 {:.2} ms, gap p99 {:.2} ms, {} dropped, {} stalled, {} failed",
            row.leg,
            row.streams,
            row.completed,
            row.ttft_p50_ms,
            row.ttft_p99_ms,
            row.gap_p99_ms,
            row.dropped,
            row.stalled,
            row.failures
        );
        results.streams.push(row);
        Ok(())
    }
}

/// CPU count, model and kernel, for the report header.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} CPUs ({model}), Linux {}",
        available_cpus(),
        kernel.trim()
    )
}

/// `YYYYmmddTHHMMSSZ` for now, UTC: RFC 3339 without its separators, for a folder name.
pub(crate) fn utc_stamp() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_compact_utc_timestamps() {
        let stamp = utc_stamp();
        assert_eq!(stamp.len(), 16, "{stamp}");
        assert_eq!((&stamp[8..9], &stamp[15..]), ("T", "Z"), "{stamp}");
        assert!(
            stamp[..8]
                .bytes()
                .chain(stamp[9..15].bytes())
                .all(|b| b.is_ascii_digit()),
            "{stamp}"
        );
    }
}
