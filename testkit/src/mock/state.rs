//! What the test's handle and the mock's workers share: the script, the record of requests, and
//! the counters. Per-request counts live on each worker's own cache line; what happens once per
//! connection or only on faults is counted once for the whole mock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::dialect::Dialect;
use super::fast;
use super::record::RecordedRequest;
use super::reply::Reply;

// shared: scripted and read by the test's thread, used and counted by every worker.
pub(crate) struct State {
    script: Mutex<Script>,
    /// Whether anything is queued or standing: unscripted requests skip the lock.
    scripted: AtomicBool,
    /// `None` on the fast path, which records nothing.
    requests: Option<Mutex<Vec<RecordedRequest>>>,
    pub(crate) fast: Option<fast::Answers>,
    /// What unscripted requests get, and how a scripted stream ends.
    pub(crate) dialect: Dialect,
    workers: Box<[WorkerCounters]>,
    pub(crate) connections_accepted: AtomicUsize,
    pub(crate) connections_closed: AtomicUsize,
    pub(crate) streams_cancelled: AtomicUsize,
    pub(crate) requests_abandoned: AtomicUsize,
    /// The Responses answers kept (`store` not false), as the API keeps them.
    pub(crate) kept: super::responses::Kept,
}

/// One worker's per-request counts, alone on their cache line so workers never share one.
#[derive(Default)]
#[repr(align(128))]
struct WorkerCounters {
    requests: AtomicUsize,
}

#[derive(Default)]
pub(crate) struct Script {
    pub(crate) queue: VecDeque<Reply>,
    pub(crate) standing: Option<Reply>,
    /// Replies for one path each, first in first out, before the common queue.
    pub(crate) by_path: HashMap<String, VecDeque<Reply>>,
    /// The reply of the request with this ordinal (1 for the first), before everything else.
    pub(crate) by_ordinal: BTreeMap<usize, Reply>,
}

impl Script {
    fn is_empty(&self) -> bool {
        self.queue.is_empty()
            && self.standing.is_none()
            && self.by_path.values().all(VecDeque::is_empty)
            && self.by_ordinal.is_empty()
    }
}

impl State {
    pub(crate) fn new(fast: Option<fast::Answers>, workers: usize, dialect: Dialect) -> State {
        State {
            script: Mutex::default(),
            scripted: AtomicBool::new(false),
            requests: fast.is_none().then(Mutex::default),
            fast,
            dialect,
            workers: (0..workers.max(1))
                .map(|_| WorkerCounters::default())
                .collect(),
            connections_accepted: AtomicUsize::new(0),
            connections_closed: AtomicUsize::new(0),
            streams_cancelled: AtomicUsize::new(0),
            requests_abandoned: AtomicUsize::new(0),
            kept: super::responses::Kept::default(),
        }
    }

    /// Changes the script; keeps `scripted` true exactly while something is scripted.
    pub(crate) fn script<R>(&self, f: impl FnOnce(&mut Script) -> R) -> R {
        let mut script = lock(&self.script);
        let result = f(&mut script);
        self.scripted.store(!script.is_empty(), Relaxed);
        result
    }

    /// The scripted reply for request number `seq` to `path`, if anything is scripted for it:
    /// by its ordinal, by its path, from the queue, or the standing reply, in that order.
    pub(crate) fn next_reply(&self, seq: usize, path: &str) -> Option<Reply> {
        if !self.scripted.load(Relaxed) {
            return None;
        }
        self.script(|script| {
            script
                .by_ordinal
                .remove(&seq)
                .or_else(|| script.by_path.get_mut(path)?.pop_front())
                .or_else(|| script.queue.pop_front())
                .or_else(|| script.standing.clone())
        })
    }

    /// Whether a scripted reply is waiting (then the fast path steps aside).
    pub(crate) fn is_scripted(&self) -> bool {
        self.scripted.load(Relaxed)
    }

    /// Counts a request that arrived in full on `worker` and records it when recording;
    /// returns its ordinal, starting at 1 (among all requests when recording, else among the
    /// worker's).
    pub(crate) fn arrived(&self, worker: usize, request: Option<RecordedRequest>) -> usize {
        let counted = || {
            self.workers
                .get(worker)
                .map_or(0, |c| c.requests.fetch_add(1, Relaxed) + 1)
        };
        match (&self.requests, request) {
            (Some(requests), Some(request)) => {
                let mut requests = lock(requests);
                requests.push(request);
                // Counted after the push, under the lock: whoever sees the count finds the
                // request recorded.
                counted();
                requests.len()
            }
            _ => counted(),
        }
    }

    /// Runs `f` on the requests recorded so far (none on the fast path).
    pub(crate) fn recorded<R>(&self, f: impl FnOnce(&[RecordedRequest]) -> R) -> R {
        match &self.requests {
            Some(requests) => f(&lock(requests)),
            None => f(&[]),
        }
    }

    /// Whether requests are recorded (not on the fast path).
    pub(crate) fn records(&self) -> bool {
        self.requests.is_some()
    }

    /// Requests counted over every worker.
    pub(crate) fn request_count(&self) -> usize {
        self.workers.iter().map(|c| c.requests.load(Relaxed)).sum()
    }
}

/// A panic on another thread while holding the lock leaves plain data behind; keep using it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
