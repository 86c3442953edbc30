//! Wire formats at the byte level: inspecting and editing OpenAI request bodies without
//! re-serializing them, splitting SSE streams into events, reading token usage and what stream
//! chunks say.

pub mod chunk;
pub mod openai;
pub mod sse;
pub mod usage;

/// An API's wire format, as clients and providers speak it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's chat and legacy completions and embeddings.
    OpenAi,
}
