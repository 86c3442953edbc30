//! Amazon Bedrock's Converse API (`/model/{id}/converse`, `/converse-stream`) and InvokeModel
//! embeddings against the gateway's dialects. Converse is shaped like Anthropic's Messages
//! API, so Anthropic's is the pivot: a Messages request becomes a Converse body and an OpenAI
//! chat request gets there through the chat-to-Messages translator ([`request`]); answers
//! come back as Anthropic messages ([`response`]) and streams as Anthropic events
//! ([`stream`], read from AWS's event-stream framing by [`frames`]), which the Anthropic
//! translators carry on to an OpenAI client. Error bodies: [`error`]; prompt-cache breakpoints:
//! [`cache`].

pub mod cache;
pub mod error;
pub mod frames;
pub mod request;
pub mod response;
pub mod stream;

/// Anthropic's `stop_reason` for Converse's `stopReason`: a guardrail or a content filter
/// that stopped the answer is a `refusal` (OpenAI's `content_filter`).
pub fn stop_reason(reason: &str) -> &'static str {
    match reason {
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "guardrail_intervened" | "content_filtered" => "refusal",
        "model_context_window_exceeded" => "model_context_window_exceeded",
        // end_turn, and anything newer.
        _ => "end_turn",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_stop_reason_has_its_anthropic_name() {
        for (bedrock, anthropic) in [
            ("end_turn", "end_turn"),
            ("tool_use", "tool_use"),
            ("max_tokens", "max_tokens"),
            ("stop_sequence", "stop_sequence"),
            ("guardrail_intervened", "refusal"),
            ("content_filtered", "refusal"),
            ("something_new", "end_turn"),
        ] {
            assert_eq!(stop_reason(bedrock), anthropic, "{bedrock}");
        }
    }
}
