//! What the serving core asks of the application: a service per worker, built on that worker.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;

use aisix_obs::metrics::labels::Worker;

use crate::plan::Mode;
use crate::shutdown::Readiness;

/// Facts a worker's service may need about the worker it runs on.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    /// 0-based worker index.
    pub id: usize,
    /// `tpc-3` in thread-per-core mode, `shared` in the shared runtime.
    pub name: String,
    pub mode: Mode,
    /// Worker count of the whole process.
    pub workers: usize,
    /// False once the process is draining; `/readyz` reports it.
    pub readiness: Readiness,
}

impl WorkerContext {
    /// This worker as the `worker` metric label names it.
    pub fn worker(&self) -> Worker {
        self.mode.worker(self.id)
    }
}

/// Builds each worker's service. In thread-per-core mode `make_service` is called inside the
/// worker's thread, so per-worker state (upstream pool, metric handles) is created there; in the
/// shared runtime it is called once.
pub trait ServiceFactory: Send + Sync + 'static {
    type Body: http_body::Body<Data = Bytes, Error = Self::BodyError> + Send + 'static;
    type BodyError: Into<Box<dyn std::error::Error + Send + Sync>>;
    type Service: hyper::service::Service<
            Request<Incoming>,
            Response = Response<Self::Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static;

    fn make_service(&self, worker: &WorkerContext) -> Self::Service;

    /// Called on every serving thread as it starts, before it serves anything: each `tpc-N`
    /// thread, and each thread of the shared runtime. For thread-local setup (metric labels).
    fn thread_started(&self, worker: &WorkerContext) {
        let _ = worker;
    }
}
