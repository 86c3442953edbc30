//! The Bedrock adapter (`bedrock`): every request signed with SigV4 (service `bedrock`, the
//! key's region), chat at `/model/{id}/converse` (`/converse-stream` for streams) and
//! embeddings at `/model/{id}/invoke`. Both client dialects are translated, through
//! Anthropic's: a Messages request becomes a Converse body, a chat request first a Messages
//! one; the answer comes back as an Anthropic message (an OpenAI client's then as a chat
//! completion), a stream's event-stream messages as Anthropic events (then chat chunks). A
//! Responses request goes through chat the same way ([`super::responses`]).
//! Bedrock models are never continued (a cut stream ends with its error).

use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode, Uri};

use super::translated::TranslatedStream;
use super::{Answer, Call, Carried, Edit, Mapped, StreamMap, exchange};
use crate::endpoint::{Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::wire::anthropic::request::DEFAULT_MAX_TOKENS;
use crate::wire::anthropic::response as anthropic_response;
use crate::wire::anthropic::stream::{Blocks, Step};
use crate::wire::bedrock::stream::ToAnthropic;
use crate::wire::bedrock::{error as bedrock_error, request, response};
use crate::wire::usage::Usage;
use crate::wire::{Dialect, sse};

/// What ConverseStream answers with.
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// Calls a Bedrock direct model with the client's request, translated.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    match inbound.endpoint {
        Endpoint::ChatCompletions | Endpoint::Messages => {}
        Endpoint::Embeddings => return Box::pin(embeddings(call)).await,
        Endpoint::Responses => return Box::pin(super::responses::via_bedrock(call)).await,
        other => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "The model '{}' is served by a Bedrock provider, which has no {} endpoint.",
                    call.shown_name(),
                    other.upstream_path()
                ),
            ));
        }
    }
    let anthropic = inbound.dialect == Dialect::Anthropic;
    let converse = if anthropic {
        request::from_messages(&inbound.body, &route.upstream_model)
    } else {
        request::from_chat(&inbound.body, &route.upstream_model, DEFAULT_MAX_TOKENS)
    }
    .map_err(super::anthropic::request_error)?;
    let uri = call.uri_or_stream(Endpoint::ChatCompletions)?;
    // A whole answer translated is held: its room is found before the provider bills it.
    let reserved = call.reserve_if(!inbound.stream).await?;
    let extra = signed(call, uri, &converse.body, inbound.stream).await?;
    let head = call.send(uri, converse.body, &extra, error_body).await?;
    let id = message_id(call);
    let model = if call.rename {
        call.shown_name()
    } else {
        &route.upstream_model
    };
    if inbound.stream && is_event_stream(&head) {
        let map = BedrockStream::new(
            &id,
            model,
            anthropic,
            converse.include_usage,
            converse.structured,
            exchange::unix_now(),
        );
        return Ok(head.stream(StreamMap::Bedrock(Box::new(map))));
    }
    let structured = converse.structured;
    call.translate(head, reserved, |body| {
        let (message, usage) = response::to_messages_body(body, &id, model)?;
        if anthropic {
            return Ok((message, Some(usage.to_usage())));
        }
        let answer =
            anthropic_response::to_openai_with(&message, exchange::unix_now(), structured)?;
        Ok((answer.body, Some(answer.usage.to_usage())))
    })
    .await
}

/// `/v1/embeddings` through InvokeModel, with Titan's or Cohere's body by the model's id.
async fn embeddings(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let route = call.route;
    let translated = request::embeddings(&call.inbound.body, &route.upstream_model)
        .map_err(super::anthropic::request_error)?;
    let uri = call.uri(Endpoint::Embeddings)?;
    let reserved = call.reserve().await?;
    let extra = signed(call, uri, &translated.body, false).await?;
    let head = call.send(uri, translated.body, &extra, error_body).await?;
    call.translate(head, Some(reserved), |body| {
        let (body, usage) = response::embeddings_to_openai(
            body,
            translated.family,
            &route.upstream_model,
            translated.base64,
        )?;
        Ok((body, Some(usage)))
    })
    .await
}

/// Whether the answer is an event stream (ConverseStream's success).
pub(super) fn is_event_stream(head: &exchange::UpstreamHead) -> bool {
    head.response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(EVENT_STREAM))
}

/// The SigV4 headers for a `POST` of `body` to `uri`, and for a stream the event-stream
/// `Accept`.
pub(super) async fn signed(
    call: &Call<'_>,
    uri: &Uri,
    body: &[u8],
    stream: bool,
) -> Result<HeaderMap, GatewayError> {
    let provider = call.provider();
    let assumed;
    let signer = match (&provider.signer, &provider.assumed) {
        (Some(signer), _) => signer,
        (None, Some(cell)) => {
            assumed = cell.get(call.pool).await?;
            &*assumed
        }
        (None, None) => {
            tracing::error!(provider = %provider.name, "bedrock key has no AWS credentials");
            return Err(GatewayError::new(
                ErrorKind::Internal,
                "The gateway has no AWS credentials for this model's provider.",
            ));
        }
    };
    let mut headers = signer
        .sign(uri, "application/json", body, SystemTime::now())
        .map_err(|error| {
            tracing::error!(provider = %provider.name, %error, "cannot sign the upstream request");
            GatewayError::new(
                ErrorKind::Internal,
                "The gateway could not build the upstream request.",
            )
        })?;
    if stream {
        headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
    }
    Ok(headers)
}

/// The id a translated answer carries: the gateway's request id, as Anthropic's `msg_` ids.
pub(super) fn message_id(call: &Call<'_>) -> String {
    format!("msg_{}", call.request_id.to_str().unwrap_or("bedrock"))
}

/// Bedrock's error object (its key masked) in the client's envelope.
pub(super) fn error_body(
    status: u16,
    body: &[u8],
    secret: Option<&str>,
    client: Dialect,
) -> Option<Bytes> {
    match client {
        Dialect::Anthropic => bedrock_error::upstream_to_anthropic(status, body, secret),
        Dialect::OpenAi | Dialect::Responses => {
            bedrock_error::upstream_to_openai(status, body, secret)
        }
    }
}

/// A ConverseStream's messages as the client's events: Anthropic's, and for an OpenAI client
/// those translated on to chat chunks.
#[derive(Debug)]
pub(crate) struct BedrockStream {
    to_anthropic: ToAnthropic,
    out: BytesMut,
    /// The Anthropic events' way to the client: relayed (usage read), or to OpenAI chunks.
    client: TranslatedStream,
    usage: Option<Usage>,
    anthropic: bool,
}

impl BedrockStream {
    /// A stream whose `message_start` names `id` and `model`, for an Anthropic client or an
    /// OpenAI one (whose chunks say `created`, with the usage chunk when it asked for it, and
    /// structured output as text).
    pub(crate) fn new(
        id: &str,
        model: &str,
        anthropic: bool,
        include_usage: bool,
        structured: bool,
        created: u64,
    ) -> Self {
        let client = if anthropic {
            TranslatedStream::passthrough(None)
        } else {
            TranslatedStream::to_openai(include_usage, created, None, structured)
        };
        Self {
            to_anthropic: ToAnthropic::new(id, model),
            out: BytesMut::new(),
            client,
            usage: None,
            anthropic,
        }
    }

    pub(super) fn event(&mut self, message: &[u8]) -> Mapped {
        let mut step = Mapped::default();
        match self.to_anthropic.event(message, &mut self.out) {
            Step::Continue => {}
            Step::Complete => step.done = true,
            Step::UpstreamError => {
                step.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
                step.reported = sse::reported(&self.out).map(Box::new);
                self.out.clear();
                return step;
            }
            Step::Malformed => {
                step.failure = Some(ErrorKind::UpstreamMalformed);
                return step;
            }
        }
        // Only `metadata` reports usage (the `message_start` made for the client says zero):
        // until then a cut stream counts its content events.
        if self.usage.is_none()
            && let Some(usage) = self.to_anthropic.usage()
        {
            self.usage = Some(usage.to_usage());
            step.usage = self.usage;
        }
        let events = self.out.split().freeze();
        let sent = self.relay(&events, &mut step);
        step.edit = if sent.is_empty() {
            Edit::Drop
        } else {
            Edit::Replace(sent)
        };
        step
    }

    /// Runs each of `events` (Anthropic's) through the client's translation.
    fn relay(&mut self, events: &[u8], step: &mut Mapped) -> Bytes {
        let mut sent = BytesMut::new();
        let mut rest = events;
        while let Some(end) = sse::event_end(rest) {
            let (event, more) = rest.split_at(end);
            let mapped = self.client.event(event);
            match mapped.edit {
                Edit::Keep => sent.extend_from_slice(event),
                Edit::Replace(bytes) => sent.extend_from_slice(&bytes),
                Edit::Drop => {}
            }
            step.done |= mapped.done;
            if mapped.failure.is_some() {
                step.failure = mapped.failure;
            }
            rest = more;
        }
        sent.freeze()
    }

    /// The upstream ended after the answer's stop but before its usage: the client's end.
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        if !self.to_anthropic.finish(&mut self.out) {
            return None;
        }
        let events = self.out.split().freeze();
        let mut step = Mapped::default();
        let mut sent = BytesMut::from(&self.relay(&events, &mut step)[..]);
        if let Some(end) = self.client.finish() {
            sent.extend_from_slice(&end);
        }
        Some(sent.freeze())
    }

    pub(super) fn dialect(&self) -> Dialect {
        if self.anthropic {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }

    pub(super) fn started(&self) -> bool {
        self.to_anthropic.content_seen()
    }

    /// What this stream consumed so far.
    pub(super) fn carried(&self) -> Carried {
        Carried {
            usage: self.usage,
            pieces: self.client.pieces(),
        }
    }

    /// Where an Anthropic client's stream stands: never continued, so nowhere to go on from.
    pub(super) fn blocks(&self) -> Blocks {
        Blocks::default()
    }
}
