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
//! and `stop_reason: tool_use`; otherwise [`REPLY_TEXT`](crate::mock::openai::REPLY_TEXT) in the
//! pieces of [`REPLY_PIECES`], cut at the first of the request's
//! `stop_sequences` it contains (`stop_sequence`) or after `max_tokens` pieces (`max_tokens`),
//! else `end_turn`. Usage: `input_tokens` counts the words of the system prompt and of the
//! messages' text outside blocks marked `cache_control`, whose words count as
//! `cache_creation_input_tokens` instead (at least 1 input token in all); `output_tokens` is the
//! number of pieces (1 for a tool call). count_tokens answers the sum of all prompt words.

use http::StatusCode;
use serde_json::{Map, Value, json};

mod frames;
mod validate;

use super::dialect::Answer;
use super::openai::{REPLY_PIECES, count_tokens, json_answer};
use super::record::RecordedRequest;

pub use frames::{
    error_event, message_body, message_delta, message_start, message_stop, ping, text_block,
    tool_use_block,
};
use validate::validate;

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
/// Arguments a tool call fills in from its JSON schema: each property a value of its type.
pub(crate) fn input_for(schema: Option<&Value>) -> Value {
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
        terminated: true,
    }
}

fn models() -> Value {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-09-29T00:00:00Z"}))
        .collect();
    json!({"data": data, "has_more": false, "first_id": MODELS[0], "last_id": MODELS[MODELS.len() - 1]})
}
