//! The `poll-probe` feature (the bench harness's `--poll-probe`), two readings of how long a
//! worker's thread is held:
//!
//! - **Delay**: each thread-per-core worker runs a task that asks to wake every millisecond and
//!   notes how late it woke. The worst lateness is the longest the worker's thread was kept
//!   from its other tasks: one long poll (a parser or a copy that does not yield), or CPU time
//!   the kernel gave to something else. Tokio's timer has a 1 ms resolution, so an idle worker
//!   reads up to about 1 ms. Read and reset with [`take_longest`] (`aisix` shows it on
//!   `/metrics` as `aisix_worker_longest_delay_seconds`).
//! - **Poll**: every client connection's task is [`timed`]: the wall time of each of its polls
//!   (hyper reading, parsing and writing, and the gateway's request and body futures it drives)
//!   is noted, and the longest is read and reset with [`take_longest_poll`]
//!   (`aisix_worker_longest_poll_seconds`). It has no timer's resolution, but it is wall time:
//!   a poll the kernel preempts counts the time it was away. So the thread's own CPU time
//!   across each poll is noted too, and the longest read with [`take_longest_poll_cpu`]
//!   (`aisix_worker_longest_poll_cpu_seconds`): what the gateway's code itself held the worker.
//!
//! Both are the worst since the previous scrape, over every worker. Without the feature nothing
//! is compiled in.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

static LONGEST_NS: AtomicU64 = AtomicU64::new(0);
static LONGEST_POLL_NS: AtomicU64 = AtomicU64::new(0);
static LONGEST_POLL_CPU_NS: AtomicU64 = AtomicU64::new(0);

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
    note_in(&LONGEST_NS, late);
}

fn note_in(longest: &AtomicU64, held: Duration) {
    let nanos = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
    longest.fetch_max(nanos, Ordering::Relaxed);
}

/// The longest delay noted since the previous call (over every worker), and a fresh start.
pub fn take_longest() -> Duration {
    Duration::from_nanos(LONGEST_NS.swap(0, Ordering::Relaxed))
}

/// The longest single poll of a [`timed`] task since the previous call, and a fresh start.
pub fn take_longest_poll() -> Duration {
    Duration::from_nanos(LONGEST_POLL_NS.swap(0, Ordering::Relaxed))
}

/// The longest CPU time a single poll of a [`timed`] task took since the previous call, and a
/// fresh start.
pub fn take_longest_poll_cpu() -> Duration {
    Duration::from_nanos(LONGEST_POLL_CPU_NS.swap(0, Ordering::Relaxed))
}

/// This thread's CPU time so far (a system call: the probe build only).
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// `task`, each of whose polls is timed (boxed: the probe build only).
pub(crate) fn timed<F: Future>(task: F) -> Timed<F> {
    Timed {
        task: Box::pin(task),
    }
}

/// A task whose polls are timed; see [`timed`].
pub(crate) struct Timed<F> {
    task: Pin<Box<F>>,
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let (started, cpu) = (std::time::Instant::now(), thread_cpu());
        let polled = self.task.as_mut().poll(cx);
        note_in(&LONGEST_POLL_NS, started.elapsed());
        note_in(&LONGEST_POLL_CPU_NS, thread_cpu().saturating_sub(cpu));
        polled
    }
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

    #[test]
    fn a_poll_that_holds_the_thread_is_the_longest_poll_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _ = (take_longest_poll(), take_longest_poll_cpu());
        runtime.block_on(timed(async {
            tokio::task::yield_now().await;
            // One poll that does not yield for 20 ms, asleep (wall time, no CPU) ...
            std::thread::sleep(Duration::from_millis(20));
            tokio::task::yield_now().await;
            // ... and one that spins for 10 ms of this thread's CPU.
            let spun = thread_cpu();
            while thread_cpu().saturating_sub(spun) < Duration::from_millis(10) {
                std::hint::spin_loop();
            }
        }));
        let longest = take_longest_poll();
        assert!(longest >= Duration::from_millis(20), "{longest:?}");
        let cpu = take_longest_poll_cpu();
        assert!(
            cpu >= Duration::from_millis(10) && cpu < Duration::from_millis(20),
            "{cpu:?}"
        );
        assert!(take_longest_poll() < Duration::from_millis(20));
    }
}
