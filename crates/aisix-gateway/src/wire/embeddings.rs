//! OpenAI's embeddings list, written from the vectors a translated provider (Gemini, Bedrock)
//! answered with: floats, or base64 of little-endian `f32`s when the client asked for it.

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;

use crate::wire::anthropic::response::Malformed;

#[derive(Serialize)]
struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingOut>,
    model: &'a str,
    usage: EmbeddingUsage,
}

/// OpenAI's embeddings usage: prompt and total tokens only.
#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct EmbeddingOut {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Floats(Vec<f32>),
    Base64(String),
}

/// `vectors` as OpenAI's embeddings list naming `model`, with `prompt_tokens` as its usage.
pub fn list(
    vectors: impl IntoIterator<Item = Vec<f32>>,
    model: &str,
    base64: bool,
    prompt_tokens: u64,
) -> Result<Bytes, Malformed> {
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, values)| EmbeddingOut {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Vector::Floats(values)
            },
        })
        .collect();
    let list = EmbeddingList {
        object: "list",
        data,
        model,
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    serde_json::to_vec(&list)
        .map(Bytes::from)
        .map_err(|e| Malformed(e.to_string()))
}
