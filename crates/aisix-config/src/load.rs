//! Loading the bootstrap config with the `config` crate: built-in defaults, then the YAML file,
//! then `AISIX_<SECTION>__<KEY>` variables. Every key is read through one [`Reader`], which
//! records the key as known; whatever the sources hold beyond those keys is an error.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Value, ValueKind};

use crate::bootstrap::{
    Balance, Bootstrap, DownstreamConfig, MetricsConfig, ObservabilityConfig, OnRedisError,
    PrometheusConfig, ProxyConfig, RateLimitBackend, RateLimitConfig, RedisConfig, RedisMode,
    RedisUrl, Resilience, ResponsesStoreConfig, ShutdownConfig, TlsConfig, UpstreamConfig,
};
use crate::duration::{self, Unit};
use crate::error::{ConfigError, ConfigErrors, Origin};
use crate::etcd::{AdminConfig, EtcdConfig, EtcdTls};
use crate::resources::{KeyHash, hash_key};
use crate::suggest;

mod otlp;
use crate::timeouts::UpstreamTimeouts;

/// The longest duration any key takes: `u32::MAX` seconds (136 years), far enough for "never"
/// and near enough that adding it to a clock reading cannot overflow.
const MAX_DURATION: Duration = Duration::from_secs(u32::MAX as u64);

/// Environment variables with this prefix are configuration keys.
pub const ENV_PREFIX: &str = "AISIX_";
/// Names the config file; it is not itself a configuration key.
pub const CONFIG_PATH_VAR: &str = "AISIX_CONFIG";
/// Variables under [`ENV_PREFIX`] that are not configuration keys.
const RESERVED_VARS: &[&str] = &[CONFIG_PATH_VAR];

/// Loads and validates the bootstrap config from `file` (optional) and `env` (the process
/// environment, passed in so tests need not mutate it). Returns every error found.
pub fn load_bootstrap<I>(file: Option<&Path>, env: I) -> Result<Bootstrap, ConfigErrors>
where
    I: IntoIterator<Item = (String, String)>,
{
    let env: Vec<(String, String)> = env.into_iter().collect();
    let otel_env: BTreeMap<String, String> = env
        .iter()
        .filter(|(name, _)| name.starts_with(otlp::OTEL_PREFIX))
        .cloned()
        .collect();
    let env_vars: BTreeMap<String, String> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && !RESERVED_VARS.contains(&&**name))
        .collect();
    // key path -> variable name, to name the variable in errors.
    let env_origin: BTreeMap<String, String> = env_vars
        .keys()
        .map(|name| (env_key_path(name), name.clone()))
        .collect();

    let mut builder = Config::builder();
    if let Some(file) = file {
        builder =
            builder.add_source(File::new(&file.to_string_lossy(), FileFormat::Yaml).required(true));
    }
    builder = builder.add_source(
        Environment::with_prefix(ENV_PREFIX.trim_end_matches('_'))
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(env_vars.into_iter().collect())),
    );
    let cfg = builder.build().map_err(|e| {
        let origin = file.map_or(Origin::Unknown, |f| Origin::File(f.to_path_buf()));
        ConfigErrors(vec![ConfigError::new("", source_error_message(&e), origin)])
    })?;

    let mut reader = Reader {
        cfg: &cfg,
        file,
        env_origin: &env_origin,
        otel_env: &otel_env,
        known: BTreeSet::new(),
        errors: ConfigErrors::default(),
    };
    let bootstrap = read_bootstrap(&mut reader);
    reader.report_unknown_keys();
    reader.errors.into_result(bootstrap)
}

/// `AISIX_PROXY__THREAD_PER_CORE` -> `proxy.thread_per_core`.
fn env_key_path(var: &str) -> String {
    var[ENV_PREFIX.len()..].to_lowercase().replace("__", ".")
}

fn source_error_message(error: &config::ConfigError) -> String {
    match error {
        config::ConfigError::NotFound(_) => "configuration file not found".to_owned(),
        config::ConfigError::FileParse { cause, .. } => format!("not valid YAML: {cause}"),
        other => other.to_string(),
    }
}

fn read_bootstrap(r: &mut Reader<'_>) -> Bootstrap {
    let defaults = Bootstrap::default();
    let config_dir = r.file.and_then(Path::parent).map(Path::to_path_buf);
    let resolve = |p: PathBuf| match &config_dir {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p,
    };

    let proxy = {
        let d = defaults.proxy;
        let workers = r.u64("proxy.workers").and_then(|(n, origin)| {
            let n = NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX));
            if n.is_none() {
                r.error("proxy.workers", "must be at least 1", origin);
            }
            n
        });
        let tls = r.table_present("proxy.tls").then(|| {
            let cert_file = r.required_string("proxy.tls.cert_file");
            let key_file = r.required_string("proxy.tls.key_file");
            TlsConfig {
                cert_file: resolve(PathBuf::from(cert_file.unwrap_or_default())),
                key_file: resolve(PathBuf::from(key_file.unwrap_or_default())),
            }
        });
        let request_body_limit_bytes = r
            .bounded("proxy.request_body_limit_bytes", 1, u64::MAX)
            .unwrap_or(d.request_body_limit_bytes);
        let max_buffered_bytes_per_worker = r
            .bounded("proxy.max_buffered_bytes_per_worker", 1024 * 1024, 1 << 40)
            .unwrap_or(d.max_buffered_bytes_per_worker);
        if max_buffered_bytes_per_worker < request_body_limit_bytes {
            r.refuse("proxy.max_buffered_bytes_per_worker", "must be at least proxy.request_body_limit_bytes, or a body at the limit could never be read");
        }
        let max_buffered_percent_per_key = r
            .bounded("proxy.max_buffered_percent_per_key", 1, 100)
            .map_or(d.max_buffered_percent_per_key, |n| n as u8);
        ProxyConfig {
            addr: r.socket_addr("proxy.addr").unwrap_or(d.addr),
            thread_per_core: r.bool("proxy.thread_per_core").unwrap_or(d.thread_per_core),
            workers,
            backlog: r
                .bounded("proxy.backlog", 1, i32::MAX as u64)
                .map_or(d.backlog, |n| n as u32),
            request_body_limit_bytes,
            max_buffered_bytes_per_worker,
            max_buffered_percent_per_key,
            tls,
            pin_workers: r.bool("proxy.pin_workers").unwrap_or(d.pin_workers),
            balance: read_balance(r).unwrap_or(d.balance),
        }
    };

    let downstream = {
        let d = defaults.downstream;
        DownstreamConfig {
            header_read_timeout: r.secs(
                "downstream.header_read_timeout_secs",
                1,
                d.header_read_timeout,
            ),
            request_body_timeout: r.secs(
                "downstream.request_body_timeout_secs",
                1,
                d.request_body_timeout,
            ),
            idle_timeout: r
                .optional_secs("downstream.idle_timeout_secs")
                .unwrap_or(d.idle_timeout),
            sse_keepalive_interval: r
                .optional_secs("downstream.sse_keepalive_interval_secs")
                .unwrap_or(d.sse_keepalive_interval),
            max_requests_per_connection: r
                .u64_value("downstream.max_requests_per_connection")
                .map_or(d.max_requests_per_connection, NonZeroU64::new),
            max_connection_age: r
                .optional_secs("downstream.max_connection_age_secs")
                .unwrap_or(d.max_connection_age),
            http1_max_buf_size: r.usize(
                "downstream.http1_max_buf_size_bytes",
                DownstreamConfig::MIN_HTTP1_MAX_BUF_SIZE as u64,
                d.http1_max_buf_size,
            ),
        }
    };

    let upstream = {
        let d = defaults.upstream;
        let t = d.timeouts;
        let c = d.resilience;
        UpstreamConfig {
            timeouts: UpstreamTimeouts {
                connect: r.millis("upstream.connect_timeout_ms", t.connect),
                first_token: r.millis("upstream.first_token_timeout_ms", t.first_token),
                stream_idle: r.millis("upstream.stream_idle_timeout_ms", t.stream_idle),
                total: r.millis("upstream.timeout_ms", t.total),
            },
            pool_idle_timeout: r.secs("upstream.pool_idle_timeout_secs", 1, d.pool_idle_timeout),
            pool_max_idle_per_host: r.usize(
                "upstream.pool_max_idle_per_host",
                1,
                d.pool_max_idle_per_host,
            ),
            pool_max_connections_per_host: r.usize(
                "upstream.pool_max_connections_per_host",
                0,
                d.pool_max_connections_per_host,
            ),
            max_sse_event_bytes: r.usize(
                "upstream.max_sse_event_bytes",
                1024,
                d.max_sse_event_bytes,
            ),
            max_response_bytes: r.usize("upstream.max_response_bytes", 1024, d.max_response_bytes),
            resilience: Resilience {
                enabled: c.enabled,
                cooldown_failures: r
                    .bounded("upstream.cooldown_failures", 1, 1000)
                    .map_or(c.cooldown_failures, |n| n as u32),
                cooldown_window: r.millis("upstream.cooldown_window_ms", c.cooldown_window),
                cooldown: r.millis("upstream.cooldown_ms", c.cooldown),
                key_cooldown: r.millis("upstream.key_cooldown_ms", c.key_cooldown),
                retry_after_max: r.millis("upstream.retry_after_max_ms", c.retry_after_max),
                retry_budget_percent: r
                    .bounded("upstream.retry_budget_percent", 0, 100)
                    .map_or(c.retry_budget_percent, |n| n as u32),
            },
        }
    };

    let shutdown = ShutdownConfig {
        readiness_grace: r.secs(
            "shutdown.readiness_grace_secs",
            0,
            defaults.shutdown.readiness_grace,
        ),
        drain_timeout: r.secs(
            "shutdown.drain_timeout_secs",
            0,
            defaults.shutdown.drain_timeout,
        ),
    };

    let observability = {
        let d = defaults.observability;
        let dp = d.metrics.prometheus;
        let path = r
            .string("observability.metrics.prometheus.path")
            .unwrap_or(dp.path);
        if !path.starts_with('/') {
            r.refuse(
                "observability.metrics.prometheus.path",
                "must start with '/'",
            );
        }
        ObservabilityConfig {
            log_level: r.string("observability.log_level").unwrap_or(d.log_level),
            access_log: r.bool("observability.access_log").unwrap_or(d.access_log),
            metrics: MetricsConfig {
                prometheus: PrometheusConfig {
                    enabled: r
                        .bool("observability.metrics.prometheus.enabled")
                        .unwrap_or(dp.enabled),
                    addr: r
                        .socket_addr("observability.metrics.prometheus.addr")
                        .unwrap_or(dp.addr),
                    path,
                },
            },
            otlp: otlp::read(r, &resolve),
        }
    };

    let ratelimit = read_ratelimit(r);
    let store = ResponsesStoreConfig::default();
    let responses_store = ResponsesStoreConfig {
        max_entries: r.usize("responses_store.max_entries", 0, store.max_entries),
        max_bytes: r.usize("responses_store.max_bytes", 0, store.max_bytes),
        ttl: r.secs("responses_store.ttl_secs", 1, store.ttl),
    };

    let resources_file = r
        .string("resources_file")
        .map(|p| resolve(PathBuf::from(p)));
    let resources_watch = r
        .bool("resources_watch")
        .unwrap_or(defaults.resources_watch);
    if resources_watch && resources_file.is_none() {
        r.refuse(
            "resources_watch",
            "needs resources_file: there is no file to watch",
        );
    }

    let etcd = read_etcd(r, &resolve);
    if etcd.is_some() && resources_file.is_some() {
        r.refuse(
            "etcd",
            "cannot be set together with resources_file: resources come from one source",
        );
    }
    let admin = read_admin(r);
    if let Some(admin) = &admin
        && admin.addr.port() != 0
        && (admin.addr == proxy.addr || admin.addr == observability.metrics.prometheus.addr)
    {
        r.refuse(
            "admin.addr",
            "must differ from proxy.addr and observability.metrics.prometheus.addr",
        );
    }

    if observability.metrics.prometheus.enabled
        && observability.metrics.prometheus.addr == proxy.addr
        && proxy.addr.port() != 0
    {
        r.refuse(
            "observability.metrics.prometheus.addr",
            format!("must differ from proxy.addr ({})", proxy.addr),
        );
    }

    Bootstrap {
        proxy,
        downstream,
        upstream,
        shutdown,
        observability,
        ratelimit,
        responses_store,
        resources_file,
        resources_watch,
        etcd,
        admin,
        config_file: r.file.map(Path::to_path_buf),
    }
}

fn read_etcd(r: &mut Reader<'_>, resolve: &dyn Fn(PathBuf) -> PathBuf) -> Option<EtcdConfig> {
    if !r.table_present("etcd") {
        return None;
    }
    let endpoints = r.string_list("etcd.endpoints").unwrap_or_default();
    if endpoints.is_empty() {
        r.refuse(
            "etcd.endpoints",
            "needs at least one endpoint (http://host:2379)",
        );
    }
    for endpoint in &endpoints {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            r.refuse(
                "etcd.endpoints",
                format!("expected http://host:port or https://host:port, got {endpoint:?}"),
            );
        }
    }
    let prefix = r
        .string("etcd.prefix")
        .unwrap_or_else(|| EtcdConfig::DEFAULT_PREFIX.to_owned());
    if !prefix.starts_with('/') || prefix.trim_end_matches('/').is_empty() {
        r.refuse(
            "etcd.prefix",
            "must start with '/' and name a folder (such as /aisix)",
        );
    }
    let user = r.string("etcd.user");
    let password_env = r.string("etcd.password_env");
    if user.is_some() != password_env.is_some() {
        r.refuse("etcd.user", "etcd.user and etcd.password_env go together");
    }
    let tls = r.table_present("etcd.tls").then(|| {
        let file = |r: &mut Reader<'_>, key| r.string(key).map(|p| resolve(PathBuf::from(p)));
        EtcdTls {
            ca_cert_file: file(r, "etcd.tls.ca_cert_file"),
            client_cert_file: file(r, "etcd.tls.client_cert_file"),
            client_key_file: file(r, "etcd.tls.client_key_file"),
            domain_name: r.string("etcd.tls.domain_name"),
        }
    });
    if tls.is_some()
        && let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://"))
    {
        r.refuse(
            "etcd.endpoints",
            format!("{plain:?} is plain http, but etcd.tls is set: use https://"),
        );
    }
    if let Some(tls) = &tls
        && tls.client_cert_file.is_some() != tls.client_key_file.is_some()
    {
        r.refuse(
            "etcd.tls.client_cert_file",
            "client_cert_file and client_key_file go together",
        );
    }
    let dial_timeout = r.millis("etcd.dial_timeout_ms", EtcdConfig::DEFAULT_DIAL_TIMEOUT);
    Some(EtcdConfig {
        endpoints,
        prefix: prefix.trim_end_matches('/').to_owned(),
        user,
        password_env,
        tls,
        dial_timeout,
    })
}

fn read_admin(r: &mut Reader<'_>) -> Option<AdminConfig> {
    if !r.table_present("admin") {
        return None;
    }
    let addr = r.socket_addr("admin.addr");
    if addr.is_none() && !r.errors.iter().any(|e| e.path == "admin.addr") {
        r.refuse("admin.addr", "is required (such as 127.0.0.1:3001)");
    }
    let keys = r.string_list("admin.admin_keys").unwrap_or_default();
    if keys.is_empty() {
        r.refuse(
            "admin.admin_keys",
            "needs at least one key: the admin API never runs open",
        );
    }
    let mut admin_keys = Vec::with_capacity(keys.len());
    for key in keys {
        match key.strip_prefix("sha256:") {
            Some(hex) => match KeyHash::from_hex(hex) {
                Some(hash) => admin_keys.push(hash),
                None => r.refuse(
                    "admin.admin_keys",
                    "sha256: must be followed by 64 hexadecimal characters",
                ),
            },
            None if key.len() < 16 => r.refuse(
                "admin.admin_keys",
                "each key must be at least 16 characters long",
            ),
            None => admin_keys.push(hash_key(&key)),
        }
    }
    Some(AdminConfig {
        addr: addr?,
        admin_keys,
    })
}

fn read_balance(r: &mut Reader<'_>) -> Option<Balance> {
    let value = r.string("proxy.balance")?;
    match value.as_str() {
        "reuseport" => Some(Balance::ReusePort),
        "handoff" => Some(Balance::Handoff),
        other => {
            r.refuse(
                "proxy.balance",
                format!("expected reuseport or handoff, got {other:?}"),
            );
            None
        }
    }
}

fn read_ratelimit(r: &mut Reader<'_>) -> RateLimitConfig {
    let defaults = RateLimitConfig::default();
    let concurrency_ttl = r.secs(
        "ratelimit.concurrency_ttl_secs",
        1,
        defaults.concurrency_ttl,
    );
    let redis_given = r.table_present("ratelimit.redis");
    let url = r.string("ratelimit.redis.url");
    let mode = r.string("ratelimit.redis.mode");
    let on_error = r.string("ratelimit.redis.on_error");
    let budget_on_error = r.string("ratelimit.redis.budget_on_error");
    let timeout = r
        .duration(
            "ratelimit.redis.timeout_ms",
            Unit::Milliseconds,
            Duration::from_millis(1),
            Duration::from_secs(60),
        )
        .unwrap_or(RateLimitConfig::DEFAULT_REDIS_TIMEOUT);
    let backend = r.string("ratelimit.backend");
    let redis = match backend.as_deref() {
        None | Some("memory") => {
            if redis_given {
                r.refuse(
                    "ratelimit.redis",
                    "is set but ratelimit.backend is memory (set backend: redis to use it)",
                );
            }
            false
        }
        Some("redis") => true,
        Some(other) => {
            r.refuse(
                "ratelimit.backend",
                format!("expected memory or redis, got {other:?}"),
            );
            false
        }
    };
    if !redis {
        return RateLimitConfig {
            backend: RateLimitBackend::Memory,
            concurrency_ttl,
        };
    }
    let mut on_redis_error = |path: &str, given: Option<String>| match given.as_deref() {
        None | Some("allow") => OnRedisError::Allow,
        Some("deny") => OnRedisError::Deny,
        Some(other) => {
            r.refuse(path, format!("expected allow or deny, got {other:?}"));
            OnRedisError::Allow
        }
    };
    let on_error = on_redis_error("ratelimit.redis.on_error", on_error);
    let budget_on_error = on_redis_error("ratelimit.redis.budget_on_error", budget_on_error);
    let cluster = match mode.as_deref() {
        None | Some("single") => false,
        Some("cluster") => true,
        Some(other) => {
            r.refuse(
                "ratelimit.redis.mode",
                format!("expected single or cluster, got {other:?}"),
            );
            false
        }
    };
    let origin = r.origin_of("ratelimit.redis.url");
    let urls = match url.map(|url| redis_urls(&url, cluster)) {
        Some(Ok(urls)) => Some(urls),
        Some(Err(message)) => {
            r.error("ratelimit.redis.url", message, origin);
            None
        }
        None => {
            r.error(
                "ratelimit.redis.url",
                "is required when ratelimit.backend is redis",
                origin,
            );
            None
        }
    };
    RateLimitConfig {
        backend: urls.map_or(RateLimitBackend::Memory, |mut urls| {
            let url = urls[0].clone();
            let mode = if cluster {
                RedisMode::Cluster(std::mem::take(&mut urls))
            } else {
                RedisMode::Single
            };
            RateLimitBackend::Redis(RedisConfig {
                url,
                mode,
                on_error,
                budget_on_error,
                timeout,
            })
        }),
        concurrency_ttl,
    }
}

/// `ratelimit.redis.url`: one URL, or with `mode: cluster` one or more separated by commas
/// (the nodes the cluster is first asked about). Never empty when `Ok`.
fn redis_urls(text: &str, cluster: bool) -> Result<Vec<RedisUrl>, String> {
    let texts: Vec<&str> = text.split(',').map(str::trim).collect();
    if texts.len() > 1 && !cluster {
        return Err(
            "names several servers; set ratelimit.redis.mode: cluster to use a Redis Cluster"
                .to_owned(),
        );
    }
    let mut urls = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let nth = if texts.len() > 1 {
            format!("node {}: ", i + 1)
        } else {
            String::new()
        };
        let url = RedisUrl::parse(text).map_err(|message| format!("{nth}{message}"))?;
        if cluster && url.database().is_some_and(|db| db != 0) {
            return Err(format!(
                "{nth}a Redis Cluster has only database 0; drop the /db after the host"
            ));
        }
        urls.push(url);
    }
    Ok(urls)
}

/// Every leaf key of the bootstrap config (`proxy.addr`, `shutdown.drain_timeout_secs`, …), in
/// sorted order: the keys a file or an `AISIX_*` variable may set. For documentation checks.
pub fn bootstrap_keys() -> Vec<&'static str> {
    // TLS, etcd and admin keys are read only when their table is present, so give each one.
    let cfg = Config::builder()
        .set_override("proxy.tls.cert_file", "cert.pem")
        .and_then(|b| b.set_override("proxy.tls.key_file", "key.pem"))
        .and_then(|b| b.set_override("etcd.endpoints", "http://127.0.0.1:2379"))
        .and_then(|b| b.set_override("etcd.tls.domain_name", "etcd"))
        .and_then(|b| b.set_override("admin.addr", "127.0.0.1:3001"))
        .and_then(|b| b.build());
    let Ok(cfg) = cfg else {
        return Vec::new();
    };
    let env_origin = BTreeMap::new();
    let mut reader = Reader {
        cfg: &cfg,
        file: None,
        env_origin: &env_origin,
        otel_env: &env_origin,
        known: BTreeSet::new(),
        errors: ConfigErrors::default(),
    };
    let _ = read_bootstrap(&mut reader);
    let known = reader.known;
    known
        .iter()
        .copied()
        .filter(|key| {
            !known
                .iter()
                .any(|other| other.len() > key.len() && other.starts_with(&format!("{key}.")))
        })
        .collect()
}

/// The environment variable that sets `key`: `proxy.thread_per_core` ->
/// `AISIX_PROXY__THREAD_PER_CORE`.
pub fn env_var_for(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', "__"))
}

/// Reads typed values by key path, remembering each path as known and each failure as an error.
struct Reader<'a> {
    cfg: &'a Config,
    file: Option<&'a Path>,
    env_origin: &'a BTreeMap<String, String>,
    /// The standard `OTEL_*` variables, for `observability.otlp`.
    otel_env: &'a BTreeMap<String, String>,
    known: BTreeSet<&'static str>,
    errors: ConfigErrors,
}

impl Reader<'_> {
    fn origin_of(&self, path: &str) -> Origin {
        match self.env_origin.get(path) {
            Some(var) => Origin::Env(var.clone()),
            None => self
                .file
                .map_or(Origin::Unknown, |f| Origin::File(f.to_path_buf())),
        }
    }

    fn error(&mut self, path: &str, message: impl Into<String>, origin: Origin) {
        self.errors.push(ConfigError::new(path, message, origin));
    }

    /// An error at `path`, from wherever `path` was set.
    fn refuse(&mut self, path: &str, message: impl Into<String>) {
        let origin = self.origin_of(path);
        self.error(path, message, origin);
    }

    /// The raw value at `path`, if set to something other than null.
    fn raw(&mut self, path: &'static str) -> Option<(Value, Origin)> {
        self.known.insert(path);
        match self.cfg.get::<Value>(path) {
            Ok(value) if matches!(value.kind, ValueKind::Nil) => None,
            Ok(value) => Some((value, self.origin_of(path))),
            Err(_) => None,
        }
    }

    /// Whether the table at `path` is present (so its required keys must be given).
    fn table_present(&mut self, path: &'static str) -> bool {
        self.known.insert(path);
        match self.cfg.get::<Value>(path) {
            Ok(value) => match value.kind {
                ValueKind::Nil => false,
                ValueKind::Table(_) => true,
                _ => {
                    let origin = self.origin_of(path);
                    self.error(path, "expected a mapping", origin);
                    false
                }
            },
            Err(_) => false,
        }
    }

    fn string(&mut self, path: &'static str) -> Option<String> {
        let (value, origin) = self.raw(path)?;
        match value.kind {
            ValueKind::String(s) => Some(s),
            ValueKind::I64(n) => Some(n.to_string()),
            ValueKind::U64(n) => Some(n.to_string()),
            _ => {
                self.error(path, "expected a string", origin);
                None
            }
        }
    }

    fn required_string(&mut self, path: &'static str) -> Option<String> {
        let value = self.string(path);
        if value.is_none() && !self.errors.iter().any(|e| e.path == path) {
            let origin = self.origin_of(path.rsplit_once('.').map_or(path, |(p, _)| p));
            self.error(path, "is required", origin);
        }
        value
    }

    /// A list of strings: a YAML sequence, or one comma-separated string (as a variable gives).
    fn string_list(&mut self, path: &'static str) -> Option<Vec<String>> {
        let (value, origin) = self.raw(path)?;
        let items = match value.kind {
            ValueKind::String(s) => {
                return Some(
                    s.split(',')
                        .map(str::trim)
                        .filter(|item| !item.is_empty())
                        .map(str::to_owned)
                        .collect(),
                );
            }
            ValueKind::Array(items) => items,
            _ => {
                self.error(path, "expected a list of strings", origin);
                return None;
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item.kind {
                ValueKind::String(s) => out.push(s),
                _ => {
                    self.error(path, "expected a list of strings", origin);
                    return None;
                }
            }
        }
        Some(out)
    }

    fn bool(&mut self, path: &'static str) -> Option<bool> {
        let (value, origin) = self.raw(path)?;
        match value.kind {
            ValueKind::Boolean(b) => Some(b),
            ValueKind::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            ValueKind::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            _ => {
                self.error(path, "expected true or false", origin);
                None
            }
        }
    }

    fn u64(&mut self, path: &'static str) -> Option<(u64, Origin)> {
        let (value, origin) = self.raw(path)?;
        let parsed = match &value.kind {
            ValueKind::I64(n) => u64::try_from(*n).ok(),
            ValueKind::U64(n) => Some(*n),
            ValueKind::I128(n) => u64::try_from(*n).ok(),
            ValueKind::U128(n) => u64::try_from(*n).ok(),
            ValueKind::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        match parsed {
            Some(n) => Some((n, origin)),
            None => {
                self.error(path, "expected a non-negative integer", origin);
                None
            }
        }
    }

    fn u64_value(&mut self, path: &'static str) -> Option<u64> {
        self.u64(path).map(|(n, _)| n)
    }

    fn bounded(&mut self, path: &'static str, min: u64, max: u64) -> Option<u64> {
        let (n, origin) = self.u64(path)?;
        if n < min {
            self.error(path, format!("must be at least {min}"), origin);
            None
        } else if n > max {
            self.error(path, format!("must be at most {max}"), origin);
            None
        } else {
            Some(n)
        }
    }

    /// A duration from `min` to `max`: a humantime string (`30s`, `250ms`) or a bare number of
    /// `unit` (the unit the key's name ends in).
    fn duration(
        &mut self,
        path: &'static str,
        unit: Unit,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        let (value, origin) = self.raw(path)?;
        let parsed = match &value.kind {
            ValueKind::I64(n) => u64::try_from(*n).ok().map(|n| unit.of(n)),
            ValueKind::U64(n) => Some(unit.of(*n)),
            ValueKind::I128(n) => u64::try_from(*n).ok().map(|n| unit.of(n)),
            ValueKind::U128(n) => u64::try_from(*n).ok().map(|n| unit.of(n)),
            ValueKind::String(s) => duration::parse(s, unit).ok(),
            _ => None,
        };
        match parsed {
            None => self.error(path, duration::expected(unit), origin),
            Some(d) if d < min => self.error(
                path,
                format!("must be at least {}", duration::display(min)),
                origin,
            ),
            Some(d) if d > max => self.error(
                path,
                format!("must be at most {}", duration::display(max)),
                origin,
            ),
            Some(d) => return Some(d),
        }
        None
    }

    /// A `_secs` key from `min` seconds up to `u32::MAX` seconds, `default` when absent or
    /// wrong.
    fn secs(&mut self, path: &'static str, min: u64, default: Duration) -> Duration {
        self.duration(path, Unit::Seconds, Duration::from_secs(min), MAX_DURATION)
            .unwrap_or(default)
    }

    /// A `_secs` key where 0 turns the feature off: `Some(None)` for 0, `None` when absent or
    /// wrong.
    fn optional_secs(&mut self, path: &'static str) -> Option<Option<Duration>> {
        self.duration(path, Unit::Seconds, Duration::ZERO, MAX_DURATION)
            .map(|d| (!d.is_zero()).then_some(d))
    }

    /// A `_ms` key from 1 ms up to `u32::MAX` milliseconds, `default` when absent or wrong.
    fn millis(&mut self, path: &'static str, default: Duration) -> Duration {
        self.duration(
            path,
            Unit::Milliseconds,
            Duration::from_millis(1),
            Duration::from_millis(u32::MAX.into()),
        )
        .unwrap_or(default)
    }

    /// A size or count from `min` up to `u32::MAX`, `default` when absent or wrong.
    fn usize(&mut self, path: &'static str, min: u64, default: usize) -> usize {
        self.bounded(path, min, u32::MAX.into())
            .map_or(default, |n| n as usize)
    }

    fn socket_addr(&mut self, path: &'static str) -> Option<SocketAddr> {
        let origin = self.origin_of(path);
        let text = self.string(path)?;
        match text.parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.error(
                    path,
                    format!("expected IP:port (such as 0.0.0.0:3000), got {text:?}"),
                    origin,
                );
                None
            }
        }
    }

    /// Records every key the sources hold that no read asked for.
    fn report_unknown_keys(&mut self) {
        let Ok(root) = self
            .cfg
            .clone()
            .try_deserialize::<config::Map<String, Value>>()
        else {
            return;
        };
        let mut unknown = Vec::new();
        walk(&root, "", &self.known, &mut unknown);
        for path in unknown {
            let origin = self.origin_of(&path);
            let message = match suggest(&path, &self.known) {
                Some(known) => format!("unknown key (did you mean {known}?)"),
                None => "unknown key".to_owned(),
            };
            self.error(&path, message, origin);
        }
    }
}

fn walk(
    table: &config::Map<String, Value>,
    prefix: &str,
    known: &BTreeSet<&'static str>,
    unknown: &mut Vec<String>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let is_leaf = known.contains(path.as_str());
        let is_parent = known.iter().any(|k| {
            k.len() > path.len() && k.starts_with(&path) && k[path.len()..].starts_with('.')
        });
        match &value.kind {
            ValueKind::Table(child) if is_parent => walk(child, &path, known, unknown),
            _ if is_leaf || is_parent => {}
            _ => unknown.push(path),
        }
    }
}

/// The known key closest to `path` at the same depth, if it is a plausible typo.
fn suggest(path: &str, known: &BTreeSet<&'static str>) -> Option<&'static str> {
    let depth = path.matches('.').count();
    let same_depth = known
        .iter()
        .copied()
        .filter(|k| k.matches('.').count() == depth);
    suggest::closest(path, same_depth, 3)
}
