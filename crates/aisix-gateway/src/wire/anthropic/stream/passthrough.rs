//! The usage scan of an Anthropic stream relayed to an Anthropic client unchanged: the events
//! go through byte for byte; only the `usage` object of `message_start` and `message_delta` is
//! parsed ([`crate::wire::usage::last_usage_object`]), and `message_stop` and
//! `error` are told apart by their `event:` name. No typed tree is built per event.

use bytes::{BufMut, BytesMut};
use memchr::memmem;
use serde::de::DeserializeOwned;

use crate::wire::{sse, usage};

use super::super::types::TokenUsage;
use super::to_openai::DeltaUsage;
use super::{Phase, Step};

/// Scans a relayed Anthropic stream for usage and its end.
#[derive(Debug)]
pub struct UsageScan {
    phase: Phase,
    usage: Option<TokenUsage>,
    stopped: bool,
    content: bool,
}

impl Default for UsageScan {
    fn default() -> Self {
        UsageScan::new()
    }
}

impl UsageScan {
    pub fn new() -> UsageScan {
        UsageScan {
            phase: Phase::Start,
            usage: None,
            stopped: false,
            content: false,
        }
    }

    /// Reads one complete event; the caller relays it as it is.
    pub fn event(&mut self, event: &[u8]) -> Step {
        if let Phase::Over(step) = self.phase {
            return step;
        }
        let Some(name) = event_name(event) else {
            return Step::Continue;
        };
        match name {
            b"message_start" => {
                self.phase = Phase::Body;
                if let Some(usage) = usage_object::<TokenUsage>(event) {
                    self.usage = Some(usage);
                }
            }
            b"message_delta" => {
                if let Some(delta) = usage_object::<DeltaUsage>(event) {
                    let mut total = self.usage.unwrap_or_default();
                    delta.apply(&mut total);
                    self.usage = Some(total);
                }
                self.stopped |= memmem::find(event, b"\"stop_reason\"").is_some();
            }
            b"content_block_start" | b"content_block_delta" => self.content = true,
            b"message_stop" => {
                self.phase = Phase::Over(Step::Complete);
                return Step::Complete;
            }
            b"error" => {
                self.phase = Phase::Over(Step::UpstreamError);
                return Step::UpstreamError;
            }
            _ => {}
        }
        Step::Continue
    }

    /// The upstream body ended. A stream that reached `message_delta` (its stop reason) but
    /// not `message_stop` is completed with a `message_stop` written to `out`.
    pub fn end(&mut self, out: &mut BytesMut) -> bool {
        if let Some(complete) = self.phase.ended() {
            return complete;
        }
        if self.stopped {
            out.put_slice(MESSAGE_STOP);
            self.phase = Phase::Over(Step::Complete);
        }
        self.stopped
    }

    pub fn usage(&self) -> Option<TokenUsage> {
        self.usage
    }

    /// Whether a content block has begun (see [`super::Translator::content_seen`]).
    pub fn content_seen(&self) -> bool {
        self.content
    }
}

const MESSAGE_STOP: &[u8] = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The value of the event's `event:` line, without building its fields.
fn event_name(event: &[u8]) -> Option<&[u8]> {
    let line = event
        .split(|&b| b == b'\n')
        .find(|line| line.starts_with(b"event:"))?;
    let name = line.strip_prefix(b"event:")?;
    let name = name.strip_suffix(b"\r").unwrap_or(name);
    Some(name.strip_prefix(b" ").unwrap_or(name))
}

/// The event's `usage` object: only that object of its data is parsed.
fn usage_object<T: DeserializeOwned>(event: &[u8]) -> Option<T> {
    usage::last_usage_object(&sse::fields(event).data?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n";
    const DELTA: &[u8] = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n";

    #[test]
    fn usage_comes_from_message_start_and_message_delta() {
        let mut scan = UsageScan::new();
        assert_eq!(scan.event(START), Step::Continue);
        let text = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"say \\\"usage\\\": {}\"}}\n\n";
        assert_eq!(scan.event(text), Step::Continue);
        assert_eq!(scan.event(DELTA), Step::Continue);
        assert_eq!(
            scan.event(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
            Step::Complete
        );
        let usage = scan.usage().unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.cache_read()),
            (10, 7, 5)
        );
    }

    #[test]
    fn a_stream_missing_message_stop_after_its_stop_reason_is_completed() {
        let mut scan = UsageScan::new();
        scan.event(START);
        scan.event(DELTA);
        let mut out = BytesMut::new();
        assert!(scan.end(&mut out));
        assert_eq!(&out[..], MESSAGE_STOP);
    }

    #[test]
    fn a_cut_stream_is_incomplete_and_gets_nothing_added() {
        let mut scan = UsageScan::new();
        scan.event(START);
        let mut out = BytesMut::new();
        assert!(!scan.end(&mut out));
        assert!(out.is_empty(), "the relay adds the error event");
    }
}
