//! The inspect phase and what it yields: the client's request as every attempt reads it, its
//! endpoint, dialect, body bytes and the fields the gateway acts on (found by one validating
//! parse), and, for a stream cut short, the request that asks the next model to continue it.

use aisix_config::Continuation;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::stored::Keeper;
use crate::wire::Dialect;
use crate::wire::openai::{BodyError, Inspected, inspect as inspect_body};

/// A client's model request, inspected.
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    pub endpoint: Endpoint,
    /// The wire format the client speaks, and gets its answer in.
    pub dialect: Dialect,
    pub body: Bytes,
    pub inspected: Inspected,
    /// The client asked for a stream, on an endpoint that streams.
    pub stream: bool,
    /// The client's headers an Anthropic passthrough forwards (`anthropic-version`,
    /// `anthropic-beta`); empty on OpenAI's endpoints.
    pub forwarded: HeaderMap,
    /// `/v1/responses` only: the store of its conversations, for the caller's key.
    pub stored: Option<Keeper>,
}

/// The inspect phase: validates `body` as a request to `endpoint` and finds the model it names.
pub(crate) fn inspect(endpoint: Endpoint, body: Bytes) -> Result<Inbound, GatewayError> {
    let inspected = inspect_body(&body).map_err(body_error)?;
    let stream = inspected.stream && endpoint.can_stream();
    Ok(Inbound {
        endpoint,
        dialect: endpoint.dialect(),
        body,
        inspected,
        stream,
        forwarded: HeaderMap::new(),
        stored: None,
    })
}

/// The client headers an Anthropic passthrough forwards: they select the API's behaviour.
const FORWARDED: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// The headers of `request` that a relayed request to `endpoint` carries upstream.
pub(crate) fn forwarded(endpoint: Endpoint, request: &HeaderMap) -> HeaderMap {
    let mut forwarded = HeaderMap::new();
    if endpoint.dialect() == Dialect::Anthropic {
        for name in FORWARDED {
            for value in request.get_all(name) {
                forwarded.append(name, value.clone());
            }
        }
    }
    forwarded
}

impl Inbound {
    /// Whether the client asked for the usage-only final chunk of a stream.
    pub(crate) fn client_wants_usage(&self) -> bool {
        self.inspected.client_wants_usage()
    }

    /// The request that asks a model to continue an answer that so far reads `text`, the way
    /// `method` says it does: the same request (and forwarded headers) with an assistant
    /// message holding `text` after the client's messages, plus what the method asks for:
    ///
    /// - `prefill`: nothing more (Anthropic continues a trailing assistant message);
    /// - `continue_final_message`: `continue_final_message: true` and
    ///   `add_generation_prompt: false` at the top level (vLLM);
    /// - `prefix`: `prefix: true` on the assistant message (DeepSeek).
    ///
    /// `None` when the endpoint has no messages to add to, the answer has several choices, the
    /// model cannot continue (`none`), or the method's fields are OpenAI chat fields and the
    /// client's request is not an OpenAI chat request (a translation would drop them).
    pub(crate) fn continuation(&self, text: &str, method: Continuation) -> Option<Inbound> {
        let has_messages = matches!(
            self.endpoint,
            Endpoint::ChatCompletions | Endpoint::Messages
        );
        if !has_messages || self.inspected.choices != 1 {
            return None;
        }
        let chat_fields = matches!(
            method,
            Continuation::ContinueFinalMessage | Continuation::Prefix
        );
        if method == Continuation::None
            || (chat_fields && self.endpoint != Endpoint::ChatCompletions)
        {
            return None;
        }
        let mut body: serde_json::Map<String, Value> = serde_json::from_slice(&self.body).ok()?;
        let Some(Value::Array(messages)) = body.get_mut("messages") else {
            return None;
        };
        let mut message = serde_json::json!({"role": "assistant", "content": text});
        if method == Continuation::Prefix {
            message["prefix"] = Value::Bool(true);
        }
        messages.push(message);
        if method == Continuation::ContinueFinalMessage {
            body.insert("continue_final_message".to_owned(), Value::Bool(true));
            body.insert("add_generation_prompt".to_owned(), Value::Bool(false));
        }
        let body = Bytes::from(serde_json::to_vec(&body).ok()?);
        let mut next = inspect(self.endpoint, body).ok()?;
        next.forwarded = self.forwarded.clone();
        Some(next)
    }
}

fn body_error(error: BodyError) -> GatewayError {
    match error {
        BodyError::InvalidJson(message) => GatewayError::new(ErrorKind::InvalidJson, message),
        BodyError::MissingModel => GatewayError::new(
            ErrorKind::InvalidRequest,
            "You must provide a model parameter.",
        )
        .with_param("model"),
        BodyError::InvalidField(field, expected) => GatewayError::new(
            ErrorKind::InvalidRequest,
            format!("'{field}' must be {expected}."),
        )
        .with_param(field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_adds_the_text_so_far_as_an_assistant_message() {
        let inbound = inspect(
            Endpoint::ChatCompletions,
            Bytes::from_static(
                br#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"Hi"}],"temperature":0.5}"#,
            ),
        )
        .unwrap();
        let next = inbound
            .continuation("Hello, wor", Continuation::Prefill)
            .unwrap();
        let body: Value = serde_json::from_slice(&next.body).unwrap();
        assert_eq!(
            body["messages"],
            serde_json::json!([
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello, wor"},
            ])
        );
        assert_eq!(body["temperature"], 0.5);
        assert!(next.stream && next.inspected.model == "chat");

        let several = inspect(
            Endpoint::ChatCompletions,
            Bytes::from_static(br#"{"model":"chat","n":2,"messages":[]}"#),
        )
        .unwrap();
        assert!(several.continuation("x", Continuation::Prefill).is_none());
        let mut messages = inspect(
            Endpoint::Messages,
            Bytes::from_static(
                br#"{"model":"chat","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"Hi"}]}"#,
            ),
        )
        .unwrap();
        messages.forwarded.insert(
            "anthropic-version",
            http::HeaderValue::from_static("2023-06-01"),
        );
        let next = messages
            .continuation("Hello, wor", Continuation::Prefill)
            .unwrap();
        let body: Value = serde_json::from_slice(&next.body).unwrap();
        assert_eq!(
            body["messages"][1],
            serde_json::json!({"role": "assistant", "content": "Hello, wor"})
        );
        assert_eq!(body["max_tokens"], 9);
        assert!(next.stream && next.dialect == Dialect::Anthropic);
        assert_eq!(
            next.forwarded, messages.forwarded,
            "the client's API version goes on"
        );

        let legacy = inspect(
            Endpoint::Completions,
            Bytes::from_static(br#"{"model":"chat","prompt":"x"}"#),
        )
        .unwrap();
        assert!(legacy.continuation("x", Continuation::Prefill).is_none());
    }

    /// The continuation request of each method, pinned by a golden file written from the
    /// provider's documented request fields: vLLM's `continue_final_message` and
    /// `add_generation_prompt`
    /// (docs.vllm.ai, OpenAI-compatible server, chat extra parameters), DeepSeek's `prefix`
    /// on the last assistant message (api-docs.deepseek.com, chat prefix completion), and
    /// Anthropic's prefill, a trailing assistant message (docs.anthropic.com, prefill
    /// Claude's response).
    #[test]
    fn each_continuation_method_builds_its_documented_request() {
        let chat = inspect(
            Endpoint::ChatCompletions,
            Bytes::from_static(
                br#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"Hi"}],"temperature":0.5}"#,
            ),
        )
        .unwrap();
        let golden = |name: &str| -> Value {
            let path = format!(
                "{}/tests/golden/continuation/{name}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
        };
        for method in [
            Continuation::Prefill,
            Continuation::ContinueFinalMessage,
            Continuation::Prefix,
        ] {
            let next = chat.continuation("Hello, wor", method).unwrap();
            let body: Value = serde_json::from_slice(&next.body).unwrap();
            assert_eq!(body, golden(method.as_str()), "{}", method.as_str());
        }
        assert!(chat.continuation("x", Continuation::None).is_none());
        // An Anthropic client's request is translated for an OpenAI-dialect model: only a
        // prefill survives that.
        let messages = inspect(
            Endpoint::Messages,
            Bytes::from_static(
                br#"{"model":"chat","max_tokens":9,"messages":[{"role":"user","content":"Hi"}]}"#,
            ),
        )
        .unwrap();
        assert!(
            messages
                .continuation("x", Continuation::ContinueFinalMessage)
                .is_none()
        );
        assert!(messages.continuation("x", Continuation::Prefix).is_none());
    }
}
