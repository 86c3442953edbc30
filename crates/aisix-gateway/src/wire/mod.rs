//! Wire formats at the byte level: inspecting and editing OpenAI request bodies without
//! re-serializing them, splitting SSE streams into events, reading token usage, and the
//! translation between OpenAI chat completions and Anthropic's Messages API.

pub mod anthropic;
pub mod chat;
pub mod content;
pub mod json;
pub mod openai;
pub mod sse;
pub mod usage;
