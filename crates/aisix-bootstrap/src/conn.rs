//! One accepted connection: HTTP/1.1 keep-alive or HTTP/2 through hyper-util's auto builder,
//! a watchdog for the header-read deadline and the idle timeout, and a graceful close on drain.
//!
//! hyper's own h1 header timer also arms between keep-alive requests, which would make the
//! header deadline double as the idle limit; the watchdog keeps the two apart instead. It costs
//! one timer per connection and two uncontended atomic updates per request.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Connection-level settings, shared by every connection of a worker.
#[derive(Debug, Clone)]
pub(crate) struct ConnSettings {
    pub header_read_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub count_connections: bool,
}

/// The HTTP server builder for one worker.
pub(crate) fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(256);
    builder
}

/// What the watchdog and the wrappers below share about one connection.
#[derive(Debug, Default)]
struct ConnState {
    /// Successful reads that returned data.
    reads: AtomicU64,
    /// `reads` when the last request finished; more reads since mean a new head is arriving.
    reads_at_done: AtomicU64,
    /// Requests started on this connection.
    started: AtomicU64,
    /// Requests whose response has not finished.
    active: AtomicU32,
    http2: AtomicBool,
}

/// Serves one connection until it closes, the watchdog closes it, or the drain token fires
/// (then in-flight requests finish and the connection closes after them).
pub(crate) async fn serve<I, S, B>(
    io: I,
    service: S,
    builder: &auto::Builder<TokioExecutor>,
    settings: &ConnSettings,
    drain: CancellationToken,
    hooks: ConnHooks,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _open = settings
        .count_connections
        .then(aisix_obs::metrics::emit::worker_connection);
    let state = Arc::new(ConnState::default());
    let io = TokioIo::new(CountingIo {
        inner: io,
        state: state.clone(),
    });
    let service = TrackedService {
        inner: service,
        state: state.clone(),
        hooks,
    };
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);

    let mut watchdog = Watchdog::new(settings);
    let mut ticks = tokio::time::interval_at(Instant::now() + watchdog.period, watchdog.period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = drain.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            now = ticks.tick() => match watchdog.check(&state, now) {
                Verdict::Keep => {}
                Verdict::Close(reason) => {
                    tracing::debug!(reason, "closing connection");
                    conn.as_mut().graceful_shutdown();
                }
                Verdict::Force => return,
            }
        }
    }
}

/// Test-only hooks a connection can trigger; empty unless built with the `test-hooks` feature,
/// which a release build refuses (see the crate root).
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnHooks {
    #[cfg(feature = "test-hooks")]
    pub crash_worker: Option<Arc<tokio::sync::Notify>>,
}

#[cfg(feature = "test-hooks")]
pub(crate) const CRASH_WORKER_PATH: &str = "/__aisix/test/crash-worker";

/// Blocks the serving thread, as a bug that wedges an event loop would, for [`STALL_FOR`].
#[cfg(feature = "test-hooks")]
pub(crate) const STALL_WORKER_PATH: &str = "/__aisix/test/stall-worker";

#[cfg(feature = "test-hooks")]
const STALL_FOR: std::time::Duration = std::time::Duration::from_secs(2);

enum Verdict {
    Keep,
    Close(&'static str),
    Force,
}

struct Watchdog {
    header: Duration,
    idle: Option<Duration>,
    period: Duration,
    last_started: u64,
    /// Last time a request was seen running or starting.
    quiet_since: Instant,
    /// When the head now due began to be awaited.
    head_since: Option<Instant>,
    /// When a graceful close was asked for; a connection still open a period later is dropped.
    closing_since: Option<Instant>,
}

impl Watchdog {
    fn new(settings: &ConnSettings) -> Self {
        let shortest = settings
            .idle_timeout
            .map_or(settings.header_read_timeout, |idle| {
                idle.min(settings.header_read_timeout)
            });
        let now = Instant::now();
        Self {
            header: settings.header_read_timeout,
            idle: settings.idle_timeout,
            period: (shortest / 4).max(Duration::from_millis(50)),
            last_started: 0,
            quiet_since: now,
            // The first head is due from the moment the connection is accepted.
            head_since: Some(now),
            closing_since: None,
        }
    }

    fn check(&mut self, state: &ConnState, now: Instant) -> Verdict {
        let started = state.started.load(Relaxed);
        if state.active.load(Relaxed) > 0 || started != self.last_started {
            self.last_started = started;
            self.quiet_since = now;
            self.head_since = None;
            return Verdict::Keep;
        }
        if let Some(since) = self.closing_since {
            return if now - since >= self.period {
                Verdict::Force
            } else {
                Verdict::Keep
            };
        }
        let head_arriving = started == 0
            || (state.reads.load(Relaxed) > state.reads_at_done.load(Relaxed)
                && !state.http2.load(Relaxed));
        if head_arriving {
            let since = *self.head_since.get_or_insert(now);
            if now - since >= self.header {
                self.closing_since = Some(now);
                return Verdict::Close("request head not received within header_read_timeout");
            }
        } else {
            self.head_since = None;
            if let Some(idle) = self.idle
                && now - self.quiet_since >= idle
            {
                self.closing_since = Some(now);
                return Verdict::Close("idle_timeout");
            }
        }
        Verdict::Keep
    }
}

pin_project_lite::pin_project! {
    /// Counts reads so the watchdog can tell a half-sent head from an idle connection.
    struct CountingIo<I> {
        #[pin]
        inner: I,
        state: Arc<ConnState>,
    }
}

impl<I: AsyncRead> AsyncRead for CountingIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        ready!(this.inner.poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.state.reads.fetch_add(1, Relaxed);
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite> AsyncWrite for CountingIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

/// Marks a request as running from `call` until its response body is done or dropped.
struct ActiveGuard(Arc<ConnState>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let state = &self.0;
        state
            .reads_at_done
            .store(state.reads.load(Relaxed), Relaxed);
        state.active.fetch_sub(1, Relaxed);
    }
}

#[derive(Clone)]
struct TrackedService<S> {
    inner: S,
    state: Arc<ConnState>,
    #[cfg_attr(
        not(feature = "test-hooks"),
        allow(dead_code, reason = "holds nothing without test hooks")
    )]
    hooks: ConnHooks,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for TrackedService<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let state = &self.state;
        state.started.fetch_add(1, Relaxed);
        state.active.fetch_add(1, Relaxed);
        if request.version() == http::Version::HTTP_2 {
            state.http2.store(true, Relaxed);
        }
        #[cfg(feature = "test-hooks")]
        if request.uri().path() == CRASH_WORKER_PATH
            && let Some(crash) = &self.hooks.crash_worker
        {
            crash.notify_one();
        }
        #[cfg(feature = "test-hooks")]
        if request.uri().path() == STALL_WORKER_PATH {
            std::thread::sleep(STALL_FOR);
        }
        TrackedFuture {
            inner: self.inner.call(request),
            guard: Some(ActiveGuard(state.clone())),
        }
    }
}

pin_project_lite::pin_project! {
    struct TrackedFuture<F> {
        #[pin]
        inner: F,
        guard: Option<ActiveGuard>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let guard = this.guard.take();
        Poll::Ready(Ok(response.map(|inner| TrackedBody { inner, guard })))
    }
}

pin_project_lite::pin_project! {
    /// The response body, holding the request's [`ActiveGuard`] until it ends or is dropped.
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        guard: Option<ActiveGuard>,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
