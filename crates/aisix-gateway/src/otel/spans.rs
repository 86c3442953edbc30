//! Finished requests as OTLP export requests: their spans (`ExportTraceServiceRequest`) and
//! their usage events (`ExportLogsServiceRequest`), with the GenAI semantic conventions'
//! attribute names. Runs on the exporter only.

use aisix_obs::access_log::Attempt;
use aisix_obs::metrics::labels::Outcome;

use super::encode::{Key, Message, Value, any_value, attribute, keys, named_attribute};
use super::record::{Ended, Facts};
use std::collections::HashMap;
use std::sync::Arc;

use super::{Trace, Wall, duration_ns, port_of, provider_name};

use crate::endpoint::Endpoint;
use crate::snapshot::DirectRoute;

/// The resource every record of this process belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub attributes: Vec<(String, String)>,
}

/// The attribute keys: the GenAI semantic conventions', HTTP's, and the gateway's own.
mod key {
    super::keys! {
        OPERATION = "gen_ai.operation.name",
        REQUEST_MODEL = "gen_ai.request.model",
        PROVIDER = "gen_ai.provider.name",
        SERVER_ADDRESS = "server.address",
        SERVER_PORT = "server.port",
        RESPONSE_MODEL = "gen_ai.response.model",
        MAX_TOKENS = "gen_ai.request.max_tokens",
        INPUT_TOKENS = "gen_ai.usage.input_tokens",
        OUTPUT_TOKENS = "gen_ai.usage.output_tokens",
        METHOD = "http.request.method",
        PATH = "url.path",
        STATUS = "http.response.status_code",
        REQUEST_ID = "aisix.request_id",
        KEY_NAME = "aisix.api_key.name",
        MODEL = "aisix.model",
        GROUP = "aisix.group",
        PROVIDER_KEY = "aisix.provider_key",
        STREAM = "aisix.stream",
        TTFT = "aisix.time_to_first_token",
        ENDING = "aisix.ending",
        COST = "aisix.cost_usd",
        ERROR_TYPE = "error.type",
        INPUT_MESSAGES = "gen_ai.input.messages",
        ATTEMPT = "aisix.attempt",
    }
}

/// The bytes kept for the length of a span or a usage event (128 bytes to 16 KiB), and of a
/// batch's messages (16 KiB to 2 MiB): each is moved only when it is outside that range.
const RECORD: usize = 2;
const BATCH: usize = 3;

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
            named_attribute(r, 1, key, &Value::Str(value));
        }
    });
}

fn scope(out: &mut Message) {
    out.message(1, |s| {
        s.string(1, SCOPE);
        s.string(2, env!("CARGO_PKG_VERSION"));
    });
}

/// The attributes a route decides, written once per route and endpoint and copied into every
/// span that names them after: the exporter's own table (no worker reads it). An entry holds
/// its route, so the address it is found by names no other while it is here; entries whose
/// route a reload let go are forgotten once the table grows.
#[derive(Debug, Default)]
pub(crate) struct RouteAttributes {
    written: HashMap<(usize, Endpoint), Written, foldhash::fast::RandomState>,
}

#[derive(Debug)]
struct Written {
    route: Arc<DirectRoute>,
    /// `gen_ai.provider.name`, then `server.address` and `server.port` when the route has a
    /// URI for the endpoint, as span attributes.
    server: Vec<u8>,
    /// `gen_ai.request.model`: the upstream's model name, an attempt span's.
    model: Vec<u8>,
}

/// Past this many entries the table lets go of routes only it still holds.
const ROUTES_KEPT: usize = 256;

impl RouteAttributes {
    fn get(&mut self, route: &Arc<DirectRoute>, endpoint: Endpoint) -> &Written {
        let key = (Arc::as_ptr(route) as usize, endpoint);
        if self.written.len() >= ROUTES_KEPT && !self.written.contains_key(&key) {
            self.written
                .retain(|_, written| Arc::strong_count(&written.route) > 1);
            if self.written.len() >= ROUTES_KEPT * 4 {
                self.written.clear();
            }
        }
        self.written
            .entry(key)
            .or_insert_with(|| Written::new(route, endpoint))
    }
}

impl Written {
    fn new(route: &Arc<DirectRoute>, endpoint: Endpoint) -> Self {
        let mut server = Message::new();
        let provider = Value::Str(provider_name(route.provider.kind));
        attribute(&mut server, 9, key::PROVIDER, &provider);
        if let Some(uri) = route.uris.get(endpoint)
            && let Some(host) = uri.host()
        {
            attribute(&mut server, 9, key::SERVER_ADDRESS, &Value::Str(host));
            let port = i64::from(port_of(uri));
            attribute(&mut server, 9, key::SERVER_PORT, &Value::Int(port));
        }
        let mut model = Message::new();
        let upstream = Value::Str(&route.upstream_model);
        attribute(&mut model, 9, key::REQUEST_MODEL, &upstream);
        Self {
            route: route.clone(),
            server: server.into_buffer().to_vec(),
            model: model.into_buffer().to_vec(),
        }
    }
}

/// An `ExportTraceServiceRequest` holding the spans of `batch`'s sampled requests, written
/// into `out`.
pub(crate) fn traces(
    out: &mut Message,
    batch: &[Box<Trace>],
    (res, routes): (&Resource, &mut RouteAttributes),
    wall: &Wall,
) {
    out.message_sized(1, BATCH, |rs| {
        resource(rs, 1, res);
        rs.message_sized(2, BATCH, |ss| {
            scope(ss);
            for (t, ended) in batch.iter().filter(|t| t.sampled).filter_map(|t| ended(t)) {
                let end_ns = wall.ns(ended.at);
                let last = t.attempts.len().saturating_sub(1);
                let times = (wall.ns(t.received), end_ns);
                let server = t
                    .attempts
                    .last()
                    .map(|a| routes.get(&a.route, t.endpoint).server.as_slice());
                ss.message_sized(2, RECORD, |span| server_span(span, t, ended, server, times));
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
                    let written = routes.get(&start.route, t.endpoint);
                    ss.message_sized(2, RECORD, |span| {
                        attempt_span(span, t, i, (done, written), times)
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

fn server_span(
    span: &mut Message,
    t: &Trace,
    ended: &Ended,
    route: Option<&[u8]>,
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
    attribute(span, 9, key::OPERATION, &Value::Str(op));
    if let Some(model) = requested {
        attribute(span, 9, key::REQUEST_MODEL, &Value::Str(model));
    }
    if let Some(route) = route {
        // `gen_ai.provider.name`, `server.address`, `server.port` of the last attempt's route.
        span.raw(route);
    }
    let mut attr = |key: Key, value: Value<'_>| attribute(span, 9, key, &value);
    if let Some(model) = &t.response_model {
        attr(key::RESPONSE_MODEL, Value::Str(model));
    }
    if let Some(max) = t.max_tokens {
        attr(key::MAX_TOKENS, Value::Int(max as i64));
    }
    if let Some((input, output)) = f.usage {
        attr(key::INPUT_TOKENS, Value::Int(input as i64));
        attr(key::OUTPUT_TOKENS, Value::Int(output as i64));
    }
    attr(key::METHOD, Value::Str(f.method.as_str()));
    attr(key::PATH, Value::Str(f.uri.path()));
    attr(key::STATUS, Value::Int(i64::from(f.status)));
    if let Ok(id) = f.request_id.to_str() {
        attr(key::REQUEST_ID, Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr(key::KEY_NAME, Value::Str(key));
    }
    if let Some(model) = &f.model {
        attr(key::MODEL, Value::Str(model));
    }
    if let Some(group) = &f.group {
        attr(key::GROUP, Value::Str(group));
    }
    if let Some(provider) = &f.provider {
        attr(key::PROVIDER_KEY, Value::Str(provider));
    }
    attr(key::STREAM, Value::Bool(f.stream));
    if let Some(ttft) = f.ttft {
        attr(key::TTFT, Value::Double(ttft.as_secs_f64()));
    }
    attr(key::ENDING, Value::Str(f.outcome.as_str()));
    if let Some(cost) = ended.spend {
        attr(key::COST, Value::Double(cost.nanos() as f64 / 1e9));
    }
    if let Some(error) = f.error {
        attr(key::ERROR_TYPE, Value::Str(error));
    }
    if let Some(prompt) = t.prompt.as_ref().and_then(|p| std::str::from_utf8(p).ok()) {
        attr(key::INPUT_MESSAGES, Value::Str(prompt));
    }
    if f.status >= 500 {
        span.message(15, |status| {
            status.string(2, f.error.unwrap_or("error"));
            status.uint(3, STATUS_ERROR);
        });
    }
    span.fixed32(16, flags);
}

/// An attempt's span: how it ended (`None`: the client left during it), and what its route
/// decides, written.
fn attempt_span(
    span: &mut Message,
    t: &Trace,
    index: usize,
    (done, route): (Option<&Attempt>, &Written),
    (start_ns, end_ns): (u64, u64),
) {
    let start = &t.attempts[index];
    let op = t.ended.as_ref().map_or("", |e| operation(e.facts.endpoint));
    // An attempt the request never saw end: the client left during it.
    let error = done.map_or(Some("client_closed"), |d| d.error);
    span.bytes(1, &t.trace_id);
    span.bytes(2, &start.span_id);
    if let Some(state) = t.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    span.bytes(4, &t.span_id);
    name(span, op, Some(&route.route.upstream_model));
    span.uint(6, SPAN_KIND_CLIENT);
    span.fixed64(7, start_ns);
    span.fixed64(8, end_ns);
    attribute(span, 9, key::OPERATION, &Value::Str(op));
    // `gen_ai.provider.name`, `server.address`, `server.port`, `gen_ai.request.model`.
    span.raw(&route.server);
    span.raw(&route.model);
    let mut attr = |key: Key, value: Value<'_>| attribute(span, 9, key, &value);
    if let Some(status) = done.and_then(|d| d.status) {
        attr(key::STATUS, Value::Int(i64::from(status)));
    }
    attr(
        key::MODEL,
        Value::Str(done.map_or("", |d| d.target.as_ref())),
    );
    attr(
        key::PROVIDER_KEY,
        Value::Str(done.map_or("", |d| d.provider.as_ref())),
    );
    attr(key::ATTEMPT, Value::Int(index as i64));
    attr(
        key::ENDING,
        Value::Str(done.map_or(Outcome::ClientClosed.as_str(), |d| d.result.as_str())),
    );
    if let Some(error) = error {
        attr(key::ERROR_TYPE, Value::Str(error));
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
    out.message_sized(1, BATCH, |rl| {
        resource(rl, 1, res);
        rl.message_sized(2, BATCH, |sl| {
            scope(sl);
            for (t, ended) in batch
                .iter()
                .filter(|t| t.tracing.logs)
                .filter_map(|t| ended(t))
            {
                sl.message_sized(2, RECORD, |log| {
                    usage_event(log, t, ended, wall.ns(ended.at))
                });
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
    let mut attr = |key: Key, value: Value<'_>| attribute(log, 6, key, &value);
    if let Ok(id) = f.request_id.to_str() {
        attr(key::REQUEST_ID, Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr(key::KEY_NAME, Value::Str(key));
    }
    attr(key::OPERATION, Value::Str(operation(f.endpoint)));
    if let Some(model) = requested_model(t, f) {
        attr(key::REQUEST_MODEL, Value::Str(model));
    }
    if let Some(model) = &f.model {
        attr(key::MODEL, Value::Str(model));
    }
    if let Some(last) = t.attempts.last() {
        attr(
            key::PROVIDER,
            Value::Str(provider_name(last.route.provider.kind)),
        );
    }
    if let Some(model) = &t.response_model {
        attr(key::RESPONSE_MODEL, Value::Str(model));
    }
    if let Some(provider) = &f.provider {
        attr(key::PROVIDER_KEY, Value::Str(provider));
    }
    if let Some((input, output)) = f.usage {
        attr(key::INPUT_TOKENS, Value::Int(input as i64));
        attr(key::OUTPUT_TOKENS, Value::Int(output as i64));
    }
    if let Some(cost) = ended.spend {
        attr(key::COST, Value::Double(cost.nanos() as f64 / 1e9));
    }
    attr(key::STATUS, Value::Int(i64::from(f.status)));
    attr(key::STREAM, Value::Bool(f.stream));
    attr(key::ENDING, Value::Str(f.outcome.as_str()));
    if let Some(error) = f.error {
        attr(key::ERROR_TYPE, Value::Str(error));
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
