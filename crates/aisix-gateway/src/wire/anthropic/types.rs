//! Anthropic's Messages API as typed values: the request, the response, and token usage, for
//! the paths that translate a body. Fields the translators do not read are not modelled.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::content::TextOr;
use crate::wire::usage::Usage;

/// `POST /v1/messages` (and `/v1/messages/count_tokens`, which has no `max_tokens`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<Message>,
    /// Required by `/v1/messages`; the translator checks it, so that count_tokens can share
    /// the type.
    pub max_tokens: Option<u64>,
    pub system: Option<TextOr<TextBlock>>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stream: Option<bool>,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    pub metadata: Option<Metadata>,
    pub thinking: Option<ThinkingConfig>,
}

/// `thinking`: extended thinking, `{"type": "enabled", "budget_tokens": n}` or
/// `{"type": "disabled"}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ThinkingConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub budget_tokens: Option<u64>,
}

/// A turn's role. Anthropic's API knows only `user` and `assistant`; clients such as Claude
/// Code also put `system` (and `developer`) turns in `messages`, which the gateway places where
/// the upstream expects them (README, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Developer,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Message {
    pub role: Role,
    pub content: TextOr<Block>,
}

/// A `text` block where only text is allowed (`system`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename = "text")]
pub struct TextBlock {
    pub text: String,
}

/// A content block a client may send.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    Image {
        source: Source,
    },
    Document {
        source: Source,
    },
    ToolUse(ToolUse),
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<TextOr<Block>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    /// Extended thinking from an earlier turn; an OpenAI upstream has no place for it.
    Thinking(Thinking),
    RedactedThinking {
        data: String,
    },
}

/// A `tool_use` block: the model calls a tool, in an answer or in an earlier turn of a request.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// A `thinking` block (extended thinking), in an answer or in an earlier turn of a request.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Thinking {
    pub thinking: String,
    #[serde(default)]
    pub signature: String,
}

/// Where an image or a document comes from.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Source {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Absent on Anthropic's server tools, which carry a versioned `type` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    Auto {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// A complete (non-streaming) answer of `/v1/messages`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct MessageResponse {
    pub id: String,
    #[serde(rename = "type", default = "message_type")]
    pub kind: String,
    #[serde(default = "assistant")]
    pub role: Role,
    pub content: Vec<ResponseBlock>,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    pub usage: TokenUsage,
}

/// A content block of an answer. Blocks an OpenAI client has no place for (server tool calls
/// and their results) read as [`ResponseBlock::Other`] and are left out of translations.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseBlock {
    Text {
        text: String,
    },
    ToolUse(ToolUse),
    Thinking(Thinking),
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Other,
}

/// Tokens of one answer, split as Anthropic reports them: `input_tokens` excludes the tokens
/// read from and written to the prompt cache.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct TokenUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
}

impl TokenUsage {
    pub fn cache_read(&self) -> u64 {
        self.cache_read_input_tokens.unwrap_or(0)
    }

    pub fn cache_write(&self) -> u64 {
        self.cache_creation_input_tokens.unwrap_or(0)
    }

    /// Every prompt token, cached or not: what OpenAI calls `prompt_tokens`.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read())
            .saturating_add(self.cache_write())
    }

    /// The gateway's accounting view (prompt and completion tokens).
    pub fn to_usage(&self) -> Usage {
        let prompt_tokens = self.prompt_tokens();
        Usage {
            prompt_tokens,
            completion_tokens: self.output_tokens,
            total_tokens: prompt_tokens.saturating_add(self.output_tokens),
        }
    }
}

/// `POST /v1/messages/count_tokens`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub struct TokenCount {
    pub input_tokens: u64,
}

fn message_type() -> String {
    "message".to_owned()
}

fn assistant() -> Role {
    Role::Assistant
}
