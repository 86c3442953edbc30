//! A scriptable, OpenAI-like LLM provider for end-to-end tests: real HTTP on 127.0.0.1, its own
//! thread and runtime, scripted replies (status, delay, SSE frames, disconnects), and a record
//! of what it received. What the default answers look like lives in [`openai`].
//!
//! ```
//! use std::time::Duration;
//! use aisix_e2e::mock::{MockProvider, Reply};
//!
//! let mock = MockProvider::start();
//! let base_url = mock.base_url(); // "http://127.0.0.1:PORT/v1", for the gateway's provider
//! mock.enqueue(Reply::openai_error(429, "rate_limit_exceeded", "slow down").header("retry-after", "1"));
//! // Traffic through the gateway now gets the 429 once, then the default answer.
//! # let _ = base_url;
//! let seen_two = mock.wait_for_requests(2, Duration::from_millis(10));
//! assert!(!seen_two, "nothing was sent in this example");
//! ```

pub mod openai;
mod record;
mod reply;
mod server;

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub use record::RecordedRequest;
pub use reply::{Frame, Reply};

/// How often the `wait_*` helpers look again.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// A running mock provider. Dropping it stops the server and closes its connections.
///
/// Answers come, in this order of precedence, from the queue ([`MockProvider::enqueue`], one
/// reply per request, first in first out), the standing reply ([`MockProvider::set_default`]),
/// or the OpenAI-like default ([`openai`]). Scripted replies apply to any path.
pub struct MockProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// State the test thread and the mock's server thread both touch.
// shared: written by the server thread, read and scripted by the test.
#[derive(Default)]
pub(crate) struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    pub(crate) connections_accepted: AtomicUsize,
    pub(crate) connections_closed: AtomicUsize,
    pub(crate) streams_cancelled: AtomicUsize,
    pub(crate) requests_abandoned: AtomicUsize,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    standing: Option<Reply>,
}

impl Shared {
    /// Records a request and returns its ordinal, starting at 1.
    pub(crate) fn record(&self, request: RecordedRequest) -> usize {
        let mut requests = lock(&self.requests);
        requests.push(request);
        requests.len()
    }

    pub(crate) fn next_reply(&self) -> Reply {
        let mut script = lock(&self.script);
        match script.queue.pop_front() {
            Some(reply) => reply,
            None => script.standing.clone().unwrap_or_else(Reply::openai),
        }
    }
}

/// A panic on another thread while holding the lock leaves plain data behind; keep using it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MockProvider {
    /// Starts a mock on 127.0.0.1 with an ephemeral port, on its own thread and runtime: works
    /// from a plain `#[test]` and from inside `#[tokio::test]` alike.
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

    /// [`MockProvider::start`], returning the error instead of panicking.
    pub fn try_start() -> io::Result<MockProvider> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("mock-provider-{}", addr.port()))
            .spawn({
                let shared = Arc::clone(&shared);
                move || runtime.block_on(server::serve(listener, shared, stopped))
            })?;
        Ok(MockProvider {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL an OpenAI client or provider config expects.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues a reply for one request; queued replies are used first in, first out.
    pub fn enqueue(&self, reply: Reply) {
        lock(&self.shared.script).queue.push_back(reply);
    }

    /// Replies still queued (not yet used by a request).
    pub fn queued(&self) -> usize {
        lock(&self.shared.script).queue.len()
    }

    /// Answers every request with `reply` while the queue is empty.
    pub fn set_default(&self, reply: Reply) {
        lock(&self.shared.script).standing = Some(reply);
    }

    /// Back to the OpenAI-like default when the queue is empty.
    pub fn clear_default(&self) {
        lock(&self.shared.script).standing = None;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.shared.requests).last().cloned()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// TCP connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.shared.connections_accepted.load(Relaxed)
    }

    /// TCP connections that have ended, whoever closed them.
    pub fn connections_closed(&self) -> usize {
        self.shared.connections_closed.load(Relaxed)
    }

    /// Response bodies the mock could not finish because the peer went away (closed the
    /// connection or reset the stream) before their end.
    pub fn streams_cancelled(&self) -> usize {
        self.shared.streams_cancelled.load(Relaxed)
    }

    /// Requests whose peer went away while the mock was still delaying the response head.
    pub fn requests_abandoned(&self) -> usize {
        self.shared.requests_abandoned.load(Relaxed)
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
            if done(self) {
                return true;
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
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
            if done(self) {
                return true;
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
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
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; nothing to stop then.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic on the server thread has been printed already; don't panic in drop.
            let _ = thread.join();
        }
    }
}
