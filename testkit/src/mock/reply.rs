//! Scripted replies: what the mock answers to one request (status, headers, body or SSE frames,
//! delays, and how the body ends). Pure data with builders; the server module plays them.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::{Value, json};

use super::dialect::Dialect;
use super::{anthropic, openai};

/// What the mock sends for one request.
///
/// Built in one line: a constructor picks the content, modifiers adjust timing and ending.
///
/// ```
/// use std::time::Duration;
/// use aisix_testkit::mock::{Frame, Reply};
///
/// let _ = Reply::status(500).json(serde_json::json!({"error": {"message": "boom"}}));
/// let _ = Reply::openai_error(429, "rate_limit_exceeded", "slow down").header("retry-after", "2");
/// let _ = Reply::openai().delay_head(Duration::from_millis(300));
/// let _ = Reply::sse([Frame::chat_delta("gpt-4o", "Hel")]).disconnect();
/// let _ = Reply::close();
/// ```
#[derive(Clone, Debug)]
pub struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) content: Content,
    pub(crate) head_delay: Duration,
    pub(crate) frame_delay: Duration,
    pub(crate) ending: Ending,
}

#[derive(Clone, Debug)]
pub(crate) enum Content {
    /// The dialect's default answer to whatever was requested.
    Dialect(Dialect),
    /// One body, sent as a single chunk.
    Fixed(Bytes),
    /// Server-sent events, one chunk per frame.
    Sse(Vec<Frame>),
    /// Close the connection without a response (on HTTP/2: reset the stream).
    NoResponse,
    /// Reset the TCP connection (RST, no FIN) without a response.
    Reset,
    /// Never answer: the request waits until the peer gives up.
    Silence,
}

/// How a response body ends once its last frame is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Normal end; SSE bodies get a final `data: [DONE]` frame first.
    Done,
    /// Normal end of the body without `data: [DONE]`.
    Eof,
    /// Close the connection mid-body: no terminating chunk (HTTP/2: reset the stream).
    Disconnect,
    /// Keep the body open forever, until the peer goes away.
    Hang,
}

impl Reply {
    /// The default, OpenAI-like answer for whatever was requested: useful with the modifiers
    /// (`Reply::openai().delay_head(..)`, `Reply::openai().frame_delay(..).hang()`).
    pub fn openai() -> Reply {
        Reply::dialect_default(Dialect::OpenAi)
    }

    /// The default, Anthropic-like answer for whatever was requested, for the modifiers
    /// (`Reply::anthropic().frame_delay(..).disconnect()`).
    pub fn anthropic() -> Reply {
        Reply::dialect_default(Dialect::Anthropic)
    }

    /// The dialect's default answer for whatever was requested: what an unscripted request
    /// gets.
    pub fn dialect_default(dialect: Dialect) -> Reply {
        Reply::new(StatusCode::OK, Content::Dialect(dialect))
    }

    /// A response with this status and an empty body; add one with [`Reply::json`] or
    /// [`Reply::body`].
    ///
    /// A code outside 100..=999 is a bug in the test and panics at the caller's line.
    #[track_caller]
    #[allow(
        clippy::expect_used,
        reason = "test setup, not a request path: a bad status is the test's bug, reported at its line"
    )]
    pub fn status(code: u16) -> Reply {
        let status = StatusCode::from_u16(code).expect("Reply::status: invalid HTTP status code");
        Reply::new(status, Content::Fixed(Bytes::new()))
    }

    /// `status` with an OpenAI error envelope:
    /// `{"error":{"message","type","param":null,"code":null}}`.
    #[track_caller]
    pub fn openai_error(code: u16, error_type: &str, message: &str) -> Reply {
        Reply::status(code).json(openai::error_body(error_type, None, message))
    }

    /// `status` with Anthropic's error envelope:
    /// `{"type":"error","error":{"type","message"}}`.
    #[track_caller]
    pub fn anthropic_error(code: u16, error_type: &str, message: &str) -> Reply {
        Reply::status(code).json(anthropic::error_body(error_type, message))
    }

    /// A `200 text/event-stream` response made of these frames; by default it ends with the
    /// mock's [dialect terminator](Dialect::terminator) (`data: [DONE]`, or Anthropic's
    /// `message_stop`).
    pub fn sse(frames: impl IntoIterator<Item = Frame>) -> Reply {
        Reply::new(StatusCode::OK, Content::Sse(frames.into_iter().collect()))
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
    }

    /// Close the connection without sending any response (on HTTP/2: reset the stream).
    pub fn close() -> Reply {
        Reply::new(StatusCode::OK, Content::NoResponse)
    }

    /// Reset the connection before any response: the socket is closed with `SO_LINGER` 0, so
    /// the peer reads a TCP RST, as from a crashed or overloaded server (HTTP/1.1 only; on
    /// HTTP/2 the stream is reset).
    pub fn reset() -> Reply {
        Reply::new(StatusCode::OK, Content::Reset)
    }

    /// Never answer: no head, no close, until the peer goes away (counted in
    /// [`MockProvider::requests_abandoned`](super::MockProvider::requests_abandoned)).
    pub fn silence() -> Reply {
        Reply::new(StatusCode::OK, Content::Silence)
    }

    /// A chat completion stream of these content pieces, as OpenAI sends it: a role chunk, one
    /// chunk per piece, a finish chunk (`stop`), the usage chunk (prompt tokens as given,
    /// completion tokens one per piece), then `data: [DONE]` unless the ending says otherwise.
    pub fn chat_stream(model: &str, pieces: &[&str], prompt_tokens: u64) -> Reply {
        let mut frames = vec![Frame::chat_role(model)];
        frames.extend(pieces.iter().map(|piece| Frame::chat_delta(model, piece)));
        frames.push(Frame::chat_finish(model, "stop"));
        frames.push(Frame::chat_usage(model, prompt_tokens, pieces.len() as u64));
        Reply::sse(frames)
    }

    /// Replace the body with this JSON value and set `content-type: application/json`.
    pub fn json(self, value: Value) -> Reply {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// Replace the body with these bytes (sent as one chunk).
    pub fn body(mut self, body: impl Into<Bytes>) -> Reply {
        self.content = Content::Fixed(body.into());
        self
    }

    /// Set a response header, replacing the mock's own value of that name if any. Calling it
    /// twice with one name sends both values.
    ///
    /// An invalid name or value is a bug in the test and panics at the caller's line.
    #[track_caller]
    #[allow(
        clippy::expect_used,
        reason = "test setup, not a request path: a bad header is the test's bug, reported at its line"
    )]
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        let name = HeaderName::try_from(name).expect("Reply::header: invalid header name");
        let value = HeaderValue::try_from(value).expect("Reply::header: invalid header value");
        self.headers.push((name, value));
        self
    }

    /// Wait this long before sending the response head (or before closing, for
    /// [`Reply::close`]). The request is recorded on arrival, before the wait.
    pub fn delay_head(mut self, delay: Duration) -> Reply {
        self.head_delay = delay;
        self
    }

    /// Wait this long before each body frame that has no delay of its own (for a non-SSE body:
    /// before the body, after the head).
    pub fn frame_delay(mut self, delay: Duration) -> Reply {
        self.frame_delay = delay;
        self
    }

    /// After the last frame, close the connection abruptly: no terminator frame, no
    /// terminating chunk, so the peer sees an incomplete body.
    pub fn disconnect(mut self) -> Reply {
        self.ending = Ending::Disconnect;
        self
    }

    /// After the last frame, keep the body open until the peer goes away.
    pub fn hang(mut self) -> Reply {
        self.ending = Ending::Hang;
        self
    }

    /// End the body normally but without the terminator frame (`data: [DONE]`, or Anthropic's
    /// `message_stop`).
    pub fn without_done(mut self) -> Reply {
        self.ending = Ending::Eof;
        self
    }

    fn new(status: StatusCode, content: Content) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            content,
            head_delay: Duration::ZERO,
            frame_delay: Duration::ZERO,
            ending: Ending::Done,
        }
    }
}

/// One chunk of a streamed body, usually one server-sent event, with an optional delay before
/// it is sent.
#[derive(Clone, Debug)]
pub struct Frame {
    pub(crate) delay: Option<Duration>,
    pub(crate) bytes: Bytes,
}

impl Frame {
    /// `data: {payload}\n\n`. The payload must be a single line; use [`Frame::raw`] otherwise.
    pub fn data(payload: &str) -> Frame {
        Frame::raw(format!("data: {payload}\n\n"))
    }

    /// `data: {compact JSON}\n\n`.
    pub fn json(value: Value) -> Frame {
        Frame::data(&value.to_string())
    }

    /// `event: {name}\ndata: {compact JSON}\n\n`, Anthropic's framing.
    pub fn event(name: &str, value: Value) -> Frame {
        Frame::raw(format!("event: {name}\ndata: {value}\n\n"))
    }

    /// Exactly these bytes: comments, `event:` lines, split or malformed events.
    pub fn raw(bytes: impl Into<Bytes>) -> Frame {
        Frame {
            delay: None,
            bytes: bytes.into(),
        }
    }

    /// `data: [DONE]\n\n`.
    pub fn done() -> Frame {
        Frame::data("[DONE]")
    }

    /// A `chat.completion.chunk` whose only choice carries this content delta.
    pub fn chat_delta(model: &str, content: &str) -> Frame {
        Frame::chat_chunk(model, json!({"content": content}), Value::Null)
    }

    /// The first chunk of a chat stream: the assistant's role and empty content.
    pub fn chat_role(model: &str) -> Frame {
        Frame::chat_chunk(
            model,
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )
    }

    /// A chat chunk that finishes its only choice with `reason` (`stop`, `length`, ...).
    pub fn chat_finish(model: &str, reason: &str) -> Frame {
        Frame::chat_chunk(model, json!({}), json!(reason))
    }

    /// The usage-only last chunk of a chat stream.
    pub fn chat_usage(model: &str, prompt_tokens: u64, completion_tokens: u64) -> Frame {
        Frame::json(json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": openai::CREATED,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }))
    }

    /// An event whose data is a JSON object cut off in the middle.
    pub fn malformed() -> Frame {
        Frame::raw("data: {\"id\":\"chatcmpl-mock\",\"choices\":[{\"delta\":{\"cont\n\n")
    }

    fn chat_chunk(model: &str, delta: Value, finish_reason: Value) -> Frame {
        Frame::json(json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": openai::CREATED,
            "model": model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        }))
    }

    /// The bytes this frame sends.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Wait this long before sending this frame.
    pub fn after(mut self, delay: Duration) -> Frame {
        self.delay = Some(delay);
        self
    }
}
