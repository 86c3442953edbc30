//! Wire formats at the byte level: inspecting and editing OpenAI request bodies without
//! re-serializing them, splitting SSE streams into events, and reading token usage.

pub(crate) mod openai;
pub(crate) mod sse;
pub(crate) mod usage;
