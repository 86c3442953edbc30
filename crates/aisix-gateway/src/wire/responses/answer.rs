//! A whole chat completion as a Responses answer: the first choice's text (and refusal) as a
//! message item, each tool call as a `function_call` item, `finish_reason` as the status
//! (`length` → incomplete for `max_output_tokens`), and the usage with its cached tokens. One
//! parse of the answer, one serialization.

use bytes::Bytes;

use super::ids::new_id;
use super::object::{Echo, function_call_item, message_item, status_of};
use super::usage::ResponsesUsage;
use crate::wire::anthropic::response::Malformed;
use crate::wire::chat::{ChatCompletion, ChatUsage};
use crate::wire::usage::Usage;

/// A translated whole answer.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslatedAnswer {
    pub body: Bytes,
    pub usage: Option<Usage>,
    /// The response object (for the store).
    pub response: serde_json::Value,
}

/// The Responses answer to the request `echo` describes, from the chat completion `body`.
pub fn from_chat(body: &[u8], echo: &Echo) -> Result<TranslatedAnswer, Malformed> {
    let chat: ChatCompletion = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("the chat completion could not be read: {e}")))?;
    let choice = chat.choices.into_iter().next();
    let mut output = Vec::new();
    let mut finish = None;
    if let Some(choice) = choice {
        finish = choice.finish_reason;
        let message = choice.message;
        let text = message.content.unwrap_or_default();
        if !text.is_empty() || message.refusal.is_some() {
            output.push(message_item(
                &new_id("msg_"),
                &text,
                message.refusal.as_deref(),
            ));
        }
        for call in message.tool_calls.into_iter().flatten() {
            output.push(function_call_item(
                &new_id("fc_"),
                &call.id,
                &call.function.name,
                &call.function.arguments,
            ));
        }
    }
    let usage = chat.usage.map(responses_usage);
    let response = echo.response(status_of(finish.as_deref()), output, usage);
    let body = serde_json::to_vec(&response)
        .map_err(|e| Malformed(format!("the answer could not be written: {e}")))?;
    Ok(TranslatedAnswer {
        body: Bytes::from(body),
        usage: usage.map(ResponsesUsage::to_usage),
        response,
    })
}

/// A chat usage in the Responses shape.
pub fn responses_usage(usage: ChatUsage) -> ResponsesUsage {
    let cached = usage
        .prompt_tokens_details
        .and_then(|d| d.cached_tokens)
        .or(usage.cache_read_input_tokens)
        .unwrap_or(0);
    ResponsesUsage::from_chat(usage.tokens, cached, 0)
}
