//! Composition: load and check the configuration, bind, start the workers with the gateway,
//! and supervise them from the control thread until a stop signal or a worker failure.

use std::path::Path;
use std::sync::Arc;

use aisix_bootstrap::{Readiness, ServeSettings, Server, ServingPlan, Stopped};
use aisix_config::{Bootstrap, ConfigError, Origin};
use aisix_gateway::GatewayFactory;

use crate::control;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid configuration:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Config(Vec<ConfigError>),
    #[error("{0}")]
    Startup(String),
    #[error("worker {worker} exited unexpectedly: {reason}")]
    WorkerFailed { worker: String, reason: String },
}

/// Loads the bootstrap config and checks what can be checked offline. Every error, at once.
pub(crate) fn load_and_check(config: Option<&Path>) -> Result<Bootstrap, Vec<ConfigError>> {
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
    if errors.is_empty() {
        Ok(bootstrap)
    } else {
        Err(errors)
    }
}

/// Runs the gateway until SIGTERM/SIGINT (then drains and returns `Ok`) or until a worker dies.
pub fn serve(config: Option<&Path>) -> Result<(), RunError> {
    let bootstrap = aisix_config::load_bootstrap(config, std::env::vars())
        .map_err(|e| RunError::Config(e.0))?;
    aisix_obs::log::init(&bootstrap.observability.log_level).map_err(RunError::Startup)?;

    let plan = ServingPlan::resolve(&bootstrap.proxy);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        mode = %plan.mode,
        workers = plan.workers.get(),
        workers_from = ?plan.workers_source,
        config = ?bootstrap.config_file,
        "starting aisix"
    );
    // TLS is loaded before any port is taken, so a bad path fails without side effects.
    let tls = match &bootstrap.proxy.tls {
        Some(tls) => {
            Some(aisix_bootstrap::load_tls(tls).map_err(|e| RunError::Startup(e.to_string()))?)
        }
        None => None,
    };
    let listeners = aisix_bootstrap::bind(&plan).map_err(|e| RunError::Startup(e.to_string()))?;

    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("aisix-control")
        .build()
        .map_err(|e| RunError::Startup(format!("cannot start the control runtime: {e}")))?;
    let readiness = Readiness::new();
    let factory = Arc::new(GatewayFactory::new());
    let settings = ServeSettings::from_config(&bootstrap);
    let server = Server::start(&plan, listeners, tls, &settings, readiness, factory)
        .map_err(|e| RunError::Startup(e.to_string()))?;
    tracing::info!(addr = %server.local_addr(), tls = bootstrap.proxy.tls.is_some(), "listening");

    match control.block_on(server.run(control::stop_signal())) {
        Stopped::Drained => Ok(()),
        Stopped::WorkerFailed { worker, reason } => Err(RunError::WorkerFailed { worker, reason }),
    }
}
