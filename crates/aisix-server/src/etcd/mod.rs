//! etcd as the resources source: one connection per process on the control runtime, a full
//! load, then a watch that resumes from its revision. Every change is checked as a whole
//! snapshot by the resources loader before any worker sees it.

pub(crate) mod connect;
pub(crate) mod snapshot;
pub(crate) mod transfer;
pub(crate) mod watch;
