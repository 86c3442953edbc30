//! The typed emit functions: the only way request paths touch metrics. Each goes through the
//! calling thread's handle cache ([`super::cache`]); on a hit it allocates nothing and takes no
//! lock, and costs a cache probe (tens of ns) plus the series' atomics:
//!
//! - counter: one `fetch_add` (and the exporter's generation `fetch_add`);
//! - histogram: a bucket search, one `fetch_add`, one compare-and-swap on the sum;
//! - in-flight and connection guards: one compare-and-swap on this thread's own shard or
//!   worker series when created and again when dropped, plus a reference count.
//!
//! Callable from any thread; the recorder is the one `metrics`' own macros would use there.

use std::time::Duration;

use ::metrics::Gauge;

use super::cache;
use super::catalog::{
    ACCESS_LOG_DROPPED, AUTH_FAILURES, BODY_REJECTIONS, GATEWAY_OVERHEAD, REQUEST_DURATION,
    REQUESTS_IN_FLIGHT, REQUESTS_TOTAL, TOKENS_TOTAL, UPSTREAM_ERRORS, UPSTREAM_TTFT,
    WORKER_CONNECTIONS_OPEN, WORKER_REQUESTS,
};
use super::labels::{AuthFailure, Endpoint, Outcome, StatusClass, TokenKind, UpstreamErrorKind};
use super::worker;

/// The labels of a finished request. `model` and `provider` are configured names (or
/// [`UNROUTED`](super::labels::UNROUTED) before routing chose one), never request strings.
#[derive(Clone, Copy, Debug)]
pub struct RequestLabels<'a> {
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub provider: &'a str,
    pub status: StatusClass,
    pub outcome: Outcome,
}

/// A request has been answered (for a stream: its last byte sent, or the stream ended):
/// `aisix_requests_total` += 1 and `aisix_request_duration_seconds` observes `duration`.
pub fn request_finished(labels: &RequestLabels<'_>, duration: Duration) {
    let RequestLabels {
        endpoint,
        model,
        provider,
        status,
        outcome,
    } = *labels;
    let endpoint = endpoint.as_str();
    let outcome = outcome.as_str();
    cache::counter(
        &REQUESTS_TOTAL,
        [endpoint, model, provider, status.as_str(), outcome],
        |c| c.increment(1),
    );
    let seconds = duration.as_secs_f64();
    cache::histogram(
        &REQUEST_DURATION,
        [endpoint, model, provider, outcome],
        |h| h.record(seconds),
    );
}

/// What a finished request measured, beyond its labels.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestFacts {
    /// Whole request, received to done.
    pub duration: Duration,
    /// Time in the gateway itself, the upstream wait excluded.
    pub overhead: Duration,
    /// Input and output tokens, when the provider reported usage.
    pub tokens: Option<(u64, u64)>,
    /// Upstream time to first token, for streams.
    pub ttft: Option<Duration>,
}

/// Everything a finished request records, through one cache lookup: requests_total,
/// request_duration, gateway_overhead, tokens and ttft. The same series as
/// [`request_finished`], [`overhead`], [`tokens`] and [`ttft`] emitted one by one.
pub fn request(labels: &RequestLabels<'_>, facts: &RequestFacts) {
    let RequestLabels {
        endpoint,
        model,
        provider,
        status,
        outcome,
    } = *labels;
    cache::request(
        [
            endpoint.as_str(),
            model,
            provider,
            status.as_str(),
            outcome.as_str(),
        ],
        |h| {
            h.total.increment(1);
            h.duration.record(facts.duration.as_secs_f64());
            h.overhead.record(facts.overhead.as_secs_f64());
            if let Some((input, output)) = facts.tokens {
                let (input_counter, output_counter) = h.tokens();
                input_counter.increment(input);
                output_counter.increment(output);
            }
            if let Some(ttft) = facts.ttft {
                h.ttft().record(ttft.as_secs_f64());
            }
        },
    );
}

/// Time to first token of a streamed upstream response.
pub fn ttft(model: &str, provider: &str, duration: Duration) {
    let seconds = duration.as_secs_f64();
    cache::histogram(&UPSTREAM_TTFT, [model, provider], |h| h.record(seconds));
}

/// Token usage reported by the provider for one request.
pub fn tokens(model: &str, provider: &str, input: u64, output: u64) {
    for (kind, n) in [(TokenKind::Input, input), (TokenKind::Output, output)] {
        cache::counter(&TOKENS_TOTAL, [model, provider, kind.as_str()], |c| {
            c.increment(n)
        });
    }
}

/// A call to `provider` failed.
pub fn upstream_error(provider: &str, kind: UpstreamErrorKind) {
    cache::counter(&UPSTREAM_ERRORS, [provider, kind.as_str()], |c| {
        c.increment(1)
    });
}

/// Authentication refused a request.
pub fn auth_failure(reason: AuthFailure) {
    cache::counter(&AUTH_FAILURES, [reason.as_str()], |c| c.increment(1));
}

/// A request body exceeded the size limit.
pub fn body_rejected(endpoint: Endpoint) {
    cache::counter(&BODY_REJECTIONS, [endpoint.as_str()], |c| c.increment(1));
}

/// Time the gateway itself spent on a request, the upstream wait excluded.
pub fn overhead(endpoint: Endpoint, duration: Duration) {
    let seconds = duration.as_secs_f64();
    cache::histogram(&GATEWAY_OVERHEAD, [endpoint.as_str()], |h| {
        h.record(seconds)
    });
}

/// Counts a request in `aisix_requests_in_flight` until the guard drops. Each thread moves
/// only its own shard of the series; a scrape sums the shards. The guard may drop on another
/// thread (shared runtime): it decrements the shard it incremented.
pub fn in_flight(endpoint: Endpoint) -> InFlightGuard {
    let gauge = cache::gauge(&REQUESTS_IN_FLIGHT, [endpoint.as_str()], |g| {
        g.increment(1.0);
        g.clone()
    });
    GaugeGuard { gauge }
}

/// Holds one request in `aisix_requests_in_flight`; see [`in_flight`].
pub type InFlightGuard = GaugeGuard;

/// Holds one connection in `aisix_worker_connections_open`; see [`worker_connection`].
pub type WorkerConnectionGuard = GaugeGuard;

/// Holds one unit of a gauge (a request in flight, an open connection) until dropped.
#[must_use = "the gauge counts only while the guard lives"]
#[derive(Debug)]
pub struct GaugeGuard {
    gauge: Gauge,
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// A request arrived on the calling thread's worker: `aisix_worker_requests_total{worker}` += 1
/// and the request counts in `aisix_requests_in_flight{endpoint}` until the guard drops. The
/// same series as [`worker_request`] and [`in_flight`], reached without hashing: the thread
/// keeps these handles by endpoint for the current recorder.
pub fn request_started(endpoint: Endpoint) -> InFlightGuard {
    let started = cache::started(endpoint, |worker_requests, in_flight| {
        worker_requests.increment(1);
        in_flight.increment(1.0);
        in_flight.clone()
    });
    match started {
        Some(gauge) => GaugeGuard { gauge },
        None => {
            worker_request();
            in_flight(endpoint)
        }
    }
}

/// Counts a client connection in `aisix_worker_connections_open{worker}` of the calling
/// thread's worker until the guard drops.
pub fn worker_connection() -> WorkerConnectionGuard {
    let gauge = worker::with_label(|label| {
        cache::gauge(&WORKER_CONNECTIONS_OPEN, [label], |g| {
            g.increment(1.0);
            g.clone()
        })
    });
    GaugeGuard { gauge }
}

/// The calling thread's worker received a request: `aisix_worker_requests_total{worker}` += 1.
pub fn worker_request() {
    worker::with_label(|label| cache::counter(&WORKER_REQUESTS, [label], |c| c.increment(1)));
}

/// Access-log lines were dropped because the writer could not keep up.
pub fn access_log_dropped(lines: u64) {
    cache::counter(&ACCESS_LOG_DROPPED, [], |c| c.increment(lines));
}
