//! Process logging: `tracing` to stderr (journald and container logs read it), filtered by
//! `observability.log_level` unless `RUST_LOG` is set. Lines are handed to a writer thread, so
//! a worker that logs never blocks on a slow stderr. A line that finds the writer's queue full
//! is dropped and counted in `aisix_log_dropped_total`.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Lines the writer thread's queue holds. The queue is allocated and written in full when the
/// process starts (32 bytes a line), so tracing-appender's default of 128 000 lines kept 4 MB of
/// every process's memory resident for a burst that a `warn`-level log does not have. 8 192 lines
/// take 256 KiB; a burst beyond them is dropped and counted.
pub const QUEUE_LINES: usize = 8 * 1024;

/// Keeps the log writer thread alive; dropping it flushes what is queued.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard(#[allow(dead_code)] WorkerGuard);

/// Checks a filter such as `info` or `aisix_gateway=debug,warn` without installing it.
pub fn validate_filter(filter: &str) -> Result<(), String> {
    EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| format!("not a valid log filter: {e}"))
}

/// Installs the process-wide subscriber. `RUST_LOG`, when set, wins over `level`.
pub fn init(level: &str) -> Result<LogGuard, String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => EnvFilter::builder()
            .parse(&from_env)
            .map_err(|e| format!("RUST_LOG is not a valid log filter: {e}"))?,
        _ => EnvFilter::builder()
            .parse(level)
            .map_err(|e| format!("observability.log_level is not a valid log filter: {e}"))?,
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) =
        Counted::start(io::stderr(), QUEUE_LINES, crate::metrics::emit::log_dropped);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(LogGuard(guard))
}

/// The writer thread's sending side, which reports the lines its queue dropped.
#[derive(Clone)]
struct Counted {
    queue: NonBlocking,
    dropped: ErrorCounter,
    /// How many of `dropped` were reported; shared by every clone, so each drop is reported once
    /// whichever thread sees it.
    reported: Arc<AtomicUsize>,
    report: fn(u64),
}

impl Counted {
    fn start<W: Write + Send + 'static>(
        out: W,
        lines: usize,
        report: fn(u64),
    ) -> (Self, WorkerGuard) {
        let (queue, guard) = NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(lines)
            .thread_name("aisix-stderr")
            .finish(out);
        let dropped = queue.error_counter();
        let writer = Self {
            queue,
            dropped,
            reported: Arc::new(AtomicUsize::new(0)),
            report,
        };
        (writer, guard)
    }

    fn report_drops(&self) {
        let dropped = self.dropped.dropped_lines();
        let before = self.reported.fetch_max(dropped, Ordering::Relaxed);
        if dropped > before {
            (self.report)((dropped - before) as u64);
        }
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.queue.write(buf)?;
        self.report_drops();
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.queue.flush()
    }
}

impl<'a> MakeWriter<'a> for Counted {
    type Writer = Counted;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::{Mutex, atomic::AtomicU64};

    /// An output that holds its first line until told to go on, so the queue behind it fills.
    struct Held(Mutex<mpsc::Receiver<()>>, Arc<Mutex<Vec<u8>>>);

    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.0.lock().unwrap().recv();
            self.1.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    static REPORTED: AtomicU64 = AtomicU64::new(0);

    fn record(lines: u64) {
        REPORTED.fetch_add(lines, Ordering::Relaxed);
    }

    #[test]
    fn a_line_that_finds_the_queue_full_is_dropped_and_reported_once() {
        let (go, wait) = mpsc::channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let (writer, guard) = Counted::start(Held(Mutex::new(wait), out.clone()), 2, record);
        // The writer thread takes a line and waits in `Held`; two more fill the queue.
        let mut lines = writer.make_writer();
        let mut sent = 0;
        while writer.dropped.dropped_lines() == 0 {
            lines.write_all(b"line\n").unwrap();
            sent += 1;
        }
        let reported = REPORTED.load(Ordering::Relaxed);
        assert_eq!(reported, 1);
        // Every clone shares what was reported, so a second look reports nothing more.
        writer.clone().report_drops();
        assert_eq!(REPORTED.load(Ordering::Relaxed), 1);
        // Once the output moves again, every line that was not dropped reaches it.
        drop(go);
        drop((lines, writer, guard));
        let written = out.lock().unwrap().iter().filter(|b| **b == b'\n').count() as u64;
        assert_eq!(written + reported, sent);
    }
}
