//! Where Vertex AI's Gemini surface differs from AI Studio's: embeddings by `:predict`
//! (`instances` of text, `predictions` with token counts) and the `countTokens` body, which
//! takes the request's fields at its top level. Everything else is [`super::request`]'s and
//! [`super::response`]'s.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::response::Answer;
use crate::wire::anthropic::request::RequestError;
use crate::wire::anthropic::response::Malformed;
use crate::wire::chat::ChatRequest;
use crate::wire::json;
use crate::wire::usage::Usage;

/// A translated `:predict` embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct Predict {
    pub body: Bytes,
    /// How many texts were sent: the answer must hold as many embeddings.
    pub texts: usize,
    /// The client wants each vector as base64 of little-endian `f32`s.
    pub base64: bool,
}

#[derive(Serialize)]
struct PredictBody {
    instances: Vec<Instance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Parameters>,
}

#[derive(Serialize)]
struct Instance {
    content: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Parameters {
    output_dimensionality: u64,
}

/// An OpenAI embeddings body as a Vertex `:predict` body for a text-embedding model: one
/// instance per text, `dimensions` as `outputDimensionality`. Token arrays are refused.
pub fn embeddings(body: &[u8]) -> Result<Predict, RequestError> {
    let request = crate::wire::embeddings::read_request(body)?;
    let texts = request.texts.len();
    let body = PredictBody {
        instances: request
            .texts
            .into_iter()
            .map(|content| Instance { content })
            .collect(),
        parameters: request.dimensions.map(|output_dimensionality| Parameters {
            output_dimensionality,
        }),
    };
    let body = serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| RequestError::Invalid(e.to_string()))?;
    Ok(Predict {
        body,
        texts,
        base64: request.base64,
    })
}

#[derive(Deserialize)]
struct PredictAnswer {
    #[serde(default)]
    predictions: Vec<Prediction>,
}

#[derive(Deserialize)]
struct Prediction {
    embeddings: Embedding,
}

#[derive(Deserialize)]
struct Embedding {
    values: Vec<f32>,
    statistics: Option<Statistics>,
}

#[derive(Deserialize)]
struct Statistics {
    /// A number in the JSON (Google's SDK reads it as a float).
    token_count: Option<f64>,
}

/// A `:predict` answer as OpenAI's embeddings list naming `model`, its usage the sum of the
/// predictions' `token_count`s. An answer without one embedding per text sent is malformed.
pub fn embeddings_to_openai(body: &[u8], model: &str, sent: &Predict) -> Result<Answer, Malformed> {
    let answer: PredictAnswer = json::parse(body).map_err(|e| Malformed(e.message().into()))?;
    if answer.predictions.len() != sent.texts {
        return Err(Malformed(format!(
            "Vertex AI answered {} embeddings for {} inputs",
            answer.predictions.len(),
            sent.texts
        )));
    }
    let tokens: f64 = answer
        .predictions
        .iter()
        .filter_map(|p| p.embeddings.statistics.as_ref()?.token_count)
        .filter(|count| count.is_finite() && *count > 0.0)
        .sum();
    // Counts are whole numbers; a float sum of them is exact far beyond any request's size.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let prompt_tokens = tokens.round() as u64;
    let body = crate::wire::embeddings::list(
        answer.predictions.into_iter().map(|p| p.embeddings.values),
        model,
        sent.base64,
        prompt_tokens,
    )?;
    Ok(Answer {
        body,
        usage: Usage {
            prompt_tokens,
            completion_tokens: 0,
            total_tokens: prompt_tokens,
        },
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CountTokens {
    contents: Vec<super::types::Content>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<super::types::Content>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<super::types::Tool>>,
}

/// An OpenAI chat body (an Anthropic count_tokens request made chat) as Vertex's
/// `countTokens` body: contents, system instruction and tools at the top level (the model is
/// the URL's; Vertex's request has no tool config, and generation settings count nothing).
pub fn count_tokens(body: &[u8]) -> Result<Bytes, RequestError> {
    let request: ChatRequest = json::parse(body)?;
    let generate = super::request::chat_to_gemini(request)?;
    let body = CountTokens {
        contents: generate.contents,
        system_instruction: generate.system_instruction,
        tools: generate.tools,
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| RequestError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_array_input_is_refused_naming_input() {
        let error = embeddings(br#"{"model":"e","input":[[1,2,3]]}"#).unwrap_err();
        let RequestError::Invalid(message) = error else {
            panic!("{error:?}")
        };
        assert!(message.starts_with("input:"), "{message}");
    }

    #[test]
    fn an_answer_short_of_an_embedding_is_malformed() {
        let sent = embeddings(br#"{"model":"e","input":["a","b"]}"#).unwrap();
        let answer = br#"{"predictions":[{"embeddings":{"values":[0.5]}}]}"#;
        let error = embeddings_to_openai(answer, "e", &sent).unwrap_err();
        assert_eq!(error.0, "Vertex AI answered 1 embeddings for 2 inputs");
        let error = embeddings_to_openai(b"{}", "e", &sent).unwrap_err();
        assert_eq!(error.0, "Vertex AI answered 0 embeddings for 2 inputs");
    }
}
