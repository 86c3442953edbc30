//! The control thread's duties besides supervision: waiting for the stop signal.

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C elsewhere).
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Re-reads the resources file on every SIGHUP and publishes it to all workers. A file with
/// errors is refused as a whole (every error logged) and the running resources stay.
pub(crate) async fn reload_on_sighup(
    bootstrap: aisix_config::Bootstrap,
    factory: std::sync::Arc<aisix_gateway::GatewayFactory>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; resources reload is unavailable");
            return;
        };
        while hangup.recv().await.is_some() {
            match crate::run::load_resources(&bootstrap) {
                Ok(resources) => {
                    tracing::info!(
                        models = resources.models.len(),
                        api_keys = resources.api_keys.len(),
                        "SIGHUP: resources reloaded"
                    );
                    factory.reload(resources);
                }
                Err(errors) => {
                    for error in &errors {
                        tracing::error!(%error, "SIGHUP: resources file refused");
                    }
                    tracing::error!(
                        errors = errors.len(),
                        "SIGHUP: keeping the running resources"
                    );
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (bootstrap, factory);
    }
}
