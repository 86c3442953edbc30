//! The open-loop load generator: requests leave at a fixed rate whatever the target does, each
//! on a free connection of a pool, and each request's latency runs from the time it was
//! scheduled to leave, not from when a connection came free. A target that stalls therefore
//! shows its stall in every request scheduled during it, instead of the load generator quietly
//! sending less (coordinated omission). A request scheduled while every pooled connection is
//! busy waits, and counts as late.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::loadgen::{Conn, LoadSpec, Records, STOP, in_phase};

/// A send later than this after its scheduled time counts as late.
const LATE: Duration = Duration::from_millis(1);
/// Closer than this to the next scheduled send, the scheduler yields instead of sleeping (tokio's
/// timer has millisecond resolution).
const SPIN: Duration = Duration::from_millis(1);

/// This thread's share of an open-loop run: `rate` requests per second over `connections`
/// connections, until the phase is [`STOP`].
pub(crate) async fn run(
    spec: &Arc<LoadSpec>,
    connections: usize,
    rate: f64,
    phase: &Arc<AtomicUsize>,
    records: &Records,
) {
    if connections == 0 || rate <= 0.0 {
        return;
    }
    // Free connections; a request task sends its connection back when done.
    let (free, mut idle) = mpsc::unbounded_channel::<Conn>();
    for _ in 0..connections {
        let _ = free.send(Conn::default());
    }
    let start = Instant::now();
    let mut sent: u64 = 0;
    while phase.load(Ordering::Relaxed) != STOP {
        let scheduled = start + Duration::from_secs_f64(sent as f64 / rate);
        wait_until(scheduled).await;
        let Some(mut conn) = idle.recv().await else {
            return;
        };
        let p = phase.load(Ordering::Relaxed);
        if p == STOP {
            break;
        }
        if scheduled.elapsed() > LATE {
            in_phase(records, p, |r| r.late += 1);
        }
        let (spec, phase, records, free) =
            (spec.clone(), phase.clone(), records.clone(), free.clone());
        tokio::task::spawn_local(async move {
            let _ = conn.request(&spec, scheduled, &phase, &records).await;
            let _ = free.send(conn);
        });
        sent += 1;
    }
    // Every connection comes back once its request in flight is done.
    drop(free);
    for _ in 0..connections {
        if idle.recv().await.is_none() {
            break;
        }
    }
}

/// Sleeps to within [`SPIN`] of `at`, then yields until it.
async fn wait_until(at: Instant) {
    loop {
        let now = Instant::now();
        if now >= at {
            return;
        }
        if at - now > SPIN {
            tokio::time::sleep_until((at - SPIN).into()).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use aisix_testkit::mock::{MockProvider, Pacing};

    use super::*;
    use crate::loadgen::{LoadRun, PhaseRecord, Workload, post_request};

    fn open_spec(target: std::net::SocketAddr, rate: f64, connections: usize) -> LoadSpec {
        LoadSpec {
            target,
            request: post_request(
                target,
                "/v1/chat/completions",
                "sk-test",
                r#"{"model":"m","messages":[]}"#,
            ),
            workload: Workload::Unary,
            connections,
            threads: 1,
            cpus: None,
            timeout: Duration::from_secs(5),
            rate: Some(rate),
        }
    }

    /// One window of `length` after a short warm-up: that window's record, and every request
    /// answered in the whole run with the run's wall time.
    fn window(spec: &LoadSpec, length: Duration) -> (PhaseRecord, u64, Duration) {
        let started = Instant::now();
        let run = LoadRun::start(spec).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        run.set_phase(1);
        std::thread::sleep(length);
        run.set_phase(2);
        let mut records = run.stop().unwrap();
        let elapsed = started.elapsed();
        let answered = records.iter().map(|r| r.ok).sum();
        records.resize_with(3, PhaseRecord::default);
        (records.swap_remove(1), answered, elapsed)
    }

    #[test]
    fn requests_leave_at_the_scheduled_rate_not_as_fast_as_answers_come() {
        let mock = MockProvider::builder()
            .fast(Pacing {
                ttft: Duration::ZERO,
                frames: 1,
                gap: Duration::ZERO,
                burst: false,
            })
            .start()
            .unwrap();
        let (record, answered, elapsed) = window(
            &open_spec(mock.addr(), 400.0, 4),
            Duration::from_millis(500),
        );
        assert_eq!(record.failures, 0, "{:?}", record.errors);
        assert!(record.ok > 0);
        // A closed loop against this mock would answer thousands; the schedule allows this many.
        let scheduled = (400.0 * elapsed.as_secs_f64()).ceil() as u64 + 1;
        assert!(
            answered <= scheduled,
            "{answered} answered, {scheduled} scheduled"
        );
        assert!(
            mock.connections_accepted() <= 4,
            "requests share the pooled connections"
        );
    }

    /// A target that answers in 100 ms, driven at 50 requests/s over one connection (it can
    /// serve 10/s): requests queue behind each other, and their latency, counted from when each
    /// was scheduled, grows far past the 100 ms a closed loop would report.
    #[test]
    fn latency_counts_from_the_scheduled_send_so_queueing_shows() {
        let mock = MockProvider::start();
        mock.set_default(
            aisix_testkit::mock::Reply::openai().delay_head(Duration::from_millis(100)),
        );
        let (record, _, _) = window(&open_spec(mock.addr(), 50.0, 1), Duration::from_millis(800));
        assert!(record.ok >= 3, "{}", record.ok);
        assert!(record.late > 0, "the one connection could not keep up");
        let worst = record.latency_ns.iter().max().copied().unwrap_or(0);
        assert!(
            worst > 300_000_000,
            "queued requests waited, and it shows: worst {worst} ns"
        );
    }
}
