//! aisix configuration as pure data: the bootstrap config (`config.yaml` + `AISIX_*` variables)
//! and the resources file (`resources.yaml`). Loading collects every error with its path and
//! origin; nothing here starts threads or touches sockets.

mod bootstrap;
mod duration;
mod error;
mod etcd;
mod load;
mod otlp;
mod resources;
mod suggest;
mod timeouts;

pub use bootstrap::{
    Balance, Bootstrap, CooldownOverrides, DownstreamConfig, MetricsConfig, ObservabilityConfig,
    OnRedisError, PrometheusConfig, ProxyConfig, RateLimitBackend, RateLimitConfig, RedisConfig,
    RedisMode, RedisUrl, Resilience, ResponsesStoreConfig, ShutdownConfig, TlsConfig,
    UpstreamConfig,
};
pub use error::{ConfigError, ConfigErrors, Origin};
pub use etcd::{AdminConfig, EtcdConfig, EtcdTls};
pub use load::{CONFIG_PATH_VAR, ENV_PREFIX, bootstrap_keys, env_var_for, load_bootstrap};
pub use otlp::{Compression, OtlpConfig, OtlpTls, Protocol, Signal};
pub use resources::{
    ApiKey, AwsKeys, BudgetPeriod, COLLECTIONS, CollectionDiff, Continuation, Cost,
    DEFAULT_ANTHROPIC_VERSION, FallbackError, GroupTarget, HealthCheck, KeyHash, LoadedResources,
    Model, ModelGroup, ModelPattern, OutputTokensField, ProviderKey, ProviderKind, RateLimit,
    Resources, ResourcesDiff, Routing, Secret, SpendBudget, SpendingPolicy, Strategy, Usd,
    WhenAllUnavailable, bedrock_api_base, document_key, document_place, hash_key, load_resources,
    load_resources_file, parse_documents, parse_resources, sha256_hex,
};
pub use resources::{CREDENTIALS_ENV, ServiceAccount, VertexKey, vertex_api_base};
pub use timeouts::{TimeoutOverrides, UpstreamTimeouts};
