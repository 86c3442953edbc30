#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A cache hit allocates nothing. Its own test binary: the counting allocator below is global,
//! and counts only the allocations of the thread that asks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Duration;

use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::cache::thread_cache_stats;
use aisix_obs::metrics::emit::{self, RequestLabels};
use aisix_obs::metrics::labels::*;

struct CountingAllocator;

thread_local! {
    // `const` and without a destructor: touching it never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// The production setup: one global recorder, this thread registered as a worker.
fn installed() -> Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    let metrics = *METRICS.get_or_init(|| Metrics::install().unwrap());
    metrics.register_worker(Worker::Tpc(0));
    metrics
}

const ROUNDS: u64 = 1000;

/// Warms `emit` up (registration, key buffer, map growth), then requires `ROUNDS` more emits
/// to be cache hits that allocate nothing. `hits` is how many cache hits one emit makes.
fn assert_hits_allocate_nothing(family: &str, hits: u64, mut emit: impl FnMut()) {
    let _metrics = installed();
    emit();
    emit();
    let before = thread_cache_stats();
    let allocations = allocations_during(|| {
        for _ in 0..ROUNDS {
            emit();
        }
    });
    let after = thread_cache_stats();
    assert_eq!(
        allocations, 0,
        "{family}: {allocations} allocations in {ROUNDS} cached emits"
    );
    assert_eq!(
        after.misses, before.misses,
        "{family}: the emits were not all hits"
    );
    assert_eq!(
        after.uncached, before.uncached,
        "{family}: the emits bypassed the cache"
    );
    assert_eq!(after.hits - before.hits, hits * ROUNDS, "{family}");
}

#[test]
fn the_allocation_counter_sees_this_thread() {
    assert!(allocations_during(|| drop(black_box(Vec::<u8>::with_capacity(16)))) >= 1);
}

#[test]
fn a_miss_allocates_so_the_hit_tests_can_fail() {
    let _metrics = installed();
    let n = allocations_during(|| {
        emit::upstream_error("never-seen-before", UpstreamErrorKind::Connect)
    });
    assert!(n > 0);
}

#[test]
fn upstream_error_hit_allocates_nothing() {
    assert_hits_allocate_nothing("upstream_errors_total", 1, || {
        emit::upstream_error("openai", UpstreamErrorKind::Timeout);
    });
}

#[test]
fn auth_failure_hit_allocates_nothing() {
    assert_hits_allocate_nothing("auth_failures_total", 1, || {
        emit::auth_failure(AuthFailure::Unknown)
    });
}

#[test]
fn body_rejected_hit_allocates_nothing() {
    assert_hits_allocate_nothing("request_body_rejections_total", 1, || {
        emit::body_rejected(Endpoint::Completions);
    });
}

#[test]
fn spend_hit_allocates_nothing() {
    assert_hits_allocate_nothing("spend_usd_total", 1, || {
        emit::spend(black_box("team-a"), black_box("gpt-4o"), 0.000_25);
    });
}

#[test]
fn ratelimit_emits_hit_allocate_nothing() {
    assert_hits_allocate_nothing("ratelimit families", 2, || {
        emit::ratelimit_rejection(RateLimitScope::Model, RateLimitKind::Concurrency);
        emit::ratelimit_backend_error();
    });
}

#[test]
fn worker_connection_hit_allocates_nothing() {
    assert_hits_allocate_nothing("worker_connections_open", 1, || {
        drop(black_box(emit::worker_connection()))
    });
}

#[test]
fn a_whole_request_allocates_nothing_once_warm() {
    let labels = RequestLabels {
        endpoint: Endpoint::Messages,
        api_key: "team-a",
        model: "claude",
        provider: "anthropic",
        status: StatusClass::from_status(200),
        outcome: Outcome::Success,
    };
    let facts = emit::RequestFacts {
        duration: Duration::from_secs(2),
        overhead: Duration::from_micros(50),
        tokens: Some((10, 20)),
        ttft: Some(Duration::from_millis(300)),
    };
    // As the gateway emits: the connection, the request's start, its end.
    assert_hits_allocate_nothing("one request's emits", 2, || {
        let _conn = emit::worker_connection();
        let _in_flight = emit::request_started(labels.endpoint);
        emit::request(&labels, &facts);
    });
}

#[test]
fn request_bundle_hit_allocates_nothing() {
    let labels = RequestLabels {
        endpoint: Endpoint::ChatCompletions,
        api_key: "team-a",
        model: "gpt-4o",
        provider: "openai-main",
        status: StatusClass::from_status(200),
        outcome: Outcome::Success,
    };
    let facts = emit::RequestFacts {
        duration: Duration::from_millis(700),
        overhead: Duration::from_micros(25),
        tokens: Some((31, 17)),
        ttft: Some(Duration::from_millis(90)),
    };
    assert_hits_allocate_nothing("request bundle", 1, || {
        emit::request(black_box(&labels), black_box(&facts));
    });
}

#[test]
fn request_started_hit_allocates_nothing() {
    // Its handles are kept per thread by endpoint, outside the cache's maps: no hits counted.
    assert_hits_allocate_nothing("request started", 0, || {
        drop(black_box(emit::request_started(Endpoint::Completions)));
    });
}
