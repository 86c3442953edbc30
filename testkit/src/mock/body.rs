//! The response body the mock plays: chunks, each after its delay, then an ending (complete,
//! disconnect, or hang). Dropped before its end, it counts as a stream the peer abandoned.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame as BodyFrame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::server::Worker;

/// The body's error: hyper drops the connection mid-body (HTTP/2: resets the stream).
#[derive(Debug)]
pub(crate) struct Disconnect;

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mock provider: disconnecting mid-body, as scripted")
    }
}

impl std::error::Error for Disconnect {}

/// The chunks still to send.
pub(crate) enum Frames {
    /// Scripted chunks, each after its own delay.
    Listed(VecDeque<(Duration, Bytes)>),
    /// The same chunk again and again at a steady pace, and a last one: a stream without a
    /// list to allocate (the fast path), or a single chunk.
    Paced(Paced),
    /// A head, `fill` again and again, and a tail, all at once: a huge body from one small
    /// buffer (the fast path's hostile answers).
    Filled(Filled),
}

/// `head`, then `fill` `fills` times, then `tail`, each chunk as soon as the peer takes it;
/// empty parts are skipped.
pub(crate) struct Filled {
    head: Bytes,
    fill: Bytes,
    fills: usize,
    tail: Bytes,
}

impl Filled {
    pub(crate) fn new(head: Bytes, fill: Bytes, fills: usize, tail: Bytes) -> Filled {
        let fills = if fill.is_empty() { 0 } else { fills };
        Filled {
            head,
            fill,
            fills,
            tail,
        }
    }
}

/// `left` chunks: `frame` until the last, which is `last`; the first after `delay`, each
/// following one after `gap`.
pub(crate) struct Paced {
    left: usize,
    delay: Duration,
    gap: Duration,
    frame: Bytes,
    last: Bytes,
}

impl Paced {
    pub(crate) fn new(
        count: usize,
        delay: Duration,
        gap: Duration,
        frame: Bytes,
        last: Bytes,
    ) -> Paced {
        Paced {
            left: count,
            delay,
            gap,
            frame,
            last,
        }
    }
}

impl Frames {
    /// One chunk, sent at once.
    pub(crate) fn one(bytes: Bytes) -> Frames {
        Frames::Paced(Paced::new(
            1,
            Duration::ZERO,
            Duration::ZERO,
            Bytes::new(),
            bytes,
        ))
    }

    /// The delay before the next chunk; `None` when none is left.
    fn next_delay(&self) -> Option<Duration> {
        match self {
            Frames::Listed(chunks) => chunks.front().map(|(delay, _)| *delay),
            Frames::Paced(paced) => (paced.left > 0).then_some(paced.delay),
            Frames::Filled(filled) => {
                (!filled.head.is_empty() || filled.fills > 0 || !filled.tail.is_empty())
                    .then_some(Duration::ZERO)
            }
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        match self {
            Frames::Listed(chunks) => chunks.pop_front().map(|(_, bytes)| bytes),
            Frames::Paced(paced) => {
                paced.left = paced.left.checked_sub(1)?;
                paced.delay = paced.gap;
                Some(if paced.left == 0 {
                    std::mem::take(&mut paced.last)
                } else {
                    paced.frame.clone()
                })
            }
            Frames::Filled(filled) => {
                if !filled.head.is_empty() {
                    Some(std::mem::take(&mut filled.head))
                } else if filled.fills > 0 {
                    filled.fills -= 1;
                    Some(filled.fill.clone())
                } else if !filled.tail.is_empty() {
                    Some(std::mem::take(&mut filled.tail))
                } else {
                    None
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.next_delay().is_none()
    }

    /// Bytes left to send in all.
    pub(crate) fn len_bytes(&self) -> u64 {
        match self {
            Frames::Listed(chunks) => chunks.iter().map(|(_, bytes)| bytes.len() as u64).sum(),
            Frames::Paced(paced) => match paced.left {
                0 => 0,
                left => (left as u64 - 1) * paced.frame.len() as u64 + paced.last.len() as u64,
            },
            Frames::Filled(filled) => {
                filled.head.len() as u64
                    + filled.fills as u64 * filled.fill.len() as u64
                    + filled.tail.len() as u64
            }
        }
    }
}

/// How the body ends once its last chunk is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    Complete,
    /// `flushed` is set after one yield, so that hyper writes out the chunks already handed
    /// to it before the error makes it drop the connection.
    Disconnect {
        flushed: bool,
    },
    Hang,
}

/// A response body played chunk by chunk.
pub(crate) struct MockBody {
    frames: Frames,
    /// One timer for every delay of this body, reset for each.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether `sleep` is armed for the chunk at the front.
    waiting: bool,
    finish: Finish,
    finished: bool,
    exact_len: Option<u64>,
    worker: Arc<Worker>,
}

impl MockBody {
    /// A body sending `frames`, then ending as `finish` says; `exact_len` is announced as the
    /// content length (a complete JSON body) or not (streams, broken bodies: chunked).
    pub(crate) fn new(
        frames: Frames,
        finish: Finish,
        exact_len: Option<u64>,
        worker: Arc<Worker>,
    ) -> MockBody {
        MockBody {
            frames,
            sleep: None,
            waiting: false,
            finish,
            finished: false,
            exact_len,
            worker,
        }
    }

    fn at_end(&self) -> bool {
        self.finished || (self.frames.is_empty() && self.finish == Finish::Complete)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Disconnect;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, Disconnect>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(delay) = this.frames.next_delay() {
            if !delay.is_zero() {
                if !this.waiting {
                    let deadline = Instant::now() + delay;
                    match this.sleep.as_mut() {
                        Some(sleep) => sleep.as_mut().reset(deadline),
                        None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    this.waiting = true;
                }
                if let Some(sleep) = this.sleep.as_mut() {
                    ready!(sleep.as_mut().poll(cx));
                }
                this.waiting = false;
            }
            if let Some(bytes) = this.frames.pop() {
                return Poll::Ready(Some(Ok(BodyFrame::data(bytes))));
            }
        }
        match this.finish {
            Finish::Complete => {
                this.finished = true;
                Poll::Ready(None)
            }
            Finish::Disconnect { flushed: false } => {
                this.finish = Finish::Disconnect { flushed: true };
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Finish::Disconnect { flushed: true } => {
                this.finished = true;
                Poll::Ready(Some(Err(Disconnect)))
            }
            Finish::Hang => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.at_end()
    }

    fn size_hint(&self) -> SizeHint {
        self.exact_len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl Drop for MockBody {
    fn drop(&mut self) {
        if !self.at_end() {
            self.worker.state.streams_cancelled.fetch_add(1, Relaxed);
        }
    }
}
