//! The bounded queues between the workers and the exporter: one per worker thread, created on
//! the thread's first traced request and announced to the exporter then. A request's end only
//! tries to put its record in its own thread's queue: no lock is shared between workers, and a
//! full queue drops the record and counts it (`aisix_otel_dropped_total{signal}`), never waits.
//! The exporter takes from the queues on its own schedule, so a worker never wakes it.

use std::cell::RefCell;
use std::sync::OnceLock;

use aisix_obs::metrics::emit;
use tokio::sync::mpsc::{self, Receiver, Sender, UnboundedSender, error::TrySendError};

use super::record::Finished;

pub(crate) type Queue = Receiver<Box<Finished>>;

/// Where new queues are announced, and how large they are.
#[derive(Debug)]
pub(super) struct Hub {
    pub announce: UnboundedSender<Queue>,
    pub size: usize,
}

// shared: the exporter's address, set once at startup and read once per worker thread (when it
// makes its queue), never per request.
static HUB: OnceLock<Hub> = OnceLock::new();

thread_local! {
    static QUEUE: RefCell<Option<Sender<Box<Finished>>>> = const { RefCell::new(None) };
}

/// Installs the hub; false when one is already installed (one exporter per process).
pub(super) fn install(hub: Hub) -> bool {
    HUB.set(hub).is_ok()
}

/// Puts `finished` in this thread's queue, or drops and counts it when the queue is full.
pub(super) fn push(finished: Box<Finished>) {
    let _ = QUEUE.try_with(|queue| {
        let Ok(mut queue) = queue.try_borrow_mut() else {
            return;
        };
        if queue.is_none() {
            *queue = open();
        }
        let Some(sender) = queue.as_ref() else {
            return;
        };
        if let Err(TrySendError::Full(finished)) = sender.try_send(finished) {
            dropped(&finished, 1);
        }
    });
}

/// This thread's new queue, announced to the exporter; `None` without one.
fn open() -> Option<Sender<Box<Finished>>> {
    let hub = HUB.get()?;
    let (sender, receiver) = mpsc::channel(hub.size);
    hub.announce.send(receiver).ok()?;
    Some(sender)
}

/// Counts `n` records like `finished` as lost, for each signal they would have carried.
pub(super) fn dropped(finished: &Finished, n: u64) {
    if finished.sampled {
        emit::otel_dropped("traces", n);
    }
    if finished.logs {
        emit::otel_dropped("logs", n);
    }
}
