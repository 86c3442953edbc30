//! The `poll-probe` feature (the bench harness's `--poll-probe`): each thread-per-core worker
//! runs a task that asks to wake every millisecond and notes how late it woke. The worst
//! lateness is the longest the worker's thread was kept from its other tasks: one long poll
//! (a parser or a copy that does not yield), or CPU time the kernel gave to something else.
//! Tokio's timer has a 1 ms resolution, so an idle worker reads up to about 1 ms. Read and reset
//! with [`take_longest`] (`aisix` shows it on `/metrics` as
//! `aisix_worker_longest_delay_seconds`, the worst since the previous scrape, over every
//! worker). Without the feature nothing is compiled in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

static LONGEST_NS: AtomicU64 = AtomicU64::new(0);

/// How often the probe asks to wake.
const PERIOD: Duration = Duration::from_millis(1);

/// The probe task; runs until its runtime stops.
pub(crate) async fn run() {
    let mut due = Instant::now() + PERIOD;
    loop {
        sleep_until(due).await;
        let now = Instant::now();
        note(now.saturating_duration_since(due));
        due = now + PERIOD;
    }
}

fn note(late: Duration) {
    let nanos = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
    LONGEST_NS.fetch_max(nanos, Ordering::Relaxed);
}

/// The longest delay noted since the previous call (over every worker), and a fresh start.
pub fn take_longest() -> Duration {
    Duration::from_nanos(LONGEST_NS.swap(0, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_held_past_its_wake_up_shows_as_the_longest_delay_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = take_longest();
        runtime.block_on(async {
            let probe = tokio::spawn(run());
            tokio::time::sleep(Duration::from_millis(5)).await;
            // Hold the thread: the probe cannot run for 30 ms.
            std::thread::sleep(Duration::from_millis(30));
            tokio::time::sleep(Duration::from_millis(5)).await;
            probe.abort();
        });
        let longest = take_longest();
        assert!(longest >= Duration::from_millis(20), "{longest:?}");
        assert!(
            take_longest() < Duration::from_millis(20),
            "reset by the read"
        );
    }
}
