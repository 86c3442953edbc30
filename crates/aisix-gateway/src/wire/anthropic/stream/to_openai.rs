//! Anthropic's stream as OpenAI `chat.completion.chunk`s: `message_start` opens with the
//! assistant role, text deltas become content, each `tool_use` block becomes one tool call whose
//! `input_json_delta`s are its argument pieces, `message_delta` gives the `finish_reason`, and
//! `message_stop` ends with the usage chunk (when the client asked) and `data: [DONE]`.
//! Thinking becomes `reasoning_content` deltas (its signature, which only Anthropic can check,
//! is dropped); server-tool blocks are left out. Events are told apart by their `event:` name,
//! as Anthropic's SDKs do; only the fields read are parsed, borrowing from the event.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use crate::wire::chat::ChatUsage;
use crate::wire::sse;

use super::super::mapping::{finish_reason, usage_to_openai};
use super::super::request::OUTPUT_TOOL;
use super::super::types::TokenUsage;
use super::{Phase, Step, Translator, write_data};

/// Anthropic events in, OpenAI chunks out.
#[derive(Debug)]
pub struct ToOpenAi {
    include_usage: bool,
    created: u64,
    id: String,
    model: String,
    /// The name every chunk gives as `model`, whatever the upstream's (a group's direct model).
    named: Option<String>,
    phase: Phase,
    /// Anthropic block index → what the block is, for its deltas.
    blocks: HashMap<u64, BlockKind, foldhash::fast::RandomState>,
    /// Tool calls so far: the next call's OpenAI index.
    calls: u32,
    usage: Option<TokenUsage>,
    finish: Option<&'static str>,
    content: bool,
    /// The request asked for structured output: a call of the output tool is the text.
    structured: bool,
}

#[derive(Debug, Clone, Copy)]
enum BlockKind {
    Text,
    Thinking,
    /// A tool call: its OpenAI index, and whether any argument text has been sent.
    Tool {
        call: u32,
        arguments: bool,
    },
    /// Redacted thinking, server tools: left out.
    Skipped,
    /// The structured output's tool call: its input is the answer's text.
    Output,
}

impl ToOpenAi {
    /// `include_usage`: the client asked for the usage-only final chunk. `created`: the Unix
    /// time every chunk reports.
    pub fn new(include_usage: bool, created: u64) -> ToOpenAi {
        ToOpenAi {
            include_usage,
            created,
            id: String::new(),
            model: String::new(),
            named: None,
            phase: Phase::Start,
            blocks: HashMap::default(),
            calls: 0,
            usage: None,
            finish: None,
            content: false,
            structured: false,
        }
    }

    /// The request asked for structured output ([`OUTPUT_TOOL`]): that tool's input streams
    /// as the text, and an answer that called no other tool finishes with `stop`.
    pub fn structured(mut self) -> ToOpenAi {
        self.structured = true;
        self
    }

    /// Every chunk names `model` (not the upstream's model).
    pub fn naming(mut self, model: &str) -> ToOpenAi {
        self.named = Some(model.to_owned());
        self
    }

    fn chunk(&mut self, out: &mut BytesMut, delta: DeltaOut<'_>, finish_reason: Option<&str>) {
        self.content |= delta.tool_calls.is_some()
            || delta.content.is_some_and(|c| !c.is_empty())
            || delta.reasoning_content.is_some_and(|c| !c.is_empty());
        let choice = ChoiceOut {
            index: 0,
            delta,
            logprobs: None,
            finish_reason,
        };
        self.write_chunk(out, &[choice], None);
    }

    /// One `chat.completion.chunk` of this answer.
    fn write_chunk(&self, out: &mut BytesMut, choices: &[ChoiceOut<'_>], usage: Option<ChatUsage>) {
        write_data(
            out,
            &ChunkOut {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices,
                usage,
            },
        );
    }

    /// The usage chunk (if asked for) and `[DONE]`.
    fn complete(&mut self, out: &mut BytesMut) -> Step {
        if self.include_usage {
            let usage = usage_to_openai(&self.usage.unwrap_or_default());
            self.write_chunk(out, &[], Some(usage));
        }
        out.put_slice(b"data: [DONE]\n\n");
        self.phase = Phase::Over(Step::Complete);
        Step::Complete
    }

    fn translate(&mut self, name: &[u8], data: &[u8], out: &mut BytesMut) -> Option<Step> {
        match name {
            b"message_start" => {
                if self.phase != Phase::Start {
                    return None;
                }
                let start: MessageStart<'_> = serde_json::from_slice(data).ok()?;
                self.id = start.message.id.into_owned();
                self.model = match self.named.take() {
                    Some(named) => named,
                    None => start.message.model.into_owned(),
                };
                self.usage = Some(start.message.usage);
                self.phase = Phase::Body;
                self.chunk(
                    out,
                    DeltaOut {
                        role: Some("assistant"),
                        content: Some(""),
                        ..DeltaOut::default()
                    },
                    None,
                );
            }
            b"content_block_start" => {
                let start: BlockStart<'_> = serde_json::from_slice(data).ok()?;
                let block = start.content_block;
                let kind = match block.kind.as_ref() {
                    "text" => BlockKind::Text,
                    "thinking" => BlockKind::Thinking,
                    "tool_use" if self.structured && block.name.as_deref() == Some(OUTPUT_TOOL) => {
                        BlockKind::Output
                    }
                    "tool_use" => BlockKind::Tool {
                        call: self.calls,
                        arguments: false,
                    },
                    _ => BlockKind::Skipped,
                };
                if self.blocks.insert(start.index, kind).is_some() {
                    return None;
                }
                match kind {
                    BlockKind::Text => {
                        if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                            self.chunk(out, DeltaOut::text(&text), None);
                        }
                    }
                    BlockKind::Tool { call, .. } => {
                        self.calls = self.calls.saturating_add(1);
                        let call = ToolCallOut {
                            index: call,
                            id: Some(block.id.as_deref().unwrap_or_default()),
                            kind: Some("function"),
                            function: FunctionOut {
                                name: Some(block.name.as_deref().unwrap_or_default()),
                                arguments: "",
                            },
                        };
                        self.chunk(out, DeltaOut::call(call), None);
                    }
                    BlockKind::Thinking => {
                        if let Some(thinking) = block.thinking.filter(|t| !t.is_empty()) {
                            self.chunk(out, DeltaOut::reasoning(&thinking), None);
                        }
                    }
                    BlockKind::Skipped | BlockKind::Output => {}
                }
            }
            b"content_block_delta" => {
                let delta: BlockDelta<'_> = serde_json::from_slice(data).ok()?;
                let kind = self.blocks.get_mut(&delta.index)?;
                match (kind, delta.delta.kind.as_ref()) {
                    (BlockKind::Text, "text_delta") => {
                        let text = delta.delta.text.unwrap_or_default();
                        if !text.is_empty() {
                            self.chunk(out, DeltaOut::text(&text), None);
                        }
                    }
                    (BlockKind::Tool { call, arguments }, "input_json_delta") => {
                        let json = delta.delta.partial_json.unwrap_or_default();
                        if !json.is_empty() {
                            *arguments = true;
                            let call = *call;
                            self.chunk(out, DeltaOut::arguments(call, &json), None);
                        }
                    }
                    (BlockKind::Output, "input_json_delta") => {
                        let json = delta.delta.partial_json.unwrap_or_default();
                        if !json.is_empty() {
                            self.chunk(out, DeltaOut::text(&json), None);
                        }
                    }
                    (BlockKind::Thinking, "thinking_delta") => {
                        let thinking = delta.delta.thinking.unwrap_or_default();
                        if !thinking.is_empty() {
                            self.chunk(out, DeltaOut::reasoning(&thinking), None);
                        }
                    }
                    (BlockKind::Text, "citations_delta")
                    | (BlockKind::Skipped, _)
                    | (_, "thinking_delta" | "signature_delta") => {}
                    _ => return None,
                }
            }
            b"content_block_stop" => {
                let stop: BlockStop = serde_json::from_slice(data).ok()?;
                // A call without input streams no argument text; OpenAI clients parse the
                // arguments as JSON, so they get the empty object.
                if let BlockKind::Tool {
                    call,
                    arguments: false,
                } = *self.blocks.get(&stop.index)?
                {
                    self.chunk(out, DeltaOut::arguments(call, "{}"), None);
                }
            }
            b"message_delta" => {
                let delta: MessageDelta<'_> = serde_json::from_slice(data).ok()?;
                if let Some(usage) = delta.usage {
                    let mut total = self.usage.unwrap_or_default();
                    usage.apply(&mut total);
                    self.usage = Some(total);
                }
                if let Some(reason) = delta.delta.stop_reason {
                    let mut reason = finish_reason(&reason);
                    if self.structured && reason == "tool_calls" && self.calls == 0 {
                        reason = "stop";
                    }
                    self.finish = Some(reason);
                    self.chunk(out, DeltaOut::default(), Some(reason));
                }
            }
            b"message_stop" => return Some(self.complete(out)),
            // ping, and event types newer than this translator.
            _ => {}
        }
        Some(Step::Continue)
    }
}

impl Translator for ToOpenAi {
    fn event(&mut self, event: &[u8], out: &mut BytesMut) -> Step {
        if let Phase::Over(step) = self.phase {
            return step;
        }
        let fields = sse::fields(event);
        let (Some(name), Some(data)) = (fields.name, fields.data) else {
            // A comment or an unnamed event, which Anthropic's SDKs skip too.
            return Step::Continue;
        };
        if name == b"error" {
            self.phase = Phase::Over(Step::UpstreamError);
            return Step::UpstreamError;
        }
        let step = if self.phase == Phase::Start && name != b"message_start" && name != b"ping" {
            if KNOWN.contains(&name) {
                Step::Malformed
            } else {
                Step::Continue
            }
        } else {
            self.translate(name, &data, out).unwrap_or(Step::Malformed)
        };
        self.phase.after(step)
    }

    fn end(&mut self, out: &mut BytesMut) -> bool {
        match self.phase.ended() {
            Some(complete) => complete,
            None => self.finish.is_some() && self.complete(out) == Step::Complete,
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.usage
    }

    fn content_seen(&self) -> bool {
        self.content
    }
}

/// The events of a message; any of them before `message_start` breaks the order.
const KNOWN: [&[u8]; 5] = [
    b"content_block_start",
    b"content_block_delta",
    b"content_block_stop",
    b"message_delta",
    b"message_stop",
];

#[derive(Deserialize)]
struct MessageStart<'a> {
    #[serde(borrow)]
    message: StartMessage<'a>,
}

#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    model: Cow<'a, str>,
    #[serde(default)]
    usage: TokenUsage,
}

#[derive(Deserialize)]
struct BlockStart<'a> {
    index: u64,
    #[serde(borrow)]
    content_block: StartBlock<'a>,
}

#[derive(Deserialize)]
struct StartBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
}

/// `content_block_delta`'s data.
#[derive(Deserialize)]
pub(super) struct BlockDelta<'a> {
    pub(super) index: u64,
    #[serde(borrow)]
    pub(super) delta: DeltaIn<'a>,
}

#[derive(Deserialize)]
pub(super) struct DeltaIn<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct BlockStop {
    index: u64,
}

#[derive(Deserialize)]
struct MessageDelta<'a> {
    #[serde(borrow)]
    delta: StopIn<'a>,
    #[serde(default)]
    usage: Option<DeltaUsage>,
}

#[derive(Deserialize)]
struct StopIn<'a> {
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

/// `message_delta.usage`: cumulative counts; the optional ones overwrite `message_start`'s when
/// present, as Anthropic's SDK accumulates them.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(super) struct DeltaUsage {
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl DeltaUsage {
    pub(super) fn apply(self, total: &mut TokenUsage) {
        if let Some(output) = self.output_tokens {
            total.output_tokens = output;
        }
        if let Some(input) = self.input_tokens {
            total.input_tokens = input;
        }
        if self.cache_creation_input_tokens.is_some() {
            total.cache_creation_input_tokens = self.cache_creation_input_tokens;
        }
        if self.cache_read_input_tokens.is_some() {
            total.cache_read_input_tokens = self.cache_read_input_tokens;
        }
    }
}

#[derive(Serialize)]
struct ChunkOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChoiceOut<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<ChatUsage>,
}

#[derive(Serialize)]
struct ChoiceOut<'a> {
    index: u32,
    delta: DeltaOut<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    /// Reasoning, as OpenAI-compatible servers stream it (DeepSeek, vLLM).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallOut<'a>; 1]>,
}

impl<'a> DeltaOut<'a> {
    fn text(text: &'a str) -> DeltaOut<'a> {
        DeltaOut {
            content: Some(text),
            ..DeltaOut::default()
        }
    }

    fn reasoning(thinking: &'a str) -> DeltaOut<'a> {
        DeltaOut {
            reasoning_content: Some(thinking),
            ..DeltaOut::default()
        }
    }

    fn call(call: ToolCallOut<'a>) -> DeltaOut<'a> {
        DeltaOut {
            tool_calls: Some([call]),
            ..DeltaOut::default()
        }
    }

    fn arguments(index: u32, arguments: &'a str) -> DeltaOut<'a> {
        DeltaOut::call(ToolCallOut {
            index,
            id: None,
            kind: None,
            function: FunctionOut {
                name: None,
                arguments,
            },
        })
    }
}

#[derive(Serialize)]
struct ToolCallOut<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(translator: &mut ToOpenAi, events: &[&str]) -> (Vec<Step>, String) {
        let mut out = BytesMut::new();
        let steps = events
            .iter()
            .map(|e| translator.event(e.as_bytes(), &mut out))
            .collect();
        (steps, String::from_utf8(out.to_vec()).unwrap())
    }

    #[test]
    fn thinking_is_the_first_output_and_becomes_reasoning_content() {
        let mut t = ToOpenAi::new(false, 1);
        let start = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":1}}}

"#;
        let block = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

"#;
        let thought = r#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}

"#;
        let signature = r#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}

"#;
        let (_, out) = run(&mut t, &[start, block]);
        assert!(!t.content_seen(), "{out}");
        let (_, out) = run(&mut t, &[thought, signature]);
        assert!(t.content_seen());
        assert!(
            out.contains(r#""delta":{"reasoning_content":"hmm"}"#),
            "{out}"
        );
        assert!(
            !out.contains("EqQB"),
            "a signature only Anthropic can check: {out}"
        );
    }

    #[test]
    fn content_before_message_start_is_malformed_and_writes_nothing() {
        let mut t = ToOpenAi::new(false, 0);
        let (steps, out) = run(
            &mut t,
            &[
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
            ],
        );
        assert_eq!(steps, [Step::Malformed]);
        assert!(out.is_empty());
    }

    #[test]
    fn an_upstream_error_event_ends_the_stream_and_is_left_to_the_relay_to_render() {
        let mut t = ToOpenAi::new(false, 0);
        let (steps, out) = run(
            &mut t,
            &[
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            ],
        );
        assert_eq!(
            steps,
            [Step::Continue, Step::UpstreamError, Step::UpstreamError]
        );
        assert!(!out.contains("error"), "{out}");
        assert!(!out.contains("[DONE]"));
        assert!(!t.end(&mut BytesMut::new()));
    }

    #[test]
    fn a_stream_with_its_stop_reason_but_no_message_stop_is_completed_at_the_end() {
        let mut t = ToOpenAi::new(true, 0);
        run(
            &mut t,
            &[
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":2,\"output_tokens\":1}}}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
            ],
        );
        let mut out = BytesMut::new();
        assert!(t.end(&mut out));
        let out = String::from_utf8(out.to_vec()).unwrap();
        assert!(out.contains("\"completion_tokens\":9"), "{out}");
        assert!(out.ends_with("data: [DONE]\n\n"));
        assert_eq!(t.usage().unwrap().to_usage().total_tokens, 11);
    }
}
