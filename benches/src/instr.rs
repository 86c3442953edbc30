//! `aisix-bench instr`: user-space instructions per request, counted by valgrind, so that a
//! figure does not move with the machine's speed. Each proxy (aisix, the floor, a baseline
//! aisix binary, nginx as one process) runs under `valgrind --tool=cachegrind --cache-sim=no`
//! (or callgrind) twice: once idle for the load's duration (start, readiness probe, wait, stop),
//! once with closed-loop load at concurrency c for that long. Instructions per request =
//! (Ir loaded − Ir idle) ÷ requests, where requests are what the upstream answered in between
//! (the harness's mock, or nginx serving a static SSE body). The load generator and the
//! upstream run natively. The kernel's side is the strace window of the grid
//! ([`Rig::syscalls`]), on the proxy run natively. What a point includes: opening the c client
//! connections and the proxy's upstream connections, amortised over its requests.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::args::CommaList;
use crate::gateway::{self, BENCH_KEY, Gateway, GatewaySpec, Mode, Upstreams};
use crate::grid::{DIRECT_STREAM_BODY, DIRECT_UNARY_BODY, UNARY_BODY};
use crate::loadgen::{self, LoadRun, LoadSpec, Workload};
use crate::measure::{Rig, Subject, Timing};
use crate::mock::{Mock, MockArgs};
use crate::nginx::Nginx;
use crate::process;
use crate::sse_origin::SseOrigin;

/// aisix's streaming request: the model on the bursty upstream (`bench-burst`), usage asked for.
const BURST_STREAM_BODY: &str = r#"{"model":"bench-burst","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const CHAT: &str = "/v1/chat/completions";

#[derive(Debug, Clone, clap::Args)]
pub struct InstrArgs {
    /// Proxies to measure, in order: `aisix`, `floor`, `nginx`, `baseline` (needs
    /// --baseline-bin).
    #[arg(long, default_value = "aisix,floor,nginx")]
    pub subjects: CommaList<Who>,
    /// Workloads: `unary`; `stream` (each answer in one burst from the harness's mock);
    /// `stream-nginx` (the same bytes from nginx serving a static SSE body).
    #[arg(long, default_value = "unary,stream")]
    pub workloads: CommaList<Kind>,
    /// Connections (closed loop).
    #[arg(long, default_value = "32,512")]
    pub concurrency: CommaList<usize>,
    /// How long each loaded (and idle) run lasts under valgrind.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// `cachegrind` (the cheaper) or `callgrind` (per-function costs to diff with
    /// `callgrind_annotate`; the output files stay in the run folder).
    #[arg(long, default_value = "cachegrind")]
    pub tool: Tool,
    /// Content frames per stream.
    #[arg(long, default_value_t = 16)]
    pub frames: usize,
    /// The strace window per point (proxy run natively).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub syscall_window: Duration,
    /// Skip the strace windows.
    #[arg(long)]
    pub no_strace: bool,
    /// Seconds, not minutes: concurrency 8, 1 s runs, 4 frames. Checks the pipeline; every
    /// answer must be good.
    #[arg(long)]
    pub smoke: bool,
    /// A prebuilt aisix binary [default: cargo build --release -p aisix-server].
    #[arg(long)]
    pub aisix_bin: Option<PathBuf>,
    /// Another aisix binary (an earlier commit's build), the `baseline` subject.
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// The nginx binary [default: nginx on PATH or in /usr/sbin].
    #[arg(long)]
    pub nginx_bin: Option<PathBuf>,
    /// The valgrind binary [default: valgrind on PATH].
    #[arg(long)]
    pub valgrind: Option<PathBuf>,
    /// Longest wait for one answer (one whole stream) under valgrind.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Results folder; each run writes <out>/<UTC timestamp>-instr/ [default:
    /// <workspace>/bench-results].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A proxy under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Aisix,
    Floor,
    Nginx,
    Baseline,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Aisix => "aisix",
            Who::Floor => "floor",
            Who::Nginx => "nginx",
            Who::Baseline => "baseline",
        }
    }
}

impl std::str::FromStr for Who {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Who::Aisix, Who::Floor, Who::Nginx, Who::Baseline]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("{s:?} is not a subject (aisix, floor, nginx, baseline)"))
    }
}

/// A workload and the upstream that answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unary,
    Stream,
    StreamNginx,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Unary => "unary",
            Kind::Stream => "stream",
            Kind::StreamNginx => "stream-nginx",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Kind::Unary, Kind::Stream, Kind::StreamNginx]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("{s:?} is not a workload (unary, stream, stream-nginx)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Cachegrind,
    Callgrind,
}

impl std::str::FromStr for Tool {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cachegrind" => Ok(Tool::Cachegrind),
            "callgrind" => Ok(Tool::Callgrind),
            _ => Err(format!("{s:?} is not a tool (cachegrind or callgrind)")),
        }
    }
}

impl Tool {
    /// valgrind and its options, writing its counts to `out`.
    fn wrap(self, valgrind: &Path, out: &Path) -> Vec<OsString> {
        let (tool, file) = match self {
            Tool::Cachegrind => ("--tool=cachegrind", "--cachegrind-out-file="),
            Tool::Callgrind => ("--tool=callgrind", "--callgrind-out-file="),
        };
        let mut wrap: Vec<OsString> = vec![valgrind.into(), tool.into()];
        if self == Tool::Cachegrind {
            wrap.push("--cache-sim=no".into());
        }
        let mut file = OsString::from(file);
        file.push(out);
        wrap.push(file);
        wrap
    }
}

/// The total instruction count in a cachegrind or callgrind output file: its `summary:` line
/// (callgrind: `totals:` when there is no summary).
pub fn total_ir(text: &str) -> Result<u64> {
    let find = |prefix: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    };
    let value = find("summary:")
        .or_else(|| find("totals:"))
        .context("no summary: or totals: line")?;
    value
        .parse()
        .with_context(|| format!("malformed instruction total {value:?}"))
}

/// The allocator's entry points (jemalloc's, as `tikv-jemallocator` names them, and the C
/// library's): a call to one is one allocation.
const ALLOCATORS: &[&str] = &[
    "_rjem_malloc",
    "_rjem_mallocx",
    "_rjem_calloc",
    "_rjem_realloc",
    "_rjem_rallocx",
    "malloc",
    "calloc",
    "realloc",
];

/// Calls to the allocator in a callgrind output file: the `calls=` lines whose callee (the
/// `cfn=` before them; names are given once, then referred to by `(id)`) is one of
/// [`ALLOCATORS`].
pub fn allocator_calls(text: &str) -> u64 {
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut callee_is_allocator = false;
    let mut total = 0;
    for line in text.lines() {
        let named = line
            .strip_prefix("cfn=")
            .or_else(|| line.strip_prefix("fn="));
        if let Some(rest) = named {
            // `(id) name` the first time, `(id)` after; without compression just `name`.
            let name = match rest.split_once(' ') {
                Some((id, name)) if id.starts_with('(') => {
                    names.insert(id, name);
                    name
                }
                _ if rest.starts_with('(') => names.get(rest).copied().unwrap_or(""),
                _ => rest,
            };
            callee_is_allocator = line.starts_with("cfn=") && ALLOCATORS.contains(&name);
            continue;
        }
        if let Some(rest) = line.strip_prefix("calls=") {
            if callee_is_allocator {
                total += rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            continue;
        }
    }
    total
}

/// One measured point.
#[derive(Debug, Clone)]
struct Row {
    who: Who,
    kind: Kind,
    concurrency: usize,
    requests: u64,
    failures: u64,
    ir_loaded: u64,
    ir_idle: u64,
    /// Allocator calls loaded and idle (callgrind only).
    allocs: Option<(u64, u64)>,
    syscalls: Option<(u64, u64)>,
}

impl Row {
    fn ir_per_request(&self) -> f64 {
        self.ir_loaded.saturating_sub(self.ir_idle) as f64 / self.requests.max(1) as f64
    }

    fn allocs_per_request(&self) -> Option<f64> {
        self.allocs
            .map(|(loaded, idle)| loaded.saturating_sub(idle) as f64 / self.requests.max(1) as f64)
    }

    fn syscalls_per_request(&self) -> Option<f64> {
        self.syscalls
            .map(|(calls, requests)| calls as f64 / requests.max(1) as f64)
    }
}

/// What one run under valgrind counted.
struct Counted {
    ir: u64,
    /// Allocator calls (callgrind only).
    allocs: Option<u64>,
    /// Requests the upstream answered during the run.
    requests: u64,
    /// Failed or incomplete answers the load generator saw.
    failures: u64,
}

/// The upstream a workload's requests reach, and its count of answered requests.
enum Upstream<'a> {
    Mock(&'a Mock),
    Origin(&'a SseOrigin),
}

impl Upstream<'_> {
    fn addr(&self) -> SocketAddr {
        match self {
            Upstream::Mock(mock) => mock.addr,
            Upstream::Origin(origin) => origin.addr,
        }
    }

    fn requests(&self) -> Result<u64> {
        match self {
            Upstream::Mock(mock) => Ok(mock.stats()?.requests),
            Upstream::Origin(origin) => origin.requests(),
        }
    }
}

/// A proxy started for one run.
enum Proxy {
    Gateway(Gateway),
    Nginx(Nginx),
}

struct Running {
    proxy: Proxy,
    target: SocketAddr,
    pids: Vec<u32>,
}

impl Running {
    fn stop(self) -> Result<()> {
        match self.proxy {
            Proxy::Gateway(gateway) => gateway.stop(),
            Proxy::Nginx(nginx) => {
                nginx.stop();
                Ok(())
            }
        }
    }
}

struct Bench<'a> {
    args: &'a InstrArgs,
    aisix_bin: Option<PathBuf>,
    baseline_bin: Option<PathBuf>,
    nginx_bin: Option<PathBuf>,
    valgrind: PathBuf,
    strace: Option<PathBuf>,
    /// The unary mock: unary answers, and every gateway's readiness probe.
    mock: &'a Mock,
    work: PathBuf,
}

impl Bench<'_> {
    /// Starts `who` for `kind` (answered by `upstream`), under `wrap` when it is not empty.
    fn start(
        &self,
        who: Who,
        kind: Kind,
        upstream: SocketAddr,
        wrap: &[OsString],
        dir: &Path,
    ) -> Result<Running> {
        let gateway = |bin: &Path, mut spec: GatewaySpec, upstreams: Upstreams| {
            spec.wrap = wrap.to_vec();
            let gateway = Gateway::start(bin, &spec, &upstreams, dir)?;
            Ok::<_, anyhow::Error>(Running {
                target: gateway.addr,
                pids: vec![gateway.pid()],
                proxy: Proxy::Gateway(gateway),
            })
        };
        match who {
            Who::Aisix | Who::Baseline => {
                let bin = if who == Who::Aisix {
                    &self.aisix_bin
                } else {
                    &self.baseline_bin
                };
                let bin = bin.as_deref().context("no binary for this subject")?;
                // `bench` (readiness, unary) on the unary mock; `bench-burst` on the stream's.
                let upstreams = Upstreams {
                    mock: self.mock.addr,
                    burst: (kind != Kind::Unary).then_some(upstream),
                };
                let spec = GatewaySpec::new(Mode::ThreadPerCore, 1, None, Vec::new());
                gateway(bin, spec, upstreams)
            }
            Who::Floor => {
                let spec = GatewaySpec::floor(Mode::ThreadPerCore, 1, None);
                let upstreams = Upstreams {
                    mock: upstream,
                    burst: None,
                };
                // The floor is this executable; the path is unused.
                gateway(Path::new(""), spec, upstreams)
            }
            Who::Nginx => {
                let bin = self
                    .nginx_bin
                    .as_deref()
                    .context("nginx is not installed")?;
                let nginx = if wrap.is_empty() {
                    Nginx::start(bin, 1, None, upstream, dir)?
                } else {
                    Nginx::start_wrapped(bin, wrap, upstream, dir)?
                };
                Ok(Running {
                    target: if kind == Kind::Unary {
                        nginx.addr
                    } else {
                        nginx.sse_addr
                    },
                    pids: nginx.pids(),
                    proxy: Proxy::Nginx(nginx),
                })
            }
        }
    }

    fn request(&self, who: Who, kind: Kind, target: SocketAddr) -> Arc<[u8]> {
        let gateway = matches!(who, Who::Aisix | Who::Baseline);
        let body = match (kind, gateway) {
            (Kind::Unary, true) => UNARY_BODY,
            (Kind::Unary, false) => DIRECT_UNARY_BODY,
            (_, true) => BURST_STREAM_BODY,
            (_, false) => DIRECT_STREAM_BODY,
        };
        loadgen::post_request(target, CHAT, BENCH_KEY, body)
    }

    fn workload(&self, kind: Kind) -> Workload {
        match kind {
            Kind::Unary => Workload::Unary,
            _ => Workload::Stream {
                frames: self.args.frames.max(1),
                stall: self.args.timeout,
            },
        }
    }

    fn load_spec(&self, who: Who, kind: Kind, target: SocketAddr, c: usize) -> LoadSpec {
        LoadSpec {
            target,
            request: self.request(who, kind, target),
            workload: self.workload(kind),
            connections: c,
            threads: 1,
            cpus: None,
            timeout: self.args.timeout,
            rate: None,
        }
    }

    /// One run of `who` under valgrind: idle (`load` None) or loaded.
    fn counted_run(
        &self,
        who: Who,
        (kind, upstream): (Kind, &Upstream<'_>),
        load: Option<usize>,
        name: &str,
    ) -> Result<Counted> {
        let dir = self.work.join(name);
        std::fs::create_dir_all(&dir)?;
        let out = dir.join(match self.args.tool {
            Tool::Cachegrind => "cachegrind.out",
            Tool::Callgrind => "callgrind.out",
        });
        let wrap = self.args.tool.wrap(&self.valgrind, &out);
        eprintln!("[instr] {name}: starting under valgrind");
        let running = self.start(who, kind, upstream.addr(), &wrap, &dir)?;
        let before = upstream.requests()?;
        let mut failures = 0;
        match load {
            None => process::sleep(self.args.duration)?,
            Some(c) => {
                let run = LoadRun::start(&self.load_spec(who, kind, running.target, c))?;
                let slept = process::sleep(self.args.duration);
                for record in run.stop()? {
                    failures += record.failures + record.dropped;
                }
                slept?;
            }
        }
        // nginx logs a request just after answering it.
        std::thread::sleep(Duration::from_millis(200));
        let requests = upstream.requests()?.saturating_sub(before);
        running.stop()?;
        let text = std::fs::read_to_string(&out)
            .with_context(|| format!("read valgrind's counts {}", out.display()))?;
        Ok(Counted {
            ir: total_ir(&text)?,
            allocs: (self.args.tool == Tool::Callgrind).then(|| allocator_calls(&text)),
            requests,
            failures,
        })
    }

    /// System calls and requests in one strace window, `who` run natively.
    fn syscalls(
        &self,
        who: Who,
        (kind, upstream): (Kind, &Upstream<'_>),
        c: usize,
        name: &str,
    ) -> Result<(u64, u64)> {
        let strace = self.strace.as_deref().context("strace is not installed")?;
        let dir = self.work.join(name);
        let running = self.start(who, kind, upstream.addr(), &[], &dir)?;
        let rig = Rig {
            mock: self.mock,
            load_cpus: None,
            load_threads: 1,
            load_cpu_count: 1,
            timeout: self.args.timeout,
            bystander: None,
        };
        let subject = Subject {
            leg: who.name().to_owned(),
            workers: 1,
            pids: running.pids.clone(),
            addr: running.target,
            metrics: None,
        };
        let timing = Timing {
            warmup: Duration::from_millis(500),
            window: self.args.syscall_window,
            reps: 1,
        };
        let row = rig.syscalls(
            &subject,
            &self.request(who, kind, running.target),
            (self.workload(kind), c),
            &timing,
            strace,
            &dir.join("strace.txt"),
        )?;
        running.stop()?;
        Ok((row.counts.total, row.requests))
    }
}

impl InstrArgs {
    fn apply_smoke(&mut self) {
        self.concurrency = CommaList(vec![8]);
        self.duration = Duration::from_secs(1);
        self.frames = 4;
        self.syscall_window = Duration::from_millis(500);
    }

    fn mock_args(&self, burst: bool) -> MockArgs {
        MockArgs {
            addr: ([127, 0, 0, 1], 0).into(),
            stats_addr: ([127, 0, 0, 1], 0).into(),
            workers: 1,
            ttft: Duration::ZERO,
            frames: self.frames.max(1),
            gap: Duration::ZERO,
            burst,
            hostile_event_mib: 1,
            hostile_body_mb: 1,
        }
    }
}

/// Runs every point, prints the report and writes it (Markdown and JSON lines) to the run
/// folder.
pub fn run(mut args: InstrArgs) -> Result<()> {
    process::install_interrupt_handler();
    if args.smoke {
        args.apply_smoke();
    }
    let valgrind = args
        .valgrind
        .clone()
        .or_else(|| process::which("valgrind"))
        .context("valgrind is not installed (apt-get install valgrind)")?;
    let subjects = &args.subjects.0;
    if subjects.contains(&Who::Baseline) && args.baseline_bin.is_none() {
        bail!("the baseline subject needs --baseline-bin");
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| gateway::workspace_root().join("bench-results"));
    let run_name = format!("{}-instr", crate::grid::utc_stamp());
    let work = out.join(&run_name);
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let work = work.canonicalize()?;
    eprintln!("[instr] results: {}", work.display());
    let aisix_bin = if subjects.contains(&Who::Aisix) {
        Some(gateway::binary(
            args.aisix_bin.as_deref(),
            &work.join("cargo-build.jsonl"),
            &[],
        )?)
    } else {
        None
    };
    let baseline_bin = match &args.baseline_bin {
        Some(path) => Some(gateway::prebuilt(path, "--baseline-bin")?),
        None => None,
    };
    let nginx_bin = args.nginx_bin.clone().or_else(|| process::which("nginx"));
    let needs_nginx =
        subjects.contains(&Who::Nginx) || args.workloads.0.contains(&Kind::StreamNginx);
    if needs_nginx && nginx_bin.is_none() {
        bail!("nginx is not installed (the nginx subject and stream-nginx need it)");
    }
    let strace = if args.no_strace {
        None
    } else {
        process::which("strace")
    };

    let mock = Mock::start(&args.mock_args(false), None, &work.join("mock.log"))?;
    let burst = Mock::start(&args.mock_args(true), None, &work.join("mock-burst.log"))?;
    let origin = match (args.workloads.0.contains(&Kind::StreamNginx), &nginx_bin) {
        (true, Some(bin)) => Some(SseOrigin::start(
            bin,
            &aisix_testkit::mock::fast::burst_stream(args.frames.max(1)),
            &work.join("origin"),
        )?),
        _ => None,
    };
    let bench = Bench {
        args: &args,
        aisix_bin,
        baseline_bin,
        nginx_bin,
        valgrind,
        strace,
        mock: &mock,
        work: work.clone(),
    };

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &who in subjects {
        let name = who.name();
        let idle_upstream = Upstream::Mock(&mock);
        let idle = bench.counted_run(
            who,
            (Kind::Unary, &idle_upstream),
            None,
            &format!("{name}-idle"),
        )?;
        for &kind in &args.workloads.0 {
            let upstream = match kind {
                Kind::Unary => Upstream::Mock(&mock),
                Kind::Stream => Upstream::Mock(&burst),
                Kind::StreamNginx => Upstream::Origin(origin.as_ref().context("the SSE origin")?),
            };
            for &c in &args.concurrency.0 {
                process::check_interrupted()?;
                let point = format!("{name}-{}-c{c}", kind.name());
                let loaded = bench.counted_run(who, (kind, &upstream), Some(c), &point)?;
                let syscalls = if bench.strace.is_some() {
                    match bench.syscalls(who, (kind, &upstream), c, &format!("{point}-strace")) {
                        Ok(counts) => Some(counts),
                        Err(error) => {
                            notes.push(format!("{point}: no strace figure: {error:#}"));
                            None
                        }
                    }
                } else {
                    None
                };
                let row = Row {
                    who,
                    kind,
                    concurrency: c,
                    requests: loaded.requests,
                    failures: loaded.failures,
                    ir_loaded: loaded.ir,
                    ir_idle: idle.ir,
                    allocs: loaded.allocs.zip(idle.allocs),
                    syscalls,
                };
                eprintln!(
                    "[instr] {point}: {} requests, {:.0} Ir/request",
                    row.requests,
                    row.ir_per_request()
                );
                rows.push(row);
            }
        }
    }
    let report = markdown(&args, &rows, &notes);
    println!("{report}");
    std::fs::write(work.join("instr.md"), &report)?;
    std::fs::write(work.join("instr.jsonl"), json_lines(&rows))?;
    if args.smoke {
        let bad: Vec<String> = rows
            .iter()
            .filter(|r| r.failures > 0 || r.requests == 0)
            .map(|r| format!("{} {} c={}", r.who.name(), r.kind.name(), r.concurrency))
            .collect();
        if !bad.is_empty() {
            bail!(
                "smoke: points with failures or no requests: {}",
                bad.join(", ")
            );
        }
    }
    Ok(())
}

fn json_lines(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            json!({
                "subject": r.who.name(), "workload": r.kind.name(), "concurrency": r.concurrency,
                "requests": r.requests, "failures": r.failures, "ir_loaded": r.ir_loaded,
                "ir_idle": r.ir_idle, "ir_per_request": r.ir_per_request(),
                "allocs_per_request": r.allocs_per_request(),
                "syscalls_per_request": r.syscalls_per_request(),
            })
            .to_string()
                + "\n"
        })
        .collect()
}

/// The table of points and the ratios between subjects at each workload and concurrency.
fn markdown(args: &InstrArgs, rows: &[Row], notes: &[String]) -> String {
    let mut out = format!(
        "# aisix-bench instr\n\nvalgrind {:?}; {:?} per run; one worker; {} frames per stream\n\n\
         | subject | workload | c | requests | failed | Ir loaded | Ir idle | Ir/request | allocs/request | syscalls/request |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        args.tool, args.duration, args.frames
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |\n",
            r.who.name(),
            r.kind.name(),
            r.concurrency,
            r.requests,
            r.failures,
            r.ir_loaded,
            r.ir_idle,
            r.ir_per_request(),
            r.allocs_per_request()
                .map_or("–".to_owned(), |a| format!("{a:.1}")),
            r.syscalls_per_request()
                .map_or("–".to_owned(), |s| format!("{s:.2}")),
        ));
    }
    out.push_str(
        "\n| ratio | workload | c | Ir/request | syscalls/request |\n|---|---|---|---|---|\n",
    );
    let find = |who: Who, kind: Kind, c: usize| {
        rows.iter()
            .find(|r| r.who == who && r.kind == kind && r.concurrency == c)
    };
    for &kind in &args.workloads.0 {
        for &c in &args.concurrency.0 {
            for (a, b) in [
                (Who::Aisix, Who::Floor),
                (Who::Floor, Who::Nginx),
                (Who::Aisix, Who::Nginx),
                (Who::Aisix, Who::Baseline),
            ] {
                let (Some(x), Some(y)) = (find(a, kind, c), find(b, kind, c)) else {
                    continue;
                };
                let sys = match (x.syscalls_per_request(), y.syscalls_per_request()) {
                    (Some(p), Some(q)) => format!("{:.2}", p / q),
                    _ => "–".to_owned(),
                };
                out.push_str(&format!(
                    "| {} ÷ {} | {} | {c} | {:.3} | {sys} |\n",
                    a.name(),
                    b.name(),
                    kind.name(),
                    x.ir_per_request() / y.ir_per_request(),
                ));
            }
        }
    }
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        for note in notes {
            out.push_str(&format!("- {note}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_total_is_read_from_cachegrind_and_callgrind_files() {
        let cachegrind =
            "desc: I1 cache: none\ncmd: aisix\nevents: Ir\nfl=a.rs\n1 5\nsummary: 123456\n";
        assert_eq!(total_ir(cachegrind).unwrap(), 123_456);
        let callgrind =
            "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=main\n1 9\ntotals: 987\n";
        assert_eq!(total_ir(callgrind).unwrap(), 987);
        assert!(total_ir("events: Ir\n").is_err());
    }

    #[test]
    fn allocator_calls_are_summed_from_callgrind_call_lines_by_callee_name() {
        let text = "\
events: Ir
fn=(1) main
cfn=(2) _rjem_malloc
calls=3 0x1
5 30
cfn=(3) parse
calls=7 0x2
5 70
fn=(3)
cfn=(2)
calls=4 0x1
9 40
cfn=(4) _rjem_sdallocx
calls=4 0x3
9 8
";
        assert_eq!(allocator_calls(text), 7);
    }

    #[test]
    fn valgrind_writes_its_counts_where_the_harness_reads_them() {
        let wrap = Tool::Cachegrind.wrap(Path::new("/usr/bin/valgrind"), Path::new("/r/c.out"));
        assert_eq!(
            wrap,
            [
                "/usr/bin/valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/r/c.out"
            ]
            .map(OsString::from)
        );
        let wrap = Tool::Callgrind.wrap(Path::new("valgrind"), Path::new("/r/c.out"));
        assert_eq!(wrap[1], "--tool=callgrind");
        assert_eq!(wrap[2], "--callgrind-out-file=/r/c.out");
    }

    #[test]
    fn instructions_per_request_subtract_the_idle_run() {
        let row = Row {
            who: Who::Aisix,
            kind: Kind::Unary,
            concurrency: 32,
            requests: 1000,
            failures: 0,
            ir_loaded: 5_000_000,
            ir_idle: 1_000_000,
            allocs: Some((30_500, 500)),
            syscalls: Some((9000, 1000)),
        };
        assert_eq!(row.allocs_per_request(), Some(30.0));
        assert_eq!(row.ir_per_request(), 4000.0);
        assert_eq!(row.syscalls_per_request(), Some(9.0));
        assert_eq!("stream-nginx".parse(), Ok(Kind::StreamNginx));
        assert_eq!("floor".parse(), Ok(Who::Floor));
        assert!("both".parse::<Who>().is_err());
    }
}
