//! The SSE relay: upstream events reach the client as they arrive, without re-serializing.
//!
//! - Every complete event the upstream has ready goes out in one frame, so in one socket write:
//!   frames hyper already holds are drained before anything is written (a chunked body gives one
//!   frame per chunk, even within one socket read), and the end of the stream goes out with the
//!   last data.
//! - Events are found by [`Splitter`], which scans each byte once; the incomplete rest is kept
//!   and bounded by `upstream.max_sse_event_bytes`.
//! - `data: [DONE]` ends the client's stream at once; nothing follows it.
//! - Usage is read from the chunk that carries it; the usage-only chunk is dropped when the
//!   client did not ask for it.
//! - A stream that breaks, misses its first-byte or whole-request deadline, or goes silent past
//!   `upstream.stream_idle_timeout_ms`, ends with an error event and no `[DONE]`; silence
//!   shorter than that is bridged with SSE comments every `downstream.sse_keepalive_interval_secs`.
//! - Dropping the body (the client left) drops the upstream response, which closes that
//!   upstream connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use aisix_obs::metrics::labels::{Outcome, UpstreamErrorKind};
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::account::Accounted;
use crate::deadline::Deadlines;
use crate::upstream::Lease;
use crate::wire::sse::{self, Event, Splitter};
use crate::wire::usage::Usage;

/// How many turns in a row the relay yields without a new upstream frame before it writes what
/// it holds. The upstream connection's task hands over one frame per turn of its own, and it
/// takes two turns of the worker to get one (measured with strace on a 23-event burst: one
/// turn still wrote every event alone). A turn costs a task poll, no system call.
const QUIET_TURNS: u8 = 2;

/// Knobs of every relayed stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSettings {
    pub keepalive: Option<Duration>,
    pub max_event_bytes: usize,
}

pub struct SseRelay {
    /// `None` once handed back to the pool to finish.
    upstream: Option<Incoming>,
    /// The upstream connection, handed back once the stream has been read to the end.
    lease: Option<Lease>,
    splitter: Splitter,
    /// Bytes of an event not complete yet.
    partial: BytesMut,
    /// Complete events not sent yet.
    out: Outbox,
    /// Turns yielded in a row without a new upstream frame, while holding output.
    yields: u8,
    strip_usage_chunk: bool,
    /// The upstream sent something: the first-byte deadline is met.
    started: bool,
    /// `[DONE]` came: the stream is complete, only the upstream body's end is still awaited.
    done: bool,
    /// Nothing more comes from the upstream; what is in `out` is the end.
    finished: bool,
    settings: StreamSettings,
    deadlines: Deadlines,
    timer: Pin<Box<Sleep>>,
    last_upstream: Instant,
    last_sent: Instant,
    /// When the upstream call was sent, for time to first token.
    sent_at: Instant,
    record: Accounted,
}

/// What a stream's events came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Bytes of complete events (up to `[DONE]` included).
    pub complete: usize,
    /// The events to send when some were dropped; `None` means all `complete` bytes go out.
    pub kept: Option<BytesMut>,
    pub done: bool,
    pub usage: Option<Usage>,
}

/// Splits the events of `buf` whose bytes before `at` were scanned already, classifies each,
/// and stops after `[DONE]`.
pub(crate) fn scan(
    splitter: &mut Splitter,
    buf: &[u8],
    mut at: usize,
    strip_usage: bool,
) -> Scanned {
    let mut scanned = Scanned::default();
    while let Some(len) = splitter.next_end(&buf[at..]) {
        let end = at + len;
        let event = &buf[scanned.complete..end];
        let drop_event = match sse::classify(event) {
            Event::Done => {
                scanned.done = true;
                false
            }
            Event::Usage { usage, usage_only } => {
                scanned.usage = Some(usage);
                usage_only && strip_usage
            }
            Event::Other => false,
        };
        if drop_event {
            // From here on the output is a copy without this event.
            let complete = scanned.complete;
            scanned
                .kept
                .get_or_insert_with(|| BytesMut::from(&buf[..complete]));
        } else if let Some(kept) = scanned.kept.as_mut() {
            kept.extend_from_slice(event);
        }
        scanned.complete = end;
        at = end;
        if scanned.done {
            break;
        }
    }
    scanned
}

/// Output gathered for one write: the first piece kept as it came (no copy for the common
/// case of one upstream frame), later ones appended.
#[derive(Default)]
struct Outbox {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Outbox {
    fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        match self.first.take() {
            None if self.more.is_empty() => self.first = Some(bytes),
            first => {
                if let Some(first) = first {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(&bytes);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    fn take(&mut self) -> Bytes {
        self.first
            .take()
            .unwrap_or_else(|| self.more.split().freeze())
    }
}

impl SseRelay {
    pub(crate) fn new(
        upstream: Incoming,
        lease: Option<Lease>,
        strip_usage_chunk: bool,
        settings: StreamSettings,
        deadlines: Deadlines,
        sent_at: Instant,
        mut record: Accounted,
    ) -> Self {
        let now = Instant::now();
        // Until the stream ends, the request counts as abandoned if the body is dropped.
        record.0.outcome = Outcome::ClientClosed;
        record.0.error = Some("client_closed");
        let mut relay = Self {
            upstream: Some(upstream),
            lease,
            splitter: Splitter::default(),
            partial: BytesMut::new(),
            out: Outbox::default(),
            yields: 0,
            strip_usage_chunk,
            started: false,
            done: false,
            finished: false,
            settings,
            deadlines,
            timer: Box::pin(tokio::time::sleep_until(now)),
            last_upstream: now,
            last_sent: now,
            sent_at,
            record,
        };
        let wake = relay.next_wake();
        relay.timer.as_mut().reset(wake);
        relay
    }

    /// Takes in one upstream frame: complete events go to the outbox, the rest waits.
    fn accept(&mut self, data: Bytes) {
        let strip = self.strip_usage_chunk;
        let (scanned, complete) = if self.partial.is_empty() {
            let scanned = scan(&mut self.splitter, &data, 0, strip);
            if !scanned.done {
                self.partial.extend_from_slice(&data[scanned.complete..]);
            }
            let complete = data.slice(..scanned.complete);
            (scanned, complete)
        } else {
            // Only the new bytes are scanned; the splitter remembers where the old ones left off.
            let scanned_before = self.partial.len();
            self.partial.extend_from_slice(&data);
            let scanned = scan(&mut self.splitter, &self.partial, scanned_before, strip);
            let complete = self.partial.split_to(scanned.complete).freeze();
            (scanned, complete)
        };
        if let Some(usage) = scanned.usage {
            self.record.0.usage = Some(usage);
        }
        self.out
            .push(scanned.kept.map_or(complete, BytesMut::freeze));
        if scanned.done {
            self.partial.clear();
            self.done = true;
        } else if self.partial.len() > self.settings.max_event_bytes {
            self.fail(
                UpstreamErrorKind::EventTooLarge,
                "stream_event_too_large",
                "The upstream sent an event larger than the gateway relays.",
            );
        }
    }

    /// Ends the stream with an error event and no `[DONE]`.
    fn fail(&mut self, kind: UpstreamErrorKind, code: &'static str, message: &str) {
        // A broken or abandoned stream's connection is not reused.
        self.lease = None;
        self.upstream = None;
        tracing::warn!(request_id = ?self.record.0.request_id, code, "stream to client ended with an error event");
        let event = serde_json::json!({
            "error": {"message": message, "type": "upstream_error", "param": null, "code": code}
        });
        self.out
            .push(Bytes::from(format!("event: error\ndata: {event}\n\n")));
        self.finished = true;
        self.record.0.outcome = Outcome::UpstreamError;
        self.record.0.error = Some(code);
        self.record.0.upstream_error = Some(kind);
    }

    /// The stream is complete: its connection goes back to the pool once the upstream body
    /// has ended (at once when it has already; a connection whose body went on after `[DONE]`
    /// has had its lease dropped before).
    fn finish(&mut self) {
        self.finished = true;
        match (self.lease.take(), self.upstream.take()) {
            (Some(lease), Some(upstream)) => lease.release_after(upstream),
            (Some(lease), None) => lease.release(),
            _ => {}
        }
        self.record.0.outcome = Outcome::Success;
        self.record.0.error = None;
    }

    fn next_wake(&self) -> Instant {
        let silence = if self.started {
            self.last_upstream + self.deadlines.stream_idle
        } else {
            self.deadlines.first_byte
        };
        let due = silence.min(self.deadlines.end);
        match self.settings.keepalive {
            Some(every) => due.min(self.last_sent + every),
            None => due,
        }
    }

    /// The upstream is quiet: sends a keep-alive comment, fails a missed deadline, or waits.
    fn poll_quiet(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let wake = self.next_wake();
        if self.timer.deadline() != wake {
            self.timer.as_mut().reset(wake);
        }
        if self.timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let now = Instant::now();
        if now >= self.deadlines.end {
            self.fail(
                UpstreamErrorKind::Timeout,
                "upstream_timeout",
                "The upstream provider did not finish in time.",
            );
        } else if !self.started && now >= self.deadlines.first_byte {
            self.fail(
                UpstreamErrorKind::Timeout,
                "upstream_timeout",
                "The upstream provider did not start answering in time.",
            );
        } else if self.started && now >= self.last_upstream + self.deadlines.stream_idle {
            self.fail(
                UpstreamErrorKind::Timeout,
                "stream_timeout",
                "The upstream stream went silent for too long.",
            );
        } else {
            self.last_sent = now;
            return Poll::Ready(Some(Bytes::from_static(sse::KEEPALIVE)));
        }
        Poll::Ready(None)
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
            if this.finished {
                return Poll::Ready(
                    (!this.out.is_empty()).then(|| Ok(Frame::data(this.out.take()))),
                );
            }
            let Some(upstream) = this.upstream.as_mut() else {
                this.finished = true;
                continue;
            };
            let polled = Pin::new(upstream).poll_frame(cx);
            match polled {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    if this.done {
                        // Bytes after `[DONE]`: not relayed, and the connection is not reused.
                        this.lease = None;
                        this.finish();
                        continue;
                    }
                    let now = Instant::now();
                    if !this.started {
                        this.started = true;
                        this.record.0.ttft = Some(now - this.sent_at);
                    }
                    this.last_upstream = now;
                    this.yields = 0;
                    this.accept(data);
                }
                Poll::Ready(Some(Err(error))) if this.done => {
                    tracing::debug!(%error, "upstream stream broke after [DONE]");
                    this.lease = None;
                    this.finish();
                }
                Poll::Ready(Some(Err(error))) => {
                    tracing::debug!(%error, "upstream stream broke");
                    this.fail(
                        UpstreamErrorKind::StreamCut,
                        "stream_cut",
                        "The upstream stream was interrupted.",
                    );
                }
                Poll::Ready(None) => {
                    this.upstream = None;
                    if this.done {
                        this.finish();
                    } else {
                        this.fail(
                            UpstreamErrorKind::StreamCut,
                            "stream_cut",
                            "The upstream stream ended before it was complete.",
                        );
                    }
                }
                Poll::Pending if this.done || !this.out.is_empty() => {
                    // The upstream's connection task may hold more frames of the same read (or
                    // the body's end, after `[DONE]`): let it run before writing, so a burst
                    // leaves in one write and a finished connection is reused at once.
                    if this.yields < QUIET_TURNS {
                        this.yields += 1;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    this.yields = 0;
                    if this.done {
                        this.finish();
                        continue;
                    }
                    this.last_sent = Instant::now();
                    return Poll::Ready(Some(Ok(Frame::data(this.out.take()))));
                }
                Poll::Pending => {
                    return match this.poll_quiet(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(Some(keepalive)) => {
                            Poll::Ready(Some(Ok(Frame::data(keepalive))))
                        }
                        // A deadline failed the stream: its error event goes out next.
                        Poll::Ready(None) => continue,
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.out.is_empty()
    }
}

impl std::fmt::Debug for SseRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseRelay")
            .field("started", &self.started)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aisix_obs::metrics::labels::Endpoint as EndpointLabel;
    use http::{HeaderValue, Method, Request, Uri};
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::account::{Record, Sinks};

    /// A relay over a real hyper HTTP/1.1 response whose raw bytes (head and chunked body) the
    /// upstream writes in one go; the upstream keeps its end open unless `close`.
    async fn relay_of(raw: Vec<u8>, close: bool, max_event_bytes: usize) -> SseRelay {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let mut head = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut server, &mut head).await;
            server.write_all(&raw).await.unwrap();
            if !close {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
            .await
            .unwrap();
        tokio::spawn(conn);
        let request = Request::post("/v1/chat/completions")
            .header("host", "up")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let now = Instant::now();
        let record = Record::new(
            HeaderValue::from_static("r"),
            EndpointLabel::ChatCompletions,
            Method::POST,
            Uri::from_static("/v1/chat/completions"),
            now,
            Sinks {
                metrics: false,
                access_log: false,
            },
        );
        let settings = StreamSettings {
            keepalive: None,
            max_event_bytes,
        };
        let deadlines = Deadlines {
            connect: Duration::from_secs(1),
            first_byte: now + Duration::from_secs(60),
            stream_idle: Duration::from_secs(60),
            end: now + Duration::from_secs(60),
        };
        SseRelay::new(
            response.into_body(),
            None,
            true,
            settings,
            deadlines,
            now,
            Accounted(record),
        )
    }

    fn chunked(events: &[String]) -> Vec<u8> {
        let mut raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for event in events {
            raw.extend_from_slice(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
        }
        raw
    }

    fn burst(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"))
            .collect()
    }

    /// Polls the relay to its end, returning each frame it produced.
    async fn frames(mut relay: SseRelay) -> (Vec<Bytes>, Accounted) {
        let mut out = Vec::new();
        while let Some(frame) = relay.frame().await {
            let Ok(data) = frame.unwrap().into_data() else {
                continue;
            };
            out.push(data);
            if relay.is_end_stream() {
                break;
            }
        }
        assert!(relay.is_end_stream());
        (out, relay.record)
    }

    #[tokio::test]
    async fn a_burst_of_ready_frames_goes_out_as_one_frame_that_ends_the_stream() {
        let mut events = burst(23);
        events.push("data: [DONE]\n\n".to_owned());
        let mut raw = chunked(&events);
        raw.extend_from_slice(b"0\r\n\r\n");
        let (frames, record) = frames(relay_of(raw, true, 1 << 20).await).await;
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0], events.concat());
        assert_eq!(record.0.outcome, Outcome::Success);
    }

    #[tokio::test]
    async fn done_ends_the_client_stream_at_once_and_nothing_after_it_is_relayed() {
        let mut events = burst(2);
        events.push("data: [DONE]\n\n".to_owned());
        events.push("data: {\"late\":true}\n\n".to_owned());
        // No final chunk, and the upstream keeps its connection open.
        let (frames, record) = frames(relay_of(chunked(&events), false, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(
            !text.contains("late") && !text.contains("event: error"),
            "{text}"
        );
        assert_eq!(record.0.outcome, Outcome::Success);
    }

    #[tokio::test]
    async fn cr_and_crlf_streams_are_split_and_classified() {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\r".to_owned(),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3,\"total_tokens\":5}}\r\n\r\n".to_owned(),
            "data: [DONE]\r\n\r\n".to_owned(),
        ];
        let (frames, record) = frames(relay_of(chunked(&events), false, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert_eq!(
            text,
            format!("{}{}", events[0], events[2]),
            "the usage-only chunk is not asked for"
        );
        assert_eq!(record.0.usage.map(|u| u.completion_tokens), Some(3));
        assert_eq!(record.0.outcome, Outcome::Success);
    }

    #[tokio::test]
    async fn an_event_past_the_bound_ends_the_stream_with_an_error_event() {
        let events = [
            burst(1).concat(),
            format!("data: {}", "x".repeat(3000)),
            "y".repeat(3000),
        ];
        let (frames, record) = frames(relay_of(chunked(&events), false, 4096).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(text.starts_with(&events[0]), "{text}");
        assert!(!text.contains("xxx"), "the partial event is not relayed");
        assert!(
            text.contains("event: error") && text.contains("stream_event_too_large"),
            "{text}"
        );
        assert_eq!(record.0.outcome, Outcome::UpstreamError);
        assert_eq!(
            record.0.upstream_error,
            Some(UpstreamErrorKind::EventTooLarge)
        );
    }
}
