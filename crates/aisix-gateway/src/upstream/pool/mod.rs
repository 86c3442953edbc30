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
//! Connecting under failure: `upstream.pool_max_connections_per_host` caps the connections open
//! (or being opened) per host; past it a request waits in line for a connection that is handed
//! back or closed, within its own deadline. Requests that wait behind a connection attempt (the
//! cap, or the first connection to an https host that may speak HTTP/2) learn its failure at
//! once instead of each trying in turn, so k waiting requests never cost k connect timeouts.
//!
//! Cost per request on a warm pool: one uncontended lock, a hash of the host, a pop and a push;
//! no task is spawned.
//!
//! Opening a connection is [`connect`]'s; closing idle ones by timer is [`reaper`]'s.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use aisix_config::UpstreamConfig;
use bytes::Bytes;
use http::uri::Scheme;
use http::{Request, Response};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::tls::https_connector;
use super::wire_form::{HostKey, wire_form};
use crate::upstream::egress::Route;
use reaper::reap;

mod connect;
mod reaper;

pub(super) type Body = Full<Bytes>;
type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// The most an HTTP/1.1 upstream connection reads at once, and so the largest body frame it
/// hands the relay and the largest response head it accepts (a larger head fails the attempt
/// as an upstream error). hyper's default, 408 KiB, let one frame of a large answer be written
/// to the client in one piece that held the worker for over a millisecond.
pub(crate) const READ_BUFFER_MAX: usize = 64 * 1024;

/// Bytes a relayed answer (streamed or not) hands hyper before it lets the worker's other tasks
/// run. hyper writes a body's frames for as long as the client's socket takes them, and on
/// loopback the kernel delivers each write to its reader inline, on the writing thread; so one
/// large or fast answer would hold the worker for milliseconds at a time (a 504 KiB write took
/// about 1.5 ms on the bench VM), and every other request on that worker would wait behind it.
/// With reads of at most [`READ_BUFFER_MAX`], a turn writes at most about 128 KiB.
pub(crate) const BYTES_PER_TURN: usize = 64 * 1024;

/// How long a response whose content is all in may take to send its last bytes (the final
/// chunk) before its connection is closed rather than reused.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Why an upstream exchange failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("connect: {0}")]
    Connect(ConnectError),
    #[error("request: {0}")]
    Request(#[source] hyper::Error),
}

/// Why a connection could not be made; cloned to every request that waited behind the attempt.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("{0}")]
    Failed(Arc<str>),
    #[error("timed out")]
    TimedOut,
}

impl ConnectError {
    fn failed(error: impl std::fmt::Display) -> Self {
        Self::Failed(error.to_string().into())
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
    /// Connections open or being opened (an HTTP/2 connection counts once).
    open: usize,
    /// A first connection to a host that may speak HTTP/2 is being made: other requests wait
    /// for it rather than each opening their own.
    probing: bool,
    /// Requests waiting for a connection, first come first served.
    waiters: VecDeque<oneshot::Sender<Handoff>>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    #[default]
    Unknown,
    Http1,
    Http2,
}

/// What a waiting request is handed.
enum Handoff {
    /// An HTTP/1.1 connection someone handed back.
    Conn(http1::SendRequest<Body>),
    /// Room to open a connection, already counted in `open`.
    Connect(Slot),
    /// The host's state changed (its protocol became known): look again.
    Retry,
    /// The connection attempt this request waited behind failed.
    Failed(ConnectError),
}

/// What a request does next for its host.
enum Acquire {
    Use(Checkout),
    Wait(oneshot::Receiver<Handoff>),
    Connect(Slot),
}

/// One counted connection of a host, from the decision to connect until the connection ends;
/// dropping it frees the place for the next request in line.
struct Slot {
    pool: Weak<Inner>,
    key: HostKey,
    /// This attempt is the one others wait behind to learn the host's protocol.
    probing: bool,
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let (true, Some(pool)) = (self.armed, self.pool.upgrade()) {
            pool.slot_freed(&self.key, self.probing);
        }
    }
}

struct Inner {
    connector: HttpsConnector<HttpConnector>,
    http: HttpConnector,
    tls: Arc<rustls::ClientConfig>,
    idle_timeout: Duration,
    max_idle: usize,
    /// 0 is unlimited.
    max_open: usize,
    /// Advanced by the reaper every half idle timeout.
    tick: AtomicU64,
    // One worker's pool: locked only by that worker's tasks (and its reaper), never contended
    // in thread-per-core mode. Never held across an await, nor while a `Slot` drops.
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

    /// The caller has all the content of the response and is done with it, but its body may
    /// not have ended yet (an HTTP/1.1 final chunk still on its way): hands the connection back
    /// once it has, or closes it if more than an ending arrives within [`DRAIN_LIMIT`]. Spawns
    /// a task only when the end is not already there.
    pub(crate) fn release_after(self, mut rest: Incoming) {
        if rest.is_end_stream() {
            return self.release();
        }
        tokio::spawn(async move {
            let ended = tokio::time::timeout(DRAIN_LIMIT, async {
                while let Some(frame) = rest.frame().await {
                    match frame {
                        Ok(frame) if frame.data_ref().is_none_or(Bytes::is_empty) => {}
                        _ => return false,
                    }
                }
                true
            })
            .await;
            if ended == Ok(true) {
                self.release();
            }
        });
    }
}

impl Pool {
    /// Builds the pool and starts its idle reaper on the current runtime.
    pub(crate) fn new(config: &UpstreamConfig, tls: Arc<rustls::ClientConfig>) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_keepalive(Some(Duration::from_secs(60)));
        let connector = https_connector(&tls, http.clone());
        let inner = Arc::new(Inner {
            connector,
            http,
            tls,
            idle_timeout: config.pool_idle_timeout,
            max_idle: config.pool_max_idle_per_host,
            max_open: config.pool_max_connections_per_host,
            tick: AtomicU64::new(0),
            hosts: Mutex::new(HashMap::default()),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(reap(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// Sends `request` on an idle connection to its host, or a new one made within
    /// `connect_timeout` along `route`. A pooled connection the host closed while it was idle is
    /// detected and the request goes to the next one, since hyper hands back a request it could
    /// not start sending. The caller bounds the whole wait (queue included) with its deadline.
    pub(crate) async fn send(
        &self,
        mut request: Request<Body>,
        route: &Route,
        connect_timeout: Duration,
    ) -> Result<(Response<Incoming>, Option<Lease>), SendError> {
        let Some(key) = HostKey::of(request.uri()) else {
            return Err(SendError::Connect(ConnectError::failed(
                "the upstream URI has no host",
            )));
        };
        let forward = match route {
            Route::Forward(proxy) => Some(proxy),
            Route::Direct | Route::Tunnel(_) => None,
        };
        let slot = loop {
            let conn = match self.inner.next(&key) {
                Acquire::Use(conn) => conn,
                Acquire::Connect(slot) => break slot,
                Acquire::Wait(handoff) => match handoff.await {
                    Ok(Handoff::Conn(sender)) => Checkout::Http1(sender),
                    Ok(Handoff::Connect(slot)) => break slot,
                    Ok(Handoff::Failed(error)) => return Err(SendError::Connect(error)),
                    Ok(Handoff::Retry) | Err(_) => continue,
                },
            };
            match conn {
                Checkout::Http2(mut sender) => match sender
                    .try_send_request(wire_form(request, &key, Protocol::Http2, None))
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
                        .try_send_request(wire_form(request, &key, Protocol::Http1, forward))
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
        // Boxed: connecting (TCP, a proxy's CONNECT, TLS) is ~6.5 KiB of future that a request
        // on a kept-alive connection never polls; inline, every request's future carried it
        // (and was copied whole into its box once per request).
        let connecting = Box::pin(
            self.inner
                .connect(request.uri(), route, connect_timeout, slot),
        );
        let connected = match connecting.await {
            Ok(conn) => self.inner.connected(&key, Ok(conn)),
            Err((error, slot)) => {
                // Those in line learn the failure before the freed place goes to anyone.
                let failed = self.inner.connected(&key, Err(error));
                drop(slot);
                failed
            }
        };
        match connected {
            Ok(Checkout::Http2(mut sender)) => {
                let response = sender
                    .send_request(wire_form(request, &key, Protocol::Http2, None))
                    .await
                    .map_err(SendError::Request)?;
                Ok((response, None))
            }
            Ok(Checkout::Http1(mut sender)) => {
                let response = sender
                    .send_request(wire_form(request, &key, Protocol::Http1, forward))
                    .await
                    .map_err(SendError::Request)?;
                Ok((response, Some(self.lease(key, sender))))
            }
            Err(error) => Err(SendError::Connect(error)),
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

    fn slot(self: &Arc<Self>, key: &HostKey, probing: bool) -> Slot {
        Slot {
            pool: Arc::downgrade(self),
            key: key.clone(),
            probing,
            armed: true,
        }
    }

    /// A pooled connection for `key`, or a place in line, or room to connect.
    fn next(self: &Arc<Self>, key: &HostKey) -> Acquire {
        let mut hosts = self.hosts();
        let host = match hosts.get_mut(key) {
            Some(host) => host,
            None => hosts.entry(key.clone()).or_default(),
        };
        if let Some(sender) = &host.http2 {
            if !sender.is_closed() {
                return Acquire::Use(Checkout::Http2(sender.clone()));
            }
            host.http2 = None;
        }
        while let Some(conn) = host.idle.pop() {
            if !conn.sender.is_closed() {
                return Acquire::Use(Checkout::Http1(conn.sender));
            }
        }
        if host.probing || (self.max_open > 0 && host.open >= self.max_open) {
            let (handoff, wait) = oneshot::channel();
            host.waiters.push_back(handoff);
            return Acquire::Wait(wait);
        }
        host.open += 1;
        // Plain HTTP never negotiates HTTP/2, and a host known to speak HTTP/1.1 gains nothing
        // from waiting: only others connect alongside.
        let probing = host.protocol != Protocol::Http1 && key.scheme == Scheme::HTTPS;
        host.probing = probing;
        Acquire::Connect(self.slot(key, probing))
    }

    /// Records what a connection attempt learned about the host: requests that waited for a
    /// probing attempt look again, and on failure every request in line fails with it.
    fn connected(
        &self,
        key: &HostKey,
        result: Result<Checkout, ConnectError>,
    ) -> Result<Checkout, ConnectError> {
        let mut hosts = self.hosts();
        let Some(host) = hosts.get_mut(key) else {
            return result;
        };
        match &result {
            Ok(Checkout::Http2(sender)) => {
                host.protocol = Protocol::Http2;
                host.http2 = Some(sender.clone());
            }
            Ok(Checkout::Http1(_)) => host.protocol = Protocol::Http1,
            Err(error) => {
                host.probing = false;
                for waiter in host.waiters.drain(..) {
                    let _ = waiter.send(Handoff::Failed(error.clone()));
                }
                return result;
            }
        }
        if std::mem::take(&mut host.probing) {
            for waiter in host.waiters.drain(..) {
                let _ = waiter.send(Handoff::Retry);
            }
        }
        result
    }

    /// A counted connection ended (or was never made): the next request in line may connect.
    fn slot_freed(self: &Arc<Self>, key: &HostKey, probing: bool) {
        let mut hosts = self.hosts();
        let Some(host) = hosts.get_mut(key) else {
            return;
        };
        host.open = host.open.saturating_sub(1);
        if probing && std::mem::take(&mut host.probing) {
            // The probe was cancelled: let the waiters try for themselves.
            for waiter in host.waiters.drain(..) {
                let _ = waiter.send(Handoff::Retry);
            }
            return;
        }
        while self.max_open == 0 || host.open < self.max_open {
            let Some(waiter) = host.waiters.pop_front() else {
                return;
            };
            host.open += 1;
            let slot = self.slot(key, false);
            if let Err(Handoff::Connect(mut unused)) = waiter.send(Handoff::Connect(slot)) {
                // The waiter is gone; dropping the slot here would re-enter this lock.
                unused.armed = false;
                host.open -= 1;
            }
        }
    }

    fn put_idle(&self, key: &HostKey, mut sender: http1::SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut hosts = self.hosts();
        let host = match hosts.get_mut(key) {
            Some(host) => host,
            None => hosts.entry(key.clone()).or_default(),
        };
        while let Some(waiter) = host.waiters.pop_front() {
            match waiter.send(Handoff::Conn(sender)) {
                Ok(()) => return,
                Err(Handoff::Conn(back)) => sender = back,
                Err(_) => return,
            }
        }
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
}
