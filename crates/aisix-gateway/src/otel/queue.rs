//! The bounded queues between the workers and the exporter: one per worker thread, created on
//! the thread's first traced request and announced to the exporter then. A request's end only
//! tries to put its record in its own thread's queue: no lock is shared between workers, and a
//! full queue drops the record and counts it (`aisix_otel_dropped_total{signal}`), never waits.
//! Once per batch's worth of records put (a count local to the thread, not a look at the
//! queue), the worker wakes the exporter so it drains the queues between its timed collections.
//!
//! A queue is tokio's unbounded list, bounded by a count the two sides share: the worker adds
//! one for each record it puts, the exporter takes one off for each it takes. A bounded channel
//! does the same with a semaphore, whose release takes a lock for every record taken.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use aisix_obs::metrics::emit;
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender, error::TryRecvError};

use super::Trace;

/// One worker's queue, as the exporter holds it.
#[derive(Debug)]
pub(crate) struct Queue {
    receiver: UnboundedReceiver<Box<Trace>>,
    held: Arc<AtomicUsize>,
}

impl Queue {
    /// The oldest record, if any; `Disconnected` once the worker has gone and its queue is
    /// empty.
    pub(super) fn try_recv(&mut self) -> Result<Box<Trace>, TryRecvError> {
        let trace = self.receiver.try_recv()?;
        self.held.fetch_sub(1, Ordering::Relaxed);
        Ok(trace)
    }

    /// Whether its worker has gone and it holds nothing more.
    pub(super) fn is_done(&self) -> bool {
        self.receiver.is_closed() && self.receiver.is_empty()
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
    sender: UnboundedSender<Box<Trace>>,
    /// What the queue holds, and the most it may.
    held: Arc<AtomicUsize>,
    size: usize,
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

/// Puts `trace` in this thread's queue, or drops and counts it when the queue is full;
/// every `wake_every` records, wakes the exporter.
pub(super) fn push(trace: Box<Trace>) {
    let _ = QUEUE.try_with(|queue| {
        let Ok(mut queue) = queue.try_borrow_mut() else {
            return;
        };
        if queue.is_none() {
            *queue = open();
        }
        let Some(local) = queue.as_mut() else {
            return;
        };
        // Only this thread adds to the count, so it cannot pass `size` between the look and
        // the add.
        if local.held.load(Ordering::Relaxed) >= local.size {
            dropped(&trace, 1);
        } else {
            local.held.fetch_add(1, Ordering::Relaxed);
            // An exporter that has gone takes nothing more: what it would have is let go.
            let _ = local.sender.send(trace);
        }
        local.since_wake += 1;
        if local.since_wake >= local.wake_every {
            local.since_wake = 0;
            local.wake.notify_one();
        }
    });
}

/// This thread's new queue, announced to the exporter; `None` without one.
fn open() -> Option<Local> {
    let hub = HUB.get()?;
    let (sender, receiver) = mpsc::unbounded_channel();
    let held = Arc::new(AtomicUsize::new(0));
    // The exporter adopts it when it next wakes (it does not wait on this channel: sending
    // on it wakes nothing).
    hub.announce
        .send(Queue {
            receiver,
            held: held.clone(),
        })
        .ok()?;
    Some(Local {
        sender,
        held,
        size: hub.size.max(1),
        since_wake: 0,
        wake_every: hub.wake_every.max(1),
        wake: hub.wake.clone(),
    })
}

/// Counts `n` records like `trace` as lost, for each signal they would have carried.
pub(super) fn dropped(trace: &Trace, n: u64) {
    if trace.sampled {
        emit::otel_dropped("traces", n);
    }
    if trace.tracing.logs {
        emit::otel_dropped("logs", n);
    }
}
