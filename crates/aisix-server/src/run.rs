//! Composition: load and check the configuration, bind, start the workers with the gateway,
//! and supervise them from the control thread until a stop signal or a worker failure.

use std::path::Path;
use std::sync::Arc;

use aisix_bootstrap::{Readiness, ServeSettings, Server, ServingPlan, Stopped};
use aisix_config::{Bootstrap, ConfigError, Origin, Resources};
use aisix_gateway::GatewayFactory;
use aisix_obs::metrics::Metrics;
use tokio::sync::mpsc;

use crate::control::reload::{self, Reloader};
use crate::control::signals::{Hangups, StopSignals};
use crate::control::systemd::{self, Notifier};
use crate::control::watch;
use crate::etcd::watch::EtcdSource;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid configuration:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Config(Vec<ConfigError>),
    #[error("{0}")]
    Startup(String),
    #[error("worker {worker} exited unexpectedly: {reason}")]
    WorkerFailed { worker: String, reason: String },
    #[error("stopped by a second signal before the drain finished")]
    Aborted,
}

/// A checked configuration: the bootstrap config, the resources, and the resources file's hash.
pub(crate) type Checked = (Bootstrap, Resources, String);

/// Loads the bootstrap config and the resources file, and checks what can be checked offline.
/// Every error, at once.
pub(crate) fn load_and_check(config: Option<&Path>) -> Result<Checked, Vec<ConfigError>> {
    let bootstrap = aisix_config::load_bootstrap(config, std::env::vars()).map_err(|e| e.0)?;
    let mut errors = Vec::new();
    if let Err(message) = aisix_obs::log::validate_filter(&bootstrap.observability.log_level) {
        errors.push(ConfigError::new(
            "observability.log_level",
            message,
            config.map_or(Origin::Unknown, |p| Origin::File(p.to_path_buf())),
        ));
    }
    if let Some(tls) = &bootstrap.proxy.tls
        && let Err(error) = aisix_bootstrap::load_tls(tls)
    {
        errors.push(ConfigError::new(
            "proxy.tls",
            error.to_string(),
            Origin::Unknown,
        ));
    }
    if let Some(etcd) = &bootstrap.etcd
        && let Some(var) = &etcd.password_env
        && std::env::var_os(var).is_none()
    {
        errors.push(ConfigError::new(
            "etcd.password_env",
            format!("environment variable {var} is not set"),
            Origin::Unknown,
        ));
    }
    let (resources, hash) = match reload::load_initial(&bootstrap) {
        Ok(loaded) => loaded,
        Err(mut resource_errors) => {
            errors.append(&mut resource_errors);
            (Resources::default(), String::new())
        }
    };
    if errors.is_empty() {
        Ok((bootstrap, resources, hash))
    } else {
        Err(errors)
    }
}

/// The longest the end of a drain waits for the limiter's last settlements to reach Redis.
const LIMITER_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the gateway until SIGTERM/SIGINT (then drains and returns `Ok`) or until a worker dies.
pub fn serve(config: Option<&Path>) -> Result<(), RunError> {
    let (bootstrap, resources, resources_hash) =
        load_and_check(config).map_err(RunError::Config)?;
    let _log =
        aisix_obs::log::init(&bootstrap.observability.log_level).map_err(RunError::Startup)?;
    let nofile = crate::limits::raise_nofile();

    let plan = ServingPlan::resolve(&bootstrap.proxy);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        mode = %plan.mode,
        workers = plan.workers.get(),
        workers_from = ?plan.workers_source,
        config = ?bootstrap.config_file,
        nofile,
        "starting aisix"
    );
    // The bootstrap config holds no secrets (TLS is given as file paths); resources are
    // summarized by name only.
    tracing::info!(config = ?bootstrap, "effective configuration");
    if let Some(etcd) = &bootstrap.etcd {
        tracing::info!(endpoints = ?etcd.endpoints, prefix = %etcd.prefix, "resources come from etcd; not ready until the first snapshot is in");
    } else if bootstrap.resources_file.is_none() {
        tracing::warn!(
            "no resources_file is configured: there are no models, and every model request is refused"
        );
    }
    tracing::info!(
        provider_keys = ?resources.provider_keys.iter().map(|k| k.display_name.as_str()).collect::<Vec<_>>(),
        models = ?resources.models.iter().map(|m| m.display_name.as_str()).collect::<Vec<_>>(),
        api_keys = ?resources.api_keys.iter().map(|k| k.display_name.as_str()).collect::<Vec<_>>(),
        resources = ?bootstrap.resources_file,
        "resources loaded"
    );
    // TLS is loaded before any port is taken, so a bad path fails without side effects.
    let tls = match &bootstrap.proxy.tls {
        Some(tls) => {
            Some(aisix_bootstrap::load_tls(tls).map_err(|e| RunError::Startup(e.to_string()))?)
        }
        None => None,
    };

    let prometheus = &bootstrap.observability.metrics.prometheus;
    let metrics = if prometheus.enabled {
        let listener = crate::metrics::bind(prometheus).map_err(RunError::Startup)?;
        let metrics = Metrics::install().map_err(|e| RunError::Startup(e.to_string()))?;
        metrics.set_build_info(env!("CARGO_PKG_VERSION"), plan.mode, plan.workers.get());
        metrics.config_loaded(&resources_hash, std::time::SystemTime::now());
        Some((metrics, listener))
    } else {
        None
    };
    let (metrics, metrics_listener) = metrics.unzip();
    let admin_listener = match &bootstrap.admin {
        Some(admin) => Some(crate::admin::bind(admin).map_err(RunError::Startup)?),
        None => None,
    };

    let factory = Arc::new(
        GatewayFactory::new(&bootstrap, resources.clone(), metrics)
            .map_err(|e| RunError::Startup(e.to_string()))?,
    );
    let otlp = &bootstrap.observability.otlp;
    let exporter =
        aisix_gateway::otel::Exporter::new(otlp).map_err(|e| RunError::Startup(e.to_string()))?;
    if exporter.is_some() {
        tracing::info!(
            traces = otlp.traces_url.as_deref().unwrap_or("off"),
            logs = otlp.logs_url.as_deref().unwrap_or("off"),
            sample_ratio = f64::from(otlp.sample_ppm) / 1e6,
            "OTLP export on"
        );
    }
    let listeners = aisix_bootstrap::bind(&plan).map_err(|e| RunError::Startup(e.to_string()))?;
    let access_log =
        if bootstrap.observability.access_log {
            Some(aisix_obs::access_log::Writer::start().map_err(|e| {
                RunError::Startup(format!("cannot start the access-log writer: {e}"))
            })?)
        } else {
            None
        };

    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("aisix-control")
        .build()
        .map_err(|e| RunError::Startup(format!("cannot start the control runtime: {e}")))?;
    // Installed before the listeners say "listening": a stop or reload signal from then on is
    // never lost to the default action, which ends the process (a supervisor may send one at
    // once).
    let (stop_signals, hangups) = {
        let _runtime = control.enter();
        (StopSignals::install(), Hangups::install())
    };
    // With etcd, not ready until the first snapshot is in.
    let readiness = match bootstrap.etcd {
        Some(_) => Readiness::waiting(),
        None => Readiness::new(),
    };
    let settings = ServeSettings::from_config(&bootstrap);
    let server = Server::start(
        &plan,
        listeners,
        tls.clone(),
        &settings,
        readiness.clone(),
        factory.clone(),
    )
    .map_err(|e| RunError::Startup(e.to_string()))?;
    tracing::info!(addr = %server.local_addr(), tls = bootstrap.proxy.tls.is_some(), "listening");
    // Tests hold the control thread here, so that a signal sent as soon as the gateway is
    // ready surely comes before the control runtime's tasks run.
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("TEST_HOOK_AISIX_CONTROL_DELAY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }

    let notifier = Notifier::from_env();
    let limiter = factory.limiter().clone();
    let stopped = control.block_on(async {
        if let (Some(metrics), Some(listener)) = (metrics, metrics_listener) {
            tokio::spawn(crate::metrics::serve(
                listener,
                prometheus.path.clone(),
                metrics,
            ));
        }
        // OpenTelemetry export: here too, so no worker ever carries another's delivery.
        let exporter = exporter.map(aisix_gateway::otel::Exporter::start);
        // Active health checks of provider keys: here, on the control runtime, never a worker.
        tokio::spawn(factory.health_checks());
        // Credentials refreshed off the request path (Vertex AI tokens): here too.
        tokio::spawn(factory.credential_refresh());
        let (triggers, requests) = mpsc::channel(8);
        tokio::spawn(hangups.forward(triggers.clone()));
        let _watch = match (&bootstrap.resources_file, bootstrap.resources_watch) {
            (Some(file), true) => Some(watch::start(file, triggers).map_err(RunError::Startup)?),
            _ => None,
        };
        if let (Some(config), Some(listener)) = (&bootstrap.admin, admin_listener) {
            let source = match &bootstrap.etcd {
                Some(etcd) => {
                    crate::admin::Source::Etcd(Box::new(crate::admin::Store::new(etcd.clone())))
                }
                None => crate::admin::Source::File(bootstrap.resources_file.clone()),
            };
            tokio::spawn(crate::admin::serve(
                listener,
                config.clone(),
                factory.clone(),
                source,
            ));
        }
        if let Some(etcd) = &bootstrap.etcd {
            tokio::spawn(
                EtcdSource {
                    config: etcd.clone(),
                    factory: factory.clone(),
                    metrics,
                    readiness: readiness.clone(),
                }
                .run(),
            );
        }
        let reloader = Reloader {
            bootstrap: bootstrap.clone(),
            factory,
            tls,
            metrics,
            notifier: notifier.clone(),
            current: resources,
            last_seen: None,
        };
        tokio::spawn(reloader.run(requests));
        if let Some(interval) = systemd::watchdog_interval() {
            tokio::spawn(systemd::watchdog(
                notifier.clone(),
                server.liveness(),
                readiness,
                interval,
            ));
        }
        notifier.ready();
        let stop = async {
            stop_signals.nth(1).await;
            notifier.stopping();
        };
        let stopped = server.run(stop, stop_signals.nth(2)).await;
        // Every request has settled its reservation by now; with Redis, apply the last
        // settlements before the process goes (bounded: Redis may be away).
        if tokio::time::timeout(LIMITER_FLUSH_TIMEOUT, limiter.flush())
            .await
            .is_err()
        {
            tracing::warn!("rate-limit settlements not flushed to Redis before exit");
        }
        // Every request has ended by now: send the traces still queued (bounded by the export
        // timeout).
        if let Some(exporter) = exporter {
            exporter.flush().await;
        }
        Ok(stopped)
    })?;
    // Every request has been recorded by now; flush the last access-log lines.
    if let Some(writer) = access_log {
        writer.stop();
    }
    match stopped {
        Stopped::Drained => Ok(()),
        Stopped::WorkerFailed { worker, reason } => Err(RunError::WorkerFailed { worker, reason }),
        Stopped::Aborted => Err(RunError::Aborted),
    }
}
