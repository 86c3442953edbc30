#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The thread-local handle cache: bounded, isolated per recorder, safe with odd label values,
//! shared series across threads, and indistinguishable from the plain `metrics` macros.

mod common;

use std::sync::Barrier;
use std::time::Duration;

use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::cache::{MAX_ENTRIES_PER_MAP, thread_cache_stats};
use aisix_obs::metrics::catalog::CATALOG;
use aisix_obs::metrics::emit::{self, RequestFacts, RequestLabels};
use aisix_obs::metrics::labels::*;
use common::{labels, local, series, sorted_lines, value};

fn chat_ok<'a>(model: &'a str, provider: &'a str) -> RequestLabels<'a> {
    RequestLabels {
        endpoint: Endpoint::ChatCompletions,
        api_key: "team-a",
        model,
        provider,
        status: StatusClass::Success,
        outcome: Outcome::Success,
    }
}

/// A finished request that reported this usage.
fn with_tokens(input: u64, output: u64) -> RequestFacts {
    RequestFacts {
        tokens: Some((input, output)),
        ..RequestFacts::default()
    }
}

#[test]
fn evicted_entries_register_again_into_the_same_series() {
    let metrics = Metrics::build().unwrap();
    let providers: Vec<String> = (0..MAX_ENTRIES_PER_MAP + 100)
        .map(|i| format!("p{i}"))
        .collect();
    let before = thread_cache_stats();
    local(&metrics, || {
        for _ in 0..2 {
            for provider in &providers {
                emit::upstream_error(provider, UpstreamErrorKind::Timeout);
            }
        }
    });
    let after = thread_cache_stats();
    assert!(
        after.evictions - before.evictions >= 100,
        "{before:?} -> {after:?}"
    );
    assert!(after.entries <= 3 * MAX_ENTRIES_PER_MAP, "{after:?}");
    // More misses than label sets: some sets were evicted and registered again.
    assert!(
        after.misses - before.misses > providers.len() as u64,
        "{before:?} -> {after:?}"
    );

    let page = metrics.render();
    let counts = series(&page, "aisix_upstream_errors_total");
    assert_eq!(counts.len(), providers.len());
    for provider in &providers {
        let set = labels(&[("provider", provider), ("kind", "timeout")]);
        assert_eq!(counts.get(&set), Some(&2.0), "{provider}");
    }
}

#[test]
fn two_recorders_in_one_process_never_share_handles() {
    let a = Metrics::build().unwrap();
    let b = Metrics::build().unwrap();
    // Same thread, same label sets: only the recorder differs between the cache keys.
    local(&a, || {
        emit::request(&chat_ok("m", "p"), &with_tokens(1, 10))
    });
    local(&b, || {
        emit::request(&chat_ok("m", "p"), &with_tokens(100, 1000));
        emit::request(&chat_ok("m", "p"), &with_tokens(0, 0));
    });
    local(&a, || {
        emit::request(&chat_ok("m", "p"), &with_tokens(1, 10))
    });
    let b_guard = local(&b, || emit::request_started(Endpoint::Embeddings));

    let (page_a, page_b) = (a.render(), b.render());
    let input = labels(&[
        ("api_key", "team-a"),
        ("model", "m"),
        ("provider", "p"),
        ("kind", "input"),
    ]);
    let output = labels(&[
        ("api_key", "team-a"),
        ("model", "m"),
        ("provider", "p"),
        ("kind", "output"),
    ]);
    assert_eq!(value(&page_a, "aisix_tokens_total", &input), Some(2.0));
    assert_eq!(value(&page_a, "aisix_tokens_total", &output), Some(20.0));
    assert_eq!(value(&page_b, "aisix_tokens_total", &input), Some(100.0));
    assert_eq!(value(&page_b, "aisix_tokens_total", &output), Some(1000.0));
    let chat = labels(&[
        ("endpoint", "chat_completions"),
        ("api_key", "team-a"),
        ("model", "m"),
        ("provider", "p"),
        ("status_class", "2xx"),
        ("outcome", "success"),
    ]);
    assert_eq!(value(&page_a, "aisix_requests_total", &chat), Some(2.0));
    assert_eq!(value(&page_b, "aisix_requests_total", &chat), Some(2.0));

    let embeddings = labels(&[("endpoint", "embeddings")]);
    assert_eq!(
        value(&page_a, "aisix_requests_in_flight", &embeddings),
        Some(0.0)
    );
    assert_eq!(
        value(&page_b, "aisix_requests_in_flight", &embeddings),
        Some(1.0)
    );
    drop(b_guard);
    assert_eq!(
        value(&b.render(), "aisix_requests_in_flight", &embeddings),
        Some(0.0)
    );
}

#[test]
fn label_value_with_the_separator_is_counted_uncached_and_kept_apart() {
    let metrics = Metrics::build().unwrap();
    let before = thread_cache_stats();
    // Joined with the separator, both label sets spell the same bytes: a\x1fb\x1fc.
    local(&metrics, || {
        for _ in 0..3 {
            emit::request(&chat_ok("a\u{1f}b", "c"), &with_tokens(1, 0));
        }
        for _ in 0..2 {
            emit::request(&chat_ok("a", "b\u{1f}c"), &with_tokens(5, 0));
        }
        emit::request(&chat_ok("a", "b"), &with_tokens(7, 0));
    });
    let after = thread_cache_stats();
    assert_eq!(
        after.uncached - before.uncached,
        5,
        "{before:?} -> {after:?}"
    );

    let page = metrics.render();
    let input = |model: &str, provider: &str| {
        value(
            &page,
            "aisix_tokens_total",
            &labels(&[
                ("api_key", "team-a"),
                ("model", model),
                ("provider", provider),
                ("kind", "input"),
            ]),
        )
    };
    assert_eq!(input("a\u{1f}b", "c"), Some(3.0));
    assert_eq!(input("a", "b\u{1f}c"), Some(10.0));
    assert_eq!(input("a", "b"), Some(7.0));
}

#[test]
fn emits_from_many_threads_sum_into_one_series() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 1000;
    let metrics = Metrics::build().unwrap();
    let held = Barrier::new(THREADS + 1);
    let release = Barrier::new(THREADS + 1);

    let in_flight_while_held = std::thread::scope(|scope| {
        for worker in 0..THREADS {
            let (metrics, held, release) = (&metrics, &held, &release);
            scope.spawn(move || {
                local(metrics, || {
                    metrics.register_worker(Worker::Shared);
                    for _ in 0..PER_THREAD {
                        let _request = emit::request_started(Endpoint::ChatCompletions);
                        let facts = RequestFacts {
                            duration: Duration::from_millis(worker as u64),
                            overhead: Duration::from_micros(20),
                            ..RequestFacts::default()
                        };
                        emit::request(&chat_ok("m", "p"), &facts);
                    }
                    let guard = emit::request_started(Endpoint::ChatCompletions);
                    held.wait();
                    release.wait();
                    drop(guard);
                });
            });
        }
        held.wait();
        let page = metrics.render();
        release.wait();
        page
    });

    let chat = labels(&[("endpoint", "chat_completions")]);
    assert_eq!(
        value(&in_flight_while_held, "aisix_requests_in_flight", &chat),
        Some(THREADS as f64)
    );
    let page = metrics.render();
    let total = (THREADS * PER_THREAD) as f64;
    assert_eq!(value(&page, "aisix_requests_in_flight", &chat), Some(0.0));
    let request = labels(&[
        ("endpoint", "chat_completions"),
        ("api_key", "team-a"),
        ("model", "m"),
        ("provider", "p"),
        ("status_class", "2xx"),
        ("outcome", "success"),
    ]);
    assert_eq!(value(&page, "aisix_requests_total", &request), Some(total));
    let duration = labels(&[
        ("endpoint", "chat_completions"),
        ("model", "m"),
        ("provider", "p"),
        ("outcome", "success"),
    ]);
    assert_eq!(
        value(&page, "aisix_request_duration_seconds_count", &duration),
        Some(total)
    );
    assert_eq!(
        value(&page, "aisix_gateway_overhead_seconds_count", &chat),
        Some(total)
    );
    assert_eq!(
        value(
            &page,
            "aisix_worker_requests_total",
            &labels(&[("worker", "shared")])
        ),
        Some(total + THREADS as f64)
    );
}

/// The same traffic, told once through the typed emits and once through `metrics`' macros.
#[test]
fn cached_emits_render_the_same_page_as_plain_macros() {
    let cached = Metrics::build().unwrap();
    let plain = Metrics::build().unwrap();
    let requests = [
        (
            Endpoint::ChatCompletions,
            "gpt-4o",
            "openai",
            200,
            Outcome::Success,
            0.8,
        ),
        (
            Endpoint::ChatCompletions,
            "gpt-4o",
            "openai",
            200,
            Outcome::Success,
            1.6,
        ),
        (
            Endpoint::Messages,
            "claude",
            "anthropic",
            429,
            Outcome::RateLimited,
            0.002,
        ),
        (
            Endpoint::Embeddings,
            "embed",
            "openai",
            502,
            Outcome::UpstreamError,
            30.0,
        ),
        (
            Endpoint::Other,
            UNROUTED,
            UNROUTED,
            404,
            Outcome::ClientError,
            0.0001,
        ),
    ];
    for metrics in [&cached, &plain] {
        metrics.set_build_info("1.2.3", Mode::ThreadPerCore, 2);
        metrics.register_worker(Worker::Tpc(7));
    }

    // As the gateway emits: a connection, and per request its start and its end.
    let held = local(&cached, || {
        let conn = emit::worker_connection();
        let in_flight = emit::request_started(Endpoint::Messages);
        for (endpoint, model, provider, status, outcome, seconds) in requests {
            let started = emit::request_started(endpoint);
            emit::request(
                &RequestLabels {
                    endpoint,
                    api_key: "team-a",
                    model,
                    provider,
                    status: StatusClass::from_status(status),
                    outcome,
                },
                &RequestFacts {
                    duration: Duration::from_secs_f64(seconds),
                    overhead: Duration::from_secs_f64(seconds / 1000.0),
                    tokens: Some((3, 4)),
                    ttft: Some(Duration::from_secs_f64(seconds / 2.0)),
                },
            );
            drop(started);
        }
        emit::upstream_error("openai", UpstreamErrorKind::Status);
        emit::upstream_error("openai", UpstreamErrorKind::StreamCut);
        emit::auth_failure(AuthFailure::Expired);
        emit::body_rejected(Endpoint::Completions);
        emit::access_log_dropped(2);
        emit::log_dropped(4);
        emit::otel_dropped("traces", 2);
        emit::otel_exported("logs", 3);
        emit::upstream_attempt("chat", "primary", Outcome::UpstreamError);
        emit::upstream_attempt("chat", "backup", Outcome::Success);
        emit::fallback("chat", "primary", "backup");
        emit::cooldown("primary");
        emit::cooldown("backup");
        emit::targets_cooling(true);
        emit::targets_cooling(true);
        emit::targets_cooling(false);
        emit::provider_key_refused("p1", "quota");
        emit::credential_refresh_failed("vtx");
        emit::target_state("primary", 2);
        emit::spend("team-a", "gpt-4o", 0.5);
        emit::ratelimit_rejection(RateLimitScope::ApiKey, RateLimitKind::Tpm);
        emit::ratelimit_backend_error();
        (conn, in_flight)
    });

    local(&plain, || {
        ::metrics::gauge!("aisix_worker_connections_open", "worker" => "tpc-7").increment(1.0);
        ::metrics::counter!("aisix_worker_requests_total", "worker" => "tpc-7").increment(1);
        ::metrics::gauge!("aisix_requests_in_flight", "endpoint" => "messages").increment(1.0);
        for (endpoint, model, provider, status, outcome, seconds) in requests {
            let (endpoint, outcome) = (endpoint.as_str(), outcome.as_str());
            let status = StatusClass::from_status(status).as_str();
            ::metrics::counter!("aisix_worker_requests_total", "worker" => "tpc-7").increment(1);
            ::metrics::gauge!("aisix_requests_in_flight", "endpoint" => endpoint).increment(1.0);
            ::metrics::gauge!("aisix_requests_in_flight", "endpoint" => endpoint).decrement(1.0);
            ::metrics::counter!("aisix_requests_total",
                "endpoint" => endpoint, "api_key" => "team-a", "model" => model,
                "provider" => provider, "status_class" => status, "outcome" => outcome)
            .increment(1);
            ::metrics::histogram!("aisix_request_duration_seconds",
                "endpoint" => endpoint, "model" => model, "provider" => provider, "outcome" => outcome)
            .record(Duration::from_secs_f64(seconds).as_secs_f64());
            ::metrics::histogram!("aisix_gateway_overhead_seconds", "endpoint" => endpoint)
                .record(Duration::from_secs_f64(seconds / 1000.0).as_secs_f64());
            ::metrics::counter!("aisix_tokens_total", "api_key" => "team-a", "model" => model, "provider" => provider, "kind" => "input")
                .increment(3);
            ::metrics::counter!("aisix_tokens_total", "api_key" => "team-a", "model" => model, "provider" => provider, "kind" => "output")
                .increment(4);
            ::metrics::histogram!("aisix_upstream_ttft_seconds", "model" => model, "provider" => provider)
                .record(Duration::from_secs_f64(seconds / 2.0).as_secs_f64());
        }
        ::metrics::counter!("aisix_upstream_errors_total", "provider" => "openai", "kind" => "status").increment(1);
        ::metrics::counter!("aisix_upstream_errors_total", "provider" => "openai", "kind" => "stream_cut")
            .increment(1);
        ::metrics::counter!("aisix_auth_failures_total", "reason" => "expired").increment(1);
        ::metrics::counter!("aisix_request_body_rejections_total", "endpoint" => "completions")
            .increment(1);
        ::metrics::counter!("aisix_access_log_dropped_total").increment(2);
        ::metrics::counter!("aisix_log_dropped_total").increment(4);
        ::metrics::counter!("aisix_otel_dropped_total", "signal" => "traces").increment(2);
        ::metrics::counter!("aisix_otel_exported_total", "signal" => "logs").increment(3);
        ::metrics::counter!("aisix_upstream_attempts_total",
            "model" => "chat", "target" => "primary", "result" => "upstream_error")
        .increment(1);
        ::metrics::counter!("aisix_upstream_attempts_total",
            "model" => "chat", "target" => "backup", "result" => "success")
        .increment(1);
        ::metrics::counter!("aisix_fallbacks_total", "model" => "chat", "from" => "primary", "to" => "backup")
            .increment(1);
        ::metrics::counter!("aisix_cooldowns_total", "target" => "primary").increment(1);
        ::metrics::counter!("aisix_cooldowns_total", "target" => "backup").increment(1);
        ::metrics::gauge!("aisix_targets_cooling").increment(1.0);
        ::metrics::counter!("aisix_provider_key_refusals_total", "provider" => "p1", "reason" => "quota")
            .increment(1);
        ::metrics::counter!("aisix_credential_refresh_failures_total", "provider" => "vtx")
            .increment(1);
        ::metrics::gauge!("aisix_target_state", "target" => "primary").set(2.0);
        ::metrics::gauge!("aisix_spend_usd_total", "api_key" => "team-a", "model" => "gpt-4o")
            .increment(0.5);
        ::metrics::counter!("aisix_ratelimit_rejections_total", "scope" => "api_key", "kind" => "tpm")
            .increment(1);
        ::metrics::counter!("aisix_ratelimit_backend_errors_total").increment(1);
    });

    // The control thread's families are set through `Metrics`, never through the cache.
    for metrics in [&cached, &plain] {
        metrics.config_loaded(
            "0123456789abcdef",
            std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        metrics.config_reload(ReloadResult::Failure);
        metrics.etcd_watch_up(true);
        metrics.etcd_revision_applied(7);
        metrics.etcd_documents_refused(1);
    }
    let (cached_page, plain_page) = (cached.render(), plain.render());
    assert_eq!(sorted_lines(&cached_page), sorted_lines(&plain_page));
    // Every family made it onto the page, each described once.
    for family in &CATALOG {
        let type_line = format!("# TYPE {} ", family.name);
        let help_line = format!("# HELP {} ", family.name);
        assert_eq!(
            cached_page.matches(&type_line).count(),
            1,
            "{}\n{cached_page}",
            family.name
        );
        assert_eq!(
            cached_page.matches(&help_line).count(),
            1,
            "{}\n{cached_page}",
            family.name
        );
    }
    drop(held);
}

#[test]
fn a_registered_worker_shows_at_zero_before_its_first_connection() {
    let metrics = Metrics::build().unwrap();
    metrics.register_worker(Worker::Tpc(3));
    let tpc3 = labels(&[("worker", "tpc-3")]);
    let page = metrics.render();
    assert_eq!(
        value(&page, "aisix_worker_requests_total", &tpc3),
        Some(0.0)
    );
    assert_eq!(
        value(&page, "aisix_worker_connections_open", &tpc3),
        Some(0.0)
    );

    let conn = local(&metrics, || {
        let conn = emit::worker_connection();
        drop(emit::request_started(Endpoint::ChatCompletions));
        drop(emit::request_started(Endpoint::Models));
        conn
    });
    let page = metrics.render();
    assert_eq!(
        value(&page, "aisix_worker_connections_open", &tpc3),
        Some(1.0)
    );
    assert_eq!(
        value(&page, "aisix_worker_requests_total", &tpc3),
        Some(2.0)
    );
    drop(conn);
    assert_eq!(
        value(&metrics.render(), "aisix_worker_connections_open", &tpc3),
        Some(0.0)
    );
}

#[test]
fn a_thread_that_never_registered_counts_as_unregistered() {
    let metrics = Metrics::build().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| local(&metrics, || drop(emit::request_started(Endpoint::Models))));
    });
    let page = metrics.render();
    assert_eq!(
        value(
            &page,
            "aisix_worker_requests_total",
            &labels(&[("worker", "unregistered")])
        ),
        Some(1.0)
    );
}

#[test]
fn every_endpoint_shows_zero_in_flight_before_traffic() {
    let metrics = Metrics::build().unwrap();
    let page = metrics.render();
    let in_flight = series(&page, "aisix_requests_in_flight");
    assert_eq!(in_flight.len(), Endpoint::ALL.len(), "{page}");
    assert!(in_flight.values().all(|v| *v == 0.0), "{page}");
}

#[test]
fn dropped_access_log_and_process_log_lines_read_zero_before_any_drop() {
    let metrics = Metrics::build().unwrap();
    let page = metrics.render();
    for family in ["aisix_access_log_dropped_total", "aisix_log_dropped_total"] {
        assert_eq!(
            value(&page, family, &labels(&[])),
            Some(0.0),
            "{family}\n{page}"
        );
    }
}

#[test]
fn build_info_is_one_with_version_mode_and_workers() {
    let metrics = Metrics::build().unwrap();
    metrics.set_build_info("0.1.0", Mode::Shared, 8);
    let set = labels(&[("version", "0.1.0"), ("mode", "shared"), ("workers", "8")]);
    assert_eq!(
        value(&metrics.render(), "aisix_build_info", &set),
        Some(1.0)
    );
}

#[test]
fn upkeep_keeps_the_page_unchanged() {
    let metrics = Metrics::build().unwrap();
    let facts = RequestFacts {
        tokens: Some((1, 2)),
        ttft: Some(Duration::from_millis(300)),
        ..RequestFacts::default()
    };
    local(&metrics, || emit::request(&chat_ok("m", "p"), &facts));
    let before = metrics.render();
    metrics.run_upkeep();
    assert_eq!(sorted_lines(&before), sorted_lines(&metrics.render()));
}
