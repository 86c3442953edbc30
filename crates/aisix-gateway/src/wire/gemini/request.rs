//! Request bodies to Gemini: an OpenAI chat completions body as a `generateContent` body
//! ([`from_chat`]), and an OpenAI embeddings body as a `batchEmbedContents` one
//! ([`embeddings`]). What Gemini cannot express is refused with a message naming the field;
//! fields with no counterpart and no effect on the answer's shape (`user`,
//! `parallel_tool_calls`, `stream_options`) are dropped (README, "Gemini translation").

use std::collections::HashMap;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::signature;
use super::types::{
    Blob, Content, FileData, FunctionCall, FunctionCallingConfig, FunctionDeclaration,
    FunctionResponse, GenerateContentRequest, GenerationConfig, Part, ThinkingConfig, Tool,
    ToolConfig,
};
use crate::wire::anthropic::mapping::budget_for_effort;
use crate::wire::anthropic::request::RequestError;
use crate::wire::chat::{ChatMessage, ChatRequest, ChatToolChoice, ContentPart};
use crate::wire::content::TextOr;
use crate::wire::json;

fn invalid(message: impl Into<String>) -> RequestError {
    RequestError::Invalid(json::bounded(message.into()))
}

/// A translated request body and what the answer's translation needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslatedRequest {
    pub body: Bytes,
    pub stream: bool,
    /// The client asked for the usage-only final chunk (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// An OpenAI chat completions body as a Gemini `generateContent` body (the model is in the
/// URL, so the body names none).
pub fn from_chat(body: &[u8]) -> Result<TranslatedRequest, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let stream = request.stream == Some(true);
    let include_usage = stream
        && request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
    let generate = chat_to_gemini(request)?;
    Ok(TranslatedRequest {
        body: to_bytes(&generate)?,
        stream,
        include_usage,
    })
}

fn to_bytes(value: &impl Serialize) -> Result<Bytes, RequestError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| invalid(e.to_string()))
}

/// The typed half of [`from_chat`].
pub fn chat_to_gemini(request: ChatRequest) -> Result<GenerateContentRequest, RequestError> {
    if request.n.is_some_and(|n| n != 1) {
        return Err(invalid(
            "n: only one choice is supported by this model's provider",
        ));
    }
    // A tool result names only its call; Gemini wants the function's name.
    let mut names: HashMap<&str, &str> = HashMap::new();
    for message in &request.messages {
        if let ChatMessage::Assistant {
            tool_calls: Some(calls),
            ..
        } = message
        {
            for call in calls {
                names.insert(&call.id, &call.function.name);
            }
        }
    }
    let mut system: Vec<Part> = Vec::new();
    let mut contents: Vec<Content> = Vec::new();
    // Whether the last turn holds tool results (only those join one another).
    let mut results = false;
    for (i, message) in request.messages.iter().enumerate() {
        let (role, parts) = match message {
            ChatMessage::System { content } | ChatMessage::Developer { content } => {
                system.extend(parts(content, i)?);
                continue;
            }
            ChatMessage::User { content } => ("user", parts(content, i)?),
            ChatMessage::Assistant {
                content,
                refusal,
                tool_calls,
            } => {
                let mut out = match content {
                    Some(content) => parts(content, i)?,
                    None => Vec::new(),
                };
                if let Some(refusal) = refusal {
                    out.push(text_part(refusal.clone()));
                }
                for (j, call) in tool_calls.iter().flatten().enumerate() {
                    out.push(Part {
                        function_call: Some(FunctionCall {
                            id: None,
                            name: call.function.name.clone(),
                            args: Some(arguments(&call.function.arguments).ok_or_else(|| {
                                invalid(format!(
                                    "messages[{i}].tool_calls[{j}].function.arguments: not a JSON object"
                                ))
                            })?),
                        }),
                        thought_signature: signature::of(&call.id),
                        ..Part::default()
                    });
                }
                ("model", out)
            }
            ChatMessage::Tool {
                content,
                tool_call_id,
            } => {
                let name = names.get(tool_call_id.as_str()).ok_or_else(|| {
                    invalid(format!(
                        "messages[{i}].tool_call_id: no earlier assistant tool call has the id `{tool_call_id}`"
                    ))
                })?;
                let text = plain_text(content);
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => serde_json::json!({ "content": text }),
                };
                let part = Part {
                    function_response: Some(FunctionResponse {
                        id: None,
                        name: (*name).to_owned(),
                        response,
                    }),
                    ..Part::default()
                };
                ("user", vec![part])
            }
        };
        // Tool results in a row answer one turn of calls: Gemini wants them in one turn.
        let result = matches!(message, ChatMessage::Tool { .. });
        match contents.last_mut() {
            Some(last) if result && results => last.parts.extend(parts),
            _ => contents.push(Content {
                role: Some(role.to_owned()),
                parts,
            }),
        }
        results = result;
    }
    let tools = request.tools.as_ref().map(|tools| {
        let declarations = tools
            .iter()
            .filter_map(|tool| tool.function.as_ref())
            .map(|function| FunctionDeclaration {
                name: function.name.clone(),
                description: function.description.clone(),
                parameters_json_schema: function.parameters.clone(),
            })
            .collect();
        vec![Tool {
            function_declarations: declarations,
        }]
    });
    let tool_config = request.tool_choice.as_ref().map(tool_config).transpose()?;
    Ok(GenerateContentRequest {
        model: None,
        contents,
        system_instruction: (!system.is_empty()).then_some(Content {
            role: None,
            parts: system,
        }),
        tools: tools.filter(|t| t.iter().any(|t| !t.function_declarations.is_empty())),
        tool_config,
        generation_config: generation_config(&request)?,
    })
}

fn generation_config(request: &ChatRequest) -> Result<Option<GenerationConfig>, RequestError> {
    let stop_sequences = request.stop.as_ref().map(|stop| match stop {
        TextOr::Text(text) => vec![text.clone()],
        TextOr::Parts(list) => list.clone(),
    });
    let (response_mime_type, response_json_schema) = match &request.response_format {
        None => (None, None),
        Some(format) => match format.kind.as_str() {
            "text" => (None, None),
            "json_object" => (Some("application/json".to_owned()), None),
            "json_schema" => (
                Some("application/json".to_owned()),
                format.json_schema.as_ref().and_then(|s| s.schema.clone()),
            ),
            other => {
                return Err(invalid(format!(
                    "response_format.type: `{other}` is not one of text, json_object, json_schema"
                )));
            }
        },
    };
    let effort = request
        .reasoning_effort
        .as_deref()
        .or(request.reasoning.as_ref().and_then(|r| r.effort.as_deref()));
    let thinking_config = match effort {
        None => None,
        Some(effort) => {
            let budget = budget_for_effort(effort).ok_or_else(|| {
                invalid(format!(
                    "reasoning_effort: `{effort}` is not one of none, minimal, low, medium, high"
                ))
            })?;
            Some(match budget {
                Some(budget) => ThinkingConfig {
                    include_thoughts: Some(true),
                    thinking_budget: Some(budget),
                },
                None => ThinkingConfig {
                    include_thoughts: None,
                    thinking_budget: Some(0),
                },
            })
        }
    };
    let config = GenerationConfig {
        stop_sequences,
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens: request.max_completion_tokens.or(request.max_tokens),
        response_mime_type,
        response_json_schema,
        thinking_config,
    };
    Ok((config != GenerationConfig::default()).then_some(config))
}

fn tool_config(choice: &ChatToolChoice) -> Result<ToolConfig, RequestError> {
    let (mode, allowed) = match choice {
        ChatToolChoice::Mode(mode) => (
            match mode.as_str() {
                "none" => "NONE",
                "auto" => "AUTO",
                "required" => "ANY",
                other => {
                    return Err(invalid(format!(
                        "tool_choice: `{other}` is not one of none, auto, required"
                    )));
                }
            },
            None,
        ),
        ChatToolChoice::Function { function, .. } => ("ANY", Some(vec![function.name.clone()])),
    };
    Ok(ToolConfig {
        function_calling_config: FunctionCallingConfig {
            mode: mode.to_owned(),
            allowed_function_names: allowed,
        },
    })
}

/// A tool call's arguments (a JSON text) as the object Gemini wants; an empty text is `{}`.
fn arguments(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        return Some(Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str(text) {
        Ok(object @ Value::Object(_)) => Some(object),
        _ => None,
    }
}

fn text_part(text: String) -> Part {
    Part {
        text: Some(text),
        ..Part::default()
    }
}

/// The text of a content, its text parts joined.
fn plain_text(content: &TextOr<ContentPart>) -> String {
    match content {
        TextOr::Text(text) => text.clone(),
        TextOr::Parts(parts) => parts
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text { text } => Some(text.as_str()),
                ContentPart::Refusal { refusal } => Some(refusal.as_str()),
                _ => None,
            })
            .collect(),
    }
}

/// A message's content as Gemini parts; `i` is the message's index, for errors.
fn parts(content: &TextOr<ContentPart>, i: usize) -> Result<Vec<Part>, RequestError> {
    let list = match content {
        TextOr::Text(text) => return Ok(vec![text_part(text.clone())]),
        TextOr::Parts(list) => list,
    };
    let mut out = Vec::with_capacity(list.len());
    for (j, part) in list.iter().enumerate() {
        let at = |why: &str| invalid(format!("messages[{i}].content[{j}]: {why}"));
        out.push(match part {
            ContentPart::Text { text } => text_part(text.clone()),
            ContentPart::Refusal { refusal } => text_part(refusal.clone()),
            ContentPart::ImageUrl { image_url } => media(&image_url.url).map_err(at)?,
            ContentPart::File { file } => match file.file_data.as_deref().and_then(data_url) {
                Some((mime_type, data)) => Part {
                    inline_data: Some(Blob {
                        mime_type: mime_type.to_owned(),
                        data: data.to_owned(),
                    }),
                    ..Part::default()
                },
                None => {
                    return Err(at(
                        "only files given inline as a base64 data URL (file_data) are supported",
                    ));
                }
            },
            ContentPart::InputAudio { input_audio } => {
                let data = input_audio.get("data").and_then(Value::as_str);
                let format = input_audio.get("format").and_then(Value::as_str);
                let (Some(data), Some(format)) = (data, format) else {
                    return Err(at("input_audio needs `data` and `format`"));
                };
                Part {
                    inline_data: Some(Blob {
                        mime_type: format!("audio/{format}"),
                        data: data.to_owned(),
                    }),
                    ..Part::default()
                }
            }
        });
    }
    Ok(out)
}

/// `data:<media type>;base64,<data>`, split.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    Some((meta.strip_suffix(";base64")?, data))
}

/// An image URL as a part: a data URL inline, an http(s) URL by reference (its type guessed
/// from its extension, JPEG when it has none Gemini knows).
fn media(url: &str) -> Result<Part, &'static str> {
    if url.starts_with("data:") {
        let (mime_type, data) =
            data_url(url).ok_or("a data URL must be of the form data:<type>;base64,<data>")?;
        return Ok(Part {
            inline_data: Some(Blob {
                mime_type: mime_type.to_owned(),
                data: data.to_owned(),
            }),
            ..Part::default()
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        let path = url
            .split(['?', '#'])
            .next()
            .unwrap_or(url)
            .to_ascii_lowercase();
        let mime_type = [
            (".png", "image/png"),
            (".webp", "image/webp"),
            (".gif", "image/gif"),
            (".heic", "image/heic"),
            (".heif", "image/heif"),
        ]
        .iter()
        .find(|(ext, _)| path.ends_with(ext))
        .map_or("image/jpeg", |(_, mime)| mime);
        return Ok(Part {
            file_data: Some(FileData {
                mime_type: Some(mime_type.to_owned()),
                file_uri: url.to_owned(),
            }),
            ..Part::default()
        });
    }
    Err("an image must be an http(s) URL or a base64 data URL")
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CountTokens {
    generate_content_request: GenerateContentRequest,
}

/// An OpenAI chat body (an Anthropic count_tokens request made chat) as a `countTokens` body
/// for `model` (`models/{name}`): the whole request (system, tools) counted, as Anthropic
/// counts it; the generation settings, which count nothing, left out.
pub fn count_tokens(body: &[u8], model: &str) -> Result<Bytes, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let mut generate = chat_to_gemini(request)?;
    generate.model = Some(model.to_owned());
    generate.generation_config = None;
    to_bytes(&CountTokens {
        generate_content_request: generate,
    })
}

/// `POST /v1/embeddings`, as far as the translation reads it.
/// A translated embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub body: Bytes,
    /// The client wants each vector as base64 of little-endian `f32`s.
    pub base64: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BatchEmbed<'a> {
    requests: Vec<EmbedContent<'a>>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EmbedContent<'a> {
    model: &'a str,
    content: Content,
    output_dimensionality: Option<u64>,
}

/// An OpenAI embeddings body as a `batchEmbedContents` body for `model` (`models/{name}`).
/// Token arrays are refused: Gemini embeds text only.
pub fn embeddings(body: &[u8], model: &str) -> Result<Embeddings, RequestError> {
    let crate::wire::embeddings::TextsToEmbed {
        texts: inputs,
        dimensions,
        base64,
    } = crate::wire::embeddings::read_request(body)?;
    let requests = inputs
        .into_iter()
        .map(|text| EmbedContent {
            model,
            content: Content {
                role: None,
                parts: vec![text_part(text)],
            },
            output_dimensionality: dimensions,
        })
        .collect();
    Ok(Embeddings {
        body: to_bytes(&BatchEmbed { requests })?,
        base64,
    })
}
