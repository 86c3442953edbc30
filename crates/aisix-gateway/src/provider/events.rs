//! One upstream stream, read event by event into the client's dialect: the part of relaying
//! that the attempt loop's hold and the response body share.
//!
//! - Events are found by [`Splitter`] (or, for Bedrock's binary event stream, by
//!   [`FrameSplitter`]), which scans each byte once; the incomplete rest is kept
//!   and bounded by `upstream.max_sse_event_bytes`. Each complete event goes through the
//!   adapter's [`StreamMap`], which keeps it, drops it or replaces it; kept events are not
//!   copied.
//! - Held ([`Events::hold`]), nothing is sent: the stream is read until its first token, so a
//!   stream that fails before it can be replaced by another attempt. What was read stays in
//!   the outbox and goes out first once relayed: the hold costs no copy and no task. What it
//!   holds is charged to the worker's memory budget and bounded by
//!   `upstream.max_sse_event_bytes`: past that, or when the budget has no room, the stream is
//!   committed (relayed from there on, no longer replaceable).
//! - Relayed ([`Events::poll_relay`]), every complete event the upstream has ready goes out in
//!   one frame: frames hyper already holds are drained before anything is written, and the end
//!   of the stream goes out with the last data.
//! - `data: [DONE]` ends the stream at once; a stream whose every choice has finished is
//!   complete without it (the end marker is added). One that ends otherwise, breaks, sends a
//!   malformed or error event, misses its first-token or whole-request deadline, or goes silent
//!   past its idle deadline, has failed: its error is for the relay to send (or to continue
//!   past). Silence shorter than that is bridged with SSE comments every
//!   `downstream.sse_keepalive_interval_secs` while relaying.

use std::borrow::Cow;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::error::{ErrorKind, GatewayError};
use crate::limit::memory_budget::{Held, MemoryBudget};
use crate::pieces::Pieces;
use crate::provider::{Edit, StreamMap};
use crate::request::deadline::Deadlines;
use crate::snapshot::Provider;
use crate::target::state::{Ticket, Verdict};
use crate::upstream::pool::{BYTES_PER_TURN, Lease};
use crate::wire::Dialect;
use crate::wire::bedrock::frames::FrameSplitter;
use crate::wire::chunk;
use crate::wire::sse::{self, Splitter};
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

/// What the stream has for the client next.
#[derive(Debug)]
pub(crate) enum Next {
    Data(Bytes),
    /// The stream is over and complete; nothing more comes.
    End,
    /// The stream failed; what was read before the failure is taken with [`Events::take_out`].
    Failed(GatewayError),
}

pub(crate) struct Events {
    /// `None` once finished (or handed back to the pool to finish).
    upstream: Option<Incoming>,
    /// The upstream connection, handed back once the stream has been read to the end.
    lease: Option<Lease>,
    map: StreamMap,
    splitter: Framing,
    /// Bytes of an event not complete yet.
    partial: BytesMut,
    /// Complete events not sent yet.
    out: Pieces,
    /// Turns yielded in a row without a new upstream frame, while holding output.
    yields: u8,
    /// Bytes handed out since the relay last gave its turn up (see [`BYTES_PER_TURN`]).
    this_turn: usize,
    /// `[DONE]` came: the stream is complete, only the upstream body's end is still awaited.
    done: bool,
    /// Nothing more comes from the upstream; what is in `out` is the end.
    finished: bool,
    failure: Option<GatewayError>,
    settings: StreamSettings,
    deadlines: Deadlines,
    timer: Pin<Box<Sleep>>,
    last_upstream: Instant,
    last_sent: Instant,
    /// When the upstream call was sent, for time to first token.
    sent_at: Instant,
    ttft: Option<Duration>,
    usage: Option<Usage>,
    /// Whether the model the stream names is still sought (a traced request's, until its
    /// first token's event has been read), and what it was found to be.
    seeking_model: bool,
    model: Option<String>,
    /// Counts the call in its direct model's load while the stream lives, and reports its end
    /// (its first token's latency, its completion or its failure) to the model's state.
    ticket: Option<Ticket>,
    /// The provider called, whose key is masked in an error it reports mid-stream.
    provider: Option<Arc<Provider>>,
}

/// Where an upstream's events end: server-sent events, or AWS's event-stream messages.
#[derive(Debug, Clone, Copy)]
enum Framing {
    Sse(Splitter),
    EventStream(FrameSplitter),
}

impl Framing {
    fn of(map: &StreamMap) -> Self {
        if map.event_stream_framed() {
            Framing::EventStream(FrameSplitter::default())
        } else {
            Framing::Sse(Splitter::default())
        }
    }

    /// Where the next event ends, and whether it is one SSE line (see
    /// [`Splitter::next_event`]; a binary message never is).
    fn next_end(&mut self, bytes: &[u8]) -> Option<(usize, bool)> {
        match self {
            Framing::Sse(splitter) => splitter.next_event(bytes),
            Framing::EventStream(splitter) => splitter.next_end(bytes).map(|end| (end, false)),
        }
    }

    /// See [`Splitter::owes_lf`]; binary messages owe nothing.
    fn owes_lf(&self) -> bool {
        matches!(self, Framing::Sse(splitter) if splitter.owes_lf())
    }
}

/// What a run of events came to.
#[derive(Debug, Default)]
struct Scanned {
    /// Bytes of events read (up to `[DONE]` or a failure, excluded).
    complete: usize,
    /// The events to send when some were dropped or replaced; `None` means all `complete`
    /// bytes go out.
    kept: Option<BytesMut>,
    done: bool,
    usage: Option<Usage>,
    failure: Option<ErrorKind>,
    /// What the upstream said of the error it reported, when the failure is one.
    reported: Option<sse::ErrorReport>,
}

/// Splits the events of `buf` whose bytes before `at` were scanned already, runs each through
/// `map`, and stops after `[DONE]` or at a failure.
fn scan(map: &mut StreamMap, splitter: &mut Framing, buf: &[u8], mut at: usize) -> Scanned {
    let mut scanned = Scanned::default();
    while let Some((len, one_line)) = splitter.next_end(&buf[at..]) {
        let end = at + len;
        let event = &buf[scanned.complete..end];
        let step = map.event(event, one_line.then(|| sse::only_line(event)));
        if step.failure.is_some() {
            scanned.failure = step.failure;
            if matches!(step.failure, Some(ErrorKind::UpstreamServerError(_))) {
                scanned.reported = step.reported.map(|r| *r).or_else(|| sse::reported(event));
            }
            break;
        }
        if step.usage.is_some() {
            scanned.usage = step.usage;
        }
        scanned.done = step.done;
        let complete = scanned.complete;
        match step.edit {
            Edit::Keep => {
                if let Some(kept) = scanned.kept.as_mut() {
                    kept.extend_from_slice(event);
                }
            }
            // From here on the output is a copy.
            Edit::Drop => {
                scanned
                    .kept
                    .get_or_insert_with(|| BytesMut::from(&buf[..complete]));
            }
            Edit::Replace(bytes) => scanned
                .kept
                .get_or_insert_with(|| BytesMut::from(&buf[..complete]))
                .extend_from_slice(&bytes),
        }
        scanned.complete = end;
        at = end;
        if scanned.done {
            break;
        }
    }
    scanned
}

/// The error that ends a stream that failed with `kind`: an error the upstream reported keeps
/// its message, type and code, in the envelope of the client's `dialect`.
/// `secret` (the provider's key) is masked in the message, as in its whole error answers.
fn failure(
    kind: ErrorKind,
    reported: Option<sse::ErrorReport>,
    secret: Option<&str>,
    dialect: Dialect,
) -> GatewayError {
    if kind == ErrorKind::UpstreamMalformed {
        return GatewayError::new(kind, "The upstream sent an event the gateway cannot read.");
    }
    const GENERIC: &str = "The upstream reported an error in the stream.";
    let Some(reported) = reported else {
        return GatewayError::new(kind, GENERIC);
    };
    let message = reported.message.filter(|m| !m.is_empty());
    let message = match (message, secret) {
        (Some(message), Some(secret)) if message.contains(secret) => {
            Cow::Owned(message.replace(secret, "***"))
        }
        (Some(message), _) => Cow::Owned(message),
        (None, _) => Cow::Borrowed(GENERIC),
    };
    GatewayError::reported(
        kind,
        &message,
        reported.kind.as_deref(),
        reported.code.as_deref(),
        dialect,
    )
}

impl Events {
    pub(crate) fn new(
        upstream: Incoming,
        lease: Option<Lease>,
        map: StreamMap,
        settings: StreamSettings,
        deadlines: Deadlines,
        sent_at: Instant,
        ticket: Option<Ticket>,
    ) -> Self {
        let now = Instant::now();
        let mut events = Self {
            upstream: Some(upstream),
            lease,
            splitter: Framing::of(&map),
            map,
            partial: BytesMut::new(),
            out: Pieces::default(),
            yields: 0,
            this_turn: 0,
            done: false,
            finished: false,
            failure: None,
            settings,
            deadlines,
            timer: Box::pin(tokio::time::sleep_until(now)),
            last_upstream: now,
            last_sent: now,
            sent_at,
            ttft: None,
            usage: None,
            seeking_model: false,
            model: None,
            ticket,
            provider: None,
        };
        let wake = events.next_wake(false);
        events.timer.as_mut().reset(wake);
        events
    }

    /// The stream is traced: the model its events name is read, up to its first token.
    pub(crate) fn seek_model(&mut self) {
        self.seeking_model = true;
    }

    /// The model the stream's events named, as the upstream sent it.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Names the provider called, so an error it reports mid-stream has its key masked.
    pub(crate) fn called(&mut self, provider: &Arc<Provider>) {
        self.provider = Some(Arc::clone(provider));
    }

    pub(crate) fn map(&self) -> &StreamMap {
        &self.map
    }

    /// How often a keep-alive comment goes out while the client waits.
    pub(crate) fn keepalive(&self) -> Option<Duration> {
        self.settings.keepalive
    }

    /// Time from sending the call to its first token.
    pub(crate) fn ttft(&self) -> Option<Duration> {
        self.ttft
    }

    /// The usage the stream reported last.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// What was read and not sent.
    pub(crate) fn take_out(&mut self) -> Bytes {
        self.out.take()
    }

    /// Reads until the first token (or the stream's complete end), sending nothing: `Err` if
    /// the stream fails first. What it holds is charged to `budget` until it returns; past
    /// the cap (`upstream.max_sse_event_bytes`) or the budget's room it returns early, the
    /// stream committed.
    pub(crate) async fn hold(&mut self, budget: &MemoryBudget) -> Result<(), GatewayError> {
        let mut held = Held::default();
        poll_fn(|cx| self.poll_held(cx, budget, &mut held)).await
    }

    fn poll_held(
        &mut self,
        cx: &mut Context<'_>,
        budget: &MemoryBudget,
        held: &mut Held,
    ) -> Poll<Result<(), GatewayError>> {
        loop {
            if let Some(error) = self.failure.take() {
                return Poll::Ready(Err(error));
            }
            if self.finished || self.done || self.map.started() {
                return Poll::Ready(Ok(()));
            }
            let holding = self.out.len() + self.partial.len();
            if holding > self.settings.max_event_bytes || !budget.try_cover(held, holding as u64) {
                tracing::debug!(holding, "the hold is full: the stream is committed");
                return Poll::Ready(Ok(()));
            }
            match self.poll_upstream(cx) {
                Poll::Ready(()) => continue,
                Poll::Pending => {
                    if self.poll_deadlines(cx, true).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    /// The next frame for the client.
    pub(crate) fn poll_relay(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        if self.this_turn >= BYTES_PER_TURN {
            // Give the turn up: woken at once, polled again after the tasks already waiting.
            self.this_turn = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            if let Some(error) = self.failure.take() {
                return Poll::Ready(Next::Failed(error));
            }
            if self.finished {
                return Poll::Ready(if self.out.is_empty() {
                    Next::End
                } else {
                    Next::Data(self.out.take())
                });
            }
            if self.upstream.is_none() {
                self.ended();
                continue;
            }
            match self.poll_upstream(cx) {
                // A turn's worth is held: it goes out now, however fast more comes, so that an
                // upstream that never pauses is neither held in memory nor sent in one write.
                Poll::Ready(())
                    if self.out.len() >= BYTES_PER_TURN
                        && !self.finished
                        && self.failure.is_none() =>
                {
                    return Poll::Ready(Next::Data(self.hand_out()));
                }
                Poll::Ready(()) => continue,
                Poll::Pending if self.done || !self.out.is_empty() => {
                    // The upstream's connection task may hold more frames of the same read (or
                    // the body's end, after `[DONE]`): let it run before writing, so a burst
                    // leaves in one write and a finished connection is reused at once.
                    if self.yields < QUIET_TURNS {
                        self.yields += 1;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    self.yields = 0;
                    if self.done {
                        self.finish();
                        continue;
                    }
                    return Poll::Ready(Next::Data(self.hand_out()));
                }
                Poll::Pending => match self.poll_deadlines(cx, false) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(keepalive)) => return Poll::Ready(Next::Data(keepalive)),
                    // A deadline failed the stream: its error goes out next.
                    Poll::Ready(None) => continue,
                },
            }
        }
    }

    /// What the relay holds, handed out now.
    fn hand_out(&mut self) -> Bytes {
        self.last_sent = Instant::now();
        let out = self.out.take();
        self.this_turn += out.len();
        out
    }

    /// Takes in what the upstream has ready: `Ready` when something changed (a frame, the
    /// end), `Pending` when it has nothing now.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(upstream) = self.upstream.as_mut() else {
            self.ended();
            return Poll::Ready(());
        };
        match Pin::new(upstream).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    return Poll::Ready(());
                };
                if data.is_empty() {
                    return Poll::Ready(());
                }
                if self.done {
                    // The LF of the last event's CRLF, come apart from its CR, is still that
                    // event's: the client gets it with the event (when the event went out as it
                    // came), and the connection stays reusable.
                    let data = match data.first() {
                        Some(b'\n') if self.splitter.owes_lf() => {
                            self.splitter = Framing::Sse(Splitter::default());
                            if self.out.last() == Some(b'\r') {
                                self.out.push(data.slice(..1));
                            }
                            data.slice(1..)
                        }
                        _ => data,
                    };
                    if data.is_empty() {
                        return Poll::Ready(());
                    }
                    // Bytes after `[DONE]`: not relayed, and the connection is not reused.
                    self.lease = None;
                    self.finish();
                    return Poll::Ready(());
                }
                self.last_upstream = Instant::now();
                self.yields = 0;
                self.accept(data);
            }
            Poll::Ready(Some(Err(error))) => {
                tracing::debug!(%error, "upstream stream broke");
                // A broken body's connection is not reused.
                self.lease = None;
                self.upstream = None;
                self.ended();
            }
            Poll::Ready(None) => {
                self.upstream = None;
                self.ended();
            }
            Poll::Pending => return Poll::Pending,
        }
        Poll::Ready(())
    }

    /// The upstream body is over: complete if `[DONE]` came or every choice finished, cut
    /// otherwise.
    fn ended(&mut self) {
        if self.finished {
            return;
        }
        if self.done {
            self.finish();
        } else if let Some(end) = self.map.finish() {
            self.out.push(end);
            self.finish();
        } else {
            self.fail(GatewayError::new(
                ErrorKind::StreamCut,
                "The upstream stream ended before it was complete.",
            ));
        }
    }

    /// Takes in one upstream frame: complete events go to the outbox, the rest waits.
    fn accept(&mut self, data: Bytes) {
        let was_started = self.map.started();
        let (scanned, complete) = if self.partial.is_empty() {
            let scanned = scan(&mut self.map, &mut self.splitter, &data, 0);
            if !scanned.done && scanned.failure.is_none() {
                self.partial.extend_from_slice(&data[scanned.complete..]);
            }
            let complete = data.slice(..scanned.complete);
            (scanned, complete)
        } else {
            // Only the new bytes are scanned; the splitter remembers where the old ones left off.
            let scanned_before = self.partial.len();
            self.partial.extend_from_slice(&data);
            let scanned = scan(
                &mut self.map,
                &mut self.splitter,
                &self.partial,
                scanned_before,
            );
            let complete = self.partial.split_to(scanned.complete).freeze();
            (scanned, complete)
        };
        if self.seeking_model {
            // The upstream's own events, before any rename or translation.
            self.model = chunk::model(&complete);
            self.seeking_model = self.model.is_none() && !self.map.started();
        }
        if !was_started && self.map.started() {
            let ttft = self.sent_at.elapsed();
            self.ttft = Some(ttft);
            if let Some(ticket) = &self.ticket {
                ticket.first_token(ttft);
            }
        }
        if scanned.usage.is_some() {
            self.usage = scanned.usage;
        }
        self.out
            .push(scanned.kept.map_or(complete, BytesMut::freeze));
        if let Some(kind) = scanned.failure {
            let provider = self.provider.as_deref();
            let secret = provider.and_then(Provider::error_secret);
            let error = failure(kind, scanned.reported, secret, self.map.dialect());
            self.fail(match provider {
                Some(provider) => provider.mask_error(error),
                None => error,
            });
        } else if scanned.done {
            self.partial.clear();
            self.done = true;
        } else if self.partial.len() > self.settings.max_event_bytes {
            self.fail(GatewayError::new(
                ErrorKind::StreamEventTooLarge,
                "The upstream sent an event larger than the gateway relays.",
            ));
        }
    }

    /// Ends the stream with `error`; its connection is not reused.
    fn fail(&mut self, error: GatewayError) {
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.settle_error(&error);
        }
        self.lease = None;
        self.upstream = None;
        self.finished = true;
        self.failure = Some(error);
    }

    /// The stream is complete: its connection goes back to the pool once the upstream body
    /// has ended (at once when it has already; a connection whose body went on after `[DONE]`
    /// has had its lease dropped before).
    fn finish(&mut self) {
        self.finished = true;
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.settle(Verdict::Answered);
        }
        match (self.lease.take(), self.upstream.take()) {
            (Some(lease), Some(upstream)) => lease.release_after(upstream),
            (Some(lease), None) => lease.release(),
            _ => {}
        }
    }

    fn next_wake(&self, holding: bool) -> Instant {
        let silence = if self.map.started() {
            self.last_upstream + self.deadlines.stream_idle
        } else {
            self.deadlines.first_byte
        };
        let due = silence.min(self.deadlines.end);
        match self.settings.keepalive {
            Some(every) if !holding => due.min(self.last_sent + every),
            _ => due,
        }
    }

    /// The upstream is quiet: sends a keep-alive comment (unless holding), fails a missed
    /// deadline, or waits.
    fn poll_deadlines(&mut self, cx: &mut Context<'_>, holding: bool) -> Poll<Option<Bytes>> {
        let wake = self.next_wake(holding);
        if self.timer.deadline() != wake {
            self.timer.as_mut().reset(wake);
        }
        if self.timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let now = Instant::now();
        let started = self.map.started();
        if now >= self.deadlines.end {
            self.fail(GatewayError::new(
                ErrorKind::UpstreamTimeout,
                "The upstream provider did not finish in time.",
            ));
        } else if !started && now >= self.deadlines.first_byte {
            self.fail(GatewayError::new(
                ErrorKind::UpstreamTimeout,
                "The upstream provider did not start answering in time.",
            ));
        } else if started && now >= self.last_upstream + self.deadlines.stream_idle {
            self.fail(GatewayError::new(
                ErrorKind::StreamTimeout,
                "The upstream stream went silent for too long.",
            ));
        } else if holding {
            return Poll::Ready(None);
        } else {
            self.last_sent = now;
            return Poll::Ready(Some(Bytes::from_static(sse::KEEPALIVE)));
        }
        Poll::Ready(None)
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("done", &self.done)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::provider::openai::Passthrough;

    /// Events over a real hyper HTTP/1.1 response whose raw bytes (head and chunked body) the
    /// upstream writes in one go; the upstream keeps its end open unless `close`.
    async fn events_of(raw: Vec<u8>, close: bool, max_event_bytes: usize) -> Events {
        let response = crate::testing::raw_response(raw, close).await;
        let now = Instant::now();
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
        Events::new(
            response.into_body(),
            None,
            StreamMap::OpenAi(Passthrough::new(true, None, 1)),
            settings,
            deadlines,
            now,
            None,
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

    fn finish() -> String {
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_owned()
    }

    /// Relays to the end: each frame produced, and the failure if the stream failed.
    async fn frames(mut events: Events) -> (Vec<Bytes>, Option<GatewayError>, Events) {
        let mut out = Vec::new();
        loop {
            match poll_fn(|cx| events.poll_relay(cx)).await {
                Next::Data(data) => out.push(data),
                Next::End => return (out, None, events),
                Next::Failed(error) => {
                    out.push(events.take_out());
                    return (out, Some(error), events);
                }
            }
        }
    }

    #[tokio::test]
    async fn a_burst_of_ready_frames_goes_out_as_one_frame_that_ends_the_stream() {
        let mut events = burst(23);
        events.push("data: [DONE]\n\n".to_owned());
        let mut raw = chunked(&events);
        raw.extend_from_slice(b"0\r\n\r\n");
        let (frames, failure, _) = frames(events_of(raw, true, 1 << 20).await).await;
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0], events.concat());
        assert!(failure.is_none());
    }

    #[tokio::test]
    async fn a_burst_larger_than_a_turn_goes_out_a_turn_at_a_time_and_whole() {
        let mut events = burst(8000);
        events.push("data: [DONE]\n\n".to_owned());
        let sent = events.concat();
        assert!(sent.len() > 4 * BYTES_PER_TURN);
        let mut raw = chunked(&events);
        raw.extend_from_slice(b"0\r\n\r\n");
        let mut relay = events_of(raw, true, 1 << 20).await;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut relayed, mut frames, mut turns_given_up) = (Vec::new(), 0, 0);
        loop {
            let turn_is_over = relay.this_turn >= BYTES_PER_TURN;
            match relay.poll_relay(&mut cx) {
                Poll::Ready(Next::Data(data)) => {
                    assert!(!turn_is_over, "a frame past the turn's allowance");
                    // A turn's worth and at most one upstream frame more (events here are
                    // about 50 bytes, each its own chunk).
                    assert!(data.len() < BYTES_PER_TURN + 1024, "{} bytes", data.len());
                    relayed.extend_from_slice(&data);
                    frames += 1;
                }
                Poll::Ready(Next::End) => break,
                Poll::Ready(Next::Failed(error)) => panic!("{error:?}"),
                Poll::Pending if turn_is_over => turns_given_up += 1,
                // The upstream's bytes are still on their way from the test's server.
                Poll::Pending => tokio::task::yield_now().await,
            }
        }
        assert_eq!(relayed, sent.as_bytes());
        assert!(frames >= 4, "{frames} frames");
        assert!(turns_given_up >= 4, "{turns_given_up} turns given up");
    }

    #[tokio::test]
    async fn done_ends_the_client_stream_at_once_and_nothing_after_it_is_relayed() {
        let mut events = burst(2);
        events.push("data: [DONE]\n\n".to_owned());
        events.push("data: {\"late\":true}\n\n".to_owned());
        // No final chunk, and the upstream keeps its connection open.
        let (frames, failure, _) = frames(events_of(chunked(&events), false, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(!text.contains("late"), "{text}");
        assert!(failure.is_none());
    }

    #[tokio::test]
    async fn cr_and_crlf_streams_are_split_and_classified() {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\r".to_owned(),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3,\"total_tokens\":5}}\r\n\r\n".to_owned(),
            "data: [DONE]\r\n\r\n".to_owned(),
        ];
        let (frames, failure, events_after) =
            frames(events_of(chunked(&events), false, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert_eq!(
            text,
            format!("{}{}", events[0], events[2]),
            "the usage-only chunk is not asked for"
        );
        assert_eq!(events_after.usage().map(|u| u.completion_tokens), Some(3));
        assert!(failure.is_none());
    }

    #[tokio::test]
    async fn an_event_past_the_bound_fails_the_stream_after_what_came_before() {
        let events = [
            burst(1).concat(),
            format!("data: {}", "x".repeat(3000)),
            "y".repeat(3000),
        ];
        let (frames, failure, _) = frames(events_of(chunked(&events), false, 4096).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(text.starts_with(&events[0]), "{text}");
        assert!(!text.contains("xxx"), "the partial event is not relayed");
        assert_eq!(
            failure.map(|e| e.kind),
            Some(ErrorKind::StreamEventTooLarge)
        );
    }

    #[tokio::test]
    async fn a_stream_whose_choices_all_finished_is_complete_without_done() {
        let mut events = burst(2);
        events.push(finish());
        let mut raw = chunked(&events);
        raw.extend_from_slice(b"0\r\n\r\n");
        let (frames, failure, _) = frames(events_of(raw, true, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(failure.is_none(), "{failure:?}");
        assert_eq!(text, format!("{}data: [DONE]\n\n", events.concat()));
    }

    #[tokio::test]
    async fn a_stream_that_ends_unfinished_is_cut() {
        let mut raw = chunked(&burst(2));
        raw.extend_from_slice(b"0\r\n\r\n");
        let (frames, failure, _) = frames(events_of(raw, true, 1 << 20).await).await;
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(!text.contains("[DONE]"), "{text}");
        assert_eq!(failure.map(|e| e.kind), Some(ErrorKind::StreamCut));
    }

    #[tokio::test]
    async fn the_hold_reads_past_the_preamble_to_the_first_token_and_keeps_it() {
        let mut events = vec![
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n".to_owned(),
        ];
        events.extend(burst(1));
        events.push("data: [DONE]\n\n".to_owned());
        let mut held = events_of(chunked(&events), false, 1 << 20).await;
        held.hold(&MemoryBudget::new(1 << 20, 1 << 20))
            .await
            .unwrap();
        assert!(held.map().started() && held.ttft().is_some());
        let (frames, failure, _) = frames(held).await;
        assert!(failure.is_none());
        assert_eq!(String::from_utf8(frames.concat()).unwrap(), events.concat());

        let mut raw = chunked(&events[..1]);
        raw.extend_from_slice(b"0\r\n\r\n");
        let mut cut = events_of(raw, true, 1 << 20).await;
        assert_eq!(
            cut.hold(&MemoryBudget::new(1 << 20, 1 << 20))
                .await
                .map_err(|e| e.kind),
            Err(ErrorKind::StreamCut)
        );
        let mut malformed = events_of(
            chunked(&["data: {\"choices\":[{\"del\n\n".to_owned()]),
            false,
            1 << 20,
        )
        .await;
        assert_eq!(
            malformed
                .hold(&MemoryBudget::new(1 << 20, 1 << 20))
                .await
                .map_err(|e| e.kind),
            Err(ErrorKind::UpstreamMalformed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_stream_without_a_first_token_misses_its_deadline() {
        let role =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n".to_owned();
        let mut events = events_of(chunked(&[role]), false, 1 << 20).await;
        let error = events
            .hold(&MemoryBudget::new(1 << 20, 1 << 20))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::UpstreamTimeout);
    }

    #[tokio::test]
    async fn a_hold_past_its_cap_or_the_budget_commits_the_stream_unstarted() {
        // A preamble of comments and role chunks, no token yet, and the upstream still open.
        let role =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n".to_owned();
        let preamble: Vec<String> = (0..40).map(|_| role.clone()).collect();
        let mut events = events_of(chunked(&preamble), false, 1024).await;
        events
            .hold(&MemoryBudget::new(1 << 20, 1 << 20))
            .await
            .unwrap();
        assert!(!events.map().started(), "committed before its first token");
        assert!(events.out.len() > 1024);

        let mut events = events_of(chunked(&preamble), false, 1 << 20).await;
        // A budget of one KiB covers less than the preamble.
        events.hold(&MemoryBudget::new(1024, 1024)).await.unwrap();
        assert!(!events.map().started());
    }
}
