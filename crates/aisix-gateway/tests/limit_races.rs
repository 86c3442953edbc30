//! Admission never passes a limit when many clients race across window boundaries: tasks on a
//! multi-thread runtime reserve against one request window (`rps` in memory; `rpm` in Redis,
//! whose keys expire in real time) while another task moves the limiter clock over window
//! boundaries, each with its own seeded interleaving, in memory, through two
//! replicas sharing a real `redis-server`, and through two replicas sharing a real three-node
//! Redis Cluster (where each reservation spans two subjects in two slots).
//!
//! A reservation is attributed to a window when the clock read the same window before and after
//! it; one that straddled a move may belong to either. In every window the reservations known to
//! be in it stay within the limit, and all of them together within the limit times the windows
//! they could fall in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aisix_config::{
    OnRedisError, RateLimit, RateLimitBackend, RateLimitConfig, RedisConfig, RedisMode, RedisUrl,
    Usd,
};
use aisix_e2e::third_party::redis::{Redis, RedisCluster};
use aisix_gateway::limit::{Charge, Clock, Limiter, ManualClock, Subject};
use aisix_obs::metrics::labels::RateLimitScope;

/// 2024-03-15T12:34:00Z: the start of a minute.
const MINUTE_START: u64 = 1_710_506_040_000;
/// Requests per window each race's limit admits.
const LIMIT: u64 = 5;
const SECOND: u64 = 1_000;
const MINUTE: u64 = 60_000;
const TASKS: u64 = 8;
const ATTEMPTS: u64 = 24;
/// Window boundaries the clock crosses during one race.
const BOUNDARIES: u64 = 3;
/// Far longer than anything here should take; only a hang reaches it.
const HANG: Duration = Duration::from_secs(10);

/// A small deterministic generator (xorshift64*), one per task and seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        Self((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_add(1)) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    async fn jitter(&mut self, most: u64) {
        for _ in 0..self.below(most) {
            tokio::task::yield_now().await;
        }
    }
}

/// One replica's view: its limiter and the subjects each request reserves on.
#[derive(Clone)]
struct Replica {
    limiter: Limiter,
    subjects: Vec<Arc<Subject>>,
}

/// `limit` requests per window of `window_ms` (a second or a minute).
fn requests_per(window_ms: u64, limit: u64) -> RateLimit {
    if window_ms == SECOND {
        RateLimit {
            rps: Some(limit),
            ..RateLimit::default()
        }
    } else {
        RateLimit {
            rpm: Some(limit),
            ..RateLimit::default()
        }
    }
}

/// The key `name` limited to [`LIMIT`] per window, and a model `name` whose own limit is never
/// the tighter one: each reservation spans both.
fn replica(limiter: Limiter, name: &str, window_ms: u64) -> Replica {
    let subjects = vec![
        limiter
            .subject(
                RateLimitScope::ApiKey,
                name,
                &requests_per(window_ms, LIMIT),
                None,
            )
            .unwrap(),
        limiter
            .subject(
                RateLimitScope::Model,
                name,
                &requests_per(window_ms, LIMIT * 100),
                None,
            )
            .unwrap(),
    ];
    Replica { limiter, subjects }
}

/// Runs one race on `replicas` (requests alternate between them) and checks the invariant.
/// Returns in how many windows requests were admitted.
async fn race(replicas: &[Replica], clock: &Arc<ManualClock>, window_ms: u64, seed: u64) -> u64 {
    let start = clock.unix_millis();
    // Attempts started so far: the clock moves as the race goes, however slow each call is.
    let started = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let replica = replicas[usize::try_from(task).unwrap() % replicas.len()].clone();
        let clock = clock.clone();
        let started = started.clone();
        tasks.spawn(async move {
            let mut rng = Rng::new(seed, task);
            let mut admitted = Vec::new();
            for _ in 0..ATTEMPTS {
                rng.jitter(8).await;
                started.fetch_add(1, Ordering::Relaxed);
                let before = clock.unix_millis() / window_ms;
                let subjects: Vec<&Arc<Subject>> = replica.subjects.iter().collect();
                let reply = tokio::time::timeout(
                    HANG,
                    replica.limiter.reserve(
                        &subjects,
                        Charge {
                            tokens: 1,
                            spend: Usd::ZERO,
                        },
                    ),
                )
                .await
                .expect("a reservation never hangs");
                let after = clock.unix_millis() / window_ms;
                if let Ok(reservation) = reply {
                    admitted.push((before, after));
                    drop(reservation);
                }
            }
            admitted
        });
    }
    let mover = {
        let clock = clock.clone();
        tokio::spawn(async move {
            let mut rng = Rng::new(seed, TASKS);
            let share = TASKS * ATTEMPTS / (BOUNDARIES + 1);
            for boundary in 1..=BOUNDARIES {
                // Around the boundary's share of the attempts, give or take a quarter share.
                let at = boundary * share - share / 4 + rng.below(share / 2);
                while started.load(Ordering::Relaxed) < at {
                    tokio::task::yield_now().await;
                }
                // Somewhere in the first 200 ms of the next window.
                clock.set(start + boundary * window_ms + rng.below(200));
            }
        })
    };
    let mut admitted = Vec::new();
    while let Some(done) = tasks.join_next().await {
        admitted.extend(done.unwrap());
    }
    mover.await.unwrap();

    let mut known: BTreeMap<u64, u64> = BTreeMap::new();
    for &(before, after) in &admitted {
        if before == after {
            *known.entry(before).or_default() += 1;
        }
    }
    for (second, count) in &known {
        assert!(
            *count <= LIMIT,
            "seed {seed}: {count} admitted in window {second}, limit {LIMIT}: {admitted:?}"
        );
    }
    let first = admitted.iter().map(|a| a.0).min().unwrap_or(0);
    let last = admitted.iter().map(|a| a.1).max().unwrap_or(0);
    let windows = if admitted.is_empty() {
        0
    } else {
        last - first + 1
    };
    assert!(
        admitted.len() as u64 <= LIMIT * windows,
        "seed {seed}: {} admitted over {windows} windows, limit {LIMIT} each",
        admitted.len()
    );
    assert!(!admitted.is_empty(), "seed {seed}: nothing admitted");
    known.len() as u64
}

/// Most races must have admitted requests in several windows, or they tested no boundary.
fn crossed_boundaries(windows: &[u64]) {
    let crossed = windows.iter().filter(|w| **w > 1).count();
    assert!(
        crossed * 2 >= windows.len(),
        "only {crossed} of {} races admitted in more than one window",
        windows.len()
    );
}

fn redis_config(url: &str, mode: RedisMode) -> RateLimitConfig {
    RateLimitConfig {
        backend: RateLimitBackend::Redis(RedisConfig {
            url: RedisUrl::parse(url.split(',').next().unwrap()).unwrap(),
            mode,
            on_error: OnRedisError::Deny,
            budget_on_error: OnRedisError::Deny,
            timeout: Duration::from_secs(2),
        }),
        concurrency_ttl: Duration::from_secs(300),
    }
}

async fn connected(limiter: &Limiter) {
    tokio::time::timeout(HANG, async {
        while !limiter.redis_connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the limiter connects to Redis");
}

/// Races `seeds` times on two limiters built from `config` over minute windows, each seed on
/// fresh subjects and in windows of its own.
async fn races_on_two_replicas(config: &RateLimitConfig, seeds: u64) {
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let (a, b) = (
        Limiter::new(config, clock.clone()).unwrap(),
        Limiter::new(config, clock.clone()).unwrap(),
    );
    connected(&a).await;
    connected(&b).await;
    let mut windows = Vec::new();
    for seed in 0..seeds {
        clock.set(MINUTE_START + seed * (BOUNDARIES + 2) * MINUTE);
        let name = format!("team-{seed}");
        let replicas = [
            replica(a.clone(), &name, MINUTE),
            replica(b.clone(), &name, MINUTE),
        ];
        windows.push(race(&replicas, &clock, MINUTE, seed).await);
    }
    crossed_boundaries(&windows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_never_pass_a_limit_across_window_boundaries_in_memory() {
    let clock = Arc::new(ManualClock::at(MINUTE_START));
    let limiter = Limiter::new(&RateLimitConfig::default(), clock.clone()).unwrap();
    let mut windows = Vec::new();
    for seed in 0..200 {
        clock.set(MINUTE_START + seed * MINUTE);
        let replicas = [replica(limiter.clone(), &format!("team-{seed}"), SECOND)];
        windows.push(race(&replicas, &clock, SECOND, seed).await);
    }
    crossed_boundaries(&windows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_on_two_replicas_never_pass_a_limit_shared_through_redis() {
    let redis = Redis::start();
    races_on_two_replicas(&redis_config(&redis.url(), RedisMode::Single), 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_clients_on_two_replicas_never_pass_a_limit_shared_through_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let nodes = cluster
        .nodes
        .iter()
        .map(|node| RedisUrl::parse(&node.url()).unwrap())
        .collect();
    races_on_two_replicas(
        &redis_config(&cluster.urls(), RedisMode::Cluster(nodes)),
        10,
    )
    .await;
}
