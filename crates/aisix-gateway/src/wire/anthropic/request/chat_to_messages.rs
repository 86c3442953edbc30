//! An OpenAI chat request as an Anthropic Messages request, typed: system messages hoisted,
//! turns merged so that they alternate, tool results gathered into user turns, content parts
//! as blocks, tools and `tool_choice` in Anthropic's shape, tool ids mapped so that Anthropic
//! accepts them ([`ToolIds`]), and `max_tokens` always set.

use serde_json::Value;

use crate::wire::chat::{
    ChatMessage, ChatRequest, ChatTool, ChatToolChoice, ContentPart, FileData, JsonSchemaFormat,
    ResponseFormat,
};
use crate::wire::content::TextOr;

use super::super::mapping::{MIN_THINKING_BUDGET, budget_for_effort};
use super::super::tool_ids::ToolIds;
use super::super::types::{
    Block, Message, MessagesRequest, Metadata, Role, Source, TextBlock, ThinkingConfig, Tool,
    ToolChoice, ToolUse,
};
use super::{RequestError, invalid};

/// The typed half of [`to_anthropic`](super::to_anthropic); `model` is left as the client sent it.
/// Tool call ids go upstream as `ids` maps them.
pub fn chat_to_messages(
    mut request: ChatRequest,
    default_max_tokens: u64,
    ids: &ToolIds,
) -> Result<MessagesRequest, RequestError> {
    if request.n.is_some_and(|n| n > 1) {
        return Err(invalid(
            "n: more than one choice is not supported by this model's provider",
        ));
    }
    let output = match request.response_format.take() {
        None => None,
        Some(format) => output_tool(format, request.tools.as_deref())?,
    };

    let mut system: Vec<TextBlock> = Vec::new();
    let mut system_parts = 0usize;
    let mut single_system: Option<String> = None;
    let mut messages: Vec<Message> = Vec::with_capacity(request.messages.len());
    for (i, message) in request.messages.into_iter().enumerate() {
        match message {
            ChatMessage::System { content } | ChatMessage::Developer { content } => {
                system_parts = system_parts.saturating_add(1);
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
                    blocks.push(Block::ToolUse(ToolUse {
                        id: ids.upstream(&call.id).into_owned(),
                        input: arguments(&call.function.arguments).ok_or_else(|| {
                            invalid(format!(
                                "messages[{i}].tool_calls[{j}].function.arguments: not a JSON object"
                            ))
                        })?,
                        name: call.function.name,
                    }));
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
                    tool_use_id: ids.upstream(&tool_call_id).into_owned(),
                    content: Some(content),
                    is_error: None,
                };
                push(&mut messages, Role::User, TextOr::Parts(vec![result]));
            }
        }
    }

    let mut tools = match request.tools {
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
    let mut tool_choice = match request.tool_choice {
        Some(choice) => Some(anthropic_tool_choice(choice, disable_parallel)?),
        None if disable_parallel.is_some() && tools.is_some() => Some(ToolChoice::Auto {
            disable_parallel_tool_use: disable_parallel,
        }),
        None => None,
    };

    // OpenAI's cap counts reasoning and answer together, as Anthropic's `max_tokens` counts
    // thinking and answer: a budget that does not fit under the client's cap shrinks to fit.
    let effort = request
        .reasoning_effort
        .as_deref()
        .or(request.reasoning.as_ref().and_then(|r| r.effort.as_deref()));
    let budget = match effort {
        None => None,
        Some(effort) => budget_for_effort(effort).ok_or_else(|| {
            invalid(format!(
                "reasoning_effort: `{effort}` is not one of none, minimal, low, medium, high"
            ))
        })?,
    };
    let cap = request.max_completion_tokens.or(request.max_tokens);
    let (max_tokens, thinking) = match (budget, cap) {
        (None, cap) => (cap.unwrap_or(default_max_tokens), None),
        (Some(budget), None) => (budget.saturating_add(default_max_tokens), Some(budget)),
        (Some(budget), Some(cap)) => {
            let budget = budget.min(cap.saturating_sub(1));
            (cap, (budget >= MIN_THINKING_BUDGET).then_some(budget))
        }
    };
    // Structured output: one more tool whose input is the schema; forced when it is the only
    // one (Anthropic refuses thinking with a forced tool), else left to the model beside the
    // client's tools.
    let mut thinking = thinking;
    if let Some(output) = output {
        let only = tools.as_ref().is_none_or(Vec::is_empty);
        tools.get_or_insert_with(Vec::new).push(output);
        if only {
            tool_choice = Some(ToolChoice::Tool {
                name: OUTPUT_TOOL.to_owned(),
                disable_parallel_tool_use: None,
            });
            thinking = None;
        }
    }

    Ok(MessagesRequest {
        model: request.model,
        messages,
        max_tokens: Some(max_tokens),
        thinking: thinking.map(|budget| ThinkingConfig {
            kind: "enabled".to_owned(),
            budget_tokens: Some(budget),
        }),
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

/// The tool a structured output is asked of an Anthropic model with: its input is the JSON
/// the client wants, given back to the client as the answer's text.
pub const OUTPUT_TOOL: &str = "json_output";

/// `response_format` as the output tool: `json_schema`'s schema, or any object for
/// `json_object`; `None` for `text`.
fn output_tool(
    format: ResponseFormat,
    tools: Option<&[ChatTool]>,
) -> Result<Option<Tool>, RequestError> {
    let (schema, description) = match format.kind.as_str() {
        "text" => return Ok(None),
        "json_object" => (serde_json::json!({"type": "object"}), None),
        "json_schema" => {
            let format = format.json_schema.unwrap_or(JsonSchemaFormat {
                name: None,
                description: None,
                schema: None,
                strict: None,
            });
            let schema = format
                .schema
                .ok_or_else(|| invalid("response_format.json_schema.schema: Field required"))?;
            (schema, format.description)
        }
        other => {
            return Err(invalid(format!(
                "response_format: type `{other}` is not supported by this model's provider"
            )));
        }
    };
    let taken = tools
        .into_iter()
        .flatten()
        .any(|t| t.function.as_ref().is_some_and(|f| f.name == OUTPUT_TOOL));
    if taken {
        return Err(invalid(format!(
            "tools: `{OUTPUT_TOOL}` is the name structured output takes with this model's provider"
        )));
    }
    Ok(Some(Tool {
        name: OUTPUT_TOOL.to_owned(),
        description: Some(description.unwrap_or_else(|| {
            "Give the final answer as this tool's input, in the schema asked for.".to_owned()
        })),
        input_schema: Some(schema),
        kind: None,
    }))
}

/// Every tool call id of `request`'s messages, calls and results alike.
pub fn tool_call_ids(request: &ChatRequest) -> impl Iterator<Item = &str> + Clone {
    request.messages.iter().flat_map(|message| {
        let (calls, result) = match message {
            ChatMessage::Assistant {
                tool_calls: Some(calls),
                ..
            } => (calls.as_slice(), None),
            ChatMessage::Tool { tool_call_id, .. } => (&[][..], Some(tool_call_id.as_str())),
            _ => (&[][..], None),
        };
        calls.iter().map(|c| c.id.as_str()).chain(result)
    })
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
