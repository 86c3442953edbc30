//! Server-sent events, as OpenAI streams them: split a byte stream into complete events and
//! classify each (the `[DONE]` marker, a chunk carrying usage, the usage-only final chunk)
//! without building a JSON tree per chunk. Only a chunk whose `"usage"` is an object is parsed.
//! Also the fields of an event (name and data) for the translators, and the OpenAI in-band
//! error event.

use std::borrow::Cow;

use memchr::memmem;
use serde::Deserialize;

use bytes::Bytes;

use super::usage::Usage;

/// End of the first complete event in `buf` (the index just past its blank line).
pub fn event_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let nl = from + i;
        // "\n\n" or "\n\r\n" ends an event ("\r\n\r\n" is the latter plus a leading '\r').
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => from = nl + 1,
        }
    }
    None
}

/// What an event means to the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `data: [DONE]`.
    Done,
    /// A chunk carrying usage; `usage_only` when its `choices` is empty (the chunk OpenAI adds
    /// for `stream_options.include_usage`).
    Usage { usage: Usage, usage_only: bool },
    /// Anything else (content deltas, comments, errors), relayed untouched.
    Other,
}

#[derive(Deserialize)]
struct ChunkProbe {
    usage: Option<Usage>,
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
}

/// Classifies one complete event.
pub fn classify(event: &[u8]) -> Event {
    let Some(data) = data_payload(event) else {
        return Event::Other;
    };
    if data.trim_ascii() == b"[DONE]" {
        return Event::Done;
    }
    if !has_usage_object(data) {
        return Event::Other;
    }
    match serde_json::from_slice::<ChunkProbe>(data) {
        Ok(ChunkProbe {
            usage: Some(usage),
            choices,
        }) => Event::Usage {
            usage,
            usage_only: choices.is_none_or(|c| c.is_empty()),
        },
        _ => Event::Other,
    }
}

/// The payload of the event's `data:` line. OpenAI sends one data line per event; an event
/// with several is not a chunk the gateway needs to read.
fn data_payload(event: &[u8]) -> Option<&[u8]> {
    let mut payload = None;
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            if payload.is_some() {
                return None;
            }
            payload = Some(rest.strip_prefix(b" ").unwrap_or(rest));
        }
    }
    payload
}

/// Whether `"usage"` appears followed by `:` and an object (not `null`).
fn has_usage_object(data: &[u8]) -> bool {
    memmem::find_iter(data, b"\"usage\"").any(|at| {
        let rest = data[at + 7..].trim_ascii_start();
        rest.strip_prefix(b":")
            .is_some_and(|v| v.trim_ascii_start().first() == Some(&b'{'))
    })
}

/// An SSE comment that keeps proxies from closing a quiet stream.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The fields of one event: its name (the last `event:` line) and its data (every `data:`
/// line, joined by newlines, as the SSE specification says). Comments and other fields are
/// skipped. Linear in the event's length; copies only an event with several data lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields<'a> {
    pub name: Option<&'a [u8]>,
    pub data: Option<Cow<'a, [u8]>>,
}

/// Reads the fields of one complete event.
pub fn fields(event: &[u8]) -> Fields<'_> {
    let mut fields = Fields::default();
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => fields.name = Some(value),
            b"data" => {
                fields.data = Some(match fields.data.take() {
                    None => Cow::Borrowed(value),
                    Some(joined) => {
                        let mut joined = joined.into_owned();
                        joined.push(b'\n');
                        joined.extend_from_slice(value);
                        Cow::Owned(joined)
                    }
                });
            }
            _ => {}
        }
    }
    fields
}

/// The in-band error that ends an OpenAI-style stream which cannot complete (no `[DONE]`
/// follows it).
pub fn error_event(code: &str, message: &str) -> Bytes {
    let event = serde_json::json!({
        "error": {"message": message, "type": "upstream_error", "param": null, "code": code}
    });
    Bytes::from(format!("event: error\ndata: {event}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line_in_either_newline_style() {
        assert_eq!(event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(event_end(b"data: a\r\n\r\nrest"), Some(11));
        assert_eq!(event_end(b"data: a\n"), None);
        assert_eq!(event_end(b"data: a\ndata: b\n"), None);
        assert_eq!(event_end(b""), None);
    }

    #[test]
    fn done_marker_is_recognised() {
        assert_eq!(classify(b"data: [DONE]\n\n"), Event::Done);
        assert_eq!(classify(b"data:[DONE]\r\n\r\n"), Event::Done);
    }

    #[test]
    fn content_chunks_with_null_usage_are_not_parsed_as_usage() {
        let chunk = br#"data: {"choices":[{"delta":{"content":"usage"}}],"usage":null}

"#;
        assert_eq!(classify(chunk), Event::Other);
    }

    #[test]
    fn usage_only_chunk_is_recognised() {
        let chunk = br#"data: {"id":"c","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}

"#;
        assert_eq!(
            classify(chunk),
            Event::Usage {
                usage: Usage {
                    prompt_tokens: 2,
                    completion_tokens: 3,
                    total_tokens: 5
                },
                usage_only: true
            }
        );
    }

    #[test]
    fn usage_on_a_content_chunk_is_kept_as_content() {
        let chunk = br#"data: {"choices":[{"delta":{}}],"usage" : {"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}

"#;
        assert!(matches!(
            classify(chunk),
            Event::Usage {
                usage_only: false,
                ..
            }
        ));
    }

    #[test]
    fn fields_are_read_in_either_newline_style_with_data_lines_joined() {
        let plain = fields(b"event: message_start\ndata: {\"a\":1}\n\n");
        assert_eq!(plain.name, Some(&b"message_start"[..]));
        assert_eq!(plain.data.as_deref(), Some(&b"{\"a\":1}"[..]));
        let crlf = fields(b": c\r\nevent:ping\r\ndata: a\r\ndata:b\r\nid: 3\r\n\r\n");
        assert_eq!(crlf.name, Some(&b"ping"[..]));
        assert_eq!(crlf.data.as_deref(), Some(&b"a\nb"[..]));
        assert_eq!(fields(b": only a comment\n\n"), Fields::default());
    }

    #[test]
    fn comments_and_other_events_pass() {
        assert_eq!(classify(b": ping\n\n"), Event::Other);
        assert_eq!(
            classify(b"event: error\ndata: {\"error\":{}}\n\n"),
            Event::Other
        );
    }
}
