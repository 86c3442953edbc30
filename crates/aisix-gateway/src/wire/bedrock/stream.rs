//! A ConverseStream as Anthropic's stream events, one event-stream message at a time
//! ([`ToAnthropic`]). Converse's events are Anthropic's in other words: `messageStart` is
//! `message_start`, `contentBlockStart`/`Delta`/`Stop` are the block events (a text or
//! reasoning block, which Converse opens with its first delta, is opened then), and
//! `messageStop` with the `metadata` after it (which carries the usage) is `message_delta` and
//! `message_stop`. An exception message ends the stream as Anthropic's `error` event; a message
//! that fails its CRC or cannot be read is malformed. Linear in the bytes fed; never panics.

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::exception_type;
use super::frames::{self, Frame};
use super::response::ConverseUsage;
use super::stop_reason;
use crate::wire::anthropic::error as anthropic_error;
use crate::wire::anthropic::stream::{Step, ToOpenAi, Translator};
use crate::wire::anthropic::types::TokenUsage;
use crate::wire::json as wire_json;
use crate::wire::sse;

/// Converse stream messages to Anthropic events.
#[derive(Debug)]
pub struct ToAnthropic {
    id: String,
    model: String,
    started: bool,
    /// The Converse index of the block open now, if one is.
    open: Option<u64>,
    /// Content (text, reasoning or a tool call) has been sent.
    content: bool,
    stop: Option<&'static str>,
    usage: Option<TokenUsage>,
    over: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default)]
    start: Option<Start>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start {
    tool_use: Option<ToolUseStart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart {
    tool_use_id: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta {
    #[serde(default)]
    content_block_index: u64,
    delta: Delta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta {
    text: Option<String>,
    tool_use: Option<ToolUseDelta>,
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Deserialize)]
struct ToolUseDelta {
    #[serde(default)]
    input: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta {
    text: Option<String>,
    signature: Option<String>,
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    #[serde(default)]
    content_block_index: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    usage: ConverseUsage,
}

#[derive(Deserialize)]
struct ExceptionBody {
    #[serde(default, alias = "Message")]
    message: String,
}

impl ToAnthropic {
    /// `id` and `model` are what `message_start` names.
    pub fn new(id: &str, model: &str) -> Self {
        Self {
            id: id.to_owned(),
            model: model.to_owned(),
            started: false,
            open: None,
            content: false,
            stop: None,
            usage: None,
            over: false,
        }
    }

    /// The usage reported so far (by `metadata`).
    pub fn usage(&self) -> Option<TokenUsage> {
        self.usage
    }

    /// Content (the first token) has been sent.
    pub fn content_seen(&self) -> bool {
        self.content
    }

    /// Translates one whole event-stream message.
    pub fn event(&mut self, message: &[u8], out: &mut BytesMut) -> Step {
        if self.over {
            return Step::Complete;
        }
        let Ok(frame) = frames::decode(message) else {
            self.over = true;
            return Step::Malformed;
        };
        let (kind, payload) = match frame {
            Frame::Event { kind, payload } => (kind, payload),
            Frame::Exception { kind, payload } => {
                let message = wire_json::parse::<ExceptionBody>(&payload)
                    .map(|b| b.message)
                    .unwrap_or_default();
                out.put_slice(&anthropic_error::stream_event(
                    exception_type(&kind),
                    &wire_json::bounded(message),
                ));
                self.over = true;
                return Step::UpstreamError;
            }
            Frame::Error { code, message } => {
                let message = if message.is_empty() { code } else { message };
                out.put_slice(&anthropic_error::stream_event(
                    "api_error",
                    &wire_json::bounded(message),
                ));
                self.over = true;
                return Step::UpstreamError;
            }
        };
        let step = match kind.as_str() {
            "messageStart" => {
                self.start(out);
                Some(Step::Continue)
            }
            "contentBlockStart" => serde_json::from_slice::<BlockStart>(&payload)
                .ok()
                .map(|start| self.block_start(start, out)),
            "contentBlockDelta" => serde_json::from_slice::<BlockDelta>(&payload)
                .ok()
                .map(|delta| self.block_delta(delta, out)),
            "contentBlockStop" => serde_json::from_slice::<BlockStop>(&payload)
                .ok()
                .map(|stop| {
                    if self.open == Some(stop.content_block_index) {
                        self.close(out);
                    }
                    Step::Continue
                }),
            "messageStop" => serde_json::from_slice::<MessageStop>(&payload)
                .ok()
                .map(|stop| {
                    self.close(out);
                    self.stop = Some(stop_reason(
                        stop.stop_reason.as_deref().unwrap_or("end_turn"),
                    ));
                    Step::Continue
                }),
            "metadata" => serde_json::from_slice::<Metadata>(&payload)
                .ok()
                .map(|metadata| {
                    self.usage = Some(metadata.usage.to_anthropic());
                    if self.stop.is_some() {
                        self.end(out);
                        Step::Complete
                    } else {
                        Step::Continue
                    }
                }),
            // Events added later carry nothing a client of this translation reads.
            _ => Some(Step::Continue),
        };
        step.unwrap_or_else(|| {
            self.over = true;
            Step::Malformed
        })
    }

    /// The stream ended after `messageStop` but before its `metadata`: the end events, without
    /// usage; `None` when it was cut before its stop.
    pub fn finish(&mut self, out: &mut BytesMut) -> bool {
        if self.over || self.stop.is_none() {
            return false;
        }
        self.end(out);
        true
    }

    fn start(&mut self, out: &mut BytesMut) {
        if self.started {
            return;
        }
        self.started = true;
        put_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": self.model,
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        );
    }

    fn open_block(&mut self, index: u64, block: Value, out: &mut BytesMut) {
        self.start(out);
        if self.open.is_some() {
            self.close(out);
        }
        self.open = Some(index);
        put_event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
    }

    fn close(&mut self, out: &mut BytesMut) {
        if let Some(index) = self.open.take() {
            put_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn block_start(&mut self, start: BlockStart, out: &mut BytesMut) -> Step {
        if let Some(call) = start.start.and_then(|s| s.tool_use) {
            self.content = true;
            self.open_block(
                start.content_block_index,
                json!({"type": "tool_use", "id": call.tool_use_id, "name": call.name, "input": {}}),
                out,
            );
        }
        Step::Continue
    }

    fn block_delta(&mut self, delta: BlockDelta, out: &mut BytesMut) -> Step {
        let index = delta.content_block_index;
        let open = self.open == Some(index);
        let (block, inner) = if let Some(text) = delta.delta.text {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            )
        } else if let Some(call) = delta.delta.tool_use {
            if !open {
                // A tool call's input before its start: Converse never sends that.
                return Step::Malformed;
            }
            (
                Value::Null,
                json!({"type": "input_json_delta", "partial_json": call.input}),
            )
        } else if let Some(reasoning) = delta.delta.reasoning_content {
            let block = json!({"type": "thinking", "thinking": "", "signature": ""});
            if let Some(data) = reasoning.redacted_content {
                self.content = true;
                self.open_block(
                    index,
                    json!({"type": "redacted_thinking", "data": data}),
                    out,
                );
                return Step::Continue;
            }
            match (reasoning.text, reasoning.signature) {
                (Some(text), _) => (block, json!({"type": "thinking_delta", "thinking": text})),
                (None, Some(signature)) => (
                    block,
                    json!({"type": "signature_delta", "signature": signature}),
                ),
                (None, None) => return Step::Continue,
            }
        } else {
            return Step::Continue;
        };
        if !open {
            self.open_block(index, block, out);
        }
        self.content = true;
        put_event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": inner}),
        );
        Step::Continue
    }

    fn end(&mut self, out: &mut BytesMut) {
        self.start(out);
        self.close(out);
        let usage = self.usage.unwrap_or_default();
        let usage_out = serde_json::to_value(usage).unwrap_or(Value::Null);
        put_event(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": usage_out}),
        );
        put_event(out, "message_stop", &json!({"type": "message_stop"}));
        self.over = true;
    }
}

fn put_event(out: &mut BytesMut, name: &str, data: &Value) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_slice(b"\ndata: ");
    // Writing a JSON value to memory cannot fail; a failure would write an empty object.
    if serde_json::to_writer(out.writer(), data).is_err() {
        out.put_slice(b"{}");
    }
    out.put_slice(b"\n\n");
}

/// A ConverseStream as OpenAI chat chunks: its Anthropic events ([`ToAnthropic`]) translated
/// on by Anthropic's [`ToOpenAi`], for a Responses client (whose translator reads chat).
#[derive(Debug)]
pub struct ToChat {
    to_anthropic: ToAnthropic,
    to_openai: ToOpenAi,
    /// The Anthropic events of the message at hand (the error event, when one ended it).
    events: BytesMut,
}

impl ToChat {
    /// Chunks that report their usage, created at `created`.
    pub fn new(id: &str, model: &str, created: u64) -> Self {
        Self {
            to_anthropic: ToAnthropic::new(id, model),
            to_openai: ToOpenAi::new(true, created),
            events: BytesMut::new(),
        }
    }

    /// Translates one whole event-stream message into chat chunks in `out`.
    pub fn event(&mut self, message: &[u8], out: &mut BytesMut) -> Step {
        match self.to_anthropic.event(message, &mut self.events) {
            step @ (Step::UpstreamError | Step::Malformed) => step,
            step => match self.relay(out) {
                Step::Continue => step,
                other => other,
            },
        }
    }

    /// The upstream ended: the end chunks when the answer had stopped, else nothing.
    pub fn finish(&mut self, out: &mut BytesMut) {
        if self.to_anthropic.finish(&mut self.events) {
            self.relay(out);
        }
    }

    /// What the stream's exception said, once one has ended it.
    pub fn reported(&self) -> Option<sse::ErrorReport> {
        sse::reported(&self.events)
    }

    fn relay(&mut self, out: &mut BytesMut) -> Step {
        let events = self.events.split();
        let mut rest = &events[..];
        while let Some(end) = sse::event_end(rest) {
            let (event, more) = rest.split_at(end);
            let step = self.to_openai.event(event, out);
            if step != Step::Continue {
                return step;
            }
            rest = more;
        }
        Step::Continue
    }
}
