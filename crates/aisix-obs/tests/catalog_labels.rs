#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! For every cached family: a base label set plus one variant per label, each differing from
//! the base in that label only, must render as exactly one series per distinct set. A label
//! missing from the handle cache's key would fold a variant into the base's series.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::emit::{self, RequestLabels};
use aisix_obs::metrics::labels::*;
use common::{Labels, labels, local, series};

/// Expected series of a family: each emitted label set projected onto the family's labels,
/// with how many times it was emitted (or the summed amount).
fn expect(emitted: &[(Labels, f64)], family_labels: &[&str]) -> BTreeMap<Labels, f64> {
    let mut out = BTreeMap::new();
    for (set, amount) in emitted {
        let projected: Labels = family_labels
            .iter()
            .map(|name| ((*name).to_owned(), set[*name].clone()))
            .collect();
        *out.entry(projected).or_insert(0.0) += amount;
    }
    out
}

#[test]
fn upstream_errors_keep_provider_and_kind_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let sets = [
        ("p1", UpstreamErrorKind::Connect),
        ("p2", UpstreamErrorKind::Connect),
        ("p1", UpstreamErrorKind::StreamCut),
    ];
    local(&metrics, || {
        for (provider, kind) in sets {
            emit::upstream_error(provider, kind);
        }
    });
    let emitted: Vec<_> = sets
        .iter()
        .map(|(p, k)| (labels(&[("provider", p), ("kind", k.as_str())]), 1.0))
        .collect();
    let page = metrics.render();
    let errors = series(&page, "aisix_upstream_errors_total");
    assert_eq!(errors.len(), 3, "{page}");
    assert_eq!(errors, expect(&emitted, &["provider", "kind"]));
}

#[test]
fn auth_failures_keep_the_reason_in_the_key() {
    let metrics = Metrics::build().unwrap();
    local(&metrics, || {
        emit::auth_failure(AuthFailure::Missing);
        emit::auth_failure(AuthFailure::ModelNotAllowed);
    });
    let page = metrics.render();
    let failures = series(&page, "aisix_auth_failures_total");
    let expected: BTreeMap<_, _> = [
        (labels(&[("reason", "missing")]), 1.0),
        (labels(&[("reason", "model_not_allowed")]), 1.0),
    ]
    .into();
    assert_eq!(failures, expected, "{page}");
}

#[test]
fn body_rejections_keep_the_endpoint_in_the_key() {
    let metrics = Metrics::build().unwrap();
    local(&metrics, || {
        emit::body_rejected(Endpoint::ChatCompletions);
        emit::body_rejected(Endpoint::Embeddings);
    });
    let page = metrics.render();
    let rejections = series(&page, "aisix_request_body_rejections_total");
    let expected: BTreeMap<_, _> = [
        (labels(&[("endpoint", "chat_completions")]), 1.0),
        (labels(&[("endpoint", "embeddings")]), 1.0),
    ]
    .into();
    assert_eq!(rejections, expected, "{page}");
}

#[test]
fn in_flight_keeps_the_endpoint_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let guards = local(&metrics, || {
        [
            emit::request_started(Endpoint::ChatCompletions),
            emit::request_started(Endpoint::Health),
        ]
    });
    let page = metrics.render();
    let in_flight = series(&page, "aisix_requests_in_flight");
    let expected: BTreeMap<_, _> = Endpoint::ALL
        .iter()
        .map(|e| {
            let held = matches!(e, Endpoint::ChatCompletions | Endpoint::Health);
            (
                labels(&[("endpoint", e.as_str())]),
                if held { 1.0 } else { 0.0 },
            )
        })
        .collect();
    assert_eq!(in_flight, expected, "{page}");
    drop(guards);
}

/// Each worker thread counts its connections and requests under its own `worker` label.
#[test]
fn worker_families_keep_the_worker_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let on_worker = |worker: Worker, requests: usize| {
        let metrics = &metrics;
        move || {
            local(metrics, || {
                metrics.register_worker(worker);
                for _ in 0..requests {
                    drop(emit::request_started(Endpoint::ChatCompletions));
                }
                emit::worker_connection()
            })
        }
    };
    let guards = std::thread::scope(|scope| {
        let first = scope.spawn(on_worker(Worker::Tpc(1), 1));
        let second = scope.spawn(on_worker(Worker::Tpc(2), 2));
        [first.join().unwrap(), second.join().unwrap()]
    });
    let page = metrics.render();
    let tpc = |n: &str| labels(&[("worker", n)]);
    let connections: BTreeMap<_, _> = [(tpc("tpc-1"), 1.0), (tpc("tpc-2"), 1.0)].into();
    let requests: BTreeMap<_, _> = [(tpc("tpc-1"), 1.0), (tpc("tpc-2"), 2.0)].into();
    assert_eq!(
        series(&page, "aisix_worker_connections_open"),
        connections,
        "{page}"
    );
    assert_eq!(
        series(&page, "aisix_worker_requests_total"),
        requests,
        "{page}"
    );
    drop(guards);
}

/// The one-lookup request bundle keys on every label too: each variant set lands in its own
/// series of every family it feeds, projected onto that family's labels.
#[test]
fn the_request_bundle_keeps_every_label_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let base = RequestLabels {
        endpoint: Endpoint::ChatCompletions,
        api_key: "team-a",
        model: "m1",
        provider: "p1",
        status: StatusClass::Success,
        outcome: Outcome::Success,
    };
    let sets = [
        base,
        RequestLabels {
            endpoint: Endpoint::Messages,
            ..base
        },
        RequestLabels {
            api_key: "team-b",
            ..base
        },
        RequestLabels {
            model: "m2",
            ..base
        },
        RequestLabels {
            provider: "p2",
            ..base
        },
        RequestLabels {
            status: StatusClass::ServerError,
            ..base
        },
        RequestLabels {
            outcome: Outcome::UpstreamError,
            ..base
        },
    ];
    let facts = emit::RequestFacts {
        duration: Duration::from_millis(10),
        overhead: Duration::from_micros(20),
        tokens: Some((3, 5)),
        ttft: Some(Duration::from_millis(4)),
    };
    local(&metrics, || {
        for set in &sets {
            emit::request(set, &facts);
        }
    });
    let emitted: Vec<(Labels, f64)> = sets
        .iter()
        .map(|s| {
            let set = labels(&[
                ("endpoint", s.endpoint.as_str()),
                ("api_key", s.api_key),
                ("model", s.model),
                ("provider", s.provider),
                ("status_class", s.status.as_str()),
                ("outcome", s.outcome.as_str()),
            ]);
            (set, 1.0)
        })
        .collect();
    let page = metrics.render();
    assert_eq!(
        series(&page, "aisix_requests_total"),
        expect(
            &emitted,
            &[
                "endpoint",
                "api_key",
                "model",
                "provider",
                "status_class",
                "outcome"
            ]
        )
    );
    // A family without a label folds the variants that differ only in it: the duration has no
    // status class or API key (5 series), the overhead only the endpoint (2).
    assert_eq!(
        series(&page, "aisix_request_duration_seconds"),
        expect(&emitted, &["endpoint", "model", "provider", "outcome"])
    );
    assert_eq!(
        series(&page, "aisix_gateway_overhead_seconds"),
        expect(&emitted, &["endpoint"])
    );
    let tokens_emitted: Vec<(Labels, f64)> = emitted
        .iter()
        .flat_map(|(set, _)| {
            ["input", "output"].map(|kind| {
                let mut set = set.clone();
                set.insert("kind".to_owned(), kind.to_owned());
                (set, if kind == "input" { 3.0 } else { 5.0 })
            })
        })
        .collect();
    assert_eq!(
        series(&page, "aisix_tokens_total"),
        expect(&tokens_emitted, &["api_key", "model", "provider", "kind"])
    );
    assert_eq!(
        series(&page, "aisix_upstream_ttft_seconds"),
        expect(&emitted, &["model", "provider"])
    );
}

/// A request without usage or a stream adds no token or TTFT series.
#[test]
fn the_request_bundle_registers_tokens_and_ttft_only_when_used() {
    let metrics = Metrics::build().unwrap();
    let labels = RequestLabels {
        endpoint: Endpoint::ChatCompletions,
        api_key: "team-a",
        model: UNROUTED,
        provider: UNROUTED,
        status: StatusClass::ClientError,
        outcome: Outcome::ClientError,
    };
    local(&metrics, || {
        emit::request(&labels, &emit::RequestFacts::default())
    });
    let page = metrics.render();
    assert_eq!(series(&page, "aisix_requests_total").len(), 1, "{page}");
    assert!(series(&page, "aisix_tokens_total").is_empty(), "{page}");
    assert!(
        series(&page, "aisix_upstream_ttft_seconds").is_empty(),
        "{page}"
    );
}

/// `request_started` counts the worker's requests and holds one in-flight series per endpoint,
/// and follows a change of recorder on the same thread.
#[test]
fn request_started_counts_per_worker_and_endpoint_and_follows_the_recorder() {
    let (first, second) = (Metrics::build().unwrap(), Metrics::build().unwrap());
    local(&first, || {
        first.register_worker(Worker::Tpc(4));
        let held = emit::request_started(Endpoint::ChatCompletions);
        drop(emit::request_started(Endpoint::Embeddings));
        drop(emit::request_started(Endpoint::ChatCompletions));
        let page = first.render();
        let in_flight = series(&page, "aisix_requests_in_flight");
        assert_eq!(
            in_flight[&labels(&[("endpoint", "chat_completions")])],
            1.0,
            "{page}"
        );
        assert_eq!(
            in_flight[&labels(&[("endpoint", "embeddings")])],
            0.0,
            "{page}"
        );
        drop(held);
    });
    local(&second, || drop(emit::request_started(Endpoint::Models)));
    let page = first.render();
    assert_eq!(
        series(&page, "aisix_worker_requests_total")[&labels(&[("worker", "tpc-4")])],
        3.0,
        "{page}"
    );
    assert_eq!(
        series(&page, "aisix_requests_in_flight")[&labels(&[("endpoint", "chat_completions")])],
        0.0
    );
    let other = second.render();
    assert_eq!(
        series(&other, "aisix_worker_requests_total")[&labels(&[("worker", "tpc-4")])],
        1.0,
        "{other}"
    );
}

#[test]
fn spend_keeps_api_key_and_model_in_the_key_and_adds_fractions() {
    let metrics = Metrics::build().unwrap();
    local(&metrics, || {
        emit::spend("a", "m1", 0.25);
        emit::spend("b", "m1", 1.0);
        emit::spend("a", "m2", 0.5);
        emit::spend("a", "m1", 0.125);
    });
    let page = metrics.render();
    let spend = series(&page, "aisix_spend_usd_total");
    let expected: BTreeMap<_, _> = [
        (labels(&[("api_key", "a"), ("model", "m1")]), 0.375),
        (labels(&[("api_key", "b"), ("model", "m1")]), 1.0),
        (labels(&[("api_key", "a"), ("model", "m2")]), 0.5),
    ]
    .into();
    assert_eq!(spend, expected, "{page}");
}

#[test]
fn ratelimit_rejections_keep_scope_and_kind_in_the_key() {
    let metrics = Metrics::build().unwrap();
    local(&metrics, || {
        emit::ratelimit_rejection(RateLimitScope::ApiKey, RateLimitKind::Rpm);
        emit::ratelimit_rejection(RateLimitScope::Model, RateLimitKind::Rpm);
        emit::ratelimit_rejection(RateLimitScope::ApiKey, RateLimitKind::Budget);
        emit::ratelimit_rejection(RateLimitScope::ApiKey, RateLimitKind::Rpm);
    });
    let page = metrics.render();
    let rejections = series(&page, "aisix_ratelimit_rejections_total");
    let expected: BTreeMap<_, _> = [
        (labels(&[("scope", "api_key"), ("kind", "rpm")]), 2.0),
        (labels(&[("scope", "model"), ("kind", "rpm")]), 1.0),
        (labels(&[("scope", "api_key"), ("kind", "budget")]), 1.0),
    ]
    .into();
    assert_eq!(rejections, expected, "{page}");
}

#[test]
fn ratelimit_backend_errors_read_zero_before_the_first_error() {
    let metrics = Metrics::build().unwrap();
    let before = series(&metrics.render(), "aisix_ratelimit_backend_errors_total");
    assert_eq!(before, [(Labels::new(), 0.0)].into());
    local(&metrics, emit::ratelimit_backend_error);
    let after = series(&metrics.render(), "aisix_ratelimit_backend_errors_total");
    assert_eq!(after, [(Labels::new(), 1.0)].into());
}
