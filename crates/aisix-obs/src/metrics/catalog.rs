//! Every metric family aisix exports: name, help, type, unit, label names and buckets.
//! Emitting lives in [`super::emit`]; storage and rendering in [`super::Metrics`].
//!
//! Label values come from configuration (model and provider names) or from the enums in
//! [`super::labels`], so every family's cardinality is bounded by the config.

use ::metrics::Unit;

/// Identifies a family inside the handle cache's keys (one byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FamilyId {
    RequestsTotal,
    RequestDuration,
    UpstreamTtft,
    TokensTotal,
    RequestsInFlight,
    UpstreamErrors,
    AuthFailures,
    BodyRejections,
    WorkerConnectionsOpen,
    WorkerRequests,
    GatewayOverhead,
    BuildInfo,
    AccessLogDropped,
    LogDropped,
    OtelDropped,
    OtelExported,
    SpendUsd,
    RateLimitRejections,
    RateLimitBackendErrors,
    ConfigReloads,
    ConfigLastReloadSuccess,
    ConfigInfo,
    UpstreamAttempts,
    Fallbacks,
    Cooldowns,
    TargetsCooling,
    ProviderKeyRefusals,
    CredentialRefreshFailures,
    TargetState,
    EtcdWatchUp,
    EtcdRevisionApplied,
    EtcdDocumentsRefused,
    /// Not a family: the cache key of [`REQUEST_BUNDLE`].
    RequestBundle,
}

/// The Prometheus type of a family. Durations are histograms with explicit buckets, never
/// summaries: summaries cannot be aggregated across workers or replicas.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Upper bounds of the buckets, strictly increasing; `+Inf` is implied.
    Histogram {
        buckets: &'static [f64],
    },
}

/// One metric family with `N` labels. The label count is part of the type, so an emit that
/// passes the wrong number of label values does not compile.
#[derive(Debug)]
pub struct Family<const N: usize> {
    pub id: FamilyId,
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    /// Label names, in the order the values are passed and rendered.
    pub labels: [&'static str; N],
}

/// A family with its label count erased, for walking the whole catalog.
#[derive(Clone, Copy, Debug)]
pub struct FamilyInfo {
    pub id: FamilyId,
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub labels: &'static [&'static str],
}

impl<const N: usize> Family<N> {
    /// This family with its label count erased.
    pub const fn info(&'static self) -> FamilyInfo {
        FamilyInfo {
            id: self.id,
            name: self.name,
            help: self.help,
            kind: self.kind,
            unit: self.unit,
            labels: &self.labels,
        }
    }
}

/// The number of labels a family has, for its type.
const fn arity<const N: usize>(_labels: [&'static str; N]) -> usize {
    N
}

/// A counter of things.
const fn counter() -> (Kind, Unit) {
    (Kind::Counter, Unit::Count)
}

/// A gauge of things.
const fn gauge() -> (Kind, Unit) {
    (Kind::Gauge, Unit::Count)
}

/// A gauge holding a Unix time.
const fn timestamp() -> (Kind, Unit) {
    (Kind::Gauge, Unit::Seconds)
}

/// Durations, counted into `buckets`.
const fn histogram(buckets: &'static [f64]) -> (Kind, Unit) {
    (Kind::Histogram { buckets }, Unit::Seconds)
}

/// Declares each family as a static, one entry a family:
/// `vis NAME = kind(FamilyId variant, "name", [labels], buckets?), "help";`, where `kind` is
/// [`counter`], [`gauge`], [`timestamp`] or [`histogram`].
macro_rules! families {
    ($(
        $(#[$attr:meta])*
        $vis:vis $static:ident = $kind:ident(
            $id:ident, $name:literal, $labels:expr $(, $buckets:expr)? $(,)?
        ), $help:literal;
    )*) => {
        $(
            $(#[$attr])*
            $vis static $static: Family<{ arity($labels) }> = {
                let (kind, unit) = $kind($($buckets)?);
                Family {
                    id: FamilyId::$id,
                    name: $name,
                    help: $help,
                    kind,
                    unit,
                    labels: $labels,
                }
            };
        )*
    };
}

/// Whole LLM calls: from a few milliseconds (cached, tiny) to the long tail of minute-long
/// generations; the last bound is above the default upstream timeout.
pub const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0,
    300.0, 600.0,
];

/// Time to first token: tens of milliseconds (a nearby mock or cache) to a minute (a cold,
/// overloaded provider), densest between 100 ms and 3 s where real providers sit.
pub const TTFT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0,
    60.0,
];

/// The gateway's own share of a request: 10 µs (a proxy's budget) up to a quarter second
/// (something is badly wrong).
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25,
];

/// The labels of `aisix_requests_total`, which the request bundle is keyed by.
const REQUEST_LABELS: [&str; 6] = [
    "endpoint",
    "api_key",
    "model",
    "provider",
    "status_class",
    "outcome",
];

families! {
    pub REQUESTS_TOTAL = counter(RequestsTotal, "aisix_requests_total", REQUEST_LABELS),
        "Requests answered, by endpoint, API key, model, provider, status class and outcome.";

    pub REQUEST_DURATION = histogram(RequestDuration, "aisix_request_duration_seconds",
            ["endpoint", "model", "provider", "outcome"], REQUEST_DURATION_BUCKETS),
        "Time from the request's arrival to the end of its response, streams included.";

    pub UPSTREAM_TTFT = histogram(UpstreamTtft, "aisix_upstream_ttft_seconds",
            ["model", "provider"], TTFT_BUCKETS),
        "Time from sending a streaming request upstream to its first token.";

    pub TOKENS_TOTAL = counter(TokensTotal, "aisix_tokens_total",
            ["api_key", "model", "provider", "kind"]),
        "Tokens reported by providers, by API key, model, provider and kind (input or output).";

    pub REQUESTS_IN_FLIGHT = gauge(RequestsInFlight, "aisix_requests_in_flight", ["endpoint"]),
        "Requests being served now, summed over every worker when scraped.";

    pub UPSTREAM_ERRORS = counter(UpstreamErrors, "aisix_upstream_errors_total",
            ["provider", "kind"]),
        "Failed calls to providers, by provider and kind of failure.";

    pub AUTH_FAILURES = counter(AuthFailures, "aisix_auth_failures_total", ["reason"]),
        "Requests refused by authentication, by reason.";

    pub BODY_REJECTIONS = counter(BodyRejections, "aisix_request_body_rejections_total",
            ["endpoint"]),
        "Requests refused because their body exceeded the size limit.";

    pub WORKER_CONNECTIONS_OPEN = gauge(WorkerConnectionsOpen, "aisix_worker_connections_open",
            ["worker"]),
        "Client connections open now, per worker thread.";

    pub WORKER_REQUESTS = counter(WorkerRequests, "aisix_worker_requests_total", ["worker"]),
        "Requests received, per worker thread; an uneven spread shows here.";

    pub GATEWAY_OVERHEAD = histogram(GatewayOverhead, "aisix_gateway_overhead_seconds",
            ["endpoint"], OVERHEAD_BUCKETS),
        "Time spent in the gateway itself, excluding the wait on the upstream.";

    pub BUILD_INFO = gauge(BuildInfo, "aisix_build_info", ["version", "mode", "workers"]),
        "Always 1; labels carry the version, serving mode and worker count.";

    pub ACCESS_LOG_DROPPED = counter(AccessLogDropped, "aisix_access_log_dropped_total", []),
        "Access-log lines dropped because stderr could not keep up.";

    pub LOG_DROPPED = counter(LogDropped, "aisix_log_dropped_total", []),
        "Process log lines dropped because their queue to stderr was full.";

    pub OTEL_DROPPED = counter(OtelDropped, "aisix_otel_dropped_total", ["signal"]),
        "OpenTelemetry records lost (spans for traces, usage events for logs): a worker's export queue was full, or the collector refused, rejected (a partial success) or missed every try.";

    pub OTEL_EXPORTED = counter(OtelExported, "aisix_otel_exported_total", ["signal"]),
        "OpenTelemetry records the collector accepted (spans for traces, usage events for logs).";

    /// A fractional counter: stored and rendered by `float_counter`, reached through gauge handles.
    pub SPEND_USD_TOTAL = counter(SpendUsd, "aisix_spend_usd_total", ["api_key", "model"]),
        "US dollars spent, by API key and model, at the prices the model entries configure.";

    pub RATELIMIT_REJECTIONS = counter(RateLimitRejections, "aisix_ratelimit_rejections_total",
            ["scope", "kind"]),
        "Requests refused by a rate limit, a concurrency limit or a budget, by the scope of the \
         limit (api_key or model) and its kind.";

    pub RATELIMIT_BACKEND_ERRORS = counter(RateLimitBackendErrors,
            "aisix_ratelimit_backend_errors_total", []),
        "Rate-limit checks and settlements that could not use the shared backend (Redis \
         unreachable, failing or too slow) and went by ratelimit.redis.on_error instead.";

    pub CONFIG_RELOADS = counter(ConfigReloads, "aisix_config_reloads_total", ["result"]),
        "Reloads of the resources file (SIGHUP or file watch), by result (success or failure).";

    pub CONFIG_LAST_RELOAD_SUCCESS = timestamp(ConfigLastReloadSuccess,
            "aisix_config_last_reload_success_timestamp_seconds", []),
        "Unix time of the last successful load of the resources file (startup included).";

    pub CONFIG_INFO = gauge(ConfigInfo, "aisix_config_info", ["hash"]),
        "Always 1; hash is the first 16 hex digits of the SHA-256 of the resources file in force.";

    pub UPSTREAM_ATTEMPTS = counter(UpstreamAttempts, "aisix_upstream_attempts_total",
            ["model", "target", "result"]),
        "Calls to direct models, by the model the client named, the direct model tried (target) and the result.";

    pub FALLBACKS = counter(Fallbacks, "aisix_fallbacks_total", ["model", "from", "to"]),
        "Requests that moved from one direct model of a group to the next, by group, from and to.";

    pub COOLDOWNS = counter(Cooldowns, "aisix_cooldowns_total", ["target"]),
        "Cooldowns started, by direct model: repeated failures (or a long Retry-After) took it out of rotation.";

    pub TARGETS_COOLING = gauge(TargetsCooling, "aisix_targets_cooling", []),
        "Direct models cooling down now, those waiting for their half-open probe included.";

    pub PROVIDER_KEY_REFUSALS = counter(ProviderKeyRefusals, "aisix_provider_key_refusals_total",
            ["provider", "reason"]),
        "Upstream refusals of a provider key, by provider key (its display name) and reason (credentials or quota).";

    pub CREDENTIAL_REFRESH_FAILURES = counter(CredentialRefreshFailures,
            "aisix_credential_refresh_failures_total", ["provider"]),
        "Failed fetches of a credential refreshed off the request path (a Vertex AI token), by provider key (its display name).";

    pub TARGET_STATE = gauge(TargetState, "aisix_target_state", ["target"]),
        "Each direct model's health: 0 available, 1 cooling down, 2 half-open (its probe is out).";

    pub ETCD_WATCH_UP = gauge(EtcdWatchUp, "aisix_etcd_watch_up", []),
        "1 while the etcd resources watch is connected and current, 0 while it connects or reconnects.";

    pub ETCD_REVISION_APPLIED = gauge(EtcdRevisionApplied, "aisix_etcd_revision_applied", []),
        "The etcd revision of the resources snapshot in force.";

    pub ETCD_DOCUMENTS_REFUSED = counter(EtcdDocumentsRefused, "aisix_etcd_documents_refused_total", []),
        "etcd documents refused because the snapshot with them did not validate (the last good one kept serving).";

    /// Not exported: names the handle-cache entry that holds every handle of a finished request
    /// (see `cache::RequestHandles`), keyed by the request's labels.
    pub(crate) REQUEST_BUNDLE = counter(RequestBundle, "aisix_request_bundle", REQUEST_LABELS),
        "";
}

/// Every family, in the order the families are documented above.
pub static CATALOG: [FamilyInfo; 32] = [
    REQUESTS_TOTAL.info(),
    REQUEST_DURATION.info(),
    UPSTREAM_TTFT.info(),
    TOKENS_TOTAL.info(),
    REQUESTS_IN_FLIGHT.info(),
    UPSTREAM_ERRORS.info(),
    AUTH_FAILURES.info(),
    BODY_REJECTIONS.info(),
    WORKER_CONNECTIONS_OPEN.info(),
    WORKER_REQUESTS.info(),
    GATEWAY_OVERHEAD.info(),
    BUILD_INFO.info(),
    ACCESS_LOG_DROPPED.info(),
    LOG_DROPPED.info(),
    OTEL_DROPPED.info(),
    OTEL_EXPORTED.info(),
    SPEND_USD_TOTAL.info(),
    RATELIMIT_REJECTIONS.info(),
    RATELIMIT_BACKEND_ERRORS.info(),
    CONFIG_RELOADS.info(),
    CONFIG_LAST_RELOAD_SUCCESS.info(),
    CONFIG_INFO.info(),
    UPSTREAM_ATTEMPTS.info(),
    FALLBACKS.info(),
    COOLDOWNS.info(),
    TARGETS_COOLING.info(),
    PROVIDER_KEY_REFUSALS.info(),
    CREDENTIAL_REFRESH_FAILURES.info(),
    TARGET_STATE.info(),
    ETCD_WATCH_UP.info(),
    ETCD_REVISION_APPLIED.info(),
    ETCD_DOCUMENTS_REFUSED.info(),
];

/// The catalog entry named `name`, if any. A linear scan: for registration, not per emit.
pub fn find(name: &str) -> Option<&'static FamilyInfo> {
    CATALOG.iter().find(|family| family.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_family_is_named_aisix_and_unique() {
        let mut names = HashSet::new();
        let mut ids = HashSet::new();
        for family in &CATALOG {
            assert!(family.name.starts_with("aisix_"), "{}", family.name);
            assert!(names.insert(family.name), "duplicate name {}", family.name);
            assert!(ids.insert(family.id as u8), "duplicate id {:?}", family.id);
            assert!(!family.help.is_empty(), "{} has no help", family.name);
        }
    }

    #[test]
    fn counters_end_in_total_and_histograms_in_seconds() {
        for family in &CATALOG {
            match family.kind {
                Kind::Counter => assert!(family.name.ends_with("_total"), "{}", family.name),
                Kind::Histogram { .. } => {
                    assert!(family.name.ends_with("_seconds"), "{}", family.name);
                    assert_eq!(family.unit, Unit::Seconds, "{}", family.name);
                }
                Kind::Gauge => assert!(!family.name.ends_with("_total"), "{}", family.name),
            }
        }
    }

    #[test]
    fn histogram_buckets_are_positive_and_strictly_increasing() {
        for family in &CATALOG {
            if let Kind::Histogram { buckets } = family.kind {
                assert!(!buckets.is_empty(), "{}", family.name);
                assert!(buckets[0] > 0.0, "{}", family.name);
                assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{}", family.name);
            }
        }
        assert!(OVERHEAD_BUCKETS[0] <= 0.000_01);
        assert!(REQUEST_DURATION_BUCKETS.last().is_some_and(|b| *b >= 300.0));
    }

    #[test]
    fn label_names_are_valid_and_unique_per_family() {
        for family in &CATALOG {
            let mut seen = HashSet::new();
            for label in family.labels {
                assert!(
                    label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                    "{label}"
                );
                assert!(*label != "le", "{} uses the reserved label le", family.name);
                assert!(seen.insert(label), "{} repeats {label}", family.name);
            }
        }
    }

    #[test]
    fn find_looks_families_up_by_name() {
        assert_eq!(
            find("aisix_tokens_total").map(|f| f.id),
            Some(FamilyId::TokensTotal)
        );
        assert!(find("aisix_nope").is_none());
    }
}
