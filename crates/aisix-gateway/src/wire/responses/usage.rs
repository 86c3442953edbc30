//! The Responses API's `usage` object: input and output tokens with their details (cached
//! input, reasoning output), and its mapping to and from the gateway's [`Usage`].

use serde::{Deserialize, Serialize};

use crate::wire::usage::Usage;

/// `usage` as the Responses API reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ResponsesUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub input_tokens_details: InputDetails,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub output_tokens_details: OutputDetails,
    #[serde(default)]
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct InputDetails {
    /// Input tokens read from the provider's prompt cache (part of `input_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Input tokens written to the provider's prompt cache (part of `input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct OutputDetails {
    /// Output tokens spent reasoning (part of `output_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl ResponsesUsage {
    /// The gateway's usage: input tokens are its prompt tokens, output its completion tokens
    /// (cached and reasoning tokens are inside those, as in chat completions' usage).
    pub fn to_usage(self) -> Usage {
        Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens: self.output_tokens,
            total_tokens: if self.total_tokens == 0 {
                self.input_tokens.saturating_add(self.output_tokens)
            } else {
                self.total_tokens
            },
        }
    }

    /// The Responses usage of a chat completions answer whose usage is `usage`, with its
    /// cached and reasoning details.
    pub fn from_chat(usage: Usage, cached: u64, reasoning: u64) -> Self {
        Self {
            input_tokens: usage.prompt_tokens,
            input_tokens_details: InputDetails {
                cached_tokens: cached,
                cache_write_tokens: 0,
            },
            output_tokens: usage.completion_tokens,
            output_tokens_details: OutputDetails {
                reasoning_tokens: reasoning,
            },
            total_tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_usage_maps_to_prompt_and_completion_tokens_with_its_details_kept() {
        let usage: ResponsesUsage = serde_json::from_str(
            r#"{"input_tokens":36,"input_tokens_details":{"cached_tokens":20,"cache_write_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":123}"#,
        )
        .unwrap();
        assert_eq!(usage.input_tokens_details.cached_tokens, 20);
        assert_eq!(usage.output_tokens_details.reasoning_tokens, 64);
        assert_eq!(
            usage.to_usage(),
            Usage {
                prompt_tokens: 36,
                completion_tokens: 87,
                total_tokens: 123
            }
        );
        let back = ResponsesUsage::from_chat(usage.to_usage(), 20, 64);
        assert_eq!(back, usage);
        let bare: ResponsesUsage =
            serde_json::from_str(r#"{"input_tokens":2,"output_tokens":3}"#).unwrap();
        assert_eq!(bare.to_usage().total_tokens, 5);
    }
}
