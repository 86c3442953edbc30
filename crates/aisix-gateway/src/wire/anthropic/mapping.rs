//! The small vocabularies both directions share: Anthropic's `stop_reason` against OpenAI's
//! `finish_reason`, usage with the prompt cache's read and write counts, a `tool_use` block as
//! a tool call, and OpenAI's `reasoning_effort` against Anthropic's thinking budget.

use crate::wire::chat::{ChatUsage, FunctionCall, PromptTokensDetails, ToolCall};
use crate::wire::usage::Usage;

use super::types::{TokenUsage, ToolUse};

/// An Anthropic `tool_use` block as an OpenAI tool call (its input as the arguments' JSON text).
pub fn tool_call(call: ToolUse) -> ToolCall {
    ToolCall {
        id: call.id,
        kind: "function".to_owned(),
        function: FunctionCall {
            name: call.name,
            arguments: call.input.to_string(),
        },
    }
}

/// The smallest thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// Anthropic's `thinking.budget_tokens` for OpenAI's `reasoning_effort`; `None` for `none`
/// (no thinking); `None` for an effort OpenAI does not define.
pub fn budget_for_effort(effort: &str) -> Option<Option<u64>> {
    Some(Some(match effort {
        "none" => return Some(None),
        "minimal" => MIN_THINKING_BUDGET,
        "low" => 2048,
        "medium" => 8192,
        "high" => 24576,
        _ => return None,
    }))
}

/// OpenAI's `reasoning_effort` for Anthropic's `thinking.budget_tokens`: the inverse of
/// [`budget_for_effort`] on its values, by range in between.
pub fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=2048 => "low",
        2049..=8192 => "medium",
        _ => "high",
    }
}

/// OpenAI's `finish_reason` for Anthropic's `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        // end_turn, stop_sequence, pause_turn, and anything newer.
        _ => "stop",
    }
}

/// Anthropic's `stop_reason` for OpenAI's `finish_reason`.
pub fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// OpenAI's usage for Anthropic's: `prompt_tokens` counts cached tokens too, cache reads are
/// `prompt_tokens_details.cached_tokens`, and both cache counts ride along under Anthropic's
/// names when the upstream reported them.
pub fn usage_to_openai(usage: &TokenUsage) -> ChatUsage {
    let prompt_tokens = usage.prompt_tokens();
    ChatUsage {
        tokens: Usage {
            prompt_tokens,
            completion_tokens: usage.output_tokens,
            total_tokens: prompt_tokens.saturating_add(usage.output_tokens),
        },
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: Some(usage.cache_read()),
        }),
        cache_creation_input_tokens: usage.cache_creation_input_tokens,
        cache_read_input_tokens: usage.cache_read_input_tokens,
    }
}

/// Anthropic's usage for OpenAI's: the cached tokens come out of `input_tokens`. The inverse
/// of [`usage_to_openai`].
pub fn usage_from_openai(usage: &ChatUsage) -> TokenUsage {
    let cache_read = usage
        .cache_read_input_tokens
        .or_else(|| usage.prompt_tokens_details.and_then(|d| d.cached_tokens));
    let cache_write = usage.cache_creation_input_tokens;
    TokenUsage {
        input_tokens: usage
            .tokens
            .prompt_tokens
            .saturating_sub(cache_read.unwrap_or(0))
            .saturating_sub(cache_write.unwrap_or(0)),
        output_tokens: usage.tokens.completion_tokens,
        cache_creation_input_tokens: cache_write,
        cache_read_input_tokens: cache_read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stop_reason_has_a_finish_reason_and_back() {
        for (stop, finish) in [
            ("end_turn", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            assert_eq!(finish_reason(stop), finish);
            assert_eq!(stop_reason(finish), stop);
        }
        assert_eq!(finish_reason("stop_sequence"), "stop");
        assert_eq!(finish_reason("pause_turn"), "stop");
        assert_eq!(finish_reason("model_context_window_exceeded"), "length");
        assert_eq!(stop_reason("function_call"), "tool_use");
    }

    #[test]
    fn each_effort_has_a_budget_that_maps_back_to_it() {
        for effort in ["low", "medium", "high"] {
            let budget = budget_for_effort(effort).unwrap().unwrap();
            assert_eq!(effort_for_budget(budget), effort);
        }
        assert_eq!(
            budget_for_effort("minimal"),
            Some(Some(MIN_THINKING_BUDGET))
        );
        assert_eq!(budget_for_effort("none"), Some(None));
        assert!(budget_for_effort("extreme").is_none());
        assert_eq!(effort_for_budget(10_000), "high");
    }

    #[test]
    fn cache_reads_and_writes_survive_a_round_trip() {
        let usage = TokenUsage {
            input_tokens: 10,
            output_tokens: 4,
            cache_creation_input_tokens: Some(7),
            cache_read_input_tokens: Some(100),
        };
        let openai = usage_to_openai(&usage);
        assert_eq!(openai.tokens.prompt_tokens, 117);
        assert_eq!(openai.tokens.total_tokens, 121);
        assert_eq!(
            openai.prompt_tokens_details.unwrap().cached_tokens,
            Some(100)
        );
        assert_eq!(usage_from_openai(&openai), usage);
    }

    #[test]
    fn openai_cached_tokens_become_cache_reads() {
        let openai = ChatUsage {
            tokens: Usage {
                prompt_tokens: 50,
                completion_tokens: 5,
                total_tokens: 55,
            },
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(30),
            }),
            ..ChatUsage::default()
        };
        let usage = usage_from_openai(&openai);
        assert_eq!(usage.input_tokens, 20);
        assert_eq!(usage.cache_read_input_tokens, Some(30));
        assert_eq!(usage.prompt_tokens(), 50);
    }
}
