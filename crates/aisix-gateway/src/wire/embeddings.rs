//! OpenAI's embeddings for the providers that translate them (Gemini, Bedrock): the client's
//! request read once ([`read_request`]), and the list written from the vectors the provider
//! answered with: floats, or base64 of little-endian `f32`s when the client asked for it.

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::wire::anthropic::request::RequestError;
use crate::wire::anthropic::response::Malformed;
use crate::wire::json;

#[derive(Debug, Deserialize)]
struct EmbeddingsRequest {
    input: EmbeddingInput,
    dimensions: Option<u64>,
    encoding_format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
}

/// An OpenAI embeddings request as a translating provider needs it.
#[derive(Debug)]
pub(crate) struct TextsToEmbed {
    /// The texts, at least one (token arrays are refused: these providers embed text).
    pub texts: Vec<String>,
    pub dimensions: Option<u64>,
    /// The client wants each vector as base64 of little-endian `f32`s.
    pub base64: bool,
}

/// Reads an OpenAI embeddings body: its input as texts, its dimensions and encoding format.
pub(crate) fn read_request(body: &[u8]) -> Result<TextsToEmbed, RequestError> {
    let invalid = |message: String| RequestError::Invalid(json::bounded(message));
    let request: EmbeddingsRequest = json::parse(body).map_err(|e| match e {
        json::ParseError::Syntax(m) => RequestError::InvalidJson(m),
        json::ParseError::Shape(_) => invalid(
            "input: must be a string or an array of strings for this model's provider".to_owned(),
        ),
    })?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(invalid(format!(
                "encoding_format: `{other}` is not one of float, base64"
            )));
        }
    };
    let texts = match request.input {
        EmbeddingInput::One(text) => vec![text],
        EmbeddingInput::Many(list) => list,
    };
    if texts.is_empty() {
        return Err(invalid("input: must not be empty".to_owned()));
    }
    Ok(TextsToEmbed {
        texts,
        dimensions: request.dimensions,
        base64,
    })
}

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
