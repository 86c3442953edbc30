//! The mock's default answers to OpenAI's Responses API (`POST /v1/responses`), deterministic
//! and shaped as the API reference documents them: a response object with `output` items, or
//! its stream in the reference's order (`response.created`, `response.in_progress`, each
//! item's `output_item.added` … `output_item.done`, `response.completed`), each event numbered
//! by `sequence_number`, with no `[DONE]` after it.
//!
//! The answer: with `tool_choice` `required` (the first function tool) or naming a function,
//! one `function_call` item (`call_mock_{seq}`) whose arguments fill the tool's schema by type;
//! with `text.format` `json_schema`, one message whose text is a JSON object filling that
//! schema; otherwise [`REPLY_TEXT`](super::openai::REPLY_TEXT) in [`REPLY_PIECES`]. Usage:
//! `input_tokens` counts the words of `instructions` and of the input's text (at least 1),
//! `output_tokens` the pieces (1 for a tool call). `previous_response_id` is echoed; like the
//! real API a request must have `model` and `input` (400 otherwise).
//!
//! Like the API, an answer is kept unless the request says `store: false`: `GET
//! /v1/responses/{id}` answers it, `GET /v1/responses/{id}/input_items` lists its input items
//! (`order` `desc` unless `asc`, `limit` 20 unless given), `DELETE` forgets it
//! (`{"id", "object": "response", "deleted": true}`), and an id not kept is 404 with the API's
//! message.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use http::StatusCode;
use serde_json::{Value, json};

use super::dialect::Answer;
use super::openai::{CREATED, REPLY_PIECES, REPLY_TEXT, count_tokens, error_body, json_answer};
use super::record::RecordedRequest;

/// The answer to a Responses request `body`; `seq` makes ids unique.
pub(crate) fn answer(body: &Value, seq: usize, kept: &Kept) -> Answer {
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return invalid("Missing required parameter: 'model'.", "model");
    };
    let Some(input) = body.get("input") else {
        return invalid("Missing required parameter: 'input'.", "input");
    };
    let input_tokens =
        (count_input(input) + body.get("instructions").map_or(0, count_tokens)).max(1);
    let id = format!("resp_mock_{seq}");
    let item = output_item(body, seq);
    let output_tokens = match item["type"].as_str() {
        Some("function_call") => 1,
        _ => REPLY_PIECES.len(),
    };
    let usage = json!({
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    });
    let response = |status: &str, output: Value, usage: Value| {
        json!({
            "id": id,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": body.get("instructions").cloned().unwrap_or(Value::Null),
            "max_output_tokens": body.get("max_output_tokens").cloned().unwrap_or(Value::Null),
            "model": model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
            "previous_response_id": body.get("previous_response_id").cloned().unwrap_or(Value::Null),
            "reasoning": {"effort": null, "summary": null},
            "store": body.get("store").cloned().unwrap_or(json!(true)),
            "temperature": body.get("temperature").cloned().unwrap_or(json!(1.0)),
            "text": body.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})),
            "tool_choice": body.get("tool_choice").cloned().unwrap_or(json!("auto")),
            "tools": body.get("tools").cloned().unwrap_or(json!([])),
            "top_p": body.get("top_p").cloned().unwrap_or(json!(1.0)),
            "truncation": "disabled",
            "usage": usage,
            "user": null,
            "metadata": {},
        })
    };
    if body.get("store") != Some(&Value::Bool(false)) {
        let completed = response("completed", json!([item.clone()]), usage.clone());
        kept.keep(&id, completed, input_items(input, seq));
    }
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return json_answer(StatusCode::OK, response("completed", json!([item]), usage));
    }
    let mut events = Vec::new();
    let mut push = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(events.len());
        events.push(format!("event: {name}\ndata: {data}\n\n"));
    };
    let opening = response("in_progress", json!([]), Value::Null);
    push("response.created", json!({"response": opening}));
    push("response.in_progress", json!({"response": opening}));
    let item_id = item["id"].clone();
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    if item["type"] == "function_call" {
        added["arguments"] = json!("");
        push(
            "response.output_item.added",
            json!({"output_index": 0, "item": added}),
        );
        let arguments = item["arguments"].as_str().unwrap_or_default();
        push(
            "response.function_call_arguments.delta",
            json!({"item_id": item_id, "output_index": 0, "delta": arguments}),
        );
        push(
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": 0, "arguments": arguments}),
        );
    } else {
        added["content"] = json!([]);
        push(
            "response.output_item.added",
            json!({"output_index": 0, "item": added}),
        );
        let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        let with = |mut base: Value, key: &str, value: Value| {
            base[key] = value;
            base
        };
        let empty = json!({"type": "output_text", "text": "", "annotations": []});
        push(
            "response.content_part.added",
            with(at.clone(), "part", empty),
        );
        let text = item["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let pieces: Vec<String> = if text == REPLY_TEXT {
            REPLY_PIECES.iter().map(|p| (*p).to_owned()).collect()
        } else {
            vec![text.clone()]
        };
        for piece in pieces {
            let delta = with(at.clone(), "delta", json!(piece));
            push(
                "response.output_text.delta",
                with(delta, "logprobs", json!([])),
            );
        }
        let done = with(at.clone(), "text", json!(text));
        push(
            "response.output_text.done",
            with(done, "logprobs", json!([])),
        );
        push(
            "response.content_part.done",
            with(at, "part", item["content"][0].clone()),
        );
    }
    push(
        "response.output_item.done",
        json!({"output_index": 0, "item": item}),
    );
    let completed = response("completed", json!([item]), usage);
    push("response.completed", json!({"response": completed}));
    Answer {
        status: StatusCode::OK,
        content_type: "text/event-stream",
        chunks: events.into_iter().map(Into::into).collect(),
        sse: true,
        terminated: false,
    }
}

/// The words of an input: a string, or its items' text content.
fn count_input(input: &Value) -> usize {
    match input {
        Value::Array(items) => items
            .iter()
            .map(|item| match item.get("content") {
                Some(content) => count_tokens(content),
                None => item.get("output").map_or(0, count_tokens),
            })
            .sum(),
        other => count_tokens(other),
    }
}

/// The one output item: a forced function call, a JSON answer, or the reply text.
fn output_item(body: &Value, seq: usize) -> Value {
    if let Some(tool) = forced_tool(body) {
        let arguments = super::anthropic::input_for(tool.get("parameters"));
        return json!({
            "type": "function_call",
            "id": format!("fc_mock_{seq}"),
            "call_id": format!("call_mock_{seq}"),
            "name": tool.get("name").cloned().unwrap_or(Value::Null),
            "arguments": arguments.to_string(),
            "status": "completed",
        });
    }
    let text = match body.pointer("/text/format/type").and_then(Value::as_str) {
        Some("json_schema") => {
            super::anthropic::input_for(body.pointer("/text/format/schema")).to_string()
        }
        _ => REPLY_TEXT.to_owned(),
    };
    json!({
        "type": "message",
        "id": format!("msg_mock_{seq}"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// The function tool `tool_choice` forces, if it forces one.
fn forced_tool(body: &Value) -> Option<&Value> {
    let tools = body.get("tools").and_then(Value::as_array)?;
    let functions = || {
        tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
    };
    match body.get("tool_choice")? {
        Value::String(choice) if choice == "required" => functions().next(),
        Value::Object(choice) => {
            let name = choice.get("name")?;
            functions().find(|t| t.get("name") == Some(name))
        }
        _ => None,
    }
}

fn invalid(message: &str, param: &str) -> Answer {
    let mut body = error_body("invalid_request_error", None, message);
    body["error"]["param"] = json!(param);
    json_answer(StatusCode::BAD_REQUEST, body)
}

/// The answers a mock keeps, by id: the response and its input items.
// shared: kept by the worker that answered, read by whichever answers the next request.
#[derive(Default)]
pub(crate) struct Kept(Mutex<HashMap<String, (Value, Vec<Value>)>>);

impl Kept {
    fn keep(&self, id: &str, response: Value, input: Vec<Value>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), (response, input));
    }
}

/// A request's `input` as the API lists it: each item with an id.
fn input_items(input: &Value, seq: usize) -> Vec<Value> {
    let items = match input {
        Value::String(text) => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, mut item)| {
            if item.get("id").is_none() {
                item["id"] = json!(format!("msg_in_{seq}_{i}"));
            }
            if item.get("type").is_none() {
                item["type"] = json!("message");
            }
            item
        })
        .collect()
}

/// `GET` or `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`.
pub(crate) fn kept_answer(req: &RecordedRequest, kept: &Kept) -> Answer {
    let rest = req.path.trim_start_matches("/v1/responses/");
    let (id, items) = match rest.strip_suffix("/input_items") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    let mut kept = kept.0.lock().unwrap_or_else(PoisonError::into_inner);
    let not_found = || {
        let mut body = error_body(
            "invalid_request_error",
            None,
            &format!("Response with id '{id}' not found."),
        );
        body["error"]["param"] = json!("response_id");
        json_answer(StatusCode::NOT_FOUND, body)
    };
    if req.method == http::Method::DELETE {
        return match kept.remove(id) {
            Some(_) if !items => json_answer(
                StatusCode::OK,
                json!({"id": id, "object": "response", "deleted": true}),
            ),
            _ => not_found(),
        };
    }
    let Some((response, input)) = kept.get(id) else {
        return not_found();
    };
    if !items {
        return json_answer(StatusCode::OK, response.clone());
    }
    let query = req.query.as_deref().unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    };
    let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(20);
    let mut data = input.clone();
    if param("order") != Some("asc") {
        data.reverse();
    }
    let has_more = data.len() > limit;
    data.truncate(limit);
    json_answer(
        StatusCode::OK,
        json!({
            "object": "list",
            "data": data,
            "first_id": data.first().map(|i| i["id"].clone()),
            "last_id": data.last().map(|i| i["id"].clone()),
            "has_more": has_more,
        }),
    )
}
