//! How much a request is expected to use before it runs (tokens and dollars, for the
//! reservation), and what it did use once it ran (for the reconciliation).
//!
//! # The estimate
//!
//! Prompt tokens are estimated as the request body's length divided by four, rounded up: no
//! tokenizer runs on the request path. English text and JSON average about four bytes per token
//! with OpenAI's tokenizers, and the body also holds the JSON around the prompt, so for most
//! requests this is at or above the real count. It falls short for scripts that take more
//! tokens per byte (Chinese, Japanese: about 1.5 bytes per token, so up to 2.7× more tokens than
//! estimated) and runs high for bodies carrying base64 images (which cost far fewer tokens than
//! bytes). Output tokens are estimated as `max_completion_tokens` (or `max_tokens`) when the
//! request sets one, else [`DEFAULT_OUTPUT_TOKENS`], times the `n` choices it asks for;
//! endpoints without output (embeddings, `count_tokens`) estimate none.
//!
//! What a request used beyond its estimate is charged when it is reconciled, so an estimate that
//! falls short lets requests already in flight pass a limit by that much, never more.

// Token counts come from clients and upstreams: every sum saturates.
#![warn(clippy::arithmetic_side_effects)]

use aisix_config::{Cost, Usd};

/// Bytes of request body per estimated prompt token.
pub const BODY_BYTES_PER_TOKEN: u64 = 4;

/// Output tokens reserved for a request that sets no `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS: u64 = 1024;

/// Tokens a request is expected to use, or has used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

impl Tokens {
    /// The estimate for a request body of `body_len` bytes. `max_output` is the request's
    /// `max_completion_tokens` or `max_tokens`, per choice; `choices` its `n`;
    /// `produces_output` is false for embeddings and `count_tokens`.
    pub fn estimate(
        body_len: usize,
        max_output: Option<u64>,
        choices: u32,
        produces_output: bool,
    ) -> Self {
        let body_len = u64::try_from(body_len).unwrap_or(u64::MAX);
        Self {
            input: body_len.div_ceil(BODY_BYTES_PER_TOKEN),
            output: if produces_output {
                max_output
                    .unwrap_or(DEFAULT_OUTPUT_TOKENS)
                    .saturating_mul(u64::from(choices.max(1)))
            } else {
                0
            },
        }
    }

    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// What these tokens cost at `cost`'s prices, rounded up to the nano-dollar.
    pub fn cost(self, cost: &Cost) -> Usd {
        let input = u128::from(self.input).saturating_mul(u128::from(cost.input_per_1k.nanos()));
        let output = u128::from(self.output).saturating_mul(u128::from(cost.output_per_1k.nanos()));
        let nanos = input.saturating_add(output).div_ceil(1000);
        Usd::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_estimate_is_a_quarter_of_the_body_rounded_up() {
        assert_eq!(Tokens::estimate(0, None, 1, false).input, 0);
        assert_eq!(Tokens::estimate(1, None, 1, false).input, 1);
        assert_eq!(Tokens::estimate(400, None, 1, false).input, 100);
        assert_eq!(Tokens::estimate(401, None, 1, false).input, 101);
    }

    #[test]
    fn output_estimate_is_max_tokens_or_the_default() {
        assert_eq!(Tokens::estimate(40, Some(50), 1, true).output, 50);
        assert_eq!(
            Tokens::estimate(40, None, 1, true).output,
            DEFAULT_OUTPUT_TOKENS
        );
        assert_eq!(Tokens::estimate(40, Some(50), 1, false).output, 0);
        assert_eq!(Tokens::estimate(40, Some(50), 1, true).total(), 60);
    }

    #[test]
    fn output_estimate_covers_every_choice() {
        assert_eq!(Tokens::estimate(40, Some(1000), 100, true).output, 100_000);
        assert_eq!(
            Tokens::estimate(40, None, 3, true).output,
            3 * DEFAULT_OUTPUT_TOKENS
        );
        assert_eq!(
            Tokens::estimate(40, Some(u64::MAX), u32::MAX, true).output,
            u64::MAX,
            "saturates"
        );
    }

    #[test]
    fn the_cost_of_huge_counts_at_huge_prices_is_the_most_a_price_holds() {
        let cost = Cost {
            input_per_1k: Usd::from_nanos(u64::MAX),
            output_per_1k: Usd::from_nanos(u64::MAX),
        };
        let huge = Tokens {
            input: u64::MAX,
            output: u64::MAX,
        };
        assert_eq!(huge.cost(&cost), Usd::from_nanos(u64::MAX));
        assert_eq!(huge.total(), u64::MAX);
    }

    #[test]
    fn cost_is_priced_per_thousand_tokens_and_rounded_up() {
        let cost = Cost {
            input_per_1k: Usd::parse("0.0025").unwrap(),
            output_per_1k: Usd::parse("0.01").unwrap(),
        };
        let used = Tokens {
            input: 1000,
            output: 500,
        };
        assert_eq!(used.cost(&cost), Usd::parse("0.0075").unwrap());
        let one = Tokens {
            input: 1,
            output: 0,
        };
        assert_eq!(one.cost(&cost), Usd::from_nanos(2_500));
        let tiny = Cost {
            input_per_1k: Usd::from_nanos(2_500),
            output_per_1k: Usd::ZERO,
        };
        // 2.5 nano-dollars, rounded up.
        assert_eq!(one.cost(&tiny), Usd::from_nanos(3));
        assert_eq!(Tokens::default().cost(&cost), Usd::ZERO);
    }
}
