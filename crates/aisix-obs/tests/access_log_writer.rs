#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The access-log writer thread: a buffer past the flush mark wakes it before its interval, and
//! stopping it writes what is left. Its own test binary: the writer and the buffers it drains
//! are process-wide.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aisix_obs::access_log::{self, Entry, FLUSH_AT_BYTES, Writer};

/// An interval no test waits out: only an early wake-up or a stop can flush.
const NEVER: Duration = Duration::from_secs(3600);

/// Collects what the writer writes.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    fn lines(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn entry() -> Entry<'static> {
    Entry {
        request_id: "0123456789abcdef0123456789abcdef",
        method: "POST",
        path: "/v1/chat/completions",
        status: 200,
        ..Entry::default()
    }
}

/// Waits (bounded) until the sink holds `lines` lines; false if it never does.
fn wait_for_lines(sink: &Sink, lines: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if sink.lines() >= lines {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn a_buffer_past_the_flush_mark_wakes_the_writer_and_stop_writes_the_rest() {
    let sink = Sink::default();
    let writer = Writer::start_with(sink.clone(), NEVER).unwrap();
    let line_len = {
        let mut line = Vec::new();
        access_log::format_line(&mut line, &entry(), SystemTime::now());
        line.len()
    };

    // Past the mark: written long before the interval, by the wake-up alone.
    let past_the_mark = FLUSH_AT_BYTES / line_len + 1;
    for _ in 0..past_the_mark {
        access_log::record(&entry());
    }
    assert!(
        wait_for_lines(&sink, past_the_mark),
        "{} of {past_the_mark} lines written: the writer was not woken",
        sink.lines()
    );

    // The flag is clear again: the next buffer past the mark wakes it a second time.
    for _ in 0..past_the_mark {
        access_log::record(&entry());
    }
    assert!(
        wait_for_lines(&sink, 2 * past_the_mark),
        "{} of {} lines written: the second wake-up was lost",
        sink.lines(),
        2 * past_the_mark
    );

    // Below the mark nothing wakes the writer; stopping it writes what is buffered.
    access_log::record(&entry());
    access_log::record(&entry());
    writer.stop();
    assert_eq!(sink.lines(), 2 * past_the_mark + 2);
    assert_eq!(access_log::dropped(), 0);
}
