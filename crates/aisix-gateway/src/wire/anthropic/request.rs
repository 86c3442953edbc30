//! Request bodies between the dialects: an OpenAI chat request becomes an Anthropic Messages
//! request ([`to_anthropic`]) and the reverse ([`to_openai`], [`count_tokens_to_openai`]). A
//! request that cannot be expressed on the other side is refused with a message naming the
//! field, never silently changed; fields with no counterpart and no effect on the answer's
//! shape are dropped (see README, "Anthropic").

use bytes::Bytes;
use serde_json::Value;

use crate::wire::chat::{
    ChatMessage, ChatRequest, ChatTool, ChatToolChoice, ContentPart, FileData, FunctionCall,
    FunctionDef, ImageUrl, NamedFunction, StreamOptions, ToolCall,
};
use crate::wire::content::TextOr;
use crate::wire::json::{self, ParseError};

use super::types::{
    Block, Message, MessagesRequest, Metadata, Role, Source, TextBlock, Tool, ToolChoice,
};

/// `max_tokens` sent to Anthropic when an OpenAI client gave none (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// A request the client sent that cannot be translated; the message is safe to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not JSON.
    InvalidJson(String),
    /// JSON, but not a valid request, or one the other dialect cannot express.
    Invalid(String),
}

impl RequestError {
    pub fn message(&self) -> &str {
        match self {
            RequestError::InvalidJson(message) | RequestError::Invalid(message) => message,
        }
    }
}

impl From<ParseError> for RequestError {
    fn from(error: ParseError) -> Self {
        match error {
            ParseError::Syntax(message) => RequestError::InvalidJson(message),
            ParseError::Shape(message) => RequestError::Invalid(message),
        }
    }
}

fn invalid(message: impl Into<String>) -> RequestError {
    RequestError::Invalid(json::bounded(message.into()))
}

/// A translated request body and what the answer's translation needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub body: Bytes,
    pub stream: bool,
    /// The OpenAI client asked for the usage-only final chunk (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// An OpenAI chat completions body as an Anthropic Messages body for `upstream_model`.
pub fn to_anthropic(
    body: &[u8],
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<Translated, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let stream = request.stream == Some(true);
    let include_usage = stream
        && request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
    let mut messages = chat_to_messages(request, default_max_tokens)?;
    messages.model = upstream_model.to_owned();
    Ok(Translated {
        body: to_bytes(&messages)?,
        stream,
        include_usage,
    })
}

/// An Anthropic Messages body as an OpenAI chat completions body for `upstream_model`. A
/// stream asks for usage (`stream_options.include_usage`), which Anthropic's stream always has.
pub fn to_openai(body: &[u8], upstream_model: &str) -> Result<Translated, RequestError> {
    let request: MessagesRequest = json::parse(body)?;
    if request.max_tokens.is_none() {
        return Err(invalid("max_tokens: Field required"));
    }
    let stream = request.stream == Some(true);
    let mut chat = messages_to_chat(request)?;
    chat.model = upstream_model.to_owned();
    Ok(Translated {
        body: to_bytes(&chat)?,
        stream,
        include_usage: stream,
    })
}

/// An Anthropic count_tokens body as an OpenAI chat request whose answer's `prompt_tokens` is
/// the count: the same conversation, one output token at most, not streamed.
pub fn count_tokens_to_openai(body: &[u8], upstream_model: &str) -> Result<Bytes, RequestError> {
    let request: MessagesRequest = json::parse(body)?;
    let mut chat = messages_to_chat(request)?;
    chat.model = upstream_model.to_owned();
    chat.max_tokens = Some(1);
    chat.stream = None;
    chat.stream_options = None;
    to_bytes(&chat)
}

fn to_bytes(value: &impl serde::Serialize) -> Result<Bytes, RequestError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| invalid(format!("the request could not be translated: {e}")))
}

/// The typed half of [`to_anthropic`]; `model` is left as the client sent it.
pub fn chat_to_messages(
    request: ChatRequest,
    default_max_tokens: u64,
) -> Result<MessagesRequest, RequestError> {
    if request.n.is_some_and(|n| n > 1) {
        return Err(invalid(
            "n: more than one choice is not supported by this model's provider",
        ));
    }
    if let Some(format) = &request.response_format
        && format.kind != "text"
    {
        return Err(invalid(format!(
            "response_format: type `{}` is not supported by this model's provider",
            format.kind
        )));
    }

    let mut system: Vec<TextBlock> = Vec::new();
    let mut system_parts = 0usize;
    let mut single_system: Option<String> = None;
    let mut messages: Vec<Message> = Vec::with_capacity(request.messages.len());
    for (i, message) in request.messages.into_iter().enumerate() {
        match message {
            ChatMessage::System { content } | ChatMessage::Developer { content } => {
                system_parts += 1;
                match content {
                    TextOr::Text(text) => {
                        single_system = (system_parts == 1).then(|| text.clone());
                        system.push(TextBlock { text });
                    }
                    TextOr::Parts(parts) => {
                        single_system = None;
                        for (j, part) in parts.into_iter().enumerate() {
                            match part {
                                ContentPart::Text { text } => system.push(TextBlock { text }),
                                _ => {
                                    return Err(invalid(format!(
                                        "messages[{i}].content[{j}]: a system message may hold only text"
                                    )));
                                }
                            }
                        }
                    }
                }
            }
            ChatMessage::User { content } => {
                let content = match content {
                    TextOr::Text(text) => TextOr::Text(text),
                    TextOr::Parts(parts) => TextOr::Parts(user_blocks(parts, i)?),
                };
                push(&mut messages, Role::User, content);
            }
            ChatMessage::Assistant {
                content,
                refusal,
                tool_calls,
            } => {
                let mut blocks = Vec::new();
                match content {
                    Some(TextOr::Text(text)) => push_text(&mut blocks, text),
                    Some(TextOr::Parts(parts)) => {
                        for (j, part) in parts.into_iter().enumerate() {
                            match part {
                                ContentPart::Text { text }
                                | ContentPart::Refusal { refusal: text } => {
                                    push_text(&mut blocks, text)
                                }
                                _ => {
                                    return Err(invalid(format!(
                                        "messages[{i}].content[{j}]: an assistant message may hold only text"
                                    )));
                                }
                            }
                        }
                    }
                    None => {}
                }
                if let Some(refusal) = refusal {
                    push_text(&mut blocks, refusal);
                }
                for (j, call) in tool_calls.into_iter().flatten().enumerate() {
                    blocks.push(Block::ToolUse {
                        id: tool_id(&call.id),
                        input: arguments(&call.function.arguments).ok_or_else(|| {
                            invalid(format!(
                                "messages[{i}].tool_calls[{j}].function.arguments: not a JSON object"
                            ))
                        })?,
                        name: call.function.name,
                    });
                }
                // An assistant turn with nothing in it carries nothing; Anthropic refuses it.
                if !blocks.is_empty() {
                    push(&mut messages, Role::Assistant, TextOr::Parts(blocks));
                }
            }
            ChatMessage::Tool {
                content,
                tool_call_id,
            } => {
                let content = match content {
                    TextOr::Text(text) => TextOr::Text(text),
                    TextOr::Parts(parts) => TextOr::Parts(user_blocks(parts, i)?),
                };
                let result = Block::ToolResult {
                    tool_use_id: tool_id(&tool_call_id),
                    content: Some(content),
                    is_error: None,
                };
                push(&mut messages, Role::User, TextOr::Parts(vec![result]));
            }
        }
    }

    let tools = match request.tools {
        Some(tools) => Some(
            tools
                .into_iter()
                .enumerate()
                .map(|(i, tool)| anthropic_tool(tool, i))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    let disable_parallel = (request.parallel_tool_calls == Some(false)).then_some(true);
    let tool_choice = match request.tool_choice {
        Some(choice) => Some(anthropic_tool_choice(choice, disable_parallel)?),
        None if disable_parallel.is_some() && tools.is_some() => Some(ToolChoice::Auto {
            disable_parallel_tool_use: disable_parallel,
        }),
        None => None,
    };

    Ok(MessagesRequest {
        model: request.model,
        messages,
        max_tokens: Some(
            request
                .max_completion_tokens
                .or(request.max_tokens)
                .unwrap_or(default_max_tokens),
        ),
        system: match (single_system, system.is_empty()) {
            (_, true) => None,
            (Some(text), false) if system.len() == 1 => Some(TextOr::Text(text)),
            _ => Some(TextOr::Parts(system)),
        },
        stop_sequences: request.stop.map(|stop| match stop {
            TextOr::Text(text) => vec![text],
            TextOr::Parts(list) => list,
        }),
        temperature: request.temperature,
        top_p: request.top_p,
        top_k: None,
        stream: request.stream.filter(|&s| s),
        tools,
        tool_choice,
        metadata: request.user.map(|user_id| Metadata {
            user_id: Some(user_id),
        }),
    })
}

/// Appends a turn, merging it into the previous one of the same role (Anthropic wants turns
/// to alternate, and parallel tool results in one user turn).
fn push(messages: &mut Vec<Message>, role: Role, content: TextOr<Block>) {
    if let Some(last) = messages.last_mut()
        && last.role == role
    {
        let mut blocks = match std::mem::take(&mut last.content) {
            TextOr::Text(text) => text_blocks(text),
            TextOr::Parts(blocks) => blocks,
        };
        match content {
            TextOr::Text(text) => blocks.extend(text_blocks(text)),
            TextOr::Parts(more) => blocks.extend(more),
        }
        last.content = TextOr::Parts(blocks);
        return;
    }
    messages.push(Message { role, content });
}

fn text_blocks(text: String) -> Vec<Block> {
    let mut blocks = Vec::with_capacity(1);
    push_text(&mut blocks, text);
    blocks
}

/// Anthropic refuses empty text blocks; an empty text carries nothing, so it is left out.
fn push_text(blocks: &mut Vec<Block>, text: String) {
    if !text.is_empty() {
        blocks.push(Block::Text { text });
    }
}

fn user_blocks(parts: Vec<ContentPart>, i: usize) -> Result<Vec<Block>, RequestError> {
    let mut blocks = Vec::with_capacity(parts.len());
    for (j, part) in parts.into_iter().enumerate() {
        match part {
            ContentPart::Text { text } | ContentPart::Refusal { refusal: text } => {
                push_text(&mut blocks, text)
            }
            ContentPart::ImageUrl { image_url } => blocks.push(Block::Image {
                source: image_source(&image_url.url).map_err(|why| {
                    invalid(format!("messages[{i}].content[{j}].image_url.url: {why}"))
                })?,
            }),
            ContentPart::File { file } => blocks.push(Block::Document {
                source: document_source(&file)
                    .map_err(|why| invalid(format!("messages[{i}].content[{j}].file: {why}")))?,
            }),
            ContentPart::InputAudio { .. } => {
                return Err(invalid(format!(
                    "messages[{i}].content[{j}]: audio input is not supported by this model's provider"
                )));
            }
        }
    }
    Ok(blocks)
}

/// `data:<media type>;base64,<data>`, split.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    Some((meta.strip_suffix(";base64")?, data))
}

fn image_source(url: &str) -> Result<Source, &'static str> {
    if url.starts_with("data:") {
        let (media_type, data) =
            data_url(url).ok_or("a data URL must be of the form data:<type>;base64,<data>")?;
        return Ok(Source::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(Source::Url {
            url: url.to_owned(),
        });
    }
    Err("an image must be an http(s) URL or a base64 data URL")
}

fn document_source(file: &FileData) -> Result<Source, &'static str> {
    match file.file_data.as_deref().and_then(data_url) {
        Some((media_type, data)) => Ok(Source::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        }),
        None => Err("only files given inline as a base64 data URL (file_data) are supported"),
    }
}

/// Anthropic accepts tool ids of `[A-Za-z0-9_-]+`; other characters become `_` (the same id
/// maps the same way in the call and in its result).
fn tool_id(id: &str) -> String {
    if id.is_empty() {
        return "_".to_owned();
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A call's `arguments` text as the object Anthropic wants; empty means no arguments.
fn arguments(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        return Some(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

fn anthropic_tool(tool: ChatTool, i: usize) -> Result<Tool, RequestError> {
    let function = match (tool.kind.as_str(), tool.function) {
        ("function", Some(function)) => function,
        ("function", None) => return Err(invalid(format!("tools[{i}].function: missing"))),
        (kind, _) => {
            return Err(invalid(format!(
                "tools[{i}].type: `{kind}` tools are not supported by this model's provider"
            )));
        }
    };
    Ok(Tool {
        name: function.name,
        description: function.description,
        input_schema: Some(
            function
                .parameters
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        ),
        kind: None,
    })
}

fn anthropic_tool_choice(
    choice: ChatToolChoice,
    disable_parallel_tool_use: Option<bool>,
) -> Result<ToolChoice, RequestError> {
    Ok(match choice {
        ChatToolChoice::Mode(mode) => match mode.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto {
                disable_parallel_tool_use,
            },
            "required" => ToolChoice::Any {
                disable_parallel_tool_use,
            },
            other => {
                return Err(invalid(format!(
                    "tool_choice: `{other}` is not one of none, auto, required"
                )));
            }
        },
        ChatToolChoice::Function { kind, function } if kind == "function" => ToolChoice::Tool {
            name: function.name,
            disable_parallel_tool_use,
        },
        ChatToolChoice::Function { kind, .. } => {
            return Err(invalid(format!(
                "tool_choice.type: `{kind}` is not supported by this model's provider"
            )));
        }
    })
}

/// The typed half of [`to_openai`]; `model` is left as the client sent it.
pub fn messages_to_chat(request: MessagesRequest) -> Result<ChatRequest, RequestError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    match request.system {
        Some(TextOr::Text(text)) => messages.push(ChatMessage::System {
            content: TextOr::Text(text),
        }),
        Some(TextOr::Parts(blocks)) if !blocks.is_empty() => messages.push(ChatMessage::System {
            content: TextOr::Parts(
                blocks
                    .into_iter()
                    .map(|b| ContentPart::Text { text: b.text })
                    .collect(),
            ),
        }),
        _ => {}
    }
    for (i, message) in request.messages.into_iter().enumerate() {
        match message.role {
            Role::User => user_messages(message.content, i, &mut messages)?,
            Role::Assistant => messages.push(assistant_message(message.content, i)?),
        }
    }

    let has_tools = request.tools.as_ref().is_some_and(|t| !t.is_empty());
    let tools = match request.tools {
        Some(tools) => Some(
            tools
                .into_iter()
                .enumerate()
                .map(|(i, tool)| openai_tool(tool, i))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    let (tool_choice, parallel_tool_calls) = match request.tool_choice {
        // OpenAI refuses a tool_choice without tools; without tools there is nothing to choose.
        Some(choice) if has_tools => openai_tool_choice(choice),
        _ => (None, None),
    };
    let stream = request.stream == Some(true);

    Ok(ChatRequest {
        model: request.model,
        messages,
        max_tokens: request.max_tokens,
        max_completion_tokens: None,
        temperature: request.temperature,
        top_p: request.top_p,
        stop: request
            .stop_sequences
            .filter(|s| !s.is_empty())
            .map(TextOr::Parts),
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
        tools,
        tool_choice,
        parallel_tool_calls,
        user: request.metadata.and_then(|m| m.user_id),
        n: None,
        response_format: None,
    })
}

/// A user turn: its tool results become `tool` messages (which must follow the assistant's
/// calls directly), then the rest is one user message. Images inside tool results, which an
/// OpenAI tool message cannot hold, lead that user message.
fn user_messages(
    content: TextOr<Block>,
    i: usize,
    out: &mut Vec<ChatMessage>,
) -> Result<(), RequestError> {
    let blocks = match content {
        TextOr::Text(text) => {
            out.push(ChatMessage::User {
                content: TextOr::Text(text),
            });
            return Ok(());
        }
        TextOr::Parts(blocks) => blocks,
    };
    let mut lifted = Vec::new();
    let mut parts = Vec::with_capacity(blocks.len());
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            Block::ToolResult {
                tool_use_id,
                content,
                is_error: _,
            } => {
                let content = match content {
                    None => TextOr::Text(String::new()),
                    Some(TextOr::Text(text)) => TextOr::Text(text),
                    Some(TextOr::Parts(inner)) => {
                        // One string, the blocks' texts on their own lines: what every
                        // OpenAI-compatible server accepts in a tool message.
                        let mut texts = String::new();
                        for (k, block) in inner.into_iter().enumerate() {
                            match block {
                                Block::Text { text } => {
                                    if !texts.is_empty() {
                                        texts.push('\n');
                                    }
                                    texts.push_str(&text);
                                }
                                Block::Image { .. } | Block::Document { .. } => {
                                    lifted.push(openai_part(block, i, j)?)
                                }
                                _ => {
                                    return Err(invalid(format!(
                                        "messages[{i}].content[{j}].content[{k}]: a tool result may hold only text, images and documents"
                                    )));
                                }
                            }
                        }
                        TextOr::Text(texts)
                    }
                };
                out.push(ChatMessage::Tool {
                    content,
                    tool_call_id: tool_use_id,
                });
            }
            Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
            Block::ToolUse { .. } => {
                return Err(invalid(format!(
                    "messages[{i}].content[{j}]: tool_use blocks belong in assistant messages"
                )));
            }
            block => parts.push(openai_part(block, i, j)?),
        }
    }
    lifted.extend(parts);
    if !lifted.is_empty() {
        out.push(ChatMessage::User {
            content: TextOr::Parts(lifted),
        });
    }
    Ok(())
}

fn openai_part(block: Block, i: usize, j: usize) -> Result<ContentPart, RequestError> {
    Ok(match block {
        Block::Text { text } => ContentPart::Text { text },
        Block::Image { source } => ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: match source {
                    Source::Base64 { media_type, data } => {
                        format!("data:{media_type};base64,{data}")
                    }
                    Source::Url { url } => url,
                },
                detail: None,
            },
        },
        Block::Document {
            source: Source::Base64 { media_type, data },
        } => ContentPart::File {
            file: FileData {
                file_data: Some(format!("data:{media_type};base64,{data}")),
                file_id: None,
                filename: Some("document.pdf".to_owned()),
            },
        },
        Block::Document { .. } => {
            return Err(invalid(format!(
                "messages[{i}].content[{j}].source: only base64 documents are supported by this model's provider"
            )));
        }
        _ => {
            return Err(invalid(format!(
                "messages[{i}].content[{j}]: this block is not supported in a user message by this model's provider"
            )));
        }
    })
}

fn assistant_message(content: TextOr<Block>, i: usize) -> Result<ChatMessage, RequestError> {
    let blocks = match content {
        TextOr::Text(text) => {
            return Ok(ChatMessage::Assistant {
                content: Some(TextOr::Text(text)),
                refusal: None,
                tool_calls: None,
            });
        }
        TextOr::Parts(blocks) => blocks,
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            Block::Text { text: piece } => text.push_str(&piece),
            Block::ToolUse { id, name, input } => calls.push(ToolCall {
                id,
                kind: "function".to_owned(),
                function: FunctionCall {
                    name,
                    arguments: input.to_string(),
                },
            }),
            Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
            _ => {
                return Err(invalid(format!(
                    "messages[{i}].content[{j}]: an assistant message may hold only text, tool_use and thinking blocks"
                )));
            }
        }
    }
    Ok(ChatMessage::Assistant {
        content: (!text.is_empty() || calls.is_empty()).then_some(TextOr::Text(text)),
        refusal: None,
        tool_calls: (!calls.is_empty()).then_some(calls),
    })
}

fn openai_tool(tool: Tool, i: usize) -> Result<ChatTool, RequestError> {
    if let Some(kind) = tool.kind.as_deref()
        && kind != "custom"
    {
        return Err(invalid(format!(
            "tools[{i}].type: server tool `{kind}` is not supported by this model's provider"
        )));
    }
    let Some(parameters) = tool.input_schema else {
        return Err(invalid(format!("tools[{i}].input_schema: Field required")));
    };
    Ok(ChatTool {
        kind: "function".to_owned(),
        function: Some(FunctionDef {
            name: tool.name,
            description: tool.description,
            parameters: Some(parameters),
        }),
    })
}

fn openai_tool_choice(choice: ToolChoice) -> (Option<ChatToolChoice>, Option<bool>) {
    let (choice, disable) = match choice {
        ToolChoice::Auto {
            disable_parallel_tool_use,
        } => (
            ChatToolChoice::Mode("auto".into()),
            disable_parallel_tool_use,
        ),
        ToolChoice::Any {
            disable_parallel_tool_use,
        } => (
            ChatToolChoice::Mode("required".into()),
            disable_parallel_tool_use,
        ),
        ToolChoice::Tool {
            name,
            disable_parallel_tool_use,
        } => (
            ChatToolChoice::Function {
                kind: "function".into(),
                function: NamedFunction { name },
            },
            disable_parallel_tool_use,
        ),
        ToolChoice::None => (ChatToolChoice::Mode("none".into()), None),
    };
    (Some(choice), (disable == Some(true)).then_some(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anthropic(body: Value) -> Value {
        let out =
            to_anthropic(body.to_string().as_bytes(), "claude-x", DEFAULT_MAX_TOKENS).unwrap();
        serde_json::from_slice(&out.body).unwrap()
    }

    fn openai(body: Value) -> Value {
        let out = to_openai(body.to_string().as_bytes(), "gpt-x").unwrap();
        serde_json::from_slice(&out.body).unwrap()
    }

    #[test]
    fn max_tokens_defaults_and_max_completion_tokens_wins() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(anthropic(base.clone())["max_tokens"], DEFAULT_MAX_TOKENS);
        let mut both = base;
        both["max_tokens"] = json!(10);
        both["max_completion_tokens"] = json!(20);
        assert_eq!(anthropic(both)["max_tokens"], 20);
    }

    #[test]
    fn system_messages_anywhere_are_hoisted_in_order() {
        let out = anthropic(json!({"model": "m", "messages": [
            {"role": "system", "content": "one"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "text", "text": "two"}]},
        ]}));
        assert_eq!(
            out["system"],
            json!([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}])
        );
        assert_eq!(out["messages"], json!([{"role": "user", "content": "hi"}]));
        let single = anthropic(json!({"model": "m", "messages": [
            {"role": "system", "content": "only"}, {"role": "user", "content": "hi"}]}));
        assert_eq!(single["system"], "only");
    }

    #[test]
    fn parallel_tool_results_share_one_user_turn_with_sanitized_ids() {
        let out = anthropic(json!({"model": "m", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "functions.get:0", "type": "function", "function": {"name": "get", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "functions.get:0", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        ]}));
        assert_eq!(
            out["messages"][1],
            json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "functions_get_0", "name": "get", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get", "input": {}}]})
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "functions_get_0", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"}]})
        );
    }

    #[test]
    fn untranslatable_requests_are_refused_naming_the_field() {
        let refuse = |body: Value| {
            to_anthropic(body.to_string().as_bytes(), "m", 1)
                .unwrap_err()
                .message()
                .to_owned()
        };
        let msg = |content: Value| json!({"model": "m", "messages": [{"role": "user", "content": content}]});
        assert!(
            refuse(msg(
                json!([{"type": "image_url", "image_url": {"url": "ftp://x"}}])
            ))
            .starts_with("messages[0].content[0].image_url.url")
        );
        assert!(refuse(msg(json!([{"type": "input_audio", "input_audio": {}}]))).contains("audio"));
        assert!(refuse(json!({"model": "m", "n": 2, "messages": []})).starts_with("n:"));
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}))
                .starts_with("messages[0]")
        );
        assert!(
            refuse(
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]})
            )
            .starts_with("messages[0].tool_calls[0].function.arguments")
        );
        assert!(matches!(
            to_anthropic(b"{", "m", 1),
            Err(RequestError::InvalidJson(_))
        ));
    }

    #[test]
    fn anthropic_request_needs_max_tokens_and_count_tokens_does_not() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            to_openai(body.to_string().as_bytes(), "g")
                .unwrap_err()
                .message(),
            "max_tokens: Field required"
        );
        let count = count_tokens_to_openai(body.to_string().as_bytes(), "g").unwrap();
        let count: Value = serde_json::from_slice(&count).unwrap();
        assert_eq!(count["max_tokens"], 1);
        assert_eq!(count["model"], "g");
    }

    #[test]
    fn tool_results_become_tool_messages_before_the_rest_of_the_turn() {
        let out = openai(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": "taken"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"type": "text", "text": "what is it?"}]},
        ]}));
        assert_eq!(
            out["messages"][1],
            json!({"role": "tool", "tool_call_id": "t1", "content": "taken"})
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "what is it?"}]})
        );
    }

    #[test]
    fn server_tools_are_refused_on_an_openai_provider() {
        let body = json!({"model": "m", "max_tokens": 5, "messages": [],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]});
        assert!(
            to_openai(body.to_string().as_bytes(), "g")
                .unwrap_err()
                .message()
                .starts_with("tools[0].type")
        );
    }
}
