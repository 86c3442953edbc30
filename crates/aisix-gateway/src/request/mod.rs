//! The request before it is routed: who sent it (auth), the deadline of each phase (deadline),
//! what it asks for (inbound: the inspect phase) and whether its key's spending policy lets it
//! (spending). Knows nothing of targets, providers or upstream connections.

pub(crate) mod auth;
pub(crate) mod deadline;
pub(crate) mod inbound;
pub(crate) mod spending;
