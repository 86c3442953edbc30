//! The bootstrap configuration: settings read once at startup (listeners, workers, timeouts,
//! logging). Defaults here are the production defaults; the README lists each one.

use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use crate::otlp::OtlpConfig;
use crate::resources::Secret;
use crate::timeouts::UpstreamTimeouts;

/// Everything `config.yaml` and the `AISIX_*` variables can set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Bootstrap {
    pub proxy: ProxyConfig,
    pub downstream: DownstreamConfig,
    pub upstream: UpstreamConfig,
    pub shutdown: ShutdownConfig,
    pub observability: ObservabilityConfig,
    pub ratelimit: RateLimitConfig,
    /// `responses_store`: the bounds of the conversations kept for the Responses API.
    pub responses_store: ResponsesStoreConfig,
    /// The resources file, resolved against the config file's folder.
    pub resources_file: Option<PathBuf>,
    /// `resources_watch`: reload when the resources file changes (including the symlink swap a
    /// Kubernetes ConfigMap volume does), besides on SIGHUP.
    pub resources_watch: bool,
    /// `etcd`: resources from etcd instead of `resources_file` (never both).
    pub etcd: Option<crate::etcd::EtcdConfig>,
    /// `admin`: the admin API; `None` keeps it off.
    pub admin: Option<crate::etcd::AdminConfig>,
    /// The config file this was loaded from, if any.
    pub config_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// `proxy.addr`: where clients connect.
    pub addr: SocketAddr,
    /// `proxy.thread_per_core`: one runtime and listener per worker thread.
    pub thread_per_core: bool,
    /// `proxy.workers`: `None` follows the parallelism available to the process.
    pub workers: Option<NonZeroUsize>,
    /// `proxy.backlog`: the listen(2) backlog of each listener.
    pub backlog: u32,
    /// `proxy.request_body_limit_bytes`: larger request bodies are refused with 413.
    pub request_body_limit_bytes: u64,
    /// `proxy.max_buffered_bytes_per_worker`: request bytes (and whole answers held to
    /// translate them) one worker holds in memory at once (the shared runtime's process:
    /// workers × this); a request that would cross it waits within its body deadline, else
    /// gets 503 with `Retry-After`.
    pub max_buffered_bytes_per_worker: u64,
    /// `proxy.max_buffered_percent_per_key`: the percentage of that budget one API key may hold
    /// at once (never less than one body at `request_body_limit_bytes`); past it the key's
    /// requests wait the same way, and other keys' are not held up.
    pub max_buffered_percent_per_key: u8,
    /// `proxy.tls`: serve HTTPS on `addr` when set.
    pub tls: Option<TlsConfig>,
    /// `proxy.pin_workers`: pin `tpc-N` to the N-th CPU the process may run on
    /// (thread-per-core only).
    pub pin_workers: bool,
    /// `proxy.balance`: how new connections are spread over thread-per-core workers.
    pub balance: Balance,
}

/// `proxy.balance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each worker serves what its own `SO_REUSEPORT` listener accepts: the kernel's hash of
    /// the connection's addresses decides.
    ReusePort,
    /// A worker that accepts a connection while it serves clearly more connections than the
    /// least-loaded worker hands the socket to that worker.
    Handoff,
}

impl Balance {
    /// The value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Balance::ReusePort => "reuseport",
            Balance::Handoff => "handoff",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain, resolved against the config file's folder.
    pub cert_file: PathBuf,
    /// PEM private key, resolved against the config file's folder.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamConfig {
    /// `downstream.header_read_timeout_secs`: a request head must arrive in full within this.
    pub header_read_timeout: Duration,
    /// `downstream.request_body_timeout_secs`: a request body must arrive in full within this,
    /// counted from its head; else 408.
    pub request_body_timeout: Duration,
    /// `downstream.idle_timeout_secs`: a connection with no request for this long is closed;
    /// `None` (0) leaves idle connections to the client.
    pub idle_timeout: Option<Duration>,
    /// `downstream.sse_keepalive_interval_secs`: an SSE comment is sent when the upstream is
    /// silent this long; `None` (0) disables it.
    pub sse_keepalive_interval: Option<Duration>,
    /// `downstream.max_requests_per_connection`: the request that reaches this count is the
    /// connection's last (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY); `None` (0) unlimited.
    pub max_requests_per_connection: Option<NonZeroU64>,
    /// `downstream.max_connection_age_secs`: a connection open this long is closed gracefully
    /// (in-flight requests finish); `None` (0) unlimited.
    pub max_connection_age: Option<Duration>,
    /// `downstream.http1_max_buf_size_bytes`: the most an HTTP/1 connection buffers (its read
    /// buffer, and queued writes); also the largest request head accepted.
    pub http1_max_buf_size: usize,
}

impl DownstreamConfig {
    /// 64 KiB, not hyper's own 408 KiB: what hyper queues while a client's socket is full goes
    /// out in one write once it drains, and on loopback the kernel delivers a write to its
    /// reader on the writing thread, so one 500 KiB write held the worker for about a
    /// millisecond (BENCHMARKS.md, round 3 sixth session). Request heads past 64 KiB are refused.
    pub const DEFAULT_HTTP1_MAX_BUF_SIZE: usize = 64 * 1024;
    /// hyper refuses anything smaller than its initial read buffer.
    pub const MIN_HTTP1_MAX_BUF_SIZE: usize = 8192;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// `upstream.connect_timeout_ms`, `upstream.first_token_timeout_ms`,
    /// `upstream.stream_idle_timeout_ms`, `upstream.timeout_ms`: each phase's default deadline.
    pub timeouts: UpstreamTimeouts,
    /// `upstream.pool_idle_timeout_secs`: idle pooled connections are closed after this.
    pub pool_idle_timeout: Duration,
    /// `upstream.pool_max_idle_per_host`: idle connections kept per host, per worker.
    pub pool_max_idle_per_host: usize,
    /// `upstream.pool_max_connections_per_host`: open connections per host, per worker; a
    /// request past it waits for one within its own deadline. 0 is unlimited.
    pub pool_max_connections_per_host: usize,
    /// `upstream.max_sse_event_bytes`: the largest SSE event relayed; a longer one ends the
    /// stream with an error event.
    pub max_sse_event_bytes: usize,
    /// `upstream.max_response_bytes`: the largest whole answer held in memory (one that must
    /// be translated); a larger one is refused with 502 `upstream_response_too_large`. Answers
    /// relayed as they come are not held and not limited.
    pub max_response_bytes: usize,
    pub resilience: Resilience,
}

/// When a direct model cools down, and how many retries it may take, whichever group or
/// request reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resilience {
    /// Whether failures cool the model down at all (off only through a model's
    /// `cooldown.enabled: false`).
    pub enabled: bool,
    /// `upstream.cooldown_failures`: retryable failures within the window that start a
    /// cooldown.
    pub cooldown_failures: u32,
    /// `upstream.cooldown_window_ms`: the window those failures are counted in.
    pub cooldown_window: Duration,
    /// `upstream.cooldown_ms`: how long a cooldown lasts before one probe request may pass.
    pub cooldown: Duration,
    /// `upstream.key_cooldown_ms`: how long a cooldown lasts when the upstream refused the
    /// provider key (401, 402, 403, quota exhausted), which no retry mends.
    pub key_cooldown: Duration,
    /// `upstream.retry_after_max_ms`: the longest `Retry-After` a cooldown honours.
    pub retry_after_max: Duration,
    /// `upstream.retry_budget_percent`: retries a direct model may take, as a share of its
    /// requests over the last ten seconds.
    pub retry_budget_percent: u32,
}

impl Resilience {
    /// These settings with one model's `cooldown` applied.
    pub fn with(self, overrides: &CooldownOverrides) -> Self {
        Self {
            enabled: overrides.enabled.unwrap_or(self.enabled),
            cooldown: overrides.cooldown.unwrap_or(self.cooldown),
            retry_after_max: overrides.retry_after_max.unwrap_or(self.retry_after_max),
            ..self
        }
    }
}

/// A direct model's own `cooldown` (AISIX's per-model block); `None` keeps the `upstream.*`
/// setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CooldownOverrides {
    /// `cooldown.enabled`.
    pub enabled: Option<bool>,
    /// `cooldown.default_seconds`: over `upstream.cooldown_ms`.
    pub cooldown: Option<Duration>,
    /// `cooldown.max_seconds` over `upstream.retry_after_max_ms`; `honor_retry_after: false`
    /// sets it to zero.
    pub retry_after_max: Option<Duration>,
}

impl Default for Resilience {
    fn default() -> Self {
        Self {
            enabled: true,
            cooldown_failures: 3,
            cooldown_window: Duration::from_secs(10),
            cooldown: Duration::from_secs(30),
            key_cooldown: Duration::from_secs(300),
            retry_after_max: Duration::from_secs(600),
            retry_budget_percent: 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownConfig {
    /// `shutdown.readiness_grace_secs`: after SIGTERM, `/readyz` answers 503 at once but the
    /// listeners keep accepting this long, so a load balancer can stop sending first.
    pub readiness_grace: Duration,
    /// `shutdown.drain_timeout_secs`: how long in-flight work may run once the listeners close.
    pub drain_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservabilityConfig {
    /// `observability.log_level`: a tracing filter (`info`, `aisix=debug,warn`); `RUST_LOG` wins.
    pub log_level: String,
    /// `observability.access_log`: one JSON line per request on stderr.
    pub access_log: bool,
    pub metrics: MetricsConfig,
    /// `observability.otlp`: traces and usage events over OTLP.
    pub otlp: OtlpConfig,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    pub prometheus: PrometheusConfig,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusConfig {
    /// `observability.metrics.prometheus.enabled`.
    pub enabled: bool,
    /// `observability.metrics.prometheus.addr`: a listener of its own, never the proxy port.
    pub addr: SocketAddr,
    /// `observability.metrics.prometheus.path`.
    pub path: String,
}

/// `responses_store`: where the gateway keeps the Responses API answers it translated (with
/// `store: true`, the API's default), for `previous_response_id` and `GET /v1/responses/{id}`.
/// In this process's memory, shared by its workers, lost on restart; the oldest go first when a
/// bound is reached. With `ratelimit.backend: redis`, in that Redis instead, for every replica
/// (each entry for `ttl`, none larger than `max_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesStoreConfig {
    /// `responses_store.max_entries`: responses kept at most (0 keeps none).
    pub max_entries: usize,
    /// `responses_store.max_bytes`: their requests and answers together, at most.
    pub max_bytes: usize,
    /// `responses_store.ttl_secs`: how long one is kept.
    pub ttl: Duration,
}

impl Default for ResponsesStoreConfig {
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            ttl: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// `ratelimit.backend`: where rate-limit counters and spend live.
    pub backend: RateLimitBackend,
    /// `ratelimit.concurrency_ttl_secs`: a concurrency slot held in Redis longer than this is
    /// taken back (its holder crashed or lost Redis). Redis backend only.
    pub concurrency_ttl: Duration,
}

/// `ratelimit.backend` with the settings of the chosen backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateLimitBackend {
    /// In this process: every worker shares one set of counters; lost on restart.
    Memory,
    /// In a Redis server shared by every replica.
    Redis(RedisConfig),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `ratelimit.redis.url`: `redis://[[user]:password@]host[:port][/db]`; with
    /// `mode: cluster`, the first of the cluster's nodes given.
    pub url: RedisUrl,
    /// `ratelimit.redis.mode`: one server, or a Redis Cluster.
    pub mode: RedisMode,
    /// `ratelimit.redis.on_error`: what a request gets while Redis cannot be reached.
    pub on_error: OnRedisError,
    /// `ratelimit.redis.budget_on_error`: what a request that counts against a budget gets
    /// while Redis cannot be reached (`allow` counts its spend here and writes it back to Redis
    /// when Redis is back).
    pub budget_on_error: OnRedisError,
    /// `ratelimit.redis.timeout_ms`: the longest one Redis call may take before the request
    /// goes on as `on_error` says.
    pub timeout: Duration,
}

/// `ratelimit.redis.mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// One server (`url`).
    Single,
    /// A Redis Cluster, found through these nodes (`url` is the first); every script touches
    /// one slot.
    Cluster(Vec<RedisUrl>),
}

/// `ratelimit.redis.on_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRedisError {
    /// Count on this process's own counters until Redis is back.
    Allow,
    /// Refuse rate-limited requests until Redis is back.
    Deny,
}

/// A Redis URL. `Debug` shows it with its password as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    url: Secret,
    redacted: String,
}

impl RedisUrl {
    /// Checks `text` as a `redis://` URL; the error says what is wrong without echoing it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(scheme_end) = text.find("://") else {
            return Err("expected redis://[[user]:password@]host[:port][/db]".to_owned());
        };
        match text[..scheme_end].to_ascii_lowercase().as_str() {
            "redis" => {}
            "rediss" => return Err("TLS (rediss://) is not supported; use redis://".to_owned()),
            _ => return Err("must start with redis://".to_owned()),
        }
        let rest = &text[scheme_end + 3..];
        let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
        if !db.is_empty() && !db.bytes().all(|b| b.is_ascii_digit()) {
            return Err(
                "the database after the host must be a number (redis://host:6379/0)".to_owned(),
            );
        }
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let (host, port) = match host_port.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((host, after)) => (host, after.strip_prefix(':')),
                None => ("", None),
            },
            None => match host_port.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (host_port, None),
            },
        };
        if host.is_empty() || host.contains(['?', '#', ' ']) {
            return Err("must name a host (redis://127.0.0.1:6379)".to_owned());
        }
        if let Some(port) = port
            && (port.is_empty()
                || !port.bytes().all(|b| b.is_ascii_digit())
                || port.parse::<u16>().is_err())
        {
            return Err("has an invalid port".to_owned());
        }
        let redacted = match userinfo.and_then(|u| u.split_once(':')) {
            Some((user, _password)) => {
                format!(
                    "{}://{user}:***@{}",
                    &text[..scheme_end],
                    &rest[authority.len() - host_port.len()..]
                )
            }
            None => text.to_owned(),
        };
        Ok(Self {
            url: Secret::new(text),
            redacted,
        })
    }

    /// The URL, password included, for the one place that connects.
    pub fn expose(&self) -> &str {
        self.url.expose()
    }

    /// The URL with its password as `***`, for logs.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The database number after the host, if one is given.
    pub fn database(&self) -> Option<u64> {
        let text = self.url.expose();
        let rest = &text[text.find("://").map_or(0, |i| i + 3)..];
        rest.split_once('/').and_then(|(_, db)| db.parse().ok())
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.redacted, f)
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 3000)),
            thread_per_core: cfg!(target_os = "linux"),
            workers: None,
            backlog: 4096,
            request_body_limit_bytes: 32 * 1024 * 1024,
            max_buffered_bytes_per_worker: 256 * 1024 * 1024,
            max_buffered_percent_per_key: 25,
            tls: None,
            pin_workers: false,
            balance: Balance::ReusePort,
        }
    }
}

impl Default for DownstreamConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            request_body_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(75)),
            sse_keepalive_interval: Some(Duration::from_secs(15)),
            max_requests_per_connection: None,
            max_connection_age: None,
            http1_max_buf_size: Self::DEFAULT_HTTP1_MAX_BUF_SIZE,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            timeouts: UpstreamTimeouts::default(),
            pool_idle_timeout: Duration::from_secs(30),
            pool_max_idle_per_host: 1024,
            pool_max_connections_per_host: 0,
            max_sse_event_bytes: 1024 * 1024,
            max_response_bytes: 16 * 1024 * 1024,
            resilience: Resilience::default(),
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            readiness_grace: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

impl RateLimitConfig {
    /// `ratelimit.redis.timeout_ms` when unset.
    pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(200);
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            backend: RateLimitBackend::Memory,
            concurrency_ttl: Duration::from_secs(300),
        }
    }
}

impl Default for ObservabilityConfig {
    fn default() -> Self {
        Self {
            log_level: "info".to_owned(),
            access_log: true,
            metrics: MetricsConfig {
                prometheus: PrometheusConfig {
                    enabled: true,
                    addr: SocketAddr::from(([127, 0, 0, 1], 9090)),
                    path: "/metrics".to_owned(),
                },
            },
            otlp: OtlpConfig::default(),
        }
    }
}
