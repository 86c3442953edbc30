//! OpenAI chat completions as typed values: the request, the response and the stream chunk, for
//! the paths that must translate a body. The passthrough path never builds these; it edits bytes
//! ([`super::openai`]). Fields the translators do not read are not modelled: serde skips them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::content::TextOr;
use super::usage::Usage;

/// `POST /v1/chat/completions`, as far as a translation reads or writes it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Option<TextOr<String>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub tools: Option<Vec<ChatTool>>,
    pub tool_choice: Option<ChatToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub user: Option<String>,
    pub n: Option<u64>,
    pub response_format: Option<ResponseFormat>,
    /// How hard a reasoning model thinks: `minimal`, `low`, `medium`, `high`.
    pub reasoning_effort: Option<String>,
    /// The same as `reasoning.effort`, the Responses API's shape some servers take in chat.
    pub reasoning: Option<ReasoningOptions>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ReasoningOptions {
    pub effort: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with its schema.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub json_schema: Option<JsonSchemaFormat>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Option<Value>,
    pub strict: Option<bool>,
}

/// One message of the conversation, by role.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    System {
        content: TextOr<ContentPart>,
    },
    /// The newer name of `system` for reasoning models.
    Developer {
        content: TextOr<ContentPart>,
    },
    User {
        content: TextOr<ContentPart>,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<TextOr<ContentPart>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<ToolCall>>,
    },
    Tool {
        content: TextOr<ContentPart>,
        tool_call_id: String,
    },
}

/// One part of a multi-part message.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: ImageUrl,
    },
    /// A file given inline (`file_data`, a data URL); only PDFs translate.
    File {
        file: FileData,
    },
    Refusal {
        refusal: String,
    },
    InputAudio {
        input_audio: Value,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ImageUrl {
    /// An `https:` URL or a `data:` URL.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FileData {
    pub file_data: Option<String>,
    pub file_id: Option<String>,
    pub filename: Option<String>,
}

/// A tool call made by the assistant.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text (OpenAI sends a string, not an object).
    #[serde(default)]
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatTool {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDef>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Value>,
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"`, or one named function.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ChatToolChoice {
    Mode(String),
    Function {
        #[serde(rename = "type")]
        kind: String,
        function: NamedFunction,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct NamedFunction {
    pub name: String,
}

/// A complete (non-streaming) chat completion.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletion {
    #[serde(default)]
    pub id: String,
    #[serde(default = "completion_object")]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChatUsage>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: AssistantMessage,
    /// Always written, `null` included, as OpenAI does.
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The assistant's message in a complete answer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AssistantMessage {
    #[serde(default = "assistant_role")]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning, as OpenAI-compatible servers give it (DeepSeek, vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Reasoning, as OpenRouter and Ollama give it (a string; any other shape is ignored);
    /// read, never written.
    #[serde(default, skip_serializing)]
    pub reasoning: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// Usage as OpenAI reports it: the token counts (`prompt_tokens` includes cached tokens) and
/// their details. Anthropic's cache counts ride along under their own names, as other gateways
/// report them.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ChatUsage {
    #[serde(flatten)]
    pub tokens: Usage,
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// One `chat.completion.chunk` of a stream, as read from an upstream.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<ChatUsage>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Delta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of a streamed tool call: the first piece of a call carries its id and name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ToolCallDelta {
    #[serde(default)]
    pub index: u64,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

fn function_type() -> String {
    "function".to_owned()
}

fn completion_object() -> String {
    "chat.completion".to_owned()
}

fn assistant_role() -> String {
    "assistant".to_owned()
}
