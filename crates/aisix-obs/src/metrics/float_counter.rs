//! Counters of fractional amounts (`aisix_spend_usd_total`, in US dollars). `metrics`' counters
//! add whole numbers only, so these series are reached through gauge handles that can only
//! add, and are rendered as Prometheus counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::{Gauge, GaugeFn, Key};

use super::catalog::{self, SPEND_USD_TOTAL};
use super::histogram::{format_labels, render_family};

/// One series: the running total as `f64` bits.
// shared: a series is added to by every worker that serves its label set and read by scrapes.
#[derive(Debug, Default)]
struct FloatCounter(AtomicU64);

impl FloatCounter {
    fn value(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

impl GaugeFn for FloatCounter {
    /// Adds `value`; a negative, NaN or infinite amount is ignored (a counter never goes down).
    fn increment(&self, value: f64) {
        if !(value.is_finite() && value > 0.0) {
            return;
        }
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// Ignored: a counter never goes down.
    fn decrement(&self, _value: f64) {}

    /// Ignored: a counter is only ever added to.
    fn set(&self, _value: f64) {}
}

/// Every series of the catalog's fractional counters, for one recorder.
// shared: registration happens on any worker (cache misses) and rendering on the control thread.
#[derive(Debug, Default)]
pub(crate) struct FloatCounters {
    series: Mutex<BTreeMap<Key, Arc<FloatCounter>>>,
}

impl FloatCounters {
    /// Whether this module stores the family `name`.
    pub(crate) fn stores(name: &str) -> bool {
        name == SPEND_USD_TOTAL.name
    }

    /// The series for `key`, created at 0 on first use. Locks; called on cache misses only.
    pub(crate) fn register(&self, key: &Key) -> Gauge {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let counter = series.entry(key.clone()).or_default().clone();
        Gauge::from_arc(counter)
    }

    /// Appends every series in the Prometheus text format, families in catalog order.
    pub(crate) fn render_into(&self, out: &mut String) {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        for family in catalog::CATALOG.iter().filter(|f| Self::stores(f.name)) {
            render_family(out, family, "counter", &series, |out, key, counter| {
                let _ = writeln!(
                    out,
                    "{}{{{}}} {}",
                    family.name,
                    format_labels(key),
                    counter.value()
                );
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::metrics::Label;

    fn spend_key(api_key: &str) -> Key {
        Key::from_parts(
            SPEND_USD_TOTAL.name,
            vec![
                Label::new("api_key", api_key.to_owned()),
                Label::new("model", "m"),
            ],
        )
    }

    #[test]
    fn fractional_amounts_add_up_and_render_as_a_counter() {
        let counters = FloatCounters::default();
        let spend = counters.register(&spend_key("team-a"));
        spend.increment(0.25);
        spend.increment(0.000_5);
        counters.register(&spend_key("team-a")).increment(1.0);
        let mut out = String::new();
        counters.render_into(&mut out);
        assert!(
            out.contains("# TYPE aisix_spend_usd_total counter\n"),
            "{out}"
        );
        assert!(
            out.contains("aisix_spend_usd_total{api_key=\"team-a\",model=\"m\"} 1.2505\n"),
            "{out}"
        );
    }

    #[test]
    fn a_counter_never_goes_down() {
        let counters = FloatCounters::default();
        let spend = counters.register(&spend_key("k"));
        spend.increment(2.0);
        spend.decrement(1.0);
        spend.set(0.0);
        spend.increment(-3.0);
        spend.increment(f64::NAN);
        let mut out = String::new();
        counters.render_into(&mut out);
        assert!(out.contains("} 2\n"), "{out}");
    }
}
