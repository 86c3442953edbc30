//! The mock's default answers, shaped like OpenAI's and deterministic: chat and legacy
//! completions (JSON or SSE), embeddings, the model list, and OpenAI-style errors.
//!
//! With `tool_choice` `required` (the first tool) or a named function (that tool), a chat
//! answer is one tool call (`call_mock_{seq}`) whose arguments give each property of the
//! tool's schema a value of its type, with `finish_reason: tool_calls`. With a
//! `response_format` of type `json_schema`, the answer's content is a JSON object that fills
//! the schema the same way.
//!
//! A request whose last message is the assistant's gets a new turn, the same answer as any
//! other, as OpenAI's chat models give: they do not continue a trailing assistant message.
//! A test that needs a server that continues one (vLLM with `continue_final_message`,
//! DeepSeek with `prefix`) scripts that server's answer.
//! A reasoning model (`o1*`, `o3*`, `o4*`, `gpt-5*`) refuses `max_tokens` with OpenAI's 400.
//!
//! Usage rule: `prompt_tokens` is the number of whitespace-separated words in the prompt text
//! (message contents, `prompt` or `input`; one per token id for pre-tokenized input), at least 1;
//! `completion_tokens` is the number of pieces of [`REPLY_PIECES`].

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use super::dialect::Answer;
use super::record::RecordedRequest;

/// The assistant's answer, split the way the default stream sends it: one piece per delta.
pub const REPLY_PIECES: [&str; 5] = ["Hello", " from", " the", " mock", " provider."];
/// The assistant's whole answer in a non-streaming response.
pub const REPLY_TEXT: &str = "Hello from the mock provider.";
/// Length of every embedding vector.
pub const EMBEDDING_DIM: usize = 8;
/// Models listed by `GET /v1/models`.
pub const MODELS: [&str; 3] = ["gpt-4o", "gpt-4o-mini", "text-embedding-3-small"];
/// The `created` timestamp of every object, fixed so that answers are deterministic.
pub const CREATED: u64 = 1_700_000_000;

const SYSTEM_FINGERPRINT: &str = "fp_mock";

/// The default answer to `req`; `seq` (the request's ordinal) makes response ids unique.
pub(crate) fn answer(req: &RecordedRequest, seq: usize, kept: &super::responses::Kept) -> Answer {
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/v1/chat/completions") => with_body(req, |body, model| chat(body, model, seq)),
        ("POST", "/v1/completions") => with_body(req, |body, model| completion(body, model, seq)),
        ("POST", "/v1/embeddings") => with_body(req, embeddings),
        ("POST", "/v1/responses") => match req.body_json() {
            Ok(body) => super::responses::answer(&body, seq, kept),
            Err(_) => error(
                StatusCode::BAD_REQUEST,
                None,
                "We could not parse the JSON body of your request.",
            ),
        },
        ("GET", "/v1/models") => json_answer(StatusCode::OK, models()),
        ("GET" | "DELETE", path) if path.starts_with("/v1/responses/") => {
            super::responses::kept_answer(req, kept)
        }
        (method, path) => error(
            StatusCode::NOT_FOUND,
            Some("unknown_url"),
            &format!("Unknown request URL: {method} {path}. Please check the URL for typos."),
        ),
    }
}

/// The OpenAI error envelope.
pub(crate) fn error_body(error_type: &str, code: Option<&str>, message: &str) -> Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
}

fn with_body(req: &RecordedRequest, answer: impl FnOnce(&Value, &str) -> Answer) -> Answer {
    let Ok(body) = req.body_json() else {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "We could not parse the JSON body of your request.",
        );
    };
    match body.get("model").and_then(Value::as_str) {
        Some(model) => answer(&body, model),
        None => error(
            StatusCode::BAD_REQUEST,
            None,
            "you must provide a model parameter",
        ),
    }
}

/// OpenAI's reasoning models (o1, o3, o4, gpt-5) refuse `max_tokens`, as OpenAI does.
fn reasoning_model(model: &str) -> bool {
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|f| model.starts_with(f))
}

fn chat(body: &Value, model: &str, seq: usize) -> Answer {
    if reasoning_model(model) && body.get("max_tokens").is_some_and(|v| !v.is_null()) {
        return error(
            StatusCode::BAD_REQUEST,
            Some("unsupported_parameter"),
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
        );
    }
    let id = format!("chatcmpl-mock-{seq}");
    let prompt_tokens = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |messages| {
            messages
                .iter()
                .filter_map(|m| m.get("content"))
                .map(count_tokens)
                .sum()
        });
    let usage = usage(prompt_tokens, REPLY_PIECES.len());
    let call = tool_call(body, seq);
    let structured = structured_reply(body);
    if !is_stream(body) {
        let (message, finish) = match &call {
            Some(call) => (
                json!({"role": "assistant", "content": null, "tool_calls": [call], "refusal": null}),
                "tool_calls",
            ),
            None => (
                json!({"role": "assistant", "content": structured.as_deref().unwrap_or(REPLY_TEXT), "refusal": null}),
                "stop",
            ),
        };
        return json_answer(
            StatusCode::OK,
            json!({
                "id": id,
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{
                    "index": 0,
                    "message": message,
                    "logprobs": null,
                    "finish_reason": finish,
                }],
                "usage": usage,
            }),
        );
    }
    let include_usage = includes_usage(body);
    let chunk = |delta: Value, finish_reason: Value| {
        let mut chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(mut call) = call {
        // The name first, then the arguments in two pieces, as OpenAI streams them.
        let arguments = call["function"]["arguments"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (head, tail) = arguments.split_at(arguments.len() / 2);
        call["index"] = json!(0);
        call["function"]["arguments"] = json!("");
        events.push(chunk(json!({"tool_calls": [call]}), Value::Null));
        for piece in [head, tail] {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
        events.push(chunk(json!({}), json!("tool_calls")));
    } else if let Some(structured) = structured {
        events.push(chunk(json!({"content": structured}), Value::Null));
        events.push(chunk(json!({}), json!("stop")));
    } else {
        events.extend(
            REPLY_PIECES
                .iter()
                .map(|piece| chunk(json!({"content": piece}), Value::Null)),
        );
        events.push(chunk(json!({}), json!("stop")));
    }
    if include_usage {
        events.push(usage_chunk(&id, "chat.completion.chunk", model, usage));
    }
    sse_answer(events)
}

/// The answer to a `response_format` of type `json_schema`: a JSON object filling the schema
/// (as a model bound to it answers), if the request asks for one.
fn structured_reply(body: &Value) -> Option<String> {
    let format = body.get("response_format")?;
    if format.get("type")? != "json_schema" {
        return None;
    }
    let schema = format.pointer("/json_schema/schema");
    Some(super::anthropic::input_for(schema).to_string())
}

/// The tool call a chat request forces with `tool_choice`, if it does.
fn tool_call(body: &Value, seq: usize) -> Option<Value> {
    let tools = body.get("tools").and_then(Value::as_array)?;
    let choice = body.get("tool_choice")?;
    let tool = if choice == "required" {
        tools.first()?
    } else {
        let name = choice.pointer("/function/name")?;
        tools
            .iter()
            .find(|t| t.pointer("/function/name") == Some(name))?
    };
    let arguments = super::anthropic::input_for(tool.pointer("/function/parameters"));
    Some(json!({
        "id": format!("call_mock_{seq}"),
        "type": "function",
        "function": {"name": tool.pointer("/function/name")?, "arguments": arguments.to_string()},
    }))
}

fn completion(body: &Value, model: &str, seq: usize) -> Answer {
    let id = format!("cmpl-mock-{seq}");
    let prompt_tokens = body.get("prompt").map_or(0, count_tokens);
    let usage = usage(prompt_tokens, REPLY_PIECES.len());
    let object = |text: &str, finish_reason: Value| {
        json!({
            "id": id,
            "object": "text_completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{
                "text": text,
                "index": 0,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    };
    if !is_stream(body) {
        let mut object = object(REPLY_TEXT, json!("stop"));
        object["usage"] = usage;
        return json_answer(StatusCode::OK, object);
    }
    let mut events: Vec<Value> = REPLY_PIECES
        .iter()
        .map(|piece| object(piece, Value::Null))
        .collect();
    events.push(object("", json!("stop")));
    if includes_usage(body) {
        events.push(usage_chunk(&id, "text_completion", model, usage));
    }
    sse_answer(events)
}

/// The last event of a stream asked for usage: no choices, only the usage.
fn usage_chunk(id: &str, object: &str, model: &str, usage: Value) -> Value {
    json!({
        "id": id,
        "object": object,
        "created": CREATED,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [],
        "usage": usage,
    })
}

fn embeddings(body: &Value, model: &str) -> Answer {
    // One input is a string or a list of token ids; a batch is a list of either.
    let inputs: Vec<&Value> = match body.get("input") {
        Some(Value::String(_)) => body.get("input").into_iter().collect(),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            body.get("input").into_iter().collect()
        }
        Some(Value::Array(items)) => items.iter().collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                None,
                "'input' is a required property",
            );
        }
    };
    let prompt_tokens: usize = inputs.iter().copied().map(count_tokens).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            json!({"object": "embedding", "index": index, "embedding": embedding(input)})
        })
        .collect();
    let prompt_tokens = prompt_tokens.max(1);
    json_answer(
        StatusCode::OK,
        json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }),
    )
}

fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": CREATED, "owned_by": "mock"}))
        .collect();
    json!({"object": "list", "data": data})
}

fn error(status: StatusCode, code: Option<&str>, message: &str) -> Answer {
    json_answer(status, error_body("invalid_request_error", code, message))
}

pub(crate) fn json_answer(status: StatusCode, body: Value) -> Answer {
    Answer {
        status,
        content_type: "application/json",
        chunks: vec![Bytes::from(body.to_string())],
        sse: false,
        terminated: true,
    }
}

fn sse_answer(events: Vec<Value>) -> Answer {
    Answer {
        status: StatusCode::OK,
        content_type: "text/event-stream",
        chunks: events
            .into_iter()
            .map(|event| Bytes::from(format!("data: {event}\n\n")))
            .collect(),
        sse: true,
        terminated: true,
    }
}

fn is_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

fn includes_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true)
}

fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    let prompt_tokens = prompt_tokens.max(1);
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// Words in a string, in the `text` of content parts, recursively in arrays; one per token id.
pub(crate) fn count_tokens(value: &Value) -> usize {
    match value {
        Value::String(text) => text.split_whitespace().count(),
        Value::Number(_) => 1,
        Value::Array(items) => items.iter().map(count_tokens).sum(),
        Value::Object(part) => part.get("text").map_or(0, count_tokens),
        Value::Null | Value::Bool(_) => 0,
    }
}

/// A deterministic vector in [-1, 1] derived from the input (FNV-1a per dimension).
fn embedding(input: &Value) -> Vec<f64> {
    let text = match input {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    (0..EMBEDDING_DIM)
        .map(|dim| {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ dim as u64;
            for byte in text.bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            // Thousandths keep the JSON short: k / 1000.0 prints as exactly three decimals.
            let thousandths = (hash % 2001) as i32 - 1000;
            f64::from(thousandths) / 1000.0
        })
        .collect()
}
