//! The mock's default answers in Anthropic's dialect, deterministic and as strict as the real
//! API about what it accepts: `POST /v1/messages` (JSON, or SSE in Anthropic's event order),
//! `POST /v1/messages/count_tokens`, `GET /v1/models`, and Anthropic's error envelope. Also
//! builders for scripting Anthropic answers and streams.
//!
//! Every request needs a key, as `x-api-key` or `Authorization: Bearer` (401 otherwise), and
//! `anthropic-version` (400 otherwise).
//! A messages request is checked as Anthropic checks it: `max_tokens`, roles, block types,
//! non-empty text blocks, tool ids, `temperature` and `top_p` in 0..=1, tool schemas, and that
//! each `tool_use` is answered by a `tool_result` in the next message and each `tool_result`
//! answers a `tool_use` of the previous one. The first violation is answered with 400
//! `invalid_request_error`, its message naming the path (`messages.1.content.0.text: …`).
//!
//! The answer: with `tool_choice` `any` (the first tool) or `tool` (that tool), one `tool_use`
//! block whose input fills the schema's properties (`"mock"`, `1`, `true`, `[]`, `{}` by type)
//! and `stop_reason: tool_use`; otherwise [`REPLY_TEXT`](super::openai::REPLY_TEXT) in the
//! pieces of [`REPLY_PIECES`](super::openai::REPLY_PIECES), cut at the first of the request's
//! `stop_sequences` it contains (`stop_sequence`) or after `max_tokens` pieces (`max_tokens`),
//! else `end_turn`. Usage: `input_tokens` counts the words of the system prompt and of the
//! messages' text outside blocks marked `cache_control`, whose words count as
//! `cache_creation_input_tokens` instead (at least 1 input token in all); `output_tokens` is the
//! number of pieces (1 for a tool call). count_tokens answers the sum of all prompt words.

use http::StatusCode;
use serde_json::{Map, Value, json};

use super::dialect::Answer;
use super::openai::{REPLY_PIECES, count_tokens, json_answer};
use super::record::RecordedRequest;
use super::reply::Frame;

/// Models listed by `GET /v1/models`.
pub const MODELS: [&str; 2] = ["claude-sonnet-4-5", "claude-haiku-4-5"];

/// The default answer to `req`; `seq` (the request's ordinal) makes message ids unique.
pub(crate) fn answer(req: &RecordedRequest, seq: usize) -> Answer {
    let bearer = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "));
    if req.header("x-api-key").or(bearer).is_none_or(str::is_empty) {
        return error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "x-api-key header is required",
        );
    }
    if req.header("anthropic-version").is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/v1/messages") => with_request(req, true, |body| message(body, seq)),
        ("POST", "/v1/messages/count_tokens") => with_request(req, false, |body| {
            let (input, cached) = prompt_words(body);
            json_answer(StatusCode::OK, json!({"input_tokens": input + cached}))
        }),
        ("GET", "/v1/models") => json_answer(StatusCode::OK, models()),
        (method, path) => error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("Not found: {method} {path}"),
        ),
    }
}

/// Anthropic's error envelope.
pub fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

fn error(status: StatusCode, error_type: &str, message: &str) -> Answer {
    json_answer(status, error_body(error_type, message))
}

fn with_request(
    req: &RecordedRequest,
    messages_endpoint: bool,
    answer: impl FnOnce(&Value) -> Answer,
) -> Answer {
    let Ok(body) = req.body_json() else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "There was an error parsing the body of your request as JSON.",
        );
    };
    match validate(&body, messages_endpoint) {
        Ok(()) => answer(&body),
        Err(message) => error(StatusCode::BAD_REQUEST, "invalid_request_error", &message),
    }
}

/// The first way `body` breaks the Messages API's rules, as Anthropic words it.
fn validate(body: &Value, messages_endpoint: bool) -> Result<(), String> {
    let body = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    match body.get("model") {
        Some(Value::String(model)) if !model.is_empty() => {}
        _ => return Err("model: Field required".into()),
    }
    if messages_endpoint {
        match body.get("max_tokens") {
            None => return Err("max_tokens: Field required".into()),
            Some(v) if v.as_u64().is_none_or(|n| n < 1) => {
                return Err("max_tokens: Input should be an integer of at least 1".into());
            }
            Some(_) => {}
        }
    }
    for field in ["temperature", "top_p"] {
        if let Some(value) = body.get(field)
            && !value.as_f64().is_some_and(|v| (0.0..=1.0).contains(&v))
        {
            return Err(format!("{field}: Input should be a number between 0 and 1"));
        }
    }
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                if block.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(format!("system.{i}.type: Input should be 'text'"));
                }
                non_empty_text(block, &format!("system.{i}"))?;
            }
        }
        Some(_) => return Err("system: Input should be a valid string or list".into()),
    }
    if let Some(stops) = body.get("stop_sequences")
        && !stops
            .as_array()
            .is_some_and(|s| s.iter().all(Value::is_string))
    {
        return Err("stop_sequences: Input should be a valid list of strings".into());
    }
    validate_tools(body)?;
    validate_messages(body.get("messages"))
}

fn validate_tools(body: &Map<String, Value>) -> Result<(), String> {
    if let Some(tools) = body.get("tools") {
        let tools = tools
            .as_array()
            .ok_or("tools: Input should be a valid list")?;
        for (i, tool) in tools.iter().enumerate() {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!(
                    "tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                ));
            }
            let custom = tool
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "custom");
            if custom
                && tool
                    .get("input_schema")
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    != Some("object")
            {
                return Err(format!(
                    "tools.{i}.input_schema.type: Input should be 'object'"
                ));
            }
        }
    }
    if let Some(choice) = body.get("tool_choice") {
        match choice.get("type").and_then(Value::as_str) {
            Some("auto" | "any" | "none") => {}
            Some("tool") if choice.get("name").is_some_and(Value::is_string) => {}
            Some("tool") => return Err("tool_choice.tool.name: Field required".into()),
            _ => {
                return Err(
                    "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
                        .into(),
                );
            }
        }
    }
    Ok(())
}

fn validate_messages(messages: Option<&Value>) -> Result<(), String> {
    let messages = match messages {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(Value::Array(_)) => return Err("messages: at least one message is required".into()),
        _ => return Err("messages: Field required".into()),
    };
    // Ids of the previous assistant message's tool_use blocks, still to be answered.
    let mut pending: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        let assistant = match role {
            Some("user") => false,
            Some("assistant") => true,
            _ => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ));
            }
        };
        let blocks: &[Value] = match message.get("content") {
            Some(Value::String(_)) => &[],
            Some(Value::Array(blocks)) => blocks,
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let mut answered: Vec<&str> = Vec::new();
        let mut calls: Vec<&str> = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let path = format!("messages.{i}.content.{j}");
            match (block.get("type").and_then(Value::as_str), assistant) {
                (Some("text"), _) => non_empty_text(block, &path)?,
                (Some("image" | "document"), false) => {
                    if !block.get("source").is_some_and(Value::is_object) {
                        return Err(format!("{path}.source: Field required"));
                    }
                }
                (Some("tool_result"), false) => {
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if !pending.contains(&id) {
                        return Err(format!(
                            "{path}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                    answered.push(id);
                }
                (Some("tool_use"), true) => {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                    if id.is_empty()
                        || !id
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        return Err(format!(
                            "{path}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                        ));
                    }
                    if !block.get("input").is_some_and(Value::is_object) {
                        return Err(format!("{path}.input: Input should be a valid dictionary"));
                    }
                    calls.push(id);
                }
                (Some("thinking" | "redacted_thinking"), true) => {}
                (kind, _) => {
                    return Err(format!(
                        "{path}.type: Input tag '{}' is not allowed in a {} message",
                        kind.unwrap_or("null"),
                        role.unwrap_or_default()
                    ));
                }
            }
        }
        let unanswered: Vec<&str> = pending
            .iter()
            .copied()
            .filter(|id| !answered.contains(id))
            .collect();
        if !unanswered.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                unanswered.join(", ")
            ));
        }
        pending = calls;
    }
    if !pending.is_empty() {
        return Err(format!(
            "messages: `tool_use` ids were found without `tool_result` blocks immediately after: {}.",
            pending.join(", ")
        ));
    }
    Ok(())
}

fn non_empty_text(block: &Value, path: &str) -> Result<(), String> {
    match block.get("text").and_then(Value::as_str) {
        Some("") => Err(format!(
            "{path}.text: text content blocks must be non-empty"
        )),
        Some(_) => Ok(()),
        None => Err(format!("{path}.text: Field required")),
    }
}

/// Words of the prompt: (outside cached blocks, inside blocks marked `cache_control`).
fn prompt_words(body: &Value) -> (usize, usize) {
    let mut plain = 0;
    let mut cached = 0;
    let mut count = |value: &Value| match value {
        Value::Array(blocks) => {
            for block in blocks {
                if block.get("cache_control").is_some() {
                    cached += count_tokens(block);
                } else {
                    plain += count_tokens(block);
                }
            }
        }
        other => plain += count_tokens(other),
    };
    if let Some(system) = body.get("system") {
        count(system);
    }
    for message in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(content) = message.get("content") {
            count(content);
        }
    }
    (plain, cached)
}

/// What the default answer says.
enum Said {
    Text {
        pieces: Vec<String>,
        stop_reason: &'static str,
        stop_sequence: Option<String>,
    },
    Tool {
        name: String,
        input: Value,
    },
}

fn plan(body: &Value) -> Said {
    let tools: &[Value] = body
        .get("tools")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let choice = body.get("tool_choice");
    let chosen = match choice.and_then(|c| c.get("type")).and_then(Value::as_str) {
        Some("any") => tools.first(),
        Some("tool") => {
            let name = choice.and_then(|c| c.get("name"));
            tools.iter().find(|t| t.get("name") == name)
        }
        _ => None,
    };
    if let Some(tool) = chosen {
        return Said::Tool {
            name: tool
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            input: input_for(tool.get("input_schema")),
        };
    }

    let max_pieces = body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let stops: Vec<&str> = body
        .get("stop_sequences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    let mut pieces = Vec::new();
    let mut text = String::new();
    for piece in REPLY_PIECES {
        if pieces.len() == max_pieces {
            return Said::Text {
                pieces,
                stop_reason: "max_tokens",
                stop_sequence: None,
            };
        }
        let before = text.len();
        text.push_str(piece);
        let hit = stops
            .iter()
            .filter_map(|stop| text.find(stop).map(|at| (at, *stop)))
            .min();
        if let Some((at, stop)) = hit {
            if at > before {
                pieces.push(text[before..at].to_owned());
            }
            return Said::Text {
                pieces,
                stop_reason: "stop_sequence",
                stop_sequence: Some(stop.to_owned()),
            };
        }
        pieces.push((*piece).to_owned());
    }
    Said::Text {
        pieces,
        stop_reason: "end_turn",
        stop_sequence: None,
    }
}

/// A tool input that fills the schema's properties with a value of each one's type.
fn input_for(schema: Option<&Value>) -> Value {
    let properties = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let input: Map<String, Value> = properties
        .into_iter()
        .flatten()
        .map(|(name, property)| {
            let value = match property.get("type").and_then(Value::as_str) {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("mock"),
            };
            (name.clone(), value)
        })
        .collect();
    Value::Object(input)
}

fn message(body: &Value, seq: usize) -> Answer {
    let id = format!("msg_mock_{seq}");
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (plain, cached) = prompt_words(body);
    let usage = |output_tokens: usize| {
        let mut usage = json!({
            "input_tokens": plain.max(usize::from(plain + cached == 0)),
            "cache_creation_input_tokens": cached,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        });
        if cached == 0
            && let Some(usage) = usage.as_object_mut()
        {
            usage.remove("cache_creation_input_tokens");
            usage.remove("cache_read_input_tokens");
        }
        usage
    };
    let said = plan(body);
    let tool_id = format!("toolu_mock_{seq}");
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    if !stream {
        let (content, stop_reason, stop_sequence, output) = match &said {
            Said::Text {
                pieces,
                stop_reason,
                stop_sequence,
            } => (
                json!([{"type": "text", "text": pieces.concat()}]),
                *stop_reason,
                stop_sequence.clone(),
                pieces.len(),
            ),
            Said::Tool { name, input } => (
                json!([{"type": "tool_use", "id": tool_id, "name": name, "input": input}]),
                "tool_use",
                None,
                1,
            ),
        };
        return json_answer(
            StatusCode::OK,
            message_body(
                &id,
                model,
                content,
                stop_reason,
                stop_sequence,
                usage(output),
            ),
        );
    }

    let mut frames = vec![message_start(&id, model, usage(1)), ping()];
    let (stop_reason, stop_sequence, output) = match said {
        Said::Text {
            pieces,
            stop_reason,
            stop_sequence,
        } => {
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            frames.extend(text_block(0, &refs));
            (stop_reason, stop_sequence, pieces.len())
        }
        Said::Tool { name, input } => {
            let json = input.to_string();
            let (head, tail) = json.split_at(json.len() / 2);
            frames.extend(tool_use_block(0, &tool_id, &name, &[head, tail]));
            ("tool_use", None, 1)
        }
    };
    frames.push(message_delta(stop_reason, stop_sequence.as_deref(), output));
    Answer {
        status: StatusCode::OK,
        content_type: "text/event-stream",
        chunks: frames.into_iter().map(|f| f.bytes).collect(),
        sse: true,
    }
}

fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-09-29T00:00:00Z"}))
        .collect();
    json!({"data": data, "has_more": false, "first_id": MODELS[0], "last_id": MODELS[MODELS.len() - 1]})
}

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
/// [`Reply::sse`](super::Reply::sse) on an Anthropic mock ends with unless it is cut.
pub fn message_stop() -> Frame {
    Frame::event("message_stop", json!({"type": "message_stop"}))
}

/// An `error` event, as Anthropic ends a stream that fails (`overloaded_error`, …).
pub fn error_event(error_type: &str, message: &str) -> Frame {
    Frame::event("error", error_body(error_type, message))
}
