//! Request bodies to Bedrock: an Anthropic Messages request as a Converse body
//! ([`from_messages`]; an OpenAI chat request reaches it through the chat-to-Messages
//! translator), and an OpenAI embeddings body as an InvokeModel body for Titan or Cohere
//! ([`embeddings`]). What Converse cannot express is refused with a message naming the field;
//! `metadata` and `disable_parallel_tool_use` are dropped (README, "Bedrock translation").

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::cache::{self, CachePoints};
use crate::wire::anthropic::request::{RequestError, chat_to_messages, tool_call_ids};
use crate::wire::anthropic::tool_ids::ToolIds;
use crate::wire::anthropic::types::{
    Block, Message, MessagesRequest, Role, Source, ThinkingConfig, ToolChoice,
};
use crate::wire::chat::ChatRequest;
use crate::wire::content::TextOr;
use crate::wire::json;

fn invalid(message: impl Into<String>) -> RequestError {
    RequestError::Invalid(json::bounded(message.into()))
}

/// A Converse request body and what the answer's translation needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct Converse {
    pub body: Bytes,
    /// The client asked for a stream.
    pub stream: bool,
    /// An OpenAI client asked for structured output, which comes back as a call of the
    /// output tool: the answer's translation makes it the text.
    pub structured: bool,
    /// An OpenAI client asked for the usage-only final chunk.
    pub include_usage: bool,
}

/// An Anthropic Messages body as a Converse body for `model` (named in the URL, not the body).
pub fn from_messages(body: &[u8], model: &str) -> Result<Converse, RequestError> {
    let request: MessagesRequest = json::parse(body)?;
    if request.max_tokens.is_none() {
        return Err(invalid("max_tokens: Field required"));
    }
    let stream = request.stream == Some(true);
    Ok(Converse {
        body: to_bytes(&converse(request, model, &CachePoints::of(body, model))?)?,
        stream,
        structured: false,
        include_usage: stream,
    })
}

/// An OpenAI chat body as a Converse body for `model`, through Anthropic's Messages shape
/// (the same mapping of tools, images, JSON mode and reasoning as for an Anthropic model).
pub fn from_chat(body: &[u8], model: &str, max_tokens: u64) -> Result<Converse, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let stream = request.stream == Some(true);
    let include_usage = stream
        && request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
    let structured = request
        .response_format
        .as_ref()
        .is_some_and(|f| f.kind != "text");
    let tool_ids = ToolIds::new(tool_call_ids(&request));
    let messages = chat_to_messages(request, max_tokens, &tool_ids)?;
    Ok(Converse {
        body: to_bytes(&converse(messages, model, &CachePoints::default())?)?,
        stream,
        structured,
        include_usage,
    })
}

fn to_bytes(value: &impl Serialize) -> Result<Bytes, RequestError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| invalid(e.to_string()))
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseRequest {
    messages: Vec<ConverseMessage>,
    system: Option<Vec<Value>>,
    inference_config: Option<InferenceConfig>,
    tool_config: Option<Value>,
    additional_model_request_fields: Option<Value>,
}

#[derive(Debug, Serialize)]
struct ConverseMessage {
    role: &'static str,
    content: Vec<Value>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig {
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop_sequences: Option<Vec<String>>,
}

/// Whether `model` (a model id, an inference profile or an ARN naming one) is an Anthropic
/// model, which takes `thinking` and `top_k` in `additionalModelRequestFields`.
pub fn is_anthropic(model: &str) -> bool {
    model.contains("anthropic.")
}

/// The typed half of [`from_messages`], with the body's prompt-cache breakpoints `points`.
pub fn converse(
    request: MessagesRequest,
    model: &str,
    points: &CachePoints,
) -> Result<ConverseRequest, RequestError> {
    let mut system: Vec<Value> = Vec::new();
    match request.system {
        None => {}
        Some(TextOr::Text(text)) => system.push(json!({ "text": text })),
        Some(TextOr::Parts(blocks)) => {
            for (k, block) in blocks.into_iter().enumerate() {
                system.push(json!({ "text": block.text }));
                if points.after_system(k) {
                    system.push(cache::point());
                }
            }
        }
    }
    let mut tool_history = false;
    let mut messages: Vec<ConverseMessage> = Vec::with_capacity(request.messages.len());
    for (i, Message { role, content }) in request.messages.into_iter().enumerate() {
        let role = match role {
            Role::User => "user",
            Role::Assistant => "assistant",
            // System turns inside `messages` join the system prompt, in order.
            Role::System | Role::Developer => {
                system.extend(text_of(content).map(|text| json!({ "text": text })));
                continue;
            }
        };
        let content = match content {
            TextOr::Text(text) => vec![json!({ "text": text })],
            TextOr::Parts(blocks) => {
                let mut out = Vec::with_capacity(blocks.len());
                for (j, block) in blocks.into_iter().enumerate() {
                    tool_history |= matches!(block, Block::ToolUse(_) | Block::ToolResult { .. });
                    out.push(
                        content_block(block)
                            .map_err(|why| invalid(format!("messages[{i}].content[{j}]: {why}")))?,
                    );
                    if points.after_block(i, j) {
                        out.push(cache::point());
                    }
                }
                out
            }
        };
        messages.push(ConverseMessage { role, content });
    }
    let tool_config = tool_config(request.tools, request.tool_choice, tool_history, points)?;
    let inference = InferenceConfig {
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: request.stop_sequences,
    };
    let mut additional = Map::new();
    if is_anthropic(model) {
        if let Some(ThinkingConfig {
            kind,
            budget_tokens,
        }) = request.thinking
            && kind == "enabled"
        {
            additional.insert(
                "thinking".to_owned(),
                json!({"type": "enabled", "budget_tokens": budget_tokens}),
            );
        }
        if let Some(top_k) = request.top_k {
            additional.insert("top_k".to_owned(), json!(top_k));
        }
    }
    Ok(ConverseRequest {
        messages,
        system: (!system.is_empty()).then_some(system),
        inference_config: (inference != InferenceConfig::default()).then_some(inference),
        tool_config,
        additional_model_request_fields: (!additional.is_empty())
            .then_some(Value::Object(additional)),
    })
}

/// The text of a turn's content, its text blocks joined.
fn text_of(content: TextOr<Block>) -> Option<String> {
    match content {
        TextOr::Text(text) => Some(text),
        TextOr::Parts(blocks) => {
            let text: String = blocks
                .into_iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text),
                    _ => None,
                })
                .collect();
            (!text.is_empty()).then_some(text)
        }
    }
}

/// One content block as Converse's.
fn content_block(block: Block) -> Result<Value, String> {
    Ok(match block {
        Block::Text { text } => json!({ "text": text }),
        Block::Image { source } => image(source)?,
        Block::Document { source } => {
            let Source::Base64 { media_type, data } = source else {
                return Err("Bedrock takes documents as bytes: send them base64-encoded".to_owned());
            };
            let format = document_format(&media_type).ok_or_else(|| {
                format!("a document of type `{media_type}` is not one Bedrock reads")
            })?;
            json!({"document": {"format": format, "name": "document", "source": {"bytes": data}}})
        }
        Block::ToolUse(call) => json!({"toolUse": {
            "toolUseId": call.id,
            "name": call.name,
            "input": call.input,
        }}),
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let content = match content {
                None => Vec::new(),
                Some(TextOr::Text(text)) => vec![json!({ "text": text })],
                Some(TextOr::Parts(blocks)) => blocks
                    .into_iter()
                    .map(|block| match block {
                        Block::Text { text } => Ok(json!({ "text": text })),
                        Block::Image { source } => image(source),
                        _ => Err("a tool result holds only text and images".to_owned()),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let mut result = Map::new();
            result.insert("toolUseId".to_owned(), json!(tool_use_id));
            result.insert("content".to_owned(), Value::Array(content));
            if is_error == Some(true) {
                result.insert("status".to_owned(), json!("error"));
            }
            json!({ "toolResult": result })
        }
        Block::Thinking(thinking) => json!({"reasoningContent": {"reasoningText": {
            "text": thinking.thinking,
            "signature": thinking.signature,
        }}}),
        Block::RedactedThinking { data } => {
            json!({"reasoningContent": {"redactedContent": data}})
        }
    })
}

fn image(source: Source) -> Result<Value, String> {
    let Source::Base64 { media_type, data } = source else {
        return Err(
            "Bedrock takes images as bytes, not URLs: send a base64 data URL instead".to_owned(),
        );
    };
    let format = match media_type.as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        other => {
            return Err(format!(
                "an image of type `{other}` is not one Bedrock reads (png, jpeg, gif, webp)"
            ));
        }
    };
    Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

fn document_format(media_type: &str) -> Option<&'static str> {
    Some(match media_type {
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/csv" => "csv",
        "text/html" => "html",
        "text/markdown" => "md",
        "application/msword" => "doc",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        _ => return None,
    })
}

/// `tools` and `tool_choice` as `toolConfig`. Converse has no `none`: the tools are left out
/// unless the conversation already holds tool calls (Bedrock then requires them), in which
/// case the model is left to choose.
fn tool_config(
    tools: Option<Vec<crate::wire::anthropic::types::Tool>>,
    choice: Option<ToolChoice>,
    tool_history: bool,
    points: &CachePoints,
) -> Result<Option<Value>, RequestError> {
    let Some(tools) = tools.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if matches!(choice, Some(ToolChoice::None)) && !tool_history {
        return Ok(None);
    }
    let mut specs = Vec::with_capacity(tools.len());
    for (i, tool) in tools.into_iter().enumerate() {
        if tool.kind.as_deref().is_some_and(|k| k != "custom") {
            return Err(invalid(format!(
                "tools[{i}]: Anthropic's server tools are not available on Bedrock's Converse API"
            )));
        }
        let schema = tool
            .input_schema
            .unwrap_or_else(|| json!({"type": "object"}));
        let mut spec = Map::new();
        spec.insert("name".to_owned(), json!(tool.name));
        if let Some(description) = tool.description {
            spec.insert("description".to_owned(), json!(description));
        }
        spec.insert("inputSchema".to_owned(), json!({ "json": schema }));
        specs.push(json!({ "toolSpec": spec }));
        if points.after_tool(i) {
            specs.push(cache::point());
        }
    }
    let mut config = Map::new();
    config.insert("tools".to_owned(), Value::Array(specs));
    let choice = match choice {
        None | Some(ToolChoice::None) => None,
        Some(ToolChoice::Auto { .. }) => Some(json!({"auto": {}})),
        Some(ToolChoice::Any { .. }) => Some(json!({"any": {}})),
        Some(ToolChoice::Tool { name, .. }) => Some(json!({"tool": {"name": name}})),
    };
    if let Some(choice) = choice {
        config.insert("toolChoice".to_owned(), choice);
    }
    Ok(Some(Value::Object(config)))
}

/// `POST /v1/embeddings`, as far as the translation reads it.
/// The body family of an embedding model, by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingFamily {
    /// `amazon.titan-embed-*`: one `inputText` per request.
    Titan,
    /// `cohere.embed-*`: `texts`, with an `input_type`.
    Cohere,
}

impl EmbeddingFamily {
    /// The family of `model` (an inference profile's region prefix such as `us.` allowed).
    pub fn of(model: &str) -> Option<Self> {
        if model.contains("amazon.titan-embed") {
            Some(Self::Titan)
        } else if model.contains("cohere.embed") {
            Some(Self::Cohere)
        } else {
            None
        }
    }
}

/// A translated embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub body: Bytes,
    pub family: EmbeddingFamily,
    /// The client wants each vector as base64 of little-endian `f32`s.
    pub base64: bool,
}

/// An OpenAI embeddings body as an InvokeModel body for `model`: Titan's `inputText` (one
/// input, Titan embeds one text per call) or Cohere's `texts` (as `search_document`).
pub fn embeddings(body: &[u8], model: &str) -> Result<Embeddings, RequestError> {
    let family = EmbeddingFamily::of(model).ok_or_else(|| {
        invalid(format!(
            "model: `{model}` is not a Bedrock embedding model this gateway knows (amazon.titan-embed-*, cohere.embed-*)"
        ))
    })?;
    let crate::wire::embeddings::TextsToEmbed {
        texts: inputs,
        dimensions,
        base64,
    } = crate::wire::embeddings::read_request(body)?;
    let body = match family {
        EmbeddingFamily::Titan => {
            let [text] = <[String; 1]>::try_from(inputs)
                .map_err(|_| invalid("input: Titan embedding models take one input per request"))?;
            let mut body = Map::new();
            body.insert("inputText".to_owned(), json!(text));
            if let Some(dimensions) = dimensions {
                body.insert("dimensions".to_owned(), json!(dimensions));
            }
            Value::Object(body)
        }
        EmbeddingFamily::Cohere => {
            if dimensions.is_some() {
                return Err(invalid(
                    "dimensions: Cohere embedding models on Bedrock have a fixed size",
                ));
            }
            json!({"texts": inputs, "input_type": "search_document"})
        }
    };
    Ok(Embeddings {
        body: to_bytes(&body)?,
        family,
        base64,
    })
}
