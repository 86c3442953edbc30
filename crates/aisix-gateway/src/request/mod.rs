//! The request before it is routed: who sent it (auth), its body read within its deadline and
//! the worker's memory budget, and what it asks for (inspect, spending policy). Knows nothing
//! of targets, providers or upstream connections.

pub(crate) mod auth;
pub(crate) mod deadline;
pub(crate) mod inbound;
pub(crate) mod spending;
