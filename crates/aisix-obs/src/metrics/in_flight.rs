//! `aisix_requests_in_flight` without a process-wide contended value: every registration of a
//! series gets its own shard, so each thread (through its handle cache) moves only its own
//! atomic, and a scrape sums the shards.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::{Gauge, GaugeFn, Key};

/// Fold dead shards into the series' retired total once a series holds this many, so code that
/// registers on every emit (the plain `gauge!` macro) cannot grow the list without bound.
const COMPACT_AT: usize = 256;

/// One thread's share of an in-flight series (`f64` bits). Written by the thread that
/// registered it, and by guards that thread created when they drop, possibly elsewhere.
#[derive(Debug, Default)]
struct Shard(AtomicU64);

impl Shard {
    fn add(&self, delta: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + delta).to_bits())
            });
    }

    fn value(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

impl GaugeFn for Shard {
    fn increment(&self, value: f64) {
        self.add(value);
    }

    fn decrement(&self, value: f64) {
        self.add(-value);
    }

    /// Sets this shard only: the series is the sum of all shards. Nothing in aisix sets an
    /// in-flight gauge; this keeps the trait's contract for a caller that does.
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
struct Series {
    shards: Vec<Arc<Shard>>,
    /// What shards that nobody can reach any more held when they were folded away.
    retired: f64,
}

impl Series {
    /// Drops every shard only this list still holds (no handle, no guard), keeping its value.
    fn compact(&mut self) {
        let mut retired = self.retired;
        self.shards.retain(|shard| {
            let reachable = Arc::strong_count(shard) > 1;
            if !reachable {
                retired += shard.value();
            }
            reachable
        });
        self.retired = retired;
    }

    fn total(&self) -> f64 {
        self.retired + self.shards.iter().map(|shard| shard.value()).sum::<f64>()
    }
}

/// The in-flight series of one recorder.
// shared: shards are created by any worker (cache misses) and summed by scrapes.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    series: Mutex<BTreeMap<Key, Series>>,
}

impl InFlight {
    /// Makes `key` render (as 0) before any request has touched it.
    pub(crate) fn declare(&self, key: &Key) {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series.entry(key.clone()).or_default();
    }

    /// A new shard of `key`'s series. Locks; called on cache misses only.
    pub(crate) fn register(&self, key: &Key) -> Gauge {
        let shard = Arc::new(Shard::default());
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = series.entry(key.clone()).or_default();
        if entry.shards.len() >= COMPACT_AT {
            entry.compact();
        }
        entry.shards.push(Arc::clone(&shard));
        Gauge::from_arc(shard)
    }

    /// Every series with the sum of its shards, folding away shards nobody holds any more.
    pub(crate) fn totals(&self) -> Vec<(Key, f64)> {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series
            .iter_mut()
            .map(|(key, series)| {
                series.compact();
                (key.clone(), series.total())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_parts(
            "aisix_requests_in_flight",
            vec![::metrics::Label::new("endpoint", "models")],
        )
    }

    #[test]
    fn shards_sum_and_dropped_shards_keep_their_value() {
        let in_flight = InFlight::default();
        let a = in_flight.register(&key());
        let b = in_flight.register(&key());
        a.increment(2.0);
        b.increment(1.0);
        b.decrement(1.0);
        assert_eq!(in_flight.totals(), vec![(key(), 2.0)]);
        drop(a);
        drop(b);
        assert_eq!(in_flight.totals(), vec![(key(), 2.0)]);
        let series = in_flight.series.lock().unwrap();
        assert!(series.values().all(|s| s.shards.is_empty()));
    }

    #[test]
    fn registering_on_every_emit_stays_bounded() {
        let in_flight = InFlight::default();
        for _ in 0..10 * COMPACT_AT {
            in_flight.register(&key()).increment(1.0);
            in_flight.register(&key()).decrement(1.0);
        }
        assert_eq!(in_flight.totals(), vec![(key(), 0.0)]);
        let series = in_flight.series.lock().unwrap();
        assert!(series.values().all(|s| s.shards.len() <= COMPACT_AT));
    }
}
