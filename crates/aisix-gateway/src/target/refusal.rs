//! What an upstream's refusal is about, read once from its status and error body in any
//! dialect we call: its provider key refused or out of quota, a prompt too long for the
//! model's context window, a content filter. The attempt loop routes on these kinds; it is
//! read only on an error status, so an answered request pays nothing for it.

use std::borrow::Cow;

use serde::Deserialize;

/// An upstream refusal's kind, as routing knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamRefusal {
    /// 401 or 403: the provider key is wrong, revoked or not allowed the model.
    Credentials,
    /// 402, OpenAI's `insufficient_quota`, Anthropic's `billing_error`: the key's account
    /// cannot pay.
    Quota,
    /// The prompt does not fit the model's context window: OpenAI's
    /// `context_length_exceeded`, Anthropic's "prompt is too long".
    ContextLengthExceeded,
    /// A content filter refused the prompt: Azure's and OpenAI's `content_filter`,
    /// `content_policy_violation`.
    ContentFilter,
}

impl UpstreamRefusal {
    /// The name in `fallback_on_errors`, metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            UpstreamRefusal::Credentials => "credentials",
            UpstreamRefusal::Quota => "quota",
            UpstreamRefusal::ContextLengthExceeded => "context_length_exceeded",
            UpstreamRefusal::ContentFilter => "content_filter",
        }
    }

    /// The provider key itself is at fault: no request through it can succeed until an
    /// operator acts, so the direct model cools down for longer.
    pub const fn of_the_key(self) -> bool {
        matches!(self, UpstreamRefusal::Credentials | UpstreamRefusal::Quota)
    }
}

/// `{"error": {...}}` (OpenAI, Azure), `{"type":"error","error":{...}}` (Anthropic) and
/// `{"message": "..."}` (AWS, whose exception name is a header).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    error: Option<Object<'a>>,
    #[serde(borrow)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<Cow<'a, str>>,
}

/// The kind of an upstream's refusal with `status` and error `body`, if routing knows it.
pub fn classify(status: u16, body: &[u8]) -> Option<UpstreamRefusal> {
    let envelope = serde_json::from_slice::<Envelope<'_>>(body).ok();
    let object = envelope.as_ref().and_then(|e| e.error.as_ref());
    let aws_message = envelope
        .as_ref()
        .and_then(|e| e.message.as_deref())
        .unwrap_or("");
    let (kind, code, message) = object.map_or(("", "", aws_message), |o| {
        (
            o.kind.as_deref().unwrap_or(""),
            o.code.as_deref().unwrap_or(""),
            o.message.as_deref().unwrap_or(""),
        )
    });
    let named = |name: &str| kind == name || code == name;
    if named("insufficient_quota") || named("billing_error") || status == 402 {
        return Some(UpstreamRefusal::Quota);
    }
    if matches!(status, 401 | 403) {
        return Some(UpstreamRefusal::Credentials);
    }
    if named("context_length_exceeded")
        || message.contains("prompt is too long")
        || message.contains("maximum context length")
        || message.contains("Input is too long")
        || message.contains("Too many input tokens")
    {
        return Some(UpstreamRefusal::ContextLengthExceeded);
    }
    if named("content_filter") || named("content_policy_violation") {
        return Some(UpstreamRefusal::ContentFilter);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_recognised_in_each_dialect() {
        let cases: [(u16, &str, Option<UpstreamRefusal>); 11] = [
            (
                400,
                r#"{"message":"Input is too long for requested model."}"#,
                Some(UpstreamRefusal::ContextLengthExceeded),
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
                Some(UpstreamRefusal::Credentials),
            ),
            (
                403,
                r#"{"type":"error","error":{"type":"permission_error","message":"no"}}"#,
                Some(UpstreamRefusal::Credentials),
            ),
            (402, "", Some(UpstreamRefusal::Quota)),
            (
                429,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
                Some(UpstreamRefusal::Quota),
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}"#,
                Some(UpstreamRefusal::Quota),
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                Some(UpstreamRefusal::ContextLengthExceeded),
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
                Some(UpstreamRefusal::ContextLengthExceeded),
            ),
            (
                400,
                r#"{"error":{"message":"filtered","type":null,"param":"prompt","code":"content_filter","status":400}}"#,
                Some(UpstreamRefusal::ContentFilter),
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
                None,
            ),
            (400, "not json", None),
        ];
        for (status, body, expected) in cases {
            assert_eq!(classify(status, body.as_bytes()), expected, "{body}");
        }
    }
}
