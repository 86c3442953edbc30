//! Builds each worker's gateway inside that worker, and holds what every worker has in common:
//! the loaded resources with their shared state (swapped whole on reload) and the settings.

use std::sync::Arc;

use aisix_bootstrap::{Mode, ServiceFactory, WorkerContext};
use aisix_config::{Bootstrap, Resources};
use aisix_obs::metrics::Metrics;
use arc_swap::ArcSwap;

use crate::account::Sinks;
use crate::limit::memory_budget::MemoryBudget;
use crate::limit::{Limiter, LimiterInitError};
use crate::provider::events::StreamSettings;
use crate::relay::body::GatewayBody;
use crate::request::deadline;
use crate::service::Gateway;
use crate::snapshot::Loaded;
use crate::upstream::egress::Egress;

/// Settings the request path reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub body_limit: u64,
    /// `proxy.max_buffered_bytes_per_worker`.
    pub buffered_per_worker: u64,
    /// `proxy.max_buffered_percent_per_key`.
    pub buffered_percent_per_key: u8,
    pub deadlines: deadline::Defaults,
    pub upstream: aisix_config::UpstreamConfig,
    pub stream: StreamSettings,
}

/// What every worker reads.
// shared: one copy of the resources for all workers; SIGHUP publishes a new one to each.
pub(crate) struct Common {
    /// Replaced whole on reload; each worker rebuilds its own lookup tables from it.
    pub loaded: ArcSwap<Loaded>,
    pub settings: Settings,
    pub egress: Egress,
    pub sinks: Sinks,
    /// How requests are traced, when OpenTelemetry export is on.
    pub otel: Option<crate::otel::Tracing>,
    pub tls: Arc<rustls::ClientConfig>,
    pub metrics: Option<Metrics>,
    /// The limits of every key and model entry: one set of counters for the process.
    pub limiter: Limiter,
    /// The Responses API answers kept for `previous_response_id` (translated paths).
    pub responses: Arc<crate::stored::Store>,
    /// The provider key that created each native Responses answer, for `previous_response_id`.
    pub pins: Arc<crate::stored::Store>,
    /// The limiter's clock, which the end-to-end tests move forward.
    #[cfg(feature = "test-hooks")]
    pub clock: Arc<crate::limit::SkewedClock>,
}

/// Builds the gateway of each worker, and reloads resources for all of them.
pub struct GatewayFactory {
    common: Arc<Common>,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayInitError {
    #[error("cannot build the upstream TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error(transparent)]
    Limiter(#[from] LimiterInitError),
    #[error("cannot start the Responses store's Redis client: {0}")]
    ResponsesStore(std::io::Error),
}

impl Settings {
    fn new(bootstrap: &Bootstrap) -> Self {
        Settings {
            body_limit: bootstrap.proxy.request_body_limit_bytes,
            buffered_per_worker: bootstrap.proxy.max_buffered_bytes_per_worker,
            buffered_percent_per_key: bootstrap.proxy.max_buffered_percent_per_key,
            deadlines: deadline::Defaults {
                request_body: bootstrap.downstream.request_body_timeout,
                upstream: bootstrap.upstream.timeouts,
            },
            upstream: bootstrap.upstream.clone(),
            stream: StreamSettings {
                keepalive: bootstrap.downstream.sse_keepalive_interval,
                max_event_bytes: bootstrap.upstream.max_sse_event_bytes,
            },
        }
    }

    /// The memory budget of the service built for `worker`: the setting in thread-per-core
    /// mode, workers × the setting in the shared runtime (one service for the process), each
    /// key's share its percentage of that, never less than one body at the limit.
    pub(crate) fn budget(&self, worker: &WorkerContext) -> MemoryBudget {
        let bytes = match worker.mode {
            Mode::Shared => self
                .buffered_per_worker
                .saturating_mul(worker.workers.max(1) as u64),
            _ => self.buffered_per_worker,
        };
        let share = (bytes / 100)
            .saturating_mul(u64::from(self.buffered_percent_per_key))
            .max(self.body_limit);
        MemoryBudget::new(bytes, share)
    }
}

impl GatewayFactory {
    /// `metrics` is the installed recorder when `/metrics` is enabled; without it nothing is
    /// counted and the request path skips every emit.
    pub fn new(
        bootstrap: &Bootstrap,
        resources: Resources,
        metrics: Option<Metrics>,
    ) -> Result<Self, GatewayInitError> {
        let settings = Settings::new(bootstrap);
        #[cfg(feature = "test-hooks")]
        let clock = Arc::new(crate::limit::SkewedClock::default());
        #[cfg(feature = "test-hooks")]
        let limiter = Limiter::new(&bootstrap.ratelimit, clock.clone())?;
        #[cfg(not(feature = "test-hooks"))]
        let limiter = Limiter::new(&bootstrap.ratelimit, Arc::new(crate::limit::SystemClock))?;
        let egress = Egress::from_env();
        let loaded = Loaded::new(resources, None, bootstrap.upstream.resilience, &egress);
        let limits = bootstrap.responses_store;
        let (responses, pins) = match &bootstrap.ratelimit.backend {
            aisix_config::RateLimitBackend::Redis(redis) => {
                let shared = Arc::new(
                    crate::stored::Shared::start(redis)
                        .map_err(GatewayInitError::ResponsesStore)?,
                );
                (
                    crate::stored::Store::in_redis(limits, shared.clone(), "aisix:responses:"),
                    crate::stored::Store::in_redis(limits, shared, "aisix:responses:pin:"),
                )
            }
            aisix_config::RateLimitBackend::Memory => (
                crate::stored::Store::new(limits),
                crate::stored::Store::new(limits),
            ),
        };
        Ok(Self {
            common: Arc::new(Common {
                loaded: ArcSwap::from_pointee(loaded),
                settings,
                egress,
                sinks: Sinks {
                    metrics: metrics.is_some(),
                    access_log: bootstrap.observability.access_log,
                },
                otel: crate::otel::Tracing::from_config(&bootstrap.observability.otlp),
                tls: crate::upstream::tls::tls_client_config()?,
                metrics,
                limiter,
                responses: Arc::new(responses),
                pins: Arc::new(pins),
                #[cfg(feature = "test-hooks")]
                clock,
            }),
        })
    }

    /// Runs the active health checks of the provider keys that have one
    /// (`provider_keys[].health_check`), for as long as the process lives, reading each
    /// reload's resources. Spawn it on the control runtime: it never runs on a worker.
    pub fn health_checks(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        crate::route::check::run(self.common.clone())
    }

    /// Renews the credentials refreshed off the request path (`vertex` keys' tokens) before
    /// they expire, for as long as the process lives, reading each reload's resources
    /// (docs in `snapshot/credential.rs`). Spawn it on the control runtime: it never runs on a
    /// worker.
    pub fn credential_refresh(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let common = self.common.clone();
        let pool = crate::upstream::pool::Pool::new(&common.settings.upstream, common.tls.clone());
        crate::snapshot::credential::run(move || common.loaded.load_full(), pool)
    }

    /// The process's limiter, to flush at the end of a drain.
    pub fn limiter(&self) -> &Limiter {
        &self.common.limiter
    }

    /// The resources in force (for the admin API; never on a request).
    pub fn resources(&self) -> Resources {
        self.common.loaded.load().resources.clone()
    }

    /// Each direct model's health, cooldown, calls in flight and latency estimate now.
    pub fn model_status(&self) -> Vec<crate::target::status::ModelStatus> {
        crate::snapshot::status::of(&self.common.loaded.load())
    }

    /// Publishes new resources to every worker; requests already running keep the old ones.
    /// The shared state (cooldown, load, rotation) of entries that did not change carries over.
    pub fn reload(&self, resources: Resources) {
        let previous = self.common.loaded.load_full();
        let settings = self.common.settings.upstream.resilience;
        let loaded = Loaded::new(resources, Some(&previous), settings, &self.common.egress);
        self.common.loaded.store(Arc::new(loaded));
    }
}

impl ServiceFactory for GatewayFactory {
    type Body = GatewayBody;
    type BodyError = crate::relay::unary::Cut;
    type Service = Gateway;

    fn thread_started(&self, worker: &WorkerContext) {
        let label = worker.worker();
        match &self.common.metrics {
            Some(metrics) => metrics.register_worker(label),
            None => aisix_obs::metrics::set_current_worker(label),
        }
        // A worker's OTLP queue is made as it starts, not in its first traced request. (A
        // shared runtime's threads, blocking ones among them, make theirs when they trace.)
        if self.common.otel.is_some() && worker.mode == Mode::ThreadPerCore {
            crate::otel::prepare();
        }
    }

    fn make_service(&self, worker: &WorkerContext) -> Gateway {
        Gateway::new(worker.clone(), self.common.clone())
    }
}

#[cfg(test)]
mod tests {
    use aisix_bootstrap::Readiness;

    use super::*;

    fn worker(mode: Mode, workers: usize) -> WorkerContext {
        WorkerContext {
            id: 0,
            name: "w".to_owned(),
            mode,
            workers,
            readiness: Readiness::new(),
        }
    }

    #[test]
    fn the_budget_is_per_worker_in_both_modes_and_a_key_s_share_is_its_percentage() {
        const MIB: u64 = 1024 * 1024;
        let mut bootstrap = Bootstrap::default();
        bootstrap.proxy.max_buffered_bytes_per_worker = 256 * MIB;
        bootstrap.proxy.request_body_limit_bytes = 32 * MIB;
        let settings = Settings::new(&bootstrap);
        assert_eq!(
            settings.budget(&worker(Mode::ThreadPerCore, 4)).bytes(),
            (256 * MIB, 64 * MIB)
        );
        // The shared runtime's one service serves all four workers' share of the load.
        assert_eq!(
            settings.budget(&worker(Mode::Shared, 4)).bytes(),
            (1024 * MIB, 256 * MIB)
        );
        // A share is never less than one body at the limit.
        bootstrap.proxy.max_buffered_percent_per_key = 1;
        let settings = Settings::new(&bootstrap);
        assert_eq!(
            settings.budget(&worker(Mode::ThreadPerCore, 1)).bytes(),
            (256 * MIB, 32 * MIB)
        );
    }
}
