//! Complete (non-streaming) answers between the dialects: an Anthropic message as an OpenAI
//! chat completion ([`to_openai`]) and the reverse ([`to_anthropic`]), plus a count_tokens
//! answer made from an OpenAI completion's usage. Each also reports the usage it carried.

use bytes::Bytes;
use serde_json::Value;

use crate::wire::chat::{AssistantMessage, ChatCompletion, Choice};
use crate::wire::json;

use super::mapping::{finish_reason, stop_reason, tool_call, usage_from_openai, usage_to_openai};
use super::request::OUTPUT_TOOL;
use super::types::{
    MessageResponse, ResponseBlock, Role, Thinking, TokenCount, TokenUsage, ToolUse,
};

/// An upstream answer that cannot be translated; the message is for the log, and the client
/// gets a 502.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// A translated answer and the usage it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub body: Bytes,
    pub usage: TokenUsage,
}

/// An Anthropic message body as an OpenAI chat completion; `created` is the Unix time to
/// report (Anthropic's answer has none).
pub fn to_openai(body: &[u8], created: u64) -> Result<Answer, Malformed> {
    to_openai_with(body, created, false)
}

/// [`to_openai`] for a request that asked for structured output: a call of
/// [`OUTPUT_TOOL`] is the answer's text, and finishes it with `stop`.
pub fn to_openai_with(body: &[u8], created: u64, structured: bool) -> Result<Answer, Malformed> {
    let message: MessageResponse = json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    let usage = message.usage;
    let mut completion = message_to_completion(message, created);
    if structured {
        output_as_text(&mut completion);
    }
    Ok(Answer {
        body: to_bytes(&completion)?,
        usage,
    })
}

/// An OpenAI chat completion body as an Anthropic message.
pub fn to_anthropic(body: &[u8]) -> Result<Answer, Malformed> {
    let completion: ChatCompletion =
        json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    let message = completion_to_message(completion)?;
    Ok(Answer {
        usage: message.usage,
        body: to_bytes(&message)?,
    })
}

/// count_tokens' answer, `{"input_tokens": n}`, from the usage of an OpenAI completion made
/// for the purpose ([`super::request::count_tokens_to_openai`]).
pub fn count_tokens_from_openai(body: &[u8]) -> Result<Bytes, Malformed> {
    let usage = crate::wire::usage::from_response(body)
        .ok_or_else(|| Malformed("the upstream answer has no usage".into()))?;
    to_bytes(&TokenCount {
        input_tokens: usage.prompt_tokens,
    })
}

fn to_bytes(value: &impl serde::Serialize) -> Result<Bytes, Malformed> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Malformed(e.to_string()))
}

/// The typed half of [`to_openai`]. Thinking becomes `reasoning_content` (its signature,
/// which only Anthropic can check, is dropped); redacted thinking and server-tool blocks have
/// no place in a chat completion and are left out.
pub fn message_to_completion(message: MessageResponse, created: u64) -> ChatCompletion {
    let mut text = String::new();
    let mut reasoning: Option<String> = None;
    let mut calls = Vec::new();
    for block in message.content {
        match block {
            ResponseBlock::Text { text: piece } => text.push_str(&piece),
            ResponseBlock::ToolUse(call) => calls.push(tool_call(call)),
            ResponseBlock::Thinking(thinking) => {
                reasoning
                    .get_or_insert_with(String::new)
                    .push_str(&thinking.thinking);
            }
            ResponseBlock::RedactedThinking { .. } | ResponseBlock::Other => {}
        }
    }
    ChatCompletion {
        id: message.id,
        object: "chat.completion".to_owned(),
        created,
        model: message.model,
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage {
                role: "assistant".to_owned(),
                // OpenAI answers `null` content for a reply made only of tool calls.
                content: (!text.is_empty() || calls.is_empty()).then_some(text),
                reasoning_content: reasoning,
                reasoning: None,
                refusal: None,
                tool_calls: (!calls.is_empty()).then_some(calls),
            },
            logprobs: None,
            finish_reason: message
                .stop_reason
                .as_deref()
                .map(|r| finish_reason(r).to_owned()),
        }],
        usage: Some(usage_to_openai(&message.usage)),
    }
}

/// The structured output's tool call made the message's text (its arguments, the JSON asked
/// for); an answer that made no other call finishes with `stop`.
fn output_as_text(completion: &mut ChatCompletion) {
    for choice in &mut completion.choices {
        let message = &mut choice.message;
        let Some(calls) = message.tool_calls.take() else {
            continue;
        };
        let (output, rest): (Vec<_>, Vec<_>) = calls
            .into_iter()
            .partition(|c| c.function.name == OUTPUT_TOOL);
        for call in output {
            message
                .content
                .get_or_insert_with(String::new)
                .push_str(&call.function.arguments);
        }
        if rest.is_empty() {
            if choice.finish_reason.as_deref() == Some("tool_calls") {
                choice.finish_reason = Some("stop".to_owned());
            }
        } else {
            message.tool_calls = Some(rest);
        }
    }
}

/// The typed half of [`to_anthropic`]: the first choice becomes the message.
pub fn completion_to_message(completion: ChatCompletion) -> Result<MessageResponse, Malformed> {
    let choice = completion
        .choices
        .into_iter()
        .find(|c| c.index == 0)
        .ok_or_else(|| Malformed("the upstream answer has no choice".into()))?;
    let mut content = Vec::new();
    let message = choice.message;
    // Unsigned: only Anthropic can sign thinking, and no Anthropic upstream will see it again.
    let reasoning = match message.reasoning {
        Some(Value::String(text)) => Some(text),
        _ => None,
    };
    if let Some(thinking) = message
        .reasoning_content
        .or(reasoning)
        .filter(|t| !t.is_empty())
    {
        content.push(ResponseBlock::Thinking(Thinking {
            thinking,
            signature: String::new(),
        }));
    }
    for text in [message.content, message.refusal].into_iter().flatten() {
        if !text.is_empty() {
            content.push(ResponseBlock::Text { text });
        }
    }
    for (i, call) in message.tool_calls.into_iter().flatten().enumerate() {
        let input = if call.function.arguments.trim().is_empty() {
            Value::Object(serde_json::Map::new())
        } else {
            serde_json::from_str::<Value>(&call.function.arguments)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    Malformed(format!(
                        "tool call {i} of the upstream answer has arguments that are not a JSON object"
                    ))
                })?
        };
        content.push(ResponseBlock::ToolUse(ToolUse {
            id: call.id,
            name: call.function.name,
            input,
        }));
    }
    Ok(MessageResponse {
        id: completion.id,
        kind: "message".to_owned(),
        role: Role::Assistant,
        content,
        model: completion.model,
        stop_reason: Some(
            stop_reason(choice.finish_reason.as_deref().unwrap_or("stop")).to_owned(),
        ),
        stop_sequence: None,
        usage: completion
            .usage
            .as_ref()
            .map(usage_from_openai)
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_only_answer_has_null_content_and_tool_calls_finish() {
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 4}});
        let answer = to_openai(message.to_string().as_bytes(), 7).unwrap();
        let out: Value = serde_json::from_slice(&answer.body).unwrap();
        let choice = &out["choices"][0];
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
        assert_eq!(out["created"], 7);
        assert_eq!(answer.usage.output_tokens, 4);
    }

    #[test]
    fn an_openai_answer_without_choices_or_with_broken_arguments_is_malformed() {
        assert!(to_anthropic(br#"{"id":"x","choices":[]}"#).is_err());
        let broken = json!({"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":"}}]}}]});
        assert!(to_anthropic(broken.to_string().as_bytes()).is_err());
        assert!(to_openai(b"<html>", 0).is_err());
    }

    #[test]
    fn count_tokens_reads_the_prompt_tokens() {
        let body = br#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}"#;
        assert_eq!(
            &count_tokens_from_openai(body).unwrap()[..],
            br#"{"input_tokens":12}"#
        );
        assert!(count_tokens_from_openai(br#"{"id":"c"}"#).is_err());
    }
}
