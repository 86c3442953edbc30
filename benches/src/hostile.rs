//! The hostile-neighbour leg (issue 15): normal traffic on a one-worker gateway, alone and beside
//! a neighbour that keeps asking for the mock's hostile answers (one huge SSE event, one huge
//! body) on the same worker. Windows alternate; the normal traffic's p99 with the neighbour is
//! priced against without. The neighbour is a blocking client on a thread of its own.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::gateway::{BENCH_KEY, Gateway, GatewaySpec, HOSTILE_MODEL, Mode, Upstreams};
use crate::grid::{Legs, UNARY_BODY};
use crate::http1::{ChunkedDecoder, Framing, parse_head};
use crate::loadgen;
use crate::measure::{Subject, Timing};
use crate::process::CpuList;
use crate::report::{HostileRow, Pair, Results};

const CHAT: &str = "/v1/chat/completions";

/// The normal traffic alone (window A).
pub const QUIET_LEG: &str = "aisix-tpc-1w quiet";
/// The same traffic beside the neighbour (window B).
pub const HOSTILE_LEG: &str = "aisix-tpc-1w +hostile";
/// The ratio row: p99 of B over p99 of A.
pub const HOSTILE_RATIO: &str = "hostile-neighbour p99 with/without";

/// Decoded body bytes the neighbour keeps of each answer to find an error code in (the gateway's
/// in-band error is small and comes instead of the huge event, never after it).
const KEPT: usize = 64 * 1024;
/// How often a blocked neighbour read wakes to see whether the window is over.
const POLL: Duration = Duration::from_millis(100);

/// What the neighbour did in one window (its warm-up included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Stream requests read to their end.
    pub streams: u64,
    /// Non-streaming requests read to their end.
    pub bodies: u64,
    /// Body bytes read in all (decoded).
    pub bytes: u64,
    /// How each request ended, by outcome (`stream 200 in-band stream_event_too_large`,
    /// `body 200 whole`, ...).
    pub outcomes: BTreeMap<String, u64>,
}

impl Tally {
    /// The outcomes as one cell: `outcome ×count`, `; `-separated.
    pub fn outcomes_cell(&self) -> String {
        if self.outcomes.is_empty() {
            return "none".to_owned();
        }
        self.outcomes
            .iter()
            .map(|(outcome, n)| format!("{outcome} ×{n}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The neighbour client: one stream request for the huge event, one non-streaming request for
/// the huge body, back to back, each on a fresh connection, until stopped.
pub struct Neighbour {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Tally>,
}

impl Neighbour {
    /// Starts the loop against `target` on a thread pinned to `cpus`.
    pub fn start(target: SocketAddr, cpus: Option<CpuList>, timeout: Duration) -> Result<Self> {
        // shared: the harness tells the neighbour's thread when the window is over.
        let stop = Arc::new(AtomicBool::new(false));
        let requests = [true, false].map(|stream| {
            let body = hostile_body(stream);
            (stream, request(target, &body))
        });
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("hostile-neighbour".into())
            .spawn(move || {
                if let Some(cpus) = cpus {
                    let _ = cpus.pin_current_thread();
                }
                let mut tally = Tally::default();
                'outer: while !flag.load(Relaxed) {
                    for (stream, request) in &requests {
                        match exchange(target, request, *stream, &flag, timeout) {
                            Ok(Some(ended)) => tally.count(*stream, ended),
                            Ok(None) => break 'outer,
                            Err(error) => {
                                let kind = if *stream { "stream" } else { "body" };
                                *tally
                                    .outcomes
                                    .entry(format!("{kind} failed: {error:#}"))
                                    .or_default() += 1;
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                        if flag.load(Relaxed) {
                            break 'outer;
                        }
                    }
                }
                tally
            })
            .context("start the neighbour's thread")?;
        Ok(Neighbour { stop, thread })
    }

    /// Stops the loop (a request in flight is abandoned, not counted) and returns its tally.
    pub fn stop(self) -> Tally {
        self.stop.store(true, Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// How one neighbour request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ended {
    outcome: String,
    bytes: u64,
}

impl Tally {
    fn count(&mut self, stream: bool, ended: Ended) {
        if stream {
            self.streams += 1;
        } else {
            self.bodies += 1;
        }
        self.bytes += ended.bytes;
        *self.outcomes.entry(ended.outcome).or_default() += 1;
    }
}

/// The neighbour's request body: the hostile model, streaming or not.
fn hostile_body(stream: bool) -> String {
    UNARY_BODY.replace(
        "\"bench\"",
        &format!("\"{HOSTILE_MODEL}\",\"stream\":{stream}"),
    )
}

/// The request bytes on a connection of its own (`connection: close`).
fn request(target: SocketAddr, body: &str) -> Vec<u8> {
    format!(
        "POST {CHAT} HTTP/1.1\r\nhost: {target}\r\nauthorization: Bearer {BENCH_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// How an answer ended: by its status, its framing and what its body says.
fn outcome(stream: bool, status: u16, whole: bool, kept: &[u8]) -> String {
    let kind = if stream { "stream" } else { "body" };
    let code = error_code(kept);
    match (status, code) {
        (200, Some(code)) => format!("{kind} 200 in-band {code}"),
        (200, None) if !whole => format!("{kind} 200 cut short"),
        (200, None) if stream && memchr::memmem::find(kept, b"[DONE]").is_some() => {
            format!("{kind} 200 [DONE]")
        }
        (200, None) if stream => format!("{kind} 200 ended without an error event"),
        (200, None) => format!("{kind} 200 whole"),
        (status, Some(code)) => format!("{kind} {status} {code}"),
        (status, None) => format!("{kind} {status}"),
    }
}

/// The first `"code":"…"` value in `bytes` (an OpenAI-shaped error, in-band or not).
fn error_code(bytes: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"code\":\"";
    let at = memchr::memmem::find(bytes, KEY)? + KEY.len();
    let rest = &bytes[at..];
    let end = memchr::memchr(b'"', rest)?;
    Some(String::from_utf8_lossy(&rest[..end.min(64)]).into_owned())
}

/// Sends `request` on a fresh connection and reads the answer to its end, keeping only its first
/// bytes. `Ok(None)`: stopped before the end.
fn exchange(
    target: SocketAddr,
    request: &[u8],
    stream: bool,
    stop: &AtomicBool,
    timeout: Duration,
) -> Result<Option<Ended>> {
    let deadline = Instant::now() + timeout;
    let mut conn = TcpStream::connect_timeout(&target, timeout).context("connect")?;
    conn.set_read_timeout(Some(POLL))?;
    conn.write_all(request).context("send")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut head_bytes = Vec::new();
    let mut pending = Vec::new();
    let mut body = Received::default();
    let mut head = None;
    let mut decoder = ChunkedDecoder::default();
    loop {
        if stop.load(Relaxed) {
            return Ok(None);
        }
        if Instant::now() > deadline {
            anyhow::bail!("no end within {timeout:?}");
        }
        let n = match conn.read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e).context("read"),
        };
        let parsed = match head {
            Some(parsed) => {
                pending.extend_from_slice(&buf[..n]);
                parsed
            }
            None => {
                if n == 0 {
                    anyhow::bail!("closed before a response head");
                }
                head_bytes.extend_from_slice(&buf[..n]);
                let Some(parsed) = parse_head(&head_bytes)? else {
                    continue;
                };
                head = Some(parsed);
                pending = head_bytes.split_off(parsed.len);
                parsed
            }
        };
        let whole = match parsed.framing {
            Framing::Length(length) => {
                let want = length
                    .saturating_sub(body.bytes as usize)
                    .min(pending.len());
                body.take(&pending[..want]);
                pending.clear();
                (body.bytes as usize >= length).then_some(true)
            }
            Framing::Chunked => {
                let used = decoder.decode(&pending, |bytes| body.take(bytes))?;
                pending.drain(..used);
                decoder.is_done().then_some(true)
            }
            Framing::UntilClose => {
                body.take(&pending);
                pending.clear();
                (n == 0).then_some(true)
            }
        };
        let whole = match whole {
            Some(whole) => whole,
            None if n == 0 => false,
            None => continue,
        };
        return Ok(Some(Ended {
            outcome: outcome(stream, parsed.status, whole, &body.kept),
            bytes: body.bytes,
        }));
    }
}

/// A body being read: its length so far and its first [`KEPT`] bytes.
#[derive(Default)]
struct Received {
    bytes: u64,
    kept: Vec<u8>,
}

impl Received {
    fn take(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        let room = KEPT.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// Resets the process's peak RSS (`VmHWM`) so the next reading is this window's peak.
fn reset_peak_rss(pid: u32) -> std::io::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
}

impl Legs<'_> {
    /// One thread-per-core worker on the first gateway CPU; normal traffic at each
    /// `--feature-concurrency`, alone (A) and beside the neighbour (B), alternating for
    /// `--reps` windows each.
    pub(crate) fn hostile(&self, bin: &Path, results: &mut Results) -> Result<()> {
        let cpus = self.args.gateway_cpus.as_ref().and_then(CpuList::first);
        let mut spec =
            GatewaySpec::new(Mode::ThreadPerCore, 1, cpus, self.args.gateway_env.clone());
        spec.features.hostile = true;
        let upstreams = Upstreams {
            mock: self.rig.mock.addr,
            burst: None,
        };
        let dir = self.work.join("aisix-tpc-1w-hostile");
        let mut gateway = Gateway::start(bin, &spec, &upstreams, &dir)?;
        eprintln!(
            "[bench] hostile neighbour: aisix pid {} on {}",
            gateway.pid(),
            gateway.addr
        );
        let subject = |leg: &str| Subject {
            leg: leg.to_owned(),
            workers: 1,
            pids: vec![gateway.pid()],
            addr: gateway.addr,
            metrics: gateway.metrics_addr,
        };
        let (quiet, hostile) = (subject(QUIET_LEG), subject(HOSTILE_LEG));
        let request = loadgen::post_request(gateway.addr, CHAT, BENCH_KEY, UNARY_BODY);
        let timing = Timing {
            reps: 1,
            ..self.timing
        };
        // A 100 MB body through a debug build can take longer than one normal answer may.
        let neighbour_timeout = self.rig.timeout.max(Duration::from_secs(60));
        let mut rss_reset = true;
        for &c in &self.args.variants.feature_concurrency.0 {
            for rep in 1..=self.timing.reps {
                for beside in [false, true] {
                    rss_reset &= reset_peak_rss(gateway.pid()).is_ok();
                    let neighbour = beside
                        .then(|| {
                            Neighbour::start(
                                gateway.addr,
                                self.rig.load_cpus.clone(),
                                neighbour_timeout,
                            )
                        })
                        .transpose()?;
                    let leg = if beside { &hostile } else { &quiet };
                    let rows = self
                        .rig
                        .unary(leg, &request, c, &timing, &mut results.notes);
                    let tally = neighbour.map(Neighbour::stop);
                    let mut rows = rows?;
                    for row in &mut rows {
                        row.rep = rep;
                        results.hostile.push(HostileRow {
                            leg: row.leg.clone(),
                            concurrency: c,
                            rep,
                            neighbour: tally.clone(),
                        });
                    }
                    if tally.as_ref().is_some_and(|t| t.streams + t.bodies == 0) {
                        results.notes.push(format!(
                            "{HOSTILE_LEG} c={c} rep {rep}: the neighbour finished no request in its window"
                        ));
                    }
                    self.progress(&rows);
                    results.windows.extend(rows);
                    gateway.ensure_running()?;
                }
            }
        }
        gateway.stop()?;
        if !rss_reset {
            results.notes.push(format!(
                "{HOSTILE_LEG}: the gateway's peak RSS could not be reset between windows \
                 (/proc/<pid>/clear_refs); its peak RSS column is the process's, not the window's"
            ));
        }
        results
            .latency_pairs
            .push(Pair::new(HOSTILE_RATIO, HOSTILE_LEG, QUIET_LEG));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbour_bodies_ask_for_the_hostile_model_streaming_or_not() {
        for stream in [true, false] {
            let body: serde_json::Value = serde_json::from_str(&hostile_body(stream)).unwrap();
            assert_eq!(body["model"], HOSTILE_MODEL);
            assert_eq!(body["stream"], stream);
        }
        let request = String::from_utf8(request("127.0.0.1:9".parse().unwrap(), "{}")).unwrap();
        assert!(request.contains("\r\nconnection: close\r\n"), "{request}");
        assert!(request.ends_with("content-length: 2\r\nconnection: close\r\n\r\n{}"));
    }

    #[test]
    fn outcomes_name_the_in_band_error_code_or_how_the_answer_ended() {
        let in_band = b"event: error\ndata: {\"error\":{\"message\":\"too large\",\"type\":\"upstream_error\",\"code\":\"stream_event_too_large\"}}\n\n";
        assert_eq!(
            outcome(true, 200, true, in_band),
            "stream 200 in-band stream_event_too_large"
        );
        assert_eq!(
            outcome(true, 200, true, b"data: [DONE]\n\n"),
            "stream 200 [DONE]"
        );
        assert_eq!(
            outcome(true, 200, true, b""),
            "stream 200 ended without an error event"
        );
        assert_eq!(outcome(false, 200, true, b"{\"id\":1}"), "body 200 whole");
        assert_eq!(outcome(false, 200, false, b"{\"id\""), "body 200 cut short");
        assert_eq!(
            outcome(
                false,
                502,
                true,
                b"{\"error\":{\"code\":\"upstream_unavailable\"}}"
            ),
            "body 502 upstream_unavailable"
        );
        assert_eq!(outcome(false, 503, true, b""), "body 503");
    }

    #[test]
    fn tally_counts_requests_bytes_and_outcomes() {
        let mut tally = Tally::default();
        assert_eq!(tally.outcomes_cell(), "none");
        let ended = |outcome: &str, bytes| Ended {
            outcome: outcome.into(),
            bytes,
        };
        tally.count(
            true,
            ended("stream 200 in-band stream_event_too_large", 300),
        );
        tally.count(false, ended("body 200 whole", 1000));
        tally.count(false, ended("body 200 whole", 1000));
        assert_eq!((tally.streams, tally.bodies, tally.bytes), (1, 2, 2300));
        assert_eq!(
            tally.outcomes_cell(),
            "body 200 whole ×2; stream 200 in-band stream_event_too_large ×1"
        );
    }

    /// The neighbour against the harness's mock directly: the huge event is read to its end (the
    /// mock ends the stream; only a gateway cuts it short) and the huge body arrives whole.
    #[test]
    fn the_neighbour_reads_the_mocks_hostile_answers_to_their_end() {
        let mock = crate::mock::MockArgs {
            addr: "127.0.0.1:0".parse().unwrap(),
            stats_addr: "127.0.0.1:0".parse().unwrap(),
            workers: 1,
            ttft: Duration::ZERO,
            frames: 1,
            gap: Duration::ZERO,
            burst: false,
            hostile_event_mib: 1,
            hostile_body_mb: 2,
        }
        .start()
        .unwrap();
        let stop = AtomicBool::new(false);
        let direct = |stream: bool| {
            let body = hostile_body(stream)
                .replace(HOSTILE_MODEL, aisix_testkit::mock::hostile::HOSTILE_MODEL);
            let request = request(mock.addr(), &body);
            exchange(
                mock.addr(),
                &request,
                stream,
                &stop,
                Duration::from_secs(30),
            )
            .unwrap()
            .unwrap()
        };
        let event = direct(true);
        assert_eq!(event.bytes, 1024 * 1024);
        assert_eq!(event.outcome, "stream 200 ended without an error event");
        let body = direct(false);
        assert_eq!(body.bytes, 2_000_000);
        assert_eq!(body.outcome, "body 200 whole");
    }
}
