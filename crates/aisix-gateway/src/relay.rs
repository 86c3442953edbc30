//! The SSE relay: upstream events reach the client as they arrive, one complete event or more
//! per frame, without re-serializing. Usage is read from the chunk that carries it; the
//! usage-only chunk is dropped when the client did not ask for it. A stream that breaks, or goes
//! silent past `upstream.stream_idle_timeout_ms`, ends with an error event and no `[DONE]`;
//! silence shorter than that is bridged with SSE comments every
//! `downstream.sse_keepalive_interval_secs`. Dropping the body (the client left) drops the
//! upstream response, which closes that upstream connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use aisix_obs::metrics::labels::{Outcome, UpstreamErrorKind};

use crate::account::Accounted;
use crate::upstream::Lease;
use crate::wire::sse::{self, Event};

/// Timing knobs of a relayed stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSettings {
    pub idle_timeout: Duration,
    pub keepalive: Option<Duration>,
}

pub struct SseRelay {
    upstream: Incoming,
    /// The upstream connection, handed back once the stream has been read to the end.
    lease: Option<Lease>,
    /// Bytes of an event not complete yet.
    partial: BytesMut,
    strip_usage_chunk: bool,
    saw_done: bool,
    finished: bool,
    /// A last frame to send before ending (the error event).
    tail: Option<Bytes>,
    settings: StreamSettings,
    timer: Pin<Box<Sleep>>,
    last_upstream: Instant,
    last_sent: Instant,
    /// When the upstream call was sent, for time to first token.
    sent_at: Instant,
    record: Accounted,
}

impl SseRelay {
    pub(crate) fn new(
        upstream: Incoming,
        lease: Option<Lease>,
        strip_usage_chunk: bool,
        settings: StreamSettings,
        sent_at: Instant,
        mut record: Accounted,
    ) -> Self {
        let now = Instant::now();
        // Until the stream ends, the request counts as abandoned if the body is dropped.
        record.0.outcome = Outcome::ClientClosed;
        Self {
            upstream,
            lease,
            partial: BytesMut::new(),
            strip_usage_chunk,
            saw_done: false,
            finished: false,
            tail: None,
            settings,
            timer: Box::pin(tokio::time::sleep_until(next_wake(now, now, settings))),
            last_upstream: now,
            last_sent: now,
            sent_at,
            record,
        }
    }

    /// Splits `data` into complete events, keeps the incomplete rest, and returns what to send.
    fn accept(&mut self, data: Bytes) -> Option<Bytes> {
        let buf = if self.partial.is_empty() {
            data
        } else {
            self.partial.extend_from_slice(&data);
            self.partial.split().freeze()
        };
        let mut complete = 0;
        let mut kept: Option<BytesMut> = None;
        while let Some(len) = sse::event_end(&buf[complete..]) {
            let event = &buf[complete..complete + len];
            let drop_event = match sse::classify(event) {
                Event::Done => {
                    self.saw_done = true;
                    false
                }
                Event::Usage { usage, usage_only } => {
                    self.record.0.usage = Some(usage);
                    usage_only && self.strip_usage_chunk
                }
                Event::Other => false,
            };
            if drop_event {
                // From here on the output is a copy without this event.
                kept.get_or_insert_with(|| BytesMut::from(&buf[..complete]));
            } else if let Some(kept) = kept.as_mut() {
                kept.extend_from_slice(event);
            }
            complete += len;
        }
        self.partial.extend_from_slice(&buf[complete..]);
        let out = match kept {
            Some(kept) => kept.freeze(),
            // Zero-copy: the complete events are a slice of what the upstream sent.
            None => buf.slice(..complete),
        };
        (!out.is_empty()).then_some(out)
    }

    /// Ends the stream with an error event and no `[DONE]`.
    fn fail(&mut self, kind: UpstreamErrorKind, code: &'static str, message: &str) {
        // A broken or silent stream's connection is not reused.
        self.lease = None;
        tracing::warn!(request_id = ?self.record.0.request_id, code, "stream to client ended with an error event");
        let event = serde_json::json!({
            "error": {"message": message, "type": "upstream_error", "param": null, "code": code}
        });
        self.tail = Some(Bytes::from(format!("event: error\ndata: {event}\n\n")));
        self.finished = true;
        self.record.0.outcome = Outcome::UpstreamError;
        self.record.0.error = Some(code);
        self.record.0.upstream_error = Some(kind);
    }

    fn finish(&mut self) {
        self.finished = true;
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
        self.record.0.outcome = Outcome::Success;
        if !self.partial.is_empty() {
            // Bytes after the last blank line: relay them as they are.
            self.tail = Some(self.partial.split().freeze());
        }
    }
}

fn next_wake(last_upstream: Instant, last_sent: Instant, settings: StreamSettings) -> Instant {
    let idle_deadline = last_upstream + settings.idle_timeout;
    match settings.keepalive {
        Some(every) => idle_deadline.min(last_sent + every),
        None => idle_deadline,
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
            if let Some(tail) = this.tail.take() {
                return Poll::Ready(Some(Ok(Frame::data(tail))));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    let now = Instant::now();
                    if this.record.0.ttft.is_none() {
                        this.record.0.ttft = Some(now - this.sent_at);
                    }
                    this.last_upstream = now;
                    if let Some(out) = this.accept(data) {
                        this.last_sent = now;
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    tracing::debug!(%error, "upstream stream broke");
                    if this.saw_done {
                        this.finish();
                    } else {
                        this.fail(
                            UpstreamErrorKind::StreamCut,
                            "stream_cut",
                            "The upstream stream was interrupted.",
                        );
                    }
                }
                Poll::Ready(None) => {
                    if this.saw_done {
                        this.finish();
                    } else {
                        this.fail(
                            UpstreamErrorKind::StreamCut,
                            "stream_cut",
                            "The upstream stream ended before it was complete.",
                        );
                    }
                }
                Poll::Pending => {
                    let deadline = next_wake(this.last_upstream, this.last_sent, this.settings);
                    if this.timer.deadline() != deadline {
                        this.timer.as_mut().reset(deadline);
                    }
                    if this.timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let now = Instant::now();
                    if now >= this.last_upstream + this.settings.idle_timeout {
                        this.fail(
                            UpstreamErrorKind::Timeout,
                            "stream_timeout",
                            "The upstream stream went silent for too long.",
                        );
                    } else {
                        this.last_sent = now;
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                            sse::KEEPALIVE,
                        )))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.tail.is_none()
    }
}

impl std::fmt::Debug for SseRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseRelay")
            .field("saw_done", &self.saw_done)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}
