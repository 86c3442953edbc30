//! Upstream connections: the per-worker pool (idle reuse, HTTP/1.1 and HTTP/2, connecting, the
//! reaper), TLS toward upstreams, the wire form of a request on its connection, and the egress
//! proxy it dials through, AWS's SigV4 signature of a request. Knows hosts and bytes, never models or dialects.

pub(crate) mod egress;
pub(crate) mod head;
pub(crate) mod pool;
pub(crate) mod sigv4;
pub(crate) mod tls;
mod wire_form;

pub(crate) use wire_form::HostKey;
