//! The adapter between a request's record and its trace: the record's [`Facts`] when the
//! request ends (moved out of it by `Record::take_facts` as it drops, the one place that reads
//! its fields for a trace), kept in the trace, which goes whole to the worker's queue.

use std::sync::Arc;
use std::time::Duration;

use aisix_config::Usd;
use aisix_obs::access_log::Attempt;
use aisix_obs::metrics::labels::Outcome;
use http::{HeaderValue, Method, Uri};
use tokio::time::Instant;

use super::{Trace, queue};

use crate::endpoint::Endpoint;

/// What a trace reads of a request's record when it ends: the record's own values, moved (it
/// is dropping), never copied.
#[derive(Debug)]
pub(crate) struct Facts {
    pub request_id: HeaderValue,
    pub endpoint: Endpoint,
    pub method: Method,
    pub uri: Uri,
    pub key_name: Option<Arc<str>>,
    /// The direct model that answered (or was tried last).
    pub model: Option<Arc<str>>,
    pub group: Option<Arc<str>>,
    /// Its provider key's configured name.
    pub provider: Option<Arc<str>>,
    pub stream: bool,
    pub status: u16,
    pub ttft: Option<Duration>,
    pub usage: Option<(u64, u64)>,
    pub attempts: Vec<Attempt>,
    pub outcome: Outcome,
    pub error: Option<&'static str>,
}

/// How a traced request ended.
#[derive(Debug)]
pub(super) struct Ended {
    pub facts: Facts,
    pub at: Instant,
    pub spend: Option<Usd>,
}

/// The request `facts` tell of ended at `ended`, spending `spend`: its trace goes to this
/// worker's queue (unless neither its spans nor its usage event are exported).
pub(crate) fn finish(mut trace: Box<Trace>, facts: Facts, ended: Instant, spend: Option<Usd>) {
    if !trace.sampled && !trace.tracing.logs {
        return;
    }
    trace.ended = Some(Ended {
        facts,
        at: ended,
        spend,
    });
    queue::push(trace);
}
