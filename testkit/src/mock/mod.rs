//! A scriptable LLM provider on 127.0.0.1: real HTTP (HTTP/1.1 with keep-alive, or HTTP/2 with
//! prior knowledge) on worker threads of its own, scripted replies (status, delay, SSE frames,
//! disconnects), a record of what it received, and a fast path for benchmarks. What unscripted
//! requests get is the dialect's default answer ([`dialect`]: [`openai`] unless the builder
//! says [`anthropic`]) or, on the fast path, precomputed chat completions ([`fast`]).
//!
//! ```
//! use std::time::Duration;
//! use aisix_testkit::mock::{MockProvider, Reply};
//!
//! let mock = MockProvider::start();
//! let base_url = mock.base_url(); // "http://127.0.0.1:PORT/v1", for the gateway's provider
//! mock.enqueue(Reply::openai_error(429, "rate_limit_exceeded", "slow down").header("retry-after", "1"));
//! // Traffic through the gateway now gets the 429 once, then the default answer.
//! # let _ = base_url;
//! let seen_two = mock.wait_for_requests(2, Duration::from_millis(10));
//! assert!(!seen_two, "nothing was sent in this example");
//! ```

pub mod anthropic;
mod body;
pub mod dialect;
pub mod fast;
pub mod hostile;
pub mod openai;
mod record;
mod reply;
mod responses;
mod server;
mod state;

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

pub use dialect::Dialect;
pub use fast::Pacing;
pub use hostile::Hostile;
pub use record::RecordedRequest;
pub use reply::{Frame, Reply};

use state::State;

/// How often the `wait_*` helpers look again.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Listen backlog of each worker's socket.
const BACKLOG: i32 = 4096;

/// A running mock provider. Dropping it stops the server and closes its connections.
///
/// Answers come, in this order of precedence, from the queue ([`MockProvider::enqueue`], one
/// reply per request, first in first out), the standing reply ([`MockProvider::set_default`]),
/// or the default: the dialect's answer ([`openai`], or [`anthropic`] by
/// [`MockBuilder::dialect`]), or the fast path's precomputed one ([`MockBuilder::fast`]).
/// Scripted replies apply to any path.
pub struct MockProvider {
    addr: SocketAddr,
    state: Arc<State>,
    /// Dropped to stop every worker.
    stop: Option<watch::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

/// How to start a [`MockProvider`]: [`MockProvider::builder`].
#[derive(Clone, Debug)]
pub struct MockBuilder {
    addr: SocketAddr,
    workers: usize,
    fast: Option<Pacing>,
    hostile: Option<Hostile>,
    dialect: Dialect,
}

impl MockBuilder {
    /// Where to listen (default `127.0.0.1:0`: a free port on loopback).
    pub fn addr(mut self, addr: SocketAddr) -> MockBuilder {
        self.addr = addr;
        self
    }

    /// Worker threads, each with its own current-thread runtime and, past one, its own
    /// `SO_REUSEPORT` listener on the same port (default 1).
    pub fn workers(mut self, workers: usize) -> MockBuilder {
        self.workers = workers.max(1);
        self
    }

    /// The fast path, for benchmarks: unscripted chat completions get precomputed answers,
    /// streams paced by `pacing`; nothing is recorded ([`MockProvider::requests`] stays empty,
    /// [`MockProvider::request_count`] still counts).
    pub fn fast(mut self, pacing: Pacing) -> MockBuilder {
        self.fast = Some(pacing);
        self
    }

    /// On the fast path, requests for [`hostile::HOSTILE_MODEL`] get the hostile answers `sizes`
    /// describes (one huge SSE event, one huge JSON body); without it they get the usual ones.
    pub fn hostile(mut self, sizes: Hostile) -> MockBuilder {
        self.hostile = Some(sizes);
        self
    }

    /// The dialect unscripted requests are answered in, and whose terminator ends a scripted
    /// stream (default [`Dialect::OpenAi`]).
    pub fn dialect(mut self, dialect: Dialect) -> MockBuilder {
        self.dialect = dialect;
        self
    }

    /// Binds every listener and starts the workers; works from a plain `#[test]` and from
    /// inside `#[tokio::test]` alike.
    pub fn start(self) -> io::Result<MockProvider> {
        let listeners = bind(self.addr, self.workers)?;
        let addr = listeners
            .first()
            .ok_or_else(|| io::Error::other("no listener"))?
            .local_addr()?;
        let state = Arc::new(State::new(
            self.fast
                .as_ref()
                .map(|pacing| fast::Answers::new(pacing, self.hostile.as_ref())),
            listeners.len(),
            self.dialect,
        ));
        let (stop, stopped) = watch::channel(());
        let mut provider = MockProvider {
            addr,
            state,
            stop: Some(stop),
            threads: Vec::with_capacity(listeners.len()),
        };
        for (index, listener) in listeners.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let listener = {
                let _context = runtime.enter();
                tokio::net::TcpListener::from_std(listener)?
            };
            let worker = Arc::new(server::Worker {
                state: Arc::clone(&provider.state),
                index,
            });
            let stopped = stopped.clone();
            // On failure `provider` drops here, stopping the workers already started.
            let thread = std::thread::Builder::new()
                .name(format!("mock-provider-{}-{index}", addr.port()))
                .spawn(move || runtime.block_on(server::serve(listener, worker, stopped)))?;
            provider.threads.push(thread);
        }
        Ok(provider)
    }
}

/// One listener per worker: a plain bind for one, `SO_REUSEPORT` binds on one port for more
/// (port 0: the first socket's port for all).
fn bind(addr: SocketAddr, workers: usize) -> io::Result<Vec<TcpListener>> {
    if workers <= 1 {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        return Ok(vec![listener]);
    }
    let first = reuseport_listener(addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    while listeners.len() < workers {
        listeners.push(reuseport_listener(addr)?);
    }
    Ok(listeners)
}

fn reuseport_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

impl MockProvider {
    /// Options for a mock: address, workers, the fast path.
    pub fn builder() -> MockBuilder {
        MockBuilder {
            addr: (Ipv4Addr::LOCALHOST, 0).into(),
            workers: 1,
            fast: None,
            hostile: None,
            dialect: Dialect::default(),
        }
    }

    /// Starts a mock on 127.0.0.1 with an ephemeral port, on its own thread and runtime.
    ///
    /// Panics if the socket, the runtime or the thread cannot be created; see
    /// [`MockProvider::try_start`].
    #[track_caller]
    #[allow(
        clippy::expect_used,
        reason = "test setup: a mock that cannot start leaves the test nothing to do"
    )]
    pub fn start() -> MockProvider {
        MockProvider::try_start().expect("mock provider failed to start")
    }

    /// Starts a mock that speaks Anthropic's Messages API (see [`anthropic`]); panics as
    /// [`MockProvider::start`] does.
    #[track_caller]
    #[allow(
        clippy::expect_used,
        reason = "test setup: a mock that cannot start leaves the test nothing to do"
    )]
    pub fn start_anthropic() -> MockProvider {
        MockProvider::builder()
            .dialect(Dialect::Anthropic)
            .start()
            .expect("mock provider failed to start")
    }

    /// [`MockProvider::start`], returning the error instead of panicking.
    pub fn try_start() -> io::Result<MockProvider> {
        MockProvider::builder().start()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL an OpenAI client or provider config expects.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT`: the base URL an Anthropic client or provider config expects
    /// (Anthropic's paths carry their own `/v1`).
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply for one request; queued replies are used first in, first out.
    pub fn enqueue(&self, reply: Reply) {
        self.state.script(|script| script.queue.push_back(reply));
    }

    /// Queues a reply for one request to `path` (such as `/v1/chat/completions`); replies for
    /// a path are used first in, first out, before the common queue.
    pub fn enqueue_for(&self, path: &str, reply: Reply) {
        self.state.script(|script| {
            script
                .by_path
                .entry(path.to_owned())
                .or_default()
                .push_back(reply)
        });
    }

    /// Scripts the reply of the request with ordinal `n` (1 for the first the mock receives),
    /// whatever else is scripted.
    pub fn reply_at(&self, n: usize, reply: Reply) {
        self.state
            .script(|script| script.by_ordinal.insert(n, reply));
    }

    /// Replies still queued (not yet used by a request).
    pub fn queued(&self) -> usize {
        self.state.script(|script| script.queue.len())
    }

    /// Answers every request with `reply` while the queue is empty.
    pub fn set_default(&self, reply: Reply) {
        self.state.script(|script| script.standing = Some(reply));
    }

    /// Back to the default answer when the queue is empty.
    pub fn clear_default(&self) {
        self.state.script(|script| script.standing = None);
    }

    /// Every request received so far, in arrival order (none on the fast path).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorded(|requests| requests.to_vec())
    }

    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.state.recorded(|requests| requests.last().cloned())
    }

    /// Requests received in full so far.
    pub fn request_count(&self) -> usize {
        self.state.request_count()
    }

    /// TCP connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.state.connections_accepted.load(Relaxed)
    }

    /// TCP connections that have ended, whoever closed them.
    pub fn connections_closed(&self) -> usize {
        self.state.connections_closed.load(Relaxed)
    }

    /// Response bodies the mock could not finish because the peer went away (closed the
    /// connection or reset the stream) before their end.
    pub fn streams_cancelled(&self) -> usize {
        self.state.streams_cancelled.load(Relaxed)
    }

    /// Requests whose peer went away while the mock was still delaying the response head.
    pub fn requests_abandoned(&self) -> usize {
        self.state.requests_abandoned.load(Relaxed)
    }

    /// Blocks until `done(self)` holds or `timeout` passes; returns whether it holds.
    ///
    /// Blocks the calling thread: inside a current-thread runtime whose tasks must run for the
    /// condition to come true (a hyper client closing its connection), use
    /// [`MockProvider::wait_until_async`].
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&MockProvider) -> bool,
    ) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(settled) = self.settled(deadline, &mut done) {
                return settled;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// [`MockProvider::wait_until`] for async tests: sleeps on the caller's runtime, which must
    /// have its timer enabled (`#[tokio::test]` does).
    pub async fn wait_until_async(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&MockProvider) -> bool,
    ) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(settled) = self.settled(deadline, &mut done) {
                return settled;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// One look of a wait: `Some(true)` once `done` holds, `Some(false)` past the deadline
    /// (`None`: a timeout too large to add, never), `None` to look again.
    fn settled(
        &self,
        deadline: Option<Instant>,
        done: &mut impl FnMut(&MockProvider) -> bool,
    ) -> Option<bool> {
        if done(self) {
            return Some(true);
        }
        deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
            .then_some(false)
    }

    /// Waits until at least `n` requests have been received.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |mock| mock.request_count() >= n)
    }

    /// Waits until at least `n` connections have ended.
    pub fn wait_for_connections_closed(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |mock| mock.connections_closed() >= n)
    }

    /// Waits until at least one response body was abandoned by the peer mid-stream.
    pub fn wait_for_stream_cancelled(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |mock| mock.streams_cancelled() >= 1)
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        // Every worker sees the sender gone and returns; its runtime drops its connections.
        drop(self.stop.take());
        for thread in self.threads.drain(..) {
            // A panic on a server thread has been printed already; don't panic in drop.
            let _ = thread.join();
        }
    }
}
