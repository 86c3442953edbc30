//! An Anthropic Messages request as an OpenAI chat request, typed: the system prompt as the
//! first message, `system` and `developer` turns inside `messages` as those messages in place
//! (after the tool results of a call they interrupt), tool results as `tool` messages right after the calls they answer, blocks
//! as content parts, `tool_use` as `tool_calls`, and streams asking for usage.

use crate::wire::chat::{
    ChatMessage, ChatRequest, ChatTool, ChatToolChoice, ContentPart, FileData, FunctionDef,
    ImageUrl, NamedFunction, StreamOptions,
};
use crate::wire::content::TextOr;

use super::super::mapping::{effort_for_budget, tool_call};
use super::super::types::{Block, MessagesRequest, Role, Source, ThinkingConfig, Tool, ToolChoice};
use super::{OutputTokensField, RequestError, invalid};

/// The typed half of [`to_openai`](super::to_openai); `model` is left as the client sent it.
/// The output cap goes in `field`; a thinking budget becomes `reasoning_effort` when the
/// model reasons ([`OutputTokensField::reasons`]), and is dropped otherwise.
pub fn messages_to_chat(
    request: MessagesRequest,
    field: OutputTokensField,
) -> Result<ChatRequest, RequestError> {
    let mut messages = Vec::with_capacity(request.messages.len().saturating_add(1));
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
            Role::System => messages.push(ChatMessage::System {
                content: instruction(message.content, i)?,
            }),
            Role::Developer => messages.push(ChatMessage::Developer {
                content: instruction(message.content, i)?,
            }),
        }
    }
    after_tool_results(&mut messages);

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

    let reasoning_effort = match &request.thinking {
        Some(ThinkingConfig {
            kind,
            budget_tokens: Some(budget),
        }) if kind == "enabled" && field.reasons() => Some(effort_for_budget(*budget).to_owned()),
        _ => None,
    };
    let (max_tokens, max_completion_tokens) = match field {
        OutputTokensField::MaxTokens => (request.max_tokens, None),
        OutputTokensField::MaxCompletionTokens => (None, request.max_tokens),
    };
    Ok(ChatRequest {
        model: request.model,
        messages,
        max_tokens,
        max_completion_tokens,
        reasoning_effort,
        reasoning: None,
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
            Block::Thinking(_) | Block::RedactedThinking { .. } => {}
            Block::ToolUse(_) => {
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

/// A `system` or `developer` turn's content: text only.
fn instruction(content: TextOr<Block>, i: usize) -> Result<TextOr<ContentPart>, RequestError> {
    match content {
        TextOr::Text(text) => Ok(TextOr::Text(text)),
        TextOr::Parts(blocks) => blocks
            .into_iter()
            .enumerate()
            .map(|(j, block)| match block {
                Block::Text { text } => Ok(ContentPart::Text { text }),
                _ => Err(invalid(format!(
                    "messages[{i}].content[{j}]: a system message may hold only text"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(TextOr::Parts),
    }
}

/// OpenAI wants a call's `tool` messages right after the assistant message that made it: an
/// instruction turn between the two moves after the tool messages.
fn after_tool_results(messages: &mut [ChatMessage]) {
    let is_instruction = |m: &ChatMessage| {
        matches!(
            m,
            ChatMessage::System { .. } | ChatMessage::Developer { .. }
        )
    };
    let mut i = 0;
    while let Some(message) = messages.get(i) {
        let calls =
            matches!(message, ChatMessage::Assistant { tool_calls: Some(c), .. } if !c.is_empty());
        i = i.saturating_add(1);
        if !calls {
            continue;
        }
        let start = i;
        let count = |from: usize, what: &dyn Fn(&ChatMessage) -> bool| {
            messages
                .get(from..)
                .map_or(0, |rest| rest.iter().take_while(|m| what(m)).count())
        };
        let tools = start.saturating_add(count(start, &is_instruction));
        let end = tools.saturating_add(count(tools, &|m| matches!(m, ChatMessage::Tool { .. })));
        if tools > start
            && end > tools
            && let Some(run) = messages.get_mut(start..end)
        {
            run.rotate_left(tools.saturating_sub(start));
        }
        i = end;
    }
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
            Block::ToolUse(call) => calls.push(tool_call(call)),
            Block::Thinking(_) | Block::RedactedThinking { .. } => {}
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
