//! What one request did, recorded exactly once: when its response is complete, when its stream
//! ends or fails, or when the client goes away. The record is owned by a drop guard, so every
//! ending is covered; dropping it emits the request's metrics and its access-log line.

use std::sync::Arc;
use std::time::Duration;

use aisix_obs::access_log;
use aisix_obs::metrics::emit::{self, InFlightGuard, RequestFacts, RequestLabels};
use aisix_obs::metrics::labels::{
    AuthFailure, Endpoint as EndpointLabel, Outcome, StatusClass, UNROUTED, UpstreamErrorKind,
};
use http::{HeaderValue, Method, Uri};
use tokio::time::Instant;

use crate::wire::usage::Usage;

/// The status recorded for a request whose client left before its response was ready.
const CLIENT_CLOSED: u16 = 499;

/// Which outputs a record feeds; fixed at startup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sinks {
    pub metrics: bool,
    pub access_log: bool,
}

/// The facts about one request, filled in as it goes.
#[derive(Debug)]
pub(crate) struct Record {
    pub request_id: HeaderValue,
    pub endpoint: EndpointLabel,
    pub method: Method,
    pub uri: Uri,
    pub received: Instant,
    // Names are shared with this worker's snapshot: a clone is a worker-local count increment.
    pub key_name: Option<Arc<str>>,
    /// The model's configured name, once routed.
    pub model: Option<Arc<str>>,
    /// The provider key's configured name, once routed.
    pub provider: Option<Arc<str>>,
    pub stream: bool,
    pub status: u16,
    pub upstream_status: Option<u16>,
    /// Time spent waiting on the upstream: request sent until its response head (streams) or
    /// its whole body.
    pub upstream_wait: Duration,
    /// Time in the gateway itself, fixed when the response head is ready.
    pub overhead: Duration,
    /// When the response head was ready.
    head_at: Option<Instant>,
    pub ttft: Option<Duration>,
    pub usage: Option<Usage>,
    /// The error code, when the request failed.
    pub error: Option<&'static str>,
    pub outcome: Outcome,
    pub upstream_error: Option<UpstreamErrorKind>,
    pub auth_failure: Option<AuthFailure>,
    pub body_rejected: bool,
    sinks: Sinks,
    _in_flight: Option<InFlightGuard>,
}

impl Record {
    pub(crate) fn new(
        request_id: HeaderValue,
        endpoint: EndpointLabel,
        method: Method,
        uri: Uri,
        received: Instant,
        sinks: Sinks,
    ) -> Self {
        let in_flight = sinks.metrics.then(|| emit::request_started(endpoint));
        Self {
            request_id,
            endpoint,
            method,
            uri,
            received,
            key_name: None,
            model: None,
            provider: None,
            stream: false,
            // Until a response is ready, the request's ending is the client's leaving: 499, as
            // nginx records it.
            status: CLIENT_CLOSED,
            upstream_status: None,
            upstream_wait: Duration::ZERO,
            overhead: Duration::ZERO,
            head_at: None,
            ttft: None,
            usage: None,
            error: Some("client_closed"),
            outcome: Outcome::ClientClosed,
            upstream_error: None,
            auth_failure: None,
            body_rejected: false,
            sinks,
            _in_flight: in_flight,
        }
    }

    /// Fixes the gateway's own time so far: everything except the upstream wait.
    pub(crate) fn mark_head(&mut self) -> Duration {
        let now = Instant::now();
        self.head_at = Some(now);
        self.overhead = (now - self.received).saturating_sub(self.upstream_wait);
        self.overhead
    }

    fn emit_metrics(&self, latency: Duration) {
        let model = self.model.as_deref().unwrap_or(UNROUTED);
        let provider = self.provider.as_deref().unwrap_or(UNROUTED);
        emit::request(
            &RequestLabels {
                endpoint: self.endpoint,
                model,
                provider,
                status: StatusClass::from_status(self.status),
                outcome: self.outcome,
            },
            &RequestFacts {
                duration: latency,
                overhead: self.overhead,
                tokens: self.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
                ttft: self.ttft.filter(|_| self.stream),
            },
        );
        if let Some(kind) = self.upstream_error {
            emit::upstream_error(provider, kind);
        }
        if let Some(reason) = self.auth_failure {
            emit::auth_failure(reason);
        }
        if self.body_rejected {
            emit::body_rejected(self.endpoint);
        }
    }

    fn write_access_log(&self, latency: Duration) {
        access_log::record(&access_log::Entry {
            request_id: self.request_id.to_str().unwrap_or_default(),
            method: self.method.as_str(),
            path: self.uri.path(),
            status: self.status,
            model: self.model.as_deref(),
            provider: self.provider.as_deref(),
            key: self.key_name.as_deref(),
            input_tokens: self.usage.map(|u| u.prompt_tokens),
            output_tokens: self.usage.map(|u| u.completion_tokens),
            latency,
            ttft: self.ttft,
            upstream_status: self.upstream_status,
            error: self.error,
            stream: self.stream,
            overhead: self.overhead,
        });
    }
}

/// Owns a [`Record`] and emits it once, on drop.
#[derive(Debug)]
pub(crate) struct Accounted(pub Record);

impl Drop for Accounted {
    fn drop(&mut self) {
        let record = &self.0;
        // A whole response is done when its head is (its body goes out with it); a stream
        // ends now.
        let latency = match record.head_at {
            Some(head_at) if !record.stream => head_at - record.received,
            _ => record.received.elapsed(),
        };
        if record.sinks.metrics {
            record.emit_metrics(latency);
        }
        if record.sinks.access_log {
            record.write_access_log(latency);
        }
    }
}
