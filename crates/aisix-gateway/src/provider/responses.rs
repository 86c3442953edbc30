//! OpenAI's Responses API (`POST /v1/responses`) on an `openai` or `azure_openai` direct model.
//! A provider key that serves the API (`responses`, see the README) gets the client's request
//! byte for byte with only `model` rewritten, and its answer is relayed as it arrives: a whole
//! answer with its usage read by the bounded scan, a stream through [`Relay`], which reads only
//! the events that start and end it. Any other key gets the request translated to chat
//! completions (`wire::responses`), and its answer or stream translated back.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};

use super::{Answer, Call, Carried, Edit, Mapped, StreamMap, exchange};
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::snapshot::Provider;
use crate::stored::{self, Keeper, Pin, Stored};
use crate::wire::Dialect;
use crate::wire::anthropic::request::{self as anthropic_request, DEFAULT_MAX_TOKENS};
use crate::wire::anthropic::response::{self as anthropic_response, Malformed};
use crate::wire::anthropic::stream::{self as anthropic_stream, ToOpenAi, Translator};
use crate::wire::bedrock::stream::ToChat as BedrockToChat;
use crate::wire::chunk;
use crate::wire::gemini::response as gemini_response;
use crate::wire::gemini::stream::ToChat as GeminiToChat;
use crate::wire::openai::json_string;
use crate::wire::responses::answer;
use crate::wire::responses::event::{self, Identity, Kind, Reported};
use crate::wire::responses::failed_event;
use crate::wire::responses::ids::new_id;
use crate::wire::responses::object::Echo;
use crate::wire::responses::request::{self, RequestError};
use crate::wire::responses::stream::{FromChat, Outcome};
use crate::wire::sse;
use crate::wire::usage::Usage;

/// Calls the direct model with the client's Responses request, relayed or translated.
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    if call.provider().responses {
        native(call).await
    } else {
        translated(call).await
    }
}

/// Relays the client's Responses request to a provider key that serves the API.
async fn native(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    let uri = call.uri(Endpoint::Responses)?;
    // Azure's Responses API takes the deployment in `model`, not in the path.
    let azure_model;
    let model = match route.upstream_model_json.as_deref() {
        Some(model) => model,
        None => {
            azure_model = json_string(&route.upstream_model);
            &azure_model
        }
    };
    let body = inbound.inspected.rewrite(&inbound.body, Some(model), false);
    inbound.dropped_tools.set(Default::default());
    let head = call
        .send(uri, body, &HeaderMap::new(), super::openai::error_body)
        .await?;
    // A response the upstream does not keep (`store: false`) cannot be continued: no pin.
    let kept = inbound.inspected.store != Some(false);
    let pin = inbound.stored.clone().filter(|_| kept).map(|keeper| Pin {
        keeper,
        provider: Arc::clone(&route.provider.name),
    });
    if head.is_stream(inbound.stream) {
        let rename = call.rename.then(|| call.shown_json().clone());
        let mut map = Relay::new(rename, Arc::clone(&route.provider));
        map.pin = pin;
        return Ok(head.stream(StreamMap::Responses(Box::new(ResponsesStream::Relay(map)))));
    }
    let mut answer = call.unary(head, call.rename, Some(Dialect::Responses));
    if let Answer::Unary { answer, .. } = &mut answer {
        answer.pin = pin;
    }
    Ok(answer)
}

/// A Responses request made ready for a target that does not serve the API: its chat
/// completions body, what its answer echoes, and where the answer is kept.
struct Prepared {
    chat: Bytes,
    echo: Echo,
    keep: Option<(Keeper, Bytes)>,
}

/// Reads the conversation `previous_response_id` names (404 when it is not kept for the
/// caller) and translates the request, with it, to chat completions.
async fn prepare(call: &Call<'_>, include_usage: bool) -> Result<Prepared, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    let state: State = serde_json::from_slice(&inbound.body).unwrap_or_default();
    let history = match (&state.previous_response_id, &inbound.stored) {
        (Some(previous), Some(keeper)) => {
            let stored = keeper
                .store
                .get(previous, &keeper.owner)
                .await
                .ok_or_else(|| stored::not_found(previous, Some("previous_response_id")))?;
            conversation(&stored)
        }
        _ => Vec::new(),
    };
    let chat = request::to_chat(
        &inbound.body,
        &route.upstream_model,
        &history,
        include_usage,
    )
    .map_err(request_error)?;
    inbound.dropped_tools.set(chat.dropped);
    // What a stored answer keeps: the conversation before it and this request's input.
    let keep = match &inbound.stored {
        Some(keeper) if state.store != Some(false) => {
            let mut input = history;
            input.extend(input_items(chat.request.get("input")));
            let input = serde_json::to_vec(&input).unwrap_or_else(|_| b"[]".to_vec());
            Some((keeper.clone(), Bytes::from(input)))
        }
        _ => None,
    };
    let echo = Echo {
        id: new_id("resp_"),
        created_at: exchange::unix_now(),
        model: if call.rename {
            call.shown_name().to_owned()
        } else {
            route.upstream_model.clone()
        },
        request: chat.request,
    };
    Ok(Prepared {
        chat: Bytes::from(chat.body),
        echo,
        keep,
    })
}

/// Translates the client's Responses request to chat completions for a key that speaks only
/// chat, and the answer back (a whole answer is held, up to `upstream.max_response_bytes`).
async fn translated(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let inbound = call.inbound;
    let include_usage = inbound.stream && call.provider().stream_usage;
    let Prepared { chat, echo, keep } = prepare(call, include_usage).await?;
    let uri = call.uri(Endpoint::ChatCompletions)?;
    // A whole answer translated is held: its room is found before the provider bills it.
    let reserved = call.reserve_if(!inbound.stream).await?;
    let head = call
        .send(uri, chat, &HeaderMap::new(), super::openai::error_body)
        .await?;
    if head.is_stream(inbound.stream) {
        return Ok(translated_stream(call, head, echo, keep, None));
    }
    answered(call, head, reserved, echo, keep, |body| {
        Ok(Cow::Borrowed(body))
    })
    .await
}

/// The client's Responses request for an `anthropic` target: translated to chat completions,
/// then to a Messages request (the two translations the gateway has); the answer or stream
/// comes back the same way.
pub(crate) async fn via_anthropic(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    let provider = call.provider();
    let Prepared { chat, echo, keep } = prepare(call, inbound.stream).await?;
    let messages =
        anthropic_request::to_anthropic(&chat, &route.upstream_model, DEFAULT_MAX_TOKENS)
            .map_err(super::anthropic::request_error)?;
    let mut extra = HeaderMap::new();
    let (uri, body, errors): (_, _, super::exchange::ErrorBody) =
        if provider.kind == aisix_config::ProviderKind::Vertex {
            (
                super::vertex::raw_predict_uri(call)?,
                super::vertex::raw_predict_body(&messages.body)?,
                super::vertex::error_body,
            )
        } else {
            extra.insert("anthropic-version", provider.anthropic_version.clone());
            (
                call.uri(Endpoint::Messages)?,
                messages.body,
                super::anthropic::error_body,
            )
        };
    let reserved = call.reserve_if(!inbound.stream).await?;
    let head = call.send(uri, body, &extra, errors).await?;
    if head.is_stream(inbound.stream) {
        let to_chat = ToChatChunks::Anthropic(ToOpenAi::new(true, exchange::unix_now()));
        return Ok(translated_stream(call, head, echo, keep, Some(to_chat)));
    }
    answered(call, head, reserved, echo, keep, |body| {
        let chat = anthropic_response::to_openai(body, exchange::unix_now())?;
        Ok(Cow::Owned(chat.body.to_vec()))
    })
    .await
}

/// The client's Responses request for a `bedrock` target: translated to chat completions, then
/// to a Converse body (through Anthropic's Messages); Bedrock's answer or stream comes back
/// through Anthropic's shape and chat to Responses.
pub(crate) async fn via_bedrock(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let (route, inbound) = (call.route, call.inbound);
    let Prepared { chat, echo, keep } = prepare(call, inbound.stream).await?;
    let converse =
        crate::wire::bedrock::request::from_chat(&chat, &route.upstream_model, DEFAULT_MAX_TOKENS)
            .map_err(super::anthropic::request_error)?;
    let uri = call.uri_or_stream(Endpoint::ChatCompletions)?;
    let reserved = call.reserve_if(!inbound.stream).await?;
    let extra = super::bedrock::signed(call, uri, &converse.body, inbound.stream).await?;
    let head = call
        .send(uri, converse.body, &extra, super::bedrock::error_body)
        .await?;
    let id = super::bedrock::message_id(call);
    if inbound.stream && super::bedrock::is_event_stream(&head) {
        let to_chat = BedrockToChat::new(&id, &route.upstream_model, exchange::unix_now());
        let to_chat = ToChatChunks::Bedrock(to_chat);
        return Ok(translated_stream(call, head, echo, keep, Some(to_chat)));
    }
    let structured = converse.structured;
    answered(call, head, reserved, echo, keep, |body| {
        let (message, _) =
            crate::wire::bedrock::response::to_messages_body(body, &id, &route.upstream_model)?;
        let chat = anthropic_response::to_openai_with(&message, exchange::unix_now(), structured)?;
        Ok(Cow::Owned(chat.body.to_vec()))
    })
    .await
}

/// The client's Responses request for a `gemini` target: translated to chat completions, then
/// to a `generateContent` body; Gemini's answer or stream comes back through chat to Responses.
pub(crate) async fn via_gemini(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let inbound = call.inbound;
    let Prepared { chat, echo, keep } = prepare(call, inbound.stream).await?;
    let generate =
        crate::wire::gemini::request::from_chat(&chat).map_err(super::anthropic::request_error)?;
    let uri = call.uri_or_stream(Endpoint::ChatCompletions)?;
    let reserved = call.reserve_if(!inbound.stream).await?;
    let head = call
        .send(
            uri,
            generate.body,
            &HeaderMap::new(),
            super::gemini::error_body,
        )
        .await?;
    if head.is_stream(inbound.stream) {
        let to_chat = ToChatChunks::Gemini(GeminiToChat::new(true, exchange::unix_now(), None));
        return Ok(translated_stream(call, head, echo, keep, Some(to_chat)));
    }
    answered(call, head, reserved, echo, keep, |body| {
        let chat = gemini_response::to_chat(body, exchange::unix_now(), "")?;
        Ok(Cow::Owned(chat.body.to_vec()))
    })
    .await
}

/// A translated stream's map: the upstream's events (through `to_chat` to chat chunks when
/// they are not chat's own) to Responses events, the answer kept as `keep` says.
fn translated_stream(
    call: &Call<'_>,
    head: exchange::UpstreamHead,
    echo: Echo,
    keep: Option<(Keeper, Bytes)>,
    to_chat: Option<ToChatChunks>,
) -> Answer {
    let provider = Arc::clone(&call.route.provider);
    let map = Translating::new(echo, provider, keep, to_chat.map(Box::new));
    head.stream(StreamMap::Responses(Box::new(ResponsesStream::Translated(
        map,
    ))))
}

/// The client's Responses request for the built-in `mock` provider: its chat answer (whole, or
/// a whole SSE body) translated as any chat target's is, and kept when asked.
pub(crate) async fn via_mock(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let inbound = call.inbound;
    let Prepared { chat, echo, keep } = prepare(call, true).await?;
    let reply = super::mock::respond(
        Endpoint::ChatCompletions,
        &echo.model,
        &chat,
        inbound.stream,
        true,
        call.request_id.to_str().unwrap_or_default(),
    )?;
    let malformed = |m: Malformed| GatewayError::new(ErrorKind::Internal, m.0);
    let (body, response, content_type) = if inbound.stream {
        let mut from = FromChat::new(echo);
        let mut out = BytesMut::new();
        let mut rest = &reply.body[..];
        let mut complete = false;
        while let Some(len) = sse::event_end(rest) {
            if from.event(&rest[..len], &mut out) != Outcome::Continue {
                complete = true;
                break;
            }
            rest = &rest[len..];
        }
        if !complete {
            from.finish(&mut out);
        }
        let response = from
            .response()
            .map(|r| serde_json::to_vec(&r).unwrap_or_default());
        (out.freeze(), response.map(Bytes::from), "text/event-stream")
    } else {
        let answer = answer::from_chat(&reply.body, &echo).map_err(malformed)?;
        (answer.body.clone(), Some(answer.body), "application/json")
    };
    if let (Some((keeper, input)), Some(response)) = (keep, response) {
        let id = echo_id(&response);
        keeper.store.put(
            id,
            Stored {
                owner: keeper.owner,
                response,
                input,
            },
        );
    }
    Ok(Answer::Complete {
        status: StatusCode::OK,
        content_type: http::HeaderValue::from_static(content_type),
        model: None,
        body,
        usage: Some(reply.usage),
        held: crate::limit::memory_budget::Held::default(),
        waited: std::time::Duration::ZERO,
    })
}

/// The `id` of a response object's bytes.
fn echo_id(response: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_slice::<Id>(response)
        .map(|r| r.id)
        .unwrap_or_default()
}

/// Holds the whole answer of `head`, turns it into a chat completion (`to_chat`) and that into
/// the Responses answer, which is kept when asked.
async fn answered(
    call: &Call<'_>,
    head: exchange::UpstreamHead,
    reserved: Option<exchange::Reserved>,
    echo: Echo,
    keep: Option<(Keeper, Bytes)>,
    to_chat: impl FnOnce(&[u8]) -> Result<Cow<'_, [u8]>, Malformed>,
) -> Result<Answer, GatewayError> {
    let id = echo.id.clone();
    let answer = call
        .translate(head, reserved, |body| {
            let chat = to_chat(body)?;
            let answer = answer::from_chat(&chat, &echo)?;
            Ok((answer.body, answer.usage))
        })
        .await?;
    if let (Some((keeper, input)), Answer::Complete { body, .. }) = (keep, &answer) {
        keeper.store.put(
            id,
            Stored {
                owner: keeper.owner,
                response: body.clone(),
                input,
            },
        );
    }
    Ok(answer)
}

/// The fields of a Responses request that say what state it reads and keeps.
#[derive(Debug, Default, serde::Deserialize)]
struct State {
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    store: Option<bool>,
}

/// The conversation a stored response ends: its input items, then its output items.
fn conversation(stored: &Stored) -> Vec<serde_json::Value> {
    let mut items: Vec<serde_json::Value> =
        serde_json::from_slice(&stored.input).unwrap_or_default();
    let response: serde_json::Value = serde_json::from_slice(&stored.response).unwrap_or_default();
    if let Some(serde_json::Value::Array(output)) = response.get("output") {
        items.extend(output.iter().cloned());
    }
    items
}

/// A request's `input` as the input items the API lists: a string is one user message; each
/// item gets an id if it has none.
fn input_items(input: Option<&serde_json::Value>) -> Vec<serde_json::Value> {
    use serde_json::{Value, json};
    match input {
        Some(Value::String(text)) => vec![json!({
            "type": "message",
            "id": new_id("msg_"),
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let mut item = item.clone();
                if let Some(object) = item.as_object_mut() {
                    let prefix = match object.get("type").and_then(Value::as_str) {
                        Some("function_call") => "fc_",
                        Some("function_call_output") => "fco_",
                        Some("reasoning") => "rs_",
                        _ => {
                            object.entry("type").or_insert_with(|| json!("message"));
                            "msg_"
                        }
                    };
                    object
                        .entry("id")
                        .or_insert_with(|| Value::String(new_id(prefix)));
                }
                item
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A Responses request a chat target cannot take: the client's to mend (400).
fn request_error(error: RequestError) -> GatewayError {
    match error {
        RequestError::InvalidJson(message) => GatewayError::new(ErrorKind::InvalidJson, message),
        RequestError::Invalid(message, param) => {
            GatewayError::new(ErrorKind::InvalidRequest, message).with_param(param)
        }
    }
}

/// A Responses client's stream: relayed from a key that serves the API, or translated from
/// chat chunks.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "boxed once as a whole in the stream map; one allocation per stream either way"
)]
pub(crate) enum ResponsesStream {
    Relay(Relay),
    Translated(Translating),
}

impl ResponsesStream {
    /// Whether its upstream is Bedrock's binary event stream.
    pub(super) fn event_stream_framed(&self) -> bool {
        matches!(self, ResponsesStream::Translated(map)
            if matches!(map.upstream.as_deref(), Some(ToChatChunks::Bedrock(_))))
    }

    pub(super) fn event(&mut self, raw: &[u8]) -> Mapped {
        match self {
            ResponsesStream::Relay(map) => map.event(raw),
            ResponsesStream::Translated(map) => map.event(raw),
        }
    }

    pub(super) fn started(&self) -> bool {
        match self {
            ResponsesStream::Relay(map) => map.started(),
            ResponsesStream::Translated(map) => map.from.started(),
        }
    }

    pub(super) fn carried(&self) -> Carried {
        match self {
            ResponsesStream::Relay(map) => map.carried(),
            ResponsesStream::Translated(map) => Carried::after(None, map.usage, map.from.pieces()),
        }
    }

    /// The body ended without its end marker: a relayed stream is complete only with its
    /// ending event; a translated one when its chat answer finished.
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        match self {
            ResponsesStream::Relay(_) => None,
            ResponsesStream::Translated(map) => map.finish().then(|| map.out.split().freeze()),
        }
    }

    pub(super) fn closing(&self, error: &GatewayError) -> Bytes {
        match self {
            ResponsesStream::Relay(map) => map.closing(error),
            ResponsesStream::Translated(map) => map.closing(error),
        }
    }
}

/// What turns another dialect's stream into chat chunks on the way to Responses events.
#[derive(Debug)]
pub(crate) enum ToChatChunks {
    Anthropic(ToOpenAi),
    Gemini(GeminiToChat),
    /// Bedrock's event-stream messages (through Anthropic's events).
    Bedrock(BedrockToChat),
}

/// Chat chunks translated into a Responses stream.
#[derive(Debug)]
pub(crate) struct Translating {
    from: FromChat,
    /// The translator's output for the event at hand.
    out: BytesMut,
    /// What the upstream said of the error it reported.
    reported: Option<sse::ErrorReport>,
    provider: Arc<Provider>,
    usage: Option<Usage>,
    /// Where the finished response is kept, with its input, unless `store: false`.
    keep: Option<(Keeper, Bytes)>,
    /// An Anthropic or Gemini stream's translator to chat chunks, which then become
    /// Responses events.
    upstream: Option<Box<ToChatChunks>>,
    /// The chat chunks of the event at hand.
    chat: BytesMut,
}

impl Translating {
    pub(crate) fn new(
        echo: Echo,
        provider: Arc<Provider>,
        keep: Option<(Keeper, Bytes)>,
        upstream: Option<Box<ToChatChunks>>,
    ) -> Self {
        Self {
            from: FromChat::new(echo),
            out: BytesMut::new(),
            reported: None,
            provider,
            usage: None,
            keep,
            upstream,
            chat: BytesMut::new(),
        }
    }

    /// Reads one upstream event: a chat chunk, or an Anthropic or Gemini event through its
    /// chat chunks.
    fn read(&mut self, raw: &[u8]) -> Outcome {
        let Some(to_chat) = self.upstream.as_mut() else {
            let outcome = self.from.event(raw, &mut self.out);
            if outcome == Outcome::UpstreamError {
                self.reported = sse::reported(raw);
            }
            return outcome;
        };
        let step = match to_chat.as_mut() {
            ToChatChunks::Anthropic(to_chat) => to_chat.event(raw, &mut self.chat),
            ToChatChunks::Gemini(to_chat) => to_chat.event(raw, &mut self.chat),
            ToChatChunks::Bedrock(to_chat) => to_chat.event(raw, &mut self.chat),
        };
        if step == anthropic_stream::Step::UpstreamError {
            self.reported = match to_chat.as_ref() {
                ToChatChunks::Bedrock(to_chat) => to_chat.reported(),
                _ => sse::reported(raw),
            };
        }
        let outcome = self.feed_chat();
        match (step, outcome) {
            (anthropic_stream::Step::Malformed, _) => Outcome::Malformed,
            (anthropic_stream::Step::UpstreamError, Outcome::Continue) => Outcome::UpstreamError,
            (_, outcome) => outcome,
        }
    }

    /// Feeds the chat chunks an upstream event became to the Responses translator.
    fn feed_chat(&mut self) -> Outcome {
        let chat = self.chat.split();
        let mut at = 0;
        while let Some(len) = sse::event_end(&chat[at..]) {
            let event = &chat[at..at + len];
            at += len;
            let outcome = self.from.event(event, &mut self.out);
            if outcome == Outcome::UpstreamError {
                self.reported = sse::reported(event);
            }
            if outcome != Outcome::Continue {
                return outcome;
            }
        }
        Outcome::Continue
    }

    /// The upstream body ended: whether the answer was whole (its last events written).
    fn finish(&mut self) -> bool {
        // A Gemini stream completes with its last event; Anthropic's may end here, and
        // Bedrock's after its stop but before its usage.
        match self.upstream.as_deref_mut() {
            Some(ToChatChunks::Anthropic(to_chat)) => {
                to_chat.end(&mut self.chat);
                self.feed_chat();
            }
            Some(ToChatChunks::Bedrock(to_chat)) => {
                to_chat.finish(&mut self.chat);
                self.feed_chat();
            }
            _ => {}
        }
        let finished = self.from.finish(&mut self.out);
        self.keep();
        finished
    }

    /// Keeps the finished response, once.
    fn keep(&mut self) {
        let (Some(response), Some((keeper, input))) = (self.from.response(), self.keep.take())
        else {
            return;
        };
        let id = response
            .get("id")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let response = serde_json::to_vec(&response).unwrap_or_default();
        keeper.store.put(
            id,
            Stored {
                owner: keeper.owner,
                response: Bytes::from(response),
                input,
            },
        );
    }

    fn event(&mut self, raw: &[u8]) -> Mapped {
        let outcome = self.read(raw);
        let mut step = Mapped::default();
        let usage = self.from.usage().map(|u| u.to_usage());
        if usage.is_some() && usage != self.usage {
            self.usage = usage;
            step.usage = usage;
        }
        step.edit = if self.out.is_empty() {
            Edit::Drop
        } else {
            Edit::Replace(self.out.split().freeze())
        };
        match outcome {
            Outcome::Continue => {}
            Outcome::Complete => {
                step.done = true;
                self.keep();
            }
            Outcome::UpstreamError => {
                step.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
            }
            Outcome::Malformed => step.failure = Some(ErrorKind::UpstreamMalformed),
        }
        step
    }

    fn closing(&self, error: &GatewayError) -> Bytes {
        let reported = self
            .reported
            .as_ref()
            .map(|r| (r.code.as_deref(), r.message.as_deref()));
        let (code, message) = failure_words(reported, &self.provider, error);
        self.from.failed(code, &message)
    }
}

/// A Responses stream relayed to its client as it came. Per event: its fields split and its
/// type looked up by name; only `response.created` (the response's identity, for a failure
/// written later) and the event that ends the stream (its usage) are parsed, and, for a
/// group, the events that carry the whole response get their `model` renamed.
#[derive(Debug)]
pub(crate) struct Relay {
    /// The direct model's name as a JSON string (a group's answers name it).
    rename: Option<Bytes>,
    /// The provider called: its key is masked in a failure it reports.
    provider: Arc<Provider>,
    /// Events with data relayed: the next `sequence_number`.
    sequence: u64,
    who: Identity,
    /// Output has come (the first token).
    started: bool,
    /// Output events relayed: about a token each.
    pieces: u64,
    usage: Option<Usage>,
    /// What ends a failed stream: the upstream's own `response.failed` (key masked), or its
    /// `error` event's words.
    failed: Option<Bytes>,
    reported: Option<Reported>,
    /// Pins the response's id to the provider key once `response.created` names it.
    pin: Option<Pin>,
}

impl Relay {
    pub(crate) fn new(rename: Option<Bytes>, provider: Arc<Provider>) -> Self {
        Self {
            rename,
            provider,
            sequence: 0,
            who: Identity::default(),
            started: false,
            pieces: 0,
            usage: None,
            failed: None,
            reported: None,
            pin: None,
        }
    }

    pub(super) fn event(&mut self, raw: &[u8]) -> Mapped {
        let fields = sse::fields(raw);
        let Some(data) = fields.data.as_deref() else {
            // Comments pass as they are.
            return Mapped::default();
        };
        self.sequence += 1;
        if !chunk::is_object(data) {
            return failure(ErrorKind::UpstreamMalformed);
        }
        let kind = event::event_type(&fields).map_or(Kind::Other, event::kind_of);
        let mut step = Mapped::default();
        match kind {
            Kind::Created => {
                self.who = event::identity(data).unwrap_or_default();
                if let Some(pin) = self.pin.take() {
                    pin.keeper.pin(&self.who.id, &pin.provider);
                }
                step.edit = self.renamed(raw);
            }
            Kind::Output => {
                self.started = true;
                self.pieces += 1;
            }
            Kind::Ending(_) => {
                self.usage = event::response_usage(data).map(|u| u.to_usage());
                step.usage = self.usage;
                step.done = true;
                step.edit = self.renamed(raw);
            }
            Kind::Failed => {
                self.usage = event::response_usage(data).map(|u| u.to_usage());
                step.usage = self.usage;
                let text = String::from_utf8_lossy(raw);
                let masked = match self.provider.mask_text(&text) {
                    Cow::Borrowed(_) => Bytes::copy_from_slice(raw),
                    Cow::Owned(masked) => Bytes::from(masked),
                };
                self.failed = Some(masked);
                step.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
            }
            Kind::Error => {
                self.reported = Some(event::reported(data));
                step.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
            }
            Kind::Other => {}
        }
        step
    }

    /// `raw` with the response's `model` renamed, for a group.
    fn renamed(&self, raw: &[u8]) -> Edit {
        match self
            .rename
            .as_ref()
            .and_then(|name| chunk::with_model(raw, name))
        {
            Some(renamed) => Edit::Replace(Bytes::from(renamed)),
            None => Edit::Keep,
        }
    }

    pub(super) fn started(&self) -> bool {
        self.started
    }

    pub(super) fn carried(&self) -> Carried {
        Carried::after(None, self.usage, self.pieces)
    }

    /// The last event of a stream that failed with `error` after it started: the upstream's
    /// own `response.failed`, else one the gateway writes with the upstream's words (its key
    /// masked) or its own.
    pub(super) fn closing(&self, error: &GatewayError) -> Bytes {
        if let Some(failed) = &self.failed {
            return failed.clone();
        }
        let reported = self
            .reported
            .as_ref()
            .map(|r| (r.code.as_deref(), r.message.as_deref()));
        let (code, message) = failure_words(reported, &self.provider, error);
        failed_event(self.sequence, &self.who, code, &message)
    }
}

/// The code and message a Responses stream that failed after it started ends with: the
/// upstream's own words when it reported any, else the gateway's; every value the gateway
/// added upstream (the key, each static header) masked.
fn failure_words<'a>(
    reported: Option<(Option<&'a str>, Option<&'a str>)>,
    provider: &Provider,
    error: &'a GatewayError,
) -> (&'a str, String) {
    let (code, message) = match reported {
        Some((code, message)) => (
            code.unwrap_or("server_error"),
            message.unwrap_or("The upstream reported an error in the stream."),
        ),
        None => ("server_error", error.message.as_str()),
    };
    (code, provider.mask_text(message).into_owned())
}

fn failure(kind: ErrorKind) -> Mapped {
    Mapped {
        failure: Some(kind),
        ..Mapped::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provider key of an `openai` model whose key is `sk-responses-secret`.
    fn provider() -> Arc<Provider> {
        crate::testing::provider("sk-responses-secret")
    }

    const CREATED: &[u8] = b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":5,\"status\":\"in_progress\",\"model\":\"gpt-up\",\"output\":[]}}\n\n";
    const DELTA: &[u8] = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n";
    const COMPLETED: &[u8] = b"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-up\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":1},\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":6}}}\n\n";

    #[test]
    fn a_relayed_stream_starts_at_its_first_delta_and_ends_with_completed_and_its_usage() {
        let mut map = Relay::new(None, provider());
        assert!(matches!(map.event(CREATED).edit, Edit::Keep));
        assert!(!map.started());
        assert!(matches!(map.event(b": keep-alive\n\n").edit, Edit::Keep));
        map.event(DELTA);
        assert!(map.started());
        let end = map.event(COMPLETED);
        assert!(end.done && end.failure.is_none());
        assert_eq!(
            end.usage,
            Some(Usage {
                prompt_tokens: 4,
                completion_tokens: 2,
                total_tokens: 6
            })
        );
    }

    #[test]
    fn a_group_renames_the_events_that_carry_the_response() {
        let mut map = Relay::new(Some(json_string("primary")), provider());
        let Edit::Replace(created) = map.event(CREATED).edit else {
            panic!("not renamed")
        };
        assert!(memchr::memmem::find(&created, b"\"model\":\"primary\"").is_some());
        assert!(matches!(map.event(DELTA).edit, Edit::Keep));
        assert!(matches!(map.event(COMPLETED).edit, Edit::Replace(_)));
    }

    #[test]
    fn a_stream_broken_after_it_started_ends_with_response_failed_numbered_next() {
        let mut map = Relay::new(None, provider());
        map.event(CREATED);
        map.event(DELTA);
        let error = GatewayError::new(ErrorKind::StreamCut, "The upstream stream ended early.");
        let closing = map.closing(&error);
        let text = std::str::from_utf8(&closing).unwrap();
        assert!(text.starts_with("event: response.failed\ndata: "), "{text}");
        let data: serde_json::Value =
            serde_json::from_str(text["event: response.failed\ndata: ".len()..].trim()).unwrap();
        assert_eq!(data["sequence_number"], 2);
        assert_eq!(data["response"]["id"], "resp_1");
        assert_eq!(data["response"]["model"], "gpt-up");
        assert_eq!(data["response"]["status"], "failed");
        assert_eq!(
            data["response"]["error"]["message"],
            "The upstream stream ended early."
        );
    }

    #[test]
    fn an_upstream_failure_keeps_its_own_words_with_the_provider_key_masked() {
        let mut map = Relay::new(None, provider());
        map.event(CREATED);
        let error = map.event(b"event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"key sk-responses-secret is over its limit\",\"param\":null,\"sequence_number\":1}\n\n");
        assert_eq!(
            error.failure,
            Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY))
        );
        let closing = map.closing(&GatewayError::new(ErrorKind::StreamCut, "x"));
        let text = std::str::from_utf8(&closing).unwrap();
        assert!(text.contains("\"code\":\"rate_limit_exceeded\""), "{text}");
        assert!(text.contains("key *** is over"), "{text}");
        assert!(!text.contains("sk-responses-secret"));

        let mut map = Relay::new(None, provider());
        let failed = b"event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_2\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"bad key sk-responses-secret\"}}}\n\n";
        assert!(map.event(failed).failure.is_some());
        let closing = map.closing(&GatewayError::new(ErrorKind::StreamCut, "x"));
        let text = std::str::from_utf8(&closing).unwrap();
        assert!(
            text.contains("\"id\":\"resp_2\"") && text.contains("bad key ***"),
            "{text}"
        );
    }

    #[test]
    fn an_event_that_is_not_a_json_object_is_malformed() {
        let mut map = Relay::new(None, provider());
        let step = map.event(b"event: response.output_text.delta\ndata: {\"type\":\n\n");
        assert_eq!(step.failure, Some(ErrorKind::UpstreamMalformed));
    }
}
