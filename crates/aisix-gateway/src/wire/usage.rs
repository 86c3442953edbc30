//! Token usage as OpenAI reports it, read from response bodies and stream chunks.

use serde::Deserialize;
use serde::de::DeserializeOwned;

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

/// The `usage` object of a complete JSON response, if it has one.
///
/// OpenAI-shaped responses put `usage` last, so the last `"usage"` key is read first and only
/// its object is parsed (a few hundred bytes, whatever the size of the choices before it); when
/// that does not yield usage, the whole document is parsed, skipping everything else without
/// allocating. A `"usage"` inside a string value is escaped (`\"usage\"`) and never matches.
pub fn from_response(body: &[u8]) -> Option<Usage> {
    last_usage_object(body).or_else(|| serde_json::from_slice::<UsageProbe>(body).ok()?.usage)
}

/// The object after the last `"usage":` key of `body`, read as a `T` (whatever follows the
/// object is not looked at). A `"usage"` inside a string value is escaped and never matches.
pub fn last_usage_object<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    let at = memchr::memmem::rfind(body, b"\"usage\"")?;
    let value = body[at + 7..]
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    if value.first() != Some(&b'{') {
        return None;
    }
    T::deserialize(&mut serde_json::Deserializer::from_slice(value)).ok()
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
    fn usage_before_the_choices_is_found_too() {
        let body = br#"{"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"choices":[{"message":{"content":"say \"usage\": {}"}}]}"#;
        assert_eq!(from_response(body).map(|u| u.total_tokens), Some(3));
    }

    #[test]
    fn nested_details_are_ignored() {
        let body = br#"{"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        assert_eq!(from_response(body).map(|u| u.prompt_tokens), Some(9));
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
