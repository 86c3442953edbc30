//! Streams between the dialects, one complete upstream SSE event at a time: Anthropic events as
//! OpenAI `chat.completion.chunk`s ([`ToOpenAi`]), OpenAI chunks as Anthropic's exact event
//! order ([`ToAnthropic`]), the usage scan of a stream relayed unchanged ([`UsageScan`]), and
//! the splice of a continuation into an Anthropic client's open stream ([`Splice`]).
//! Each is a state machine that never panics and costs time linear in the bytes it is fed; the
//! caller splits the upstream bytes into events and owns timers and connections.

mod passthrough;
mod splice;
mod to_anthropic;
mod to_openai;

use bytes::{BufMut, BytesMut};
use serde::Serialize;

pub use passthrough::UsageScan;
pub use splice::{Blocks, Splice, delta_text};
pub use to_anthropic::ToAnthropic;
pub use to_openai::ToOpenAi;

use super::types::TokenUsage;

/// What one upstream event did to the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// More is to come.
    Continue,
    /// That was the stream's last event; the client's stream is complete.
    Complete,
    /// The upstream reported an error in the stream; nothing was written for it and the stream
    /// is over, incomplete. The caller renders the error event, once, from the upstream's words
    /// (`crate::wire::sse::reported`).
    UpstreamError,
    /// The event breaks the upstream dialect's rules; nothing was written for it. The caller
    /// ends the stream with its error event or, if nothing reached the client yet, may retry.
    Malformed,
}

/// A stream translator: fed every complete upstream event in order, it appends the client's
/// bytes to `out`. Once it has returned anything but [`Step::Continue`] it writes nothing more.
/// It never writes an error event: the relay renders every error in the client's envelope.
pub trait Translator {
    /// Translates one complete event (its bytes up to and including the blank line).
    fn event(&mut self, event: &[u8], out: &mut BytesMut) -> Step;

    /// The upstream body ended. Returns whether the client's stream is complete; a stream that
    /// reported its stop reason but lacked its final marker is completed here.
    fn end(&mut self, out: &mut BytesMut) -> bool;

    /// The usage reported so far, if the upstream reported any.
    fn usage(&self) -> Option<TokenUsage>;

    /// Whether content (text, or a tool call) has been translated. Until then the output is
    /// only the stream's opening, which another attempt would write again: a caller that
    /// holds the output back may still drop it and fall back.
    fn content_seen(&self) -> bool;
}

/// Where a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing translated yet.
    Start,
    Body,
    /// Over: the step that ended it (after a failure, [`Step::UpstreamError`]).
    Over(Step),
}

impl Phase {
    /// Records what `step` did to the stream: a malformed event ends it. Returns `step`.
    fn after(&mut self, step: Step) -> Step {
        if step == Step::Malformed {
            *self = Phase::Over(Step::Malformed);
        }
        step
    }

    /// How the stream ended, if it has.
    fn ended(self) -> Option<bool> {
        match self {
            Phase::Over(step) => Some(step == Step::Complete),
            _ => None,
        }
    }
}

/// `event: {name}\ndata: {json}\n\n`, Anthropic's framing.
fn write_event(out: &mut BytesMut, name: &str, value: &impl Serialize) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_slice(b"\ndata: ");
    write_json(out, value);
    out.put_slice(b"\n\n");
}

/// `data: {json}\n\n`, OpenAI's framing.
fn write_data(out: &mut BytesMut, value: &impl Serialize) {
    out.put_slice(b"data: ");
    write_json(out, value);
    out.put_slice(b"\n\n");
}

fn write_json(out: &mut BytesMut, value: &impl Serialize) {
    // The values written are the translators' own structs of strings and numbers, which
    // always serialize; an error could only leave the event's JSON short.
    let _ = serde_json::to_writer(out.writer(), value);
}
