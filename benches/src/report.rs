//! What a grid run found and how it is written: one row per measured window, stream window and
//! strace window; the Markdown report (medians over repetitions, then ratios) and JSON lines.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::strace::SyscallCounts;

/// The leg every other leg is compared against.
pub const DIRECT: &str = "mock-direct";
pub const NGINX: &str = "nginx";
/// The floor proxy: the gateway's stack with no gateway logic (`floor.rs`).
pub const FLOOR: &str = "floor-tpc";
/// System calls worth seeing even outside the top ten: each is a hot-path rule in DESIGN §3.4.
const WATCHED_SYSCALLS: [&str; 7] = [
    "getrandom",
    "clock_gettime",
    "gettimeofday",
    "write",
    "openat",
    "futex",
    "madvise",
];

/// One closed-loop window at one concurrency.
#[derive(Debug, Clone, Default)]
pub struct WindowRow {
    pub leg: String,
    pub workers: usize,
    pub concurrency: usize,
    pub rep: usize,
    pub seconds: f64,
    /// Good answers completed in the window.
    pub requests: u64,
    pub failures: u64,
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// CPU (user + system, all threads) of the process(es) under test per request.
    pub cpu_us_per_req: f64,
    /// The same CPU as cores busy over the window.
    pub cpu_cores: f64,
    pub ctx_per_req: f64,
    pub rss_mib: f64,
    pub hwm_mib: f64,
    /// Connections the mock accepted during the window.
    pub new_upstream_conns: u64,
    /// Sockets in TIME_WAIT with the mock's port on either end, at the window's end (earlier
    /// legs' sockets included: TIME_WAIT lasts 60 s).
    pub time_wait: usize,
    /// Of those, the ones that appeared during the window: connection churn towards the mock.
    pub new_time_wait: usize,
    pub mock_requests: u64,
    pub mock_cpu_us_per_req: f64,
    pub load_cpu_us_per_req: f64,
    /// The load generator's CPU as a share of its CPUs (1.0 = every load CPU busy).
    pub load_cpu_share: f64,
    /// Access-log lines the gateway dropped during the window (`None`: not a gateway with
    /// metrics on). Any drop makes the window invalid: the log was not keeping up.
    pub log_dropped: Option<u64>,
    /// Requests each worker received during the window (`aisix_worker_requests_total` by
    /// `worker`; empty without metrics).
    pub worker_requests: Vec<(String, u64)>,
    /// Allocations per request, and bytes they asked for (a `count-alloc` gateway only;
    /// process-wide, so the control thread's `/metrics` renders at the window edges count too).
    pub allocs_per_req: Option<f64>,
    pub alloc_bytes_per_req: Option<f64>,
    /// The longest a worker's thread was held from its other tasks during the window, ms (a
    /// `poll-probe` gateway only).
    pub longest_delay_ms: Option<f64>,
    /// The longest single poll of a client connection's task during the window, ms (the same).
    pub longest_poll_ms: Option<f64>,
    /// The most CPU time one such poll took, ms (the same).
    pub longest_poll_cpu_ms: Option<f64>,
    /// The largest CPU-time step an idle-priority bystander on the gateway's CPU saw between
    /// two reads of its own clock, ms: CPU the machine charged to whatever ran (the same).
    pub bystander_ms: Option<f64>,
    /// Open loop: requests that left more than a millisecond after their scheduled time.
    pub late: u64,
    pub errors: Vec<String>,
}

impl WindowRow {
    pub fn valid(&self) -> bool {
        self.failures == 0 && self.requests > 0 && self.log_dropped.unwrap_or(0) == 0
    }

    fn json(&self) -> Value {
        json!({
            "type": "window", "leg": self.leg, "workers": self.workers,
            "concurrency": self.concurrency, "rep": self.rep, "seconds": round(self.seconds, 3),
            "requests": self.requests, "failures": self.failures, "valid": self.valid(),
            "rps": round(self.rps, 1), "p50_us": round(self.p50_us, 1), "p99_us": round(self.p99_us, 1),
            "max_us": round(self.max_us, 1), "cpu_us_per_req": round(self.cpu_us_per_req, 2),
            "cpu_cores": round(self.cpu_cores, 3), "ctx_switches_per_req": round(self.ctx_per_req, 3),
            "rss_mib": round(self.rss_mib, 1), "rss_peak_mib": round(self.hwm_mib, 1),
            "new_upstream_conns": self.new_upstream_conns, "time_wait_to_mock": self.time_wait,
            "new_time_wait_to_mock": self.new_time_wait,
            "mock_requests": self.mock_requests,
            "mock_cpu_us_per_req": round(self.mock_cpu_us_per_req, 2),
            "load_cpu_us_per_req": round(self.load_cpu_us_per_req, 2),
            "load_cpu_share": round(self.load_cpu_share, 3),
            "access_log_dropped": self.log_dropped,
            "allocs_per_req": self.allocs_per_req.map(|v| round(v, 2)),
            "alloc_bytes_per_req": self.alloc_bytes_per_req.map(|v| round(v, 1)),
            "longest_delay_ms": self.longest_delay_ms.map(|v| round(v, 3)),
            "longest_poll_ms": self.longest_poll_ms.map(|v| round(v, 3)),
            "longest_poll_cpu_ms": self.longest_poll_cpu_ms.map(|v| round(v, 3)),
            "bystander_ms": self.bystander_ms.map(|v| round(v, 3)),
            "worker_requests": self.worker_requests.iter().map(|(w, n)| json!({"worker": w, "requests": n})).collect::<Vec<_>>(),
            "late": self.late,
            "errors": self.errors,
        })
    }
}

/// One streaming window.
#[derive(Debug, Clone, Default)]
pub struct StreamRow {
    pub leg: String,
    pub workers: usize,
    pub streams: usize,
    pub seconds: f64,
    pub completed: u64,
    pub dropped: u64,
    pub stalled: u64,
    pub failures: u64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub gap_p50_ms: f64,
    pub gap_p99_ms: f64,
    pub cpu_us_per_stream: f64,
    pub new_upstream_conns: u64,
    pub load_cpu_share: f64,
    /// As [`WindowRow::log_dropped`].
    pub log_dropped: Option<u64>,
    /// As [`WindowRow::allocs_per_req`], per stream.
    pub allocs_per_stream: Option<f64>,
    pub errors: Vec<String>,
}

impl StreamRow {
    pub fn valid(&self) -> bool {
        self.failures == 0
            && self.dropped == 0
            && self.completed > 0
            && self.log_dropped.unwrap_or(0) == 0
    }

    fn json(&self) -> Value {
        json!({
            "type": "stream", "leg": self.leg, "workers": self.workers, "streams": self.streams,
            "seconds": round(self.seconds, 3), "completed": self.completed, "dropped": self.dropped,
            "stalled": self.stalled, "failures": self.failures, "valid": self.valid(),
            "ttft_p50_ms": round(self.ttft_p50_ms, 3), "ttft_p99_ms": round(self.ttft_p99_ms, 3),
            "gap_p50_ms": round(self.gap_p50_ms, 3), "gap_p99_ms": round(self.gap_p99_ms, 3),
            "cpu_us_per_stream": round(self.cpu_us_per_stream, 1),
            "new_upstream_conns": self.new_upstream_conns,
            "load_cpu_share": round(self.load_cpu_share, 3),
            "access_log_dropped": self.log_dropped,
            "allocs_per_stream": self.allocs_per_stream.map(|v| round(v, 2)),
            "errors": self.errors,
        })
    }
}

/// One strace window.
#[derive(Debug, Clone, Default)]
pub struct SyscallRow {
    pub leg: String,
    pub concurrency: usize,
    pub seconds: f64,
    pub requests: u64,
    pub counts: SyscallCounts,
}

impl SyscallRow {
    fn per_request(&self, calls: u64) -> f64 {
        calls as f64 / self.requests.max(1) as f64
    }

    fn json(&self) -> Value {
        let top: Vec<Value> = self
            .counts
            .by_name
            .iter()
            .map(|(name, calls)| json!({"syscall": name, "calls": calls, "per_req": round(self.per_request(*calls), 3)}))
            .collect();
        json!({
            "type": "syscalls", "leg": self.leg, "concurrency": self.concurrency,
            "seconds": round(self.seconds, 3), "requests": self.requests,
            "syscalls": self.counts.total, "per_req": round(self.per_request(self.counts.total), 2),
            "by_syscall": top,
        })
    }
}

/// Everything one run produced.
#[derive(Debug, Default)]
pub struct Results {
    /// Setup facts for the header (machine, placement, timing), already formatted.
    pub header: Vec<String>,
    pub settings: Value,
    pub windows: Vec<WindowRow>,
    pub streams: Vec<StreamRow>,
    pub syscalls: Vec<SyscallRow>,
    /// Legs that failed or were skipped, warm-up failures, warnings.
    pub notes: Vec<String>,
    /// The leg whose observability was switched off, and the leg it is compared with.
    pub obs_pair: Option<(String, String)>,
    /// Legs priced against another leg of the run (CPU µs/req and req/s ratios).
    pub pairs: Vec<Pair>,
    /// Streaming legs priced against another streaming leg (CPU µs per stream; the
    /// concurrency column is the stream count).
    pub stream_pairs: Vec<Pair>,
    /// Legs whose p99 is priced against another leg's (the ratio is named `what` alone).
    pub latency_pairs: Vec<Pair>,
    /// The hostile-neighbour leg's windows, in the order they ran.
    pub hostile: Vec<HostileRow>,
}

/// One window of the hostile-neighbour leg: which leg and rep (its figures are the
/// [`WindowRow`] of the same leg, concurrency and rep) and, beside the neighbour, what the
/// neighbour did.
#[derive(Debug, Clone, Default)]
pub struct HostileRow {
    pub leg: String,
    pub concurrency: usize,
    pub rep: usize,
    /// `None`: the normal traffic alone.
    pub neighbour: Option<crate::hostile::Tally>,
}

impl HostileRow {
    fn json(&self) -> Value {
        let neighbour = self.neighbour.as_ref().map(|t| {
            json!({
                "streams": t.streams, "bodies": t.bodies, "bytes": t.bytes,
                "outcomes": t.outcomes,
            })
        });
        json!({
            "type": "hostile", "leg": self.leg, "concurrency": self.concurrency, "rep": self.rep,
            "neighbour": neighbour,
        })
    }
}

/// A leg compared with a base leg at each concurrency both have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// The ratio's name, e.g. `group/direct`.
    pub what: String,
    pub leg: String,
    pub base: String,
}

impl Pair {
    pub fn new(what: &str, leg: &str, base: &str) -> Pair {
        Pair {
            what: what.to_owned(),
            leg: leg.to_owned(),
            base: base.to_owned(),
        }
    }
}

/// What starts the name of a balance leg (`balance tpc-handoff`).
pub const BALANCE_PREFIX: &str = "balance ";

/// One balance point: a gateway's trials at one concurrency.
#[derive(Debug, Clone, PartialEq)]
struct BalancePoint {
    leg: String,
    concurrency: usize,
    trials: usize,
    valid: bool,
    worst_rps: f64,
    median_rps: f64,
    /// The busiest worker's share of the requests: median and worst over the trials (`None`:
    /// no per-worker counts).
    median_busiest: Option<f64>,
    worst_busiest: Option<f64>,
}

/// The busiest worker's share of a window's requests (`None` without per-worker counts, and for
/// the shared runtime, which is one worker: its threads are not counted apart).
fn busiest_share(row: &WindowRow) -> Option<f64> {
    if row
        .worker_requests
        .iter()
        .all(|(worker, _)| worker == "shared")
    {
        return None;
    }
    let total: u64 = row.worker_requests.iter().map(|(_, n)| n).sum();
    let busiest = row.worker_requests.iter().map(|(_, n)| *n).max()?;
    (total > 0).then(|| busiest as f64 / total as f64)
}

/// Medians over the repetitions of one (leg, concurrency) point.
#[derive(Debug, Clone)]
struct Point {
    leg: String,
    concurrency: usize,
    valid: bool,
    rps: f64,
    rps_spread: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_req: f64,
    cpu_cores: f64,
    ctx_per_req: f64,
    hwm_mib: f64,
    new_upstream_conns: u64,
    time_wait: usize,
    new_time_wait: usize,
    mock_cpu_us_per_req: f64,
    load_cpu_share: f64,
    failures: u64,
    /// Open loop: requests sent late over the windows.
    late: u64,
    /// Access-log lines dropped over the windows (`None`: not read for this leg).
    log_dropped: Option<u64>,
    /// Median allocations and bytes per request (`None`: not a `count-alloc` gateway).
    allocs_per_req: Option<f64>,
    alloc_bytes_per_req: Option<f64>,
}

/// The median of the values present, if any is.
fn median_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let values: Vec<f64> = values.flatten().collect();
    (!values.is_empty()).then(|| median(values))
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// The leg name of an open-loop run at `percent` of `leg`'s saturation.
pub fn open_loop_leg(leg: &str, percent: u32) -> String {
    format!("{leg}{OPEN_LOOP}{percent}%")
}

/// What marks an open-loop leg's name.
const OPEN_LOOP: &str = " open-loop ";

fn is_open_loop(leg: &str) -> bool {
    leg.contains(OPEN_LOOP)
}

impl Results {
    /// The median req/s of `leg`'s valid closed-loop point at `concurrency` connections: the
    /// rate it sustains on that many connections (0 when it has no such point).
    pub fn saturation(&self, leg: &str, concurrency: usize) -> f64 {
        self.points()
            .iter()
            .find(|p| p.leg == leg && p.concurrency == concurrency && p.valid)
            .map_or(0.0, |p| p.rps)
    }

    /// The windows of each (leg, concurrency) whose leg `keep` accepts, in first-seen order.
    fn by_point(&self, keep: impl Fn(&str) -> bool) -> Vec<(String, usize, Vec<&WindowRow>)> {
        let mut points: Vec<(String, usize, Vec<&WindowRow>)> = Vec::new();
        for row in self.windows.iter().filter(|r| keep(&r.leg)) {
            match points
                .iter_mut()
                .find(|(leg, c, _)| *leg == row.leg && *c == row.concurrency)
            {
                Some((_, _, rows)) => rows.push(row),
                None => points.push((row.leg.clone(), row.concurrency, vec![row])),
            }
        }
        points
    }

    fn points(&self) -> Vec<Point> {
        self.by_point(|_| true)
            .into_iter()
            .map(|(leg, concurrency, rows)| {
                let m = |f: fn(&WindowRow) -> f64| median(rows.iter().map(|r| f(r)).collect());
                let rps = m(|r| r.rps);
                let (lo, hi) = rows.iter().fold((f64::INFINITY, 0f64), |(lo, hi), r| {
                    (lo.min(r.rps), hi.max(r.rps))
                });
                Point {
                    leg,
                    concurrency,
                    valid: rows.iter().all(|r| r.valid()),
                    rps,
                    rps_spread: if rps > 0.0 { (hi - lo) / rps } else { 0.0 },
                    p50_us: m(|r| r.p50_us),
                    p99_us: m(|r| r.p99_us),
                    cpu_us_per_req: m(|r| r.cpu_us_per_req),
                    cpu_cores: m(|r| r.cpu_cores),
                    ctx_per_req: m(|r| r.ctx_per_req),
                    hwm_mib: rows.iter().map(|r| r.hwm_mib).fold(0.0, f64::max),
                    new_upstream_conns: rows.iter().map(|r| r.new_upstream_conns).sum(),
                    time_wait: rows.iter().map(|r| r.time_wait).max().unwrap_or(0),
                    new_time_wait: rows.iter().map(|r| r.new_time_wait).sum(),
                    mock_cpu_us_per_req: m(|r| r.mock_cpu_us_per_req),
                    load_cpu_share: m(|r| r.load_cpu_share),
                    failures: rows.iter().map(|r| r.failures).sum(),
                    late: rows.iter().map(|r| r.late).sum(),
                    log_dropped: rows
                        .iter()
                        .filter_map(|r| r.log_dropped)
                        .reduce(|a, b| a + b),
                    allocs_per_req: median_of(rows.iter().map(|r| r.allocs_per_req)),
                    alloc_bytes_per_req: median_of(rows.iter().map(|r| r.alloc_bytes_per_req)),
                }
            })
            .collect()
    }

    fn balance_points(&self) -> Vec<BalancePoint> {
        self.by_point(|leg| leg.starts_with(BALANCE_PREFIX))
            .into_iter()
            .map(|(leg, concurrency, rows)| {
                let shares: Vec<f64> = rows.iter().filter_map(|r| busiest_share(r)).collect();
                let complete = shares.len() == rows.len() && !shares.is_empty();
                BalancePoint {
                    trials: rows.len(),
                    valid: rows.iter().all(|r| r.valid()),
                    worst_rps: rows.iter().map(|r| r.rps).fold(f64::INFINITY, f64::min),
                    median_rps: median(rows.iter().map(|r| r.rps).collect()),
                    median_busiest: complete.then(|| median(shares.clone())),
                    worst_busiest: complete.then(|| shares.iter().copied().fold(0.0, f64::max)),
                    leg,
                    concurrency,
                }
            })
            .collect()
    }

    /// Every window, stream and strace row was good and no leg failed.
    pub fn all_valid(&self) -> bool {
        self.windows.iter().all(WindowRow::valid) && self.streams.iter().all(StreamRow::valid)
    }

    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        let mut push = |value: Value| {
            out.push_str(&value.to_string());
            out.push('\n');
        };
        push(json!({"type": "run", "settings": self.settings, "notes": self.notes}));
        for row in &self.windows {
            push(row.json());
        }
        for row in &self.streams {
            push(row.json());
        }
        for row in &self.syscalls {
            push(row.json());
        }
        for row in &self.hostile {
            push(row.json());
        }
        for ratio in self.ratios() {
            push(
                json!({"type": "ratio", "what": ratio.0, "concurrency": ratio.1, "value": round(ratio.2, 3)}),
            );
        }
        out
    }

    /// (what, concurrency, value) for every ratio the report prints.
    fn ratios(&self) -> Vec<(String, usize, f64)> {
        let points = self.points();
        let find = |leg: &str, c: usize| points.iter().find(|p| p.leg == leg && p.concurrency == c);
        let mut out = Vec::new();
        for p in points.iter().filter(|p| p.leg == "aisix-tpc") {
            let c = p.concurrency;
            if let Some(shared) = find("aisix-shared", c) {
                out.push((
                    "tpc/shared cpu_us_per_req".into(),
                    c,
                    p.cpu_us_per_req / shared.cpu_us_per_req,
                ));
                out.push(("tpc/shared rps".into(), c, p.rps / shared.rps));
            }
        }
        // The grid's serving-mode legs only: the variant legs are priced against those.
        let mode_leg = |leg: &str| {
            matches!(
                leg.strip_suffix(crate::wrk::SUFFIX).unwrap_or(leg),
                "aisix-tpc" | "aisix-shared"
            )
        };
        for p in points.iter().filter(|p| mode_leg(&p.leg)) {
            // Each load generator's figures are compared with nginx under the same one.
            let nginx = match p.leg.strip_suffix(crate::wrk::SUFFIX) {
                Some(_) => format!("{NGINX}{}", crate::wrk::SUFFIX),
                None => NGINX.to_owned(),
            };
            if let Some(nginx) = find(&nginx, p.concurrency) {
                out.push((
                    format!("{}/nginx cpu_us_per_req", p.leg),
                    p.concurrency,
                    p.cpu_us_per_req / nginx.cpu_us_per_req,
                ));
                out.push((
                    format!("{}/nginx rps", p.leg),
                    p.concurrency,
                    p.rps / nginx.rps,
                ));
            }
        }
        for pair in &self.pairs {
            for p in points.iter().filter(|p| p.leg == pair.leg) {
                if let Some(base) = find(&pair.base, p.concurrency) {
                    out.push((
                        format!("{} cpu_us_per_req", pair.what),
                        p.concurrency,
                        p.cpu_us_per_req / base.cpu_us_per_req,
                    ));
                    out.push((
                        format!("{} rps", pair.what),
                        p.concurrency,
                        p.rps / base.rps,
                    ));
                }
            }
        }
        for pair in &self.latency_pairs {
            for p in points.iter().filter(|p| p.leg == pair.leg) {
                if let Some(base) = find(&pair.base, p.concurrency) {
                    out.push((pair.what.clone(), p.concurrency, p.p99_us / base.p99_us));
                }
            }
        }
        for pair in &self.stream_pairs {
            // The median over the leg's valid stream windows (one per rep in a comparison).
            let stream = |leg: &str| {
                let rows: Vec<&StreamRow> = self
                    .streams
                    .iter()
                    .filter(|s| s.leg == leg && s.valid())
                    .collect();
                let first = rows.first()?;
                Some((
                    first.streams,
                    median(rows.iter().map(|s| s.cpu_us_per_stream).collect()),
                ))
            };
            if let (Some((streams, cpu)), Some((_, base))) = (stream(&pair.leg), stream(&pair.base))
                && base > 0.0
            {
                out.push((
                    format!("{} cpu_us_per_stream", pair.what),
                    streams,
                    cpu / base,
                ));
            }
        }
        if let Some((off, on)) = &self.obs_pair {
            for p in points.iter().filter(|p| &p.leg == off) {
                if let Some(on) = find(on, p.concurrency) {
                    out.push((
                        "observability on/off cpu_us_per_req".into(),
                        p.concurrency,
                        on.cpu_us_per_req / p.cpu_us_per_req,
                    ));
                }
            }
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let points = self.points();
        let _ = writeln!(md, "# aisix saturation grid\n");
        for line in &self.header {
            let _ = writeln!(md, "- {line}");
        }

        let _ = writeln!(
            md,
            "\n## Closed loop, non-streaming (medians over the windows of each point)\n\n\
             | leg | conc | req/s | ±% | p50 ms | p99 ms | CPU µs/req | CPU cores | ctxsw/req | peak RSS MiB | new upstream conns | new TIME_WAIT (total) | mock µs/req | load CPU % | log lines dropped | ok |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|"
        );
        for p in points
            .iter()
            .filter(|p| !is_open_loop(&p.leg) && !p.leg.starts_with(BALANCE_PREFIX))
        {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.1} | {:.3} | {:.3} | {:.1} | {:.2} | {:.2} | {:.1} | {} | {} ({}) | {:.1} | {:.0}{} | {} | {} |",
                p.leg,
                p.concurrency,
                p.rps,
                p.rps_spread * 100.0,
                p.p50_us / 1e3,
                p.p99_us / 1e3,
                p.cpu_us_per_req,
                p.cpu_cores,
                p.ctx_per_req,
                p.hwm_mib,
                p.new_upstream_conns,
                p.new_time_wait,
                p.time_wait,
                p.mock_cpu_us_per_req,
                p.load_cpu_share * 100.0,
                if p.load_cpu_share > 0.9 { " ⚠" } else { "" },
                count_or_dash(p.log_dropped),
                verdict(p),
            );
        }
        let _ = writeln!(
            md,
            "\nCPU µs/req: user+system CPU of the process under test (all threads; nginx: master + workers) \
             over the window ÷ requests. ±%: (max − min) ÷ median req/s over the windows. \
             new upstream conns: connections the mock accepted during the windows (sum). \
             new TIME_WAIT: sockets towards the mock's port that entered TIME_WAIT during the windows (sum); \
             in brackets, all of them at the end of a window, earlier legs' included (they last 60 s). \
             load CPU %: the load generator's CPU ÷ its CPUs (⚠ above 90%: the load generator may be the limit). \
             log lines dropped: the gateway's `aisix_access_log_dropped_total` over the windows (– : not a gateway with metrics on); \
             any drop makes a window invalid."
        );

        let open: Vec<&Point> = points.iter().filter(|p| is_open_loop(&p.leg)).collect();
        if !open.is_empty() {
            let _ = writeln!(
                md,
                "\n## Open loop (fixed arrival rate; latency from each request's scheduled send)\n\n\
                 | leg | pool conns | req/s | p50 ms | p99 ms | late sends | CPU µs/req | log lines dropped | ok |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|:-:|"
            );
            for p in open {
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.0} | {:.3} | {:.3} | {} | {:.1} | {} | {} |",
                    p.leg,
                    p.concurrency,
                    p.rps,
                    p.p50_us / 1e3,
                    p.p99_us / 1e3,
                    p.late,
                    p.cpu_us_per_req,
                    count_or_dash(p.log_dropped),
                    verdict(p),
                );
            }
            let _ = writeln!(
                md,
                "\nThe rate is a share of the req/s the leg made closed-loop at the pool's concurrency. A late send left more than 1 ms \
                 after its scheduled time (every pooled connection was busy); its latency still counts \
                 from the scheduled time, so queueing shows (no coordinated omission)."
            );
        }

        let balance = self.balance_points();
        if !balance.is_empty() {
            let _ = writeln!(
                md,
                "\n## Worker balance (one window per trial, fresh connections each)\n\n\
                 | leg | conc | trials | worst req/s | median req/s | busiest worker share: median | worst | ok |\n\
                 |---|---:|---:|---:|---:|---:|---:|:-:|"
            );
            let share =
                |s: Option<f64>| s.map_or("–".to_owned(), |s| format!("{:.0}%", s * 100.0));
            for b in &balance {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {} |",
                    b.leg,
                    b.concurrency,
                    b.trials,
                    b.worst_rps,
                    b.median_rps,
                    share(b.median_busiest),
                    share(b.worst_busiest),
                    if b.valid { "✓" } else { "✗" },
                );
            }
            let _ = writeln!(
                md,
                "\nbusiest worker share: the busiest worker's part of the window's requests, from \
                 `aisix_worker_requests_total` per worker (1 ÷ workers is even; 100%: one worker served all)."
            );
        }

        self.hostile_table(&mut md);

        let ratios = self.ratios();
        if !ratios.is_empty() {
            let _ = writeln!(
                md,
                "\n## Ratios (same run)\n\n| ratio | conc | value |\n|---|---:|---:|"
            );
            for (what, c, value) in &ratios {
                let _ = writeln!(md, "| {what} | {c} | {value:.2} |");
            }
        }
        self.allocs_table(&points, &mut md);
        self.delay_table(&mut md);

        let direct_c1 = points
            .iter()
            .find(|p| p.leg == DIRECT && p.concurrency == 1);
        if let Some(direct) = direct_c1 {
            let _ = writeln!(
                md,
                "\n## Added latency at concurrency 1 (vs the mock direct)\n\n\
                 | leg | p50 ms | p99 ms | added p50 µs | added p99 µs |\n|---|---:|---:|---:|---:|"
            );
            for p in points.iter().filter(|p| p.concurrency == 1) {
                let _ = writeln!(
                    md,
                    "| {} | {:.3} | {:.3} | {:.1} | {:.1} |",
                    p.leg,
                    p.p50_us / 1e3,
                    p.p99_us / 1e3,
                    p.p50_us - direct.p50_us,
                    p.p99_us - direct.p99_us
                );
            }
        }

        if !self.syscalls.is_empty() {
            let _ = writeln!(
                md,
                "\n## System calls per request (strace -f -c, separate window; strace slows the target, counts stay valid)\n\n\
                 | leg | conc | requests | syscalls/req | top calls per request |\n|---|---:|---:|---:|---|"
            );
            for row in &self.syscalls {
                let mut shown: Vec<String> = row
                    .counts
                    .by_name
                    .iter()
                    .take(10)
                    .map(|(name, calls)| format!("{name} {:.2}", row.per_request(*calls)))
                    .collect();
                for (name, calls) in row.counts.by_name.iter().skip(10) {
                    if WATCHED_SYSCALLS.contains(&name.as_str()) {
                        shown.push(format!("{name} {:.3}", row.per_request(*calls)));
                    }
                }
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.2} | {} |",
                    row.leg,
                    row.concurrency,
                    row.requests,
                    row.per_request(row.counts.total),
                    shown.join(", ")
                );
            }
        }

        if !self.streams.is_empty() {
            let direct = self.streams.iter().find(|s| s.leg == DIRECT);
            let _ = writeln!(
                md,
                "\n## Streaming (SSE, concurrent streams, closed loop)\n\n\
                 | leg | streams | completed | TTFT p50 ms | TTFT p99 ms | +TTFT p50 ms | +TTFT p99 ms | gap p50 ms | gap p99 ms | +gap p50 ms | +gap p99 ms | dropped | stalled | failed | CPU µs/stream | new upstream conns | log lines dropped | ok |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|"
            );
            for s in &self.streams {
                let added = |f: fn(&StreamRow) -> f64| direct.map_or(f64::NAN, |d| f(s) - f(d));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {:.0} | {} | {} | {} |",
                    s.leg,
                    s.streams,
                    s.completed,
                    s.ttft_p50_ms,
                    s.ttft_p99_ms,
                    added(|r| r.ttft_p50_ms),
                    added(|r| r.ttft_p99_ms),
                    s.gap_p50_ms,
                    s.gap_p99_ms,
                    added(|r| r.gap_p50_ms),
                    added(|r| r.gap_p99_ms),
                    s.dropped,
                    s.stalled,
                    s.failures,
                    s.cpu_us_per_stream,
                    s.new_upstream_conns,
                    count_or_dash(s.log_dropped),
                    if s.valid() { "✓" } else { "✗" },
                );
            }
        }

        let errors: Vec<String> = self
            .windows
            .iter()
            .filter(|r| !r.errors.is_empty())
            .map(|r| {
                format!(
                    "{} c={} rep {}: {}",
                    r.leg,
                    r.concurrency,
                    r.rep,
                    r.errors.join("; ")
                )
            })
            .chain(
                self.streams
                    .iter()
                    .filter(|s| !s.errors.is_empty())
                    .map(|s| format!("{} streams: {}", s.leg, s.errors.join("; "))),
            )
            .collect();
        if !self.notes.is_empty() || !errors.is_empty() {
            let _ = writeln!(md, "\n## Notes\n");
            for note in self.notes.iter().chain(&errors) {
                let _ = writeln!(md, "- {note}");
            }
        }
        md
    }
}

impl Results {
    /// The hostile-neighbour leg, window by window.
    /// Allocations per request and per stream, for the legs of a `count-alloc` gateway.
    fn allocs_table(&self, points: &[Point], md: &mut String) {
        let counted: Vec<&Point> = points
            .iter()
            .filter(|p| p.allocs_per_req.is_some())
            .collect();
        let streams: Vec<&StreamRow> = self
            .streams
            .iter()
            .filter(|s| s.allocs_per_stream.is_some())
            .collect();
        if counted.is_empty() && streams.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "\n## Allocations (count-alloc build; process-wide, medians)\n\n\
             | leg | conc | allocs/req | bytes/req |\n|---|---:|---:|---:|"
        );
        for p in counted {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {:.0} |",
                p.leg,
                p.concurrency,
                p.allocs_per_req.unwrap_or(f64::NAN),
                p.alloc_bytes_per_req.unwrap_or(f64::NAN)
            );
        }
        for s in streams {
            let _ = writeln!(
                md,
                "| {} streaming | {} | {:.1} per stream | |",
                s.leg,
                s.streams,
                s.allocs_per_stream.unwrap_or(f64::NAN)
            );
        }
    }

    /// Each window's longest worker delay, for the legs of a `poll-probe` gateway, in the
    /// order the windows ran.
    fn delay_table(&self, md: &mut String) {
        let probed: Vec<&WindowRow> = self
            .windows
            .iter()
            .filter(|w| w.longest_delay_ms.is_some())
            .collect();
        if probed.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "\n## Longest worker delay (poll-probe build; target ≤ 2 ms)\n\n\
             Delay: how late a 1 ms timer woke (1 ms resolution; counts CPU the kernel gave \
             elsewhere). Poll: the longest single poll of a client connection's task, in wall \
             time (a preempted poll counts the time away) and in the thread's CPU time. \
             Bystander: the largest step of CPU time between two reads of its own clock by an \
             idle-priority thread on the gateway's CPU, whose own work between them is about \
             100 ns: CPU the machine charged to whatever thread ran (interrupts, a \
             hypervisor). A poll no longer than that says nothing of the gateway's code.\n\n\
             | leg | conc | rep | longest delay ms | longest poll ms | its CPU ms (longest) | bystander's step ms |\n\
             |---|---:|---:|---:|---:|---:|---:|"
        );
        for w in probed {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {} |",
                w.leg,
                w.concurrency,
                w.rep,
                w.longest_delay_ms.unwrap_or(f64::NAN),
                w.longest_poll_ms.unwrap_or(f64::NAN),
                w.longest_poll_cpu_ms.unwrap_or(f64::NAN),
                w.bystander_ms
                    .map_or_else(|| "–".to_owned(), |v| format!("{v:.2}"))
            );
        }
    }

    fn hostile_table(&self, md: &mut String) {
        if self.hostile.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "\n## Hostile neighbour (one worker; windows in the order they ran)\n\n\
             | window | conc | rep | req/s | p50 ms | p99 ms | failed | neighbour streams | neighbour bodies | neighbour MB read | neighbour outcomes | gateway peak RSS MiB | ok |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|:-:|"
        );
        for h in &self.hostile {
            let Some(row) = self
                .windows
                .iter()
                .find(|r| r.leg == h.leg && r.concurrency == h.concurrency && r.rep == h.rep)
            else {
                continue;
            };
            let (streams, bodies, mb, outcomes) = match &h.neighbour {
                Some(t) => (
                    t.streams.to_string(),
                    t.bodies.to_string(),
                    format!("{:.1}", t.bytes as f64 / 1e6),
                    t.outcomes_cell(),
                ),
                None => ("–".into(), "–".into(), "–".into(), "–".into()),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {} | {streams} | {bodies} | {mb} | {outcomes} | {:.1} | {} |",
                h.leg,
                h.concurrency,
                h.rep,
                row.rps,
                row.p50_us / 1e3,
                row.p99_us / 1e3,
                row.failures,
                row.hwm_mib,
                if row.valid() { "✓" } else { "✗" },
            );
        }
        let _ = writeln!(
            md,
            "\nThe normal traffic's figures are its own (any failure makes the window invalid); the \
             neighbour's count covers the window and its warm-up, one request in flight at a time, \
             each on a fresh connection. gateway peak RSS: `VmHWM`, reset before each window (to the RSS of that moment). \
             The ratio `hostile-neighbour p99 with/without` (Ratios) is the medians' quotient; target ≤ 2."
        );
    }
}

/// A count, or `–` where it was not read.
fn count_or_dash(count: Option<u64>) -> String {
    count.map_or_else(|| "–".to_owned(), |n| n.to_string())
}

/// The `ok` cell of a point: ✓, or why not.
fn verdict(p: &Point) -> String {
    match (p.failures, p.log_dropped.unwrap_or(0)) {
        _ if p.valid => "✓".to_owned(),
        (0, 0) => "✗".to_owned(),
        (0, dropped) => format!("✗ {dropped} log lines dropped"),
        (failed, _) => format!("✗ {failed} failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(leg: &str, c: usize, rps: f64, cpu: f64) -> WindowRow {
        WindowRow {
            leg: leg.into(),
            concurrency: c,
            requests: 100,
            rps,
            cpu_us_per_req: cpu,
            p50_us: 100.0,
            p99_us: 200.0,
            ..WindowRow::default()
        }
    }

    #[test]
    fn ratios_compare_medians_of_the_same_concurrency() {
        let results = Results {
            windows: vec![
                window("aisix-tpc", 8, 1000.0, 10.0),
                window("aisix-tpc", 8, 3000.0, 30.0),
                window("aisix-tpc", 8, 2000.0, 20.0),
                window("aisix-shared", 8, 1000.0, 40.0),
                window(NGINX, 8, 4000.0, 10.0),
            ],
            ..Results::default()
        };
        let ratios = results.ratios();
        let get = |what: &str| ratios.iter().find(|r| r.0 == what).map(|r| r.2);
        assert_eq!(get("tpc/shared cpu_us_per_req"), Some(0.5));
        assert_eq!(get("tpc/shared rps"), Some(2.0));
        assert_eq!(get("aisix-tpc/nginx cpu_us_per_req"), Some(2.0));
        assert!(
            results
                .markdown()
                .contains("| aisix-tpc | 8 | 2000 | 100.0 |")
        );
    }

    #[test]
    fn a_window_whose_gateway_dropped_log_lines_is_invalid_and_shows_the_count() {
        let mut row = window("aisix-tpc", 32, 1000.0, 10.0);
        row.log_dropped = Some(0);
        assert!(row.valid());
        row.log_dropped = Some(12);
        assert!(!row.valid());
        let results = Results {
            windows: vec![row, window(DIRECT, 32, 2000.0, 3.0)],
            ..Results::default()
        };
        assert!(!results.all_valid());
        let markdown = results.markdown();
        assert!(
            markdown.contains("| 12 | ✗ 12 log lines dropped |"),
            "{markdown}"
        );
        assert!(markdown.contains("| – | ✓ |"), "{markdown}");
        assert!(results.json_lines().contains("\"access_log_dropped\":12"));
    }

    #[test]
    fn a_window_with_a_failure_is_invalid() {
        let mut row = window("aisix-tpc", 1, 1.0, 1.0);
        assert!(row.valid());
        row.failures = 1;
        assert!(!row.valid());
    }

    #[test]
    fn balance_points_report_the_worst_trial_and_the_busiest_workers_share() {
        let trial = |rps: f64, workers: &[u64]| {
            let mut row = window("balance tpc-handoff", 4, rps, 10.0);
            row.worker_requests = workers
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("tpc-{i}"), *n))
                .collect();
            row
        };
        let results = Results {
            windows: vec![
                trial(900.0, &[50, 50]),
                trial(600.0, &[100, 0]),
                trial(800.0, &[60, 40]),
            ],
            ..Results::default()
        };
        let points = results.balance_points();
        assert_eq!(points.len(), 1);
        let b = &points[0];
        assert_eq!((b.trials, b.worst_rps, b.median_rps), (3, 600.0, 800.0));
        assert_eq!(b.median_busiest, Some(0.6));
        assert_eq!(b.worst_busiest, Some(1.0));
        let markdown = results.markdown();
        assert!(
            markdown.contains("| balance tpc-handoff | 4 | 3 | 600 | 800 | 60% | 100% | ✓ |"),
            "{markdown}"
        );
        assert!(
            !markdown.contains("| balance tpc-handoff | 4 | 800 |"),
            "balance trials stay out of the grid table"
        );
        let mut shared = window("balance shared", 4, 500.0, 10.0);
        shared.worker_requests = vec![("shared".into(), 100)];
        assert_eq!(
            busiest_share(&shared),
            None,
            "one worker, threads not counted apart"
        );
    }

    #[test]
    fn allocations_per_request_get_their_table_only_when_counted() {
        let mut counted = window("aisix-tpc", 32, 1000.0, 10.0);
        counted.allocs_per_req = Some(41.0);
        counted.alloc_bytes_per_req = Some(9000.0);
        let results = Results {
            windows: vec![counted, window(NGINX, 32, 1000.0, 5.0)],
            ..Results::default()
        };
        let md = results.markdown();
        assert!(md.contains("| aisix-tpc | 32 | 41.0 | 9000 |"), "{md}");
        assert!(!md.contains("| nginx | 32 | NaN"), "{md}");
        let plain = Results {
            windows: vec![window(NGINX, 32, 1000.0, 5.0)],
            ..Results::default()
        };
        assert!(!plain.markdown().contains("## Allocations"));
    }

    #[test]
    fn longest_worker_delays_get_their_table_only_when_probed() {
        let mut probed = window("aisix-tpc-1w +hostile", 32, 1000.0, 10.0);
        probed.longest_delay_ms = Some(3.25);
        probed.longest_poll_ms = Some(1.5);
        probed.longest_poll_cpu_ms = Some(0.25);
        probed.bystander_ms = Some(9.65);
        let results = Results {
            windows: vec![probed, window(NGINX, 32, 1000.0, 5.0)],
            ..Results::default()
        };
        let md = results.markdown();
        assert!(
            md.contains("| aisix-tpc-1w +hostile | 32 | 0 | 3.25 | 1.50 | 0.25 | 9.65 |"),
            "{md}"
        );
        let plain = Results {
            windows: vec![window(NGINX, 32, 1000.0, 5.0)],
            ..Results::default()
        };
        assert!(!plain.markdown().contains("## Longest worker delay"));
    }

    #[test]
    fn stream_pairs_price_cpu_per_stream_of_valid_stream_windows() {
        let stream = |leg: &str, cpu: f64, failures: u64| StreamRow {
            leg: leg.into(),
            streams: 512,
            completed: 100,
            failures,
            cpu_us_per_stream: cpu,
            ..StreamRow::default()
        };
        let mut results = Results {
            streams: vec![
                stream("aisix-tpc", 300.0, 0),
                stream(FLOOR, 200.0, 0),
                stream(NGINX, 100.0, 0),
            ],
            stream_pairs: vec![
                Pair::new("aisix-tpc/floor", "aisix-tpc", FLOOR),
                Pair::new("floor/nginx", FLOOR, NGINX),
            ],
            ..Results::default()
        };
        let ratios = results.ratios();
        let get = |what: &str| ratios.iter().find(|r| r.0 == what).map(|r| (r.1, r.2));
        assert_eq!(get("aisix-tpc/floor cpu_us_per_stream"), Some((512, 1.5)));
        assert_eq!(get("floor/nginx cpu_us_per_stream"), Some((512, 2.0)));

        results.streams[2].failures = 1;
        let ratios = results.ratios();
        assert!(
            !ratios
                .iter()
                .any(|r| r.0 == "floor/nginx cpu_us_per_stream"),
            "an invalid window prices nothing"
        );
    }

    #[test]
    fn pairs_price_a_leg_against_its_base_at_each_shared_concurrency() {
        let results = Results {
            windows: vec![
                window("aisix-tpc", 32, 1000.0, 10.0),
                window("aisix-tpc+limiter-redis", 32, 800.0, 15.0),
                window("aisix-tpc+limiter-redis", 8, 800.0, 15.0),
            ],
            pairs: vec![Pair::new(
                "limiter-redis/off",
                "aisix-tpc+limiter-redis",
                "aisix-tpc",
            )],
            ..Results::default()
        };
        let ratios = results.ratios();
        let get =
            |what: &str, c: usize| ratios.iter().find(|r| r.0 == what && r.1 == c).map(|r| r.2);
        assert_eq!(get("limiter-redis/off cpu_us_per_req", 32), Some(1.5));
        assert_eq!(get("limiter-redis/off rps", 32), Some(0.8));
        assert_eq!(get("limiter-redis/off rps", 8), None, "no base at 8");
    }

    #[test]
    fn open_loop_legs_get_their_own_table_with_late_sends() {
        let mut row = window(&open_loop_leg("aisix-tpc", 70), 512, 700.0, 10.0);
        row.late = 3;
        let results = Results {
            windows: vec![
                window("aisix-tpc", 32, 2000.0, 10.0),
                window("aisix-tpc", 512, 1000.0, 10.0),
                row,
            ],
            ..Results::default()
        };
        // The base is the pool's own concurrency, not the best point at fewer connections.
        assert_eq!(results.saturation("aisix-tpc", 512), 1000.0);
        assert_eq!(results.saturation("aisix-tpc", 128), 0.0);
        let markdown = results.markdown();
        assert!(
            markdown.contains("| aisix-tpc open-loop 70% | 512 | 700 | 0.100 | 0.200 | 3 |"),
            "{markdown}"
        );
    }

    #[test]
    fn hostile_windows_get_their_table_and_a_p99_ratio_against_the_quiet_windows() {
        use crate::hostile::{HOSTILE_LEG, HOSTILE_RATIO, QUIET_LEG, Tally};
        let with_p99 = |leg: &str, rep: usize, p99_us: f64| {
            let mut row = window(leg, 32, 1000.0, 10.0);
            row.rep = rep;
            row.p99_us = p99_us;
            row.hwm_mib = 40.0;
            row
        };
        let mut tally = Tally {
            streams: 3,
            bodies: 2,
            bytes: 200_000_000,
            ..Tally::default()
        };
        tally
            .outcomes
            .insert("stream 200 in-band stream_event_too_large".into(), 3);
        tally.outcomes.insert("body 200 whole".into(), 2);
        let hostile = |leg: &str, rep: usize, neighbour: Option<Tally>| HostileRow {
            leg: leg.into(),
            concurrency: 32,
            rep,
            neighbour,
        };
        let results = Results {
            windows: vec![
                with_p99(QUIET_LEG, 1, 1000.0),
                with_p99(HOSTILE_LEG, 1, 3000.0),
                with_p99(QUIET_LEG, 2, 2000.0),
                with_p99(HOSTILE_LEG, 2, 3000.0),
            ],
            hostile: vec![
                hostile(QUIET_LEG, 1, None),
                hostile(HOSTILE_LEG, 1, Some(tally.clone())),
                hostile(QUIET_LEG, 2, None),
                hostile(HOSTILE_LEG, 2, Some(tally)),
            ],
            latency_pairs: vec![Pair::new(HOSTILE_RATIO, HOSTILE_LEG, QUIET_LEG)],
            ..Results::default()
        };
        let ratios = results.ratios();
        let p99 = ratios.iter().find(|r| r.0 == HOSTILE_RATIO).map(|r| r.2);
        assert_eq!(p99, Some(2.0), "median 3 ms over median 1.5 ms");
        let markdown = results.markdown();
        assert!(
            markdown.contains(
                "| aisix-tpc-1w +hostile | 32 | 2 | 1000 | 0.100 | 3.000 | 0 | 3 | 2 | 200.0 | \
                 body 200 whole ×2; stream 200 in-band stream_event_too_large ×3 | 40.0 | ✓ |"
            ),
            "{markdown}"
        );
        assert!(
            markdown.contains("| aisix-tpc-1w quiet | 32 | 1 | 1000 | 0.100 | 1.000 | 0 | – | – | – | – | 40.0 | ✓ |"),
            "{markdown}"
        );
        assert!(markdown.contains("| hostile-neighbour p99 with/without | 32 | 2.00 |"));
        let json = results.json_lines();
        assert!(json.contains("\"type\":\"hostile\""), "{json}");
        assert!(json.contains("\"body 200 whole\":2"), "{json}");
    }
}
