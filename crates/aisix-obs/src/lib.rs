//! Observability for aisix: process logging (tracing), the access log, request ids, and the
//! metric catalog with its per-worker handle cache.

pub mod access_log;
pub mod alloc_count;
mod civil;
pub mod log;
pub mod metrics;
pub mod request_id;
