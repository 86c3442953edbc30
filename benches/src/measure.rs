//! One measured leg at one load point: start the load, warm up, then fixed windows with a reading
//! of `/proc` (process under test, mock, load generator), of the mock's counters and, for a
//! gateway with metrics on, of its `/metrics` (dropped access-log lines, requests per worker) at
//! every edge. Each window becomes one row; the load generator's phase clock decides which
//! window a request belongs to (the one in which it completed).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::bystander::Bystander;
use crate::gateway::{self, MetricsReading};
use crate::loadgen::{LoadRun, LoadSpec, PhaseRecord, WARMUP, Workload};
use crate::mock::{Mock, MockStats};
use crate::process::{self, CpuList};
use crate::procstat::{self, Sample};
use crate::report::{StreamRow, SyscallRow, WindowRow};
use crate::strace::Trace;

/// What stays the same for every leg of a run.
#[derive(Clone)]
pub struct Rig<'a> {
    pub mock: &'a Mock,
    pub load_cpus: Option<CpuList>,
    pub load_threads: usize,
    /// CPUs the load generator may use (for its CPU share).
    pub load_cpu_count: usize,
    pub timeout: Duration,
    /// The idle-priority clock reader on the gateway's CPU (`--poll-probe` only).
    pub bystander: Option<&'a Bystander>,
}

/// The process(es) under test and where to send load.
#[derive(Debug, Clone)]
pub struct Subject {
    pub leg: String,
    pub workers: usize,
    pub pids: Vec<u32>,
    pub addr: SocketAddr,
    /// The gateway's metrics listener, when it has one: dropped access-log lines are read there.
    pub metrics: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub warmup: Duration,
    pub window: Duration,
    pub reps: usize,
}

/// A reading at a window edge.
pub(crate) struct Edge {
    at: Instant,
    target: Sample,
    load: Sample,
    mock: Sample,
    mock_stats: MockStats,
    /// TIME_WAIT sockets with the mock's port on either end.
    time_wait: HashSet<String>,
    /// The gateway's `/metrics`, for a gateway with metrics on.
    metrics: Option<MetricsReading>,
    /// The bystander's largest step since the previous edge, ms.
    bystander_ms: Option<f64>,
}

impl Edge {
    /// Requests the mock answered between `earlier` and this edge.
    pub(crate) fn mock_requests_since(&self, earlier: &Edge) -> u64 {
        self.mock_stats
            .requests
            .saturating_sub(earlier.mock_stats.requests)
    }
}

/// A reading at a window edge; `load` is the load generator's process (this one, or wrk).
pub(crate) fn edge(rig: &Rig<'_>, subject: &Subject, load: u32) -> Result<Edge> {
    let target =
        procstat::sample(&subject.pids).with_context(|| format!("{} is gone", subject.leg))?;
    let at = Instant::now();
    Ok(Edge {
        at,
        target,
        load: procstat::sample(&[load])?,
        mock: procstat::sample(&[rig.mock.pid()])?,
        mock_stats: rig.mock.stats()?,
        time_wait: procstat::tcp_towards(rig.mock.addr.port()).time_wait,
        metrics: subject
            .metrics
            .map(gateway::read_metrics)
            .transpose()
            .with_context(|| format!("{}: read its metrics", subject.leg))?,
        bystander_ms: rig.bystander.map(|b| b.take_longest().as_secs_f64() * 1e3),
    })
}

/// Changes between two edges, per attempt.
struct Delta {
    seconds: f64,
    attempts: f64,
    target_cpu_us: f64,
    load_cpu_us: f64,
    mock_cpu_us: f64,
    ctx_switches: f64,
    new_conns: u64,
    mock_requests: u64,
    log_dropped: Option<u64>,
    /// Requests each worker received (by `worker` label).
    worker_requests: Vec<(String, u64)>,
    /// Allocations and bytes allocated (a `count-alloc` gateway only).
    allocs: Option<(u64, u64)>,
    /// The longest a worker was held during the window (a `poll-probe` gateway only).
    longest_delay_ms: Option<f64>,
    /// The longest single poll of a connection's task during the window (the same).
    longest_poll_ms: Option<f64>,
    longest_poll_cpu_ms: Option<f64>,
    bystander_ms: Option<f64>,
}

fn delta(a: &Edge, b: &Edge, attempts: u64) -> Delta {
    let (before, after) = (a.metrics.as_ref(), b.metrics.as_ref());
    let tick = procstat::us_per_tick();
    let cpu = |x: &Sample, y: &Sample| y.cpu_ticks.saturating_sub(x.cpu_ticks) as f64 * tick;
    Delta {
        seconds: b.at.duration_since(a.at).as_secs_f64(),
        attempts: attempts.max(1) as f64,
        target_cpu_us: cpu(&a.target, &b.target),
        load_cpu_us: cpu(&a.load, &b.load),
        mock_cpu_us: cpu(&a.mock, &b.mock),
        ctx_switches: b.target.ctx_switches.saturating_sub(a.target.ctx_switches) as f64,
        new_conns: b.mock_stats.accepted.saturating_sub(a.mock_stats.accepted),
        mock_requests: b.mock_stats.requests.saturating_sub(a.mock_stats.requests),
        log_dropped: after
            .zip(before)
            .map(|(b, a)| b.dropped_log_lines.saturating_sub(a.dropped_log_lines)),
        // Reset at each read, so the reading at the window's end covers the window.
        longest_delay_ms: after.and_then(|m| m.longest_delay_ms),
        longest_poll_ms: after.and_then(|m| m.longest_poll_ms),
        longest_poll_cpu_ms: after.and_then(|m| m.longest_poll_cpu_ms),
        bystander_ms: b.bystander_ms,
        allocs: after
            .and_then(|m| m.allocs)
            .zip(before.and_then(|m| m.allocs))
            .map(|((calls, bytes), (calls0, bytes0))| {
                (calls.saturating_sub(calls0), bytes.saturating_sub(bytes0))
            }),
        worker_requests: after.zip(before).map_or_else(Vec::new, |(b, a)| {
            b.worker_requests
                .iter()
                .map(|(worker, n)| {
                    let earlier = a
                        .worker_requests
                        .iter()
                        .find(|(w, _)| w == worker)
                        .map_or(0, |(_, n)| *n);
                    (worker.clone(), n.saturating_sub(earlier))
                })
                .collect()
        }),
    }
}

/// What the load generator saw in one window of closed-loop load.
pub(crate) struct Served {
    /// Good answers.
    pub ok: u64,
    pub failures: u64,
    /// Every request that ended in the window (the divisor of the per-request figures).
    pub attempts: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Open loop: requests sent late (every pooled connection busy).
    pub late: u64,
    pub errors: Vec<String>,
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

impl Rig<'_> {
    fn spec(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        workload: Workload,
        connections: usize,
    ) -> LoadSpec {
        LoadSpec {
            target: subject.addr,
            request: request.clone(),
            workload,
            connections,
            threads: self.load_threads,
            cpus: self.load_cpus.clone(),
            timeout: self.timeout,
            rate: None,
        }
    }

    fn load_share(&self, d: &Delta) -> f64 {
        d.load_cpu_us / (d.seconds * 1e6 * self.load_cpu_count.max(1) as f64)
    }

    /// Runs load through `windows` windows after the warm-up and returns the readings at every
    /// edge with the load generator's records (index = phase: 0 warm-up, 1.. windows).
    fn windows(
        &self,
        subject: &Subject,
        spec: &LoadSpec,
        warmup: Duration,
        windows: &[Duration],
    ) -> Result<(Vec<Edge>, Vec<PhaseRecord>)> {
        self.mock.stats()?;
        let run = LoadRun::start(spec)?;
        let edges = (|| {
            process::sleep(warmup)?;
            let mut edges = Vec::with_capacity(windows.len() + 1);
            let me = std::process::id();
            for (i, window) in windows.iter().enumerate() {
                edges.push(edge(self, subject, me)?);
                run.set_phase(i + 1);
                process::sleep(*window)?;
            }
            edges.push(edge(self, subject, me)?);
            run.set_phase(windows.len() + 1);
            Ok::<_, anyhow::Error>(edges)
        })();
        let records = run.stop();
        let (edges, mut records) = (edges?, records?);
        records.resize_with(windows.len() + 2, PhaseRecord::default);
        Ok((edges, records))
    }

    /// The closed-loop grid point: `timing.reps` windows at `concurrency` connections.
    pub fn unary(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        concurrency: usize,
        timing: &Timing,
        notes: &mut Vec<String>,
    ) -> Result<Vec<WindowRow>> {
        self.unary_at(subject, request, concurrency, None, timing, notes)
    }

    /// The open-loop point: `rate` requests per second sent on schedule over a pool of
    /// `connections`, latency counted from each request's scheduled send.
    pub fn open_loop(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        connections: usize,
        rate: f64,
        timing: &Timing,
        notes: &mut Vec<String>,
    ) -> Result<Vec<WindowRow>> {
        self.unary_at(subject, request, connections, Some(rate), timing, notes)
    }

    fn unary_at(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        concurrency: usize,
        rate: Option<f64>,
        timing: &Timing,
        notes: &mut Vec<String>,
    ) -> Result<Vec<WindowRow>> {
        let spec = LoadSpec {
            rate,
            ..self.spec(subject, request, Workload::Unary, concurrency)
        };
        let windows = vec![timing.window; timing.reps];
        let (edges, mut records) = self.windows(subject, &spec, timing.warmup, &windows)?;
        warmup_note(&records[WARMUP], &subject.leg, concurrency, notes);
        let mut rows = Vec::new();
        for rep in 1..=timing.reps {
            let record = &mut records[rep];
            record.latency_ns.sort_unstable();
            let lat = &record.latency_ns;
            let served = Served {
                ok: record.ok,
                failures: record.failures,
                attempts: record.attempts(),
                p50_us: percentile(lat, 0.50) / 1e3,
                p99_us: percentile(lat, 0.99) / 1e3,
                max_us: lat.last().map_or(f64::NAN, |&v| v as f64 / 1e3),
                late: record.late,
                errors: std::mem::take(&mut record.errors),
            };
            rows.push(self.window_row(
                subject,
                concurrency,
                rep,
                &edges[rep - 1],
                &edges[rep],
                served,
            ));
        }
        Ok(rows)
    }

    /// One closed-loop window's row from its edges and what the load generator saw.
    pub(crate) fn window_row(
        &self,
        subject: &Subject,
        concurrency: usize,
        rep: usize,
        a: &Edge,
        b: &Edge,
        served: Served,
    ) -> WindowRow {
        let d = delta(a, b, served.attempts);
        WindowRow {
            leg: subject.leg.clone(),
            workers: subject.workers,
            concurrency,
            rep,
            seconds: d.seconds,
            requests: served.ok,
            failures: served.failures,
            rps: served.ok as f64 / d.seconds,
            p50_us: served.p50_us,
            p99_us: served.p99_us,
            max_us: served.max_us,
            cpu_us_per_req: d.target_cpu_us / d.attempts,
            cpu_cores: d.target_cpu_us / (d.seconds * 1e6),
            ctx_per_req: d.ctx_switches / d.attempts,
            rss_mib: b.target.rss_kib as f64 / 1024.0,
            hwm_mib: b.target.hwm_kib as f64 / 1024.0,
            new_upstream_conns: d.new_conns,
            time_wait: b.time_wait.len(),
            new_time_wait: b.time_wait.difference(&a.time_wait).count(),
            mock_requests: d.mock_requests,
            mock_cpu_us_per_req: d.mock_cpu_us / d.attempts,
            load_cpu_us_per_req: d.load_cpu_us / d.attempts,
            load_cpu_share: self.load_share(&d),
            log_dropped: d.log_dropped,
            allocs_per_req: d.allocs.map(|(calls, _)| calls as f64 / d.attempts),
            alloc_bytes_per_req: d.allocs.map(|(_, bytes)| bytes as f64 / d.attempts),
            longest_delay_ms: d.longest_delay_ms,
            longest_poll_ms: d.longest_poll_ms,
            longest_poll_cpu_ms: d.longest_poll_cpu_ms,
            bystander_ms: d.bystander_ms,
            worker_requests: d.worker_requests,
            late: served.late,
            errors: served.errors,
        }
    }

    /// The streaming point: `streams` connections each streaming one answer after another,
    /// for one window.
    pub fn stream(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        streams: usize,
        workload: Workload,
        timing: &Timing,
        notes: &mut Vec<String>,
    ) -> Result<StreamRow> {
        let spec = self.spec(subject, request, workload, streams);
        let (edges, mut records) = self.windows(subject, &spec, timing.warmup, &[timing.window])?;
        warmup_note(&records[WARMUP], &subject.leg, streams, notes);
        let record = &mut records[1];
        let d = delta(&edges[0], &edges[1], record.attempts());
        record.ttft_ns.sort_unstable();
        record.gap_ns.sort_unstable();
        let ms = |v: f64| v / 1e6;
        Ok(StreamRow {
            leg: subject.leg.clone(),
            workers: subject.workers,
            streams,
            seconds: d.seconds,
            completed: record.ok,
            dropped: record.dropped,
            stalled: record.stalled,
            failures: record.failures,
            ttft_p50_ms: ms(percentile(&record.ttft_ns, 0.50)),
            ttft_p99_ms: ms(percentile(&record.ttft_ns, 0.99)),
            gap_p50_ms: ms(percentile(&record.gap_ns, 0.50)),
            gap_p99_ms: ms(percentile(&record.gap_ns, 0.99)),
            cpu_us_per_stream: d.target_cpu_us / d.attempts,
            new_upstream_conns: d.new_conns,
            load_cpu_share: self.load_share(&d),
            log_dropped: d.log_dropped,
            allocs_per_stream: d.allocs.map(|(calls, _)| calls as f64 / d.attempts),
            errors: std::mem::take(&mut record.errors),
        })
    }

    /// System calls per request (per stream, for a streaming workload): strace attached for one
    /// window of closed-loop load. The
    /// window opens once strace reports every process attached and closes just before it is
    /// told to detach, so the requests counted are the traced ones (a traced process is many
    /// times slower, so untraced requests inside the window would skew the figure).
    pub fn syscalls(
        &self,
        subject: &Subject,
        request: &Arc<[u8]>,
        (workload, concurrency): (Workload, usize),
        timing: &Timing,
        strace: &Path,
        summary: &Path,
    ) -> Result<SyscallRow> {
        let spec = self.spec(subject, request, workload, concurrency);
        let run = LoadRun::start(&spec)?;
        let traced = (|| {
            process::sleep(timing.warmup)?;
            let trace = Trace::attach(strace, &subject.pids, summary)?;
            run.set_phase(1);
            let started = Instant::now();
            let slept = process::sleep(timing.window);
            run.set_phase(2);
            let elapsed = started.elapsed();
            let counts = trace.finish()?;
            slept?;
            Ok::<_, anyhow::Error>((counts, elapsed))
        })();
        let records = run.stop()?;
        let (counts, elapsed) = traced?;
        let record = records.get(1).cloned().unwrap_or_default();
        Ok(SyscallRow {
            leg: subject.leg.clone(),
            concurrency,
            seconds: elapsed.as_secs_f64(),
            requests: record.attempts(),
            counts,
        })
    }
}

fn warmup_note(record: &PhaseRecord, leg: &str, concurrency: usize, notes: &mut Vec<String>) {
    if record.failures + record.dropped > 0 {
        notes.push(format!(
            "{leg} c={concurrency}: {} failed during warm-up (not in any window): {}",
            record.failures + record.dropped,
            record.errors.join("; ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.50), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&values, 1.0), 100.0);
        assert_eq!(percentile(&[7], 0.99), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
