//! Composition: load and check the configuration, bind, start the workers with the gateway,
//! and supervise them from the control thread until a stop signal or a worker failure.

use std::path::Path;
use std::sync::Arc;

use aisix_bootstrap::{Readiness, ServeSettings, Server, ServingPlan, Stopped};
use aisix_config::{Bootstrap, ConfigError, Origin, Resources};
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

/// Loads the bootstrap config and the resources file, and checks what can be checked offline.
/// Every error, at once.
pub(crate) fn load_and_check(
    config: Option<&Path>,
) -> Result<(Bootstrap, Resources), Vec<ConfigError>> {
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
    let resources = match load_resources(&bootstrap) {
        Ok(resources) => resources,
        Err(mut resource_errors) => {
            errors.append(&mut resource_errors);
            Resources::default()
        }
    };
    if errors.is_empty() {
        Ok((bootstrap, resources))
    } else {
        Err(errors)
    }
}

/// The resources file named by the bootstrap config; none configured means no models.
pub(crate) fn load_resources(bootstrap: &Bootstrap) -> Result<Resources, Vec<ConfigError>> {
    match &bootstrap.resources_file {
        Some(path) => {
            aisix_config::load_resources(path, &|name| std::env::var(name).ok()).map_err(|e| e.0)
        }
        None => Ok(Resources::default()),
    }
}

/// Runs the gateway until SIGTERM/SIGINT (then drains and returns `Ok`) or until a worker dies.
pub fn serve(config: Option<&Path>) -> Result<(), RunError> {
    let (bootstrap, resources) = load_and_check(config).map_err(RunError::Config)?;
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
    if bootstrap.resources_file.is_none() {
        tracing::warn!(
            "no resources_file is configured: there are no models, and every model request is refused"
        );
    }
    tracing::info!(
        provider_keys = resources.provider_keys.len(),
        models = resources.models.len(),
        api_keys = resources.api_keys.len(),
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
    let factory = Arc::new(
        GatewayFactory::new(&bootstrap, resources).map_err(|e| RunError::Startup(e.to_string()))?,
    );
    let listeners = aisix_bootstrap::bind(&plan).map_err(|e| RunError::Startup(e.to_string()))?;

    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("aisix-control")
        .build()
        .map_err(|e| RunError::Startup(format!("cannot start the control runtime: {e}")))?;
    let readiness = Readiness::new();
    let settings = ServeSettings::from_config(&bootstrap);
    let server = Server::start(&plan, listeners, tls, &settings, readiness, factory.clone())
        .map_err(|e| RunError::Startup(e.to_string()))?;
    tracing::info!(addr = %server.local_addr(), tls = bootstrap.proxy.tls.is_some(), "listening");

    let stopped = control.block_on(async {
        tokio::spawn(control::reload_on_sighup(bootstrap.clone(), factory));
        server.run(control::stop_signal()).await
    });
    match stopped {
        Stopped::Drained => Ok(()),
        Stopped::WorkerFailed { worker, reason } => Err(RunError::WorkerFailed { worker, reason }),
    }
}
