//! The access log: one JSON line per request on stderr. A worker never writes to stderr itself:
//! it formats the line into its own thread's buffer, and a writer thread flushes every buffer
//! every 100 ms, or as soon as one buffer passes 64 KiB. A buffer that is full (stderr cannot
//! keep up) drops the line and counts it in `aisix_access_log_dropped_total`, so a slow log
//! reader never stalls serving.
//!
//! Cost per line: formatting into a reused thread-local buffer (no allocation once warm) and one
//! uncontended lock of this thread's own buffer. Past 64 KiB, one relaxed load of a shared flag
//! per line until the writer has taken the buffer; the one worker that finds the flag clear also
//! swaps it, locks the writer's handle and unparks it (one futex wake while the writer sleeps).
//! So a busy process makes at most one wake-up per flush, about one per 150 lines, never one
//! per request.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics;

/// Most bytes one thread buffers between flushes; beyond it lines are dropped.
pub const MAX_BUFFERED_BYTES: usize = 1 << 20;
/// How often the writer flushes.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// A thread whose buffer passes this wakes the writer early, so a busy worker's lines are
/// written in 64 KiB batches instead of piling up to the drop limit.
pub const FLUSH_AT_BYTES: usize = 64 * 1024;

/// Longest path logged; longer paths are cut.
const MAX_PATH: usize = 256;

/// One call to a direct model while serving a request, in the order made.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The direct model's configured name.
    pub target: Arc<str>,
    /// Its provider key's configured name (not logged; the `provider` of its upstream errors).
    pub provider: Arc<str>,
    /// The upstream's status, when it answered with one.
    pub status: Option<u16>,
    /// Sent until the answer was in hand (a stream's first token) or the call failed.
    pub duration: Duration,
    /// The error code, when the call failed.
    pub error: Option<&'static str>,
    /// How it ended: the `result` label of `aisix_upstream_attempts_total`.
    pub result: metrics::labels::Outcome,
    /// The `kind` label of `aisix_upstream_errors_total`, when the provider failed.
    pub failure: Option<metrics::labels::UpstreamErrorKind>,
}

/// What one access-log line says. Never holds a key: `key` is the API key's configured name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entry<'a> {
    pub request_id: &'a str,
    pub method: &'a str,
    /// The path only: a query string may carry secrets.
    pub path: &'a str,
    pub status: u16,
    /// The direct model that answered (or was tried last).
    pub model: Option<&'a str>,
    /// The name the client sent, when it named a group.
    pub group: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub key: Option<&'a str>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub latency: Duration,
    pub ttft: Option<Duration>,
    pub upstream_status: Option<u16>,
    pub error: Option<&'a str>,
    pub stream: bool,
    pub overhead: Duration,
    pub attempts: &'a [Attempt],
    /// The offered tools a translated Responses request left out, comma-separated.
    pub dropped_tools: Option<&'a str>,
}

/// One thread's pending lines.
struct Buffer {
    lines: Mutex<Vec<u8>>,
}

// shared: the writer thread must reach every worker's buffer; each buffer has one writer
// (its thread) and is taken by the flusher ten times a second.
static BUFFERS: Mutex<Vec<Arc<Buffer>>> = Mutex::new(Vec::new());
// shared: lines dropped anywhere, reported by the writer; written only when a line is dropped.
static DROPPED: AtomicU64 = AtomicU64::new(0);
// shared: the running writer thread, woken by whichever worker first passes FLUSH_AT_BYTES;
// locked only to wake it (once per flush at most) and to start or stop it.
static WRITER: Mutex<Option<Thread>> = Mutex::new(None);
// shared: set by the worker that wakes the writer, cleared by the writer before it takes the
// buffers, so one wake-up is sent per flush however many workers pass the mark.
static WAKE_SENT: AtomicBool = AtomicBool::new(false);

thread_local! {
    static LOCAL: RefCell<Option<Arc<Buffer>>> = const { RefCell::new(None) };
}

/// Queues `entry` for the log, formatting it straight into this thread's buffer.
pub fn record(entry: &Entry<'_>) {
    let _ = LOCAL.try_with(|local| {
        let Ok(mut local) = local.try_borrow_mut() else {
            return;
        };
        let buffer = local.get_or_insert_with(register);
        let mut lines = buffer.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let start = lines.len();
        format_line(&mut lines, entry, SystemTime::now());
        if lines.len() > MAX_BUFFERED_BYTES {
            lines.truncate(start);
            drop(lines);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            // Counted here, not by the writer: the writer may be the one stuck on stderr.
            metrics::emit::access_log_dropped(1);
        } else if lines.len() >= FLUSH_AT_BYTES {
            drop(lines);
            wake_writer();
        }
    });
}

/// Wakes the writer unless a wake-up is already on its way. The load first keeps workers that
/// find the flag set from writing its cache line.
fn wake_writer() {
    if WAKE_SENT.load(Ordering::Relaxed) || WAKE_SENT.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(writer) = &*WRITER.lock().unwrap_or_else(PoisonError::into_inner) {
        writer.unpark();
    }
}

fn register() -> Arc<Buffer> {
    let buffer = Arc::new(Buffer {
        lines: Mutex::new(Vec::with_capacity(16 * 1024)),
    });
    BUFFERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(buffer.clone());
    buffer
}

/// Lines dropped so far in this process.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The thread that moves buffered lines to stderr.
pub struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    done: std::sync::mpsc::Receiver<()>,
}

/// How long stopping waits for the last flush; a stderr nobody reads must not hold the exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

impl Writer {
    /// Starts the writer thread (`aisix-log`), writing to stderr every [`FLUSH_INTERVAL`].
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(std::io::stderr(), FLUSH_INTERVAL)
    }

    /// Starts the writer thread with lines going to `output`, flushed every `interval` and
    /// whenever a thread's buffer passes [`FLUSH_AT_BYTES`]. One writer runs per process: the
    /// last one started is the one woken early.
    pub fn start_with(
        mut output: impl Write + Send + 'static,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("aisix-log".to_owned())
            .spawn({
                let stop = stop.clone();
                move || {
                    let mut spare = Vec::with_capacity(FLUSH_AT_BYTES);
                    let mut reported = 0;
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(interval);
                        flush(&mut output, &mut spare, &mut reported);
                    }
                    flush(&mut output, &mut spare, &mut reported);
                    let _ = done_tx.send(());
                }
            })?;
        *WRITER.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread.thread().clone());
        Ok(Self {
            stop,
            thread: Some(thread),
            done,
        })
    }

    /// Flushes what is buffered and stops the thread; gives up after two seconds if stderr is
    /// stuck.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let mut writer = WRITER.lock().unwrap_or_else(PoisonError::into_inner);
            if writer
                .as_ref()
                .is_some_and(|w| w.id() == thread.thread().id())
            {
                *writer = None;
            }
            drop(writer);
            thread.thread().unpark();
            if self.done.recv_timeout(STOP_TIMEOUT).is_ok() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn flush(output: &mut impl Write, spare: &mut Vec<u8>, reported: &mut u64) {
    // Cleared before the buffers are taken: a worker that passes the mark after this point
    // sends a new wake-up; lines from before it are written in this round.
    WAKE_SENT.store(false, Ordering::Release);
    let buffers: Vec<Arc<Buffer>> = BUFFERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for buffer in buffers {
        {
            let mut lines = buffer.lines.lock().unwrap_or_else(PoisonError::into_inner);
            if lines.is_empty() {
                continue;
            }
            std::mem::swap(&mut *lines, spare);
        }
        let _ = output.write_all(spare);
        spare.clear();
    }
    let _ = output.flush();
    let dropped = DROPPED.load(Ordering::Relaxed);
    if dropped > *reported {
        tracing::warn!(
            dropped = dropped - *reported,
            "access-log lines dropped: stderr is too slow"
        );
        *reported = dropped;
    }
}

/// Formats one line (with its newline) into `out`. No `core::fmt`: numbers and the timestamp are
/// written digit by digit, strings are copied whole unless they need escaping.
pub fn format_line(out: &mut Vec<u8>, entry: &Entry<'_>, now: SystemTime) {
    out.extend_from_slice(b"{\"ts\":\"");
    rfc3339_millis(out, now);
    out.extend_from_slice(b"\",\"type\":\"access\",\"request_id\":");
    json_str(out, entry.request_id);
    out.extend_from_slice(b",\"worker\":");
    metrics::worker::with_registered_label(|label| opt_str(out, label));
    out.extend_from_slice(b",\"method\":");
    json_str(out, entry.method);
    out.extend_from_slice(b",\"path\":");
    let path = match entry.path.char_indices().nth(MAX_PATH) {
        Some((cut, _)) if entry.path.len() > MAX_PATH => &entry.path[..cut],
        _ => entry.path,
    };
    json_str(out, path);
    out.extend_from_slice(b",\"status\":");
    num(out, u64::from(entry.status));
    out.extend_from_slice(b",\"model\":");
    opt_str(out, entry.model);
    if let Some(group) = entry.group {
        out.extend_from_slice(b",\"group\":");
        json_str(out, group);
    }
    out.extend_from_slice(b",\"provider\":");
    opt_str(out, entry.provider);
    out.extend_from_slice(b",\"api_key\":");
    opt_str(out, entry.key);
    out.extend_from_slice(b",\"input_tokens\":");
    opt_num(out, entry.input_tokens);
    out.extend_from_slice(b",\"output_tokens\":");
    opt_num(out, entry.output_tokens);
    out.extend_from_slice(b",\"latency_ms\":");
    millis(out, entry.latency);
    out.extend_from_slice(b",\"ttft_ms\":");
    match entry.ttft {
        Some(ttft) => millis(out, ttft),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"upstream_status\":");
    opt_num(out, entry.upstream_status.map(u64::from));
    out.extend_from_slice(b",\"error\":");
    opt_str(out, entry.error);
    out.extend_from_slice(if entry.stream {
        b",\"stream\":true,\"overhead_us\":"
    } else {
        b",\"stream\":false,\"overhead_us\":"
    });
    num(
        out,
        u64::try_from(entry.overhead.as_micros()).unwrap_or(u64::MAX),
    );
    if let Some(dropped) = entry.dropped_tools {
        out.extend_from_slice(b",\"dropped_tools\":");
        json_str(out, dropped);
    }
    if !entry.attempts.is_empty() {
        out.extend_from_slice(b",\"attempts\":[");
        for (i, attempt) in entry.attempts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"target\":");
            json_str(out, &attempt.target);
            out.extend_from_slice(b",\"status\":");
            opt_num(out, attempt.status.map(u64::from));
            out.extend_from_slice(b",\"duration_ms\":");
            millis(out, attempt.duration);
            out.extend_from_slice(b",\"error\":");
            opt_str(out, attempt.error);
            out.push(b'}');
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}\n");
}

/// Milliseconds with three decimals, from whole microseconds.
fn millis(out: &mut Vec<u8>, d: Duration) {
    let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    num(out, micros / 1000);
    out.push(b'.');
    let frac = micros % 1000;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

fn num(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn two(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&[b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8]);
}

fn opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_num(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(n) => num(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        for &b in bytes {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..=0x1f | 0x7f => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                _ => out.push(b),
            }
        }
    }
    out.push(b'"');
}

/// Whether any byte is a control character, `"`, `\\` or DEL; eight bytes at a time.
fn needs_escape(bytes: &[u8]) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Bytes of `word` equal to zero, flagged in their high bit (exact for ASCII input; a byte
    // above 0x7f can flag falsely, which only sends the string down the careful path).
    let zero = |word: u64| word.wrapping_sub(LOW) & !word & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let below_space = w.wrapping_sub(LOW * 0x20) & !w & HIGH;
        let hits = below_space
            | zero(w ^ (LOW * u64::from(b'"')))
            | zero(w ^ (LOW * u64::from(b'\\')))
            | zero(w ^ (LOW * 0x7f));
        if hits != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f)
}

/// `2026-11-30T03:34:23.217Z`.
fn rfc3339_millis(out: &mut Vec<u8>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = crate::civil::from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    num(out, year.max(0) as u64);
    out.push(b'-');
    two(out, u64::from(month));
    out.push(b'-');
    two(out, u64::from(day));
    out.push(b'T');
    two(out, rem / 3600);
    out.push(b':');
    two(out, rem % 3600 / 60);
    out.push(b':');
    two(out, rem % 60);
    out.push(b'.');
    let ms = u64::from(since.subsec_millis());
    out.extend_from_slice(&[
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
    ]);
    out.push(b'Z');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            request_id: "abc",
            method: "POST",
            path: "/v1/chat/completions",
            status: 200,
            model: Some("gpt-4o"),
            provider: Some("openai-main"),
            key: Some("team-a"),
            input_tokens: Some(12),
            output_tokens: Some(40),
            latency: Duration::from_micros(12_345),
            ttft: None,
            upstream_status: Some(200),
            error: None,
            stream: false,
            overhead: Duration::from_micros(42),
            ..Entry::default()
        }
    }

    #[test]
    fn a_group_request_names_the_group_and_lists_every_attempt() {
        let attempts = [
            Attempt {
                target: "primary".into(),
                provider: "p".into(),
                status: Some(503),
                duration: Duration::from_micros(2_500),
                error: Some("upstream_error"),
                result: metrics::labels::Outcome::UpstreamError,
                failure: Some(metrics::labels::UpstreamErrorKind::Status),
            },
            Attempt {
                target: "backup".into(),
                provider: "p".into(),
                status: Some(200),
                duration: Duration::from_micros(10_000),
                error: None,
                result: metrics::labels::Outcome::Success,
                failure: None,
            },
        ];
        let mut e = entry();
        e.model = Some("backup");
        e.group = Some("chat");
        e.attempts = &attempts;
        let mut out = Vec::new();
        format_line(&mut out, &e, UNIX_EPOCH);
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["model"], "backup");
        assert_eq!(line["group"], "chat");
        assert_eq!(
            line["attempts"],
            serde_json::json!([
                {"target": "primary", "status": 503, "duration_ms": 2.5, "error": "upstream_error"},
                {"target": "backup", "status": 200, "duration_ms": 10.0, "error": null},
            ])
        );
        let mut out = Vec::new();
        format_line(&mut out, &entry(), UNIX_EPOCH);
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(line.get("attempts").is_none() && line.get("group").is_none());
    }

    #[test]
    fn a_line_is_one_json_object_with_every_field() {
        let mut out = Vec::new();
        format_line(
            &mut out,
            &entry(),
            UNIX_EPOCH + Duration::from_millis(1_796_009_663_217),
        );
        assert_eq!(out.last(), Some(&b'\n'));
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(
            text.starts_with("{\"ts\":\"2026-11-30T03:34:23.217Z\""),
            "{text}"
        );
        for field in [
            "\"request_id\":\"abc\"",
            "\"method\":\"POST\"",
            "\"status\":200",
            "\"model\":\"gpt-4o\"",
            "\"api_key\":\"team-a\"",
            "\"input_tokens\":12",
            "\"output_tokens\":40",
            "\"latency_ms\":12.345",
            "\"ttft_ms\":null",
            "\"upstream_status\":200",
            "\"error\":null",
            "\"overhead_us\":42",
        ] {
            assert!(text.contains(field), "{field} missing in {text}");
        }
    }

    #[test]
    fn strings_are_escaped_and_paths_are_cut() {
        let long = format!("/v1/\"quoted\"\n{}", "x".repeat(1000));
        let mut e = entry();
        e.path = &long;
        let mut out = Vec::new();
        format_line(&mut out, &e, UNIX_EPOCH);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains(r#""path":"/v1/\"quoted\"\nxxx"#), "{text}");
        assert_eq!(
            text.matches('\n').count(),
            1,
            "the newline in the path is escaped"
        );
        assert!(text.len() < 700);
    }

    #[test]
    fn a_full_buffer_drops_lines_and_counts_them() {
        // No writer runs in this test: the thread's buffer fills and then drops.
        let before = dropped();
        let line_len = {
            let mut out = Vec::new();
            format_line(&mut out, &entry(), UNIX_EPOCH);
            out.len()
        };
        let lines = MAX_BUFFERED_BYTES / line_len + 10;
        for _ in 0..lines {
            record(&entry());
        }
        assert!(dropped() - before >= 9, "dropped {}", dropped() - before);
    }

    #[test]
    fn control_characters_and_small_durations_are_written_exactly() {
        let mut e = entry();
        e.key = Some("a\u{1}b");
        e.latency = Duration::from_micros(5);
        e.ttft = Some(Duration::from_micros(1_234_567));
        let mut out = Vec::new();
        format_line(&mut out, &e, UNIX_EPOCH);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains(r#""api_key":"a\u0001b""#), "{text}");
        assert!(text.contains(r#""latency_ms":0.005,"#), "{text}");
        assert!(text.contains(r#""ttft_ms":1234.567,"#), "{text}");
        let parsed: Vec<&str> = text.split(',').collect();
        assert!(parsed.len() > 10);
    }

    #[test]
    fn the_escape_check_finds_every_special_byte_at_every_position() {
        for special in [b'"', b'\\', b'\n', 0x00, 0x1f, 0x7f] {
            for len in 1..20 {
                for at in 0..len {
                    let mut text = vec![b'a'; len];
                    text[at] = special;
                    assert!(needs_escape(&text), "{special:#x} at {at} of {len}");
                }
            }
        }
        assert!(!needs_escape(
            b"plain-ASCII_text 0123456789 ~!#$%&'()*+,-./:;<=>?@[]^`{|}"
        ));
        assert!(!needs_escape(
            "caf\u{e9} \u{65e5}\u{672c} and more text".as_bytes()
        ));
    }
}
