//! Builders for scripting Anthropic answers: a complete message body, and the events of a
//! stream in Anthropic's framing (`event: name` + `data: json`).

use serde_json::{Value, json};

use super::super::reply::Frame;
use super::error_body;

/// A complete message body: `content` is the array of blocks, `usage` the usage object.
pub fn message_body(
    id: &str,
    model: &str,
    content: Value,
    stop_reason: &str,
    stop_sequence: Option<String>,
    usage: Value,
) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    })
}

/// `message_start`, the first event of a stream; `usage` is its usage object.
pub fn message_start(id: &str, model: &str, usage: Value) -> Frame {
    Frame::event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": null, "stop_sequence": null, "usage": usage,
        }}),
    )
}

/// `ping`.
pub fn ping() -> Frame {
    Frame::event("ping", json!({"type": "ping"}))
}

/// A text block at `index`: its start, one `text_delta` per piece, its stop.
pub fn text_block(index: usize, pieces: &[&str]) -> Vec<Frame> {
    let mut frames = vec![Frame::event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
    )];
    frames.extend(pieces.iter().map(|text| {
        Frame::event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        )
    }));
    frames.push(block_stop(index));
    frames
}

/// A `tool_use` block at `index`: its start, one `input_json_delta` per piece of the input's
/// JSON text, its stop.
pub fn tool_use_block(index: usize, id: &str, name: &str, json_pieces: &[&str]) -> Vec<Frame> {
    let mut frames = vec![Frame::event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    )];
    frames.extend(json_pieces.iter().map(|partial| {
        Frame::event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": partial}}),
        )
    }));
    frames.push(block_stop(index));
    frames
}

fn block_stop(index: usize) -> Frame {
    Frame::event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

/// `message_delta`: why the answer stopped and its output tokens.
pub fn message_delta(
    stop_reason: &str,
    stop_sequence: Option<&str>,
    output_tokens: usize,
) -> Frame {
    Frame::event(
        "message_delta",
        json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": output_tokens}}),
    )
}

/// `message_stop`, the last event of a complete stream: what a stream scripted with
/// [`Reply::sse`](crate::mock::Reply::sse) on an Anthropic mock ends with unless it is cut.
pub fn message_stop() -> Frame {
    Frame::event("message_stop", json!({"type": "message_stop"}))
}

/// An `error` event, as Anthropic ends a stream that fails (`overloaded_error`, …).
pub fn error_event(error_type: &str, message: &str) -> Frame {
    Frame::event("error", error_body(error_type, message))
}
