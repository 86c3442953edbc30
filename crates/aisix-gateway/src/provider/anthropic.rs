//! The Anthropic adapter (`anthropic`): `x-api-key` and `anthropic-version` upstream, requests
//! to `{api_base}/v1/messages`. An Anthropic client's request is relayed byte for byte with
//! only `model` rewritten in place, its `anthropic-version` and `anthropic-beta` forwarded (the
//! key's `anthropic_version` when it sent none), and the answer relayed unchanged as it
//! arrives (unparsed but for its usage and, for groups, its `model`). An OpenAI client's chat
//! request is translated to a Messages request, and the answer, stream or error back to
//! OpenAI's shape.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::exchange::{self, Rejection};
use super::translated::Translated;
use super::{Answer, Call, StreamMap};
use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::snapshot::Provider;
use crate::unary::Unary;
use crate::wire::anthropic::request::{self, DEFAULT_MAX_TOKENS, RequestError};
use crate::wire::anthropic::{error as anthropic_error, response};
use crate::wire::{Dialect, chunk};

static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// The client headers an Anthropic passthrough forwards: they select the API's behaviour.
pub(crate) const FORWARDED: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// Calls an Anthropic direct model with the client's request, relayed or translated.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let Call {
        pool,
        route,
        inbound,
        deadlines,
        request_id,
        rename,
        max_response_bytes,
        budget,
    } = *call;
    let provider = &*route.provider;
    let stream = inbound.stream;
    let relayed = inbound.dialect == Dialect::Anthropic;
    let endpoint = match inbound.endpoint {
        Endpoint::ChatCompletions => Endpoint::Messages,
        Endpoint::Messages | Endpoint::CountTokens => inbound.endpoint,
        other => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "The model '{}' is served by an Anthropic provider, which has no {} endpoint.",
                    route.name,
                    other.upstream_path()
                ),
            ));
        }
    };
    let Some(uri) = route.uris.get(endpoint) else {
        return Err(exchange::no_uri(provider));
    };
    let mut extra = HeaderMap::new();
    let body = if relayed {
        extra = inbound.forwarded.clone();
        inbound
            .inspected
            .rewrite(&inbound.body, route.upstream_model_json.as_deref(), false)
    } else {
        request::to_anthropic(&inbound.body, &route.upstream_model, DEFAULT_MAX_TOKENS)
            .map_err(request_error)?
            .body
    };
    if !extra.contains_key(&ANTHROPIC_VERSION) {
        extra.insert(
            ANTHROPIC_VERSION.clone(),
            provider.anthropic_version.clone(),
        );
    }
    let request = exchange::request(provider, uri, body, stream, request_id, &extra)?;

    let head = exchange::send(pool, provider, request, deadlines).await?;
    let status = head.response.status();
    if !status.is_success() {
        let rejection = exchange::rejection(head, deadlines.end, &provider.name).await;
        return Err(error(&rejection, provider, inbound.dialect));
    }
    let content_type = head.response.headers().get(CONTENT_TYPE).cloned();
    if stream && exchange::is_sse(content_type.as_ref()) {
        let map = if relayed {
            Translated::relay(rename.then(|| route.name_json.clone()))
        } else {
            Translated::to_openai(
                inbound.client_wants_usage(),
                exchange::unix_now(),
                rename.then_some(&*route.name),
            )
        };
        return Ok(Answer::Stream {
            status,
            body: head.response.into_body(),
            lease: head.lease,
            map: StreamMap::Translated(Box::new(map)),
            waited: head.waited,
        });
    }
    let json = HeaderValue::from_static("application/json");
    if relayed {
        let messages = endpoint == Endpoint::Messages;
        return Ok(Answer::Unary {
            answer: Unary {
                status,
                content_type: content_type.unwrap_or(json),
                body: head.response.into_body(),
                lease: head.lease,
                // A token count names no model and reports no usage: nothing was generated.
                rename: (rename && messages).then(|| route.name_json.clone()),
                usage: messages.then_some(Dialect::Anthropic),
                end: deadlines.end,
                in_flight: None,
            },
            waited: head.waited,
        });
    }
    let (body, held) = exchange::read_body(
        head.response.into_body(),
        head.lease,
        max_response_bytes,
        Some(budget),
        deadlines.end,
        &provider.name,
    )
    .await?;
    let answer =
        response::to_openai(&body, exchange::unix_now()).map_err(|m| malformed(provider, &m.0))?;
    let body = match rename.then(|| chunk::with_model(&answer.body, &route.name_json)) {
        Some(Some(renamed)) => Bytes::from(renamed),
        _ => answer.body,
    };
    Ok(Answer::Complete {
        status,
        content_type: json,
        body,
        usage: Some(answer.usage.to_usage()),
        held,
        waited: head.waited,
    })
}

/// The error for an upstream error status, with the provider's own error (its key masked)
/// for the 4xx a client may see: as it was for an Anthropic client, in OpenAI's envelope for
/// an OpenAI one.
fn error(rejection: &Rejection, provider: &Provider, dialect: Dialect) -> GatewayError {
    let mut error = rejection.error();
    if rejection.passes_through() {
        let secret = exchange::secret(provider);
        error.upstream_body = match dialect {
            Dialect::Anthropic => anthropic_error::upstream_anthropic(&rejection.body, secret),
            Dialect::OpenAi => anthropic_error::upstream_to_openai(
                rejection.status.as_u16(),
                &rejection.body,
                secret,
            ),
        };
    }
    error
}

/// A request the other dialect cannot express: the client's to mend (400).
pub(crate) fn request_error(error: RequestError) -> GatewayError {
    match error {
        RequestError::InvalidJson(message) => GatewayError::new(ErrorKind::InvalidJson, message),
        RequestError::Invalid(message) => GatewayError::new(ErrorKind::InvalidRequest, message),
    }
}

/// An upstream answer that could not be translated.
pub(crate) fn malformed(provider: &Provider, why: &str) -> GatewayError {
    tracing::warn!(provider = %provider.name, why, "upstream answer could not be translated");
    GatewayError::new(
        ErrorKind::UpstreamMalformed,
        "The upstream provider's answer could not be translated.",
    )
}
