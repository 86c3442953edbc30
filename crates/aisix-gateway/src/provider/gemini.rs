//! The Gemini adapter (`gemini`, Google AI Studio): `x-goog-api-key` upstream, chat at
//! `models/{model}:generateContent` (`:streamGenerateContent?alt=sse` for streams) and
//! embeddings at `:batchEmbedContents`. Every request is translated: an OpenAI client's chat
//! request to a `generateContent` body, an Anthropic client's Messages request first to chat
//! completions and then the same way; answers, streams and errors come back the same two
//! steps; a Responses request goes through chat the same way ([`super::responses`]). Gemini
//! models are never continued (a cut stream ends with its error).

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};

use aisix_config::ProviderKind;

use super::translated::TranslatedStream;
use super::{Answer, Call, Carried, Edit, Mapped, StreamMap, exchange};
use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::wire::anthropic::request::{self as anthropic_request, OutputTokensField};
use crate::wire::anthropic::stream::{self as anthropic_stream, Blocks};
use crate::wire::anthropic::{error as anthropic_error, response as anthropic_response};
use crate::wire::gemini::stream::ToChat;
use crate::wire::gemini::{error as gemini_error, request, response};
use crate::wire::usage::Usage;
use crate::wire::{Dialect, sse};

/// Calls a Gemini direct model with the client's request, translated.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    match inbound.endpoint {
        Endpoint::ChatCompletions | Endpoint::Messages => {}
        Endpoint::Responses => return Box::pin(super::responses::via_gemini(call)).await,
        Endpoint::Embeddings => return Box::pin(embeddings(call)).await,
        Endpoint::CountTokens => return count_tokens(call).await,
        other => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "The model '{}' is served by a Gemini provider, which has no {} endpoint.",
                    call.shown_name(),
                    other.upstream_path()
                ),
            ));
        }
    }
    let anthropic = inbound.dialect == Dialect::Anthropic;
    let chat = if anthropic {
        // The field of a model that reasons: a thinking budget carries over as an effort.
        anthropic_request::to_openai(
            &inbound.body,
            &route.upstream_model,
            OutputTokensField::MaxCompletionTokens,
        )
        .map_err(super::anthropic::request_error)?
        .body
    } else {
        inbound.body.clone()
    };
    let translated = request::from_chat(&chat).map_err(super::anthropic::request_error)?;
    let uri = call.uri_or_stream(Endpoint::ChatCompletions)?;
    // A whole answer translated is held: its room is found before the provider bills it.
    let reserved = call.reserve_if(!inbound.stream).await?;
    let head = call
        .send(uri, translated.body, &HeaderMap::new(), error_body)
        .await?;
    if head.is_stream(inbound.stream) {
        let map = GeminiStream::new(
            // An Anthropic client's stream reports usage in its `message_delta`.
            translated.include_usage || anthropic,
            exchange::unix_now(),
            call.rename.then(|| call.shown_name()),
            anthropic,
        );
        return Ok(head.stream(StreamMap::Gemini(Box::new(map))));
    }
    call.translate(head, reserved, |body| {
        let answer = response::to_chat(body, exchange::unix_now(), "")?;
        if anthropic {
            let message = anthropic_response::to_anthropic(&answer.body)?;
            return Ok((message.body, Some(message.usage.to_usage())));
        }
        Ok((answer.body, Some(answer.usage)))
    })
    .await
}

/// Anthropic's count_tokens as `countTokens` (which Gemini does not bill: no usage).
async fn count_tokens(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let route = call.route;
    let chat = anthropic_request::count_tokens_to_openai(
        &call.inbound.body,
        &route.upstream_model,
        OutputTokensField::MaxCompletionTokens,
    )
    .map_err(super::anthropic::request_error)?;
    // Vertex AI takes the request's fields at the top level; AI Studio a whole request.
    let body = if call.provider().kind == ProviderKind::Vertex {
        crate::wire::gemini::vertex::count_tokens(&chat)
    } else {
        request::count_tokens(&chat, &resource_name(&route.upstream_model))
    }
    .map_err(super::anthropic::request_error)?;
    let uri = call.uri(Endpoint::CountTokens)?;
    let reserved = call.reserve().await?;
    let head = call.send(uri, body, &HeaderMap::new(), error_body).await?;
    call.translate(head, Some(reserved), |body| {
        Ok((response::count_tokens_to_anthropic(body)?, None))
    })
    .await
}

/// Gemini's resource name of a model: `models/{model}`.
fn resource_name(model: &str) -> String {
    format!("models/{}", model.strip_prefix("models/").unwrap_or(model))
}

/// `/v1/embeddings` as `batchEmbedContents`, the answer back as OpenAI's list.
async fn embeddings(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let route = call.route;
    let model = resource_name(&route.upstream_model);
    let translated =
        request::embeddings(&call.inbound.body, &model).map_err(super::anthropic::request_error)?;
    let uri = call.uri(Endpoint::Embeddings)?;
    let reserved = call.reserve().await?;
    let head = call
        .send(uri, translated.body, &HeaderMap::new(), error_body)
        .await?;
    call.translate(head, Some(reserved), |body| {
        let answer =
            response::embeddings_to_openai(body, &route.upstream_model, translated.base64)?;
        Ok((answer.body, Some(answer.usage)))
    })
    .await
}

/// Gemini's error object (its key masked) in the client's envelope.
pub(super) fn error_body(
    status: u16,
    body: &[u8],
    secret: Option<&str>,
    client: Dialect,
) -> Option<Bytes> {
    match client {
        Dialect::Anthropic => anthropic_error::upstream_to_anthropic(status, body, secret),
        Dialect::OpenAi | Dialect::Responses => {
            gemini_error::upstream_to_openai(status, body, secret)
        }
    }
}

/// A Gemini stream's events as the client's: OpenAI chunks, and for an Anthropic client those
/// chunks translated on to Anthropic's events.
#[derive(Debug)]
pub(crate) struct GeminiStream {
    to_chat: ToChat,
    out: BytesMut,
    /// An Anthropic client's: the chunks' translation to its events.
    anthropic: Option<TranslatedStream>,
    usage: Option<Usage>,
}

impl GeminiStream {
    /// The stream's chunks say `created` (Unix seconds), and `rename` as their model.
    pub(crate) fn new(
        include_usage: bool,
        created: u64,
        rename: Option<&str>,
        anthropic: bool,
    ) -> Self {
        Self {
            to_chat: ToChat::new(include_usage, created, rename),
            out: BytesMut::new(),
            anthropic: anthropic.then(|| TranslatedStream::to_anthropic(rename)),
            usage: None,
        }
    }

    pub(super) fn event(&mut self, event: &[u8]) -> Mapped {
        let mut step = Mapped::default();
        match self.to_chat.event(event, &mut self.out) {
            anthropic_stream::Step::Continue => {}
            anthropic_stream::Step::Complete => step.done = true,
            anthropic_stream::Step::UpstreamError => {
                step.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
                return step;
            }
            anthropic_stream::Step::Malformed => {
                step.failure = Some(ErrorKind::UpstreamMalformed);
                return step;
            }
        }
        // Gemini reports usage as it goes, the output's only at the end: a stream cut
        // before then counts its content parts.
        let pieces = self.to_chat.pieces();
        let usage = self
            .to_chat
            .usage()
            .map(|u| u.to_usage().with_output_at_least(pieces));
        if usage.is_some() && usage != self.usage {
            self.usage = usage;
            step.usage = usage;
        }
        let chunks = self.out.split().freeze();
        let sent = match self.anthropic.as_mut() {
            None => chunks,
            Some(translated) => {
                let mut sent = BytesMut::new();
                let mut rest = &chunks[..];
                while let Some(end) = sse::event_end(rest) {
                    let (chunk, more) = rest.split_at(end);
                    if let Edit::Replace(bytes) = translated.event(chunk).edit {
                        sent.extend_from_slice(&bytes);
                    }
                    rest = more;
                }
                sent.freeze()
            }
        };
        step.edit = if sent.is_empty() {
            Edit::Drop
        } else {
            Edit::Replace(sent)
        };
        step
    }

    pub(super) fn dialect(&self) -> Dialect {
        if self.anthropic.is_some() {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }

    pub(super) fn started(&self) -> bool {
        self.to_chat.content_seen()
    }

    /// What this stream consumed so far.
    pub(super) fn carried(&self) -> Carried {
        Carried {
            usage: self.usage,
            pieces: self.to_chat.pieces(),
        }
    }

    /// Where an Anthropic client's stream stands: never continued, so nowhere to go on from.
    pub(super) fn blocks(&self) -> Blocks {
        Blocks::default()
    }
}
