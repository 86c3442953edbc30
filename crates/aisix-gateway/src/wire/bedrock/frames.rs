//! AWS's event-stream framing (`application/vnd.amazon.eventstream`), as ConverseStream sends
//! it: each message is a prelude (total length, headers length, the prelude's CRC32), headers,
//! a payload and the message's CRC32. [`FrameSplitter`] finds where each message ends in a
//! stream fed piece by piece, looking at each byte at most once; [`decode`] reads one whole
//! message with `aws-smithy-eventstream`, which checks both CRCs.

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::HeaderValue;
use bytes::Bytes;

/// The prelude: total length, headers length, and their CRC32, four bytes each.
const PRELUDE: usize = 12;
/// The smallest message: a prelude and the message CRC.
const MIN_MESSAGE: usize = 16;

/// Finds the ends of messages in a stream fed piece by piece.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameSplitter {
    /// Bytes of the current message scanned so far.
    seen: usize,
    prelude: [u8; PRELUDE],
    /// The current message's total length, once its prelude is in and sound.
    total: Option<usize>,
}

impl FrameSplitter {
    /// Scans `bytes`, the stream's next unscanned bytes, up to the end of the first message
    /// that ends in them: returns the offset just past it, or `None` when none ends in `bytes`
    /// (all of which are then scanned). A prelude whose CRC does not match, or whose length is
    /// impossible, ends its "message" right after the prelude, so that [`decode`] refuses it at
    /// once rather than the stream waiting on a length it cannot trust.
    pub fn next_end(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0usize;
        let total = match self.total {
            Some(total) => total,
            None => {
                while self.seen < PRELUDE {
                    let byte = *bytes.get(at)?;
                    if let Some(slot) = self.prelude.get_mut(self.seen) {
                        *slot = byte;
                    }
                    self.seen = self.seen.saturating_add(1);
                    at = at.saturating_add(1);
                }
                let word = |i: usize| {
                    self.prelude
                        .get(i..i.saturating_add(4))
                        .and_then(|w| <[u8; 4]>::try_from(w).ok())
                        .map_or(0, u32::from_be_bytes)
                };
                let total = usize::try_from(word(0)).unwrap_or(usize::MAX);
                let sound = self
                    .prelude
                    .get(..8)
                    .is_some_and(|p| crc32fast::hash(p) == word(8))
                    && total >= MIN_MESSAGE;
                if !sound {
                    *self = Self::default();
                    return Some(at);
                }
                self.total = Some(total);
                total
            }
        };
        let rest = total.saturating_sub(self.seen);
        let available = bytes.len().saturating_sub(at);
        if available >= rest {
            *self = Self::default();
            return Some(at.saturating_add(rest));
        }
        self.seen = self.seen.saturating_add(available);
        None
    }
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `:message-type: event`: its `:event-type` and JSON payload.
    Event { kind: String, payload: Bytes },
    /// `:message-type: exception`: its `:exception-type` and JSON payload (`{"message"}`).
    Exception { kind: String, payload: Bytes },
    /// `:message-type: error`: its `:error-code` and `:error-message`.
    Error { code: String, message: String },
}

/// Decodes one whole message (as [`FrameSplitter`] cut it); `Err` says why it cannot be read
/// (a CRC mismatch, a short or malformed message, a type it does not know).
pub fn decode(message: &[u8]) -> Result<Frame, String> {
    let message = read_message_from(message).map_err(|e| e.to_string())?;
    let header = |name: &str| {
        message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| match h.value() {
                HeaderValue::String(s) => Some(s.as_str().to_owned()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let payload = message.payload().clone();
    match header(":message-type").as_str() {
        "event" => Ok(Frame::Event {
            kind: header(":event-type"),
            payload,
        }),
        "exception" => Ok(Frame::Exception {
            kind: header(":exception-type"),
            payload,
        }),
        "error" => Ok(Frame::Error {
            code: header(":error-code"),
            message: header(":error-message"),
        }),
        other => Err(format!("unknown :message-type `{other}`")),
    }
}

/// Test and fuzz support: `payload` framed as a message with these string headers.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, Message};
    let mut message = Message::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        message = message.add_header(Header::new(
            (*name).to_owned(),
            HeaderValue::String((*value).to_owned().into()),
        ));
    }
    let mut out = Vec::new();
    // Only a header or payload over the format's limits fails, which these never are.
    let _ = write_message_to(&message, &mut out);
    out
}

/// Test and fuzz support: an event message of `kind` carrying `payload`.
pub fn event(kind: &str, payload: &str) -> Vec<u8> {
    encode(
        &[
            (":message-type", "event"),
            (":event-type", kind),
            (":content-type", "application/json"),
        ],
        payload.as_bytes(),
    )
}

/// Test and fuzz support: a stream described as JSON lines, one message each
/// (`{"event": kind, "payload": {...}}` or `{"exception": kind, "payload": {...}}`; with
/// `"corrupt": true` a payload byte is flipped so the message CRC fails), as its bytes. A line
/// that is not such an object is left out.
pub fn from_json_lines(input: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in input.split(|b| *b == b'\n') {
        let Ok(line) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let payload = line
            .get("payload")
            .map(ToString::to_string)
            .unwrap_or_default();
        let text = |key: &str| line.get(key).and_then(serde_json::Value::as_str);
        let mut message = match (text("event"), text("exception")) {
            (Some(kind), _) => event(kind, &payload),
            (None, Some(kind)) => encode(
                &[
                    (":message-type", "exception"),
                    (":exception-type", kind),
                    (":content-type", "application/json"),
                ],
                payload.as_bytes(),
            ),
            (None, None) => continue,
        };
        if line.get("corrupt") == Some(&serde_json::Value::Bool(true)) {
            let at = message.len().saturating_sub(6);
            if let Some(byte) = message.get_mut(at) {
                *byte ^= 1;
            }
        }
        bytes.extend(message);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_found_whole_and_decoded() {
        let bytes = event("messageStart", r#"{"role":"assistant"}"#);
        let mut splitter = FrameSplitter::default();
        assert_eq!(splitter.next_end(&bytes), Some(bytes.len()));
        assert_eq!(
            decode(&bytes).unwrap(),
            Frame::Event {
                kind: "messageStart".to_owned(),
                payload: Bytes::from_static(br#"{"role":"assistant"}"#),
            }
        );
    }

    #[test]
    fn a_flipped_payload_byte_fails_the_message_crc() {
        let mut bytes = event("messageStart", r#"{"role":"assistant"}"#);
        let at = bytes.len() - 6;
        bytes[at] ^= 1;
        assert!(decode(&bytes).unwrap_err().contains("checksum"));
    }

    #[test]
    fn a_bad_prelude_ends_the_message_after_the_prelude() {
        let mut bytes = event("messageStart", "{}");
        bytes[2] ^= 0x40;
        let mut splitter = FrameSplitter::default();
        assert_eq!(splitter.next_end(&bytes), Some(PRELUDE));
        assert!(decode(&bytes[..PRELUDE]).is_err());
    }
}
