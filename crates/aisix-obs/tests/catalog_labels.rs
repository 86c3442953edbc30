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
fn requests_total_and_duration_keep_every_label_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let base = RequestLabels {
        endpoint: Endpoint::ChatCompletions,
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
    local(&metrics, || {
        for set in &sets {
            emit::request_finished(set, Duration::from_millis(10));
        }
    });
    let emitted: Vec<(Labels, f64)> = sets
        .iter()
        .map(|s| {
            let set = labels(&[
                ("endpoint", s.endpoint.as_str()),
                ("model", s.model),
                ("provider", s.provider),
                ("status_class", s.status.as_str()),
                ("outcome", s.outcome.as_str()),
            ]);
            (set, 1.0)
        })
        .collect();
    let page = metrics.render();
    let total = series(&page, "aisix_requests_total");
    assert_eq!(total.len(), 6, "{page}");
    assert_eq!(
        total,
        expect(
            &emitted,
            &["endpoint", "model", "provider", "status_class", "outcome"]
        )
    );
    // The duration has no status label: the status variant joins the base's series.
    let duration = series(&page, "aisix_request_duration_seconds");
    assert_eq!(duration.len(), 5, "{page}");
    assert_eq!(
        duration,
        expect(&emitted, &["endpoint", "model", "provider", "outcome"])
    );
}

#[test]
fn tokens_keep_model_provider_and_kind_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let sets = [("m1", "p1"), ("m2", "p1"), ("m1", "p2")];
    local(&metrics, || {
        for (model, provider) in sets {
            emit::tokens(model, provider, 3, 5);
        }
    });
    let mut emitted = Vec::new();
    for (model, provider) in sets {
        emitted.push((
            labels(&[("model", model), ("provider", provider), ("kind", "input")]),
            3.0,
        ));
        emitted.push((
            labels(&[("model", model), ("provider", provider), ("kind", "output")]),
            5.0,
        ));
    }
    let page = metrics.render();
    let tokens = series(&page, "aisix_tokens_total");
    assert_eq!(tokens.len(), 6, "{page}");
    assert_eq!(tokens, expect(&emitted, &["model", "provider", "kind"]));
}

#[test]
fn ttft_keeps_model_and_provider_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let sets = [("m1", "p1"), ("m2", "p1"), ("m1", "p2")];
    local(&metrics, || {
        for (model, provider) in sets {
            emit::ttft(model, provider, Duration::from_millis(200));
        }
    });
    let emitted: Vec<_> = sets
        .iter()
        .map(|(m, p)| (labels(&[("model", m), ("provider", p)]), 1.0))
        .collect();
    let page = metrics.render();
    let ttft = series(&page, "aisix_upstream_ttft_seconds");
    assert_eq!(ttft.len(), 3, "{page}");
    assert_eq!(ttft, expect(&emitted, &["model", "provider"]));
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
fn overhead_keeps_the_endpoint_in_the_key() {
    let metrics = Metrics::build().unwrap();
    local(&metrics, || {
        emit::overhead(Endpoint::ChatCompletions, Duration::from_micros(30));
        emit::overhead(Endpoint::Models, Duration::from_micros(30));
    });
    let page = metrics.render();
    let overhead = series(&page, "aisix_gateway_overhead_seconds");
    let expected: BTreeMap<_, _> = [
        (labels(&[("endpoint", "chat_completions")]), 1.0),
        (labels(&[("endpoint", "models")]), 1.0),
    ]
    .into();
    assert_eq!(overhead, expected, "{page}");
}

#[test]
fn in_flight_keeps_the_endpoint_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let guards = local(&metrics, || {
        [
            emit::in_flight(Endpoint::ChatCompletions),
            emit::in_flight(Endpoint::Health),
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

#[test]
fn worker_families_keep_the_worker_in_the_key() {
    let metrics = Metrics::build().unwrap();
    let guards = local(&metrics, || {
        metrics.register_worker(Worker::Tpc(1));
        let first = emit::worker_connection();
        emit::worker_request();
        metrics.register_worker(Worker::Tpc(2));
        let second = emit::worker_connection();
        emit::worker_request();
        emit::worker_request();
        [first, second]
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
            &["endpoint", "model", "provider", "status_class", "outcome"]
        )
    );
    assert_eq!(
        series(&page, "aisix_request_duration_seconds").len(),
        5,
        "{page}"
    );
    assert_eq!(
        series(&page, "aisix_gateway_overhead_seconds").len(),
        2,
        "{page}"
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
        expect(&tokens_emitted, &["model", "provider", "kind"])
    );
    assert_eq!(
        series(&page, "aisix_upstream_ttft_seconds").len(),
        3,
        "{page}"
    );
}

/// A request without usage or a stream adds no token or TTFT series.
#[test]
fn the_request_bundle_registers_tokens_and_ttft_only_when_used() {
    let metrics = Metrics::build().unwrap();
    let labels = RequestLabels {
        endpoint: Endpoint::ChatCompletions,
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

/// Emitting through the bundle renders exactly what the per-family emits render.
#[test]
fn the_request_bundle_renders_the_same_page_as_per_family_emits() {
    let (bundled, separate) = (Metrics::build().unwrap(), Metrics::build().unwrap());
    let labels = RequestLabels {
        endpoint: Endpoint::Completions,
        model: "gpt-4o",
        provider: "openai-main",
        status: StatusClass::Success,
        outcome: Outcome::Success,
    };
    let facts = emit::RequestFacts {
        duration: Duration::from_millis(850),
        overhead: Duration::from_micros(35),
        tokens: Some((12, 40)),
        ttft: Some(Duration::from_millis(120)),
    };
    for _ in 0..3 {
        local(&bundled, || emit::request(&labels, &facts));
        local(&separate, || {
            emit::request_finished(&labels, facts.duration);
            emit::overhead(labels.endpoint, facts.overhead);
            emit::tokens(labels.model, labels.provider, 12, 40);
            emit::ttft(labels.model, labels.provider, Duration::from_millis(120));
        });
    }
    let sorted = |page: String| {
        let mut samples = common::samples(&page);
        samples.sort_by_key(|s| (s.name.clone(), format!("{:?}", s.labels)));
        samples
    };
    assert_eq!(sorted(bundled.render()), sorted(separate.render()));
}

/// `request_started` reaches the same series as `worker_request` and `in_flight`, one in-flight
/// series per endpoint, and follows a change of recorder on the same thread.
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
