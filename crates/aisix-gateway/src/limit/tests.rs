//! The limiter on its in-memory counters, with a hand-moved clock: windows and periods roll
//! over without sleeping.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aisix_config::{BudgetPeriod, RateLimit, SpendBudget, Usd};
use aisix_obs::metrics::labels::{RateLimitKind, RateLimitScope};

use super::*;

/// 2024-03-15T12:34:00Z: the start of a minute.
const MINUTE_START: u64 = 1_710_506_040_000;

fn block<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(future)
}

struct Fixture {
    clock: Arc<ManualClock>,
    limiter: Limiter,
}

impl Fixture {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::at(MINUTE_START));
        let limiter = Limiter::in_memory(clock.clone());
        Self { clock, limiter }
    }

    fn key(&self, limits: RateLimit) -> Arc<Subject> {
        self.limiter
            .subject(RateLimitScope::ApiKey, "team-a", &limits, None)
            .expect("limited")
    }

    fn model(&self, limits: RateLimit) -> Arc<Subject> {
        self.limiter
            .subject(RateLimitScope::Model, "gpt-4o", &limits, None)
            .expect("limited")
    }

    fn reserve(&self, subjects: &[&Arc<Subject>], tokens: u64) -> Result<Reservation, Refused> {
        block(self.limiter.reserve(
            subjects,
            Charge {
                tokens,
                spend: Usd::ZERO,
            },
        ))
    }
}

fn refusal(result: Result<Reservation, Refused>) -> Refusal {
    match result {
        Err(Refused::Limit(refusal)) => refusal,
        Err(Refused::Unavailable) => panic!("refused as unavailable"),
        Ok(_) => panic!("admitted"),
    }
}

fn tokens(n: u64) -> Charge {
    Charge {
        tokens: n,
        spend: Usd::ZERO,
    }
}

#[test]
fn an_entry_without_limits_has_no_subject() {
    let fixture = Fixture::new();
    assert!(
        fixture
            .limiter
            .subject(RateLimitScope::ApiKey, "free", &RateLimit::default(), None)
            .is_none()
    );
    let reservation = block(fixture.limiter.reserve(&[], tokens(10))).unwrap();
    assert!(!reservation.is_limited());
}

#[test]
fn requests_past_rpm_are_refused_until_the_minute_ends() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        rpm: Some(3),
        ..RateLimit::default()
    });
    fixture.clock.advance(Duration::from_secs(20));
    for _ in 0..3 {
        fixture.reserve(&[&key], 10).unwrap();
    }
    let refused = refusal(fixture.reserve(&[&key], 10));
    assert_eq!(refused.kind, RateLimitKind::Rpm);
    assert_eq!(refused.scope, RateLimitScope::ApiKey);
    assert_eq!((refused.limit, refused.used), (3, 3));
    assert_eq!(refused.retry_after, Some(Duration::from_secs(40)));
    let requests = refused.headroom.requests.unwrap();
    assert_eq!(requests.remaining, 0);

    fixture.clock.advance(Duration::from_secs(40));
    fixture
        .reserve(&[&key], 10)
        .expect("a new minute starts empty");
}

#[test]
fn every_request_window_counts_on_its_own() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        rps: Some(2),
        rph: Some(3),
        ..RateLimit::default()
    });
    fixture.reserve(&[&key], 1).unwrap();
    fixture.reserve(&[&key], 1).unwrap();
    assert_eq!(
        refusal(fixture.reserve(&[&key], 1)).kind,
        RateLimitKind::Rps
    );
    fixture.clock.advance(Duration::from_secs(1));
    fixture.reserve(&[&key], 1).unwrap();
    fixture.clock.advance(Duration::from_secs(1));
    assert_eq!(
        refusal(fixture.reserve(&[&key], 1)).kind,
        RateLimitKind::Rph
    );
}

#[test]
fn a_token_reservation_that_would_cross_tpm_is_refused_up_front() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    let _first = fixture.reserve(&[&key], 60).unwrap();
    let refused = refusal(fixture.reserve(&[&key], 60));
    assert_eq!(refused.kind, RateLimitKind::Tpm);
    assert_eq!((refused.limit, refused.used), (100, 60));
    let _second = fixture
        .reserve(&[&key], 40)
        .expect("what still fits is admitted");
}

#[test]
fn settling_returns_the_unused_part_of_the_reservation() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    let reservation = fixture.reserve(&[&key], 80).unwrap();
    assert_eq!(reservation.headroom().tokens.unwrap().remaining, 20);
    reservation.settle(tokens(30));
    let next = fixture
        .reserve(&[&key], 70)
        .expect("the 50 unused tokens came back");
    assert_eq!(next.headroom().tokens.unwrap().remaining, 0);
}

#[test]
fn usage_beyond_the_reservation_is_charged_when_it_settles() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    fixture.reserve(&[&key], 10).unwrap().settle(tokens(95));
    let refused = refusal(fixture.reserve(&[&key], 10));
    assert_eq!(refused.used, 95);
}

#[test]
fn an_unsettled_reservation_stays_charged() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    drop(fixture.reserve(&[&key], 70).unwrap());
    assert_eq!(refusal(fixture.reserve(&[&key], 31)).used, 70);
}

#[test]
fn a_settlement_after_the_window_ended_returns_nothing_and_charges_the_excess_to_the_new_one() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    let short = fixture.reserve(&[&key], 50).unwrap();
    let long = fixture.reserve(&[&key], 50).unwrap();
    fixture.clock.advance(Duration::from_secs(60));
    short.settle(tokens(0));
    long.settle(tokens(80));
    assert_eq!(
        refusal(fixture.reserve(&[&key], 71)).used,
        30,
        "only the 30 tokens beyond the old reservation count in the new minute"
    );
}

#[test]
fn an_estimate_above_the_limit_reserves_the_whole_limit() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    });
    let big = fixture
        .reserve(&[&key], 5_000)
        .expect("an empty window admits it");
    assert_eq!(refusal(fixture.reserve(&[&key], 1)).used, 100);
    big.settle(tokens(40));
    fixture.reserve(&[&key], 60).unwrap();
}

#[test]
fn concurrency_holds_until_a_request_ends_and_its_refusal_has_no_retry_after() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        concurrency: Some(2),
        ..RateLimit::default()
    });
    let first = fixture.reserve(&[&key], 1).unwrap();
    let second = fixture.reserve(&[&key], 1).unwrap();
    let refused = refusal(fixture.reserve(&[&key], 1));
    assert_eq!(refused.kind, RateLimitKind::Concurrency);
    assert_eq!(refused.retry_after, None);
    assert_eq!((refused.limit, refused.used), (2, 2));
    drop(first);
    let third = fixture
        .reserve(&[&key], 1)
        .expect("a dropped reservation frees its slot");
    second.settle(tokens(5));
    let _fourth = fixture.reserve(&[&key], 1).expect("a settled one too");
    drop(third);
}

#[test]
fn a_reservation_is_all_or_nothing_across_key_and_model() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        rpm: Some(10),
        tpm: Some(1_000),
        concurrency: Some(5),
        ..RateLimit::default()
    });
    let model = fixture.model(RateLimit {
        rpm: Some(1),
        ..RateLimit::default()
    });
    let _admitted = fixture.reserve(&[&key, &model], 100).unwrap();
    let refused = refusal(fixture.reserve(&[&key, &model], 100));
    assert_eq!(refused.scope, RateLimitScope::Model);
    assert_eq!(&*refused.name, "gpt-4o");
    // What the key counted for the refused request was taken back.
    let headroom = fixture.reserve(&[&key], 100).unwrap().headroom;
    assert_eq!(headroom.requests.unwrap().remaining, 8);
    assert_eq!(headroom.tokens.unwrap().remaining, 800);
}

#[test]
fn headers_report_the_tightest_window_of_each_unit() {
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        rpm: Some(100),
        rpd: Some(5),
        tpm: Some(1_000),
        ..RateLimit::default()
    });
    let model = fixture.model(RateLimit {
        tpd: Some(500),
        ..RateLimit::default()
    });
    let reservation = fixture.reserve(&[&key, &model], 100).unwrap();
    let headroom = reservation.headroom();
    let requests = headroom.requests.unwrap();
    assert_eq!((requests.limit, requests.remaining), (5, 4));
    assert_eq!(
        requests.reset_in,
        Duration::from_millis(1_710_547_200_000 - MINUTE_START)
    );
    let tokens = headroom.tokens.unwrap();
    assert_eq!((tokens.limit, tokens.remaining), (500, 400));
}

fn budget_key(fixture: &Fixture, usd: &str, period: BudgetPeriod) -> Arc<Subject> {
    fixture
        .limiter
        .subject(
            RateLimitScope::ApiKey,
            "team-a",
            &RateLimit::default(),
            Some(SpendBudget {
                usd: Usd::parse(usd).unwrap(),
                period,
            }),
        )
        .expect("limited")
}

fn spend(usd: &str) -> Charge {
    Charge {
        tokens: 0,
        spend: Usd::parse(usd).unwrap(),
    }
}

#[test]
fn a_budget_stops_a_key_and_the_next_period_starts_it_again() {
    let fixture = Fixture::new();
    let key = budget_key(&fixture, "1", BudgetPeriod::Day);
    block(fixture.limiter.reserve(&[&key], spend("0.6")))
        .unwrap()
        .settle(spend("0.7"));
    let refused = refusal(block(fixture.limiter.reserve(&[&key], spend("0.4"))));
    assert_eq!(refused.kind, RateLimitKind::Budget);
    assert_eq!(refused.period, Some(BudgetPeriod::Day));
    assert_eq!((refused.limit, refused.used), (1_000_000, 700_000));
    // 2024-03-16T00:00:00Z is the next day.
    assert_eq!(
        refused.retry_after,
        Some(Duration::from_millis(1_710_547_200_000 - MINUTE_START))
    );
    block(fixture.limiter.reserve(&[&key], spend("0.3"))).expect("what fits is admitted");

    fixture.clock.set(1_710_547_200_000);
    block(fixture.limiter.reserve(&[&key], spend("0.9"))).expect("a new day has the whole budget");
}

#[test]
fn a_spent_budget_refuses_even_a_request_estimated_free() {
    let fixture = Fixture::new();
    let key = budget_key(&fixture, "0.5", BudgetPeriod::Month);
    block(fixture.limiter.reserve(&[&key], spend("0.1")))
        .unwrap()
        .settle(spend("0.5"));
    let refused = refusal(block(fixture.limiter.reserve(&[&key], spend("0"))));
    assert_eq!(refused.kind, RateLimitKind::Budget);
}

#[test]
fn counters_outlive_a_reload_of_the_same_entry_and_a_new_limit_applies_to_them() {
    let fixture = Fixture::new();
    let before = fixture.key(RateLimit {
        rpm: Some(2),
        ..RateLimit::default()
    });
    fixture.reserve(&[&before], 1).unwrap();
    fixture.reserve(&[&before], 1).unwrap();
    // A reload builds new subjects while the old snapshot is still alive.
    let same = fixture.key(RateLimit {
        rpm: Some(2),
        ..RateLimit::default()
    });
    assert_eq!(refusal(fixture.reserve(&[&same], 1)).used, 2);
    let raised = fixture.key(RateLimit {
        rpm: Some(3),
        ..RateLimit::default()
    });
    drop((before, same));
    fixture.reserve(&[&raised], 1).expect("the third of three");
    assert_eq!(refusal(fixture.reserve(&[&raised], 1)).used, 3);
}

#[test]
fn an_entry_removed_by_a_reload_starts_afresh_if_it_comes_back() {
    let fixture = Fixture::new();
    let limits = RateLimit {
        rpm: Some(1),
        ..RateLimit::default()
    };
    let first = fixture.key(limits);
    fixture.reserve(&[&first], 1).unwrap();
    drop(first);
    let again = fixture.key(limits);
    fixture.reserve(&[&again], 1).expect("fresh counters");
}

#[test]
fn keys_and_models_of_the_same_name_count_apart() {
    let fixture = Fixture::new();
    let limits = RateLimit {
        rpm: Some(1),
        ..RateLimit::default()
    };
    let key = fixture
        .limiter
        .subject(RateLimitScope::ApiKey, "same", &limits, None)
        .unwrap();
    let model = fixture
        .limiter
        .subject(RateLimitScope::Model, "same", &limits, None)
        .unwrap();
    fixture.reserve(&[&key], 1).unwrap();
    fixture.reserve(&[&model], 1).unwrap();
}

#[test]
fn many_threads_never_admit_more_than_the_limit() {
    const THREADS: usize = 8;
    let fixture = Fixture::new();
    let key = fixture.key(RateLimit {
        rpm: Some(1_000),
        tpm: Some(10_000),
        concurrency: Some(64),
        ..RateLimit::default()
    });
    let admitted: Vec<Reservation> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    (0..100)
                        .filter_map(|_| fixture.reserve(&[&key], 37).ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Concurrency binds first: 64 held at once, 64 × 37 = 2368 tokens.
    assert_eq!(admitted.len(), 64);
    drop(admitted);
    let admitted: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    (0..100)
                        .filter(|_| {
                            fixture
                                .reserve(&[&key], 37)
                                .map(|r| r.settle(tokens(37)))
                                .is_ok()
                        })
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // The first round stays charged (dropped unsettled): 2368 of 10000 tokens; what is left
    // fits 206 more requests of 37.
    assert_eq!(admitted, (10_000 - 64 * 37) / 37);
}

#[test]
fn a_refusal_is_counted_by_scope_and_kind() {
    let metrics = aisix_obs::metrics::Metrics::build().unwrap();
    let fixture = Fixture::new();
    let model = fixture.model(RateLimit {
        concurrency: Some(1),
        ..RateLimit::default()
    });
    ::metrics::with_local_recorder(metrics.recorder(), || {
        let _held = fixture.reserve(&[&model], 1).unwrap();
        let _ = fixture.reserve(&[&model], 1);
        let _ = fixture.reserve(&[&model], 1);
    });
    let page = metrics.render();
    assert!(
        page.contains("aisix_ratelimit_rejections_total{scope=\"model\",kind=\"concurrency\"} 2\n"),
        "{page}"
    );
}
