//! The Vertex AI adapter (`vertex`): a service account's token as `Authorization: Bearer`
//! (refreshed off the request path, [`crate::snapshot::credential`]; added by
//! [`super::exchange`]), models under `projects/{project}/locations/{location}/publishers/…`.
//! A Gemini model (`publishers/google`) is called exactly as the `gemini` adapter calls one,
//! its translators unchanged, but for embeddings (`:predict`) and the `countTokens` body
//! ([`crate::wire::gemini::vertex`]); an Anthropic model (`publishers/anthropic`, a `model_name`
//! starting `claude`) as the `anthropic` adapter calls one, at `:rawPredict` /
//! `:streamRawPredict` with the body made Vertex's ([`raw_predict_body`]). Errors are Google's
//! envelope or, from an Anthropic model, Anthropic's ([`error_body`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, Uri};
use serde_json::value::RawValue;

use super::{Answer, Call};
use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::snapshot::Publisher;
use crate::wire::Dialect;
use crate::wire::gemini::vertex;

/// The `anthropic_version` Vertex AI's Anthropic models take in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Calls a Vertex AI direct model with the client's request, translated as its publisher's
/// dialect needs.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let endpoint = call.inbound.endpoint;
    match (Publisher::of(&call.route.upstream_model), endpoint) {
        (
            Publisher::Google,
            Endpoint::ChatCompletions
            | Endpoint::Messages
            | Endpoint::Responses
            | Endpoint::CountTokens,
        ) => super::gemini::call(call).await,
        (Publisher::Google, Endpoint::Embeddings) => Box::pin(embeddings(call)).await,
        (
            Publisher::Anthropic,
            Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::CountTokens,
        ) => super::anthropic::call(call).await,
        (Publisher::Anthropic, Endpoint::Responses) => {
            Box::pin(super::responses::via_anthropic(call)).await
        }
        (_, other) => Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            format!(
                "The model '{}' is served by a Vertex AI provider, which has no {} endpoint.",
                call.shown_name(),
                other.upstream_path()
            ),
        )),
    }
}

/// `/v1/embeddings` on a text-embedding model as `:predict`, the answer back as OpenAI's list
/// with the token counts Vertex reports as its usage.
async fn embeddings(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let sent = vertex::embeddings(&call.inbound.body).map_err(super::anthropic::request_error)?;
    let uri = call.uri(Endpoint::Embeddings)?;
    let reserved = call.reserve().await?;
    let head = call
        .send(uri, sent.body.clone(), &HeaderMap::new(), error_body)
        .await?;
    call.translate(head, Some(reserved), |body| {
        let answer = vertex::embeddings_to_openai(body, &call.route.upstream_model, &sent)?;
        Ok((answer.body, Some(answer.usage)))
    })
    .await
}

/// The URI of an Anthropic model's call: the token counter's for count_tokens,
/// `:streamRawPredict` for a stream, else `:rawPredict`.
pub(super) fn raw_predict_uri<'a>(call: &'a Call<'_>) -> Result<&'a Uri, GatewayError> {
    if call.inbound.endpoint == Endpoint::CountTokens {
        call.uri(Endpoint::CountTokens)
    } else {
        call.uri_or_stream(Endpoint::Messages)
    }
}

#[derive(serde::Serialize)]
struct RawPredict<'a> {
    anthropic_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(flatten)]
    rest: BTreeMap<String, &'a RawValue>,
}

/// An Anthropic Messages body as Vertex's `rawPredict` takes it: the model is the URL's, so
/// `model` goes, and `anthropic_version` is Vertex's. The other fields pass as they are
/// (copied, not re-serialized).
pub(super) fn raw_predict_body(body: &[u8]) -> Result<Bytes, GatewayError> {
    vertex_body(body, None)
}

/// An Anthropic count_tokens body as Vertex's token counter takes it: its URL names no model,
/// so `model` is the body's (the upstream model), beside Vertex's `anthropic_version`.
pub(super) fn count_tokens_body(body: &[u8], model: &str) -> Result<Bytes, GatewayError> {
    vertex_body(body, Some(model))
}

fn vertex_body(body: &[u8], count_model: Option<&str>) -> Result<Bytes, GatewayError> {
    let mut rest: BTreeMap<String, &RawValue> = serde_json::from_slice(body).map_err(|e| {
        GatewayError::new(
            ErrorKind::InvalidJson,
            format!("The request body is not a JSON object: {e}"),
        )
    })?;
    rest.remove("model");
    rest.remove("anthropic_version");
    let body = RawPredict {
        anthropic_version: ANTHROPIC_VERSION,
        model: count_model,
        rest,
    };
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
        tracing::error!(error = %e, "cannot write a rawPredict body");
        GatewayError::new(
            ErrorKind::Internal,
            "The gateway could not build the upstream request.",
        )
    })
}

#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
}

/// An error from Vertex in the client's envelope: Anthropic's own (`"type":"error"`, what an
/// Anthropic model answers) as the `anthropic` adapter renders it, else Google's (what Vertex
/// itself answers: quota, permission, an unknown model) as the `gemini` adapter does.
pub(super) fn error_body(
    status: u16,
    body: &[u8],
    secret: Option<&str>,
    client: Dialect,
) -> Option<Bytes> {
    let anthropic = serde_json::from_slice::<Envelope<'_>>(body)
        .is_ok_and(|envelope| envelope.kind == Some("error"));
    if anthropic {
        super::anthropic::error_body(status, body, secret, client)
    } else {
        super::gemini::error_body(status, body, secret, client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_predict_body_has_no_model_and_vertex_s_anthropic_version() {
        let body = br#"{"model":"claude-x","anthropic_version":"2023-06-01","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi \u00e9"}]}"#;
        let sent: serde_json::Value =
            serde_json::from_slice(&raw_predict_body(body).unwrap()).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({
                "anthropic_version": "vertex-2023-10-16",
                "max_tokens": 5,
                "stream": true,
                "messages": [{"role": "user", "content": "hi é"}],
            })
        );
    }

    #[test]
    fn a_count_tokens_body_names_the_upstream_model_with_vertex_s_anthropic_version() {
        let body = br#"{"model":"vclaude","messages":[{"role":"user","content":"hi"}]}"#;
        let sent: serde_json::Value =
            serde_json::from_slice(&count_tokens_body(body, "claude-sonnet-4@20250514").unwrap())
                .unwrap();
        assert_eq!(
            sent,
            serde_json::json!({
                "anthropic_version": "vertex-2023-10-16",
                "model": "claude-sonnet-4@20250514",
                "messages": [{"role": "user", "content": "hi"}],
            })
        );
    }

    #[test]
    fn a_google_error_from_an_anthropic_model_keeps_its_status_name_for_an_openai_client() {
        let google =
            br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}"#;
        let openai: serde_json::Value =
            serde_json::from_slice(&error_body(429, google, None, Dialect::OpenAi).unwrap())
                .unwrap();
        assert_eq!(openai["error"]["code"], "RESOURCE_EXHAUSTED");
        assert_eq!(openai["error"]["type"], "rate_limit_error");
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let relayed: serde_json::Value =
            serde_json::from_slice(&error_body(529, anthropic, None, Dialect::Anthropic).unwrap())
                .unwrap();
        assert_eq!(relayed["error"]["type"], "overloaded_error");
    }
}
