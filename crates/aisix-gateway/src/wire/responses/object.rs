//! The response object the gateway writes for a translated answer, whole or in a stream's
//! `response.*` events: its identity, status and output, the request's settings echoed as the
//! API does, and its usage.

use serde_json::{Map, Value, json};

use super::usage::ResponsesUsage;

/// What a translated response is: its identity and the request it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    /// The `model` the answer names.
    pub model: String,
    /// The Responses request (its settings are echoed).
    pub request: Map<String, Value>,
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
    /// Cut by the output cap (`max_output_tokens`) or a content filter.
    Incomplete(&'static str),
}

impl Echo {
    /// The response object with `status`, `output` and `usage`.
    pub fn response(
        &self,
        status: Status,
        output: Vec<Value>,
        usage: Option<ResponsesUsage>,
    ) -> Value {
        let request = &self.request;
        let echoed = |name: &str, default: Value| {
            request
                .get(name)
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default)
        };
        let (status, incomplete) = match status {
            Status::InProgress => ("in_progress", Value::Null),
            Status::Completed => ("completed", Value::Null),
            Status::Incomplete(reason) => ("incomplete", json!({"reason": reason})),
        };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": echoed("instructions", Value::Null),
            "max_output_tokens": echoed("max_output_tokens", Value::Null),
            "metadata": echoed("metadata", json!({})),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": echoed("parallel_tool_calls", json!(true)),
            "previous_response_id": echoed("previous_response_id", Value::Null),
            "reasoning": echoed("reasoning", json!({"effort": null, "summary": null})),
            "store": echoed("store", json!(true)),
            "temperature": echoed("temperature", json!(1.0)),
            "text": echoed("text", json!({"format": {"type": "text"}})),
            "tool_choice": echoed("tool_choice", json!("auto")),
            "tools": echoed("tools", json!([])),
            "top_p": echoed("top_p", json!(1.0)),
            "truncation": echoed("truncation", json!("disabled")),
            "usage": usage,
            "user": echoed("user", Value::Null),
        })
    }
}

/// The status a chat `finish_reason` gives a response.
pub fn status_of(finish_reason: Option<&str>) -> Status {
    match finish_reason {
        Some("length") => Status::Incomplete("max_output_tokens"),
        Some("content_filter") => Status::Incomplete("content_filter"),
        _ => Status::Completed,
    }
}

/// A finished message item holding `text` (and a `refusal`, if any).
pub fn message_item(id: &str, text: &str, refusal: Option<&str>) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() || refusal.is_none() {
        content.push(json!({"type": "output_text", "text": text, "annotations": []}));
    }
    if let Some(refusal) = refusal {
        content.push(json!({"type": "refusal", "refusal": refusal}));
    }
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": content})
}

/// A finished function call item.
pub fn function_call_item(id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
}

/// A reasoning item whose summary is `text` (what a chat model streamed as its reasoning).
pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}
