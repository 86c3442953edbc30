//! The adapter between a request's record and its trace: the record's [`Facts`] when the
//! request ends (lent by `Record::facts`, the one place that reads its fields for a trace),
//! turned into a [`Finished`] request for the worker's queue.

use std::sync::Arc;
use std::time::Duration;

use aisix_config::Usd;
use aisix_obs::metrics::labels::Outcome;
use bytes::Bytes;
use http::HeaderValue;
use tokio::time::Instant;

use super::{SpanId, Trace, TraceId, duration_ns, queue};
use aisix_obs::access_log::Attempt;

use crate::endpoint::Endpoint;

/// A request that ended, as its spans and usage event tell it. Owned: it crosses to the
/// exporter's thread. Its names are the request record's shared ones (no copy).
#[derive(Debug)]
pub(crate) struct Finished {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub trace_state: Option<HeaderValue>,
    /// Its spans are exported (its usage event always is, when logs are).
    pub sampled: bool,
    pub logs: bool,
    pub start_ns: u64,
    pub end_ns: u64,
    pub operation: &'static str,
    pub method: http::Method,
    pub path: String,
    pub request_id: HeaderValue,
    pub key_name: Option<Arc<str>>,
    /// The name the client sent (a group's or a direct model's).
    pub requested_model: Option<String>,
    /// The direct model that answered (or was tried last).
    pub model: Option<Arc<str>>,
    /// The model the answer named (`gen_ai.response.model`), when it named one.
    pub response_model: Option<String>,
    pub group: Option<Arc<str>>,
    /// Its provider key's configured name.
    pub provider_key: Option<Arc<str>>,
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub status: u16,
    pub ending: &'static str,
    pub error: Option<&'static str>,
    pub ttft: Option<Duration>,
    pub usage: Option<(u64, u64)>,
    pub cost: Option<Usd>,
    pub prompt: Option<Bytes>,
    pub attempts: Vec<AttemptSpan>,
}

#[derive(Debug)]
pub(crate) struct AttemptSpan {
    pub span_id: SpanId,
    pub start_ns: u64,
    pub end_ns: u64,
    pub target: Option<Arc<str>>,
    pub provider_key: Option<Arc<str>>,
    pub provider_kind: &'static str,
    pub upstream_model: String,
    pub server: Option<(String, u16)>,
    pub status: Option<u16>,
    pub error: Option<&'static str>,
    pub result: &'static str,
}

/// What a trace reads of a request's record when it ends.
#[derive(Debug)]
pub(crate) struct Facts<'a> {
    pub request_id: &'a HeaderValue,
    pub endpoint: Endpoint,
    pub method: &'a http::Method,
    pub path: &'a str,
    pub key_name: Option<&'a Arc<str>>,
    pub model: Option<&'a Arc<str>>,
    pub group: Option<&'a Arc<str>>,
    pub provider: Option<&'a Arc<str>>,
    pub stream: bool,
    pub status: u16,
    pub ttft: Option<Duration>,
    pub usage: Option<(u64, u64)>,
    pub attempts: &'a [Attempt],
    pub outcome: Outcome,
    pub error: Option<&'static str>,
}

/// The request `record` tells of ended at `ended`, spending `spend`: its trace goes to this
/// worker's queue.
pub(crate) fn finish(trace: Box<Trace>, record: &Facts<'_>, ended: Instant, spend: Option<Usd>) {
    if !trace.sampled && !trace.tracing.logs {
        return;
    }
    let end_ns = trace.ns_at(ended);
    let mut attempts = Vec::with_capacity(trace.attempts.len());
    let last = trace.attempts.len().saturating_sub(1);
    for (i, start) in trace.attempts.iter().enumerate() {
        let done = record.attempts.get(i);
        let start_ns = trace.ns_at(start.sent_at);
        // The call that answered a stream lasts as long as the stream; any other, until its
        // answer was in hand (or, one the client left during, until the request ended).
        let end = match done {
            Some(d) if !(record.stream && i == last && d.error.is_none()) => {
                start_ns.saturating_add(duration_ns(d.duration))
            }
            _ => end_ns,
        };
        attempts.push(AttemptSpan {
            span_id: start.span_id,
            start_ns,
            end_ns: end.max(start_ns),
            target: done.map(|d| d.target.clone()),
            provider_key: done.map(|d| d.provider.clone()),
            provider_kind: start.provider_kind,
            upstream_model: start.upstream_model.clone(),
            server: start.server.clone(),
            status: done.and_then(|d| d.status),
            error: match done {
                Some(d) => d.error,
                None => Some("client_closed"),
            },
            result: done.map_or(Outcome::ClientClosed.as_str(), |d| d.result.as_str()),
        });
    }
    let finished = Box::new(Finished {
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent: trace.parent,
        trace_state: trace.trace_state.clone(),
        sampled: trace.sampled,
        logs: trace.tracing.logs,
        start_ns: trace.start_ns,
        end_ns,
        operation: operation(record.endpoint),
        method: record.method.clone(),
        path: record.path.to_owned(),
        request_id: record.request_id.clone(),
        key_name: record.key_name.cloned(),
        requested_model: trace
            .requested_model
            .clone()
            .or_else(|| record.group.or(record.model).map(|name| name.to_string())),
        model: record.model.cloned(),
        response_model: trace.response_model.clone(),
        group: record.group.cloned(),
        provider_key: record.provider.cloned(),
        max_tokens: trace.max_tokens,
        stream: record.stream,
        status: record.status,
        ending: record.outcome.as_str(),
        error: record.error,
        ttft: record.ttft,
        usage: record.usage,
        cost: spend,
        prompt: trace.prompt.clone(),
        attempts,
    });
    queue::push(finished);
}

/// `gen_ai.operation.name` of an endpoint.
fn operation(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Embeddings => "embeddings",
        Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::Responses => "chat",
        other => other.as_str(),
    }
}
