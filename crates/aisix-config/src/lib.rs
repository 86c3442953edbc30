//! aisix configuration as pure data: the bootstrap config (`config.yaml` + `AISIX_*` variables)
//! and the resources file (`resources.yaml`). Loading collects every error with its path and
//! origin; nothing here starts threads or touches sockets.

mod bootstrap;
mod error;
mod load;
mod resources;
mod suggest;
mod timeouts;

pub use bootstrap::{
    Bootstrap, DownstreamConfig, MetricsConfig, ObservabilityConfig, PrometheusConfig, ProxyConfig,
    Resilience, ShutdownConfig, TlsConfig, UpstreamConfig,
};
pub use error::{ConfigError, ConfigErrors, Origin};
pub use load::{CONFIG_PATH_VAR, ENV_PREFIX, load_bootstrap};
pub use resources::{
    ApiKey, GroupTarget, KeyHash, Model, ModelGroup, ModelPattern, ProviderKey, ProviderKind,
    Resources, Routing, Secret, Strategy, WhenAllUnavailable, hash_key, load_resources,
    parse_resources,
};
pub use timeouts::{TimeoutOverrides, UpstreamTimeouts};
