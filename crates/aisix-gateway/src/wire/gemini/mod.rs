//! Google's Gemini API (`generateContent`, `streamGenerateContent?alt=sse`,
//! `batchEmbedContents`) against OpenAI chat completions and embeddings: requests from chat
//! ([`request`]), whole answers and embeddings back ([`response`]), streams event by event
//! ([`stream`]) and error bodies ([`error`]). An Anthropic client reaches Gemini through chat
//! completions (the Anthropic translators on either side), so only this one pair is written.
//! Vertex AI's own forms (embeddings by `:predict`, its `countTokens` body) are [`vertex`]'s;
//! thought signatures ride in tool call ids ([`signature`]).

pub mod error;
pub mod request;
pub mod response;
pub mod signature;
pub mod stream;
pub mod types;
pub mod vertex;

/// OpenAI's `finish_reason` for Gemini's `finishReason`; `called` when the candidate made a
/// function call (Gemini says `STOP` then).
pub fn finish_reason(reason: &str, called: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => "content_filter",
        _ if called => "tool_calls",
        // STOP, LANGUAGE, MALFORMED_FUNCTION_CALL, OTHER, and anything newer.
        _ => "stop",
    }
}
