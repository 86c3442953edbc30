//! What one request did, recorded exactly once: when its response is complete, when its stream
//! ends or fails, or when the client goes away. The record is owned by a drop guard, so every
//! ending is covered.

use std::time::Duration;

use http::HeaderValue;
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::wire::usage::Usage;

/// How a request ended, for metrics and the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    ClientError,
    UpstreamError,
    /// The client disconnected before the response was complete.
    ClientClosed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::ClientError => "client_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::ClientClosed => "client_closed",
        }
    }
}

/// The facts about one request, filled in as it goes.
#[derive(Debug)]
pub struct Record {
    pub request_id: HeaderValue,
    pub endpoint: Endpoint,
    pub received: Instant,
    pub key_name: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub stream: bool,
    pub status: u16,
    pub upstream_status: Option<u16>,
    /// Time spent waiting on the upstream (request sent until its response head, or its whole
    /// body for non-streaming calls).
    pub upstream_wait: Duration,
    pub ttft: Option<Duration>,
    pub usage: Option<Usage>,
    /// The error code, when the request failed.
    pub error: Option<&'static str>,
    pub outcome: Outcome,
}

impl Record {
    pub fn new(request_id: HeaderValue, endpoint: Endpoint, received: Instant) -> Self {
        Self {
            request_id,
            endpoint,
            received,
            key_name: None,
            model: None,
            provider: None,
            stream: false,
            status: 0,
            upstream_status: None,
            upstream_wait: Duration::ZERO,
            ttft: None,
            usage: None,
            error: None,
            outcome: Outcome::Success,
        }
    }

    /// Time in the gateway itself so far: everything except the upstream wait.
    pub fn overhead(&self) -> Duration {
        self.received.elapsed().saturating_sub(self.upstream_wait)
    }
}

/// Owns a [`Record`] and emits it once, on drop.
#[derive(Debug)]
pub struct Accounted(pub Record);

impl Drop for Accounted {
    fn drop(&mut self) {
        let r = &self.0;
        tracing::debug!(
            request_id = ?r.request_id,
            endpoint = r.endpoint.as_str(),
            status = r.status,
            outcome = r.outcome.as_str(),
            model = r.model.as_deref(),
            key = r.key_name.as_deref(),
            prompt_tokens = r.usage.map(|u| u.prompt_tokens),
            completion_tokens = r.usage.map(|u| u.completion_tokens),
            latency_us = r.received.elapsed().as_micros() as u64,
            "request finished"
        );
    }
}
