//! The upstream connection pool: one per worker, built on the worker's thread, so its
//! connections, their tasks and their timers live there (the shared runtime has one).
//!
//! Per upstream host it keeps a stack of idle HTTP/1.1 connections, reused newest first, or one
//! multiplexed HTTP/2 connection when the provider negotiates h2 over TLS. A connection goes back
//! to the stack when its response body has been read to the end; a response dropped early (the
//! client left) takes its connection with it, which closes it and so cancels the upstream
//! request. Idle connections are closed by a timer after `upstream.pool_idle_timeout_secs` and
//! beyond `upstream.pool_max_idle_per_host`, so reuse holds at any concurrency and nothing
//! churns into TIME_WAIT.
//!
//! Cost per request on a warm pool: one uncontended lock, a hash of the host, a pop and a push;
//! no task is spawned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use aisix_config::UpstreamConfig;
use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::watch;
use tokio::time::Instant;

type Body = Full<Bytes>;

/// TLS settings for every upstream: webpki roots plus the system's trust store (the connector
/// adds ALPN h2 and http/1.1). Built once at startup and shared read-only by all workers.
pub fn tls_client_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(native_roots = added, "loaded system trust store");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Why an upstream exchange failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("request: {0}")]
    Request(#[source] hyper::Error),
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct HostKey {
    scheme: Scheme,
    authority: Authority,
}

impl HostKey {
    /// The `Host` value: the authority without user info, and without the scheme's default
    /// port (RFC 9110 §7.2).
    fn host_header(&self) -> &str {
        let authority = self.authority.as_str();
        let authority = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let default_port = if self.scheme == Scheme::HTTPS {
            443
        } else {
            80
        };
        match self.authority.port_u16() {
            Some(port) if port == default_port => authority
                .rsplit_once(':')
                .map_or(authority, |(host, _)| host),
            _ => authority,
        }
    }

    fn of(uri: &Uri) -> Option<Self> {
        Some(Self {
            scheme: uri.scheme()?.clone(),
            authority: uri.authority()?.clone(),
        })
    }
}

struct IdleConn {
    sender: http1::SendRequest<Body>,
    /// The reaper's tick when the connection went idle: no clock read per request.
    since_tick: u64,
}

#[derive(Default)]
struct Host {
    idle: Vec<IdleConn>,
    http2: Option<http2::SendRequest<Body>>,
    /// Known once a connection to the host has been made.
    protocol: Protocol,
    /// Set while the first connection to a host that may speak HTTP/2 is being made: other
    /// requests wait for it rather than each opening their own.
    connecting: Option<watch::Receiver<()>>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    #[default]
    Unknown,
    Http1,
    Http2,
}

/// What a request does next for its host.
enum Next {
    Use(Checkout),
    /// Another request is connecting to an HTTP/2-capable host: wait for it, then look again.
    Wait(watch::Receiver<()>),
    /// Connect; dropping the sender wakes the requests that waited for this connection.
    Connect(Option<watch::Sender<()>>),
}

struct Inner {
    connector: HttpsConnector<HttpConnector>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    /// Advanced by the reaper every half idle timeout.
    tick: AtomicU64,
    // One worker's pool: locked only by that worker's tasks (and its reaper), never contended
    // in thread-per-core mode.
    hosts: Mutex<HashMap<HostKey, Host, foldhash::fast::FixedState>>,
}

/// One worker's upstream connections.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

/// A response's connection, to hand back once its body has been read to the end.
pub(crate) struct Lease {
    pool: Weak<Inner>,
    key: HostKey,
    sender: Option<http1::SendRequest<Body>>,
}

impl Lease {
    /// The body was read to the end: the connection may serve the next request.
    pub(crate) fn release(mut self) {
        if let (Some(pool), Some(sender)) = (self.pool.upgrade(), self.sender.take()) {
            pool.put_idle(&self.key, sender);
        }
    }
}

impl Pool {
    /// Builds the pool and starts its idle reaper on the current runtime.
    pub(crate) fn new(config: &UpstreamConfig, tls: Arc<rustls::ClientConfig>) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let inner = Arc::new(Inner {
            connector,
            connect_timeout: config.connect_timeout,
            idle_timeout: config.pool_idle_timeout,
            max_idle: config.pool_max_idle_per_host,
            tick: AtomicU64::new(0),
            hosts: Mutex::new(HashMap::default()),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(reap(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// Sends `request` on an idle connection to its host, or a new one. A pooled connection the
    /// host closed while it was idle is detected and the request goes to the next one, since
    /// hyper hands back a request it could not start sending.
    pub(crate) async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<(Response<Incoming>, Option<Lease>), SendError> {
        let Some(key) = HostKey::of(request.uri()) else {
            return Err(SendError::Connect(
                "the upstream URI has no host".to_owned(),
            ));
        };
        // Pooled connections first; each one found closed is dropped.
        let connecting = loop {
            let conn = match self.inner.next(&key) {
                Next::Use(conn) => conn,
                Next::Wait(mut done) => {
                    let _ = done.changed().await;
                    continue;
                }
                Next::Connect(guard) => break guard,
            };
            match conn {
                Checkout::Http2(mut sender) => match sender
                    .try_send_request(wire_form(request, &key, Protocol::Http2))
                    .await
                {
                    Ok(response) => return Ok((response, None)),
                    Err(mut error) => match error.take_message() {
                        Some(unsent) => {
                            self.inner.forget_http2(&key);
                            request = unsent;
                        }
                        None => return Err(SendError::Request(error.into_error())),
                    },
                },
                Checkout::Http1(mut sender) => {
                    if sender.ready().await.is_err() {
                        continue;
                    }
                    match sender
                        .try_send_request(wire_form(request, &key, Protocol::Http1))
                        .await
                    {
                        Ok(response) => return Ok((response, Some(self.lease(key, sender)))),
                        Err(mut error) => match error.take_message() {
                            Some(unsent) => request = unsent,
                            None => return Err(SendError::Request(error.into_error())),
                        },
                    }
                }
            }
        };
        let connected = self.inner.connect(request.uri()).await;
        self.inner
            .connected(&key, connected.as_ref().ok(), connecting);
        match connected? {
            Checkout::Http2(mut sender) => {
                let response = sender
                    .send_request(wire_form(request, &key, Protocol::Http2))
                    .await
                    .map_err(SendError::Request)?;
                Ok((response, None))
            }
            Checkout::Http1(mut sender) => {
                let response = sender
                    .send_request(wire_form(request, &key, Protocol::Http1))
                    .await
                    .map_err(SendError::Request)?;
                Ok((response, Some(self.lease(key, sender))))
            }
        }
    }

    fn lease(&self, key: HostKey, sender: http1::SendRequest<Body>) -> Lease {
        Lease {
            pool: Arc::downgrade(&self.inner),
            key,
            sender: Some(sender),
        }
    }
}

/// Puts `request` in the form its connection's protocol wants. HTTP/1.1 gets the origin form
/// (`POST /v1/chat/completions`) and a `Host` header (RFC 9112 §3.2); HTTP/2 gets the absolute
/// URI, from which hyper writes `:scheme` and `:authority`, and no `Host`. A request handed back
/// unsent by one connection may go out on a connection of the other protocol, so both ways are
/// handled.
fn wire_form(mut request: Request<Body>, key: &HostKey, protocol: Protocol) -> Request<Body> {
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match protocol {
        Protocol::Http2 => {
            request.headers_mut().remove(HOST);
            if request.uri().authority().is_none() {
                let mut parts = http::uri::Parts::default();
                parts.scheme = Some(key.scheme.clone());
                parts.authority = Some(key.authority.clone());
                parts.path_and_query = Some(path);
                if let Ok(uri) = Uri::from_parts(parts) {
                    *request.uri_mut() = uri;
                }
            }
        }
        Protocol::Http1 | Protocol::Unknown => {
            if !request.headers().contains_key(HOST)
                && let Ok(host) = HeaderValue::from_str(key.host_header())
            {
                request.headers_mut().insert(HOST, host);
            }
            *request.uri_mut() = Uri::from(path);
        }
    }
    request
}

enum Checkout {
    Http1(http1::SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

impl Inner {
    fn hosts(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<HostKey, Host, foldhash::fast::FixedState>> {
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pooled connection for `key`, or whether to wait for one being made, or to connect.
    fn next(&self, key: &HostKey) -> Next {
        let mut hosts = self.hosts();
        let host = match hosts.get_mut(key) {
            Some(host) => host,
            None => hosts.entry(key.clone()).or_default(),
        };
        if let Some(sender) = &host.http2 {
            if !sender.is_closed() {
                return Next::Use(Checkout::Http2(sender.clone()));
            }
            host.http2 = None;
        }
        while let Some(conn) = host.idle.pop() {
            if !conn.sender.is_closed() {
                return Next::Use(Checkout::Http1(conn.sender));
            }
        }
        // Plain HTTP never negotiates HTTP/2, and a host known to speak HTTP/1.1 gains nothing
        // from waiting: connect at once.
        if host.protocol == Protocol::Http1 || key.scheme != Scheme::HTTPS {
            return Next::Connect(None);
        }
        if let Some(done) = &host.connecting {
            // A connecting request that was cancelled leaves its receiver closed: take over.
            if done.has_changed().is_ok() {
                return Next::Wait(done.clone());
            }
        }
        let (guard, done) = watch::channel(());
        host.connecting = Some(done);
        Next::Connect(Some(guard))
    }

    /// Records what a connection attempt learned about the host and wakes the requests that
    /// waited for it (by dropping `guard`).
    fn connected(&self, key: &HostKey, conn: Option<&Checkout>, guard: Option<watch::Sender<()>>) {
        let mut hosts = self.hosts();
        if let Some(host) = hosts.get_mut(key) {
            match conn {
                Some(Checkout::Http2(sender)) => {
                    host.protocol = Protocol::Http2;
                    host.http2 = Some(sender.clone());
                }
                Some(Checkout::Http1(_)) => host.protocol = Protocol::Http1,
                None => {}
            }
            if guard.is_some() {
                host.connecting = None;
            }
        }
        drop(hosts);
        drop(guard);
    }

    fn put_idle(&self, key: &HostKey, sender: http1::SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut hosts = self.hosts();
        let host = match hosts.get_mut(key) {
            Some(host) => host,
            None => hosts.entry(key.clone()).or_default(),
        };
        if host.idle.len() < self.max_idle {
            host.idle.push(IdleConn {
                sender,
                since_tick: self.tick.load(Ordering::Relaxed),
            });
        }
    }

    fn forget_http2(&self, key: &HostKey) {
        if let Some(host) = self.hosts().get_mut(key) {
            host.http2 = None;
        }
    }

    /// Opens a connection (TCP, TLS with ALPN when `https`) and starts its task.
    async fn connect(&self, uri: &Uri) -> Result<Checkout, SendError> {
        let mut connector = self.connector.clone();
        let connecting = tower_service::Service::call(&mut connector, uri.clone());
        let io = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(io)) => io,
            Ok(Err(error)) => return Err(SendError::Connect(error.to_string())),
            Err(_) => return Err(SendError::ConnectTimeout),
        };
        if io.connected().is_negotiated_h2() {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Duration::from_secs(30))
                .handshake(io)
                .await
                .map_err(|e| SendError::Connect(e.to_string()))?;
            tokio::spawn(async move {
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "upstream h2 connection ended");
                }
            });
            Ok(Checkout::Http2(sender))
        } else {
            let (sender, conn) = http1::Builder::new()
                .handshake(io)
                .await
                .map_err(|e| SendError::Connect(e.to_string()))?;
            tokio::spawn(async move {
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "upstream connection ended");
                }
            });
            Ok(Checkout::Http1(sender))
        }
    }
}

/// Closes idle connections that have sat for two to three half-timeouts (so at least the idle
/// timeout), ticking every half timeout; ends with the pool.
async fn reap(pool: Weak<Inner>) {
    let Some(every) = pool
        .upgrade()
        .map(|p| (p.idle_timeout / 2).max(Duration::from_millis(100)))
    else {
        return;
    };
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let tick = pool.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let mut hosts = pool.hosts();
        hosts.retain(|_, host| {
            host.idle
                .retain(|conn| !conn.sender.is_closed() && tick - conn.since_tick < 3);
            if host
                .http2
                .as_ref()
                .is_some_and(http2::SendRequest::is_closed)
            {
                host.http2 = None;
            }
            !host.idle.is_empty() || host.http2.is_some() || host.connecting.is_some()
        });
    }
}
