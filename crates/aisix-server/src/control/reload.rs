//! Reloading what may change while serving: the resources file, and the proxy's TLS pair. A
//! reload applies all of it or none of it: a file with errors, or a certificate that does not
//! load, is refused whole (every error logged with its path) and the running set stays.
//! Requests already running finish on the snapshot they started with.

use std::sync::Arc;
use std::time::SystemTime;

use aisix_bootstrap::RustlsConfig;
use aisix_config::{Bootstrap, ConfigError, LoadedResources, Origin, Resources};
use aisix_gateway::GatewayFactory;
use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::labels::ReloadResult;
use tokio::sync::mpsc;

use super::systemd::Notifier;

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    Sighup,
    /// The resources watch saw the file's folder change.
    FileChanged,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Sighup => "SIGHUP",
            Trigger::FileChanged => "file watch",
        }
    }
}

/// What a successful load produced: the resources file (when one is configured) and the TLS
/// pair (when TLS is configured).
type Loaded = (Option<LoadedResources>, Option<Arc<rustls::ServerConfig>>);

/// The `hash` label value when no resources file is configured.
const NO_FILE: &str = "none";

/// The resources loaded at startup (or nothing when no file is configured), and its `hash`.
pub(crate) fn load_initial(bootstrap: &Bootstrap) -> Result<(Resources, String), Vec<ConfigError>> {
    match &bootstrap.resources_file {
        Some(path) => aisix_config::load_resources_file(path, &|name| std::env::var(name).ok())
            .map(|loaded| (loaded.resources, short_hash(&loaded.sha256)))
            .map_err(|e| e.0),
        None => Ok((Resources::default(), NO_FILE.to_owned())),
    }
}

/// The `aisix_config_info` hash: the first 16 hex digits of the file's SHA-256.
fn short_hash(sha256: &str) -> String {
    sha256.get(..16).unwrap_or(sha256).to_owned()
}

/// Everything a reload touches. Lives on the control thread; one reload at a time.
pub(crate) struct Reloader {
    pub bootstrap: Bootstrap,
    pub factory: Arc<GatewayFactory>,
    /// The proxy listener's TLS, shared with every worker's acceptor.
    pub tls: Option<RustlsConfig>,
    pub metrics: Option<Metrics>,
    pub notifier: Notifier,
    /// The resources in force.
    pub current: Resources,
    /// SHA-256 of the last file a reload looked at, accepted or refused: a watch event that
    /// leaves the content as it was does nothing.
    pub last_seen: Option<String>,
}

impl Reloader {
    /// Serves reload requests one after another until every sender is gone.
    pub(crate) async fn run(mut self, mut triggers: mpsc::Receiver<Trigger>) {
        while let Some(trigger) = triggers.recv().await {
            self.reload(trigger);
        }
    }

    fn reload(&mut self, trigger: Trigger) {
        if trigger == Trigger::FileChanged && !self.file_changed() {
            tracing::debug!("resources watch: content unchanged; nothing to reload");
            return;
        }
        self.notifier.reloading();
        match self.load() {
            Ok(loaded) => self.apply(trigger, loaded),
            Err(errors) => {
                for error in &errors {
                    tracing::error!(trigger = trigger.as_str(), path = %error.path, %error, "reload: refused");
                }
                tracing::error!(
                    trigger = trigger.as_str(),
                    errors = errors.len(),
                    "{}: keeping the running resources",
                    trigger.as_str()
                );
                if let Some(metrics) = &self.metrics {
                    metrics.config_reload(ReloadResult::Failure);
                }
            }
        }
        self.notifier.ready();
    }

    /// Whether the resources file's bytes differ from the last ones looked at.
    fn file_changed(&self) -> bool {
        let Some(path) = &self.bootstrap.resources_file else {
            return false;
        };
        match std::fs::read(path) {
            Ok(bytes) => self.last_seen.as_deref() != Some(&aisix_config::sha256_hex(&bytes)),
            // A file caught between removal and creation: the next event will tell.
            Err(_) => true,
        }
    }

    /// Loads the resources file and the TLS pair, reporting every error of both.
    fn load(&mut self) -> Result<Loaded, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let resources = match &self.bootstrap.resources_file {
            Some(path) => {
                if let Ok(bytes) = std::fs::read(path) {
                    self.last_seen = Some(aisix_config::sha256_hex(&bytes));
                }
                match aisix_config::load_resources_file(path, &|name| std::env::var(name).ok()) {
                    Ok(loaded) => Some(loaded),
                    Err(mut file_errors) => {
                        errors.append(&mut file_errors.0);
                        None
                    }
                }
            }
            None => None,
        };
        let tls = match &self.bootstrap.proxy.tls {
            Some(tls) => match aisix_bootstrap::tls_server_config(tls) {
                Ok(config) => Some(config),
                Err(error) => {
                    errors.push(ConfigError::new(
                        "proxy.tls",
                        error.to_string(),
                        Origin::Unknown,
                    ));
                    None
                }
            },
            None => None,
        };
        if errors.is_empty() {
            Ok((resources, tls))
        } else {
            Err(errors)
        }
    }

    fn apply(&mut self, trigger: Trigger, (loaded, tls): Loaded) {
        if let (Some(current), Some(config)) = (&self.tls, tls) {
            current.reload_from_config(config);
        }
        let hash = loaded
            .as_ref()
            .map_or_else(|| NO_FILE.to_owned(), |l| short_hash(&l.sha256));
        if let Some(loaded) = loaded {
            let diff = self.current.diff(&loaded.resources);
            tracing::info!(
                trigger = trigger.as_str(),
                hash = %hash,
                provider_keys = %diff.provider_keys,
                models = %diff.models,
                api_keys = %diff.api_keys,
                "{}: resources reloaded",
                trigger.as_str()
            );
            self.current = loaded.resources.clone();
            self.factory.reload(loaded.resources);
        } else {
            tracing::info!(trigger = trigger.as_str(), "{}: reloaded", trigger.as_str());
        }
        if let Some(metrics) = &self.metrics {
            metrics.config_reload(ReloadResult::Success);
            metrics.config_loaded(&hash, SystemTime::now());
        }
    }
}
