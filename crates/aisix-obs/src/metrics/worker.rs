//! Which worker the current thread is, for the `worker` label. Set once per thread by
//! [`Metrics::register_worker`](super::Metrics::register_worker).

use std::cell::Cell;

use super::labels::{UNREGISTERED_WORKER, Worker, WorkerLabel};

thread_local! {
    // The label is formatted once here, not on every emit.
    static CURRENT: Cell<Option<WorkerLabel>> = const { Cell::new(None) };
}

/// Names the calling thread's worker for the `worker` label and the access log. Also done by
/// [`Metrics::register_worker`](super::Metrics::register_worker); call this when metrics are off.
pub fn set_current(worker: Worker) {
    let _ = CURRENT.try_with(|current| current.set(Some(worker.label())));
}

/// Runs `f` with the calling thread's `worker` label value (`"unregistered"` if it never
/// registered).
pub(crate) fn with_label<R>(f: impl FnOnce(&str) -> R) -> R {
    match CURRENT.try_with(Cell::get).ok().flatten() {
        Some(label) => f(label.as_str()),
        None => f(UNREGISTERED_WORKER),
    }
}

/// Runs `f` with the calling thread's `worker` label value, or `None` if it never registered;
/// the label is the one formatted at registration.
pub(crate) fn with_registered_label<R>(f: impl FnOnce(Option<&str>) -> R) -> R {
    match CURRENT.try_with(Cell::get).ok().flatten() {
        Some(label) => f(Some(label.as_str())),
        None => f(None),
    }
}
