//! The load generator: N keep-alive HTTP/1.1 connections over raw TCP. Closed loop (here): each
//! connection sends its next precomputed request as soon as the previous response has been read
//! in full. Open loop ([`crate::openloop`]): requests go out at a fixed rate on a pool of
//! connections. One current-thread runtime per load thread, pinned to the load CPUs. Results
//! stay on the thread that produced them, bucketed by the phase (warm-up or window) in which
//! each request completed, and are merged when the run stops: nothing is shared per request but
//! one atomic load of the phase.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aisix_testkit::mock::fast::CONTENT_MARKER;
use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http1::{ChunkedDecoder, Framing, SseEvent, SseSplitter, parse_head};
use crate::process::CpuList;

/// The phase before the first window; windows are 1, 2, ….
pub const WARMUP: usize = 0;
pub(crate) const STOP: usize = usize::MAX;
const ERRORS_KEPT: usize = 5;

/// What each request is and what counts as a good answer.
#[derive(Debug, Clone, Copy)]
pub enum Workload {
    /// A 200 with a complete body.
    Unary,
    /// A 200 SSE stream with exactly `frames` content frames and `[DONE]`; a gap between
    /// frames (or before the first) longer than `stall` counts the stream as stalled.
    Stream { frames: usize, stall: Duration },
}

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub target: SocketAddr,
    /// The whole request, head and body.
    pub request: Arc<[u8]>,
    pub workload: Workload,
    pub connections: usize,
    pub threads: usize,
    pub cpus: Option<CpuList>,
    /// Longest wait for a whole response (a whole stream).
    pub timeout: Duration,
    /// Open loop: requests per second in all, sent on schedule over `connections` pooled
    /// connections. `None`: closed loop.
    pub rate: Option<f64>,
}

/// What happened in one phase.
#[derive(Debug, Default, Clone)]
pub struct PhaseRecord {
    /// Good answers (unary) or complete streams.
    pub ok: u64,
    /// Non-200 answers, connection errors, timeouts, malformed responses.
    pub failures: u64,
    /// The first few failure reasons.
    pub errors: Vec<String>,
    /// Request latency (unary) or whole stream duration, in ns, of good answers.
    pub latency_ns: Vec<u64>,
    /// Streams only: time to the first content frame, and the gaps between content frames.
    pub ttft_ns: Vec<u64>,
    pub gap_ns: Vec<u64>,
    /// Streams that ended (200, well-framed) without every frame and `[DONE]`.
    pub dropped: u64,
    /// Streams with a silence longer than the stall threshold.
    pub stalled: u64,
    /// Open loop: requests sent more than a millisecond after their scheduled time (every
    /// pooled connection was busy, or the generator fell behind).
    pub late: u64,
}

impl PhaseRecord {
    pub(crate) fn fail(&mut self, reason: String) {
        self.failures += 1;
        if self.errors.len() < ERRORS_KEPT {
            self.errors.push(reason);
        }
    }

    fn merge(&mut self, mut other: PhaseRecord) {
        self.ok += other.ok;
        self.failures += other.failures;
        for e in other.errors {
            if self.errors.len() < ERRORS_KEPT {
                self.errors.push(e);
            }
        }
        self.latency_ns.append(&mut other.latency_ns);
        self.ttft_ns.append(&mut other.ttft_ns);
        self.gap_ns.append(&mut other.gap_ns);
        self.dropped += other.dropped;
        self.stalled += other.stalled;
        self.late += other.late;
    }

    /// Every request that ended in this phase, good or not.
    pub fn attempts(&self) -> u64 {
        self.ok + self.failures + self.dropped
    }
}

/// A running load: connections keep going until [`LoadRun::stop`].
pub struct LoadRun {
    /// shared: the harness's phase clock, read by every connection once per request.
    phase: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<Result<Vec<PhaseRecord>>>>,
}

impl LoadRun {
    /// Starts the connections in the warm-up phase.
    pub fn start(spec: &LoadSpec) -> Result<LoadRun> {
        let spec = Arc::new(spec.clone());
        let phase = Arc::new(AtomicUsize::new(WARMUP));
        let threads = spec.threads.clamp(1, spec.connections.max(1));
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            // Connection i runs on thread i % threads.
            let connections =
                spec.connections / threads + usize::from(t < spec.connections % threads);
            let spec = spec.clone();
            let phase = phase.clone();
            let rate = spec.rate.map(|rate| rate / threads as f64);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("load-{t}"))
                    .spawn(move || load_thread(&spec, connections, rate, &phase))?,
            );
        }
        Ok(LoadRun {
            phase,
            threads: handles,
        })
    }

    /// Requests completing from now on count towards `phase`.
    pub fn set_phase(&self, phase: usize) {
        self.phase.store(phase, Ordering::Relaxed);
    }

    /// Stops every connection (after its request in flight) and returns the records by phase.
    pub fn stop(self) -> Result<Vec<PhaseRecord>> {
        self.phase.store(STOP, Ordering::Relaxed);
        let mut merged: Vec<PhaseRecord> = Vec::new();
        for thread in self.threads {
            let records = match thread.join() {
                Ok(records) => records?,
                Err(_) => bail!("a load thread panicked"),
            };
            if merged.len() < records.len() {
                merged.resize_with(records.len(), PhaseRecord::default);
            }
            for (phase, record) in records.into_iter().enumerate() {
                merged[phase].merge(record);
            }
        }
        Ok(merged)
    }
}

pub(crate) type Records = Rc<RefCell<Vec<PhaseRecord>>>;

/// One load thread: `connections` connections, closed loop or, with `rate` (this thread's
/// share), open loop.
fn load_thread(
    spec: &Arc<LoadSpec>,
    connections: usize,
    rate: Option<f64>,
    phase: &Arc<AtomicUsize>,
) -> Result<Vec<PhaseRecord>> {
    if let Some(cpus) = &spec.cpus {
        cpus.pin_current_thread()?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let records: Records = Rc::default();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        if let Some(rate) = rate {
            crate::openloop::run(spec, connections, rate, phase, &records).await;
            return;
        }
        let tasks: Vec<_> = (0..connections)
            .map(|_| {
                tokio::task::spawn_local(connection(spec.clone(), phase.clone(), records.clone()))
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
    Ok(records.take())
}

pub(crate) fn in_phase(records: &Records, phase: usize, f: impl FnOnce(&mut PhaseRecord)) {
    let mut records = records.borrow_mut();
    if records.len() <= phase {
        records.resize_with(phase + 1, PhaseRecord::default);
    }
    f(&mut records[phase]);
}

/// Per-connection buffers, reused for every request.
#[derive(Default)]
struct Buffers {
    read: Vec<u8>,
    sse: SseSplitter,
    gaps: Vec<u64>,
}

/// How one exchange ended, when it ended well at the HTTP level.
struct Answer {
    close: bool,
    stream: Option<StreamProgress>,
}

#[derive(Default)]
struct StreamProgress {
    ttft_ns: Option<u64>,
    last: Option<Instant>,
    content: usize,
    done: bool,
    longest_silence_ns: u64,
}

impl StreamProgress {
    fn on_event(&mut self, event: SseEvent, started: Instant, now: Instant, gaps: &mut Vec<u64>) {
        match event {
            SseEvent::Content => {
                let since = now.duration_since(self.last.unwrap_or(started)).as_nanos() as u64;
                if self.last.is_some() {
                    gaps.push(since);
                } else {
                    self.ttft_ns = Some(since);
                }
                self.longest_silence_ns = self.longest_silence_ns.max(since);
                self.last = Some(now);
                self.content += 1;
            }
            SseEvent::Done => self.done = true,
            SseEvent::Other => {}
        }
    }
}

async fn connection(spec: Arc<LoadSpec>, phase: Arc<AtomicUsize>, records: Records) {
    let mut conn = Conn::default();
    while phase.load(Ordering::Relaxed) != STOP {
        let started = Instant::now();
        if conn
            .request(&spec, started, &phase, &records)
            .await
            .is_none()
        {
            return;
        }
    }
}

/// A load connection: the socket (opened on first use, again after a close) and its buffers.
#[derive(Default)]
pub(crate) struct Conn {
    stream: Option<TcpStream>,
    buffers: Buffers,
}

impl Conn {
    /// One request, timed from `started` (when it was sent, or in an open loop when it was
    /// scheduled), recorded in the phase it completes in. `None` once the run has stopped.
    pub(crate) async fn request(
        &mut self,
        spec: &LoadSpec,
        started: Instant,
        phase: &AtomicUsize,
        records: &Records,
    ) -> Option<()> {
        let stream = match self.stream.as_mut() {
            Some(stream) => stream,
            None => match TcpStream::connect(spec.target).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    self.stream.insert(stream)
                }
                Err(e) => {
                    let p = phase.load(Ordering::Relaxed);
                    if p == STOP {
                        return None;
                    }
                    in_phase(records, p, |r| r.fail(format!("connect: {e}")));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    return Some(());
                }
            },
        };
        let buffers = &mut self.buffers;
        buffers.gaps.clear();
        buffers.sse.reset();
        let result =
            tokio::time::timeout(spec.timeout, exchange(stream, spec, buffers, started)).await;
        let elapsed = started.elapsed().as_nanos() as u64;
        let p = phase.load(Ordering::Relaxed);
        if p == STOP {
            return None;
        }
        let keep = match result {
            Ok(Ok(answer)) => {
                in_phase(records, p, |r| {
                    record(
                        r,
                        &spec.workload,
                        answer.stream.as_ref(),
                        elapsed,
                        &mut buffers.gaps,
                    )
                });
                !answer.close
            }
            Ok(Err(reason)) => {
                in_phase(records, p, |r| r.fail(reason));
                false
            }
            Err(_) => {
                in_phase(records, p, |r| {
                    r.fail(format!("no complete answer within {:?}", spec.timeout))
                });
                false
            }
        };
        if !keep {
            self.stream = None;
            buffers.read.clear();
        }
        Some(())
    }
}

fn record(
    r: &mut PhaseRecord,
    workload: &Workload,
    stream: Option<&StreamProgress>,
    elapsed: u64,
    gaps: &mut Vec<u64>,
) {
    match (workload, stream) {
        (Workload::Stream { frames, stall }, Some(progress)) => {
            if progress.content != *frames || !progress.done {
                r.dropped += 1;
                if r.errors.len() < ERRORS_KEPT {
                    r.errors.push(format!(
                        "stream ended with {} of {frames} frames, [DONE] {}",
                        progress.content,
                        if progress.done { "seen" } else { "missing" }
                    ));
                }
                return;
            }
            if progress.longest_silence_ns > stall.as_nanos() as u64 {
                r.stalled += 1;
            }
            r.ok += 1;
            r.latency_ns.push(elapsed);
            r.ttft_ns.extend(progress.ttft_ns);
            r.gap_ns.append(gaps);
        }
        _ => {
            r.ok += 1;
            r.latency_ns.push(elapsed);
        }
    }
}

/// Sends the request and reads the whole answer. Err carries a reason for the report.
async fn exchange(
    stream: &mut TcpStream,
    spec: &LoadSpec,
    buffers: &mut Buffers,
    started: Instant,
) -> Result<Answer, String> {
    stream
        .write_all(&spec.request)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let head = loop {
        if let Some(head) = parse_head(&buffers.read).map_err(|e| e.to_string())? {
            break head;
        }
        read_more(stream, &mut buffers.read).await?;
    };
    if head.status != 200 {
        let end = buffers.read.len().min(head.len + 200);
        return Err(format!(
            "status {}: {}",
            head.status,
            String::from_utf8_lossy(&buffers.read[head.len..end]).trim()
        ));
    }
    buffers.read.drain(..head.len);

    let streaming = matches!(spec.workload, Workload::Stream { .. });
    let mut progress = StreamProgress::default();
    let Buffers { read, sse, gaps } = buffers;
    // Hands decoded body bytes to the SSE splitter (streams) or drops them (unary).
    let mut sink = |bytes: &[u8], now: Instant| {
        if streaming {
            sse.feed(bytes, CONTENT_MARKER, |event| {
                progress.on_event(event, started, now, gaps)
            });
        }
    };
    let mut close = head.close;
    match head.framing {
        Framing::Length(length) => {
            let mut seen = 0;
            loop {
                let n = read.len().min(length - seen);
                sink(&read[..n], Instant::now());
                read.drain(..n);
                seen += n;
                if seen == length {
                    break;
                }
                read_more(stream, read).await?;
            }
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            loop {
                let now = Instant::now();
                let used = decoder
                    .decode(read, |bytes| sink(bytes, now))
                    .map_err(|e| e.to_string())?;
                read.drain(..used);
                if decoder.is_done() {
                    break;
                }
                read_more(stream, read).await?;
            }
        }
        Framing::UntilClose => {
            close = true;
            loop {
                sink(read, Instant::now());
                read.clear();
                read.reserve(16 * 1024);
                match stream.read_buf(read).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
        }
    }
    Ok(Answer {
        close,
        stream: streaming.then_some(progress),
    })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    match stream.read_buf(buf).await {
        Ok(0) => Err("connection closed before the answer was complete".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// The request bytes for `POST path` with a JSON body and a bearer key.
pub fn post_request(host: SocketAddr, path: &str, key: &str, body: &str) -> Arc<[u8]> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into()
}

/// One request on a fresh blocking connection: the status (for readiness probes and checks).
pub fn one_request(target: SocketAddr, request: &[u8], timeout: Duration) -> Result<u16> {
    let mut stream = StdStream::connect_timeout(&target, timeout)
        .with_context(|| format!("connect to {target}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head) = parse_head(&buf)? {
            return Ok(head.status);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("{target} closed the connection without an answer");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `GET path` on a fresh blocking connection, read to the end: the status and the decoded body
/// (for stats and `/metrics` pages).
pub fn fetch(target: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>)> {
    let mut stream = StdStream::connect_timeout(&target, timeout)
        .with_context(|| format!("connect to {target}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(&get_request(target, path))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head =
        parse_head(&response)?.with_context(|| format!("{target}{path}: no complete head"))?;
    let rest = &response[head.len..];
    let body = match head.framing {
        Framing::Length(length) => rest
            .get(..length)
            .with_context(|| format!("{target}{path}: body shorter than its length"))?
            .to_vec(),
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            let mut body = Vec::new();
            decoder.decode(rest, |bytes| body.extend_from_slice(bytes))?;
            if !decoder.is_done() {
                bail!("{target}{path}: chunked body cut short");
            }
            body
        }
        Framing::UntilClose => rest.to_vec(),
    };
    Ok((head.status, body))
}

/// `GET path` as request bytes.
pub fn get_request(host: SocketAddr, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aisix_testkit::mock::MockProvider;

    use crate::mock::MockArgs;

    /// The harness's mock, in this process, on port 0.
    fn start_mock(frames: usize) -> MockProvider {
        MockArgs {
            addr: "127.0.0.1:0".parse().unwrap(),
            stats_addr: "127.0.0.1:0".parse().unwrap(),
            workers: 2,
            ttft: Duration::from_millis(2),
            frames,
            gap: Duration::from_millis(1),
            burst: false,
            hostile_event_mib: 1,
            hostile_body_mb: 1,
        }
        .start()
        .unwrap()
    }

    fn spec(
        target: SocketAddr,
        path: &str,
        body: &str,
        workload: Workload,
        connections: usize,
    ) -> LoadSpec {
        LoadSpec {
            target,
            request: post_request(target, path, "sk-test", body),
            workload,
            connections,
            threads: 2,
            cpus: None,
            timeout: Duration::from_secs(5),
            rate: None,
        }
    }

    /// Runs `spec` for a short window (phase 1) and returns that window's record.
    fn one_window(spec: &LoadSpec) -> PhaseRecord {
        let run = LoadRun::start(spec).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        run.set_phase(1);
        std::thread::sleep(Duration::from_millis(300));
        run.set_phase(2);
        let mut records = run.stop().unwrap();
        records.resize_with(3, PhaseRecord::default);
        records.swap_remove(1)
    }

    #[test]
    fn closed_loop_unary_load_keeps_its_connections_alive() {
        let mock = start_mock(1);
        let body = r#"{"model":"m","messages":[]}"#;
        let window = one_window(&spec(
            mock.addr(),
            "/v1/chat/completions",
            body,
            Workload::Unary,
            4,
        ));
        assert!(window.ok > 0);
        assert_eq!(window.failures, 0, "{:?}", window.errors);
        assert_eq!(window.latency_ns.len() as u64, window.ok);
        assert_eq!(
            mock.connections_accepted(),
            4,
            "one connection per closed loop, reused"
        );
        assert!(mock.request_count() as u64 >= window.ok);
    }

    /// One window of streams from a mock that sends `sent` frames, the load expecting
    /// `expected`.
    fn stream_window(sent: usize, expected: usize, body: &str, connections: usize) -> PhaseRecord {
        let mock = start_mock(sent);
        let workload = Workload::Stream {
            frames: expected,
            stall: Duration::from_secs(1),
        };
        let path = "/v1/chat/completions";
        one_window(&spec(mock.addr(), path, body, workload, connections))
    }

    #[test]
    fn streams_from_the_mock_arrive_with_every_frame_and_done() {
        let body = r#"{"model":"m","stream": true,"stream_options":{"include_usage":true}}"#;
        let window = stream_window(3, 3, body, 3);
        assert!(window.ok > 0);
        assert_eq!(
            (window.failures, window.dropped, window.stalled),
            (0, 0, 0),
            "{:?}",
            window.errors
        );
        assert_eq!(window.ttft_ns.len() as u64, window.ok);
        assert_eq!(window.gap_ns.len() as u64, window.ok * 2);
    }

    #[test]
    fn a_stream_with_fewer_frames_than_expected_counts_as_dropped() {
        let window = stream_window(2, 3, r#"{"model":"m","stream":true}"#, 1);
        assert_eq!(window.ok, 0);
        assert!(window.dropped > 0);
    }

    #[test]
    fn a_non_200_answer_is_a_failure_with_its_status() {
        let mock = start_mock(1);
        let window = one_window(&spec(mock.addr(), "/v1/unknown", "{}", Workload::Unary, 1));
        assert_eq!(window.ok, 0);
        assert!(window.failures > 0);
        assert!(
            window.errors[0].starts_with("status 404"),
            "{:?}",
            window.errors
        );
    }

    #[test]
    fn a_refused_connection_is_a_failure() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let window = one_window(&spec(
            port,
            "/v1/chat/completions",
            "{}",
            Workload::Unary,
            1,
        ));
        assert_eq!(window.ok, 0);
        assert!(window.failures > 0);
        assert!(
            window.errors[0].starts_with("connect"),
            "{:?}",
            window.errors
        );
    }
}
