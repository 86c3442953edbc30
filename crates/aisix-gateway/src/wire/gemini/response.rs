//! Whole answers from Gemini: a `generateContent` answer as an OpenAI chat completion
//! ([`to_chat`]) and a `batchEmbedContents` answer as OpenAI's embeddings list
//! ([`embeddings_to_openai`]). Each reports the usage it carried.

use bytes::Bytes;
use serde::Serialize;

use super::finish_reason;
use super::signature;
use super::types::{BatchEmbedResponse, Candidate, GenerateContentResponse, Part, UsageMetadata};
use crate::wire::anthropic::response::Malformed;
use crate::wire::json;
use crate::wire::usage::Usage;

/// A translated answer and the usage it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub body: Bytes,
    pub usage: Usage,
}

impl UsageMetadata {
    /// The counts as OpenAI reports them: thoughts are output tokens (as OpenAI's reasoning
    /// tokens are), cached tokens part of the prompt.
    pub fn to_usage(self) -> Usage {
        let completion = self
            .candidates_token_count
            .saturating_add(self.thoughts_token_count);
        let sum = self.prompt_token_count.saturating_add(completion);
        Usage {
            prompt_tokens: self.prompt_token_count,
            completion_tokens: completion,
            total_tokens: self.total_token_count.max(sum),
        }
    }

    /// OpenAI's `usage` object, with the cached and reasoning details.
    pub(crate) fn to_chat(self) -> ChatUsageOut {
        let usage = self.to_usage();
        ChatUsageOut {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            prompt_tokens_details: CachedOut {
                cached_tokens: self.cached_content_token_count,
            },
            completion_tokens_details: ReasoningOut {
                reasoning_tokens: self.thoughts_token_count,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct ChatUsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedOut,
    completion_tokens_details: ReasoningOut,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct CachedOut {
    cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct ReasoningOut {
    reasoning_tokens: u64,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChoiceOut>,
    usage: ChatUsageOut,
}

#[derive(Serialize)]
struct ChoiceOut {
    index: u32,
    message: MessageOut,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize)]
struct MessageOut {
    role: &'static str,
    content: Option<String>,
    reasoning_content: Option<String>,
    tool_calls: Option<Vec<ToolCallOut>>,
}

#[derive(Serialize)]
pub(crate) struct ToolCallOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut,
}

#[derive(Serialize)]
pub(crate) struct FunctionOut {
    pub name: String,
    pub arguments: String,
}

/// The id a client gets for the function call of `part`: Gemini's, or when it gave none one
/// unique within the answer, with the part's thought signature carried in it.
pub(crate) fn call_id(part: &Part, given: Option<&str>, answer: &str, n: usize) -> String {
    let id = match given {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("call_{answer}_{n}"),
    };
    signature::with_signature(id, part.thought_signature.as_deref())
}

/// A Gemini answer as an OpenAI chat completion; `created` is the Unix time to report,
/// `model` the name to give (Gemini's `modelVersion` when empty).
pub fn to_chat(body: &[u8], created: u64, model: &str) -> Result<Answer, Malformed> {
    let answer: GenerateContentResponse =
        json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    let usage = answer.usage_metadata.unwrap_or_default();
    let id = answer.response_id.as_deref().unwrap_or("gemini");
    let model = if model.is_empty() {
        answer.model_version.as_deref().unwrap_or_default()
    } else {
        model
    };
    let mut choices: Vec<ChoiceOut> = answer
        .candidates
        .iter()
        .map(|candidate| choice(candidate, id))
        .collect();
    if choices.is_empty() {
        // The prompt was blocked (`promptFeedback.blockReason`): no candidate at all.
        let blocked = answer
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref())
            .is_some();
        if !blocked {
            return Err(Malformed("the answer has no candidates".into()));
        }
        choices.push(ChoiceOut {
            index: 0,
            message: MessageOut {
                role: "assistant",
                content: Some(String::new()),
                reasoning_content: None,
                tool_calls: None,
            },
            logprobs: None,
            finish_reason: "content_filter",
        });
    }
    let completion = Completion {
        id: format!("chatcmpl-{id}"),
        object: "chat.completion",
        created,
        model,
        choices,
        usage: usage.to_chat(),
    };
    Ok(Answer {
        body: serde_json::to_vec(&completion)
            .map(Bytes::from)
            .map_err(|e| Malformed(e.to_string()))?,
        usage: usage.to_usage(),
    })
}

fn choice(candidate: &Candidate, id: &str) -> ChoiceOut {
    let mut text: Option<String> = None;
    let mut thought: Option<String> = None;
    let mut calls = Vec::new();
    for part in candidate.content.iter().flat_map(|c| c.parts.iter()) {
        if let Some(call) = &part.function_call {
            calls.push(ToolCallOut {
                index: None,
                id: call_id(part, call.id.as_deref(), id, calls.len()),
                kind: "function",
                function: FunctionOut {
                    name: call.name.clone(),
                    arguments: call
                        .args
                        .as_ref()
                        .map_or_else(|| "{}".to_owned(), ToString::to_string),
                },
            });
        } else if let Some(more) = &part.text {
            let into = if part.thought == Some(true) {
                &mut thought
            } else {
                &mut text
            };
            into.get_or_insert_with(String::new).push_str(more);
        }
    }
    let reason = candidate.finish_reason.as_deref().unwrap_or("STOP");
    ChoiceOut {
        index: candidate.index,
        finish_reason: finish_reason(reason, !calls.is_empty()),
        message: MessageOut {
            role: "assistant",
            content: text.or_else(|| calls.is_empty().then(String::new)),
            reasoning_content: thought,
            tool_calls: (!calls.is_empty()).then_some(calls),
        },
        logprobs: None,
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountTokensResponse {
    total_tokens: u64,
}

/// A `countTokens` answer as Anthropic's count_tokens answer, `{"input_tokens": n}`.
pub fn count_tokens_to_anthropic(body: &[u8]) -> Result<Bytes, Malformed> {
    let count: CountTokensResponse =
        json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    serde_json::to_vec(&serde_json::json!({ "input_tokens": count.total_tokens }))
        .map(Bytes::from)
        .map_err(|e| Malformed(e.to_string()))
}

/// A `batchEmbedContents` answer as OpenAI's embeddings list naming `model`; `base64` gives
/// each vector as base64 of little-endian `f32`s. Gemini reports no token counts: the usage
/// is zero.
pub fn embeddings_to_openai(body: &[u8], model: &str, base64: bool) -> Result<Answer, Malformed> {
    let answer: BatchEmbedResponse =
        json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    let body = crate::wire::embeddings::list(
        answer.embeddings.into_iter().map(|e| e.values),
        model,
        base64,
        0,
    )?;
    Ok(Answer {
        body,
        usage: Usage::default(),
    })
}
