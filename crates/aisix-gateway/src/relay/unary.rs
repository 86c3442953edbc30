//! The relay of a whole (non-streaming) upstream answer: the response body that passes the
//! upstream's body on piece by piece as it arrives, at the client's pace (hyper polls it only
//! when the client's connection takes more), holding nothing but a rename's few bytes and the
//! bounded windows usage is read from. It owns the request's [`Record`] and accounts for the
//! request when the body ends, whichever way it does.
//!
//! The decision to retry or fall back was taken on the upstream's status and head; once the
//! head is relayed the answer is the client's. A body that breaks or misses the request's
//! deadline is cut: the client's response is aborted (an HTTP/1.1 connection closed before its
//! last chunk or its `Content-Length`, an HTTP/2 stream reset), the record says so, and the
//! upstream connection is closed, not pooled.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;

use crate::account::Record;
use crate::error::{ErrorKind, GatewayError};
use crate::provider::Unary;
use crate::target::state::{Ticket, Verdict};
use crate::upstream::pool::{BYTES_PER_TURN, Lease};
use crate::wire::rename::{Renamer, join};
use crate::wire::usage::UsageWindow;

/// The client's response was cut off: the upstream's body broke or came too late. Returned
/// by the body so that hyper aborts the response rather than end it as if complete.
#[derive(Debug, thiserror::Error)]
#[error("the upstream answer was cut off")]
pub struct Cut;

/// A poll of a body that may be [`Cut`]: its next frame, its end, or the cut.
pub(crate) type Polled = Poll<Option<Result<Frame<Bytes>, Cut>>>;

pub struct UnaryRelay {
    upstream: Option<Incoming>,
    /// Bytes passed on since the relay last gave its turn up.
    this_turn: usize,
    lease: Option<Lease>,
    rename: Option<Renamer>,
    usage: UsageWindow,
    /// `None` once the request has been accounted for.
    record: Option<Box<Record>>,
    timer: Pin<Box<Sleep>>,
    ticket: Option<Ticket>,
    pin: Option<crate::stored::Pin>,
}

impl UnaryRelay {
    /// Relays `answer` for the request of `record`.
    pub(crate) fn new(answer: Unary, mut record: Box<Record>) -> Self {
        // Until the body ends, the request counts as abandoned if the body is dropped.
        record.streaming();
        Self {
            upstream: Some(answer.body),
            this_turn: 0,
            lease: answer.lease,
            rename: answer.rename.map(Renamer::new),
            usage: UsageWindow::new(answer.usage),
            record: Some(record),
            timer: Box::pin(tokio::time::sleep_until(answer.end)),
            ticket: answer.ticket,
            pin: answer.pin,
        }
    }

    /// The body arrived in full: the connection goes back to the pool and the request is
    /// accounted as a success, with the usage the answer reports.
    fn finish(&mut self) -> Option<Bytes> {
        self.upstream = None;
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.settle(Verdict::Answered);
        }
        if let Some(mut record) = self.record.take() {
            record.answered_in(self.usage.head());
            record.completed(self.usage.usage());
        }
        if let Some(pin) = self.pin.take() {
            pin.answered(self.usage.head());
        }
        // Read: let go of the answer's bytes now (the head may hold the upstream's buffer).
        self.usage = UsageWindow::default();
        self.rename
            .as_mut()
            .map(Renamer::finish)
            .filter(|rest| !rest.is_empty())
    }

    /// The body is cut with `error`: its connection is closed and the request accounted as
    /// failed.
    fn cut(&mut self, error: &GatewayError) {
        self.upstream = None;
        self.lease = None;
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.settle_error(error);
        }
        if let Some(mut record) = self.record.take() {
            tracing::warn!(request_id = ?record.request_id(), code = error.code(), "answer to client cut off");
            record.answered_in(self.usage.head());
            record.cut(self.usage.usage(), error);
        }
    }
}

/// Whether the upstream body has nothing more to give: ended, or its whole `Content-Length`
/// is in. An HTTP/2 server may send `END_STREAM` in an empty frame after the last data, so
/// the length is the signal that arrives with the last bytes (hyper may never poll again).
fn upstream_ended(upstream: Option<&Incoming>) -> bool {
    upstream.is_some_and(|body| body.is_end_stream() || body.size_hint().exact() == Some(0))
}

impl UnaryRelay {
    fn timed_out(&mut self) -> Polled {
        self.cut(&GatewayError::new(
            ErrorKind::UpstreamTimeout,
            "The upstream provider did not finish in time.",
        ));
        Poll::Ready(Some(Err(Cut)))
    }
}

impl Body for UnaryRelay {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        if this.upstream.is_some() && this.timer.as_mut().poll(cx).is_ready() {
            return this.timed_out();
        }
        if this.this_turn >= BYTES_PER_TURN {
            // Give the turn up: woken at once, polled again after the tasks already waiting.
            this.this_turn = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            let Some(upstream) = this.upstream.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    this.usage.push_shared(&data);
                    this.this_turn += data.len();
                    let mut data = match this.rename.as_mut() {
                        Some(renamer) => renamer.push(data),
                        None => data,
                    };
                    // The last bytes of a body with a length: hyper stops polling a response
                    // body once its length is out, so the answer is accounted for now.
                    if upstream_ended(this.upstream.as_ref())
                        && let Some(rest) = this.finish()
                    {
                        data = join(data, rest);
                    }
                    if !data.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Poll::Ready(None) => {
                    return Poll::Ready(this.finish().map(|rest| Ok(Frame::data(rest))));
                }
                Poll::Ready(Some(Err(error))) => {
                    tracing::debug!(%error, "upstream answer broke");
                    this.cut(&GatewayError::new(
                        ErrorKind::StreamCut,
                        "The upstream provider's answer broke off before it was complete.",
                    ));
                    return Poll::Ready(Some(Err(Cut)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.upstream.is_none()
    }

    /// The upstream's exact length when the answer is relayed unchanged, so an HTTP/1.1
    /// client gets a `Content-Length` and can tell a cut answer from a whole one.
    fn size_hint(&self) -> SizeHint {
        match (&self.upstream, &self.rename) {
            (Some(upstream), None) => upstream.size_hint(),
            (Some(_), Some(_)) => SizeHint::default(),
            (None, _) => SizeHint::with_exact(0),
        }
    }
}

impl std::fmt::Debug for UnaryRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnaryRelay")
            .field("relaying", &self.upstream.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::HeaderValue;
    use http_body_util::BodyExt;
    use tokio::time::Instant;

    use super::*;
    use crate::account::Sinks;
    use crate::endpoint::Endpoint;
    use crate::testing::raw_response;
    use crate::wire::Dialect;

    async fn relay_of(raw: &[u8], close: bool, rename: Option<&'static [u8]>) -> UnaryRelay {
        let response = raw_response(raw.to_vec(), close).await;
        let record = Record::new(
            HeaderValue::from_static("req"),
            Endpoint::ChatCompletions,
            http::Method::POST,
            http::Uri::from_static("/v1/chat/completions"),
            Instant::now(),
            Sinks {
                metrics: false,
                access_log: false,
            },
        );
        let answer = Unary {
            status: response.status(),
            content_type: HeaderValue::from_static("application/json"),
            body: response.into_body(),
            lease: None,
            rename: rename.map(Bytes::from_static),
            usage: Some(Dialect::OpenAi),
            end: Instant::now() + Duration::from_secs(60),
            ticket: None,
            pin: None,
        };
        UnaryRelay::new(answer, record)
    }

    const ANSWER: &[u8] = br#"{"id":"x","model":"up","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;

    fn with_length(body: &[u8], declared: usize) -> Vec<u8> {
        let mut raw = format!("HTTP/1.1 200 OK\r\ncontent-length: {declared}\r\n\r\n").into_bytes();
        raw.extend_from_slice(body);
        raw
    }

    #[tokio::test]
    async fn a_whole_answer_is_relayed_unchanged_with_its_length() {
        let relay = relay_of(&with_length(ANSWER, ANSWER.len()), false, None).await;
        assert_eq!(relay.size_hint().exact(), Some(ANSWER.len() as u64));
        let body = relay.collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], ANSWER);
    }

    #[tokio::test]
    async fn a_group_s_answer_names_the_direct_model() {
        let relay = relay_of(
            &with_length(ANSWER, ANSWER.len()),
            false,
            Some(br#""primary""#),
        )
        .await;
        assert_eq!(relay.size_hint().exact(), None, "the length changes");
        let body = relay.collect().await.unwrap().to_bytes();
        assert_eq!(
            body,
            crate::wire::chunk::with_model(ANSWER, br#""primary""#).unwrap()
        );
    }

    #[tokio::test]
    async fn an_answer_shorter_than_its_length_is_cut_not_ended() {
        let relay = relay_of(&with_length(ANSWER, ANSWER.len() + 100), true, None).await;
        assert!(relay.collect().await.is_err());
    }

    #[tokio::test]
    async fn bad_chunking_cuts_the_answer() {
        let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
        let relay = relay_of(raw, false, None).await;
        assert!(relay.collect().await.is_err());
    }

    #[tokio::test]
    async fn a_large_answer_gives_its_turn_up_between_pieces_and_still_arrives_whole() {
        let body = vec![b'a'; 3 * BYTES_PER_TURN];
        let mut raw = format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(&body);
        raw.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut relay = relay_of(&raw, false, None).await;
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut relayed = 0;
        let mut turns_given_up = 0;
        loop {
            let turn_is_over = relay.this_turn >= BYTES_PER_TURN;
            match Pin::new(&mut relay).poll_frame(&mut cx) {
                Poll::Ready(Some(frame)) => {
                    assert!(!turn_is_over, "a frame past the turn's allowance");
                    relayed += frame.unwrap().into_data().unwrap().len();
                }
                Poll::Ready(None) => break,
                Poll::Pending if turn_is_over => turns_given_up += 1,
                // The upstream's bytes are still on their way from the test's server.
                Poll::Pending => tokio::task::yield_now().await,
            }
        }
        assert_eq!(relayed, body.len());
        assert!(
            turns_given_up >= 2,
            "{turns_given_up} turns given up over {relayed} bytes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_past_the_request_deadline_is_cut() {
        let mut relay = relay_of(&with_length(b"{", 10), false, None).await;
        let first = relay.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "{");
        assert!(relay.frame().await.unwrap().is_err());
    }
}
