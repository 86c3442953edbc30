//! Finished requests as OTLP export requests: their spans (`ExportTraceServiceRequest`) and
//! their usage events (`ExportLogsServiceRequest`), with the GenAI semantic conventions'
//! attribute names. Runs on the exporter only.

use aisix_obs::access_log::Attempt;
use aisix_obs::metrics::labels::Outcome;

use super::encode::{Key, Message, Value, any_value, attribute, keys, named_attribute};
use super::record::{Ended, Facts};
use std::collections::HashMap;
use std::sync::Arc;

use super::{AttemptStart, SpanId, Trace, TraceId, Wall, duration_ns, port_of, provider_name};

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

/// What the exporter writes once and copies after (its own tables; no worker reads them):
/// - a route's attributes, per route and endpoint ([`Written`]);
/// - the fields that requests of one shape share (route, endpoint, path, key, model, status,
///   ending: [`RequestShape`]), for their server span and their usage event;
/// - the fields that attempts of one shape share ([`AttemptShape`]).
///
/// A request's own fields (ids, times, tokens, cost, request id) are written per request. A
/// shape is found by a hash of what decides it and kept only if every field is equal, so
/// a collision writes the new shape in the old one's place; an entry holds its route, so the
/// address it is hashed by names no other while it is here; past [`SHAPES_KEPT`] shapes of a
/// kind, the table starts again. Shapes are kept in a list, and the tables map a hash to a
/// place in it: a request's shape is looked up once, by [`Memo::prepare`], and its span and its
/// event then read it by its place.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    routes: HashMap<(usize, Endpoint), Written, foldhash::fast::RandomState>,
    requests: HashMap<u64, usize, foldhash::fast::RandomState>,
    request_shapes: Vec<RequestShape>,
    attempts: HashMap<u64, usize, foldhash::fast::RandomState>,
    attempt_shapes: Vec<AttemptShape>,
    /// The batch [`Memo::prepare`] last saw (a shape it uses is never replaced in it).
    batch: u64,
    /// The place of the attempt shape last written.
    last_attempt: Option<usize>,
}

/// What [`Memo::prepare`] found for one request of a batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Prepared {
    /// Its shape's place in the memo (`None`: its shared fields are written for it alone).
    shape: Option<usize>,
    /// When it was received and when it ended, in Unix ns.
    times: (u64, u64),
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

/// Past this many entries the route table lets go of routes only it still holds.
const ROUTES_KEPT: usize = 256;
/// Past this many shapes of a kind, the table of them starts again.
const SHAPES_KEPT: usize = 1024;

/// What decides a request's shape, as it is kept, and its fields written.
#[derive(Debug)]
struct RequestShape {
    /// The last batch that used it.
    batch: u64,
    route: Option<Arc<DirectRoute>>,
    endpoint: Endpoint,
    ended_endpoint: Endpoint,
    method: http::Method,
    path: super::Path,
    status: u16,
    key_name: Option<Arc<str>>,
    model: Option<Arc<str>>,
    group: Option<Arc<str>>,
    provider: Option<Arc<str>>,
    requested: Option<String>,
    response_model: Option<Arc<str>>,
    stream: bool,
    outcome: Outcome,
    error: Option<&'static str>,
    /// The server span's shared fields ([`server_shape`]).
    span: Vec<u8>,
    /// The usage event's ([`usage_shape`]).
    log: Vec<u8>,
}

/// What decides an attempt's shape, as it is kept, and its fields written.
#[derive(Debug)]
struct AttemptShape {
    route: Arc<DirectRoute>,
    endpoint: Endpoint,
    ended_endpoint: Option<Endpoint>,
    index: usize,
    done: Option<AttemptEnd>,
    /// The span's shared fields ([`attempt_shape`]).
    span: Vec<u8>,
}

/// How an attempt ended, as far as its span's shared fields tell.
#[derive(Debug, PartialEq, Eq)]
struct AttemptEnd {
    status: Option<u16>,
    target: Arc<str>,
    provider: Arc<str>,
    result: Outcome,
    error: Option<&'static str>,
}

impl AttemptEnd {
    fn of(done: &Attempt) -> Self {
        Self {
            status: done.status,
            target: done.target.clone(),
            provider: done.provider.clone(),
            result: done.result,
            error: done.error,
        }
    }

    fn is(&self, done: &Attempt) -> bool {
        self.status == done.status
            && (Arc::ptr_eq(&self.target, &done.target) || self.target == done.target)
            && (Arc::ptr_eq(&self.provider, &done.provider) || self.provider == done.provider)
            && self.result == done.result
            && self.error == done.error
    }
}

/// Whether two names are the same text: the same `Arc` (as a snapshot hands out) without
/// reading it.
#[inline(always)]
fn same(a: &Option<Arc<str>>, b: &Option<Arc<str>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        (None, None) => true,
        _ => false,
    }
}

/// A name's address, for a hash (its text decides equality).
fn address(name: Option<&Arc<str>>) -> usize {
    name.map_or(0, |n| Arc::as_ptr(n).cast::<u8>() as usize)
}

fn fixed_hasher() -> foldhash::fast::FoldHasher<'static> {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x0061_6973_6978).build_hasher()
}

impl Memo {
    fn route_in<'a>(
        routes: &'a mut HashMap<(usize, Endpoint), Written, foldhash::fast::RandomState>,
        route: &Arc<DirectRoute>,
        endpoint: Endpoint,
    ) -> &'a Written {
        let key = (Arc::as_ptr(route) as usize, endpoint);
        if routes.len() >= ROUTES_KEPT && !routes.contains_key(&key) {
            routes.retain(|_, written| Arc::strong_count(&written.route) > 1);
            if routes.len() >= ROUTES_KEPT * 4 {
                routes.clear();
            }
        }
        routes
            .entry(key)
            .or_insert_with(|| Written::new(route, endpoint))
    }

    /// Each request of `batch` that ended: its shape, found or written now, by its hash
    /// (`None` for one whose hash another shape of the same batch holds: its fields are then
    /// written in full, [`Memo::request`]), and its times on `wall`'s clock. A request that did
    /// not end is given nothing (nothing is written for it).
    pub(crate) fn prepare(&mut self, batch: &[Box<Trace>], wall: &Wall) -> Vec<Prepared> {
        if self.requests.len() + batch.len() > SHAPES_KEPT {
            self.requests.clear();
            self.request_shapes.clear();
        }
        self.batch = self.batch.wrapping_add(1);
        let mut last: Option<usize> = None;
        batch
            .iter()
            .map(|t| {
                let Some(ended) = t.ended.as_ref() else {
                    return Prepared::default();
                };
                let start_ns = wall.ns(t.received);
                let times = (
                    start_ns,
                    start_ns.saturating_add(duration_ns(ended.latency)),
                );
                // A request of the shape the one before it had, as most are, is known by that
                // shape's check alone: no hash of its own.
                let shape = match last {
                    Some(at)
                        if self
                            .request_shapes
                            .get(at)
                            .is_some_and(|shape| shape.is(t, &ended.facts)) =>
                    {
                        last
                    }
                    _ => {
                        last = self.prepare_one(t, ended);
                        last
                    }
                };
                Prepared { shape, times }
            })
            .collect()
    }

    /// The hash a request's shape is kept by: of what decides the shape, names by address.
    fn request_hash(t: &Trace, f: &Facts) -> u64 {
        use std::hash::{Hash, Hasher};
        let route = t.attempts.last().map(|a| &a.route);
        let mut h = fixed_hasher();
        h.write_usize(route.map_or(0, |r| Arc::as_ptr(r) as usize));
        t.endpoint.hash(&mut h);
        f.endpoint.hash(&mut h);
        h.write(f.method.as_str().as_bytes());
        h.write(f.path.as_str().as_bytes());
        h.write_u16(f.status);
        for name in [&f.key_name, &f.model, &f.group, &f.provider] {
            h.write_usize(address(name.as_ref()));
        }
        t.requested_model.hash(&mut h);
        t.response_model.hash(&mut h);
        h.write_u8(u8::from(f.stream));
        f.outcome.hash(&mut h);
        f.error.hash(&mut h);
        h.finish()
    }

    fn prepare_one(&mut self, t: &Trace, ended: &Ended) -> Option<usize> {
        let f = &ended.facts;
        let route = t.attempts.last().map(|a| &a.route);
        let hash = Self::request_hash(t, f);
        let kept = self.requests.get(&hash).copied();
        match kept.and_then(|at| Some((at, self.request_shapes.get_mut(at)?))) {
            Some((at, shape)) if shape.is(t, f) => {
                // In use by this batch from here on: no later request of it may replace it.
                shape.batch = self.batch;
                return Some(at);
            }
            // Another shape this batch uses has the hash: this one is written in full.
            Some((_, shape)) if shape.batch == self.batch => return None,
            _ => {}
        }
        let written = route.map(|r| Self::route_in(&mut self.routes, r, t.endpoint));
        let mut span = Message::new();
        server_shape(&mut span, t, ended, written);
        let mut log = Message::new();
        usage_shape(&mut log, t, ended);
        let shape = RequestShape {
            batch: self.batch,
            route: route.cloned(),
            endpoint: t.endpoint,
            ended_endpoint: f.endpoint,
            method: f.method.clone(),
            path: f.path.clone(),
            status: f.status,
            key_name: f.key_name.clone(),
            model: f.model.clone(),
            group: f.group.clone(),
            provider: f.provider.clone(),
            requested: t.requested_model.clone(),
            response_model: t.response_model.clone(),
            stream: f.stream,
            outcome: f.outcome,
            error: f.error,
            span: span.into_buffer().to_vec(),
            log: log.into_buffer().to_vec(),
        };
        // A collision's shape is replaced in its place.
        let at = match kept.filter(|&at| at < self.request_shapes.len()) {
            Some(at) => {
                self.request_shapes[at] = shape;
                at
            }
            None => {
                self.request_shapes.push(shape);
                self.requests.insert(hash, self.request_shapes.len() - 1);
                self.request_shapes.len() - 1
            }
        };
        Some(at)
    }

    /// The server span's (`log`: the usage event's) part of the shape [`Memo::prepare`] found
    /// for `t` (ended as `ended`), or, with none, those fields written for it alone.
    fn request(
        &mut self,
        shape: Option<usize>,
        t: &Trace,
        ended: &Ended,
        log: bool,
    ) -> std::borrow::Cow<'_, [u8]> {
        match shape.filter(|&at| at < self.request_shapes.len()) {
            Some(at) => {
                let shape = &self.request_shapes[at];
                std::borrow::Cow::Borrowed(if log { &shape.log } else { &shape.span })
            }
            None => std::borrow::Cow::Owned(self.request_alone(t, ended, log)),
        }
    }

    /// [`Memo::request`] for a request with no shape kept: rare (a hash that another shape of
    /// its batch holds), so kept out of the usual path.
    #[cold]
    #[inline(never)]
    fn request_alone(&mut self, t: &Trace, ended: &Ended, log: bool) -> Vec<u8> {
        let mut alone = Message::new();
        if log {
            usage_shape(&mut alone, t, ended);
        } else {
            let route = t
                .attempts
                .last()
                .map(|a| Self::route_in(&mut self.routes, &a.route, t.endpoint));
            server_shape(&mut alone, t, ended, route);
        }
        alone.into_buffer().to_vec()
    }

    /// The shared fields of attempt `index` of `t` (`start`), which ended as `done`: found,
    /// or written now.
    fn attempt(
        &mut self,
        t: &Trace,
        (index, start): (usize, &AttemptStart),
        done: Option<&Attempt>,
    ) -> &[u8] {
        use std::hash::{Hash, Hasher};
        let route = &start.route;
        let ended_endpoint = t.ended.as_ref().map(|e| e.facts.endpoint);
        let is = |shape: &AttemptShape| {
            Arc::ptr_eq(&shape.route, route)
                && shape.endpoint == t.endpoint
                && shape.ended_endpoint == ended_endpoint
                && shape.index == index
                && match (&shape.done, done) {
                    (Some(kept), Some(done)) => kept.is(done),
                    (None, None) => true,
                    _ => false,
                }
        };
        // An attempt of the shape the one before it had, as most are, is known by that
        // shape's check alone: no hash of its own.
        let last = self
            .last_attempt
            .filter(|&at| self.attempt_shapes.get(at).is_some_and(is));
        let at = match last {
            Some(at) => at,
            None => {
                let mut h = fixed_hasher();
                h.write_usize(Arc::as_ptr(route) as usize);
                t.endpoint.hash(&mut h);
                ended_endpoint.hash(&mut h);
                h.write_usize(index);
                if let Some(d) = done {
                    d.status.hash(&mut h);
                    h.write_usize(address(Some(&d.target)));
                    h.write_usize(address(Some(&d.provider)));
                    d.result.hash(&mut h);
                    d.error.hash(&mut h);
                }
                let hash = h.finish();
                let kept = self
                    .attempts
                    .get(&hash)
                    .copied()
                    .filter(|&at| self.attempt_shapes.get(at).is_some_and(is));
                match kept {
                    Some(at) => at,
                    None => {
                        if self.attempts.len() >= SHAPES_KEPT {
                            self.attempts.clear();
                            self.attempt_shapes.clear();
                        }
                        let written = Self::route_in(&mut self.routes, route, t.endpoint);
                        let mut span = Message::new();
                        attempt_shape(&mut span, t, index, (done, written));
                        let shape = AttemptShape {
                            route: route.clone(),
                            endpoint: t.endpoint,
                            ended_endpoint,
                            index,
                            done: done.map(AttemptEnd::of),
                            span: span.into_buffer().to_vec(),
                        };
                        // A collision's shape is replaced in its place.
                        match self.attempts.get(&hash).copied() {
                            Some(at) if at < self.attempt_shapes.len() => {
                                self.attempt_shapes[at] = shape;
                                at
                            }
                            _ => {
                                self.attempt_shapes.push(shape);
                                let at = self.attempt_shapes.len() - 1;
                                self.attempts.insert(hash, at);
                                at
                            }
                        }
                    }
                }
            }
        };
        self.last_attempt = Some(at);
        &self.attempt_shapes[at].span
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

impl RequestShape {
    /// Whether the request `t` (its record's `f`) has this shape.
    fn is(&self, t: &Trace, f: &Facts) -> bool {
        let route = t.attempts.last().map(|a| &a.route);
        let same_route = match (&self.route, route) {
            (Some(kept), Some(route)) => Arc::ptr_eq(kept, route),
            (None, None) => true,
            _ => false,
        };
        same_route
            && self.endpoint == t.endpoint
            && self.ended_endpoint == f.endpoint
            && self.method == f.method
            && self.path == f.path
            && self.status == f.status
            && same(&self.key_name, &f.key_name)
            && same(&self.model, &f.model)
            && same(&self.group, &f.group)
            && same(&self.provider, &f.provider)
            && self.requested == t.requested_model
            && same(&self.response_model, &t.response_model)
            && self.stream == f.stream
            && self.outcome == f.outcome
            && self.error == f.error
    }
}

/// An `ExportTraceServiceRequest` holding the spans of `batch`'s sampled requests, written
/// into `out`.
pub(crate) fn traces(
    out: &mut Message,
    batch: &[Box<Trace>],
    (res, memo, prepared): (&Resource, &mut Memo, &[Prepared]),
    wall: &Wall,
) {
    out.message_sized(1, BATCH, |rs| {
        resource(rs, 1, res);
        rs.message_sized(2, BATCH, |ss| {
            scope(ss);
            for ((t, ended), prepared) in batch
                .iter()
                .zip(prepared)
                .filter(|(t, _)| t.sampled)
                .filter_map(|(t, prepared)| Some((ended(t)?, prepared)))
            {
                let times @ (_, end_ns) = prepared.times;
                let last = t.attempts.len().saturating_sub(1);
                let shape = memo.request(prepared.shape, t, ended, false);
                ss.message_sized(2, RECORD, |span| server_span(span, t, ended, &shape, times));
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
                    let shape = memo.attempt(t, (i, start), done);
                    ss.message_sized(2, RECORD, |span| attempt_span(span, t, start, shape, times));
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

/// A request's server span: its own fields, and its shape's ([`server_shape`]), written.
fn server_span(
    span: &mut Message,
    t: &Trace,
    ended: &Ended,
    shape: &[u8],
    (start_ns, end_ns): (u64, u64),
) {
    let f = &ended.facts;
    span.raw(&fixed_fields(&t.trace_id, &t.span_id, (start_ns, end_ns)));
    if let Some(state) = t.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    let mut flags = FLAG_SAMPLED | FLAG_HAS_IS_REMOTE;
    if let Some(parent) = &t.parent {
        span.raw(&parent_field(parent));
        flags |= FLAG_IS_REMOTE;
    }
    span.raw(shape);
    let mut attr = |key: Key, value: Value<'_>| attribute(span, 9, key, &value);
    if let Some(max) = t.max_tokens {
        attr(key::MAX_TOKENS, Value::Int(max as i64));
    }
    if let Some((input, output)) = f.usage {
        attr(key::INPUT_TOKENS, Value::Int(input as i64));
        attr(key::OUTPUT_TOKENS, Value::Int(output as i64));
    }
    attr(key::REQUEST_ID, Value::Ascii(f.request_id.ascii()));
    if let Some(ttft) = f.ttft {
        attr(key::TTFT, Value::Double(ttft.as_secs_f64()));
    }
    if let Some(cost) = ended.spend {
        attr(key::COST, Value::Double(cost.nanos() as f64 / 1e9));
    }
    if let Some(prompt) = t.prompt.as_ref().and_then(|p| std::str::from_utf8(p).ok()) {
        attr(key::INPUT_MESSAGES, Value::Str(prompt));
    }
    span.fixed32(16, flags);
}

/// The fields of a server span that requests of one shape share: its name, kind and status,
/// and the attributes its route, endpoint, key, model and ending decide. `route`: the last
/// attempt's provider and server attributes, written.
fn server_shape(span: &mut Message, t: &Trace, ended: &Ended, route: Option<&Written>) {
    let f = &ended.facts;
    let op = operation(f.endpoint);
    let requested = requested_model(t, f);
    name(span, op, requested);
    span.uint(6, SPAN_KIND_SERVER);
    attribute(span, 9, key::OPERATION, &Value::Str(op));
    if let Some(model) = requested {
        attribute(span, 9, key::REQUEST_MODEL, &Value::Str(model));
    }
    if let Some(route) = route {
        // `gen_ai.provider.name`, `server.address`, `server.port` of the last attempt's route.
        span.raw(&route.server);
    }
    let mut attr = |key: Key, value: Value<'_>| attribute(span, 9, key, &value);
    if let Some(model) = &t.response_model {
        attr(key::RESPONSE_MODEL, Value::Str(model));
    }
    attr(key::METHOD, Value::Str(f.method.as_str()));
    attr(key::PATH, Value::Str(f.path.as_str()));
    attr(key::STATUS, Value::Int(i64::from(f.status)));
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
    attr(key::ENDING, Value::Str(f.outcome.as_str()));
    if let Some(error) = f.error {
        attr(key::ERROR_TYPE, Value::Str(error));
    }
    if f.status >= 500 {
        span.message(15, |status| {
            status.string(2, f.error.unwrap_or("error"));
            status.uint(3, STATUS_ERROR);
        });
    }
}

/// An attempt's span: its own fields, and its shape's ([`attempt_shape`]), written.
fn attempt_span(
    span: &mut Message,
    t: &Trace,
    start: &AttemptStart,
    shape: &[u8],
    (start_ns, end_ns): (u64, u64),
) {
    // Its ids, times and parent: one copy.
    let mut head = [0u8; 56];
    head[..46].copy_from_slice(&fixed_fields(
        &t.trace_id,
        &start.span_id,
        (start_ns, end_ns),
    ));
    head[46..].copy_from_slice(&parent_field(&t.span_id));
    span.raw(&head);
    if let Some(state) = t.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    span.raw(shape);
}

/// A span's `trace_id` (1), `span_id` (2), `start_time_unix_nano` (7) and
/// `end_time_unix_nano` (8): fixed sizes, so written as one array in one copy.
fn fixed_fields(trace_id: &TraceId, span_id: &SpanId, (start_ns, end_ns): (u64, u64)) -> [u8; 46] {
    let mut out = [0u8; 46];
    out[0] = 1 << 3 | 2;
    out[1] = 16;
    out[2..18].copy_from_slice(trace_id);
    out[18] = 2 << 3 | 2;
    out[19] = 8;
    out[20..28].copy_from_slice(span_id);
    out[28] = 7 << 3 | 1;
    out[29..37].copy_from_slice(&start_ns.to_le_bytes());
    out[37] = 8 << 3 | 1;
    out[38..46].copy_from_slice(&end_ns.to_le_bytes());
    out
}

/// A span's `parent_span_id` (4).
fn parent_field(parent: &SpanId) -> [u8; 10] {
    let mut out = [0u8; 10];
    out[0] = 4 << 3 | 2;
    out[1] = 8;
    out[2..].copy_from_slice(parent);
    out
}

/// The fields of an attempt's span that attempts of one shape share: its name, kind, status
/// and flags, and the attributes its route, index and ending (`done`; `None`: the client left
/// during it) decide.
fn attempt_shape(
    span: &mut Message,
    t: &Trace,
    index: usize,
    (done, route): (Option<&Attempt>, &Written),
) {
    let op = t.ended.as_ref().map_or("", |e| operation(e.facts.endpoint));
    // An attempt the request never saw end: the client left during it.
    let error = done.map_or(Some("client_closed"), |d| d.error);
    name(span, op, Some(&route.route.upstream_model));
    span.uint(6, SPAN_KIND_CLIENT);
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
pub(crate) fn logs(
    out: &mut Message,
    batch: &[Box<Trace>],
    (res, memo, prepared): (&Resource, &mut Memo, &[Prepared]),
) {
    out.message_sized(1, BATCH, |rl| {
        resource(rl, 1, res);
        rl.message_sized(2, BATCH, |sl| {
            scope(sl);
            for ((t, ended), prepared) in batch
                .iter()
                .zip(prepared)
                .filter(|(t, _)| t.tracing.logs)
                .filter_map(|(t, prepared)| Some((ended(t)?, prepared)))
            {
                let shape = memo.request(prepared.shape, t, ended, true);
                let (_, end_ns) = prepared.times;
                sl.message_sized(2, RECORD, |log| usage_event(log, t, ended, &shape, end_ns));
            }
        });
    });
}

/// A request's usage event: its own fields, and its shape's ([`usage_shape`]), written.
fn usage_event(log: &mut Message, t: &Trace, ended: &Ended, shape: &[u8], end_ns: u64) {
    let f = &ended.facts;
    log.fixed64(1, end_ns);
    log.raw(shape);
    let mut attr = |key: Key, value: Value<'_>| attribute(log, 6, key, &value);
    attr(key::REQUEST_ID, Value::Ascii(f.request_id.ascii()));
    if let Some((input, output)) = f.usage {
        attr(key::INPUT_TOKENS, Value::Int(input as i64));
        attr(key::OUTPUT_TOKENS, Value::Int(output as i64));
    }
    if let Some(cost) = ended.spend {
        attr(key::COST, Value::Double(cost.nanos() as f64 / 1e9));
    }
    log.raw(&log_fixed_fields(t, end_ns));
}

/// A usage event's `flags` (8), `trace_id` (9), `span_id` (10) and
/// `observed_time_unix_nano` (11), in one copy.
fn log_fixed_fields(t: &Trace, end_ns: u64) -> [u8; 42] {
    let mut out = [0u8; 42];
    out[0] = 8 << 3 | 5;
    let flags = if t.sampled { FLAG_SAMPLED } else { 0 };
    out[1..5].copy_from_slice(&flags.to_le_bytes());
    out[5] = 9 << 3 | 2;
    out[6] = 16;
    out[7..23].copy_from_slice(&t.trace_id);
    out[23] = 10 << 3 | 2;
    out[24] = 8;
    out[25..33].copy_from_slice(&t.span_id);
    out[33] = 11 << 3 | 1;
    out[34..42].copy_from_slice(&end_ns.to_le_bytes());
    out
}

/// The fields of a usage event that requests of one shape share.
fn usage_shape(log: &mut Message, t: &Trace, ended: &Ended) {
    let f = &ended.facts;
    log.uint(2, SEVERITY_INFO);
    log.string(3, "INFO");
    log.message(5, |body| any_value(body, &Value::Str("usage")));
    log.string(12, "aisix.usage");
    let mut attr = |key: Key, value: Value<'_>| attribute(log, 6, key, &value);
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
    attr(key::STATUS, Value::Int(i64::from(f.status)));
    attr(key::STREAM, Value::Bool(f.stream));
    attr(key::ENDING, Value::Str(f.outcome.as_str()));
    if let Some(error) = f.error {
        attr(key::ERROR_TYPE, Value::Str(error));
    }
}

/// Whether `logs` writes a usage event for `trace`.
pub(crate) fn logged(trace: &Trace) -> bool {
    trace.tracing.logs && trace.ended.is_some()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aisix_config::{OtlpConfig, Usd};
    use bytes::Bytes;
    use http::{HeaderMap, Method};
    use tokio::time::Instant;

    use super::*;
    use crate::otel::Tracing;
    use crate::request::inbound;
    use crate::snapshot::{Named, Snapshot};

    const RESOURCES: &str = r#"
_format_version: "1"
provider_keys: [{display_name: p, provider: openai, api_key: sk-memo-test}]
models:
  - {display_name: a, provider: openai, model_name: up-a, provider_key: p}
"#;

    /// Direct model `a`, as a snapshot of [`RESOURCES`] routes it.
    fn route() -> Arc<DirectRoute> {
        let resources =
            aisix_config::parse_resources(RESOURCES, std::path::Path::new("r.yaml"), &|_| None)
                .unwrap();
        match Snapshot::from_resources(&resources).model("a") {
            Some(Named::Direct(route)) => route.clone(),
            _ => panic!("no direct model a"),
        }
    }

    thread_local! {
        /// The names a snapshot holds: one `Arc` per name, shared by its requests.
        static NAMES: std::cell::RefCell<Vec<Arc<str>>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// `name` as the snapshot would hand it out: the same `Arc` for every request.
    fn named(name: &str) -> Arc<str> {
        NAMES.with_borrow_mut(|names| match names.iter().find(|n| &***n == name) {
            Some(n) => n.clone(),
            None => {
                names.push(Arc::from(name));
                names[names.len() - 1].clone()
            }
        })
    }

    /// A request to `route` that ended with `status`, by key `key`, with its own id and token
    /// counts.
    fn trace(
        route: &Arc<DirectRoute>,
        id: &str,
        key: &str,
        status: u16,
        tokens: u64,
    ) -> Box<Trace> {
        let tracing = Tracing::from_config(&OtlpConfig {
            enabled: true,
            ..OtlpConfig::default()
        })
        .unwrap();
        let now = Instant::now();
        let mut trace = Trace::begin(tracing, &HeaderMap::new(), now);
        let body =
            Bytes::from_static(br#"{"model":"a","messages":[{"role":"user","content":"hi"}]}"#);
        let inbound = inbound::inspect(Endpoint::ChatCompletions, body).unwrap();
        trace.attempt(now, route, &inbound);
        trace.answered_by(Some("up-a-2026"));
        let outcome = if status == 200 {
            Outcome::Success
        } else {
            Outcome::UpstreamError
        };
        trace.ended = Some(Ended {
            facts: Facts {
                request_id: crate::otel::Id::new(id.as_bytes()),
                endpoint: Endpoint::ChatCompletions,
                method: Method::POST,
                path: crate::otel::Path::of("/v1/chat/completions"),
                key_name: Some(named(key)),
                model: Some(route.name.clone()),
                group: None,
                provider: Some(named("p")),
                stream: false,
                status,
                ttft: Some(Duration::from_millis(5)),
                usage: Some((tokens, tokens + 1)),
                attempts: crate::otel::Attempts::of(vec![Attempt {
                    target: route.name.clone(),
                    provider: named("p"),
                    status: Some(status),
                    duration: Duration::from_millis(4),
                    error: (status != 200).then_some("upstream_server_error"),
                    result: outcome,
                    failure: None,
                }]),
                outcome,
                error: (status != 200).then_some("upstream_server_error"),
            },
            latency: Duration::from_millis(6),
            spend: Some(Usd::from_nanos(1_500)),
        });
        trace
    }

    /// The traces and logs export requests of `batch`, written through `memo`.
    fn export(memo: &mut Memo, batch: &[Box<Trace>], wall: &Wall) -> (Vec<u8>, Vec<u8>) {
        let resource = Resource { attributes: vec![] };
        let prepared = memo.prepare(batch, wall);
        let mut spans = Message::new();
        traces(&mut spans, batch, (&resource, memo, &prepared), wall);
        let mut events = Message::new();
        logs(&mut events, batch, (&resource, memo, &prepared));
        (spans.into_bytes(), events.into_bytes())
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn a_kept_shape_writes_what_a_fresh_memo_writes_and_each_request_keeps_its_own_fields() {
        let route = route();
        // Two requests of one shape, and one of another (another key, a 502).
        let batch = vec![
            trace(&route, "req-first", "team-a", 200, 10),
            trace(&route, "req-second", "team-a", 200, 20),
            trace(&route, "req-third", "team-b", 502, 30),
        ];
        let wall = Wall::now();
        let fresh = export(&mut Memo::default(), &batch, &wall);
        // A memo that made every shape in an earlier batch, in another order.
        let mut warm = Memo::default();
        let earlier = vec![
            trace(&route, "req-x", "team-b", 502, 1),
            trace(&route, "req-y", "team-a", 200, 2),
        ];
        export(&mut warm, &earlier, &wall);
        assert_eq!(warm.requests.len(), 2);
        assert_eq!(export(&mut warm, &batch, &wall), fresh);
        assert_eq!(
            warm.requests.len(),
            2,
            "no new shape for requests of known shapes"
        );

        // Each request's own fields, in spans and events alike.
        let (spans, events) = fresh;
        for written in [&spans, &events] {
            for id in ["req-first", "req-second", "req-third"] {
                assert!(contains(written, id.as_bytes()), "{id}");
            }
            assert!(contains(written, b"team-b") && contains(written, b"team-a"));
            assert!(contains(written, b"up-a-2026"));
        }
        // The 502's attempt span carries its error; a 200's shape carries none.
        assert!(contains(&spans, b"upstream_server_error"));
        let ok_only = export(&mut Memo::default(), &batch[..2], &wall).0;
        assert!(!contains(&ok_only, b"upstream_server_error"));
    }

    #[test]
    fn the_fixed_fields_written_in_one_copy_are_what_the_field_writers_write() {
        let trace_id: TraceId = std::array::from_fn(|i| i as u8 + 1);
        let span_id: SpanId = std::array::from_fn(|i| 0xf0 + i as u8);
        let (start, end) = (1_765_000_000_123_456_789, u64::MAX - 7);
        let mut fields = Message::new();
        fields.bytes(1, &trace_id);
        fields.bytes(2, &span_id);
        fields.fixed64(7, start);
        fields.fixed64(8, end);
        assert_eq!(
            fixed_fields(&trace_id, &span_id, (start, end)).to_vec(),
            fields.into_bytes()
        );
        let mut parent = Message::new();
        parent.bytes(4, &span_id);
        assert_eq!(parent_field(&span_id).to_vec(), parent.into_bytes());
        for sampled in [true, false] {
            let mut t = trace(&route(), "req-fixed", "team-a", 200, 1);
            t.sampled = sampled;
            let mut log = Message::new();
            log.fixed32(8, if sampled { FLAG_SAMPLED } else { 0 });
            log.bytes(9, &t.trace_id);
            log.bytes(10, &t.span_id);
            log.fixed64(11, end);
            assert_eq!(log_fixed_fields(&t, end).to_vec(), log.into_bytes());
        }
    }

    #[test]
    fn a_request_of_the_shape_before_it_shares_that_shape_and_one_of_another_does_not() {
        let route = route();
        let batch = vec![
            trace(&route, "req-1", "team-a", 200, 1),
            trace(&route, "req-2", "team-a", 200, 2),
            trace(&route, "req-3", "team-a", 502, 3),
            trace(&route, "req-4", "team-a", 200, 4),
            trace(&route, "req-5", "team-b", 502, 5),
            trace(&route, "req-6", "team-a", 502, 6),
        ];
        let mut memo = Memo::default();
        let wall = Wall::now();
        let shapes: Vec<_> = memo
            .prepare(&batch, &wall)
            .iter()
            .map(|p| p.shape)
            .collect();
        assert!(shapes.iter().all(Option::is_some), "{shapes:?}");
        assert_eq!(shapes[0], shapes[1]);
        assert_eq!(shapes[1], shapes[3]);
        assert_eq!(shapes[2], shapes[5]);
        assert_ne!(
            shapes[1], shapes[2],
            "another status, after the shape before it"
        );
        assert_ne!(
            shapes[2], shapes[4],
            "another key, after the shape before it"
        );
        assert_eq!(memo.requests.len(), 3);
        assert_eq!(memo.request_shapes.len(), 3);
        // What the batch writes is what a memo that starts afresh for each request writes.
        let together = export(&mut Memo::default(), &batch, &wall);
        // Each 502 carries its error in its server span and its attempt's (the type and the
        // status message of each), and no 200 carries one: no attempt took the shape of the
        // attempt before it when its own differs.
        let needle = b"upstream_server_error";
        let errors = together
            .0
            .windows(needle.len())
            .filter(|w| w == needle)
            .count();
        assert_eq!(errors, 3 * 4);
        let mut warm = Memo::default();
        export(&mut warm, &batch, &wall);
        assert_eq!(export(&mut warm, &batch, &wall), together);
    }

    #[test]
    fn a_request_s_span_and_event_end_its_latency_after_its_start_on_one_wall_reading() {
        let route = route();
        let mut t = trace(&route, "req-times", "team-a", 200, 1);
        t.ended.as_mut().unwrap().latency = Duration::from_nanos(6_000_123);
        let batch = vec![t];
        let wall = Wall::now();
        let mut memo = Memo::default();
        let prepared = memo.prepare(&batch, &wall);
        let start = wall.ns(batch[0].received);
        assert_eq!(prepared[0].times, (start, start + 6_000_123));
        let (spans, events) = export(&mut memo, &batch, &wall);
        let server = fixed_fields(&batch[0].trace_id, &batch[0].span_id, prepared[0].times);
        assert!(contains(&spans, &server), "the server span's start and end");
        assert!(
            contains(&events, &log_fixed_fields(&batch[0], start + 6_000_123)),
            "the event's time is the request's end"
        );
        // A request that has not ended is given nothing, and nothing is written for it.
        let mut open = trace(&route, "req-open", "team-a", 200, 1);
        open.ended = None;
        let prepared = memo.prepare(&[open], &wall);
        assert_eq!((prepared[0].shape, prepared[0].times), (None, (0, 0)));
    }

    #[test]
    fn a_kept_shape_a_batch_uses_is_not_replaced_by_a_later_request_of_that_batch() {
        let route = route();
        let first = trace(&route, "req-first", "team-a", 200, 10);
        let second = trace(&route, "req-second", "team-b", 502, 20);
        // Made by an earlier batch, then used by this one.
        let mut memo = Memo {
            batch: 1,
            ..Memo::default()
        };
        let kept = memo
            .prepare_one(&first, first.ended.as_ref().unwrap())
            .unwrap();
        memo.batch = 2;
        assert_eq!(
            memo.prepare_one(&first, first.ended.as_ref().unwrap()),
            Some(kept)
        );
        // The second request's hash made equal to the kept shape's: it is written in full.
        let first_hash = Memo::request_hash(&first, &first.ended.as_ref().unwrap().facts);
        let second_hash = Memo::request_hash(&second, &second.ended.as_ref().unwrap().facts);
        let shape = memo.requests.remove(&first_hash).unwrap();
        memo.requests.insert(second_hash, shape);
        assert_eq!(
            memo.prepare_one(&second, second.ended.as_ref().unwrap()),
            None
        );
        let kept_shape = &memo.request_shapes[memo.requests[&second_hash]];
        assert!(kept_shape.is(&first, &first.ended.as_ref().unwrap().facts));
    }

    #[test]
    fn a_shape_whose_hash_another_of_the_batch_holds_is_written_in_full() {
        let route = route();
        let batch = vec![
            trace(&route, "req-first", "team-a", 200, 10),
            trace(&route, "req-second", "team-b", 502, 20),
        ];
        let wall = Wall::now();
        let expected = export(&mut Memo::default(), &batch, &wall);
        // Both requests' hashes made equal: the second is written in full, not given the
        // first's shape.
        let mut memo = Memo {
            batch: 7,
            ..Memo::default()
        };
        let first = memo
            .prepare_one(&batch[0], batch[0].ended.as_ref().unwrap())
            .unwrap();
        let first_hash = Memo::request_hash(&batch[0], &batch[0].ended.as_ref().unwrap().facts);
        let second_hash = Memo::request_hash(&batch[1], &batch[1].ended.as_ref().unwrap().facts);
        let collided = memo.requests.remove(&first_hash).unwrap();
        memo.request_shapes[collided].key_name = Some(named("team-b-not"));
        memo.requests.insert(second_hash, collided);
        assert_eq!(
            memo.prepare_one(&batch[1], batch[1].ended.as_ref().unwrap()),
            None
        );
        let resource = Resource { attributes: vec![] };
        let mut spans = Message::new();
        memo.requests.remove(&second_hash);
        let again = memo.prepare_one(&batch[0], batch[0].ended.as_ref().unwrap());
        assert_ne!(
            again,
            Some(first),
            "a shape of its own, not the changed one"
        );
        let times = |t: &Trace| {
            let start = wall.ns(t.received);
            (start, start + 6_000_000)
        };
        let prepared = [
            Prepared {
                shape: again,
                times: times(&batch[0]),
            },
            Prepared {
                shape: None,
                times: times(&batch[1]),
            },
        ];
        traces(&mut spans, &batch, (&resource, &mut memo, &prepared), &wall);
        let mut events = Message::new();
        logs(&mut events, &batch, (&resource, &mut memo, &prepared));
        assert_eq!((spans.into_bytes(), events.into_bytes()), expected);
    }
}
