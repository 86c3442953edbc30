//! Error envelopes between the dialects: Anthropic's `{"type":"error","error":{"type","message"}}`
//! with its type names by status, in a body or as an in-band stream event, and an upstream's
//! error body carried over to the other dialect's envelope.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::wire::json;

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        // 529 is Anthropic's own status for an overloaded API.
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

fn render(error_type: &str, message: &str) -> Vec<u8> {
    let envelope = Envelope {
        kind: "error",
        error: Detail {
            kind: error_type,
            message,
        },
    };
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// The error body for `status`, with its type name.
pub fn envelope(status: u16, message: &str) -> Bytes {
    Bytes::from(render(error_type(status), message))
}

/// The `error` event that ends an Anthropic stream which cannot complete (no `message_stop`
/// follows it).
pub fn stream_event(error_type: &str, message: &str) -> Bytes {
    let mut event = b"event: error\ndata: ".to_vec();
    event.extend_from_slice(&render(error_type, message));
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

#[derive(Deserialize)]
struct AnthropicBody {
    error: AnthropicDetail,
}

#[derive(Deserialize)]
struct AnthropicDetail {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct OpenAiBody {
    error: OpenAiDetail,
}

#[derive(Deserialize)]
struct OpenAiDetail {
    #[serde(default)]
    message: String,
}

/// An Anthropic upstream's error body as the OpenAI envelope an OpenAI client expects: the
/// gateway's `type` for the status, Anthropic's type name as `code`. `None` when the body is
/// not Anthropic's envelope. `secret` (the provider key) is masked wherever it appears.
pub fn upstream_to_openai(status: u16, body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let body: AnthropicBody = json::parse(body).ok()?;
    let error_type = match status {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "upstream_error",
    };
    let code = (!body.error.kind.is_empty()).then_some(body.error.kind.as_str());
    let envelope = serde_json::json!({"error": {
        "message": masked(body.error.message.clone(), secret),
        "type": error_type,
        "param": null,
        "code": code,
    }});
    Some(Bytes::from(envelope.to_string()))
}

/// An OpenAI upstream's error body as Anthropic's envelope, typed by `status`. `None` when
/// the body is not OpenAI's envelope.
pub fn upstream_to_anthropic(status: u16, body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let body: OpenAiBody = json::parse(body).ok()?;
    Some(Bytes::from(render(
        error_type(status),
        &masked(body.error.message, secret),
    )))
}

/// An Anthropic upstream's error body for an Anthropic client: its own type and message,
/// re-rendered with the message bounded and `secret` masked. `None` when the body is not
/// Anthropic's envelope.
pub fn upstream_anthropic(body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let body: AnthropicBody = json::parse(body).ok()?;
    let kind = if body.error.kind.is_empty() {
        "api_error"
    } else {
        body.error.kind.as_str()
    };
    Some(Bytes::from(render(
        kind,
        &masked(body.error.message.clone(), secret),
    )))
}

/// `message`, cut to a bounded length, with `secret` replaced by `***` (keys shorter than 8
/// characters are not searched for: they would mask ordinary words).
fn masked(message: String, secret: Option<&str>) -> String {
    let message = match secret.filter(|s| s.len() >= 8) {
        Some(secret) if message.contains(secret) => message.replace(secret, "***"),
        _ => message,
    };
    json::bounded(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_status_of_the_table_has_its_type_name() {
        for (status, name) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (503, "overloaded_error"),
            (504, "timeout_error"),
            (500, "api_error"),
            (502, "api_error"),
        ] {
            assert_eq!(error_type(status), name, "{status}");
            let body: Value = serde_json::from_slice(&envelope(status, "m")).unwrap();
            assert_eq!(
                body,
                serde_json::json!({"type": "error", "error": {"type": name, "message": "m"}})
            );
        }
    }

    #[test]
    fn stream_event_is_a_named_sse_event() {
        assert_eq!(
            &stream_event("api_error", "cut")[..],
            &b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"cut\"}}\n\n"[..]
        );
    }

    #[test]
    fn upstream_errors_cross_over_with_the_key_masked() {
        let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad key sk-ant-12345678"}}"#;
        let openai: Value = serde_json::from_slice(
            &upstream_to_openai(400, anthropic, Some("sk-ant-12345678")).unwrap(),
        )
        .unwrap();
        assert_eq!(openai["error"]["message"], "bad key ***");
        assert_eq!(openai["error"]["type"], "invalid_request_error");
        assert_eq!(openai["error"]["code"], "invalid_request_error");

        let back: Value = serde_json::from_slice(
            &upstream_to_anthropic(
                429,
                br#"{"error":{"message":"slow down","type":"requests"}}"#,
                None,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            back,
            serde_json::json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
        let same: Value = serde_json::from_slice(
            &upstream_anthropic(anthropic, Some("sk-ant-12345678")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            same,
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad key ***"}})
        );
        assert!(upstream_to_openai(400, b"<html>", None).is_none());
        assert!(upstream_to_anthropic(400, br#"{"detail":"x"}"#, None).is_none());
    }
}
