//! Request bodies between the dialects: an OpenAI chat request becomes an Anthropic Messages
//! request ([`to_anthropic`]) and the reverse ([`to_openai`], [`count_tokens_to_openai`]). A
//! request that cannot be expressed on the other side is refused with a message naming the
//! field, never silently changed; fields with no counterpart and no effect on the answer's
//! shape are dropped (see README, "Anthropic translation"). The typed halves live in
//! [`chat_to_messages`](fn@chat_to_messages) and [`messages_to_chat`](fn@messages_to_chat).

mod chat_to_messages;
mod messages_to_chat;

use bytes::Bytes;

use crate::wire::chat::ChatRequest;
use crate::wire::json::{self, ParseError};

use super::tool_ids::ToolIds;
use super::types::MessagesRequest;

/// Where a chat request puts its output cap: the model's choice, configured per model.
pub use aisix_config::OutputTokensField;
pub use chat_to_messages::{OUTPUT_TOOL, chat_to_messages, tool_call_ids};
pub use messages_to_chat::messages_to_chat;

/// `max_tokens` sent to Anthropic when an OpenAI client gave none (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// A request the client sent that cannot be translated; the message is safe to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not JSON.
    InvalidJson(String),
    /// JSON, but not a valid request, or one the other dialect cannot express.
    Invalid(String),
}

impl RequestError {
    pub fn message(&self) -> &str {
        match self {
            RequestError::InvalidJson(message) | RequestError::Invalid(message) => message,
        }
    }
}

impl From<ParseError> for RequestError {
    fn from(error: ParseError) -> Self {
        match error {
            ParseError::Syntax(message) => RequestError::InvalidJson(message),
            ParseError::Shape(message) => RequestError::Invalid(message),
        }
    }
}

pub(super) fn invalid(message: impl Into<String>) -> RequestError {
    RequestError::Invalid(json::bounded(message.into()))
}

/// A translated request body and what the answer's translation needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslatedRequest {
    pub body: Bytes,
    pub stream: bool,
    /// The OpenAI client asked for the usage-only final chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The tool call ids changed on the way (to Anthropic), to map back to the client's.
    pub tool_ids: ToolIds,
    /// The client asked for structured output, which comes back as a call of
    /// [`OUTPUT_TOOL`] (to Anthropic): the answer's translation makes it the text.
    pub structured: bool,
}

/// An OpenAI chat completions body as an Anthropic Messages body for `upstream_model`.
pub fn to_anthropic(
    body: &[u8],
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<TranslatedRequest, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let stream = request.stream == Some(true);
    let include_usage = stream
        && request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
    let tool_ids = ToolIds::new(tool_call_ids(&request));
    let structured = request
        .response_format
        .as_ref()
        .is_some_and(|f| f.kind != "text");
    let mut messages = chat_to_messages(request, default_max_tokens, &tool_ids)?;
    messages.model = upstream_model.to_owned();
    Ok(TranslatedRequest {
        body: to_bytes(&messages)?,
        stream,
        include_usage,
        tool_ids,
        structured,
    })
}

/// An Anthropic Messages body as an OpenAI chat completions body for `upstream_model`. A
/// stream asks for usage (`stream_options.include_usage`), which Anthropic's stream always has.
/// The output cap goes in `field`.
pub fn to_openai(
    body: &[u8],
    upstream_model: &str,
    field: OutputTokensField,
) -> Result<TranslatedRequest, RequestError> {
    let request: MessagesRequest = json::parse(body)?;
    if request.max_tokens.is_none() {
        return Err(invalid("max_tokens: Field required"));
    }
    let stream = request.stream == Some(true);
    let mut chat = messages_to_chat(request, field)?;
    chat.model = upstream_model.to_owned();
    Ok(TranslatedRequest {
        body: to_bytes(&chat)?,
        stream,
        include_usage: stream,
        tool_ids: ToolIds::default(),
        structured: false,
    })
}

/// An Anthropic count_tokens body as an OpenAI chat request whose answer's `prompt_tokens` is
/// the count: the same conversation, one output token at most, not streamed.
pub fn count_tokens_to_openai(
    body: &[u8],
    upstream_model: &str,
    field: OutputTokensField,
) -> Result<Bytes, RequestError> {
    let request: MessagesRequest = json::parse(body)?;
    let mut chat = messages_to_chat(request, field)?;
    chat.model = upstream_model.to_owned();
    chat.reasoning_effort = None;
    match field {
        OutputTokensField::MaxTokens => chat.max_tokens = Some(1),
        OutputTokensField::MaxCompletionTokens => chat.max_completion_tokens = Some(1),
    }
    chat.stream = None;
    chat.stream_options = None;
    to_bytes(&chat)
}

fn to_bytes(value: &impl serde::Serialize) -> Result<Bytes, RequestError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| invalid(format!("the request could not be translated: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn anthropic(body: Value) -> Value {
        let out =
            to_anthropic(body.to_string().as_bytes(), "claude-x", DEFAULT_MAX_TOKENS).unwrap();
        serde_json::from_slice(&out.body).unwrap()
    }

    fn openai(body: Value) -> Value {
        let out = to_openai(
            body.to_string().as_bytes(),
            "gpt-x",
            OutputTokensField::MaxTokens,
        )
        .unwrap();
        serde_json::from_slice(&out.body).unwrap()
    }

    #[test]
    fn max_tokens_defaults_and_max_completion_tokens_wins() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(anthropic(base.clone())["max_tokens"], DEFAULT_MAX_TOKENS);
        let mut both = base;
        both["max_tokens"] = json!(10);
        both["max_completion_tokens"] = json!(20);
        assert_eq!(anthropic(both)["max_tokens"], 20);
    }

    #[test]
    fn system_messages_anywhere_are_hoisted_in_order() {
        let out = anthropic(json!({"model": "m", "messages": [
            {"role": "system", "content": "one"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "text", "text": "two"}]},
        ]}));
        assert_eq!(
            out["system"],
            json!([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}])
        );
        assert_eq!(out["messages"], json!([{"role": "user", "content": "hi"}]));
        let single = anthropic(json!({"model": "m", "messages": [
            {"role": "system", "content": "only"}, {"role": "user", "content": "hi"}]}));
        assert_eq!(single["system"], "only");
    }

    #[test]
    fn ids_that_sanitize_alike_stay_apart_and_map_back() {
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}});
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [call("call.1"), call("call_1")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "second"},
            {"role": "tool", "tool_call_id": "call.1", "content": "first"},
        ]});
        let out = to_anthropic(body.to_string().as_bytes(), "claude-x", 9).unwrap();
        let sent: Value = serde_json::from_slice(&out.body).unwrap();
        let uses = &sent["messages"][1]["content"];
        let results = &sent["messages"][2]["content"];
        assert_eq!(uses[0]["id"], "call_1-2");
        assert_eq!(uses[1]["id"], "call_1");
        assert_eq!(results[0]["tool_use_id"], "call_1");
        assert_eq!(results[0]["content"], "second");
        assert_eq!(results[1]["tool_use_id"], "call_1-2");
        assert_eq!(results[1]["content"], "first");
        assert_eq!(out.tool_ids.client("call_1-2"), "call.1");
        assert_eq!(out.tool_ids.client("call_1"), "call_1");
    }

    #[test]
    fn parallel_tool_results_share_one_user_turn_with_sanitized_ids() {
        let out = anthropic(json!({"model": "m", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "functions.get:0", "type": "function", "function": {"name": "get", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "functions.get:0", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        ]}));
        assert_eq!(
            out["messages"][1],
            json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "functions_get_0", "name": "get", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get", "input": {}}]})
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "functions_get_0", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"}]})
        );
    }

    #[test]
    fn untranslatable_requests_are_refused_naming_the_field() {
        let refuse = |body: Value| {
            to_anthropic(body.to_string().as_bytes(), "m", 1)
                .unwrap_err()
                .message()
                .to_owned()
        };
        let msg = |content: Value| json!({"model": "m", "messages": [{"role": "user", "content": content}]});
        assert!(
            refuse(msg(
                json!([{"type": "image_url", "image_url": {"url": "ftp://x"}}])
            ))
            .starts_with("messages[0].content[0].image_url.url")
        );
        assert!(refuse(msg(json!([{"type": "input_audio", "input_audio": {}}]))).contains("audio"));
        assert!(refuse(json!({"model": "m", "n": 2, "messages": []})).starts_with("n:"));
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}))
                .starts_with("messages[0]")
        );
        assert!(
            refuse(
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]})
            )
            .starts_with("messages[0].tool_calls[0].function.arguments")
        );
        assert!(matches!(
            to_anthropic(b"{", "m", 1),
            Err(RequestError::InvalidJson(_))
        ));
    }

    #[test]
    fn anthropic_request_needs_max_tokens_and_count_tokens_does_not() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            to_openai(
                body.to_string().as_bytes(),
                "g",
                OutputTokensField::MaxTokens
            )
            .unwrap_err()
            .message(),
            "max_tokens: Field required"
        );
        let count = count_tokens_to_openai(
            body.to_string().as_bytes(),
            "g",
            OutputTokensField::MaxTokens,
        )
        .unwrap();
        let count: Value = serde_json::from_slice(&count).unwrap();
        assert_eq!(count["max_tokens"], 1);
        assert_eq!(count["model"], "g");
    }

    #[test]
    fn tool_results_become_tool_messages_before_the_rest_of_the_turn() {
        let out = openai(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": "taken"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"type": "text", "text": "what is it?"}]},
        ]}));
        assert_eq!(
            out["messages"][1],
            json!({"role": "tool", "tool_call_id": "t1", "content": "taken"})
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "what is it?"}]})
        );
    }

    #[test]
    fn system_and_developer_turns_stay_in_place_for_chat() {
        let body = json!({"model": "m", "max_tokens": 5, "system": "top", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "mid"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ]});
        let roles = |out: &Value| -> Vec<String> {
            out["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap().to_owned())
                .collect()
        };
        let out = openai(body.clone());
        // The developer turn moves after the tool message that answers the call it interrupts.
        assert_eq!(
            roles(&out),
            ["system", "user", "system", "assistant", "tool", "developer"]
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "system", "content": "mid"})
        );
        assert_eq!(
            out["messages"][5],
            json!({"role": "developer", "content": [{"type": "text", "text": "dev"}]})
        );
        let count = count_tokens_to_openai(
            body.to_string().as_bytes(),
            "g",
            OutputTokensField::MaxTokens,
        )
        .unwrap();
        let count: Value = serde_json::from_slice(&count).unwrap();
        assert_eq!(roles(&count), roles(&out));

        let image = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x"}}]}]});
        assert!(
            to_openai(
                image.to_string().as_bytes(),
                "g",
                OutputTokensField::MaxTokens
            )
            .unwrap_err()
            .message()
            .starts_with("messages[0].content[0]")
        );
    }

    #[test]
    fn a_reasoning_model_gets_max_completion_tokens_and_an_effort_for_the_thinking_budget() {
        let body = json!({"model": "m", "max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 8000},
            "messages": [{"role": "user", "content": "hi"}]});
        let bytes = body.to_string();
        let field = OutputTokensField::MaxCompletionTokens;
        let out: Value =
            serde_json::from_slice(&to_openai(bytes.as_bytes(), "o3", field).unwrap().body)
                .unwrap();
        assert_eq!(out["max_completion_tokens"], 32000);
        assert_eq!(out.get("max_tokens"), None);
        assert_eq!(out["reasoning_effort"], "medium");
        let count = count_tokens_to_openai(bytes.as_bytes(), "o3", field).unwrap();
        let count: Value = serde_json::from_slice(&count).unwrap();
        assert_eq!(count["max_completion_tokens"], 1);
        assert_eq!(count.get("max_tokens"), None);
        assert_eq!(count.get("reasoning_effort"), None);

        let plain = openai(body);
        assert_eq!(plain["max_tokens"], 32000);
        assert_eq!(plain.get("max_completion_tokens"), None);
        assert_eq!(
            plain.get("reasoning_effort"),
            None,
            "a model that does not reason"
        );
    }

    #[test]
    fn reasoning_effort_becomes_a_thinking_budget_under_the_cap() {
        let ask = |extra: Value| {
            let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            anthropic(body)
        };
        let high = ask(json!({"reasoning_effort": "high"}));
        assert_eq!(
            high["thinking"],
            json!({"type": "enabled", "budget_tokens": 24576})
        );
        assert_eq!(high["max_tokens"], 24576 + DEFAULT_MAX_TOKENS);
        let capped = ask(json!({"reasoning": {"effort": "medium"}, "max_completion_tokens": 5000}));
        assert_eq!(capped["thinking"]["budget_tokens"], 4999);
        assert_eq!(capped["max_tokens"], 5000);
        let tiny = ask(json!({"reasoning_effort": "low", "max_tokens": 500}));
        assert_eq!(
            tiny.get("thinking"),
            None,
            "no budget fits under 500 tokens"
        );
        assert_eq!(
            ask(json!({"reasoning_effort": "none"})).get("thinking"),
            None
        );
        let refused = to_anthropic(
            json!({"model": "m", "reasoning_effort": "max", "messages": []})
                .to_string()
                .as_bytes(),
            "c",
            1,
        );
        assert!(
            refused
                .unwrap_err()
                .message()
                .starts_with("reasoning_effort:")
        );
    }

    #[test]
    fn structured_output_is_one_more_tool_forced_only_when_alone() {
        let ask = |format: Value, tools: Value| {
            let mut body = json!({"model": "m", "response_format": format, "reasoning_effort": "low",
                "messages": [{"role": "user", "content": "hi"}]});
            if !tools.is_null() {
                body["tools"] = tools;
            }
            to_anthropic(body.to_string().as_bytes(), "c", 100)
        };
        let alone = ask(json!({"type": "json_object"}), Value::Null).unwrap();
        assert!(alone.structured);
        let sent: Value = serde_json::from_slice(&alone.body).unwrap();
        assert_eq!(sent["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(
            sent["tool_choice"],
            json!({"type": "tool", "name": OUTPUT_TOOL})
        );
        assert_eq!(
            sent.get("thinking"),
            None,
            "Anthropic refuses thinking with a forced tool"
        );

        let weather = json!([{"type": "function", "function": {"name": "weather"}}]);
        let beside = ask(json!({"type": "json_object"}), weather).unwrap();
        let sent: Value = serde_json::from_slice(&beside.body).unwrap();
        assert_eq!(sent["tools"].as_array().unwrap().len(), 2);
        assert_eq!(
            sent.get("tool_choice"),
            None,
            "the model may still call the client's tools"
        );

        let taken = json!([{"type": "function", "function": {"name": OUTPUT_TOOL}}]);
        assert!(
            ask(json!({"type": "json_object"}), taken)
                .unwrap_err()
                .message()
                .starts_with("tools:")
        );
        assert!(
            ask(
                json!({"type": "json_schema", "json_schema": {"name": "x"}}),
                Value::Null
            )
            .unwrap_err()
            .message()
            .starts_with("response_format.json_schema.schema")
        );
        assert!(
            ask(json!({"type": "grammar"}), Value::Null)
                .unwrap_err()
                .message()
                .starts_with("response_format:")
        );
        assert!(
            !ask(json!({"type": "text"}), Value::Null)
                .unwrap()
                .structured
        );
    }

    #[test]
    fn server_tools_are_refused_on_an_openai_provider() {
        let body = json!({"model": "m", "max_tokens": 5, "messages": [],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]});
        assert!(
            to_openai(
                body.to_string().as_bytes(),
                "g",
                OutputTokensField::MaxTokens
            )
            .unwrap_err()
            .message()
            .starts_with("tools[0].type")
        );
    }
}
