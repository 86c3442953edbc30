//! A Responses request as a chat completions request, for a target that speaks only chat:
//! `instructions` and the `input` items become messages (a message, a `function_call`, its
//! `function_call_output`; reasoning items are dropped, encrypted reasoning being readable
//! only by the OpenAI organisation that made it), function tools (and a `namespace` tool's
//! functions) become chat tools, and the sampling and output fields their chat names. A tool
//! the target cannot run that the client only offers is left out ([`Dropped`]); one it forces,
//! and what else chat cannot express (a file input, a stored item's reference), is refused with
//! a message that names the field. One parse of the body, one serialization.

use serde_json::{Map, Value, json};

/// Why a Responses request cannot go to a chat target; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    InvalidJson(String),
    /// (message, the top-level field at fault).
    Invalid(String, &'static str),
}

fn invalid(param: &'static str, message: impl Into<String>) -> RequestError {
    RequestError::Invalid(message.into(), param)
}

/// The chat request for a Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The chat completions body.
    pub body: Vec<u8>,
    /// The Responses request as parsed: what its answer echoes (`instructions`, `tools`, …).
    pub request: Map<String, Value>,
    /// The tools the client offered that the chat request leaves out.
    pub dropped: Dropped,
}

/// Tool types a chat target cannot run, left out when the client only offers them: the
/// built-in tools OpenAI runs on its side (the first eight), `local_shell` (whose calls only
/// OpenAI's Codex models emit, as their own item type) and `custom` (free-form input under a
/// grammar: a chat function's arguments are JSON, so its calls would not round-trip).
const UNRUNNABLE: [&str; 11] = [
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "computer_use",
    "code_interpreter",
    "image_generation",
    "mcp",
    "tool_search",
    "local_shell",
    "custom",
];

/// The set of [`UNRUNNABLE`] tool types a translated request left out; empty for most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped(u16);

impl Dropped {
    /// Whether nothing was left out.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits, to carry the set across threads in an atomic.
    pub fn bits(self) -> u16 {
        self.0
    }

    pub fn from_bits(bits: u16) -> Self {
        Self(bits)
    }

    /// The tool types left out, comma-separated, in [`UNRUNNABLE`]'s order (`web_search`).
    pub fn names(self) -> String {
        let mut names = String::new();
        for (i, name) in UNRUNNABLE.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !names.is_empty() {
                    names.push(',');
                }
                names.push_str(name);
            }
        }
        names
    }

    fn add(&mut self, kind: &str) -> bool {
        match UNRUNNABLE.iter().position(|k| *k == kind) {
            Some(i) => {
                self.0 |= 1 << i;
                true
            }
            None => false,
        }
    }
}

/// Translates `body` for `upstream_model`; `history` is the conversation a
/// `previous_response_id` names (its input and output items, oldest first), put before the
/// request's input; `include_usage` asks a stream for its usage.
pub fn to_chat(
    body: &[u8],
    upstream_model: &str,
    history: &[Value],
    include_usage: bool,
) -> Result<ChatRequest, RequestError> {
    let request: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| RequestError::InvalidJson(format!("could not parse the JSON body: {e}")))?;
    let mut chat = Map::new();
    chat.insert("model".into(), json!(upstream_model));
    let mut messages = Vec::new();
    match request.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(_) => return Err(invalid("instructions", "'instructions' must be a string.")),
    }
    let mut items = Items::default();
    for item in history {
        items.push(item, "previous_response_id")?;
    }
    match request.get("input") {
        Some(Value::String(text)) => {
            items.flush();
            items
                .messages
                .push(json!({"role": "user", "content": text}));
        }
        Some(Value::Array(input)) => {
            for (i, item) in input.iter().enumerate() {
                items
                    .push(item, "input")
                    .map_err(|e| at_index(e, "input", i))?;
            }
        }
        None | Some(Value::Null) if !history.is_empty() => {}
        _ => {
            return Err(invalid(
                "input",
                "'input' must be a string or an array of input items.",
            ));
        }
    }
    items.flush();
    messages.append(&mut items.messages);
    chat.insert("messages".into(), Value::Array(messages));

    let mut dropped = Dropped::default();
    let mut offered = 0;
    if let Some(tools) = request.get("tools").filter(|t| !t.is_null()) {
        let tools = chat_tools(tools, &mut dropped)?;
        offered = tools.len();
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = request.get("tool_choice").filter(|c| !c.is_null()) {
        let choice = tool_choice(choice)?;
        if offered == 0 && !dropped.is_empty() {
            // Every tool was left out: a choice among them means nothing to chat.
            if choice == "required" {
                return Err(invalid(
                    "tool_choice",
                    format!(
                        "'tool_choice' is 'required', but the only tools offered ({}) are not run by this model's provider, which speaks only chat completions.",
                        dropped.names()
                    ),
                ));
            }
        } else {
            chat.insert("tool_choice".into(), choice);
        }
    }
    for (from, to) in [
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("user", "user"),
        ("top_logprobs", "top_logprobs"),
        ("stream", "stream"),
    ] {
        if let Some(value) = request.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), value.clone());
        }
    }
    let nested = |outer: &str, inner: &str| request.get(outer).and_then(|v| v.get(inner));
    if let Some(effort) = nested("reasoning", "effort").filter(|v| !v.is_null()) {
        chat.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(format) = nested("text", "format").filter(|v| !v.is_null())
        && let Some(format) = response_format(format)?
    {
        chat.insert("response_format".into(), format);
    }
    if request.get("background") == Some(&Value::Bool(true)) {
        return Err(invalid(
            "background",
            "'background' responses are not served on this model: its provider speaks only chat completions.",
        ));
    }
    if include_usage && request.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let body = serde_json::to_vec(&Value::Object(chat))
        .map_err(|e| RequestError::InvalidJson(e.to_string()))?;
    Ok(ChatRequest {
        body,
        request,
        dropped,
    })
}

/// `error` with `field[i]` put in front of its message.
fn at_index(error: RequestError, field: &str, i: usize) -> RequestError {
    match error {
        RequestError::Invalid(message, param) => {
            RequestError::Invalid(format!("{field}[{i}]: {message}"), param)
        }
        other => other,
    }
}

/// Input items becoming chat messages: consecutive function calls are one assistant message
/// with several tool calls.
#[derive(Default)]
struct Items {
    messages: Vec<Value>,
    /// The assistant message being built from function calls.
    calls: Vec<Value>,
}

impl Items {
    fn flush(&mut self) {
        if self.calls.is_empty() {
            return;
        }
        let calls = std::mem::take(&mut self.calls);
        // Calls after an assistant's text belong to that message.
        if let Some(last) = self.messages.last_mut()
            && last["role"] == "assistant"
            && last.get("tool_calls").is_none()
        {
            last["tool_calls"] = Value::Array(calls);
            return;
        }
        self.messages
            .push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
    }

    fn push(&mut self, item: &Value, param: &'static str) -> Result<(), RequestError> {
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            None | Some("message") => {
                self.flush();
                self.messages.push(message(item, param)?);
            }
            Some("function_call") => {
                let field = |name: &str| {
                    item.get(name)
                        .and_then(Value::as_str)
                        .ok_or_else(|| invalid(param, format!("a function_call needs '{name}'.")))
                };
                self.calls.push(json!({
                    "id": field("call_id")?,
                    "type": "function",
                    "function": {
                        "name": field("name")?,
                        "arguments": item.get("arguments").and_then(Value::as_str).unwrap_or("{}"),
                    },
                }));
            }
            Some("function_call_output") => {
                self.flush();
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(param, "a function_call_output needs 'call_id'."))?;
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => text_of(parts),
                    _ => String::new(),
                };
                self.messages
                    .push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            // Reasoning is the model's own: encrypted reasoning can only go back to the OpenAI
            // organisation that made it, and a chat target takes none.
            Some("reasoning") => {}
            Some(other) => {
                return Err(invalid(
                    param,
                    format!(
                        "input items of type '{other}' cannot be sent to this model: its provider speaks only chat completions."
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A message item (or an easy input message) as a chat message.
fn message(item: &Value, param: &'static str) -> Result<Value, RequestError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some("user") => "user",
        Some("assistant") => "assistant",
        Some("system") | Some("developer") => "system",
        _ => {
            return Err(invalid(
                param,
                "a message needs a 'role' of user, assistant, system or developer.",
            ));
        }
    };
    let content = match item.get("content") {
        Some(Value::String(text)) => json!(text),
        Some(Value::Array(parts)) if role != "user" => json!(text_of(parts)),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                out.push(user_part(part, param).map_err(|e| at_index(e, "content", j))?);
            }
            Value::Array(out)
        }
        _ => return Err(invalid(param, "a message needs 'content'.")),
    };
    Ok(json!({"role": role, "content": content}))
}

/// A user's content part as a chat content part.
fn user_part(part: &Value, param: &'static str) -> Result<Value, RequestError> {
    match part.get("type").and_then(Value::as_str) {
        Some("input_text") | Some("output_text") | Some("text") => {
            Ok(json!({"type": "text", "text": part.get("text").cloned().unwrap_or(json!(""))}))
        }
        Some("input_image") => {
            let Some(url) = part.get("image_url").filter(|u| u.is_string()) else {
                return Err(invalid(
                    param,
                    "an input_image needs an 'image_url' here (a file_id is OpenAI's own).",
                ));
            };
            let mut image = Map::new();
            image.insert("url".into(), url.clone());
            if let Some(detail) = part.get("detail").filter(|d| d.is_string()) {
                image.insert("detail".into(), detail.clone());
            }
            Ok(json!({"type": "image_url", "image_url": image}))
        }
        other => Err(invalid(
            param,
            format!(
                "content parts of type '{}' cannot be sent to this model: its provider speaks only chat completions.",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

/// The text of content parts (`input_text`, `output_text`, `refusal`), joined.
fn text_of(parts: &[Value]) -> String {
    let mut text = String::new();
    for part in parts {
        if let Some(piece) = part
            .get("text")
            .or_else(|| part.get("refusal"))
            .and_then(Value::as_str)
        {
            text.push_str(piece);
        }
    }
    text
}

/// The request's tools as chat tools: functions as they are, a namespace's functions each; the
/// [`UNRUNNABLE`] ones left out and added to `dropped`.
fn chat_tools(tools: &Value, dropped: &mut Dropped) -> Result<Vec<Value>, RequestError> {
    let Value::Array(tools) = tools else {
        return Err(invalid("tools", "'tools' must be an array."));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "function" => out.push(function(tool).map_err(|e| at_index(e, "tools", i))?),
            "namespace" => {
                let functions = tool.get("tools").and_then(Value::as_array);
                for (j, inner) in functions.into_iter().flatten().enumerate() {
                    if inner.get("type").and_then(Value::as_str) != Some("function") {
                        continue;
                    }
                    let name = format!("tools[{i}].tools[{j}]");
                    out.push(function(inner).map_err(|e| at_named(e, &name))?);
                }
            }
            kind if dropped.add(kind) => {}
            other => {
                return Err(invalid(
                    "tools",
                    format!(
                        "tools[{i}].type: tools of type '{other}' cannot be sent to this model: its provider speaks only chat completions."
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn at_named(error: RequestError, name: &str) -> RequestError {
    match error {
        RequestError::Invalid(message, param) => {
            RequestError::Invalid(format!("{name}: {message}"), param)
        }
        other => other,
    }
}

/// A Responses function tool as a chat tool.
fn function(tool: &Value) -> Result<Value, RequestError> {
    let Some(name) = tool.get("name").filter(|n| n.is_string()) else {
        return Err(invalid("tools", "a function tool needs a 'name'."));
    };
    let mut function = Map::new();
    function.insert("name".into(), name.clone());
    for field in ["description", "parameters", "strict"] {
        if let Some(value) = tool.get(field).filter(|v| !v.is_null()) {
            function.insert(field.into(), value.clone());
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_choice` in chat's shape.
fn tool_choice(choice: &Value) -> Result<Value, RequestError> {
    match choice {
        Value::String(mode) if ["auto", "none", "required"].contains(&mode.as_str()) => {
            Ok(choice.clone())
        }
        Value::Object(object) => match object.get("type").and_then(Value::as_str) {
            Some("function") => match object.get("name") {
                Some(name) if name.is_string() => {
                    Ok(json!({"type": "function", "function": {"name": name}}))
                }
                _ => Err(invalid(
                    "tool_choice",
                    "a function tool_choice needs a 'name'.",
                )),
            },
            Some("allowed_tools") => Ok(json!(
                object.get("mode").and_then(Value::as_str).unwrap_or("auto")
            )),
            Some(kind) if UNRUNNABLE.contains(&kind) => Err(invalid(
                "tool_choice",
                format!(
                    "'tool_choice' forces the tool '{kind}', which this model's provider cannot run: it speaks only chat completions."
                ),
            )),
            Some(other) => Err(invalid(
                "tool_choice",
                format!(
                    "tool_choice of type '{other}' cannot be sent to this model: its provider speaks only chat completions."
                ),
            )),
            None => Err(invalid("tool_choice", "'tool_choice' needs a 'type'.")),
        },
        _ => Err(invalid(
            "tool_choice",
            "'tool_choice' must be auto, none, required or a tool.",
        )),
    }
}

/// `text.format` as chat's `response_format` (`None` for plain text).
fn response_format(format: &Value) -> Result<Option<Value>, RequestError> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = Map::new();
            for field in ["name", "schema", "strict", "description"] {
                if let Some(value) = format.get(field).filter(|v| !v.is_null()) {
                    schema.insert(field.into(), value.clone());
                }
            }
            if !schema.contains_key("name") {
                return Err(invalid(
                    "text",
                    "text.format of type json_schema needs a 'name'.",
                ));
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(invalid(
            "text",
            "text.format must be of type text, json_object or json_schema.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_tools_a_chat_target_cannot_run_are_named_as_left_out() {
        let body = br#"{"model":"m","input":"x","tools":[{"type":"custom","name":"apply_patch"},{"type":"function","name":"f"},{"type":"web_search"}]}"#;
        let chat = to_chat(body, "up", &[], false).unwrap();
        assert_eq!(chat.dropped.names(), "web_search,custom");
        assert_eq!(Dropped::from_bits(chat.dropped.bits()), chat.dropped);
        let sent: Value = serde_json::from_slice(&chat.body).unwrap();
        assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
        let plain = to_chat(br#"{"model":"m","input":"x"}"#, "up", &[], false).unwrap();
        assert!(plain.dropped.is_empty());
        assert_eq!(plain.dropped.names(), "");
    }
}
