//! Gemini's error body, `{"error":{"code","message","status"}}`, in OpenAI's envelope for an
//! OpenAI client: the gateway's `type` for the HTTP status and Gemini's `status`
//! (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`, ...) as `code`. An Anthropic client gets
//! Anthropic's envelope from the same body (its `error.message` is read the same way).

use bytes::Bytes;
use serde::Deserialize;

use crate::wire::json;

#[derive(Deserialize)]
struct Body {
    error: Detail,
}

#[derive(Deserialize)]
struct Detail {
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: String,
}

/// A Gemini error body as the OpenAI envelope; `None` when the body is not Gemini's envelope.
/// `secret` (the API key) is masked wherever it appears.
pub fn upstream_to_openai(status: u16, body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let body: Body = json::parse(body).ok()?;
    let error_type = match status {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "upstream_error",
    };
    let message = match secret {
        Some(secret) => body.error.message.replace(secret, "***"),
        None => body.error.message,
    };
    let code = (!body.error.status.is_empty()).then_some(body.error.status);
    let envelope = serde_json::json!({"error": {
        "message": json::bounded(message),
        "type": error_type,
        "param": null,
        "code": code,
    }});
    Some(Bytes::from(envelope.to_string()))
}
