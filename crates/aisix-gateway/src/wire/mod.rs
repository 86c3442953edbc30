//! Wire formats at the byte level: inspecting and editing OpenAI request bodies without
//! re-serializing them, splitting SSE streams into events, and reading token usage.

pub mod openai;
pub mod sse;
pub mod usage;
