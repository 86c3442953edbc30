//! OpenTelemetry: each request as a trace (a server span, a client span per upstream attempt)
//! and a usage event, exported over OTLP/HTTP by one task on the control runtime. Workers only
//! fill a [`Trace`] as the request goes and, when its record drops, hand the finished request
//! to their own bounded queue ([`queue`]); everything else (batching, encoding, compression,
//! sending, retries) is the exporter's ([`export`]).
//!
//! Cost: with `observability.otlp` off, a request carries `None` and pays one branch where it
//! starts, one per attempt and one where it ends. On, it reads the wall clock once, draws ids
//! from a per-thread generator, and allocates its finished record (one box and its strings).

mod context;
mod encode;
pub mod export;
mod queue;
mod record;
mod spans;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aisix_config::OtlpConfig;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::request::inbound::Inbound;
use crate::snapshot::DirectRoute;

pub(crate) use context::{SpanId, TraceId};
pub use export::Exporter;
pub(crate) use record::{Facts, finish};

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

/// One upstream attempt's span, as far as the attempt itself knows it.
#[derive(Debug)]
struct AttemptStart {
    span_id: SpanId,
    sent_at: Instant,
    provider_kind: &'static str,
    upstream_model: String,
    /// The host and port the attempt was sent to.
    server: Option<(String, u16)>,
}

/// A request's trace as it goes: its ids, where it started, and its attempts.
#[derive(Debug)]
pub(crate) struct Trace {
    tracing: Tracing,
    trace_id: TraceId,
    span_id: SpanId,
    /// The client's span, when its `traceparent` was valid.
    parent: Option<SpanId>,
    sampled: bool,
    trace_state: Option<HeaderValue>,
    /// The request's start on the wall clock (Unix ns), and on the monotonic one.
    start_ns: u64,
    received: Instant,
    requested_model: Option<String>,
    max_tokens: Option<u64>,
    prompt: Option<Bytes>,
    attempts: Vec<AttemptStart>,
}

impl Trace {
    /// A request received at `received` with `headers` starts its trace: the client's, when
    /// it sent a valid `traceparent` (its sampled flag decides), else a new one sampled at the
    /// configured ratio.
    pub(crate) fn begin(tracing: Tracing, headers: &HeaderMap, received: Instant) -> Box<Self> {
        let parent = headers
            .get("traceparent")
            .and_then(|v| context::parse(v.as_bytes()));
        let (trace_id, parent, sampled, trace_state) = match parent {
            Some(p) => (
                p.trace_id,
                Some(p.span_id),
                p.sampled,
                headers.get("tracestate").cloned(),
            ),
            None => {
                let id = context::trace_id();
                (id, None, context::sampled(&id, tracing.sample_ppm), None)
            }
        };
        let since = Instant::now().saturating_duration_since(received);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(since);
        Box::new(Self {
            tracing,
            trace_id,
            span_id: context::span_id(),
            parent,
            sampled: sampled && tracing.traces,
            trace_state,
            start_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
            received,
            requested_model: None,
            max_tokens: None,
            prompt: None,
            attempts: Vec::new(),
        })
    }

    /// An attempt to `target` starts at `sent_at`: its span's id is drawn, and its context
    /// returned for the upstream request.
    pub(crate) fn attempt(
        &mut self,
        sent_at: Instant,
        target: &DirectRoute,
        inbound: &Inbound,
    ) -> Outgoing {
        if self.requested_model.is_none() {
            self.requested_model = Some(inbound.inspected.model.clone());
            self.max_tokens = inbound.inspected.max_output_tokens;
            if self.tracing.capture_content {
                self.prompt = Some(inbound.body.clone());
            }
        }
        let span_id = context::span_id();
        let server = target
            .uris
            .get(inbound.endpoint)
            .and_then(|uri| Some((uri.host()?.to_owned(), port_of(uri))));
        self.attempts.push(AttemptStart {
            span_id,
            sent_at,
            provider_kind: provider_name(target.provider.kind),
            upstream_model: target.upstream_model.clone(),
            server,
        });
        Outgoing {
            traceparent: context::traceparent(&self.trace_id, &span_id, self.sampled),
            tracestate: self.trace_state.clone(),
        }
    }

    /// `at` on the wall clock, in Unix ns.
    fn ns_at(&self, at: Instant) -> u64 {
        self.start_ns
            .saturating_add(duration_ns(at.saturating_duration_since(self.received)))
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
        ProviderKind::Mock => "aisix.mock",
    }
}
