//! The relay of a stream to the client: the response body that sends a direct model's events
//! as they come ([`Events`] does the reading), ends a failed stream with an error event and no
//! end marker, and owns the request's [`Record`], so the request is accounted when the stream
//! ends whichever way it does.
//!
//! With `routing.continue_on_cut`, a stream that fails after its first token is not ended:
//! the next direct model of the group is asked to continue it (the attempt loop's
//! [`Attempts::continuation`]), and its events are spliced into the same client stream, its
//! usage added. While the continuation is sought, keep-alive comments go out every
//! `downstream.sse_keepalive_interval_secs`, so that proxies in front of the client do not
//! drop a connection that is quiet. Dropping the body (the client left) drops the upstream
//! response, which closes that upstream connection, and drops a continuation in progress.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use tokio::time::{Instant, Sleep};

use crate::account::Record;
use crate::endpoint::Proxied;
use crate::error::{ErrorKind, GatewayError};
use crate::provider::events::{Events, Next};
use crate::route::attempt::{Attempts, Continued, Served, cut_named};
use crate::wire::sse;

type Continuing = Pin<Box<dyn Future<Output = Continued> + Send>>;

/// The attempt loop of a stream held past a keep-alive interval, run inside the response body
/// once its head has gone out: its answer (or error), the rest of the plan and the record.
pub(crate) type Starting = Pin<
    Box<dyn Future<Output = (Result<Served, GatewayError>, Box<Attempts>, Box<Record>)> + Send>,
>;

pub struct SseRelay {
    state: State,
    /// How often a keep-alive comment goes out while a continuation is sought.
    keepalive: Option<Duration>,
    /// When the next one is due, while continuing.
    timer: Option<Pin<Box<Sleep>>>,
}

enum State {
    /// The attempt loop is still looking for a first token; keep-alives go out meanwhile.
    Starting(Starting),
    Relaying {
        events: Box<Events>,
        record: Box<Record>,
        /// The rest of the plan, for a continuation.
        rest: Option<Box<Attempts>>,
    },
    Continuing(Continuing),
    /// The last bytes (an error event) go out, then the stream ends.
    Closing(Bytes, Box<Record>),
    Done,
}

impl SseRelay {
    /// The body of a stream whose head went out before any target reached its first token:
    /// keep-alive comments every `every` until `starting` answers, then its events (or its
    /// error as an error event).
    pub(crate) fn starting(starting: Starting, every: Duration) -> Self {
        Self {
            state: State::Starting(starting),
            keepalive: Some(every),
            timer: None,
        }
    }

    /// Keep-alive comment frames while `this` waits; `Pending` between them.
    fn keep_alive(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(every) = self.keepalive else {
            return Poll::Pending;
        };
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        timer.as_mut().reset(Instant::now() + every);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(sse::KEEPALIVE)))))
    }

    /// Relays `events` for the request of `record`; `rest` is the plan a continuation may use.
    pub(crate) fn new(
        events: Box<Events>,
        mut record: Box<Record>,
        rest: Option<Box<Attempts>>,
    ) -> Self {
        // Until the stream ends, the request counts as abandoned if the body is dropped.
        record.streaming();
        Self {
            keepalive: events.keepalive(),
            state: State::Relaying {
                events,
                record,
                rest,
            },
            timer: None,
        }
    }
}

/// Failures after the first token that a continuation may mend: the answer broke off, not the
/// request's own deadline.
fn continuable(error: &GatewayError) -> bool {
    matches!(
        error.kind,
        ErrorKind::StreamCut
            | ErrorKind::StreamTimeout
            | ErrorKind::StreamEventTooLarge
            | ErrorKind::UpstreamMalformed
            | ErrorKind::UpstreamServerError(_)
    )
}

impl State {
    /// Moves on from a failed stream: to its continuation when the plan has one, else to its
    /// error event (after what was read before the failure).
    fn failed(
        events: &mut Events,
        mut record: Box<Record>,
        rest: Option<Box<Attempts>>,
        error: GatewayError,
    ) -> (State, Bytes) {
        let before = events.take_out();
        record.streamed(events.ttft(), events.usage(), events.map().produced());
        if events.model().is_some() {
            record.answered_by(events.model());
        }
        let mut error = error;
        if rest.is_some() && continuable(&error) && events.map().in_tool_call() {
            // The text alone would rebuild a corrupted call: the cut is the client's answer.
            error = cut_named(
                &error,
                record.produced().unwrap_or(0),
                "inside a tool call, which is never continued",
            );
        } else if let (Some(rest), true) = (rest, continuable(&error))
            && let Some(text) = events.map().text().map(str::to_owned)
        {
            tracing::info!(request_id = ?record.request_id(), code = error.code(), "continuing a cut stream on the next target");
            record.answer_broke(&error);
            record.continuing();
            let carried = events.map().carried();
            let at = events.map().blocks();
            return (
                State::Continuing(Box::pin(
                    rest.continuation(record, text, carried, at, error),
                )),
                before,
            );
        }
        tracing::warn!(request_id = ?record.request_id(), code = error.code(), "stream to client ended with an error event");
        record.stream_failed(&error);
        let mut last = BytesMut::from(&before[..]);
        last.extend_from_slice(&events.map().closing(&error, record.endpoint().dialect()));
        (State::Closing(last.freeze(), record), Bytes::new())
    }
}

impl Body for SseRelay {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Relaying { events, record, .. } => match events.poll_relay(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Next::Data(data)) => {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Poll::Ready(Next::End) => {
                        record.streamed(events.ttft(), events.usage(), events.map().produced());
                        if events.model().is_some() {
                            record.answered_by(events.model());
                        }
                        record.succeeded();
                        this.state = State::Done;
                        return Poll::Ready(None);
                    }
                    Poll::Ready(Next::Failed(error)) => {
                        let State::Relaying {
                            mut events,
                            record,
                            rest,
                        } = std::mem::replace(&mut this.state, State::Done)
                        else {
                            continue;
                        };
                        let (next, before) = State::failed(&mut events, record, rest, error);
                        this.state = next;
                        if !before.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(before))));
                        }
                    }
                },
                State::Starting(starting) => match starting.as_mut().poll(cx) {
                    Poll::Pending => return this.keep_alive(cx),
                    Poll::Ready((answer, attempts, mut record)) => {
                        this.timer = None;
                        record.mark_head();
                        this.state = match answer {
                            Ok(Served::Stream(events)) => {
                                let rest = attempts.continues_cut_streams().then_some(attempts);
                                State::Relaying {
                                    events,
                                    record,
                                    rest,
                                }
                            }
                            Ok(Served::Complete { .. } | Served::Unary(_)) => {
                                let error = GatewayError::new(
                                    ErrorKind::UpstreamMalformed,
                                    "The upstream answered a stream request with a whole answer.",
                                );
                                record.failed(&error);
                                State::Closing(error.to_event(record.endpoint().dialect()), record)
                            }
                            Err(error) => {
                                tracing::warn!(request_id = ?record.request_id(), code = error.code(), "stream to client ended with an error event");
                                record.failed(&error);
                                State::Closing(error.to_event(record.endpoint().dialect()), record)
                            }
                        };
                    }
                },
                State::Continuing(continuing) => match continuing.as_mut().poll(cx) {
                    Poll::Pending => return this.keep_alive(cx),
                    Poll::Ready(Continued::Resumed {
                        events,
                        record,
                        rest,
                    }) => {
                        this.timer = None;
                        this.state = State::Relaying {
                            events,
                            record,
                            rest: Some(rest),
                        };
                    }
                    Poll::Ready(Continued::Failed(error, mut record)) => {
                        tracing::warn!(request_id = ?record.request_id(), code = error.code(), "stream to client ended with an error event");
                        record.stream_failed(&error);
                        let last = error.to_event(record.endpoint().dialect());
                        this.state = State::Closing(last, record);
                    }
                },
                State::Closing(..) => {
                    let State::Closing(last, record) =
                        std::mem::replace(&mut this.state, State::Done)
                    else {
                        continue;
                    };
                    // The record is complete: emitted now, with the stream's last bytes out.
                    drop(record);
                    return Poll::Ready(Some(Ok(Frame::data(last))));
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl Drop for SseRelay {
    /// A client that leaves mid-stream pays for the output produced so far: the record settles
    /// with it as it drops.
    fn drop(&mut self) {
        if let State::Relaying { events, record, .. } = &mut self.state {
            record.streamed(None, None, events.map().produced());
        }
    }
}

impl std::fmt::Debug for SseRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Starting(_) => "starting",
            State::Relaying { .. } => "relaying",
            State::Continuing(_) => "continuing",
            State::Closing(..) => "closing",
            State::Done => "done",
        };
        f.debug_struct("SseRelay").field("state", &state).finish()
    }
}
