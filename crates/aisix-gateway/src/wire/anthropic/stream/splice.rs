//! Anthropic events spliced into a client stream already open (a continuation after a cut):
//! [`Blocks`] follows where the client's stream stands, [`Splice`] rewrites the continuation's
//! events to go on from there. Its `message_start` and `ping` are dropped (the client has had
//! them), its first text block goes on in the client's open text block, its other blocks are
//! renumbered after the client's, and its `message_delta` carries the summed usage.

use std::borrow::Cow;

use bytes::BytesMut;
use serde::Deserialize;
use serde_json::Value;

use crate::wire::sse;
use crate::wire::usage::Usage;

use super::to_openai::BlockDelta;
use super::write_event;

/// Where an Anthropic client's stream stands: the content blocks it has been sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Blocks {
    /// The index the next block takes.
    pub next: u64,
    /// The block started and not stopped, and whether it is a text block.
    pub open: Option<(u64, bool)>,
}

impl Blocks {
    /// Follows one event sent to the client. Only block starts and stops are parsed.
    pub fn observe(&mut self, event: &[u8]) {
        let fields = sse::fields(event);
        let (Some(name), Some(data)) = (fields.name, fields.data) else {
            return;
        };
        match name {
            b"content_block_start" => {
                if let Ok(start) = serde_json::from_slice::<BlockEvent<'_>>(&data) {
                    let text = start.content_block.is_some_and(|b| b.kind == "text");
                    self.open = Some((start.index, text));
                    self.next = self.next.max(start.index.saturating_add(1));
                }
            }
            b"content_block_stop" => self.open = None,
            _ => {}
        }
    }
}

/// A continuation's events, rewritten to go on from the client's [`Blocks`].
#[derive(Debug)]
pub struct Splice {
    at: Blocks,
    /// The continuation's block indices and the client's they became.
    renumbered: Vec<(u64, u64)>,
    /// A block of the continuation has started.
    begun: bool,
}

impl Splice {
    pub fn new(at: Blocks) -> Splice {
        Splice {
            at,
            renumbered: Vec::new(),
            begun: false,
        }
    }

    /// Where the client's stream stands after what was written.
    pub fn blocks(&self) -> Blocks {
        self.at
    }

    /// Writes `event` of the continuation to `out` as the client is to get it; `usage` is the
    /// summed usage a `message_delta` reports.
    pub fn event(&mut self, event: &[u8], usage: Option<Usage>, out: &mut BytesMut) {
        let fields = sse::fields(event);
        let (Some(name), Some(data)) = (fields.name, fields.data) else {
            out.extend_from_slice(event);
            return;
        };
        let Ok(mut value) = serde_json::from_slice::<Value>(&data) else {
            out.extend_from_slice(event);
            return;
        };
        let index = value.get("index").and_then(Value::as_u64);
        match (name, index) {
            (b"message_start" | b"ping", _) => {}
            (b"content_block_start", Some(index)) => {
                let text = value
                    .pointer("/content_block/type")
                    .is_some_and(|t| t == "text");
                let first = !std::mem::replace(&mut self.begun, true);
                if let (true, true, Some((open, true))) = (first, text, self.at.open) {
                    // The client's text block is still open: the text goes on in it.
                    self.renumbered.push((index, open));
                    return;
                }
                self.close_open(out);
                let to = self.at.next;
                self.at.next = to.saturating_add(1);
                self.at.open = Some((to, text));
                self.renumbered.push((index, to));
                set(&mut value, "index", to.into());
                write_event(out, "content_block_start", &value);
            }
            (b"content_block_delta" | b"content_block_stop", Some(index)) => {
                let to = self
                    .renumbered
                    .iter()
                    .find(|(from, _)| *from == index)
                    .map_or(index, |(_, to)| *to);
                if name == b"content_block_stop" {
                    self.at.open = None;
                }
                set(&mut value, "index", to.into());
                write_event(out, &String::from_utf8_lossy(name), &value);
            }
            (b"message_delta", _) => {
                self.close_open(out);
                if let Some(usage) = usage {
                    let usage = serde_json::json!({
                        "input_tokens": usage.prompt_tokens,
                        "output_tokens": usage.completion_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                    });
                    set(&mut value, "usage", usage);
                }
                write_event(out, "message_delta", &value);
            }
            (b"message_stop", _) => {
                self.close_open(out);
                out.extend_from_slice(event);
            }
            _ => out.extend_from_slice(event),
        }
    }

    /// Stops the client's block left open by the cut, before a block of another kind starts or
    /// the message ends.
    fn close_open(&mut self, out: &mut BytesMut) {
        if let Some((index, _)) = self.at.open.take() {
            write_event(
                out,
                "content_block_stop",
                &serde_json::json!({"type": "content_block_stop", "index": index}),
            );
        }
    }
}

#[derive(Deserialize)]
struct BlockEvent<'a> {
    index: u64,
    #[serde(borrow, default)]
    content_block: Option<BlockType<'a>>,
}

#[derive(Deserialize)]
struct BlockType<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

/// Sets `key` on an event's JSON object (an event that is not an object is left as it is).
fn set(value: &mut Value, key: &str, to: Value) {
    if let Some(object) = value.as_object_mut() {
        object.insert(key.to_owned(), to);
    }
}

/// The text a `content_block_delta` adds (`text_delta`), for a continuation to go on from.
pub fn delta_text(event: &[u8]) -> Option<String> {
    let fields = sse::fields(event);
    if fields.name != Some(b"content_block_delta") {
        return None;
    }
    let data = fields.data?;
    let delta: BlockDelta<'_> = serde_json::from_slice(&data).ok()?;
    (delta.delta.kind == "text_delta").then(|| delta.delta.text.unwrap_or_default().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: Value) -> Vec<u8> {
        format!("event: {name}\ndata: {data}\n\n").into_bytes()
    }

    fn spliced(splice: &mut Splice, events: &[Vec<u8>], usage: Option<Usage>) -> Vec<Value> {
        let mut out = BytesMut::new();
        for e in events {
            splice.event(e, usage, &mut out);
        }
        let text = String::from_utf8(out.to_vec()).unwrap();
        text.split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    fn continuation() -> Vec<Vec<u8>> {
        vec![
            event(
                "message_start",
                serde_json::json!({"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}),
            ),
            event("ping", serde_json::json!({"type": "ping"})),
            event(
                "content_block_start",
                serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            event(
                "content_block_delta",
                serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ld"}}),
            ),
            event(
                "content_block_stop",
                serde_json::json!({"type": "content_block_stop", "index": 0}),
            ),
            event(
                "message_delta",
                serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            ),
            event("message_stop", serde_json::json!({"type": "message_stop"})),
        ]
    }

    #[test]
    fn a_continuation_goes_on_in_the_open_text_block_with_summed_usage() {
        let mut blocks = Blocks::default();
        blocks.observe(&event("content_block_start", serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
        assert_eq!(
            blocks,
            Blocks {
                next: 1,
                open: Some((0, true))
            }
        );
        let usage = Usage {
            prompt_tokens: 20,
            completion_tokens: 4,
            total_tokens: 24,
        };
        let out = spliced(&mut Splice::new(blocks), &continuation(), Some(usage));
        let kinds: Vec<&str> = out.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "no second message_start, no second start of the open block"
        );
        assert_eq!(out[0]["index"], 0);
        assert_eq!(out[0]["delta"]["text"], "ld");
        assert_eq!(out[2]["usage"]["input_tokens"], 20);
        assert_eq!(out[2]["usage"]["output_tokens"], 4);
    }

    #[test]
    fn after_a_closed_or_tool_block_the_continuation_s_blocks_come_next() {
        let at = Blocks {
            next: 2,
            open: Some((1, false)),
        };
        let out = spliced(&mut Splice::new(at), &continuation(), None);
        let kinds: Vec<(&str, u64)> = out
            .iter()
            .filter_map(|v| Some((v["type"].as_str()?, v["index"].as_u64()?)))
            .collect();
        assert_eq!(
            kinds,
            [
                ("content_block_stop", 1),
                ("content_block_start", 2),
                ("content_block_delta", 2),
                ("content_block_stop", 2)
            ]
        );
    }

    #[test]
    fn only_text_deltas_carry_text() {
        assert_eq!(delta_text(&continuation()[3]).as_deref(), Some("ld"));
        assert_eq!(delta_text(&continuation()[2]), None);
    }
}
