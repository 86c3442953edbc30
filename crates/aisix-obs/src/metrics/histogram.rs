//! Fixed-bucket histograms for the catalog's duration families, and their text rendering.
//!
//! The Prometheus exporter's own histogram handle appends every sample to a shared lock-free
//! list (allocating a block every 64 samples) and folds the list into buckets at upkeep. Ours
//! counts straight into buckets: a record is a bucket search over at most ~20 bounds, one
//! `fetch_add` and one compare-and-swap on the sum, and never allocates.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::{Histogram, HistogramFn, Key};

use super::catalog::{self, FamilyInfo, Kind};

/// One histogram series: a counter per bucket (the last is `+Inf`) and the sum of samples.
// shared: a series is written by every worker that serves its label set and read by scrapes.
#[derive(Debug)]
pub(crate) struct BucketHistogram {
    bounds: &'static [f64],
    /// Non-cumulative: `counts[i]` holds samples in `(bounds[i-1], bounds[i]]`.
    counts: Box<[AtomicU64]>,
    /// `f64` bits.
    sum: AtomicU64,
}

impl BucketHistogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0.0_f64.to_bits()),
        }
    }

    fn add(&self, value: f64, n: u64) {
        // The first bound not below `value`; NaN belongs to no finite bucket, only to +Inf.
        let bucket = self
            .bounds
            .partition_point(|bound| *bound < value || value.is_nan());
        if let Some(count) = self.counts.get(bucket) {
            count.fetch_add(n, Ordering::Relaxed);
        }
        let add = value * n as f64;
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + add).to_bits())
            });
    }

    /// Cumulative bucket counts, the total count and the sum. The buckets are read one by one
    /// while workers may be recording, so a scrape can see a sample in the count but not yet
    /// in the sum; the next scrape is consistent again. Prometheus tolerates this.
    fn snapshot(&self) -> (Vec<u64>, u64, f64) {
        let mut running = 0u64;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                running += count.load(Ordering::Relaxed);
                running
            })
            .collect();
        (
            cumulative,
            running,
            f64::from_bits(self.sum.load(Ordering::Relaxed)),
        )
    }
}

impl HistogramFn for BucketHistogram {
    fn record(&self, value: f64) {
        self.add(value, 1);
    }

    fn record_many(&self, value: f64, count: usize) {
        self.add(value, count as u64);
    }
}

/// Every histogram series of the catalog's histogram families, for one recorder.
// shared: registration happens on any worker (cache misses) and rendering on the control thread.
#[derive(Debug, Default)]
pub(crate) struct Histograms {
    series: Mutex<BTreeMap<Key, Arc<BucketHistogram>>>,
}

impl Histograms {
    /// The buckets for `name` if it is a catalog histogram, which this module then stores.
    pub(crate) fn buckets_for(name: &str) -> Option<&'static [f64]> {
        match catalog::find(name)?.kind {
            Kind::Histogram { buckets } => Some(buckets),
            Kind::Counter | Kind::Gauge => None,
        }
    }

    /// The series for `key`, created empty on first use. Locks; called on cache misses only.
    pub(crate) fn register(&self, key: &Key, bounds: &'static [f64]) -> Histogram {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let histogram = series
            .entry(key.clone())
            .or_insert_with(|| Arc::new(BucketHistogram::new(bounds)))
            .clone();
        Histogram::from_arc(histogram)
    }

    /// Appends every series in the Prometheus text format, families in catalog order.
    pub(crate) fn render_into(&self, out: &mut String) {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        for family in &catalog::CATALOG {
            let Kind::Histogram { buckets } = family.kind else {
                continue;
            };
            render_family(out, family, "histogram", &series, |out, key, histogram| {
                let labels = format_labels(key);
                let sep = if labels.is_empty() { "" } else { "," };
                let (cumulative, count, sum) = histogram.snapshot();
                for (bound, count) in buckets.iter().zip(&cumulative) {
                    let _ = writeln!(
                        out,
                        "{}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}",
                        family.name
                    );
                }
                let _ = writeln!(
                    out,
                    "{}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}",
                    family.name
                );
                let braced = if labels.is_empty() {
                    String::new()
                } else {
                    format!("{{{labels}}}")
                };
                let _ = writeln!(out, "{}_sum{braced} {sum}", family.name);
                let _ = writeln!(out, "{}_count{braced} {count}", family.name);
            });
        }
    }
}

/// Appends `family`'s series among `series` (help, type, then `line` for each, then a blank
/// line); nothing when it has none.
pub(super) fn render_family<V>(
    out: &mut String,
    family: &FamilyInfo,
    type_name: &str,
    series: &BTreeMap<Key, V>,
    mut line: impl FnMut(&mut String, &Key, &V),
) {
    let mut members = series
        .iter()
        .filter(|(key, _)| key.name() == family.name)
        .peekable();
    if members.peek().is_none() {
        return;
    }
    let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(family.help));
    let _ = writeln!(out, "# TYPE {} {type_name}", family.name);
    for (key, value) in members {
        line(out, key, value);
    }
    out.push('\n');
}

/// `a="x",b="y"` in the key's label order, values escaped for the text format.
pub(super) fn format_labels(key: &Key) -> String {
    let mut out = String::new();
    for (i, label) in key.labels().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(label.key());
        out.push_str("=\"");
        for c in label.value().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::metrics::Label;

    #[test]
    fn samples_land_in_the_first_bucket_not_below_them() {
        let h = BucketHistogram::new(&[0.1, 1.0, 10.0]);
        for v in [0.05, 0.1, 0.5, 1.0, 20.0, f64::NAN] {
            h.record(v);
        }
        let (cumulative, count, _) = h.snapshot();
        assert_eq!(cumulative, vec![2, 4, 4, 6]);
        assert_eq!(count, 6);
    }

    #[test]
    fn sum_and_count_follow_record_many() {
        let h = BucketHistogram::new(&[1.0]);
        h.record_many(0.25, 4);
        let (cumulative, count, sum) = h.snapshot();
        assert_eq!((cumulative, count, sum), (vec![4, 4], 4, 1.0));
    }

    #[test]
    fn renders_cumulative_buckets_sum_and_count_with_escaped_labels() {
        let histograms = Histograms::default();
        let key = Key::from_parts(
            "aisix_gateway_overhead_seconds",
            vec![Label::new("endpoint", "a\"b\\c")],
        );
        let h = histograms.register(&key, catalog::OVERHEAD_BUCKETS);
        h.record(0.000_02);
        h.record(1.0);
        let mut out = String::new();
        histograms.render_into(&mut out);
        assert!(
            out.starts_with("# HELP aisix_gateway_overhead_seconds "),
            "{out}"
        );
        assert!(
            out.contains("# TYPE aisix_gateway_overhead_seconds histogram\n"),
            "{out}"
        );
        let labels = r#"endpoint="a\"b\\c""#;
        assert!(
            out.contains(&format!(
                "aisix_gateway_overhead_seconds_bucket{{{labels},le=\"0.00001\"}} 0\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "aisix_gateway_overhead_seconds_bucket{{{labels},le=\"0.000025\"}} 1\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "aisix_gateway_overhead_seconds_bucket{{{labels},le=\"+Inf\"}} 2\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "aisix_gateway_overhead_seconds_sum{{{labels}}} 1.00002\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "aisix_gateway_overhead_seconds_count{{{labels}}} 2\n"
            )),
            "{out}"
        );
    }

    #[test]
    fn registering_a_key_twice_returns_the_same_series() {
        let histograms = Histograms::default();
        let key = Key::from_parts(
            "aisix_upstream_ttft_seconds",
            vec![Label::new("model", "m")],
        );
        histograms.register(&key, catalog::TTFT_BUCKETS).record(0.1);
        histograms.register(&key, catalog::TTFT_BUCKETS).record(0.1);
        let mut out = String::new();
        histograms.render_into(&mut out);
        assert!(
            out.contains("aisix_upstream_ttft_seconds_count{model=\"m\"} 2\n"),
            "{out}"
        );
    }
}
