//! A Gemini stream (`streamGenerateContent?alt=sse`) as OpenAI `chat.completion.chunk`s, one
//! complete upstream event at a time ([`ToChat`]). Every Gemini event is a whole
//! `GenerateContentResponse` holding the candidate's new parts and the usage so far; the one
//! with a `finishReason` is the last. It becomes the finish chunk, the usage chunk (when asked
//! for) and `data: [DONE]`. Linear in the bytes fed, never panics; an `error` object in the
//! stream ends it as the upstream's error.

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde_json::Value;

use super::finish_reason;
use super::response::{ChatUsageOut, FunctionOut, ToolCallOut, call_id};
use super::types::{GenerateContentResponse, UsageMetadata};
use crate::wire::anthropic::stream::Step;
use crate::wire::{chunk, sse};

/// Gemini events to OpenAI chunks.
#[derive(Debug)]
pub struct ToChat {
    include_usage: bool,
    created: u64,
    /// The name the chunks give as `model`; Gemini's `modelVersion` when `None`.
    model: Option<String>,
    /// The chunks' `id` (from the first event's `responseId`), set with the role chunk.
    id: Option<String>,
    /// Content (text, thought or a call) has been sent.
    content: bool,
    /// Function calls sent: the next one's index.
    calls: usize,
    /// Content parts sent (text, thought or call): the output of a stream cut before its
    /// usage said how much it produced.
    pieces: u64,
    usage: Option<UsageMetadata>,
    /// The last event has passed (a finish reason, or an error).
    over: bool,
}

#[derive(Serialize)]
struct ChunkOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoiceOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<ChatUsageOut>,
}

#[derive(Serialize)]
struct ChunkChoiceOut {
    index: u32,
    delta: DeltaOut,
    finish_reason: Option<&'static str>,
}

#[serde_with::skip_serializing_none]
#[derive(Default, Serialize)]
struct DeltaOut {
    role: Option<&'static str>,
    content: Option<String>,
    reasoning_content: Option<String>,
    tool_calls: Option<Vec<ToolCallOut>>,
}

impl ToChat {
    /// `include_usage` sends the usage-only chunk, `created` is the Unix time the chunks
    /// report, `model` the name they give.
    pub fn new(include_usage: bool, created: u64, model: Option<&str>) -> ToChat {
        ToChat {
            include_usage,
            created,
            model: model.map(str::to_owned),
            id: None,
            content: false,
            calls: 0,
            pieces: 0,
            usage: None,
            over: false,
        }
    }

    /// The usage reported so far.
    pub fn usage(&self) -> Option<UsageMetadata> {
        self.usage
    }

    /// Content (the first token) has been sent.
    pub fn content_seen(&self) -> bool {
        self.content
    }

    /// Content parts sent so far (a model streams at least a token in each).
    pub fn pieces(&self) -> u64 {
        self.pieces
    }

    /// Translates one complete event (its bytes up to and including the blank line).
    pub fn event(&mut self, event: &[u8], out: &mut BytesMut) -> Step {
        if self.over {
            return Step::Complete;
        }
        let Some(data) = sse::data_payload(event) else {
            // Comments and events without data.
            return Step::Continue;
        };
        if chunk::is_error(data) {
            self.over = true;
            return Step::UpstreamError;
        }
        let Ok(answer) = serde_json::from_slice::<GenerateContentResponse>(data) else {
            return Step::Malformed;
        };
        if let Some(usage) = answer.usage_metadata {
            self.usage = Some(usage);
        }
        if self.model.is_none() {
            self.model = Some(answer.model_version.clone().unwrap_or_default());
        }
        let answer_id = answer.response_id.as_deref().unwrap_or("gemini");
        if self.id.is_none() {
            self.id = Some(format!("chatcmpl-{answer_id}"));
            self.write(
                out,
                DeltaOut {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    ..DeltaOut::default()
                },
                None,
                None,
            );
        }
        let blocked = answer
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref())
            .is_some();
        let mut finish = blocked.then_some("content_filter");
        // One choice: the gateway asks for one candidate.
        if let Some(candidate) = answer.candidates.first() {
            for part in candidate.content.iter().flat_map(|c| c.parts.iter()) {
                let delta = if let Some(call) = &part.function_call {
                    let index = self.calls;
                    self.calls = self.calls.saturating_add(1);
                    DeltaOut {
                        tool_calls: Some(vec![ToolCallOut {
                            index: Some(u32::try_from(index).unwrap_or(u32::MAX)),
                            id: call_id(part, call.id.as_deref(), answer_id, index),
                            kind: "function",
                            function: FunctionOut {
                                name: call.name.clone(),
                                arguments: call
                                    .args
                                    .as_ref()
                                    .map_or_else(|| "{}".to_owned(), Value::to_string),
                            },
                        }]),
                        ..DeltaOut::default()
                    }
                } else if let Some(text) = &part.text {
                    if text.is_empty() {
                        continue;
                    }
                    if part.thought == Some(true) {
                        DeltaOut {
                            reasoning_content: Some(text.clone()),
                            ..DeltaOut::default()
                        }
                    } else {
                        DeltaOut {
                            content: Some(text.clone()),
                            ..DeltaOut::default()
                        }
                    }
                } else {
                    continue;
                };
                self.content = true;
                self.pieces = self.pieces.saturating_add(1);
                self.write(out, delta, None, None);
            }
            if let Some(reason) = &candidate.finish_reason {
                finish = Some(finish_reason(reason, self.calls > 0));
            }
        }
        let Some(finish) = finish else {
            return Step::Continue;
        };
        self.over = true;
        self.write(out, DeltaOut::default(), Some(finish), None);
        if self.include_usage {
            let usage = self.usage.unwrap_or_default().to_chat();
            self.write_usage(out, usage);
        }
        out.put_slice(b"data: [DONE]\n\n");
        Step::Complete
    }

    fn write(
        &self,
        out: &mut BytesMut,
        delta: DeltaOut,
        finish: Option<&'static str>,
        usage: Option<ChatUsageOut>,
    ) {
        let chunk = ChunkOut {
            id: self.id.as_deref().unwrap_or_default(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.as_deref().unwrap_or_default(),
            choices: vec![ChunkChoiceOut {
                index: 0,
                delta,
                finish_reason: finish,
            }],
            usage,
        };
        put_data(out, &chunk);
    }

    fn write_usage(&self, out: &mut BytesMut, usage: ChatUsageOut) {
        let chunk = ChunkOut {
            id: self.id.as_deref().unwrap_or_default(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.as_deref().unwrap_or_default(),
            choices: Vec::new(),
            usage: Some(usage),
        };
        put_data(out, &chunk);
    }
}

fn put_data(out: &mut BytesMut, value: &impl Serialize) {
    out.put_slice(b"data: ");
    // Serializing these plain structs cannot fail; a failure would write an empty object.
    if serde_json::to_writer(out.writer(), value).is_err() {
        out.put_slice(b"{}");
    }
    out.put_slice(b"\n\n");
}
