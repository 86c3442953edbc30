//! What the Anthropic mock refuses, as Anthropic refuses it: the first rule a request breaks,
//! worded with the path of the offending value (`messages.1.content.0.text: …`).

use serde_json::{Map, Value};

/// The first way `body` breaks the Messages API's rules, as Anthropic words it.
pub(super) fn validate(body: &Value, messages_endpoint: bool) -> Result<(), String> {
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
                    if calls.contains(&id) {
                        return Err(format!("{path}: `tool_use` ids must be unique"));
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
