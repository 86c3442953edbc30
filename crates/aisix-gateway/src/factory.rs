//! Builds each worker's gateway inside that worker, and holds what workers share: the loaded
//! resources (swapped whole on reload) and the settings.

use std::sync::Arc;

use aisix_bootstrap::{ServiceFactory, WorkerContext};
use aisix_config::{Bootstrap, Resources};
use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::labels::Worker;
use arc_swap::ArcSwap;

use crate::account::Sinks;
use crate::body::GatewayBody;
use crate::deadline;
use crate::egress::Egress;
use crate::relay::StreamSettings;
use crate::service::Gateway;

/// Settings the request path reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub body_limit: u64,
    pub deadlines: deadline::Defaults,
    pub upstream: aisix_config::UpstreamConfig,
    pub stream: StreamSettings,
}

/// What every worker reads.
// shared: one copy of the resources for all workers; SIGHUP publishes a new one to each.
pub(crate) struct Shared {
    /// Replaced whole on reload; each worker rebuilds its own lookup tables from it.
    pub resources: ArcSwap<Resources>,
    pub settings: Settings,
    pub egress: Egress,
    pub sinks: Sinks,
    pub tls: Arc<rustls::ClientConfig>,
    pub metrics: Option<Metrics>,
}

/// Builds the gateway of each worker, and reloads resources for all of them.
pub struct GatewayFactory {
    shared: Arc<Shared>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the upstream TLS configuration: {0}")]
pub struct GatewayInitError(#[from] rustls::Error);

impl GatewayFactory {
    /// `metrics` is the installed recorder when `/metrics` is enabled; without it nothing is
    /// counted and the request path skips every emit.
    pub fn new(
        bootstrap: &Bootstrap,
        resources: Resources,
        metrics: Option<Metrics>,
    ) -> Result<Self, GatewayInitError> {
        let settings = Settings {
            body_limit: bootstrap.proxy.request_body_limit_bytes,
            deadlines: deadline::Defaults {
                request_body: bootstrap.downstream.request_body_timeout,
                upstream: bootstrap.upstream.timeouts,
            },
            upstream: bootstrap.upstream.clone(),
            stream: StreamSettings {
                keepalive: bootstrap.downstream.sse_keepalive_interval,
                max_event_bytes: bootstrap.upstream.max_sse_event_bytes,
            },
        };
        Ok(Self {
            shared: Arc::new(Shared {
                resources: ArcSwap::from_pointee(resources),
                settings,
                egress: Egress::from_env(),
                sinks: Sinks {
                    metrics: metrics.is_some(),
                    access_log: bootstrap.observability.access_log,
                },
                tls: crate::upstream::tls_client_config()?,
                metrics,
            }),
        })
    }

    /// Publishes new resources to every worker; requests already running keep the old ones.
    pub fn reload(&self, resources: Resources) {
        self.shared.resources.store(Arc::new(resources));
    }
}

impl ServiceFactory for GatewayFactory {
    type Body = GatewayBody;
    type BodyError = std::convert::Infallible;
    type Service = Gateway;

    fn thread_started(&self, worker: &WorkerContext) {
        let label = match worker.mode {
            aisix_bootstrap::Mode::ThreadPerCore => Worker::Tpc(worker.id),
            aisix_bootstrap::Mode::Shared => Worker::Shared,
        };
        match &self.shared.metrics {
            Some(metrics) => metrics.register_worker(label),
            None => aisix_obs::metrics::set_current_worker(label),
        }
    }

    fn make_service(&self, worker: &WorkerContext) -> Gateway {
        Gateway::new(worker.clone(), self.shared.clone())
    }
}
