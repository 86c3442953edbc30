//! A chat completions stream as a Responses stream, event by event in the order of the
//! streaming reference: `response.created` and `response.in_progress` at the first chunk; for
//! text `response.output_item.added`, `response.content_part.added`, each
//! `response.output_text.delta`, then `response.output_text.done`, `response.content_part.done`
//! and `response.output_item.done`; for each tool call `response.output_item.added`, each
//! `response.function_call_arguments.delta`, `response.function_call_arguments.done` and
//! `response.output_item.done`; and at `[DONE]` (or the body's end after a `finish_reason`)
//! `response.completed` or `response.incomplete` with the whole response and its usage. Every
//! event carries its `sequence_number`. The text and arguments are kept for the events that
//! repeat them, so the work and memory are linear in the stream's bytes.

use bytes::{BufMut, BytesMut};
use serde_json::{Value, json};

use super::answer::responses_usage;
use super::event::{Identity, failed_event};
use super::ids::new_id;
use super::object::{Echo, Status, function_call_item, message_item, status_of};
use super::usage::ResponsesUsage;
use crate::wire::chat::ChatChunk;
use crate::wire::{chunk, sse};

/// What one chat event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    /// The answer is complete (`[DONE]`): its last events are written.
    Complete,
    /// The upstream reported an error.
    UpstreamError,
    /// The event is not a chat chunk.
    Malformed,
}

/// The message item being streamed.
#[derive(Debug)]
struct Message {
    id: String,
    index: usize,
    text: String,
    refusal: Option<String>,
}

/// The function call being streamed.
#[derive(Debug)]
struct Call {
    /// Its index among the chat answer's tool calls.
    chat_index: u64,
    id: String,
    call_id: String,
    name: String,
    arguments: String,
    index: usize,
}

/// The translator of one stream.
#[derive(Debug)]
pub struct FromChat {
    echo: Echo,
    sequence: u64,
    opened: bool,
    /// Finished output items.
    items: Vec<Value>,
    message: Option<Message>,
    call: Option<Call>,
    finish: Option<String>,
    usage: Option<ResponsesUsage>,
    /// Output events written (about a token each).
    pieces: u64,
    ended: bool,
}

impl FromChat {
    pub fn new(echo: Echo) -> Self {
        Self {
            echo,
            sequence: 0,
            opened: false,
            items: Vec::new(),
            message: None,
            call: None,
            finish: None,
            usage: None,
            pieces: 0,
            ended: false,
        }
    }

    /// Output has been written (the first token).
    pub fn started(&self) -> bool {
        self.pieces > 0
    }

    pub fn pieces(&self) -> u64 {
        self.pieces
    }

    pub fn usage(&self) -> Option<ResponsesUsage> {
        self.usage
    }

    /// The finished response, once the stream is complete (for the store).
    pub fn response(&self) -> Option<Value> {
        self.ended.then(|| {
            self.echo.response(
                status_of(self.finish.as_deref()),
                self.items.clone(),
                self.usage,
            )
        })
    }

    /// Reads one chat event and writes what it becomes to `out`.
    pub fn event(&mut self, event: &[u8], out: &mut BytesMut) -> Outcome {
        if self.ended {
            return Outcome::Complete;
        }
        if sse::is_error_event(event) {
            return Outcome::UpstreamError;
        }
        let Some(data) = sse::data_payload(event) else {
            return Outcome::Continue;
        };
        if data.trim_ascii() == b"[DONE]" {
            self.end(out);
            return Outcome::Complete;
        }
        if chunk::is_error(data) {
            return Outcome::UpstreamError;
        }
        let Ok(chat) = serde_json::from_slice::<ChatChunk>(data) else {
            return Outcome::Malformed;
        };
        self.open(out);
        if let Some(usage) = chat.usage {
            self.usage = Some(responses_usage(usage));
        }
        let Some(choice) = chat.choices.into_iter().find(|c| c.index == 0) else {
            return Outcome::Continue;
        };
        let delta = choice.delta;
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.close_call(out);
            self.text(&text, out);
        }
        if let Some(refusal) = delta.refusal.filter(|t| !t.is_empty()) {
            self.close_call(out);
            self.open_message(out);
            if let Some(message) = self.message.as_mut() {
                message
                    .refusal
                    .get_or_insert_with(String::new)
                    .push_str(&refusal);
            }
        }
        for piece in delta.tool_calls.into_iter().flatten() {
            let function = piece.function.unwrap_or_default();
            let same = self
                .call
                .as_ref()
                .is_some_and(|c| c.chat_index == piece.index);
            if !same {
                self.close_message(out);
                self.close_call(out);
                let call = Call {
                    chat_index: piece.index,
                    id: new_id("fc_"),
                    call_id: piece.id.unwrap_or_else(|| new_id("call_")),
                    name: function.name.unwrap_or_default(),
                    arguments: String::new(),
                    index: self.items.len(),
                };
                let item = json!({"type": "function_call", "id": call.id, "call_id": call.call_id, "name": call.name, "arguments": "", "status": "in_progress"});
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": call.index, "item": item}),
                );
                self.call = Some(call);
            }
            if let Some(arguments) = function.arguments.filter(|a| !a.is_empty()) {
                let Some(call) = self.call.as_mut() else {
                    continue;
                };
                call.arguments.push_str(&arguments);
                let data =
                    json!({"item_id": call.id, "output_index": call.index, "delta": arguments});
                self.pieces = self.pieces.saturating_add(1);
                self.emit(out, "response.function_call_arguments.delta", data);
            }
        }
        if let Some(finish) = choice.finish_reason {
            self.finish = Some(finish);
        }
        Outcome::Continue
    }

    /// The chat body ended without `[DONE]`: the response's last events when a choice had
    /// finished (the answer is whole), `false` when the stream was cut.
    pub fn finish(&mut self, out: &mut BytesMut) -> bool {
        if self.ended {
            return true;
        }
        if self.finish.is_none() {
            return false;
        }
        self.end(out);
        true
    }

    /// The `response.failed` that ends a stream broken with `message`.
    pub fn failed(&self, code: &str, message: &str) -> bytes::Bytes {
        let who = Identity {
            id: self.echo.id.clone(),
            model: self.echo.model.clone(),
            created_at: self.echo.created_at,
        };
        failed_event(self.sequence, &who, code, message)
    }

    fn open(&mut self, out: &mut BytesMut) {
        if self.opened {
            return;
        }
        self.opened = true;
        let response = self.echo.response(Status::InProgress, Vec::new(), None);
        self.emit(out, "response.created", json!({"response": response}));
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    fn open_message(&mut self, out: &mut BytesMut) {
        if self.message.is_some() {
            return;
        }
        let message = Message {
            id: new_id("msg_"),
            index: self.items.len(),
            text: String::new(),
            refusal: None,
        };
        let item = json!({"type": "message", "id": message.id, "status": "in_progress", "role": "assistant", "content": []});
        self.emit(
            out,
            "response.output_item.added",
            json!({"output_index": message.index, "item": item}),
        );
        let part = json!({"type": "output_text", "text": "", "annotations": []});
        self.emit(out, "response.content_part.added", json!({"item_id": message.id, "output_index": message.index, "content_index": 0, "part": part}));
        self.message = Some(message);
    }

    fn text(&mut self, text: &str, out: &mut BytesMut) {
        self.open_message(out);
        let Some(message) = self.message.as_mut() else {
            return;
        };
        message.text.push_str(text);
        let data = json!({"item_id": message.id, "output_index": message.index, "content_index": 0, "delta": text, "logprobs": []});
        self.pieces = self.pieces.saturating_add(1);
        self.emit(out, "response.output_text.delta", data);
    }

    fn close_message(&mut self, out: &mut BytesMut) {
        let Some(message) = self.message.take() else {
            return;
        };
        let done = json!({"item_id": message.id, "output_index": message.index, "content_index": 0, "text": message.text, "logprobs": []});
        self.emit(out, "response.output_text.done", done);
        let part = json!({"type": "output_text", "text": message.text, "annotations": []});
        let part = json!({"item_id": message.id, "output_index": message.index, "content_index": 0, "part": part});
        self.emit(out, "response.content_part.done", part);
        let item = message_item(&message.id, &message.text, message.refusal.as_deref());
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": message.index, "item": item}),
        );
        self.items.push(item);
    }

    fn close_call(&mut self, out: &mut BytesMut) {
        let Some(call) = self.call.take() else {
            return;
        };
        let data = json!({"item_id": call.id, "output_index": call.index, "name": call.name, "arguments": call.arguments});
        self.emit(out, "response.function_call_arguments.done", data);
        let item = function_call_item(&call.id, &call.call_id, &call.name, &call.arguments);
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": call.index, "item": item}),
        );
        self.items.push(item);
    }

    fn end(&mut self, out: &mut BytesMut) {
        self.open(out);
        self.close_message(out);
        self.close_call(out);
        self.ended = true;
        let status = status_of(self.finish.as_deref());
        let response = self.echo.response(status, self.items.clone(), self.usage);
        let name = match status {
            Status::Incomplete(_) => "response.incomplete",
            _ => "response.completed",
        };
        self.emit(out, name, json!({"response": response}));
    }

    /// Writes one event named `name`, numbered.
    fn emit(&mut self, out: &mut BytesMut, name: &str, mut data: Value) {
        if let Value::Object(fields) = &mut data {
            fields.insert("type".into(), json!(name));
            fields.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence = self.sequence.saturating_add(1);
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        // Writing a Value to memory cannot fail.
        let _ = serde_json::to_writer((&mut *out).writer(), &data);
        out.extend_from_slice(b"\n\n");
    }
}
