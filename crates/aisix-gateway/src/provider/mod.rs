//! Providers: how one attempt reaches a direct model and comes back in the client's dialect.
//! This is the adapter seam, and the attempt loop sees nothing else of a provider:
//!
//! - [`call`] picks the adapter by the direct model's provider kind. The adapter builds the
//!   upstream request from the client's [`Inbound`] (translating it when the provider speaks
//!   another dialect), sends it through [`exchange`] within the attempt's deadlines, and turns
//!   every failure into a [`GatewayError`] whose kind says whether another try may help (an
//!   error status's body becomes the provider's error object in the client's dialect).
//! - A whole answer the gateway must hold (a translation, the in-process mock) comes back as
//!   [`Answer::Complete`]: the body already in the client's dialect, with its usage and (for
//!   groups) its `model` naming the direct model. One in the client's dialect comes back as
//!   [`Answer::Unary`], its head only: the relay's whole-answer body passes the rest on.
//! - A stream comes back as [`Answer::Stream`]: the upstream body with the [`StreamMap`] that
//!   turns each upstream event into the client's (usage read, completeness and the first
//!   token noticed, the model renamed). The relay drives it; the attempt loop holds it until
//!   its first token when another attempt could still follow; [`events`] reads it event by
//!   event into the client's dialect.
//!
//! A new provider (another dialect) is a module with its `call`, an arm in [`call`], and, for
//! streams, a [`StreamMap`] variant; the attempt loop and the relay do not change.

pub(crate) mod anthropic;
pub(crate) mod bedrock;
pub(crate) mod events;
pub(crate) mod exchange;
pub(crate) mod gemini;
pub(crate) mod mock;
pub(crate) mod native_state;
pub(crate) mod openai;
pub(crate) mod responses;
#[cfg(test)]
pub(crate) mod scripted;
pub(crate) mod translated;
pub(crate) mod vertex;

use std::time::Duration;

use aisix_config::ProviderKind;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::limit::memory_budget::{Held, MemoryBudget};
use crate::request::deadline::Deadlines;
use crate::request::inbound::Inbound;
use crate::snapshot::{DirectRoute, GroupRoute};
use crate::target::state::Ticket;
use crate::upstream::pool::{Lease, Pool};
use crate::wire::Dialect;
use crate::wire::anthropic::stream::Blocks;
use crate::wire::usage::Usage;

/// What one attempt needs to reach a direct model.
pub(crate) struct Call<'a> {
    pub pool: &'a Pool,
    pub route: &'a DirectRoute,
    pub inbound: &'a Inbound,
    pub deadlines: &'a Deadlines,
    pub request_id: &'a HeaderValue,
    /// The attempt's trace context, when OpenTelemetry export is on.
    pub context: Option<&'a crate::otel::Outgoing>,
    /// Answers name the direct model in `model` (the client named a group), or the group
    /// when `hidden_by` is set: see [`Call::shown_name`].
    pub rename: bool,
    /// The group whose name the answer carries instead of the direct model's: the client's
    /// key may not call this direct model itself, so its name is not shown.
    pub hidden_by: Option<&'a GroupRoute>,
    /// The largest whole answer held to translate (`upstream.max_response_bytes`).
    pub max_response_bytes: usize,
    /// The request's memory budget, where a whole answer held to translate reserves room.
    pub budget: &'a MemoryBudget,
    /// When the request stops waiting for room in `budget` (its body deadline).
    pub room_by: tokio::time::Instant,
}

/// A direct model's whole answer whose head has arrived, its body still upstream.
pub(crate) struct Unary {
    pub status: StatusCode,
    pub content_type: HeaderValue,
    pub body: Incoming,
    pub lease: Option<Lease>,
    /// The direct model's name as a JSON string, put in the answer's `model` (groups).
    pub rename: Option<Bytes>,
    /// The shape of the answer's `usage` object (`None`: it reports none).
    pub usage: Option<Dialect>,
    /// The whole request's deadline.
    pub end: Instant,
    /// Counts the call in its direct model's load while the body is relayed, and reports how
    /// the body ended to the model's state.
    pub ticket: Option<Ticket>,
    /// A native Responses answer: its id is pinned to the provider key when the body has passed.
    pub pin: Option<crate::stored::Pin>,
}

/// A direct model's answer, in the client's dialect.
pub(crate) enum Answer {
    Complete {
        status: StatusCode,
        content_type: HeaderValue,
        body: Bytes,
        usage: Option<Usage>,
        /// The model the answer names, as the upstream sent it (read only for a traced
        /// request: its `gen_ai.response.model`).
        model: Option<String>,
        /// The upstream answer's charge against the worker's memory budget, held until the
        /// answer is handed on.
        held: Held,
        /// From sending until the whole body was in.
        waited: Duration,
    },
    /// A whole answer in the client's dialect, its body still upstream.
    Unary {
        answer: Unary,
        /// From sending until the response head arrived.
        waited: Duration,
    },
    Stream {
        status: StatusCode,
        body: Incoming,
        lease: Option<Lease>,
        map: StreamMap,
    },
}

/// Calls the direct model of `call` with its provider's adapter.
pub(crate) async fn call(call: Call<'_>) -> Result<Answer, GatewayError> {
    #[cfg(test)]
    if let Some(answer) = scripted::answer(&call).await {
        return answer;
    }
    match call.route.provider.kind {
        ProviderKind::Mock if call.inbound.endpoint == Endpoint::Responses => {
            responses::via_mock(&call).await
        }
        ProviderKind::Mock => mock::call(&call),
        ProviderKind::OpenAi | ProviderKind::AzureOpenAi => openai::call(&call).await,
        ProviderKind::Anthropic => anthropic::call(&call).await,
        ProviderKind::Gemini => gemini::call(&call).await,
        ProviderKind::Vertex => vertex::call(&call).await,
        ProviderKind::Bedrock => bedrock::call(&call).await,
    }
}

/// How one upstream stream's events become the client's: the per-event half of an adapter.
#[derive(Debug)]
pub(crate) enum StreamMap {
    /// OpenAI events to an OpenAI client, relayed as they are.
    OpenAi(openai::Passthrough),
    /// Anthropic events relayed to an Anthropic client, or either dialect translated.
    Translated(Box<translated::TranslatedStream>),
    /// Responses events relayed to a Responses client, or chat chunks translated for one.
    Responses(Box<responses::ResponsesStream>),
    /// Gemini events translated for either client.
    Gemini(Box<gemini::GeminiStream>),
    /// Bedrock's event-stream messages translated for either client.
    Bedrock(Box<bedrock::BedrockStream>),
}

/// What the client gets for one upstream event.
#[derive(Debug, Default)]
pub(crate) struct Mapped {
    pub edit: Edit,
    /// The event ends the stream (`data: [DONE]`).
    pub done: bool,
    /// The usage the event reports (for the request's record).
    pub usage: Option<Usage>,
    /// The event shows the stream has failed (an error event, a malformed chunk).
    pub failure: Option<ErrorKind>,
    /// What the upstream said of the error it reported, when the map read it itself (a
    /// stream that is not SSE); else the relay reads it from the event.
    pub reported: Option<Box<crate::wire::sse::ErrorReport>>,
}

/// What becomes of an event.
#[derive(Debug, Default)]
pub(crate) enum Edit {
    /// Relayed as it came (no copy).
    #[default]
    Keep,
    Drop,
    /// Relayed as these bytes instead.
    Replace(Bytes),
}

impl StreamMap {
    /// Reads one complete event; `line`: its only line, when it has one (found as it was
    /// split, so that relaying OpenAI's events as they are need not look for its lines again).
    pub(crate) fn event(&mut self, event: &[u8], line: Option<&[u8]>) -> Mapped {
        match self {
            StreamMap::OpenAi(map) => map.event(event, line),
            StreamMap::Translated(map) => map.event(event),
            StreamMap::Responses(map) => map.event(event),
            StreamMap::Gemini(map) => map.event(event),
            StreamMap::Bedrock(map) => map.event(event),
        }
    }

    /// The dialect the client gets the stream in.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            StreamMap::OpenAi(_) => Dialect::OpenAi,
            StreamMap::Translated(map) => map.dialect(),
            StreamMap::Responses(_) => Dialect::Responses,
            StreamMap::Gemini(map) => map.dialect(),
            StreamMap::Bedrock(map) => map.dialect(),
        }
    }

    /// The stream has carried content (its first token), so it can no longer be replaced by
    /// another attempt's.
    pub(crate) fn started(&self) -> bool {
        match self {
            StreamMap::OpenAi(map) => map.started(),
            StreamMap::Translated(map) => map.started(),
            StreamMap::Responses(map) => map.started(),
            StreamMap::Gemini(map) => map.started(),
            StreamMap::Bedrock(map) => map.started(),
        }
    }

    /// The upstream body ended without its end marker: what ends the client's stream when it
    /// is complete anyway (every choice finished, or the stop reason came), `None` when it was
    /// cut.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        match self {
            StreamMap::OpenAi(map) => map
                .complete()
                .then(|| Bytes::from_static(b"data: [DONE]\n\n")),
            StreamMap::Translated(map) => map.finish(),
            StreamMap::Responses(map) => map.finish(),
            // Its last event completes it: a body that ends before that was cut.
            StreamMap::Gemini(_) => None,
            StreamMap::Bedrock(map) => map.finish(),
        }
    }

    /// Whether the upstream's events come in AWS's binary event-stream framing (Bedrock)
    /// rather than as server-sent events.
    pub(crate) fn event_stream_framed(&self) -> bool {
        match self {
            StreamMap::Bedrock(_) => true,
            StreamMap::Responses(map) => map.event_stream_framed(),
            _ => false,
        }
    }

    /// The text sent so far, when the map keeps it (for a continuation).
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            StreamMap::OpenAi(map) => map.text(),
            StreamMap::Translated(map) => map.text(),
            StreamMap::Responses(_) | StreamMap::Gemini(_) | StreamMap::Bedrock(_) => None,
        }
    }

    /// A tool call has begun since the text was kept: the stream is never continued (the
    /// text alone would rebuild a corrupted call).
    pub(crate) fn in_tool_call(&self) -> bool {
        match self {
            StreamMap::OpenAi(map) => map.in_tool_call(),
            StreamMap::Translated(map) => map.in_tool_call(),
            // Cut Responses, Gemini and Bedrock streams are not continued.
            StreamMap::Responses(_) | StreamMap::Gemini(_) | StreamMap::Bedrock(_) => true,
        }
    }

    /// Keeps the text sent from here on, after `so_far`, for a continuation.
    pub(crate) fn keep_text(&mut self, so_far: &str) {
        match self {
            StreamMap::OpenAi(map) => map.keep_text(so_far),
            StreamMap::Translated(map) => map.keep_text(so_far),
            // Cut Responses, Gemini and Bedrock streams are not continued: nothing to keep.
            StreamMap::Responses(_) | StreamMap::Gemini(_) | StreamMap::Bedrock(_) => {}
        }
    }

    /// Where an Anthropic client's stream stands (for a continuation to go on from); an
    /// OpenAI client's has no blocks.
    pub(crate) fn blocks(&self) -> Blocks {
        match self {
            StreamMap::OpenAi(_) | StreamMap::Responses(_) => Blocks::default(),
            StreamMap::Translated(map) => map.blocks(),
            StreamMap::Gemini(map) => map.blocks(),
            StreamMap::Bedrock(map) => map.blocks(),
        }
    }

    /// What the stream consumed so far, to carry into a continuation.
    pub(crate) fn carried(&self) -> Carried {
        match self {
            StreamMap::OpenAi(map) => map.carried(),
            StreamMap::Translated(map) => map.carried(),
            StreamMap::Responses(map) => map.carried(),
            StreamMap::Gemini(map) => map.carried(),
            StreamMap::Bedrock(map) => map.carried(),
        }
    }

    /// Output tokens produced so far: the usage's when the stream reported one, else one per
    /// content chunk (models stream about one token per chunk).
    pub(crate) fn produced(&self) -> u64 {
        let carried = self.carried();
        carried
            .usage
            .map_or(carried.pieces, |usage| usage.completion_tokens)
    }

    /// This stream continues another one, which consumed `before` and left an Anthropic
    /// client's stream at `at`: its preamble is not sent again, and its usage is added.
    pub(crate) fn continuing(&mut self, before: Carried, at: Blocks) {
        match self {
            StreamMap::OpenAi(map) => map.continuing(before),
            StreamMap::Translated(map) => map.continuing(before, at),
            StreamMap::Responses(_) | StreamMap::Gemini(_) | StreamMap::Bedrock(_) => {}
        }
    }

    /// The last event of a stream that failed with `error` after it started: the error event
    /// of `dialect`, or for a Responses stream its `response.failed`.
    pub(crate) fn closing(&self, error: &GatewayError, dialect: Dialect) -> Bytes {
        match self {
            StreamMap::Responses(map) => map.closing(error),
            _ => error.to_event(dialect),
        }
    }
}

/// Whether an upstream event (either dialect) carries part of a tool call: OpenAI's
/// `tool_calls` deltas, Anthropic's `tool_use` blocks and `input_json_delta`s. A byte scan,
/// run only while a stream's text is kept for a continuation.
fn carries_tool_call(event: &[u8]) -> bool {
    const MARKS: [&[u8]; 3] = [b"\"tool_calls\"", b"\"tool_use\"", b"\"input_json_delta\""];
    MARKS
        .iter()
        .any(|mark| event.windows(mark.len()).any(|w| w == *mark))
}

/// What a stream cut short consumed, carried into its continuation's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Carried {
    /// The usage it reported, if any (servers with continuous usage report it per chunk).
    pub usage: Option<Usage>,
    /// Its content chunks: its completion tokens when it reported none.
    pub pieces: u64,
}

impl Carried {
    /// What a stream that continues `before` (if it does) consumed: its reported usage
    /// `total` (with `before`'s added), else `before`'s and its own `pieces`.
    pub(crate) fn after(before: Option<Carried>, total: Option<Usage>, pieces: u64) -> Carried {
        match (total, before) {
            (Some(total), _) => Carried {
                usage: Some(total),
                pieces: 0,
            },
            (None, None) => Carried {
                usage: None,
                pieces,
            },
            (None, Some(before)) => Carried {
                usage: before.usage.map(|u| {
                    u.plus(Usage {
                        prompt_tokens: 0,
                        completion_tokens: pieces,
                        total_tokens: pieces,
                    })
                }),
                pieces: before.pieces.saturating_add(pieces),
            },
        }
    }

    /// The cut stream's usage and `next`'s (its continuation's) together. A cut stream that
    /// reported none is counted as `pieces` completion tokens and, since the continuation's
    /// prompt is the original prompt plus the text already sent, that prompt less `pieces`.
    pub(crate) fn plus(self, next: Usage) -> Usage {
        let before = self.usage.unwrap_or_else(|| {
            let prompt = next.prompt_tokens.saturating_sub(self.pieces);
            Usage {
                prompt_tokens: prompt,
                completion_tokens: self.pieces,
                total_tokens: prompt.saturating_add(self.pieces),
            }
        });
        before.plus(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_with_huge_counts_saturates_instead_of_overflowing() {
        let huge = Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: u64::MAX,
            total_tokens: u64::MAX,
        };
        let cut_without_usage = Carried {
            usage: None,
            pieces: u64::MAX,
        };
        let summed = cut_without_usage.plus(huge);
        assert_eq!(summed.completion_tokens, u64::MAX);
        assert_eq!(summed.total_tokens, u64::MAX);
        let before = Carried::after(Some(cut_without_usage), None, u64::MAX);
        assert_eq!(before.pieces, u64::MAX);
        assert_eq!(
            Carried::after(
                Some(Carried {
                    usage: Some(huge),
                    pieces: 1,
                }),
                None,
                u64::MAX,
            )
            .usage,
            Some(huge)
        );
    }
}
