//! The limiter against a real `redis-server`: two limiters sharing one Redis are two replicas
//! enforcing one limit; Redis stopped, frozen and restarted gives the configured behaviour and
//! is used again. Each test starts its own Redis on a free loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use aisix_config::{
    BudgetPeriod, OnRedisError, RateLimit, RateLimitBackend, RateLimitConfig, RedisConfig,
    RedisUrl, SpendBudget, Usd,
};
use aisix_e2e::third_party::redis::Redis;
use aisix_gateway::limit::{Charge, Limiter, ManualClock, Refused, Reservation, Subject};
use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::labels::{RateLimitKind, RateLimitScope};

/// 2024-03-15T12:34:00Z: the start of a minute.
const MINUTE_START: u64 = 1_710_506_040_000;
/// How long a call may wait for Redis in these tests.
const REDIS_TIMEOUT: Duration = Duration::from_millis(200);
/// Far longer than anything here should take; only a hang reaches it.
const HANG: Duration = Duration::from_secs(10);

fn config(redis: &Redis, on_error: OnRedisError) -> RateLimitConfig {
    RateLimitConfig {
        backend: RateLimitBackend::Redis(RedisConfig {
            mode: aisix_config::RedisMode::Single,
            url: RedisUrl::parse(&redis.url()).unwrap(),
            on_error,
            budget_on_error: on_error,
            timeout: REDIS_TIMEOUT,
        }),
        concurrency_ttl: Duration::from_secs(300),
    }
}

/// One replica's limiter, on the clock all replicas of a test share.
async fn node(config: &RateLimitConfig, clock: &Arc<ManualClock>) -> Limiter {
    let limiter = Limiter::new(config, clock.clone()).unwrap();
    connected(&limiter).await;
    limiter
}

/// Waits until `limiter` has (re)connected to Redis.
async fn connected(limiter: &Limiter) {
    tokio::time::timeout(HANG, async {
        while !limiter.redis_connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the limiter connects to Redis");
}

fn subject(limiter: &Limiter, name: &str, limits: RateLimit) -> Arc<Subject> {
    limiter
        .subject(RateLimitScope::ApiKey, name, &limits, None)
        .unwrap()
}

/// Two replicas (limiters) on one Redis and one clock, each with the key `team` limited by
/// `limits`.
struct Replicas {
    clock: Arc<ManualClock>,
    a: Limiter,
    b: Limiter,
    on_a: Arc<Subject>,
    on_b: Arc<Subject>,
}

impl Replicas {
    async fn new(config: &RateLimitConfig, limits: RateLimit) -> Self {
        let clock = Arc::new(ManualClock::at(MINUTE_START));
        let (a, b) = (node(config, &clock).await, node(config, &clock).await);
        let (on_a, on_b) = (subject(&a, "team", limits), subject(&b, "team", limits));
        Self {
            clock,
            a,
            b,
            on_a,
            on_b,
        }
    }

    /// The replica that serves the `i`-th request when requests alternate.
    fn alternate(&self, i: usize) -> (&Limiter, &Arc<Subject>) {
        if i.is_multiple_of(2) {
            (&self.a, &self.on_a)
        } else {
            (&self.b, &self.on_b)
        }
    }
}

fn tokens(n: u64) -> Charge {
    Charge {
        tokens: n,
        spend: Usd::ZERO,
    }
}

async fn reserve(
    limiter: &Limiter,
    subject: &Arc<Subject>,
    estimate: Charge,
) -> Result<Reservation, Refused> {
    tokio::time::timeout(HANG, limiter.reserve(&[subject], estimate))
        .await
        .expect("a reservation never hangs")
}

fn refused_kind(result: Result<Reservation, Refused>) -> RateLimitKind {
    match result {
        Err(Refused::Limit(refusal)) => refusal.kind,
        Err(Refused::Unavailable) => panic!("refused as unavailable"),
        Ok(_) => panic!("admitted"),
    }
}

async fn flush(limiter: &Limiter) {
    tokio::time::timeout(HANG, limiter.flush())
        .await
        .expect("settlements reach Redis");
}

#[tokio::test]
async fn two_replicas_share_one_request_limit() {
    let redis = Redis::start();
    let limits = RateLimit {
        rpm: Some(5),
        ..RateLimit::default()
    };
    let replicas = Replicas::new(&config(&redis, OnRedisError::Allow), limits).await;

    let mut admitted = 0;
    for i in 0..8 {
        let (limiter, subject) = replicas.alternate(i);
        if let Ok(reservation) = reserve(limiter, subject, tokens(1)).await {
            admitted += 1;
            reservation.settle(tokens(1));
        }
    }
    assert_eq!(admitted, 5, "two replicas admit one limit's worth together");
    assert_eq!(
        refused_kind(reserve(&replicas.a, &replicas.on_a, tokens(1)).await),
        RateLimitKind::Rpm
    );

    replicas.clock.advance(Duration::from_secs(60));
    reserve(&replicas.b, &replicas.on_b, tokens(1))
        .await
        .expect("the next minute starts empty on every replica");
}

#[tokio::test]
async fn a_settlement_on_one_replica_returns_tokens_to_the_other() {
    let redis = Redis::start();
    let limits = RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    };
    let Replicas {
        a, b, on_a, on_b, ..
    } = Replicas::new(&config(&redis, OnRedisError::Allow), limits).await;

    let reservation = reserve(&a, &on_a, tokens(80)).await.unwrap();
    assert_eq!(
        refused_kind(reserve(&b, &on_b, tokens(70)).await),
        RateLimitKind::Tpm
    );
    reservation.settle(tokens(30));
    flush(&a).await;
    let second = reserve(&b, &on_b, tokens(70))
        .await
        .expect("the 50 unused tokens came back through Redis");
    assert_eq!(second.headroom().tokens.unwrap().remaining, 0);
}

#[tokio::test]
async fn two_replicas_share_one_concurrency_limit() {
    let redis = Redis::start();
    let limits = RateLimit {
        concurrency: Some(1),
        ..RateLimit::default()
    };
    let Replicas {
        a, b, on_a, on_b, ..
    } = Replicas::new(&config(&redis, OnRedisError::Allow), limits).await;

    let held = reserve(&a, &on_a, tokens(1)).await.unwrap();
    assert_eq!(
        refused_kind(reserve(&b, &on_b, tokens(1)).await),
        RateLimitKind::Concurrency
    );
    drop(held);
    flush(&a).await;
    let _again = reserve(&b, &on_b, tokens(1))
        .await
        .expect("the slot came back when the request ended");
}

#[tokio::test]
async fn a_concurrency_slot_of_a_replica_that_vanished_expires() {
    let redis = Redis::start();
    let mut config = config(&redis, OnRedisError::Allow);
    config.concurrency_ttl = Duration::from_secs(30);
    let limits = RateLimit {
        concurrency: Some(1),
        ..RateLimit::default()
    };
    let Replicas {
        clock,
        a,
        b,
        on_a,
        on_b,
    } = Replicas::new(&config, limits).await;

    // Replica A takes the slot and never gives it back (it crashed mid-request).
    std::mem::forget(reserve(&a, &on_a, tokens(1)).await.unwrap());
    assert_eq!(
        refused_kind(reserve(&b, &on_b, tokens(1)).await),
        RateLimitKind::Concurrency
    );
    clock.advance(Duration::from_secs(31));
    let _taken = reserve(&b, &on_b, tokens(1))
        .await
        .expect("the stale slot was taken back after concurrency_ttl_secs");
}

#[tokio::test]
async fn two_replicas_share_one_budget() {
    let redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let config = config(&redis, OnRedisError::Allow);
    let (a, b) = (node(&config, &clock).await, node(&config, &clock).await);
    let budget = Some(SpendBudget {
        usd: Usd::parse("1").unwrap(),
        period: BudgetPeriod::Day,
    });
    let key = |limiter: &Limiter| {
        limiter
            .subject(
                RateLimitScope::ApiKey,
                "team",
                &RateLimit::default(),
                budget,
            )
            .unwrap()
    };
    let (on_a, on_b) = (key(&a), key(&b));
    let spend = |usd: &str| Charge {
        tokens: 0,
        spend: Usd::parse(usd).unwrap(),
    };

    reserve(&a, &on_a, spend("0.2"))
        .await
        .unwrap()
        .settle(spend("0.7"));
    flush(&a).await;
    assert_eq!(
        refused_kind(reserve(&b, &on_b, spend("0.4")).await),
        RateLimitKind::Budget
    );
    reserve(&b, &on_b, spend("0.3"))
        .await
        .expect("what is left of the budget is admitted")
        .settle(spend("0.3"));
    flush(&b).await;
    assert_eq!(
        refused_kind(reserve(&a, &on_a, spend("0")).await),
        RateLimitKind::Budget,
        "a spent budget refuses on every replica"
    );

    clock.set(1_710_547_200_000); // the next UTC day
    reserve(&a, &on_a, spend("0.9"))
        .await
        .expect("a new period has the whole budget");
}

#[test]
fn redis_stopped_with_on_error_allow_counts_in_this_process() {
    let metrics = Metrics::build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut redis = Redis::start();
    let results = metrics::with_local_recorder(metrics.recorder(), || {
        runtime.block_on(async {
            let clock = Arc::new(ManualClock::at(MINUTE_START));
            let limiter = node(&config(&redis, OnRedisError::Allow), &clock).await;
            let key = subject(
                &limiter,
                "team",
                RateLimit {
                    rpm: Some(2),
                    ..RateLimit::default()
                },
            );
            redis.stop();
            let mut results = Vec::new();
            for _ in 0..3 {
                results.push(reserve(&limiter, &key, tokens(1)).await.map(drop));
            }
            results
        })
    });
    assert_eq!(results[..2], [Ok(()), Ok(())]);
    match &results[2] {
        Err(Refused::Limit(refusal)) => assert_eq!(
            refusal.kind,
            RateLimitKind::Rpm,
            "the limit still holds on this process's counters"
        ),
        other => panic!("expected an rpm refusal, got {other:?}"),
    }
    let page = metrics.render();
    let errors = page
        .lines()
        .find_map(|line| line.strip_prefix("aisix_ratelimit_backend_errors_total "))
        .and_then(|value| value.parse::<f64>().ok());
    assert_eq!(
        errors,
        Some(3.0),
        "one per request that could not use Redis\n{page}"
    );
}

#[tokio::test]
async fn redis_stopped_with_on_error_deny_refuses_as_unavailable() {
    let mut redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let limiter = node(&config(&redis, OnRedisError::Deny), &clock).await;
    let key = subject(
        &limiter,
        "team",
        RateLimit {
            rpm: Some(100),
            ..RateLimit::default()
        },
    );
    redis.stop();
    for _ in 0..2 {
        assert_eq!(
            reserve(&limiter, &key, tokens(1)).await.unwrap_err(),
            Refused::Unavailable
        );
    }
}

#[tokio::test]
async fn a_frozen_redis_costs_a_request_one_timeout_not_a_hang() {
    let redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let limiter = node(&config(&redis, OnRedisError::Deny), &clock).await;
    let key = subject(
        &limiter,
        "team",
        RateLimit {
            rpm: Some(100),
            ..RateLimit::default()
        },
    );
    reserve(&limiter, &key, tokens(1)).await.unwrap();

    redis.pause();
    // The connection is open and silent: only the timeout ends the call.
    assert_eq!(
        reserve(&limiter, &key, tokens(1)).await.unwrap_err(),
        Refused::Unavailable
    );
    assert!(
        !limiter.redis_connected(),
        "the silent connection was dropped"
    );
    redis.resume();
    connected(&limiter).await;
    reserve(&limiter, &key, tokens(1))
        .await
        .expect("Redis answers again");
}

#[tokio::test]
async fn redis_restarted_is_used_again_by_every_replica() {
    let mut redis = Redis::start();
    let limits = RateLimit {
        rpm: Some(3),
        ..RateLimit::default()
    };
    let replicas = Replicas::new(&config(&redis, OnRedisError::Allow), limits).await;

    redis.stop();
    // Away: each replica counts alone, so each admits the whole limit.
    for i in 0..6 {
        let (limiter, subject) = replicas.alternate(i);
        reserve(limiter, subject, tokens(1)).await.unwrap();
    }
    assert!(!replicas.a.redis_connected() && !replicas.b.redis_connected());

    redis.restart();
    connected(&replicas.a).await;
    connected(&replicas.b).await;
    replicas.clock.advance(Duration::from_secs(60));
    let mut admitted = 0;
    for i in 0..6 {
        let (limiter, subject) = replicas.alternate(i);
        if reserve(limiter, subject, tokens(1)).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 3,
        "back on Redis, the replicas share one limit again"
    );
}

#[tokio::test]
async fn settlements_made_while_redis_was_away_reach_it_when_it_is_back() {
    let redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let config = config(&redis, OnRedisError::Allow);
    let limiter = node(&config, &clock).await;
    let limits = RateLimit {
        tpm: Some(100),
        ..RateLimit::default()
    };
    let key = subject(&limiter, "team", limits);
    let reservation = reserve(&limiter, &key, tokens(90)).await.unwrap();

    redis.pause();
    // A call times out: the limiter drops its connection and counts locally meanwhile.
    let _local = reserve(&limiter, &key, tokens(1)).await.unwrap();
    assert!(!limiter.redis_connected());
    // The request reserved in Redis ends while Redis is away: its settlement waits.
    reservation.settle(tokens(10));
    redis.resume();
    flush(&limiter).await;

    let other = node(&config, &clock).await;
    let on_other = subject(&other, "team", limits);
    // 10 used, plus at most the 1 token of the call whose reply was lost.
    reserve(&other, &on_other, tokens(89))
        .await
        .expect("the 80 unused tokens went back once Redis answered");
}

/// A key's limits for the lost-reply tests: one request slot, and a request window.
fn one_slot() -> RateLimit {
    RateLimit {
        rpm: Some(100),
        tpm: Some(1_000),
        concurrency: Some(1),
        ..RateLimit::default()
    }
}

/// Reserves `tokens(10)` until admitted (the undo of a lost reply reaches Redis just after it
/// is back), then returns the reservation; panics if the slot never comes back.
async fn reserve_when_free(limiter: &Limiter, key: &Arc<Subject>) -> Reservation {
    tokio::time::timeout(HANG, async {
        loop {
            if let Ok(reservation) = limiter.reserve(&[key], tokens(10)).await {
                return reservation;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the slot of the lost reservation came back")
}

#[tokio::test]
async fn a_reservation_whose_reply_was_lost_is_undone_once_redis_answers() {
    let redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let limiter = node(&config(&redis, OnRedisError::Deny), &clock).await;
    let key = subject(&limiter, "team", one_slot());

    // Frozen: the script waits in Redis's socket and runs when it resumes, after the request
    // gave up on it. Nobody holds what it counted.
    redis.pause();
    assert_eq!(
        reserve(&limiter, &key, tokens(10)).await.unwrap_err(),
        Refused::Unavailable
    );
    redis.resume();
    connected(&limiter).await;
    flush(&limiter).await;

    let held = reserve_when_free(&limiter, &key).await;
    let headroom = *held.headroom();
    assert_eq!(
        headroom.tokens.map(|t| t.remaining),
        Some(1_000 - 10),
        "only this reservation's tokens are counted"
    );
    // Undone once, and only once: a second undo finds no marker.
    flush(&limiter).await;
    assert!(
        matches!(
            limiter.reserve(&[&key], tokens(10)).await,
            Err(Refused::Limit(_))
        ),
        "the live reservation still holds the one slot"
    );
}

#[tokio::test]
async fn a_reservation_cancelled_while_its_script_was_in_flight_is_undone() {
    let redis = Redis::start();
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let limiter = node(&config(&redis, OnRedisError::Deny), &clock).await;
    let key = subject(&limiter, "team", one_slot());

    redis.pause();
    // The client left: the reservation future is dropped mid-call.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        limiter.reserve(&[&key], tokens(10)),
    )
    .await;
    assert!(cancelled.is_err(), "cancelled before Redis answered");
    redis.resume();
    flush(&limiter).await;

    let held = reserve_when_free(&limiter, &key).await;
    assert_eq!(
        held.headroom().tokens.map(|t| t.remaining),
        Some(1_000 - 10),
        "the cancelled reservation's tokens were taken back"
    );
}
