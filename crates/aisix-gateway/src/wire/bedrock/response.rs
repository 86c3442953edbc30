//! Whole answers from Bedrock: a Converse answer as an Anthropic message ([`to_messages`];
//! an OpenAI client's answer is that message translated on), and an InvokeModel embeddings
//! answer (Titan's or Cohere's) as OpenAI's embeddings list ([`embeddings_to_openai`]).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::request::EmbeddingFamily;
use super::stop_reason;
use crate::wire::anthropic::response::Malformed;
use crate::wire::anthropic::types::{
    MessageResponse, ResponseBlock, Role, Thinking, TokenUsage, ToolUse,
};
use crate::wire::json;
use crate::wire::usage::Usage;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseResponse {
    output: Output,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: ConverseUsage,
}

#[derive(Deserialize)]
struct Output {
    message: OutputMessage,
}

#[derive(Deserialize)]
struct OutputMessage {
    #[serde(default)]
    content: Vec<ContentBlock>,
}

/// One block of an answer; a block of a kind not modelled here (a citation, an image) reads
/// as all `None` and is left out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContentBlock {
    text: Option<String>,
    tool_use: Option<ToolUseBlock>,
    reasoning_content: Option<Reasoning>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseBlock {
    tool_use_id: String,
    name: String,
    #[serde(default)]
    input: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reasoning {
    reasoning_text: Option<ReasoningText>,
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
struct ReasoningText {
    #[serde(default)]
    text: String,
    #[serde(default)]
    signature: Option<String>,
}

/// Converse's token counts: `inputTokens` leaves out the tokens read from and written to the
/// prompt cache, as Anthropic's `input_tokens` does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    pub cache_read_input_tokens: Option<u64>,
    pub cache_write_input_tokens: Option<u64>,
}

impl ConverseUsage {
    /// The counts under Anthropic's names.
    pub fn to_anthropic(self) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_input_tokens: self.cache_write_input_tokens,
            cache_read_input_tokens: self.cache_read_input_tokens,
        }
    }
}

/// A Converse answer as an Anthropic message with `id`, naming `model`.
pub fn to_messages(body: &[u8], id: &str, model: &str) -> Result<MessageResponse, Malformed> {
    let answer: ConverseResponse = json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    let mut content = Vec::with_capacity(answer.output.message.content.len());
    for block in answer.output.message.content {
        if let Some(text) = block.text {
            content.push(ResponseBlock::Text { text });
        } else if let Some(call) = block.tool_use {
            content.push(ResponseBlock::ToolUse(ToolUse {
                id: call.tool_use_id,
                name: call.name,
                input: call.input,
            }));
        } else if let Some(reasoning) = block.reasoning_content {
            if let Some(text) = reasoning.reasoning_text {
                content.push(ResponseBlock::Thinking(Thinking {
                    thinking: text.text,
                    signature: text.signature.unwrap_or_default(),
                }));
            } else if let Some(data) = reasoning.redacted_content {
                content.push(ResponseBlock::RedactedThinking { data });
            }
        }
    }
    Ok(MessageResponse {
        id: id.to_owned(),
        kind: "message".to_owned(),
        role: Role::Assistant,
        content,
        model: model.to_owned(),
        stop_reason: Some(
            stop_reason(answer.stop_reason.as_deref().unwrap_or("end_turn")).to_owned(),
        ),
        stop_sequence: None,
        usage: answer.usage.to_anthropic(),
    })
}

/// A Converse answer as Anthropic's message body, and its usage.
pub fn to_messages_body(
    body: &[u8],
    id: &str,
    model: &str,
) -> Result<(Bytes, TokenUsage), Malformed> {
    let message = to_messages(body, id, model)?;
    let bytes = serde_json::to_vec(&message).map_err(|e| Malformed(e.to_string()))?;
    Ok((Bytes::from(bytes), message.usage))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TitanAnswer {
    embedding: Vec<f32>,
    #[serde(default)]
    input_text_token_count: u64,
}

#[derive(Deserialize)]
struct CohereAnswer {
    embeddings: Vec<Vec<f32>>,
}

/// An InvokeModel embeddings answer of `family` as OpenAI's list naming `model`. Titan counts
/// its input tokens; Cohere's body has no count (the usage is zero).
pub fn embeddings_to_openai(
    body: &[u8],
    family: EmbeddingFamily,
    model: &str,
    base64: bool,
) -> Result<(Bytes, Usage), Malformed> {
    let (vectors, tokens) = match family {
        EmbeddingFamily::Titan => {
            let answer: TitanAnswer =
                json::parse(body).map_err(|e| Malformed(e.message().into()))?;
            (vec![answer.embedding], answer.input_text_token_count)
        }
        EmbeddingFamily::Cohere => {
            let answer: CohereAnswer =
                json::parse(body).map_err(|e| Malformed(e.message().into()))?;
            (answer.embeddings, 0)
        }
    };
    let body = crate::wire::embeddings::list(vectors, model, base64, tokens)?;
    Ok((
        body,
        Usage {
            prompt_tokens: tokens,
            completion_tokens: 0,
            total_tokens: tokens,
        },
    ))
}
