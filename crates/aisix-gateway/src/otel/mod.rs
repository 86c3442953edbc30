//! OpenTelemetry: each request as a trace (a server span, a client span per upstream attempt)
//! and a usage event, exported over OTLP/HTTP by one task on the control runtime. Workers only
//! fill a [`Trace`] as the request goes and, when its record drops, hand the finished request
//! to their own bounded queue ([`queue`]); everything else (batching, encoding, compression,
//! sending, retries) is the exporter's ([`export`]).
//!
//! Cost: with `observability.otlp` off, a request carries `None` and pays one branch where it
//! starts, one per attempt and one where it ends. On, it boxes its [`Trace`] once, draws ids
//! from a per-thread generator, clones its routes' `Arc`s, and moves the box (with what its
//! record held, moved out as it drops, but for the request id and path, copied in place) into
//! its queue: no clock read, no formatting, no copy of a name. What it holds that the worker
//! allocated is as little as it can be (the box itself, the record's attempts), since the
//! exporter frees it on another thread, which costs jemalloc more than a free where it was
//! allocated.

mod context;
mod encode;
pub mod export;
mod grpc;
mod queue;
mod record;
mod reply;
mod spans;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aisix_config::OtlpConfig;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::request::inbound::Inbound;
use crate::snapshot::DirectRoute;

pub(crate) use context::{SpanId, TraceId};
pub use export::{Exporter, Running};
pub(crate) use queue::prepare;
pub(crate) use record::{Attempts, Facts, Id, Path, finish};

/// What a worker needs to trace its requests; fixed at startup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tracing {
    pub sample_ppm: u32,
    pub traces: bool,
    pub logs: bool,
    pub capture_content: bool,
}

impl Tracing {
    /// `None` when export is off.
    pub(crate) fn from_config(config: &OtlpConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            sample_ppm: config.sample_ppm,
            traces: config.traces_url.is_some(),
            logs: config.logs_url.is_some(),
            capture_content: config.capture_content,
        })
    }
}

/// The headers an attempt's upstream request carries: its span's `traceparent` and the
/// client's `tracestate`.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub traceparent: HeaderValue,
    pub tracestate: Option<HeaderValue>,
}

/// One upstream attempt's span, as far as the attempt itself knows it: the rest (its upstream
/// model, provider kind and address) is read from its route on the exporter.
#[derive(Debug)]
struct AttemptStart {
    span_id: SpanId,
    sent_at: Instant,
    route: Arc<DirectRoute>,
}

/// A request's attempts as they started: the first in place (most requests make one), any
/// more after it, so a request that makes one allocates nothing for them.
#[derive(Debug, Default)]
struct Started {
    first: Option<AttemptStart>,
    more: Vec<AttemptStart>,
}

impl Started {
    fn push(&mut self, attempt: AttemptStart) {
        match self.first {
            None => self.first = Some(attempt),
            Some(_) => self.more.push(attempt),
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    fn iter(&self) -> impl Iterator<Item = &AttemptStart> {
        self.first.iter().chain(&self.more)
    }

    fn last(&self) -> Option<&AttemptStart> {
        self.more.last().or(self.first.as_ref())
    }
}

/// A request's trace: its ids, where it started, its attempts and, once it ended, what its
/// record told of it. Boxed once when the request starts and moved whole into the worker's
/// queue when it ends: a plain struct, no formatting and no clock read of its own (its times
/// are the request's `Instant`s, put on the wall clock by the exporter).
#[derive(Debug)]
pub(crate) struct Trace {
    tracing: Tracing,
    trace_id: TraceId,
    span_id: SpanId,
    /// The client's span, when its `traceparent` was valid.
    parent: Option<SpanId>,
    sampled: bool,
    trace_state: Option<HeaderValue>,
    /// When the request was received.
    received: Instant,
    /// The endpoint its attempts were sent to.
    endpoint: Endpoint,
    /// The name the client sent, when no direct model of that name answered (a group's).
    requested_model: Option<String>,
    max_tokens: Option<u64>,
    prompt: Option<Bytes>,
    attempts: Started,
    /// The model the answer named, as the upstream sent it.
    response_model: Option<Arc<str>>,
    /// What the request's record told when it ended.
    ended: Option<record::Ended>,
}

pub(crate) use crate::upstream::head::{TRACEPARENT, TRACESTATE};

impl Trace {
    /// A request received at `received` with `headers` starts its trace: the client's, when
    /// it sent a valid `traceparent` (its sampled flag decides), else a new one sampled at the
    /// configured ratio.
    pub(crate) fn begin(tracing: Tracing, headers: &HeaderMap, received: Instant) -> Box<Self> {
        // Looked for among the request's names before it is looked up: a scan of a request's
        // few names, most of them standard (told apart by their kind alone), costs less than
        // the hash a lookup takes, and most requests carry none.
        let parent = headers
            .keys()
            .any(|name| *name == TRACEPARENT)
            .then(|| headers.get(TRACEPARENT))
            .flatten()
            .and_then(|v| context::parse(v.as_bytes()));
        let (trace_id, parent, sampled, trace_state) = match parent {
            Some(p) => (
                p.trace_id,
                Some(p.span_id),
                p.sampled,
                headers.get(TRACESTATE).cloned(),
            ),
            None => {
                let id = context::trace_id();
                (id, None, context::sampled(&id, tracing.sample_ppm), None)
            }
        };
        Box::new(Self {
            tracing,
            trace_id,
            span_id: context::span_id(),
            parent,
            sampled: sampled && tracing.traces,
            trace_state,
            received,
            endpoint: Endpoint::Other,
            requested_model: None,
            max_tokens: None,
            prompt: None,
            attempts: Started::default(),
            response_model: None,
            ended: None,
        })
    }

    /// An attempt to `target` starts at `sent_at`: its span's id is drawn, and its context
    /// returned for the upstream request.
    pub(crate) fn attempt(
        &mut self,
        sent_at: Instant,
        target: &Arc<DirectRoute>,
        inbound: &Inbound,
    ) -> Outgoing {
        if self.attempts.is_empty() {
            self.endpoint = inbound.endpoint;
            // The name the client sent is the direct model's whenever one answers to it; only
            // another (a group's) is kept.
            if inbound.inspected.model != *target.name {
                self.requested_model = Some(inbound.inspected.model.clone());
            }
            self.max_tokens = inbound.inspected.max_output_tokens;
            if self.tracing.capture_content {
                self.prompt = Some(inbound.body.clone());
            }
        }
        let span_id = context::span_id();
        self.attempts.push(AttemptStart {
            span_id,
            sent_at,
            route: target.clone(),
        });
        Outgoing {
            traceparent: context::traceparent(&self.trace_id, &span_id, self.sampled),
            tracestate: self.trace_state.clone(),
        }
    }

    /// The answer named `model` (`None`: it named none, and an earlier answer's is forgotten).
    pub(crate) fn answered_by(&mut self, model: Option<&str>) {
        self.response_model = model.and_then(|name| answered_name(name.as_bytes()));
    }

    /// The answer `json` (a whole answer, or as much of its start as was kept) names its
    /// model in its first `"model"` string, if any. A name this worker's answers gave lately is
    /// matched by its bytes where the string starts, with no read of the string before, nor
    /// check or copy of it.
    pub(crate) fn answered_in(&mut self, json: &[u8]) {
        use crate::wire::chunk;
        self.response_model = chunk::model_value_start(json).and_then(|start| {
            let value = json.get(start..)?;
            if let Some(kept) = kept_name_at(value) {
                return Some(kept);
            }
            let name = json.get(start..chunk::string_end(json, start)?)?;
            match name.contains(&b'\\') {
                false => answered_name(name),
                // An escape in a name: unescaped first (no upstream sends one).
                true => chunk::model_text(json).and_then(|name| answered_name(name.as_bytes())),
            }
        });
    }
}

/// How many names answers gave that a worker keeps.
const NAMES_KEPT: usize = 16;

thread_local! {
    /// The names this worker's answers gave lately, newest last: an answer naming one of
    /// them shares its `Arc` (the same few names come back answer after answer), so a traced
    /// request neither allocates its `gen_ai.response.model` nor has the exporter free it.
    static ANSWERED: std::cell::RefCell<Vec<Arc<str>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The name this worker kept that a JSON string `value` (what follows its opening quote)
/// holds, matched where the string starts: a kept name's bytes, then the closing quote. A kept
/// name holds no quote and no backslash, so no escape can hide in what matched, and the quote
/// after it ends the string.
fn kept_name_at(value: &[u8]) -> Option<Arc<str>> {
    ANSWERED
        .try_with(|names| {
            let names = names.try_borrow().ok()?;
            names
                .iter()
                .rev()
                .find(|kept| {
                    value.get(kept.len()) == Some(&b'"') && value.starts_with(kept.as_bytes())
                })
                .cloned()
        })
        .ok()
        .flatten()
}

/// `name` as an `Arc` this worker already holds, or a new one it keeps from now on (in place
/// of the first kept of [`NAMES_KEPT`]); `None` for bytes that are not UTF-8. A name with a
/// quote or a backslash in it is not kept ([`kept_name_at`] relies on it).
fn answered_name(name: &[u8]) -> Option<Arc<str>> {
    ANSWERED
        .try_with(|names| {
            let mut names = names.try_borrow_mut().ok()?;
            if let Some(at) = names.iter().rposition(|kept| kept.as_bytes() == name) {
                return Some(Some(names[at].clone()));
            }
            let Ok(text) = std::str::from_utf8(name) else {
                return Some(None);
            };
            let kept: Arc<str> = Arc::from(text);
            if name.contains(&b'"') || name.contains(&b'\\') {
                return Some(Some(kept));
            }
            if names.len() >= NAMES_KEPT {
                names.remove(0);
            }
            names.push(kept.clone());
            Some(Some(kept))
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| std::str::from_utf8(name).ok().map(Arc::from))
}

/// Puts a batch's `Instant`s on the wall clock: read once per batch on the exporter, never on a
/// worker.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wall {
    now: Instant,
    now_ns: u64,
}

impl Wall {
    pub(super) fn now() -> Self {
        let now = Instant::now();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            now,
            now_ns: duration_ns(since_epoch),
        }
    }

    /// `at` (no later than this reading) in Unix ns.
    pub(super) fn ns(&self, at: Instant) -> u64 {
        self.now_ns
            .saturating_sub(duration_ns(self.now.saturating_duration_since(at)))
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn port_of(uri: &http::Uri) -> u16 {
    uri.port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        })
}

/// `gen_ai.provider.name` of a provider kind, in the semantic conventions' well-known values.
fn provider_name(kind: aisix_config::ProviderKind) -> &'static str {
    use aisix_config::ProviderKind;
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::AzureOpenAi => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Vertex => "gcp.vertex_ai",
        ProviderKind::Bedrock => "aws.bedrock",
        ProviderKind::Mock => "aisix.mock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_started_keep_their_order_the_first_in_place_and_the_last_is_the_latest() {
        let resources = aisix_config::parse_resources(
            "_format_version: \"1\"\nprovider_keys: [{display_name: p, provider: openai, api_key: sk-started-1}]\nmodels: [{display_name: m, provider: openai, model_name: up, provider_key: p}]\n",
            std::path::Path::new("r.yaml"),
            &|_| None,
        )
        .unwrap();
        let route = match crate::snapshot::Snapshot::from_resources(&resources).model("m") {
            Some(crate::snapshot::Named::Direct(route)) => route.clone(),
            other => panic!("{other:?}"),
        };
        let mut started = Started::default();
        assert!(started.is_empty() && started.last().is_none());
        for n in 1..=3u8 {
            started.push(AttemptStart {
                span_id: [n; 8],
                sent_at: Instant::now(),
                route: route.clone(),
            });
            assert_eq!(started.len(), usize::from(n));
            assert_eq!(started.last().map(|a| a.span_id), Some([n; 8]));
        }
        let order: Vec<u8> = started.iter().map(|a| a.span_id[0]).collect();
        assert_eq!(order, [1, 2, 3]);
        assert!(!started.is_empty());
    }

    #[test]
    fn a_client_s_traceparent_among_other_headers_is_the_parent_and_without_one_a_trace_is_new() {
        let tracing = Tracing {
            sample_ppm: 0,
            traces: true,
            logs: true,
            capture_content: false,
        };
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HOST, HeaderValue::from_static("gw"));
        headers.insert("x-stainless-lang", HeaderValue::from_static("python"));
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("json"));
        let root = Trace::begin(tracing, &headers, Instant::now());
        assert_eq!(root.parent, None);
        assert!(!root.sampled, "a new root at a ratio of 0");
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        headers.insert(TRACESTATE, HeaderValue::from_static("vendor=1"));
        headers.insert("x-after", HeaderValue::from_static("1"));
        let child = Trace::begin(tracing, &headers, Instant::now());
        assert_eq!(
            child.parent,
            Some([0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31])
        );
        assert_eq!(child.trace_id[..2], [0x0a, 0xf7]);
        assert!(child.sampled, "the client's sampled flag decides");
        assert_eq!(
            child.trace_state,
            Some(HeaderValue::from_static("vendor=1"))
        );
        // One that is not valid starts a trace of the gateway's own.
        headers.insert(TRACEPARENT, HeaderValue::from_static("00-zz-01"));
        let invalid = Trace::begin(tracing, &headers, Instant::now());
        assert_eq!(
            (invalid.parent, invalid.trace_state.is_some()),
            (None, false)
        );
    }

    #[test]
    fn an_answer_s_model_is_read_from_its_json_escaped_or_not_and_a_name_seen_before_shares_its_arc()
     {
        let tracing = Tracing {
            sample_ppm: 1_000_000,
            traces: true,
            logs: true,
            capture_content: false,
        };
        let mut trace = Trace::begin(tracing, &HeaderMap::new(), Instant::now());
        trace.answered_in(br#"{"id":"x","model":"up-answer-2026","choices":[]}"#);
        let first = trace.response_model.clone().unwrap();
        assert_eq!(&*first, "up-answer-2026");
        trace.answered_in(br#"{"id":"y", "model" : "up-answer-2026"}"#);
        assert!(Arc::ptr_eq(&first, trace.response_model.as_ref().unwrap()));
        // An escape is read as JSON reads it.
        trace.answered_in(br#"{"model":"up\u002danswer-2026"}"#);
        assert_eq!(trace.response_model.as_deref(), Some("up-answer-2026"));
        // An answer naming no model, or not as a string, forgets the earlier one.
        trace.answered_in(br#"{"id":"z"}"#);
        assert_eq!(trace.response_model, None);
        trace.answered_in(br#"{"model":"up-answer-2026"}"#);
        trace.answered_in(br#"{"model":17}"#);
        assert_eq!(trace.response_model, None);
        // A kept name that begins another is not that other, nor is one the text cuts off.
        trace.answered_in(br#"{"model":"up-answer-2026-mini"}"#);
        assert_eq!(trace.response_model.as_deref(), Some("up-answer-2026-mini"));
        trace.answered_in(br#"{"model":"up-answer-2026"#);
        assert_eq!(trace.response_model, None);
        // A name with a quote or a backslash is read whole each time, and not kept.
        trace.answered_by(Some(r#"odd"name\x"#));
        trace.answered_in(br#"{"model":"odd\"name\\x"}"#);
        assert_eq!(trace.response_model.as_deref(), Some(r#"odd"name\x"#));
        trace.answered_in(br#"{"model":"odd\"name\\xy"}"#);
        assert_eq!(trace.response_model.as_deref(), Some(r#"odd"name\xy"#));
        ANSWERED.with_borrow(|names| {
            assert!(names.iter().all(|n| !n.contains('"') && !n.contains('\\')));
        });
    }

    #[test]
    fn an_answer_s_model_shares_the_arc_of_the_same_name_and_the_first_kept_name_goes() {
        let named = |name: &str| answered_name(name.as_bytes()).unwrap();
        let first = named("gpt-4o-2024-08-06");
        let again = named("gpt-4o-2024-08-06");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(&*again, "gpt-4o-2024-08-06");
        // Sixteen other names later, the first is no longer kept: a new Arc, the same text.
        for n in 0..NAMES_KEPT {
            named(&format!("model-{n}"));
        }
        let later = named("gpt-4o-2024-08-06");
        assert!(!Arc::ptr_eq(&first, &later));
        assert_eq!(later, first);
        // Kept again, and the list holds no more than its share.
        assert!(Arc::ptr_eq(&later, &named("gpt-4o-2024-08-06")));
        // Bytes that are not text name nothing, and are not kept.
        assert_eq!(answered_name(b"\xff\xfe"), None);
        ANSWERED.with_borrow(|names| assert_eq!(names.len(), NAMES_KEPT));
    }
}
