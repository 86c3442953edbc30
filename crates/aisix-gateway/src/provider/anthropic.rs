//! The Anthropic adapter (`anthropic`): `x-api-key` and `anthropic-version` upstream, requests
//! to `{api_base}/v1/messages`. An Anthropic client's request is relayed byte for byte with
//! only `model` rewritten in place, its `anthropic-version` and `anthropic-beta` forwarded (the
//! key's `anthropic_version` when it sent none), and the answer relayed unchanged as it
//! arrives (unparsed but for its usage and, for groups, its `model`); `system` turns inside
//! `messages`, which Anthropic refuses, are first hoisted into the system prompt. An OpenAI
//! client's chat request is translated to a Messages request, and the answer, stream or error
//! back to OpenAI's shape. A `vertex` key's Anthropic models go the same way, to Vertex AI's
//! `rawPredict` with its body ([`super::vertex`]).

use bytes::Bytes;
use http::{HeaderMap, HeaderName};

use aisix_config::ProviderKind;

use super::exchange;
use super::translated::TranslatedStream;
use super::{Answer, Call, StreamMap};
use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::wire::Dialect;
use crate::wire::anthropic::request::{self, DEFAULT_MAX_TOKENS, RequestError};
use crate::wire::anthropic::{error as anthropic_error, response, roles};

static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// Calls an Anthropic direct model with the client's request, relayed or translated.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    if call.inbound.endpoint == Endpoint::Responses {
        return Box::pin(super::responses::via_anthropic(call)).await;
    }
    let (route, inbound) = (call.route, call.inbound);
    let provider = call.provider();
    let relayed = inbound.dialect == Dialect::Anthropic;
    let endpoint = match inbound.endpoint {
        Endpoint::ChatCompletions => Endpoint::Messages,
        Endpoint::Messages | Endpoint::CountTokens => inbound.endpoint,
        other => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "The model '{}' is served by an Anthropic provider, which has no {} endpoint.",
                    call.shown_name(),
                    other.upstream_path()
                ),
            ));
        }
    };
    // Vertex AI serves Anthropic's models at its own URL, with its own body and headers.
    let vertex = provider.kind == ProviderKind::Vertex;
    // (`vertex::call` sends only chat, Messages and count_tokens here.)
    let uri = if vertex {
        super::vertex::raw_predict_uri(call)?
    } else {
        call.uri(endpoint)?
    };
    let mut extra = HeaderMap::new();
    let mut structured = false;
    let body = if relayed {
        if !vertex {
            extra = inbound.forwarded.clone();
        }
        let body =
            inbound
                .inspected
                .rewrite(&inbound.body, route.upstream_model_json.as_deref(), false);
        // Anthropic refuses `system` turns in `messages`: they join the system prompt.
        roles::hoisted(&body).map_or(body, Bytes::from)
    } else {
        let translated =
            request::to_anthropic(&inbound.body, &route.upstream_model, DEFAULT_MAX_TOKENS)
                .map_err(request_error)?;
        structured = translated.structured;
        translated.body
    };
    let body = if vertex && endpoint == Endpoint::CountTokens {
        super::vertex::count_tokens_body(&body, &route.upstream_model)?
    } else if vertex {
        super::vertex::raw_predict_body(&body)?
    } else {
        body
    };
    if !vertex && !extra.contains_key(&ANTHROPIC_VERSION) {
        extra.insert(
            ANTHROPIC_VERSION.clone(),
            provider.anthropic_version.clone(),
        );
    }
    // A whole answer translated is held: its room is found before the provider bills it.
    let reserved = call.reserve_if(!relayed && !inbound.stream).await?;
    let errors: super::exchange::ErrorBody = if vertex {
        super::vertex::error_body
    } else {
        error_body
    };
    let head = call.send(uri, body, &extra, errors).await?;
    if head.is_stream(inbound.stream) {
        let map = if relayed {
            TranslatedStream::passthrough(call.rename.then(|| call.shown_json().clone()))
        } else {
            TranslatedStream::to_openai(
                inbound.client_wants_usage(),
                exchange::unix_now(),
                call.rename.then(|| call.shown_name()),
                structured,
            )
        };
        return Ok(head.stream(StreamMap::Translated(Box::new(map))));
    }
    if relayed {
        // A token count names no model and reports no usage: nothing was generated.
        let messages = endpoint == Endpoint::Messages;
        let usage = messages.then_some(Dialect::Anthropic);
        return Ok(call.unary(head, call.rename && messages, usage));
    }
    call.translate(head, reserved, |body| {
        let answer = response::to_openai_with(body, exchange::unix_now(), structured)?;
        Ok((answer.body, Some(answer.usage.to_usage())))
    })
    .await
}

/// The provider's own error (its key masked): as it was for an Anthropic client, in OpenAI's
/// envelope for an OpenAI one.
pub(super) fn error_body(
    status: u16,
    body: &[u8],
    secret: Option<&str>,
    client: Dialect,
) -> Option<Bytes> {
    match client {
        Dialect::Anthropic => anthropic_error::upstream_anthropic(body, secret),
        Dialect::OpenAi | Dialect::Responses => {
            anthropic_error::upstream_to_openai(status, body, secret)
        }
    }
}

/// A request the other dialect cannot express: the client's to mend (400).
pub(crate) fn request_error(error: RequestError) -> GatewayError {
    match error {
        RequestError::InvalidJson(message) => GatewayError::new(ErrorKind::InvalidJson, message),
        RequestError::Invalid(message) => GatewayError::new(ErrorKind::InvalidRequest, message),
    }
}
