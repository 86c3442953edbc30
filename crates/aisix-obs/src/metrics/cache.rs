//! The per-thread cache of registered metric handles, so a per-request emit neither allocates
//! nor touches the recorder's registry. Which families exist and how they are stored is left
//! to the catalog and the recorder.
//!
//! # Keys
//!
//! An entry is keyed by `recorder id ‖ family id ‖ (SEP ‖ label value)*`, written into one
//! reused byte buffer per thread, and looked up by `&[u8]`: a hit allocates nothing.
//!
//! The **recorder id** is the address of the recorder `metrics::with_recorder` hands out (the
//! data half of the `&dyn Recorder`), so emits follow whatever recorder the plain `metrics`
//! macros would use on this thread, including one set by `metrics::with_local_recorder`. An
//! address identifies a recorder only while nothing else can be placed there: recorders built
//! by [`Metrics::build`](super::Metrics::build) are leaked, so their addresses are never
//! reused. A foreign recorder that is dropped or moved while a thread holds handles for it may
//! hand its address to a new one; call [`clear_thread_cache`] between such recorders (tests
//! only). Zero-sized recorders (the no-op recorder) have no unique address and are never cached.
//!
//! # Cost of a hit
//!
//! Two thread-local reads (the recorder, the cache), copying the label values (tens of bytes)
//! into the buffer with a scan for the separator, a folded-multiply hash of that buffer, one hash probe and
//! a key compare; then the series' own atomics. No lock, no allocation, no shared write.
//!
//! # Bounds
//!
//! Each of the maps (counters, gauges, request bundles) holds at most
//! [`MAX_ENTRIES_PER_MAP`] entries per thread. When full, one entry is evicted; it registers
//! again on its next emit and gets the same series back from the recorder, so counting goes on.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use ::metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder};

use super::catalog::{
    Family, FamilyId, GATEWAY_OVERHEAD, REQUEST_BUNDLE, REQUEST_DURATION, REQUESTS_IN_FLIGHT,
    REQUESTS_TOTAL, TOKENS_TOTAL, UPSTREAM_TTFT, WORKER_REQUESTS,
};
use super::labels::Endpoint;
use super::worker;

/// Most entries one thread keeps per handle type before evicting.
pub const MAX_ENTRIES_PER_MAP: usize = 4096;

/// Joins label values in a cache key. A label value that contains it is never cached: it is
/// registered through the recorder on every emit instead, because two such label sets could
/// otherwise share a key.
pub const KEY_SEPARATOR: u8 = 0x1f;

/// What this thread's cache has done; for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held now, all maps together.
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Emits that bypassed the cache (separator in a label value, zero-sized recorder,
    /// re-entrant emit).
    pub uncached: u64,
}

/// This thread's cache statistics.
pub fn thread_cache_stats() -> CacheStats {
    CACHE
        .try_with(|cell| {
            cell.try_borrow().map_or_else(
                |_| CacheStats::default(),
                |cache| CacheStats {
                    entries: cache.counters.map.len()
                        + cache.gauges.map.len()
                        + cache.requests.map.len(),
                    ..cache.stats
                },
            )
        })
        .unwrap_or_default()
}

/// Forgets every handle this thread holds. Needed only when a foreign recorder's address may be
/// reused by another (see the module docs); the series themselves are untouched.
pub fn clear_thread_cache() {
    let _ = CACHE.try_with(|cell| {
        if let Ok(mut cache) = cell.try_borrow_mut() {
            cache.counters.map.clear();
            cache.gauges.map.clear();
            cache.requests.map.clear();
        }
    });
}

/// Runs `f` on the counter of `family` with `values`, cached on this thread.
#[inline]
pub(crate) fn counter<const N: usize, R>(
    family: &'static Family<N>,
    values: [&str; N],
    f: impl Fn(&Counter) -> R,
) -> R {
    with_handle(family, &values, f)
}

/// Runs `f` on the gauge of `family` with `values`, cached on this thread.
#[inline]
pub(crate) fn gauge<const N: usize, R>(
    family: &'static Family<N>,
    values: [&str; N],
    f: impl Fn(&Gauge) -> R,
) -> R {
    with_handle(family, &values, f)
}

/// The `metrics::Key` the plain macros would build for `family` with `values`.
pub(crate) fn key_of<const N: usize>(family: &'static Family<N>, values: &[&str; N]) -> Key {
    let labels: Vec<Label> = family
        .labels
        .iter()
        .zip(values)
        .map(|(name, value)| Label::new(*name, (*value).to_owned()))
        .collect();
    Key::from_parts(family.name, labels)
}

pub(crate) static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

thread_local! {
    static CACHE: RefCell<ThreadCache> = const { RefCell::new(ThreadCache::new()) };
}

struct ThreadCache {
    key: Vec<u8>,
    counters: HandleMap<Counter>,
    gauges: HandleMap<Gauge>,
    requests: HandleMap<RequestHandles>,
    stats: CacheStats,
}

impl ThreadCache {
    const fn new() -> Self {
        Self {
            key: Vec::new(),
            counters: HandleMap::new(),
            gauges: HandleMap::new(),
            requests: HandleMap::new(),
            stats: CacheStats {
                entries: 0,
                hits: 0,
                misses: 0,
                evictions: 0,
                uncached: 0,
            },
        }
    }
}

type KeyBuild = BuildHasherDefault<KeyHasher>;

struct HandleMap<H> {
    map: HashMap<Box<[u8]>, H, KeyBuild>,
}

impl<H> HandleMap<H> {
    const fn new() -> Self {
        Self {
            map: HashMap::with_hasher(BuildHasherDefault::new()),
        }
    }
}

/// Borrowed parts of the cache one handle type works on.
struct Parts<'a, H> {
    key: &'a mut Vec<u8>,
    map: &'a mut HandleMap<H>,
    stats: &'a mut CacheStats,
}

trait CachedHandle: Sized {
    fn parts(cache: &mut ThreadCache) -> Parts<'_, Self>;
    fn register<const N: usize>(
        recorder: &dyn Recorder,
        family: &'static Family<N>,
        values: &[&str; N],
    ) -> Self;
}

/// The plain handle types differ only in their map and their register call.
macro_rules! plain_handle {
    ($handle:ty, $map:ident, $register:ident) => {
        impl CachedHandle for $handle {
            fn parts(cache: &mut ThreadCache) -> Parts<'_, Self> {
                Parts {
                    key: &mut cache.key,
                    map: &mut cache.$map,
                    stats: &mut cache.stats,
                }
            }
            fn register<const N: usize>(
                recorder: &dyn Recorder,
                family: &'static Family<N>,
                values: &[&str; N],
            ) -> Self {
                recorder.$register(&key_of(family, values), &METADATA)
            }
        }
    };
}

plain_handle!(Counter, counters, register_counter);
plain_handle!(Gauge, gauges, register_gauge);

/// Every handle a finished request touches, found with one lookup keyed by the request's
/// labels: `aisix_requests_total`, `aisix_request_duration_seconds` and
/// `aisix_gateway_overhead_seconds` at once; `aisix_tokens_total` and
/// `aisix_upstream_ttft_seconds` on first use, so requests without usage or a stream add no
/// empty series. The series are the same ones the per-family emits reach.
pub(crate) struct RequestHandles {
    pub total: Counter,
    pub duration: Histogram,
    pub overhead: Histogram,
    api_key: Box<str>,
    model: Box<str>,
    provider: Box<str>,
    tokens: OnceCell<(Counter, Counter)>,
    ttft: OnceCell<Histogram>,
}

impl RequestHandles {
    /// The input and output token counters.
    pub fn tokens(&self) -> &(Counter, Counter) {
        self.tokens.get_or_init(|| {
            ::metrics::with_recorder(|recorder| {
                let kind = |kind: &str| {
                    recorder.register_counter(
                        &key_of(
                            &TOKENS_TOTAL,
                            &[&self.api_key, &self.model, &self.provider, kind],
                        ),
                        &METADATA,
                    )
                };
                (kind("input"), kind("output"))
            })
        })
    }

    /// The time-to-first-token histogram.
    pub fn ttft(&self) -> &Histogram {
        self.ttft.get_or_init(|| {
            ::metrics::with_recorder(|recorder| {
                recorder.register_histogram(
                    &key_of(&UPSTREAM_TTFT, &[&self.model, &self.provider]),
                    &METADATA,
                )
            })
        })
    }
}

impl CachedHandle for RequestHandles {
    fn parts(cache: &mut ThreadCache) -> Parts<'_, Self> {
        Parts {
            key: &mut cache.key,
            map: &mut cache.requests,
            stats: &mut cache.stats,
        }
    }

    /// `values` are `[endpoint, api_key, model, provider, status_class, outcome]`
    /// (REQUEST_BUNDLE).
    fn register<const N: usize>(
        recorder: &dyn Recorder,
        _family: &'static Family<N>,
        values: &[&str; N],
    ) -> Self {
        let get = |i: usize| values.get(i).copied().unwrap_or_default();
        let (endpoint, api_key, model, provider, status, outcome) =
            (get(0), get(1), get(2), get(3), get(4), get(5));
        Self {
            total: recorder.register_counter(
                &key_of(
                    &REQUESTS_TOTAL,
                    &[endpoint, api_key, model, provider, status, outcome],
                ),
                &METADATA,
            ),
            duration: recorder.register_histogram(
                &key_of(&REQUEST_DURATION, &[endpoint, model, provider, outcome]),
                &METADATA,
            ),
            overhead: recorder
                .register_histogram(&key_of(&GATEWAY_OVERHEAD, &[endpoint]), &METADATA),
            api_key: api_key.into(),
            model: model.into(),
            provider: provider.into(),
            tokens: OnceCell::new(),
            ttft: OnceCell::new(),
        }
    }
}

/// The handles every request's start touches on this thread: its worker's request counter and
/// the in-flight gauge of each endpoint, for one recorder.
struct Started {
    recorder: usize,
    worker_requests: Counter,
    in_flight: [Option<Gauge>; Endpoint::ALL.len()],
}

thread_local! {
    static STARTED: RefCell<Option<Started>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's worker-requests counter and `endpoint`'s in-flight gauge, kept per
/// thread by endpoint (no key, no hash); `None` when the recorder cannot be cached.
#[inline]
pub(crate) fn started<R>(endpoint: Endpoint, f: impl FnOnce(&Counter, &Gauge) -> R) -> Option<R> {
    ::metrics::with_recorder(|recorder| {
        let id = recorder_id(recorder)?;
        STARTED
            .try_with(|cell| {
                let mut slot = cell.try_borrow_mut().ok()?;
                if slot.as_ref().is_none_or(|s| s.recorder != id) {
                    let worker_requests = worker::with_label(|label| {
                        recorder.register_counter(&key_of(&WORKER_REQUESTS, &[label]), &METADATA)
                    });
                    *slot = Some(Started {
                        recorder: id,
                        worker_requests,
                        in_flight: Default::default(),
                    });
                }
                let started = slot.as_mut()?;
                let index = Endpoint::ALL.iter().position(|e| *e == endpoint)?;
                let gauge = started.in_flight.get_mut(index)?.get_or_insert_with(|| {
                    recorder.register_gauge(
                        &key_of(&REQUESTS_IN_FLIGHT, &[endpoint.as_str()]),
                        &METADATA,
                    )
                });
                Some(f(&started.worker_requests, gauge))
            })
            .ok()
            .flatten()
    })
}

/// Runs `f` on the request handles for `values` (`[endpoint, api_key, model, provider,
/// status_class, outcome]`), cached on this thread.
#[inline]
pub(crate) fn request<R>(values: [&str; 6], f: impl Fn(&RequestHandles) -> R) -> R {
    with_handle(&REQUEST_BUNDLE, &values, f)
}

#[inline]
fn with_handle<H: CachedHandle, const N: usize, R>(
    family: &'static Family<N>,
    values: &[&str; N],
    f: impl Fn(&H) -> R,
) -> R {
    ::metrics::with_recorder(|recorder| {
        if let Ok(Some(done)) = CACHE.try_with(|cell| cached(cell, recorder, family, values, &f)) {
            return done;
        }
        // Uncacheable, or this thread's storage is being torn down: register every time.
        f(&H::register(recorder, family, values))
    })
}

/// `f` applied to the cached handle, registering it on a miss; `None` when this emit must not
/// use the cache.
#[inline]
fn cached<H: CachedHandle, const N: usize, R>(
    cell: &RefCell<ThreadCache>,
    recorder: &dyn Recorder,
    family: &'static Family<N>,
    values: &[&str; N],
    f: &impl Fn(&H) -> R,
) -> Option<R> {
    // A recorder that emits while registering would find the cache borrowed: bypass it.
    let mut cache = cell.try_borrow_mut().ok()?;
    let Parts { key, map, stats } = H::parts(&mut cache);
    let Some(id) = recorder_id(recorder) else {
        stats.uncached += 1;
        return None;
    };
    if !write_key(key, id, family.id, values) {
        stats.uncached += 1;
        return None;
    }
    if let Some(handle) = map.map.get(key.as_slice()) {
        stats.hits += 1;
        return Some(f(handle));
    }
    stats.misses += 1;
    let handle = H::register(recorder, family, values);
    if map.map.len() >= MAX_ENTRIES_PER_MAP {
        // Any entry will do; the one the iterator meets first is as good as a random one.
        if let Some(victim) = map.map.keys().next().cloned() {
            map.map.remove(&victim);
            stats.evictions += 1;
        }
    }
    let handle = map.map.entry(Box::from(key.as_slice())).or_insert(handle);
    Some(f(handle))
}

/// The recorder's address, or `None` for a zero-sized recorder (no unique address).
#[inline]
fn recorder_id(recorder: &dyn Recorder) -> Option<usize> {
    if size_of_val(recorder) == 0 {
        return None;
    }
    Some((recorder as *const dyn Recorder).cast::<()>().addr())
}

/// Writes the cache key into `buf`; `false` if a label value contains the separator.
#[inline]
fn write_key(buf: &mut Vec<u8>, recorder: usize, family: FamilyId, values: &[&str]) -> bool {
    buf.clear();
    buf.extend_from_slice(&recorder.to_ne_bytes());
    buf.push(family as u8);
    for value in values {
        if value.as_bytes().contains(&KEY_SEPARATOR) {
            return false;
        }
        buf.push(KEY_SEPARATOR);
        buf.extend_from_slice(value.as_bytes());
    }
    true
}

/// A word-at-a-time folded-multiply hash (the mixing step of foldhash and wyhash): each
/// 8-byte word is xored into the state, which is multiplied by an odd constant into 128 bits
/// and folded back to 64, so every input bit reaches every output bit. Keys here come from
/// the configuration and fixed enums, not from clients, so flooding resistance buys nothing
/// and SipHash would cost several times more per emit.
#[derive(Default)]
struct KeyHasher {
    hash: u64,
}

impl KeyHasher {
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

    #[inline]
    fn add(&mut self, word: u64) {
        let product = u128::from(self.hash ^ word) * u128::from(Self::MULTIPLIER);
        // Truncations intended: the low and high halves of the product, folded.
        self.hash = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_differ_by_recorder_family_and_every_value_boundary() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        assert!(write_key(&mut a, 1, FamilyId::TokensTotal, &["ab", "c"]));
        assert!(write_key(&mut b, 1, FamilyId::TokensTotal, &["a", "bc"]));
        assert_ne!(a, b);
        assert!(write_key(&mut b, 2, FamilyId::TokensTotal, &["ab", "c"]));
        assert_ne!(a, b);
        assert!(write_key(&mut b, 1, FamilyId::UpstreamErrors, &["ab", "c"]));
        assert_ne!(a, b);
        assert!(write_key(&mut b, 1, FamilyId::TokensTotal, &["ab", "c"]));
        assert_eq!(a, b);
    }

    #[test]
    fn values_with_the_separator_are_refused() {
        let mut buf = Vec::new();
        assert!(!write_key(
            &mut buf,
            1,
            FamilyId::TokensTotal,
            &["a\u{1f}b", "c"]
        ));
    }

    #[test]
    fn key_hash_spreads_similar_keys_over_every_bit() {
        let build = KeyBuild::default();
        let keys: Vec<Vec<u8>> = (0..100_000u32)
            .map(|i| {
                let mut key = Vec::new();
                write_key(
                    &mut key,
                    0x7f00_1234_5678,
                    FamilyId::TokensTotal,
                    &[&format!("model-{i}"), "openai", "input"],
                );
                key
            })
            .collect();
        let hashes: std::collections::HashSet<u64> = keys
            .iter()
            .map(|key| build.hash_one(key.as_slice()))
            .collect();
        assert_eq!(hashes.len(), keys.len());
        // A table of 4096 slots indexes by the low bits and tags by the top 7: both must spread.
        let low: std::collections::HashSet<u64> = keys
            .iter()
            .take(4096)
            .map(|key| build.hash_one(key.as_slice()) & 0xfff)
            .collect();
        assert!(
            low.len() > 2400,
            "{} distinct low-bit slots of 4096",
            low.len()
        );
        let top: std::collections::HashSet<u64> = keys
            .iter()
            .take(4096)
            .map(|key| build.hash_one(key.as_slice()) >> 57)
            .collect();
        assert_eq!(top.len(), 128);
    }
}
