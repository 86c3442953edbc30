//! Upstream connections: the per-worker pool (idle reuse, HTTP/1.1 and HTTP/2, the reaper) and
//! the egress proxy it dials through. Knows hosts and bytes, never models or dialects.

pub(crate) mod egress;
pub(crate) mod pool;
