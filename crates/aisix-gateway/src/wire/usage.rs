//! Token usage as OpenAI reports it, read from response bodies and stream chunks.

use serde::Deserialize;

/// Tokens one request consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

#[derive(Deserialize)]
struct UsageProbe {
    usage: Option<Usage>,
}

/// The `usage` object of a complete JSON response, if it has one. Skips everything else
/// without allocating.
pub fn from_response(body: &[u8]) -> Option<Usage> {
    serde_json::from_slice::<UsageProbe>(body).ok()?.usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_a_chat_completion() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"usage"}}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;
        assert_eq!(
            from_response(body),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 5,
                total_tokens: 8
            })
        );
    }

    #[test]
    fn missing_or_null_usage_is_none() {
        assert_eq!(from_response(br#"{"id":"x"}"#), None);
        assert_eq!(from_response(br#"{"usage":null}"#), None);
        assert_eq!(from_response(b"garbage"), None);
    }

    #[test]
    fn embeddings_usage_has_no_completion_tokens() {
        let usage = from_response(br#"{"usage":{"prompt_tokens":4,"total_tokens":4}}"#).unwrap();
        assert_eq!(usage.completion_tokens, 0);
        assert_eq!(usage.total_tokens, 4);
    }
}
