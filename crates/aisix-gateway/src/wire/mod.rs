//! Wire formats at the byte level: inspecting and editing OpenAI request bodies without
//! re-serializing them, splitting SSE streams into events, reading token usage and what stream
//! chunks say, and the translation between OpenAI chat completions and Anthropic's Messages API.

// Every byte and number here comes from a client or an upstream: no index that can fall off a
// slice, no sum that can overflow (a debug build panics on one).
#![cfg_attr(
    not(test),
    warn(clippy::arithmetic_side_effects, clippy::indexing_slicing)
)]

pub mod anthropic;
pub mod bedrock;
pub mod chat;
pub mod chunk;
pub mod content;
pub mod embeddings;
pub mod gemini;
pub mod json;
pub mod openai;
pub mod rename;
pub mod responses;
pub mod sse;
pub mod usage;

/// An API's wire format, as clients and providers speak it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's chat and legacy completions and embeddings.
    OpenAi,
    /// Anthropic's Messages API (`/v1/messages` and its `count_tokens`).
    Anthropic,
    /// OpenAI's Responses API (`/v1/responses`): OpenAI's error envelope, its own answers and
    /// stream events.
    Responses,
}
