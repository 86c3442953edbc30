//! Bedrock's error body, `{"message": "..."}` (its exception's name travels in the
//! `x-amzn-ErrorType` header, and its status says its class), in the client's envelope:
//! OpenAI's with the gateway's `type` for the status, Anthropic's typed by the status. An input
//! too long for the model is OpenAI's `context_length_exceeded`.

use bytes::Bytes;
use serde::Deserialize;

use crate::wire::anthropic::error as anthropic_error;
use crate::wire::json;

#[derive(Deserialize)]
struct Body {
    #[serde(alias = "Message")]
    message: String,
}

/// Whether Bedrock's `message` says the input does not fit the model's context window.
pub fn too_long(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("input is too long")
        || lower.contains("too many input tokens")
        || lower.contains("prompt is too long")
        || lower.contains("maximum context length")
}

fn message(body: &[u8], secret: Option<&str>) -> Option<String> {
    let body: Body = json::parse(body).ok()?;
    let message = match secret {
        Some(secret) => body.message.replace(secret, "***"),
        None => body.message,
    };
    Some(json::bounded(message))
}

/// A Bedrock error body as the OpenAI envelope; `None` when the body is not Bedrock's.
pub fn upstream_to_openai(status: u16, body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let message = message(body, secret)?;
    let error_type = match status {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "upstream_error",
    };
    let code = too_long(&message).then_some("context_length_exceeded");
    let envelope = serde_json::json!({"error": {
        "message": message,
        "type": error_type,
        "param": null,
        "code": code,
    }});
    Some(Bytes::from(envelope.to_string()))
}

/// A Bedrock error body as Anthropic's envelope, typed by `status`.
pub fn upstream_to_anthropic(status: u16, body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    Some(anthropic_error::envelope(status, &message(body, secret)?))
}

/// Anthropic's error type for an exception a stream sends (`:exception-type`).
pub fn exception_type(exception: &str) -> &'static str {
    match exception {
        "throttlingException" | "ThrottlingException" => "rate_limit_error",
        "serviceUnavailableException" | "ServiceUnavailableException" => "overloaded_error",
        "validationException" | "ValidationException" => "invalid_request_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_too_long_input_is_context_length_exceeded_for_an_openai_client() {
        let body = br#"{"message":"Input is too long for requested model."}"#;
        let out = upstream_to_openai(400, body, None).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["error"]["code"], "context_length_exceeded");
        assert_eq!(value["error"]["type"], "invalid_request_error");
    }

    #[test]
    fn the_secret_is_masked_and_the_anthropic_envelope_typed_by_status() {
        let body = br#"{"message":"Rate exceeded for key wJalr-secret-key"}"#;
        let out = upstream_to_anthropic(429, body, Some("wJalr-secret-key")).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(!text.contains("wJalr-secret-key"), "{text}");
        assert!(text.contains("rate_limit_error"), "{text}");
        assert!(upstream_to_openai(400, b"not json", None).is_none());
    }
}
