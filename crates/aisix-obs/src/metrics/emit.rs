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
    ACCESS_LOG_DROPPED, AUTH_FAILURES, BODY_REJECTIONS, COOLDOWNS, CREDENTIAL_REFRESH_FAILURES,
    FALLBACKS, LOG_DROPPED, OTEL_DROPPED, OTEL_EXPORTED, PROVIDER_KEY_REFUSALS,
    RATELIMIT_BACKEND_ERRORS, RATELIMIT_REJECTIONS, REQUESTS_IN_FLIGHT, SPEND_USD_TOTAL,
    TARGET_STATE, TARGETS_COOLING, UPSTREAM_ATTEMPTS, UPSTREAM_ERRORS, WORKER_CONNECTIONS_OPEN,
    WORKER_REQUESTS,
};
use super::labels::{
    AuthFailure, Endpoint, Outcome, RateLimitKind, RateLimitScope, StatusClass, UpstreamErrorKind,
};
use super::worker;

/// The labels of a finished request. `api_key`, `model` and `provider` are configured names
/// (or [`UNROUTED`](super::labels::UNROUTED) before authentication or routing found one),
/// never request strings.
#[derive(Clone, Copy, Debug)]
pub struct RequestLabels<'a> {
    pub endpoint: Endpoint,
    /// The API key's `display_name`.
    pub api_key: &'a str,
    pub model: &'a str,
    pub provider: &'a str,
    pub status: StatusClass,
    pub outcome: Outcome,
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

/// A request has been answered (for a stream: its last byte sent, or the stream ended).
/// Everything it records, through one cache lookup: `aisix_requests_total`,
/// `aisix_request_duration_seconds`, `aisix_gateway_overhead_seconds`, and when known
/// `aisix_tokens_total` and `aisix_upstream_ttft_seconds`.
pub fn request(labels: &RequestLabels<'_>, facts: &RequestFacts) {
    let RequestLabels {
        endpoint,
        api_key,
        model,
        provider,
        status,
        outcome,
    } = *labels;
    cache::request(
        [
            endpoint.as_str(),
            api_key,
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

/// A call to `provider` failed.
pub fn upstream_error(provider: &str, kind: UpstreamErrorKind) {
    cache::counter(&UPSTREAM_ERRORS, [provider, kind.as_str()], |c| {
        c.increment(1)
    });
}

/// One call to the direct model `target` ended with `result`, for a request that named `model`
/// (the same name, or the group's).
pub fn upstream_attempt(model: &str, target: &str, result: Outcome) {
    cache::counter(&UPSTREAM_ATTEMPTS, [model, target, result.as_str()], |c| {
        c.increment(1)
    });
}

/// A request to the group `model` moved on from the direct model `from` to `to`.
pub fn fallback(model: &str, from: &str, to: &str) {
    cache::counter(&FALLBACKS, [model, from, to], |c| c.increment(1));
}

/// The direct model `target` started a cooldown (`aisix_cooldowns_total{target}`).
pub fn cooldown(target: &str) {
    cache::counter(&COOLDOWNS, [target], |c| c.increment(1));
}

/// The upstream refused the provider key `provider` (its display name) for `reason`.
pub fn provider_key_refused(provider: &str, reason: &'static str) {
    cache::counter(&PROVIDER_KEY_REFUSALS, [provider, reason], |c| {
        c.increment(1)
    });
}

/// A fetch of the refreshed credential of the provider key `provider` failed.
pub fn credential_refresh_failed(provider: &str) {
    cache::counter(&CREDENTIAL_REFRESH_FAILURES, [provider], |c| c.increment(1));
}

/// The direct model `target` is now available (0), cooling down (1) or half-open (2)
/// (`aisix_target_state{target}`).
pub fn target_state(target: &str, state: u8) {
    cache::gauge(&TARGET_STATE, [target], |g| g.set(f64::from(state)));
}

/// One more (`cooling`) or one fewer direct model is cooling down (`aisix_targets_cooling`).
pub fn targets_cooling(cooling: bool) {
    cache::gauge(&TARGETS_COOLING, [], |g| {
        if cooling {
            g.increment(1.0)
        } else {
            g.decrement(1.0)
        }
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

/// Holds one request in `aisix_requests_in_flight`; see [`request_started`].
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
/// thread keeps these handles by endpoint for the current recorder, so no key is hashed. Each
/// thread moves only its own shard of the in-flight series (a scrape sums the shards); the
/// guard may drop on another thread (shared runtime) and decrements the shard it incremented.
pub fn request_started(endpoint: Endpoint) -> InFlightGuard {
    let started = cache::started(endpoint, |worker_requests, in_flight| {
        worker_requests.increment(1);
        in_flight.increment(1.0);
        in_flight.clone()
    });
    let gauge = started.unwrap_or_else(|| {
        // A recorder that cannot be cached (zero-sized) or a thread being torn down.
        worker::with_label(|label| {
            cache::counter(&WORKER_REQUESTS, [label], |c| c.increment(1));
        });
        cache::gauge(&REQUESTS_IN_FLIGHT, [endpoint.as_str()], |g| {
            g.increment(1.0);
            g.clone()
        })
    });
    GaugeGuard { gauge }
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

/// Access-log lines were dropped because the writer could not keep up.
pub fn access_log_dropped(lines: u64) {
    cache::counter(&ACCESS_LOG_DROPPED, [], |c| c.increment(lines));
}

/// Process log lines were dropped because their queue to stderr was full.
pub fn log_dropped(lines: u64) {
    cache::counter(&LOG_DROPPED, [], |c| c.increment(lines));
}

/// `n` OpenTelemetry records of `signal` (`traces`, `logs`) were lost.
pub fn otel_dropped(signal: &'static str, n: u64) {
    cache::counter(&OTEL_DROPPED, [signal], |c| c.increment(n));
}

/// The collector accepted `n` records of `signal`.
pub fn otel_exported(signal: &'static str, n: u64) {
    cache::counter(&OTEL_EXPORTED, [signal], |c| c.increment(n));
}

/// `api_key` spent `usd` US dollars on `model` (both configured names). A non-positive amount
/// adds nothing.
pub fn spend(api_key: &str, model: &str, usd: f64) {
    cache::gauge(&SPEND_USD_TOTAL, [api_key, model], |g| g.increment(usd));
}

/// A limit of `scope` and `kind` refused a request.
pub fn ratelimit_rejection(scope: RateLimitScope, kind: RateLimitKind) {
    cache::counter(
        &RATELIMIT_REJECTIONS,
        [scope.as_str(), kind.as_str()],
        |c| c.increment(1),
    );
}

/// A rate-limit check or settlement could not use the shared backend (Redis).
pub fn ratelimit_backend_error() {
    cache::counter(&RATELIMIT_BACKEND_ERRORS, [], |c| c.increment(1));
}
