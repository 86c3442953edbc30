//! The bounded queues between the workers and the exporter: one per worker thread, created as
//! a thread-per-core worker starts (another thread: on its first traced request) and announced
//! to the exporter then. A request's end only
//! tries to put its record in its own thread's queue: no lock is shared between workers, and a
//! full queue drops the record and counts it (`aisix_otel_dropped_total{signal}`), never waits.
//! Once per batch's worth of records put (a count local to the thread, not a look at the
//! queue), the worker wakes the exporter so it drains the queues between its timed collections.
//!
//! A queue is a ring of `queue_size` slots (crossbeam's `ArrayQueue`, 16 bytes a slot, made by
//! [`prepare`] or [`push`]): the worker puts with one compare-and-swap, the exporter
//! takes with one, and a full ring refuses. Nothing on either side waits or takes a lock; the
//! exporter is woken by [`Hub::wake`], not by the ring. (tokio's channels did the same with a
//! list of blocks and a count or semaphore beside it, which cost more each way.)

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use aisix_obs::metrics::emit;
use crossbeam_queue::ArrayQueue;
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedSender;

use super::Trace;

/// One worker's queue, as the exporter holds it.
#[derive(Debug)]
pub(crate) struct Queue {
    ring: Arc<ArrayQueue<Box<Trace>>>,
}

impl Queue {
    /// The oldest record, if any.
    pub(super) fn pop(&self) -> Option<Box<Trace>> {
        self.ring.pop()
    }

    /// Whether its worker has gone (the ring's only holder is this) and it holds nothing more.
    pub(super) fn is_done(&self) -> bool {
        Arc::strong_count(&self.ring) == 1 && self.ring.is_empty()
    }
}

/// Where new queues are announced, how large they are, and how the exporter is woken.
#[derive(Debug)]
pub(super) struct Hub {
    pub announce: UnboundedSender<Queue>,
    pub size: usize,
    /// Records a worker puts between two wakes of the exporter.
    pub wake_every: usize,
    pub wake: Arc<Notify>,
}

// shared: the exporter's address, set once at startup and read once per worker thread (when it
// makes its queue), never per request.
static HUB: OnceLock<Hub> = OnceLock::new();

/// This thread's queue, and the records put since it last woke the exporter.
struct Local {
    ring: Arc<ArrayQueue<Box<Trace>>>,
    since_wake: usize,
    wake_every: usize,
    wake: Arc<Notify>,
}

thread_local! {
    static QUEUE: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Installs the hub; false when one is already installed (one exporter per process).
pub(super) fn install(hub: Hub) -> bool {
    HUB.set(hub).is_ok()
}

/// Makes this thread's queue now, when export is on and it has none: a worker starting makes
/// its ring (up to 16 MiB at the largest `queue_size`) before it serves, not in its first
/// traced request.
pub(crate) fn prepare() {
    with_local(|_| {});
}

/// Puts `trace` in this thread's queue, or drops and counts it when the queue is full;
/// every `wake_every` records, wakes the exporter.
pub(super) fn push(trace: Box<Trace>) {
    with_local(|local| {
        local.put(trace);
    });
}

/// Runs `f` on this thread's queue, made first when it has none (nothing, when export is off
/// or the thread is going away).
fn with_local(f: impl FnOnce(&mut Local)) {
    let _ = QUEUE.try_with(|queue| {
        let Ok(mut queue) = queue.try_borrow_mut() else {
            return;
        };
        if queue.is_none() {
            *queue = open();
        }
        if let Some(local) = queue.as_mut() {
            f(local);
        }
    });
}

impl Local {
    /// Puts `trace` in the ring (false: it was full, and the record is dropped and counted);
    /// every `wake_every` records, wakes the exporter.
    fn put(&mut self, trace: Box<Trace>) -> bool {
        // A full ring refuses the record: it is dropped here and counted. (Once the exporter
        // has gone, at shutdown, the ring fills and the rest are counted so.)
        let queued = match self.ring.push(trace) {
            Ok(()) => true,
            Err(trace) => {
                dropped(&trace);
                false
            }
        };
        self.since_wake += 1;
        if self.since_wake >= self.wake_every {
            self.since_wake = 0;
            self.wake.notify_one();
        }
        queued
    }
}

/// This thread's new queue, announced to the exporter; `None` without one.
fn open() -> Option<Local> {
    let hub = HUB.get()?;
    let ring = Arc::new(ArrayQueue::new(hub.size.max(1)));
    // The exporter adopts it when it next wakes (it does not wait on this channel: sending
    // on it wakes nothing).
    hub.announce.send(Queue { ring: ring.clone() }).ok()?;
    Some(Local {
        ring,
        since_wake: 0,
        wake_every: hub.wake_every.max(1),
        wake: hub.wake.clone(),
    })
}

/// Counts what `trace` would have carried as lost: its spans, and its usage event.
pub(super) fn dropped(trace: &Trace) {
    let spans = super::spans::span_count(trace);
    if spans > 0 {
        emit::otel_dropped("traces", spans);
    }
    if super::spans::logged(trace) {
        emit::otel_dropped("logs", 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    fn trace() -> Box<Trace> {
        let tracing = super::super::Tracing {
            sample_ppm: 1_000_000,
            traces: true,
            logs: true,
            capture_content: false,
        };
        Trace::begin(
            tracing,
            &http::HeaderMap::new(),
            tokio::time::Instant::now(),
        )
    }

    #[test]
    fn a_thread_s_queue_is_made_when_it_prepares_and_once() {
        let (announce, _announced) = tokio::sync::mpsc::unbounded_channel();
        // The process's one hub: installed here unless another test did first.
        install(Hub {
            announce,
            size: 4,
            wake_every: 2,
            wake: Arc::new(Notify::new()),
        });
        std::thread::spawn(|| {
            let ring = || QUEUE.with_borrow(|queue| queue.as_ref().map(|l| l.ring.clone()));
            assert!(ring().is_none(), "a new thread has no queue");
            prepare();
            let made = ring().expect("made before any request");
            prepare();
            assert!(Arc::ptr_eq(&made, &ring().unwrap()), "made once");
        })
        .join()
        .unwrap();
    }

    #[tokio::test]
    async fn a_full_ring_refuses_a_record_the_exporter_takes_them_in_order_and_forgets_a_gone_worker_s()
     {
        let ring = Arc::new(ArrayQueue::new(2));
        let wake = Arc::new(Notify::new());
        let mut local = Local {
            ring: ring.clone(),
            since_wake: 0,
            wake_every: 2,
            wake: wake.clone(),
        };
        let exporter = Queue { ring };
        let (first, second) = (trace(), trace());
        let ids = [first.span_id, second.span_id];
        assert!(local.put(first));
        assert!(local.put(second));
        assert!(!local.put(trace()), "the third does not fit a ring of two");
        // Two records put: the exporter was woken (the permit waits for it).
        assert!(
            tokio::time::timeout(Duration::from_secs(5), wake.notified())
                .await
                .is_ok()
        );
        let taken: Vec<_> = std::iter::from_fn(|| exporter.pop())
            .map(|t| t.span_id)
            .collect();
        assert_eq!(taken, ids);
        assert!(!exporter.is_done(), "its worker still holds it");
        assert!(local.put(trace()), "room again once taken");
        drop(local);
        assert!(
            !exporter.is_done(),
            "a gone worker's queue is drained first"
        );
        assert!(exporter.pop().is_some());
        assert!(exporter.is_done());
    }
}
