//! Observability for aisix: process logging (tracing), request ids, and the metric catalog with
//! its per-worker handle cache.

pub mod log;
pub mod metrics;
pub mod request_id;
