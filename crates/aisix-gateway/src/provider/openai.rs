//! The OpenAI-compatible adapter (`openai`, `azure_openai`): builds the upstream request from
//! scratch (only the gateway's own headers and the provider key travel; nothing of the
//! client's), relays whole answers and streams to OpenAI clients without re-serializing them,
//! and passes a provider's 4xx error object through with its credential scrubbed. An Anthropic
//! client's `/v1/messages` (and `count_tokens`) is translated to chat completions, and the
//! answer, stream or error back to Anthropic's shape.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use super::translated::TranslatedStream;
use super::{Answer, Call, Carried, Edit, Mapped, StreamMap};
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::wire::anthropic::{error as anthropic_error, request, response};
use crate::wire::sse::{self, Event};
use crate::wire::usage::{self, Usage};
use crate::wire::{Dialect, chunk};

/// Sends the client's request to the direct model and waits for the head by the first-byte
/// deadline; a stream's body or a whole answer in the client's dialect is relayed as it comes.
/// An Anthropic client's request is translated to chat completions, and the answer back (a
/// translated whole answer is held, up to `upstream.max_response_bytes`).
pub(crate) async fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    if call.inbound.endpoint == Endpoint::Responses {
        return Box::pin(super::responses::call(call)).await;
    }
    let (route, inbound) = (call.route, call.inbound);
    let provider = call.provider();
    let translated = inbound.dialect == Dialect::Anthropic;
    let endpoint = if translated {
        Endpoint::ChatCompletions
    } else {
        inbound.endpoint
    };
    let uri = call.uri(endpoint)?;
    let body = match inbound.endpoint {
        Endpoint::Messages => {
            request::to_openai(
                &inbound.body,
                &route.upstream_model,
                route.output_tokens_field,
            )
            .map_err(super::anthropic::request_error)?
            .body
        }
        Endpoint::CountTokens => request::count_tokens_to_openai(
            &inbound.body,
            &route.upstream_model,
            route.output_tokens_field,
        )
        .map_err(super::anthropic::request_error)?,
        _ => inbound.inspected.rewrite(
            &inbound.body,
            route.upstream_model_json.as_deref(),
            inbound.stream && provider.stream_usage,
        ),
    };
    // A whole answer translated is held: its room is found before the provider bills it.
    let reserved = call.reserve_if(translated && !inbound.stream).await?;
    let head = call.send(uri, body, &HeaderMap::new(), error_body).await?;
    if head.is_stream(inbound.stream) {
        let map = if translated {
            StreamMap::Translated(Box::new(TranslatedStream::to_anthropic(
                call.rename.then(|| call.shown_name()),
            )))
        } else {
            StreamMap::OpenAi(Passthrough::new(
                !inbound.client_wants_usage(),
                call.rename.then(|| call.shown_json().clone()),
                inbound.inspected.choices,
            ))
        };
        return Ok(head.stream(map));
    }
    if !translated {
        return Ok(call.unary(head, call.rename, Some(Dialect::OpenAi)));
    }
    call.translate(head, reserved, |body| match inbound.endpoint {
        // The chat call that counted the prompt was billed for it: its usage is the charge.
        Endpoint::CountTokens => Ok((
            response::count_tokens_from_openai(body)?,
            crate::wire::usage::from_response(body),
        )),
        _ => {
            let answer = response::to_anthropic(body)?;
            Ok((answer.body, Some(answer.usage.to_usage())))
        }
    })
    .await
}

/// The provider's own `{"error": ...}` object (its key scrubbed), carried over to Anthropic's
/// envelope for an Anthropic client.
pub(super) fn error_body(
    status: u16,
    body: &[u8],
    secret: Option<&str>,
    client: Dialect,
) -> Option<Bytes> {
    match client {
        Dialect::OpenAi | Dialect::Responses => openai_error_body(body, secret),
        Dialect::Anthropic => anthropic_error::upstream_to_anthropic(status, body, secret),
    }
}

/// The provider's `{"error": {...}}` body if it is one, with the provider key scrubbed.
fn openai_error_body(body: &[u8], secret: Option<&str>) -> Option<Bytes> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if !value.get("error").is_some_and(serde_json::Value::is_object) {
        return None;
    }
    let text = value.to_string();
    Some(Bytes::from(match secret {
        Some(key) => text.replace(key, "***"),
        None => text,
    }))
}

/// OpenAI events relayed to an OpenAI client as they are. Per event after the first token: a
/// scan for the data line, `[DONE]` and usage (as before), two byte checks for a malformed
/// payload and a scan for a finish; a chunk is parsed only until its first token, when it
/// finishes a choice, or while the text is kept for a continuation.
#[derive(Debug)]
pub(crate) struct Passthrough {
    /// The client did not ask for the usage-only chunk: it is dropped.
    strip_usage_chunk: bool,
    /// The direct model's name as a JSON string, put in each chunk's `model` (groups).
    rename: Option<Bytes>,
    /// Choices the answer has (`n`).
    choices: u32,
    /// Choices finished so far, one bit each (OpenAI allows at most 128).
    finished: u128,
    /// Content has come (the first token).
    started: bool,
    /// The text of choice 0 so far, kept when the stream may have to be continued.
    text: Option<String>,
    /// A tool call has begun: the answer is no longer text that a continuation could go on
    /// from (watched only while the text is kept).
    tool_call: bool,
    /// Content chunks relayed (one token each, as OpenAI streams them): what a stream that
    /// ends without usage is charged for its output.
    pieces: u64,
    /// This stream continues another: what that one consumed is added to what this reports.
    before: Option<Carried>,
    /// The usage reported so far, `before`'s added.
    total: Option<Usage>,
}

impl Passthrough {
    pub(crate) fn new(strip_usage_chunk: bool, rename: Option<Bytes>, choices: u32) -> Self {
        Self {
            strip_usage_chunk,
            rename,
            choices,
            finished: 0,
            started: false,
            text: None,
            tool_call: false,
            pieces: 0,
            before: None,
            total: None,
        }
    }

    /// Keeps the text of choice 0 from here on, after `so_far`.
    pub(crate) fn keep_text(&mut self, so_far: &str) {
        self.text = Some(so_far.to_owned());
    }

    /// One event; `line`, its only line when it has one ([`sse::only_line`]).
    pub(super) fn event(&mut self, event: &[u8], line: Option<&[u8]>) -> Mapped {
        let (error, data) = match line {
            Some(line) => sse::line_error_or_data(line),
            None => sse::error_or_data(event),
        };
        if error {
            return failure(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
        }
        let Some(data) = data else {
            // Comments and events without data pass as they are.
            return Mapped::default();
        };
        let mut step = Mapped::default();
        match sse::classify_data(data) {
            Event::Done => {
                step.done = true;
                return step;
            }
            Event::Usage { usage, usage_only } => {
                let total = self.before.map_or(usage, |before| before.plus(usage));
                self.total = Some(total);
                step.usage = Some(total);
                if usage_only && self.strip_usage_chunk {
                    step.edit = Edit::Drop;
                    return step;
                }
                if total != usage
                    && let Some(summed) = usage::with_usage(event, total)
                {
                    step.edit = Edit::Replace(Bytes::from(summed));
                }
            }
            Event::Other => {}
        }
        if !chunk::is_object(data) {
            return failure(ErrorKind::UpstreamMalformed);
        }
        if chunk::is_error(data) {
            return failure(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
        }
        if !self.started || self.text.is_some() || chunk::may_finish(data) {
            let Some(facts) = chunk::read(data, self.text.is_some()) else {
                return failure(ErrorKind::UpstreamMalformed);
            };
            if self.before.is_some() && !self.started && !facts.content && step.usage.is_none() {
                // A continuation's preamble (its role chunk): the client has had one.
                step.edit = Edit::Drop;
                return step;
            }
            self.started |= facts.content;
            for index in facts.finished {
                if index < 128 {
                    self.finished |= 1 << index;
                }
            }
            if facts.content {
                self.pieces += 1;
            }
            if let (Some(text), Some(more)) = (self.text.as_mut(), facts.text) {
                text.push_str(&more);
            }
            if self.text.is_some() && super::carries_tool_call(data) {
                self.tool_call = true;
            }
        } else if step.usage.is_none() {
            // A chunk after the first token, not parsed: content or tool-call arguments,
            // about one token.
            self.pieces += 1;
        }
        if let Some(name) = &self.rename {
            let current = match &step.edit {
                Edit::Replace(bytes) => bytes.as_ref(),
                _ => event,
            };
            if let Some(renamed) = chunk::with_model(current, name) {
                step.edit = Edit::Replace(Bytes::from(renamed));
            }
        }
        step
    }

    pub(super) fn started(&self) -> bool {
        self.started
    }

    pub(super) fn complete(&self) -> bool {
        self.choices <= 128 && self.finished.count_ones() >= self.choices
    }

    pub(super) fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    pub(super) fn in_tool_call(&self) -> bool {
        self.tool_call
    }

    /// What this stream consumed so far (with what it continued, if anything).
    pub(super) fn carried(&self) -> Carried {
        Carried::after(self.before, self.total, self.pieces)
    }

    pub(super) fn continuing(&mut self, before: Carried) {
        self.before = Some(before);
    }
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
    use crate::wire::openai::json_string;

    impl Passthrough {
        /// One event as the relay hands it over: split first, with its only line when it has
        /// one.
        fn relayed(&mut self, event: &[u8]) -> Mapped {
            let one_line = sse::Splitter::default()
                .next_event(event)
                .is_some_and(|(end, one)| one && end == event.len());
            self.event(event, one_line.then(|| sse::only_line(event)))
        }
    }

    fn chunk(content: &str, finish: Option<&str>) -> String {
        let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
        format!(
            "data: {{\"id\":\"c\",\"model\":\"up\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    #[test]
    fn the_first_token_and_the_finish_are_noticed() {
        let mut map = Passthrough::new(true, None, 1);
        let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert!(matches!(map.relayed(role.as_bytes()).edit, Edit::Keep));
        assert!(!map.started());
        map.relayed(chunk("Hi", None).as_bytes());
        assert!(map.started() && !map.complete());
        map.relayed(chunk("", Some("stop")).as_bytes());
        assert!(map.complete());
        assert!(map.relayed(b"data: [DONE]\n\n").done);
    }

    #[test]
    fn broken_and_error_events_fail_the_stream() {
        let mut map = Passthrough::new(true, None, 1);
        let cut = map.relayed(b"data: {\"choices\":[{\"delta\":\n\n");
        assert_eq!(cut.failure, Some(ErrorKind::UpstreamMalformed));
        let error = map.relayed(b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
        assert_eq!(
            error.failure,
            Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY))
        );
        let typed = map.relayed(b"event: error\ndata: {}\n\n");
        assert_eq!(
            typed.failure,
            Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY))
        );
        assert!(matches!(map.relayed(b": ping\n\n").edit, Edit::Keep));
    }

    #[test]
    fn a_group_renames_every_chunk_and_a_continuation_sums_usage() {
        let mut map = Passthrough::new(false, Some(json_string("primary")), 1);
        let step = map.relayed(chunk("Hi", None).as_bytes());
        let Edit::Replace(renamed) = step.edit else {
            panic!("{step:?}")
        };
        assert!(
            std::str::from_utf8(&renamed)
                .unwrap()
                .contains("\"model\":\"primary\"")
        );

        let mut next = Passthrough::new(false, None, 1);
        next.continuing(Carried {
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 4,
                total_tokens: 14,
            }),
            pieces: 0,
        });
        let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
        assert!(matches!(next.relayed(role.as_bytes()).edit, Edit::Drop));
        let usage = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}\n\n";
        let step = next.relayed(usage);
        assert_eq!(
            step.usage,
            Some(Usage {
                prompt_tokens: 22,
                completion_tokens: 7,
                total_tokens: 29
            })
        );
        let Edit::Replace(summed) = step.edit else {
            panic!("{step:?}")
        };
        let value: serde_json::Value =
            serde_json::from_slice(summed.strip_prefix(b"data: ").unwrap()).unwrap();
        assert_eq!(value["usage"]["completion_tokens"], 7);
    }

    #[test]
    fn the_text_is_kept_when_asked_and_a_silent_cut_is_estimated() {
        let mut map = Passthrough::new(true, None, 1);
        map.keep_text("");
        map.relayed(chunk("Hel", None).as_bytes());
        map.relayed(chunk("lo", None).as_bytes());
        assert_eq!(map.text(), Some("Hello"));
        let carried = map.carried();
        assert_eq!(
            carried,
            Carried {
                usage: None,
                pieces: 2
            }
        );
        // The continuation's prompt (12) holds the original prompt and the 2 tokens sent.
        let next = Usage {
            prompt_tokens: 12,
            completion_tokens: 3,
            total_tokens: 15,
        };
        assert_eq!(
            carried.plus(next),
            Usage {
                prompt_tokens: 22,
                completion_tokens: 5,
                total_tokens: 27
            }
        );
    }
}
