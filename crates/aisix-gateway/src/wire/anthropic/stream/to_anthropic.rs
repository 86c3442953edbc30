//! OpenAI `chat.completion.chunk`s as Anthropic's exact event order: one `message_start` and a
//! `ping`; for each block `content_block_start`, its deltas, `content_block_stop`; then
//! `message_delta` with the stop reason and usage, and `message_stop`. Reasoning
//! (`reasoning_content`, or `reasoning`) opens a `thinking` block of `thinking_delta`s, without
//! a signature (only Anthropic can sign its thinking); content opens a text block; each tool
//! call opens a `tool_use` block whose argument pieces are `input_json_delta`s.
//! OpenAI reports usage after the finish reason, so the closing events wait for `[DONE]`.

use std::borrow::Cow;
use std::collections::HashSet;

use bytes::BytesMut;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::wire::chat::ChatUsage;
use crate::wire::sse;

use super::super::mapping::{stop_reason, usage_from_openai};
use super::super::types::TokenUsage;
use super::{Phase, Step, Translator, write_event};

/// OpenAI chunks in, Anthropic events out.
#[derive(Debug)]
pub struct ToAnthropic {
    phase: Phase,
    open: Open,
    /// The next block's index.
    next_block: u64,
    /// OpenAI indices of the tool calls opened so far.
    calls: HashSet<u64, foldhash::fast::RandomState>,
    /// The id of the tool call being streamed.
    call_id: String,
    stop: Option<&'static str>,
    usage: Option<TokenUsage>,
    content: bool,
    /// The name `message_start` gives as `model`, whatever the upstream's (a group's direct
    /// model).
    named: Option<String>,
}

/// The block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Thinking { block: u64 },
    Text { block: u64 },
    Tool { block: u64, call: u64 },
}

impl Default for ToAnthropic {
    fn default() -> Self {
        ToAnthropic::new()
    }
}

impl ToAnthropic {
    pub fn new() -> ToAnthropic {
        ToAnthropic {
            phase: Phase::Start,
            open: Open::None,
            next_block: 0,
            calls: HashSet::default(),
            call_id: String::new(),
            stop: None,
            usage: None,
            content: false,
            named: None,
        }
    }

    /// `message_start` names `model` (not the upstream's model).
    pub fn naming(mut self, model: &str) -> ToAnthropic {
        self.named = Some(model.to_owned());
        self
    }

    fn start(&mut self, out: &mut BytesMut, id: &str, model: &str) {
        if self.phase != Phase::Start {
            return;
        }
        let named = self.named.take();
        let model = named.as_deref().unwrap_or(model);
        let usage = self.usage.unwrap_or_default();
        write_event(
            out,
            "message_start",
            &MessageStartOut {
                kind: "message_start",
                message: StartMessageOut {
                    id,
                    kind: "message",
                    role: "assistant",
                    content: [],
                    model,
                    stop_reason: None,
                    stop_sequence: None,
                    usage: UsageOut::from(&usage),
                },
            },
        );
        write_event(out, "ping", &Typed { kind: "ping" });
        self.phase = Phase::Body;
    }

    fn open_block(&mut self, out: &mut BytesMut, open: Open, block: BlockOut<'_>) {
        self.close_block(out);
        let index = self.next_block;
        self.next_block = index.saturating_add(1);
        write_event(
            out,
            "content_block_start",
            &BlockStartOut {
                kind: "content_block_start",
                index,
                content_block: block,
            },
        );
        self.open = match open {
            Open::None => Open::None,
            Open::Thinking { .. } => Open::Thinking { block: index },
            Open::Text { .. } => Open::Text { block: index },
            Open::Tool { call, .. } => Open::Tool { block: index, call },
        };
    }

    fn close_block(&mut self, out: &mut BytesMut) {
        let index = match self.open {
            Open::None => return,
            Open::Thinking { block } | Open::Text { block } | Open::Tool { block, .. } => block,
        };
        write_event(
            out,
            "content_block_stop",
            &BlockStopOut {
                kind: "content_block_stop",
                index,
            },
        );
        self.open = Open::None;
    }

    /// Reasoning: the first output, as much as text is.
    fn thinking(&mut self, out: &mut BytesMut, thinking: &str) {
        self.content = true;
        let block = match self.open {
            Open::Thinking { block } => block,
            _ => {
                self.open_block(
                    out,
                    Open::Thinking { block: 0 },
                    BlockOut::Thinking {
                        thinking: "",
                        signature: "",
                    },
                );
                self.next_block.saturating_sub(1)
            }
        };
        write_delta(out, block, DeltaBody::Thinking { thinking });
    }

    fn text(&mut self, out: &mut BytesMut, text: &str) {
        self.content = true;
        let block = match self.open {
            Open::Text { block } => block,
            _ => {
                self.open_block(out, Open::Text { block: 0 }, BlockOut::Text { text: "" });
                self.next_block.saturating_sub(1)
            }
        };
        write_delta(out, block, DeltaBody::Text { text });
    }

    /// One piece of a tool call. A piece with a new id opens a new call, even at an index
    /// already used (some servers number every call 0). `None` when a piece without an id
    /// belongs to a call already closed: OpenAI streams calls one after another, and
    /// interleaved calls cannot keep Anthropic's order.
    fn tool(&mut self, out: &mut BytesMut, call: ToolCallIn<'_>) -> Option<()> {
        self.content = true;
        let same_id = call.id.as_deref().is_none_or(|id| id == self.call_id);
        let block = match self.open {
            Open::Tool { block, call: open } if open == call.index && same_id => block,
            _ => {
                if !self.calls.insert(call.index) && call.id.is_none() {
                    return None;
                }
                let generated;
                let id = match call.id.as_deref() {
                    Some(id) => id,
                    None => {
                        generated = format!("call_{}", call.index);
                        &generated
                    }
                };
                let name = call
                    .function
                    .as_ref()
                    .and_then(|f| f.name.as_deref())
                    .unwrap_or_default();
                self.call_id.clear();
                self.call_id.push_str(id);
                self.open_block(
                    out,
                    Open::Tool {
                        block: 0,
                        call: call.index,
                    },
                    BlockOut::ToolUse {
                        id,
                        name,
                        input: Empty {},
                    },
                );
                self.next_block.saturating_sub(1)
            }
        };
        let arguments = call.function.and_then(|f| f.arguments);
        if let Some(partial_json) = arguments.as_deref().filter(|a| !a.is_empty()) {
            write_delta(out, block, DeltaBody::InputJson { partial_json });
        }
        Some(())
    }

    /// The closing events: the open block's stop, `message_delta`, `message_stop`.
    fn complete(&mut self, out: &mut BytesMut) -> Step {
        self.start(out, "", "");
        self.close_block(out);
        let usage = self.usage.unwrap_or_default();
        write_event(
            out,
            "message_delta",
            &MessageDeltaOut {
                kind: "message_delta",
                delta: StopOut {
                    stop_reason: self.stop.unwrap_or("end_turn"),
                    stop_sequence: None,
                },
                usage: UsageOut::from(&usage),
            },
        );
        write_event(
            out,
            "message_stop",
            &Typed {
                kind: "message_stop",
            },
        );
        self.phase = Phase::Over(Step::Complete);
        Step::Complete
    }

    fn chunk(&mut self, data: &[u8], out: &mut BytesMut) -> Step {
        let Ok(chunk) = serde_json::from_slice::<ChunkIn<'_>>(data) else {
            return Step::Malformed;
        };
        if chunk.error.is_some() {
            return self.upstream_error();
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage_from_openai(&usage));
        }
        self.start(out, &chunk.id, &chunk.model);
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta;
            let reasoning = delta
                .reasoning
                .and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok());
            for thinking in [delta.reasoning_content, reasoning].into_iter().flatten() {
                if !thinking.is_empty() {
                    self.thinking(out, &thinking);
                }
            }
            for text in [delta.content, delta.refusal].into_iter().flatten() {
                if !text.is_empty() {
                    self.text(out, &text);
                }
            }
            for call in delta.tool_calls.into_iter().flatten() {
                if self.tool(out, call).is_none() {
                    return Step::Malformed;
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.stop = Some(stop_reason(&reason));
            }
        }
        Step::Continue
    }

    /// The upstream reported an error: the stream is over, and its error event is the relay's
    /// to render.
    fn upstream_error(&mut self) -> Step {
        self.phase = Phase::Over(Step::UpstreamError);
        Step::UpstreamError
    }
}

impl Translator for ToAnthropic {
    fn event(&mut self, event: &[u8], out: &mut BytesMut) -> Step {
        if let Phase::Over(step) = self.phase {
            return step;
        }
        let fields = sse::fields(event);
        let Some(data) = fields.data else {
            return Step::Continue;
        };
        if data.trim_ascii() == b"[DONE]" {
            return self.complete(out);
        }
        if fields.name == Some(b"error") {
            return self.upstream_error();
        }
        let step = self.chunk(&data, out);
        self.phase.after(step)
    }

    fn end(&mut self, out: &mut BytesMut) -> bool {
        match self.phase.ended() {
            Some(complete) => complete,
            None => self.stop.is_some() && self.complete(out) == Step::Complete,
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.usage
    }

    fn content_seen(&self) -> bool {
        self.content
    }
}

#[derive(Deserialize)]
struct ChunkIn<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    model: Cow<'a, str>,
    #[serde(borrow, default)]
    choices: Vec<ChoiceIn<'a>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    /// An error object in place of a chunk: only its presence matters here.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    delta: DeltaIn<'a>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct DeltaIn<'a> {
    /// Reasoning, as DeepSeek, vLLM and others stream it.
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    /// Reasoning, as OpenRouter and Ollama stream it (a string; any other shape is ignored).
    #[serde(borrow, default)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallIn<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
struct FunctionIn<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
struct Typed {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct MessageStartOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: StartMessageOut<'a>,
}

#[derive(Serialize)]
struct StartMessageOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    content: [(); 0],
    model: &'a str,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'static str>,
    usage: UsageOut,
}

/// Usage as Anthropic's events carry it; the cache counts only when the upstream gave them.
#[derive(Serialize)]
struct UsageOut {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<u64>,
}

impl From<&TokenUsage> for UsageOut {
    fn from(usage: &TokenUsage) -> UsageOut {
        UsageOut {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens,
            cache_read_input_tokens: usage.cache_read_input_tokens,
        }
    }
}

#[derive(Serialize)]
struct BlockStartOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u64,
    content_block: BlockOut<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

#[derive(Serialize)]
struct DeltaOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u64,
    delta: DeltaBody<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum DeltaBody<'a> {
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct BlockStopOut {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u64,
}

#[derive(Serialize)]
struct MessageDeltaOut {
    #[serde(rename = "type")]
    kind: &'static str,
    delta: StopOut,
    usage: UsageOut,
}

#[derive(Serialize)]
struct StopOut {
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
}

/// A `content_block_delta` event of block `index`.
fn write_delta(out: &mut BytesMut, index: u64, delta: DeltaBody<'_>) {
    write_event(
        out,
        "content_block_delta",
        &DeltaOut {
            kind: "content_block_delta",
            index,
            delta,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"c\",\"model\":\"g\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    fn names(out: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .filter_map(|l| l.strip_prefix("event: ").map(str::to_owned))
            .collect()
    }

    #[test]
    fn reasoning_is_the_first_output_and_opens_a_thinking_block() {
        for key in ["reasoning_content", "reasoning"] {
            let mut t = ToAnthropic::new();
            let mut out = BytesMut::new();
            let role = chunk(r#"{"role":"assistant","content":""}"#, "null");
            t.event(role.as_bytes(), &mut out);
            assert!(!t.content_seen(), "a role chunk is not output");
            let thought = chunk(&format!(r#"{{"{key}":"hmm"}}"#), "null");
            t.event(thought.as_bytes(), &mut out);
            assert!(t.content_seen(), "{key} holds no longer");
            let text = String::from_utf8_lossy(&out);
            assert!(
                text.contains(
                    r#""content_block":{"type":"thinking","thinking":"","signature":""}"#
                ),
                "{text}"
            );
            assert!(
                text.contains(r#""delta":{"type":"thinking_delta","thinking":"hmm"}"#),
                "{text}"
            );
        }
    }

    #[test]
    fn interleaved_tool_calls_are_malformed() {
        let mut t = ToAnthropic::new();
        let mut out = BytesMut::new();
        let call = |i: u64| {
            chunk(
                &format!(
                    r#"{{"tool_calls":[{{"index":{i},"id":"c{i}","function":{{"name":"f","arguments":""}}}}]}}"#
                ),
                "null",
            )
        };
        assert_eq!(t.event(call(0).as_bytes(), &mut out), Step::Continue);
        assert_eq!(t.event(call(1).as_bytes(), &mut out), Step::Continue);
        let late = chunk(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}"#,
            "null",
        );
        assert_eq!(t.event(late.as_bytes(), &mut out), Step::Malformed);
    }

    #[test]
    fn calls_that_all_say_index_0_are_told_apart_by_their_ids() {
        let mut t = ToAnthropic::new();
        let mut out = BytesMut::new();
        for (id, args) in [("a", r#"{\"x\":1}"#), ("b", "{}")] {
            let delta = format!(
                r#"{{"tool_calls":[{{"index":0,"id":"{id}","function":{{"name":"f","arguments":"{args}"}}}}]}}"#
            );
            assert_eq!(
                t.event(chunk(&delta, "null").as_bytes(), &mut out),
                Step::Continue
            );
        }
        assert_eq!(t.event(b"data: [DONE]\n\n", &mut out), Step::Complete);
        let text = String::from_utf8_lossy(&out);
        assert_eq!(text.matches("\"type\":\"tool_use\"").count(), 2, "{text}");
    }

    /// The events of a stream's first text chunk.
    const OPENING: [&str; 4] = [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
    ];

    /// A translator fed one text chunk, finished (`"stop"`) or not (`null`).
    fn fed(finish: &str) -> (ToAnthropic, BytesMut) {
        let mut t = ToAnthropic::new();
        let mut out = BytesMut::new();
        t.event(chunk(r#"{"content":"Hi"}"#, finish).as_bytes(), &mut out);
        (t, out)
    }

    #[test]
    fn a_cut_stream_is_incomplete_and_gets_no_message_stop() {
        let (mut t, mut out) = fed("null");
        assert!(!t.end(&mut out));
        assert_eq!(names(&out), OPENING, "the relay adds the error event");
    }

    #[test]
    fn a_finished_stream_without_done_is_completed_at_the_end() {
        let (mut t, mut out) = fed(r#""stop""#);
        assert!(t.end(&mut out));
        assert_eq!(
            names(&out),
            [
                &OPENING[..],
                &["content_block_stop", "message_delta", "message_stop"]
            ]
            .concat()
        );
    }

    #[test]
    fn an_inline_error_object_is_an_upstream_error() {
        let mut t = ToAnthropic::new();
        let mut out = BytesMut::new();
        let step = t.event(
            b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n",
            &mut out,
        );
        assert_eq!(step, Step::UpstreamError);
        assert!(out.is_empty(), "the relay renders the error event");
    }
}
