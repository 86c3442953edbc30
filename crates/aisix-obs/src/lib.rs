//! Observability for aisix: process logging (tracing), and the metric catalog with its
//! per-worker handle cache.

pub mod log;
