//! Finished requests as OTLP export requests: their spans (`ExportTraceServiceRequest`) and
//! their usage events (`ExportLogsServiceRequest`), with the GenAI semantic conventions'
//! attribute names. Runs on the exporter only.

use aisix_obs::access_log::Attempt;
use aisix_obs::metrics::labels::Outcome;

use super::encode::{Message, Value, any_value, attribute};
use super::record::{Ended, Facts};
use super::{AttemptStart, Trace, Wall, duration_ns, port_of, provider_name};

use crate::endpoint::Endpoint;

/// The resource every record of this process belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub attributes: Vec<(String, String)>,
}

const SCOPE: &str = "aisix";
const SPAN_KIND_SERVER: u64 = 2;
const SPAN_KIND_CLIENT: u64 = 3;
const STATUS_ERROR: u64 = 2;
const SEVERITY_INFO: u64 = 9;
/// `SpanFlags`: the sampled bit, and whether the parent's remoteness is known and true.
const FLAG_SAMPLED: u32 = 0x01;
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
const FLAG_IS_REMOTE: u32 = 0x200;

fn resource(out: &mut Message, field: u64, resource: &Resource) {
    out.message(field, |r| {
        for (key, value) in &resource.attributes {
            attribute(r, 1, key, &Value::Str(value));
        }
    });
}

fn scope(out: &mut Message) {
    out.message(1, |s| {
        s.string(1, SCOPE);
        s.string(2, env!("CARGO_PKG_VERSION"));
    });
}

/// An `ExportTraceServiceRequest` holding the spans of `batch`'s sampled requests, written
/// into `out`.
pub(crate) fn traces(out: &mut Message, batch: &[Box<Trace>], res: &Resource, wall: &Wall) {
    out.message(1, |rs| {
        resource(rs, 1, res);
        rs.message(2, |ss| {
            scope(ss);
            for (t, ended) in batch.iter().filter(|t| t.sampled).filter_map(|t| ended(t)) {
                let end_ns = wall.ns(ended.at);
                let last = t.attempts.len().saturating_sub(1);
                // The last attempt's address, read once for the server span and its own.
                let last_server = t.attempts.last().and_then(|a| server(t, a));
                let times = (wall.ns(t.received), end_ns);
                ss.message(2, |span| server_span(span, t, ended, last_server, times));
                for (i, start) in t.attempts.iter().enumerate() {
                    let done = ended.facts.attempts.get(i);
                    let start_ns = wall.ns(start.sent_at);
                    // The call that answered a stream lasts as long as the stream; any other,
                    // until its answer was in hand (or, one the client left during, until the
                    // request ended).
                    let end = match done {
                        Some(d) if !(ended.facts.stream && i == last && d.error.is_none()) => {
                            start_ns.saturating_add(duration_ns(d.duration))
                        }
                        _ => end_ns,
                    };
                    let times = (start_ns, end.max(start_ns));
                    let address = if i == last {
                        last_server
                    } else {
                        server(t, start)
                    };
                    ss.message(2, |span| {
                        attempt_span(span, t, i, (start, done, address), times)
                    });
                }
            }
        });
    });
}

fn ended(t: &Trace) -> Option<(&Trace, &Ended)> {
    Some((t, t.ended.as_ref()?))
}

/// How many spans `traces` writes for `trace`.
pub(crate) fn span_count(trace: &Trace) -> u64 {
    if trace.sampled && trace.ended.is_some() {
        1 + trace.attempts.len() as u64
    } else {
        0
    }
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

/// The name the client sent: a group's, or the direct model's.
fn requested_model<'a>(t: &'a Trace, facts: &'a Facts) -> Option<&'a str> {
    t.requested_model
        .as_deref()
        .or(facts.group.as_deref())
        .or(facts.model.as_deref())
}

/// A span's name: `<operation> <model>`, or the operation alone.
fn name(span: &mut Message, operation: &str, model: Option<&str>) {
    match model {
        Some(model) => span.strings(5, &[operation, " ", model]),
        None => span.string(5, operation),
    }
}

/// The host and port an attempt was sent to.
fn server<'a>(t: &Trace, start: &'a AttemptStart) -> Option<(&'a str, u16)> {
    let uri = start.route.uris.get(t.endpoint)?;
    Some((uri.host()?, port_of(uri)))
}

fn server_span(
    span: &mut Message,
    t: &Trace,
    ended: &Ended,
    last_server: Option<(&str, u16)>,
    (start_ns, end_ns): (u64, u64),
) {
    let f = &ended.facts;
    let op = operation(f.endpoint);
    let requested = requested_model(t, f);
    span.bytes(1, &t.trace_id);
    span.bytes(2, &t.span_id);
    if let Some(state) = t.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    let mut flags = FLAG_SAMPLED | FLAG_HAS_IS_REMOTE;
    if let Some(parent) = &t.parent {
        span.bytes(4, parent);
        flags |= FLAG_IS_REMOTE;
    }
    name(span, op, requested);
    span.uint(6, SPAN_KIND_SERVER);
    span.fixed64(7, start_ns);
    span.fixed64(8, end_ns);
    let mut attr = |key: &str, value: Value<'_>| attribute(span, 9, key, &value);
    attr("gen_ai.operation.name", Value::Str(op));
    if let Some(model) = requested {
        attr("gen_ai.request.model", Value::Str(model));
    }
    if let Some(last) = t.attempts.last() {
        attr(
            "gen_ai.provider.name",
            Value::Str(provider_name(last.route.provider.kind)),
        );
        if let Some((host, port)) = last_server {
            attr("server.address", Value::Str(host));
            attr("server.port", Value::Int(i64::from(port)));
        }
    }
    if let Some(model) = &t.response_model {
        attr("gen_ai.response.model", Value::Str(model));
    }
    if let Some(max) = t.max_tokens {
        attr("gen_ai.request.max_tokens", Value::Int(max as i64));
    }
    if let Some((input, output)) = f.usage {
        attr("gen_ai.usage.input_tokens", Value::Int(input as i64));
        attr("gen_ai.usage.output_tokens", Value::Int(output as i64));
    }
    attr("http.request.method", Value::Str(f.method.as_str()));
    attr("url.path", Value::Str(f.uri.path()));
    attr("http.response.status_code", Value::Int(i64::from(f.status)));
    if let Ok(id) = f.request_id.to_str() {
        attr("aisix.request_id", Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr("aisix.api_key.name", Value::Str(key));
    }
    if let Some(model) = &f.model {
        attr("aisix.model", Value::Str(model));
    }
    if let Some(group) = &f.group {
        attr("aisix.group", Value::Str(group));
    }
    if let Some(provider) = &f.provider {
        attr("aisix.provider_key", Value::Str(provider));
    }
    attr("aisix.stream", Value::Bool(f.stream));
    if let Some(ttft) = f.ttft {
        attr(
            "aisix.time_to_first_token",
            Value::Double(ttft.as_secs_f64()),
        );
    }
    attr("aisix.ending", Value::Str(f.outcome.as_str()));
    if let Some(cost) = ended.spend {
        attr("aisix.cost_usd", Value::Double(cost.nanos() as f64 / 1e9));
    }
    if let Some(error) = f.error {
        attr("error.type", Value::Str(error));
    }
    if let Some(prompt) = t.prompt.as_ref().and_then(|p| std::str::from_utf8(p).ok()) {
        attr("gen_ai.input.messages", Value::Str(prompt));
    }
    if f.status >= 500 {
        span.message(15, |status| {
            status.string(2, f.error.unwrap_or("error"));
            status.uint(3, STATUS_ERROR);
        });
    }
    span.fixed32(16, flags);
}

/// An attempt's span: how it started, how it ended (`None`: the client left during it), and
/// the address it was sent to.
type AttemptFacts<'a> = (
    &'a AttemptStart,
    Option<&'a Attempt>,
    Option<(&'a str, u16)>,
);

fn attempt_span(
    span: &mut Message,
    t: &Trace,
    index: usize,
    (start, done, address): AttemptFacts<'_>,
    (start_ns, end_ns): (u64, u64),
) {
    let op = t.ended.as_ref().map_or("", |e| operation(e.facts.endpoint));
    let upstream_model = start.route.upstream_model.as_str();
    // An attempt the request never saw end: the client left during it.
    let error = done.map_or(Some("client_closed"), |d| d.error);
    span.bytes(1, &t.trace_id);
    span.bytes(2, &start.span_id);
    if let Some(state) = t.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    span.bytes(4, &t.span_id);
    name(span, op, Some(upstream_model));
    span.uint(6, SPAN_KIND_CLIENT);
    span.fixed64(7, start_ns);
    span.fixed64(8, end_ns);
    let mut attr = |key: &str, value: Value<'_>| attribute(span, 9, key, &value);
    attr("gen_ai.operation.name", Value::Str(op));
    attr(
        "gen_ai.provider.name",
        Value::Str(provider_name(start.route.provider.kind)),
    );
    attr("gen_ai.request.model", Value::Str(upstream_model));
    if let Some((host, port)) = address {
        attr("server.address", Value::Str(host));
        attr("server.port", Value::Int(i64::from(port)));
    }
    if let Some(status) = done.and_then(|d| d.status) {
        attr("http.response.status_code", Value::Int(i64::from(status)));
    }
    attr(
        "aisix.model",
        Value::Str(done.map_or("", |d| d.target.as_ref())),
    );
    attr(
        "aisix.provider_key",
        Value::Str(done.map_or("", |d| d.provider.as_ref())),
    );
    attr("aisix.attempt", Value::Int(index as i64));
    attr(
        "aisix.ending",
        Value::Str(done.map_or(Outcome::ClientClosed.as_str(), |d| d.result.as_str())),
    );
    if let Some(error) = error {
        attr("error.type", Value::Str(error));
        span.message(15, |status| {
            status.string(2, error);
            status.uint(3, STATUS_ERROR);
        });
    }
    span.fixed32(16, FLAG_SAMPLED | FLAG_HAS_IS_REMOTE);
}

/// An `ExportLogsServiceRequest` holding one usage event per request of `batch`, written into
/// `out`.
pub(crate) fn logs(out: &mut Message, batch: &[Box<Trace>], res: &Resource, wall: &Wall) {
    out.message(1, |rl| {
        resource(rl, 1, res);
        rl.message(2, |sl| {
            scope(sl);
            for (t, ended) in batch
                .iter()
                .filter(|t| t.tracing.logs)
                .filter_map(|t| ended(t))
            {
                sl.message(2, |log| usage_event(log, t, ended, wall.ns(ended.at)));
            }
        });
    });
}

fn usage_event(log: &mut Message, t: &Trace, ended: &Ended, end_ns: u64) {
    let f = &ended.facts;
    log.fixed64(1, end_ns);
    log.uint(2, SEVERITY_INFO);
    log.string(3, "INFO");
    log.message(5, |body| any_value(body, &Value::Str("usage")));
    let mut attr = |key: &str, value: Value<'_>| attribute(log, 6, key, &value);
    if let Ok(id) = f.request_id.to_str() {
        attr("aisix.request_id", Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr("aisix.api_key.name", Value::Str(key));
    }
    attr("gen_ai.operation.name", Value::Str(operation(f.endpoint)));
    if let Some(model) = requested_model(t, f) {
        attr("gen_ai.request.model", Value::Str(model));
    }
    if let Some(model) = &f.model {
        attr("aisix.model", Value::Str(model));
    }
    if let Some(last) = t.attempts.last() {
        attr(
            "gen_ai.provider.name",
            Value::Str(provider_name(last.route.provider.kind)),
        );
    }
    if let Some(model) = &t.response_model {
        attr("gen_ai.response.model", Value::Str(model));
    }
    if let Some(provider) = &f.provider {
        attr("aisix.provider_key", Value::Str(provider));
    }
    if let Some((input, output)) = f.usage {
        attr("gen_ai.usage.input_tokens", Value::Int(input as i64));
        attr("gen_ai.usage.output_tokens", Value::Int(output as i64));
    }
    if let Some(cost) = ended.spend {
        attr("aisix.cost_usd", Value::Double(cost.nanos() as f64 / 1e9));
    }
    attr("http.response.status_code", Value::Int(i64::from(f.status)));
    attr("aisix.stream", Value::Bool(f.stream));
    attr("aisix.ending", Value::Str(f.outcome.as_str()));
    if let Some(error) = f.error {
        attr("error.type", Value::Str(error));
    }
    log.fixed32(8, if t.sampled { FLAG_SAMPLED } else { 0 });
    log.bytes(9, &t.trace_id);
    log.bytes(10, &t.span_id);
    log.fixed64(11, end_ns);
    log.string(12, "aisix.usage");
}

/// Whether `logs` writes a usage event for `trace`.
pub(crate) fn logged(trace: &Trace) -> bool {
    trace.tracing.logs && trace.ended.is_some()
}
