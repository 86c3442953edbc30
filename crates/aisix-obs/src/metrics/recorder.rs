//! The recorder aisix installs: the Prometheus exporter for counters and gauges, our own
//! fixed-bucket histograms for the catalog's durations (see `histogram` for why), fractional
//! counters for dollars (`float_counter`), and per-thread shards for in-flight requests; plus
//! the page a scrape gets. Serving it is the
//! server's job.

use std::fmt;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use ::metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use super::cache::{self, METADATA};
use super::catalog::{
    self, ACCESS_LOG_DROPPED, BUILD_INFO, CATALOG, CONFIG_INFO, CONFIG_LAST_RELOAD_SUCCESS,
    CONFIG_RELOADS, ETCD_DOCUMENTS_REFUSED, ETCD_REVISION_APPLIED, ETCD_WATCH_UP, Kind,
    LOG_DROPPED, OTEL_DROPPED, RATELIMIT_BACKEND_ERRORS, REQUESTS_IN_FLIGHT, TARGETS_COOLING,
    WORKER_CONNECTIONS_OPEN, WORKER_REQUESTS,
};
use super::float_counter::FloatCounters;
use super::histogram::Histograms;
use super::in_flight::InFlight;
use super::labels::{Endpoint, Mode, ReloadResult, Worker};
use super::worker;

/// Why the recorder could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("a global metrics recorder is already installed")]
    AlreadyInstalled,
    #[error("building the Prometheus recorder: {0}")]
    Exporter(#[from] metrics_exporter_prometheus::BuildError),
}

/// The `metrics::Recorder` behind [`Metrics`]. Reach it through [`Metrics::recorder`], e.g. to
/// pass it to `metrics::with_local_recorder` in a test.
// shared: one registry per process is what Prometheus scrapes; workers reach it only on cache
// misses, and write only the series' atomics on hits.
pub struct MetricsRecorder {
    prometheus: PrometheusRecorder,
    handle: PrometheusHandle,
    histograms: Histograms,
    float_counters: FloatCounters,
    in_flight: InFlight,
    /// The `hash` of the one `aisix_config_info` series. Rendered here rather than by the
    /// exporter, which cannot drop the previous hash's series after a reload.
    config_hash: Mutex<Option<String>>,
}

impl fmt::Debug for MetricsRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsRecorder").finish_non_exhaustive()
    }
}

impl Recorder for MetricsRecorder {
    fn describe_counter(
        &self,
        key: KeyName,
        unit: Option<::metrics::Unit>,
        description: SharedString,
    ) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(
        &self,
        key: KeyName,
        unit: Option<::metrics::Unit>,
        description: SharedString,
    ) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(
        &self,
        key: KeyName,
        unit: Option<::metrics::Unit>,
        description: SharedString,
    ) {
        // Catalog histograms render their help from the catalog; others go to the exporter.
        self.prometheus.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.prometheus.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if key.name() == REQUESTS_IN_FLIGHT.name {
            return self.in_flight.register(key);
        }
        if FloatCounters::stores(key.name()) {
            return self.float_counters.register(key);
        }
        self.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match Histograms::buckets_for(key.name()) {
            Some(buckets) => self.histograms.register(key, buckets),
            None => self.prometheus.register_histogram(key, metadata),
        }
    }
}

/// The installed metrics: render the page, run upkeep, register workers. `Copy`: hand it to
/// every worker thread and to the control thread.
#[derive(Clone, Copy, Debug)]
pub struct Metrics {
    recorder: &'static MetricsRecorder,
}

impl Metrics {
    /// Builds a recorder with every catalog family described, without installing it.
    ///
    /// The recorder is leaked, as `metrics::set_global_recorder` leaks the one it installs: its
    /// address is its identity in the thread-local handle caches, and an address that is never
    /// freed is never reused by another recorder. Tests that build many leak a few KiB each.
    pub fn build() -> Result<Self, MetricsError> {
        // No `idle_timeout`: the exporter would drop idle series from its registry while
        // thread caches still hold their handles, and later emits would vanish.
        let prometheus = PrometheusBuilder::new()
            // Catalog histograms are stored by this crate (see `histogram`); anything else that
            // records a histogram still gets buckets, never a summary.
            .set_buckets(catalog::REQUEST_DURATION_BUCKETS)?
            .build_recorder();
        let handle = prometheus.handle();
        let recorder: &'static MetricsRecorder = Box::leak(Box::new(MetricsRecorder {
            prometheus,
            handle,
            histograms: Histograms::default(),
            float_counters: FloatCounters::default(),
            in_flight: InFlight::default(),
            config_hash: Mutex::new(None),
        }));

        for family in &CATALOG {
            let name = KeyName::from_const_str(family.name);
            let help = SharedString::const_str(family.help);
            match family.kind {
                Kind::Counter => recorder.describe_counter(name, Some(family.unit), help),
                Kind::Gauge => recorder.describe_gauge(name, Some(family.unit), help),
                Kind::Histogram { .. } => {
                    recorder.describe_histogram(name, Some(family.unit), help)
                }
            }
        }
        // Reload outcomes show 0 from the first scrape, so `increase()` sees the first failure.
        for result in ReloadResult::ALL {
            recorder
                .register_counter(
                    &cache::key_of(&CONFIG_RELOADS, &[result.as_str()]),
                    &METADATA,
                )
                .increment(0);
        }
        // Every endpoint shows 0 in flight from the first scrape, not only after traffic.
        for endpoint in Endpoint::ALL {
            recorder
                .in_flight
                .declare(&cache::key_of(&REQUESTS_IN_FLIGHT, &[endpoint.as_str()]));
        }
        // Dropped access-log lines read 0 until one is dropped: a scrape (and the bench
        // harness) can tell "none dropped" from "not reported".
        recorder
            .register_counter(&cache::key_of(&ACCESS_LOG_DROPPED, &[]), &METADATA)
            .increment(0);
        recorder
            .register_counter(&cache::key_of(&LOG_DROPPED, &[]), &METADATA)
            .increment(0);
        // Likewise for OpenTelemetry records lost, per signal.
        for signal in ["traces", "logs"] {
            recorder
                .register_counter(&cache::key_of(&OTEL_DROPPED, &[signal]), &METADATA)
                .increment(0);
        }
        // Likewise for rate-limit backend errors: 0 reads as "the backend answered every call".
        recorder
            .register_counter(&cache::key_of(&RATELIMIT_BACKEND_ERRORS, &[]), &METADATA)
            .increment(0);
        // No direct model cools down until one does: 0 from the first scrape.
        recorder
            .register_gauge(&cache::key_of(&TARGETS_COOLING, &[]), &METADATA)
            .increment(0.0);
        Ok(Self { recorder })
    }

    /// Builds the recorder and installs it as the process's global `metrics` recorder. Call
    /// once, at startup, before any worker starts.
    pub fn install() -> Result<Self, MetricsError> {
        let metrics = Self::build()?;
        ::metrics::set_global_recorder(metrics.recorder)
            .map_err(|_| MetricsError::AlreadyInstalled)?;
        Ok(metrics)
    }

    /// The recorder, for `metrics::with_local_recorder` and friends.
    pub fn recorder(&self) -> &'static MetricsRecorder {
        self.recorder
    }

    /// Sets `aisix_build_info{version, mode, workers} 1`. Call once at startup.
    pub fn set_build_info(&self, version: &str, mode: Mode, workers: usize) {
        let workers = workers.to_string();
        let key = cache::key_of(&BUILD_INFO, &[version, mode.as_str(), workers.as_str()]);
        self.recorder.register_gauge(&key, &METADATA).set(1.0);
    }

    /// Records that the resources file was loaded and is now in force (at startup and on every
    /// successful reload): its hash becomes `aisix_config_info{hash}`, and `at` becomes
    /// `aisix_config_last_reload_success_timestamp_seconds`. Control thread only.
    pub fn config_loaded(&self, hash: &str, at: SystemTime) {
        let seconds = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.recorder
            .register_gauge(&cache::key_of(&CONFIG_LAST_RELOAD_SUCCESS, &[]), &METADATA)
            .set(seconds);
        *self
            .recorder
            .config_hash
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(hash.to_owned());
    }

    /// The etcd watch's state (`aisix_etcd_watch_up`). Control thread only.
    pub fn etcd_watch_up(&self, up: bool) {
        self.recorder
            .register_gauge(&cache::key_of(&ETCD_WATCH_UP, &[]), &METADATA)
            .set(if up { 1.0 } else { 0.0 });
    }

    /// The revision of the snapshot in force (`aisix_etcd_revision_applied`). Control thread
    /// only.
    pub fn etcd_revision_applied(&self, revision: i64) {
        self.recorder
            .register_gauge(&cache::key_of(&ETCD_REVISION_APPLIED, &[]), &METADATA)
            .set(revision as f64);
    }

    /// Counts refused etcd documents (`aisix_etcd_documents_refused_total`). Control thread
    /// only.
    pub fn etcd_documents_refused(&self, n: u64) {
        self.recorder
            .register_counter(&cache::key_of(&ETCD_DOCUMENTS_REFUSED, &[]), &METADATA)
            .increment(n);
    }

    /// Counts one reload attempt (`aisix_config_reloads_total{result}`); a success is also
    /// recorded with [`Metrics::config_loaded`]. Control thread only.
    pub fn config_reload(&self, result: ReloadResult) {
        self.recorder
            .register_counter(
                &cache::key_of(&CONFIG_RELOADS, &[result.as_str()]),
                &METADATA,
            )
            .increment(1);
    }

    /// Names the calling thread `worker` for the `worker` label of every later emit on it, and
    /// makes its `aisix_worker_*` series show 0 before its first connection, so a worker the
    /// kernel never hands a connection to is visible as such. Call first thing in each worker
    /// thread (in shared mode: from the runtime's `on_thread_start`).
    ///
    /// There is no per-worker state to hold: the worker's in-flight counts are its own shards,
    /// reached through its handle cache.
    pub fn register_worker(&self, worker: Worker) {
        worker::set_current(worker);
        let label = worker.label();
        let labels = [Label::new(
            WORKER_REQUESTS.labels[0],
            label.as_str().to_owned(),
        )];
        self.recorder
            .register_counter(
                &Key::from_parts(WORKER_REQUESTS.name, labels.to_vec()),
                &METADATA,
            )
            .increment(0);
        self.recorder
            .register_gauge(
                &Key::from_parts(WORKER_CONNECTIONS_OPEN.name, labels.to_vec()),
                &METADATA,
            )
            .increment(0.0);
    }

    /// The page for a scrape, in the Prometheus text format: counters and gauges from the
    /// exporter (in-flight gauges summed over every thread's shard first), then the catalog's
    /// histograms and fractional counters. Locks the registries briefly; call from the control thread, not a worker.
    pub fn render(&self) -> String {
        for (key, total) in self.recorder.in_flight.totals() {
            self.recorder
                .prometheus
                .register_gauge(&key, &METADATA)
                .set(total);
        }
        let mut page = self.recorder.handle.render();
        self.recorder.histograms.render_into(&mut page);
        self.recorder.float_counters.render_into(&mut page);
        self.render_config_info(&mut page);
        page
    }

    fn render_config_info(&self, page: &mut String) {
        let hash = self
            .recorder
            .config_hash
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(hash) = hash.as_deref() {
            let name = CONFIG_INFO.name;
            let _ = writeln!(page, "# HELP {name} {}", CONFIG_INFO.help);
            let _ = writeln!(page, "# TYPE {name} gauge");
            let _ = writeln!(
                page,
                "{name}{{{}=\"{}\"}} 1\n",
                CONFIG_INFO.labels[0],
                hash.escape_default()
            );
        }
    }

    /// The exporter's periodic housekeeping (publishes descriptions, folds any non-catalog
    /// histogram samples into buckets so their storage stays bounded). Run it on a timer on the
    /// control thread, every few seconds; `render` does not depend on it.
    pub fn run_upkeep(&self) {
        self.recorder.handle.run_upkeep();
    }
}
