//! The fast path, for benchmarks: OpenAI chat completions computed once at start, paced or sent
//! in one burst, one precomputed Anthropic message (non-streaming `POST /v1/messages`), one
//! precomputed Responses API response (non-streaming `POST /v1/responses`), Gemini's
//! `generateContent` answer and its `streamGenerateContent?alt=sse` stream (paced like chat
//! completions), Bedrock's Converse answer and its ConverseStream (AWS event-stream messages,
//! paced the same way), and, for
//! the model [`HOSTILE_MODEL`](super::hostile::HOSTILE_MODEL), hostile answers (one huge SSE event, one huge JSON body) built
//! from one small buffer. A request's body is only byte-searched for `"stream": true`,
//! `"include_usage": true` and the hostile model's name (no JSON parse), and nothing is recorded,
//! so the mock stays far cheaper than the gateway in front of it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode, request};

use super::body::{Finish, Frames, MockBody, Paced};
use super::hostile::{Hostile, HostileAnswers};
use super::server::Worker;

/// The marker every streamed content frame carries; a load generator counts frames by it.
pub const CONTENT_MARKER: &[u8] = b"aisixbenchtok";

/// A whole chat-completion stream with `frames` content frames, the finish chunk, the usage
/// chunk and `[DONE]`: what the burst mock sends in one write, for an origin the harness does
/// not run itself (nginx serving it as a static body).
pub fn burst_stream(frames: usize) -> Bytes {
    let pacing = Pacing {
        ttft: Duration::ZERO,
        frames,
        gap: Duration::ZERO,
        burst: true,
    };
    Answers::new(&pacing, None).whole_with_usage
}

/// How a streamed answer is paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Delay before the first content frame.
    pub ttft: Duration,
    /// Content frames per stream (at least one).
    pub frames: usize,
    /// Delay between content frames.
    pub gap: Duration,
    /// Send the whole stream (every frame, the finish chunk, usage and `[DONE]`) as one chunk
    /// after `ttft`, as a provider does that buffers its answer; `gap` is then unused.
    pub burst: bool,
}

/// The precomputed answers.
#[derive(Debug)]
pub(crate) struct Answers {
    completion: Bytes,
    /// The Anthropic Messages answer (`"type":"message"`, with `usage`).
    message: Bytes,
    /// The Responses API answer (`"object":"response"`, with `usage`).
    response: Bytes,
    /// Gemini's `generateContent` answer (with `usageMetadata`).
    gemini: Bytes,
    /// Gemini's stream: one content chunk, and the last chunk with `finishReason` and usage.
    gemini_content: Bytes,
    gemini_tail: Bytes,
    /// Bedrock's Converse answer (with `usage`).
    converse: Bytes,
    /// Bedrock's ConverseStream, as event-stream messages: `messageStart`, one text
    /// `contentBlockDelta` per frame, and the end (`contentBlockStop`, `messageStop` and the
    /// `metadata` that carries the usage).
    converse_start: Bytes,
    converse_delta: Bytes,
    converse_end: Bytes,
    content: Bytes,
    /// The last content frame, the finish chunk and `[DONE]`, with and without the usage chunk:
    /// one write, as a provider sends the end of a stream.
    tail: Bytes,
    tail_with_usage: Bytes,
    /// The whole stream in one chunk, with and without the usage chunk (burst pacing).
    whole: Bytes,
    whole_with_usage: Bytes,
    pacing: Pacing,
    hostile: Option<HostileAnswers>,
}

impl Answers {
    pub(crate) fn new(pacing: &Pacing, hostile: Option<&Hostile>) -> Answers {
        let head = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","#;
        let content = format!(
            "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
            String::from_utf8_lossy(CONTENT_MARKER)
        );
        let finish = format!(
            "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        );
        let usage = format!(
            "data: {head}\"choices\":[],\"usage\":{{\"prompt_tokens\":9,\"completion_tokens\":{},\"total_tokens\":{}}}}}\n\n",
            pacing.frames,
            pacing.frames + 9
        );
        let done = "data: [DONE]\n\n";
        let frames = pacing.frames.max(1);
        let leading = content.repeat(frames - 1);
        // Gemini separates SSE events with CRLF pairs.
        let marker = String::from_utf8_lossy(CONTENT_MARKER);
        let gemini_parts = format!(
            "\"content\":{{\"parts\":[{{\"text\":\"{marker}\"}}],\"role\":\"model\"}},\"index\":0"
        );
        let gemini_content = format!(
            "data: {{\"candidates\":[{{{gemini_parts}}}],\"modelVersion\":\"mock-gemini\"}}\r\n\r\n"
        );
        let gemini_tail = format!(
            "data: {{\"candidates\":[{{{gemini_parts},\"finishReason\":\"STOP\"}}],\"usageMetadata\":{{\"promptTokenCount\":9,\"candidatesTokenCount\":{frames},\"totalTokenCount\":{}}},\"modelVersion\":\"mock-gemini\"}}\r\n\r\n",
            frames + 9
        );
        let marker_text = String::from_utf8_lossy(CONTENT_MARKER);
        let converse_end = [
            converse_event(
                "contentBlockStop",
                r#"{"contentBlockIndex":0,"p":"abcdefgh"}"#,
            ),
            converse_event("messageStop", r#"{"stopReason":"end_turn","p":"abcd"}"#),
            converse_event(
                "metadata",
                &format!(
                    r#"{{"usage":{{"inputTokens":9,"outputTokens":{frames},"totalTokens":{}}},"metrics":{{"latencyMs":42}},"p":"abcdefghijkl"}}"#,
                    frames + 9
                ),
            ),
        ]
        .concat();
        Answers {
            converse: Bytes::from_static(
                br#"{"output":{"message":{"role":"assistant","content":[{"text":"Hello from the aisix bench mock."}]}},"stopReason":"end_turn","usage":{"inputTokens":9,"outputTokens":8,"totalTokens":17},"metrics":{"latencyMs":42}}"#,
            ),
            converse_start: Bytes::from(converse_event(
                "messageStart",
                r#"{"role":"assistant","p":"abcdefghijklmnopqrstuvwxyzABCDEF"}"#,
            )),
            converse_delta: Bytes::from(converse_event(
                "contentBlockDelta",
                &format!(
                    r#"{{"contentBlockIndex":0,"delta":{{"text":"{marker_text}"}},"p":"abcdefghijklmno"}}"#
                ),
            )),
            converse_end: Bytes::from(converse_end),
            completion: Bytes::from_static(
                br#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the aisix bench mock."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":8,"total_tokens":17}}"#,
            ),
            message: Bytes::from_static(
                br#"{"id":"msg_bench","type":"message","role":"assistant","model":"mock-claude","content":[{"type":"text","text":"Hello from the aisix bench mock."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":8}}"#,
            ),
            response: Bytes::from_static(
                br#"{"id":"resp_bench","object":"response","created_at":1700000000,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"mock-model","output":[{"type":"message","id":"msg_bench","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello from the aisix bench mock.","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":0},"output_tokens":8,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":17},"user":null,"metadata":{}}"#,
            ),
            gemini: Bytes::from_static(
                br#"{"candidates":[{"content":{"parts":[{"text":"Hello from the aisix bench mock."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":8,"totalTokenCount":17},"modelVersion":"mock-gemini"}"#,
            ),
            gemini_content: Bytes::from(gemini_content),
            gemini_tail: Bytes::from(gemini_tail),
            tail: Bytes::from(format!("{content}{finish}{done}")),
            tail_with_usage: Bytes::from(format!("{content}{finish}{usage}{done}")),
            whole: Bytes::from(format!("{leading}{content}{finish}{done}")),
            whole_with_usage: Bytes::from(format!("{leading}{content}{finish}{usage}{done}")),
            content: Bytes::from(content),
            pacing: Pacing {
                frames,
                ..*pacing
            },
            hostile: hostile.map(HostileAnswers::new),
        }
    }

    /// The answer to a chat completion (JSON or, with `"stream": true`, paced SSE), to an
    /// Anthropic message or a Responses request (JSON only); any other request gets a 404 in
    /// OpenAI's error shape.
    pub(crate) fn respond(
        &self,
        head: &request::Parts,
        body: &[u8],
        worker: Arc<Worker>,
    ) -> Response<MockBody> {
        if head.method == Method::POST && head.uri.path().ends_with("/v1/messages") {
            return json(Frames::one(self.message.clone()), worker);
        }
        if head.method == Method::POST && head.uri.path().ends_with("/v1/responses") {
            return json(Frames::one(self.response.clone()), worker);
        }
        if head.method == Method::POST && head.uri.path().ends_with(":generateContent") {
            return json(Frames::one(self.gemini.clone()), worker);
        }
        if head.method == Method::POST && head.uri.path().ends_with(":streamGenerateContent") {
            let Pacing {
                ttft, frames, gap, ..
            } = self.pacing;
            let frames = Paced::new(
                frames,
                ttft,
                gap,
                self.gemini_content.clone(),
                self.gemini_tail.clone(),
            );
            return sse(Frames::Paced(frames), worker);
        }
        if head.method == Method::POST && head.uri.path().ends_with("/converse") {
            return json(Frames::one(self.converse.clone()), worker);
        }
        if head.method == Method::POST && head.uri.path().ends_with("/converse-stream") {
            return event_stream(self.converse_stream(), worker);
        }
        if head.method != Method::POST || !head.uri.path().ends_with("/chat/completions") {
            let not_found = Bytes::from_static(
                b"{\"error\":{\"message\":\"mock: not found\",\"type\":\"invalid_request_error\"}}",
            );
            let mut response = json(Frames::one(not_found), worker);
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        }
        let stream = json_flag_is_true(body, b"\"stream\"");
        if let Some(hostile) = &self.hostile
            && is_hostile(body)
        {
            return if stream {
                sse(hostile.event(), worker)
            } else {
                json(hostile.body(), worker)
            };
        }
        if !stream {
            return json(Frames::one(self.completion.clone()), worker);
        }
        let usage = json_flag_is_true(body, b"\"include_usage\"");
        let Pacing {
            ttft,
            frames,
            gap,
            burst,
        } = self.pacing;
        let frames = if burst {
            let whole = if usage {
                &self.whole_with_usage
            } else {
                &self.whole
            };
            Frames::Paced(Paced::new(1, ttft, gap, Bytes::new(), whole.clone()))
        } else {
            let last = if usage {
                &self.tail_with_usage
            } else {
                &self.tail
            };
            Frames::Paced(Paced::new(
                frames,
                ttft,
                gap,
                self.content.clone(),
                last.clone(),
            ))
        };
        sse(frames, worker)
    }
}

impl Answers {
    /// A ConverseStream paced as the chat streams are: `messageStart` with the first delta
    /// after the TTFT, a delta per gap, the end with the last one.
    fn converse_stream(&self) -> Frames {
        let Pacing {
            ttft,
            frames,
            gap,
            burst,
        } = self.pacing;
        let delta = &self.converse_delta;
        let mut chunks = std::collections::VecDeque::with_capacity(frames);
        if burst {
            let mut whole = self.converse_start.to_vec();
            for _ in 0..frames {
                whole.extend_from_slice(delta);
            }
            whole.extend_from_slice(&self.converse_end);
            chunks.push_back((ttft, Bytes::from(whole)));
            return Frames::Listed(chunks);
        }
        for at in 0..frames {
            let mut chunk = Vec::new();
            if at == 0 {
                chunk.extend_from_slice(&self.converse_start);
            }
            chunk.extend_from_slice(delta);
            if at + 1 == frames {
                chunk.extend_from_slice(&self.converse_end);
            }
            chunks.push_back((if at == 0 { ttft } else { gap }, Bytes::from(chunk)));
        }
        Frames::Listed(chunks)
    }
}

/// One AWS event-stream message of ConverseStream: an `event` of `kind` carrying `payload`
/// (with AWS's `p` padding field, as Bedrock sends it), its prelude and message CRCs computed
/// by `aws-smithy-eventstream`.
fn converse_event(kind: &str, payload: &str) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue as EventHeader, Message};
    let string = |value: &str| EventHeader::String(value.to_owned().into());
    let message = Message::new(Bytes::copy_from_slice(payload.as_bytes()))
        .add_header(Header::new(":event-type", string(kind)))
        .add_header(Header::new(":content-type", string("application/json")))
        .add_header(Header::new(":message-type", string("event")));
    let mut out = Vec::new();
    // Only a header or payload over the format's limits fails, which these never are.
    let _ = aws_smithy_eventstream::frame::write_message_to(&message, &mut out);
    out
}

/// A `application/vnd.amazon.eventstream` response (ConverseStream's), chunked.
fn event_stream(frames: Frames, worker: Arc<Worker>) -> Response<MockBody> {
    let mut response = Response::new(MockBody::new(frames, Finish::Complete, None, worker));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    response
}

/// [`HOSTILE_MODEL`](super::hostile::HOSTILE_MODEL), quoted, as a request body carries it.
const HOSTILE_NEEDLE: &[u8] = b"\"mock-hostile\"";

/// Whether the request names the hostile model (a byte search for its quoted name).
fn is_hostile(body: &[u8]) -> bool {
    memchr::memmem::find(body, HOSTILE_NEEDLE).is_some()
}

/// A `text/event-stream` response, chunked.
fn sse(frames: Frames, worker: Arc<Worker>) -> Response<MockBody> {
    let mut response = Response::new(MockBody::new(frames, Finish::Complete, None, worker));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A complete `application/json` response of one chunk.
fn json(frames: Frames, worker: Arc<Worker>) -> Response<MockBody> {
    let len = frames.len_bytes();
    let mut response = Response::new(MockBody::new(frames, Finish::Complete, Some(len), worker));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// True when `key` (quoted) is followed by `:` and `true`, whitespace allowed: a byte search,
/// not a JSON parse.
fn json_flag_is_true(body: &[u8], quoted_key: &[u8]) -> bool {
    memchr::memmem::find_iter(body, quoted_key).any(|at| {
        body.get(at + quoted_key.len()..)
            .map(<[u8]>::trim_ascii_start)
            .and_then(|rest| rest.strip_prefix(b":"))
            .is_some_and(|value| value.trim_ascii_start().starts_with(b"true"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::hostile::HOSTILE_MODEL;

    #[test]
    fn the_burst_stream_carries_every_content_frame_usage_and_done() {
        let stream = burst_stream(3);
        let text = std::str::from_utf8(&stream).unwrap();
        let marker = std::str::from_utf8(CONTENT_MARKER).unwrap();
        assert_eq!(text.matches(marker).count(), 3);
        assert!(text.contains("\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3"));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn stream_flag_is_found_with_or_without_spaces_and_never_in_stream_options() {
        assert!(json_flag_is_true(
            br#"{"model":"m","stream":true}"#,
            b"\"stream\""
        ));
        assert!(json_flag_is_true(br#"{"stream" :  true}"#, b"\"stream\""));
        assert!(!json_flag_is_true(br#"{"stream":false}"#, b"\"stream\""));
        assert!(!json_flag_is_true(
            br#"{"stream_options":{"include_usage":true}}"#,
            b"\"stream\""
        ));
        assert!(json_flag_is_true(
            br#"{"stream":true,"stream_options":{"include_usage": true}}"#,
            b"\"include_usage\""
        ));
    }

    #[test]
    fn only_requests_naming_the_hostile_model_are_hostile() {
        assert_eq!(HOSTILE_NEEDLE, format!("\"{HOSTILE_MODEL}\"").as_bytes());
        assert!(is_hostile(br#"{"model":"mock-hostile","stream":true}"#));
        assert!(!is_hostile(br#"{"model":"mock-model"}"#));
        assert!(!is_hostile(br#"{"model":"mock-hostile-2"}"#));
    }

    #[test]
    fn gemini_answers_are_valid_json_and_the_stream_ends_with_finish_and_usage() {
        let answers = Answers::new(
            &Pacing {
                ttft: Duration::ZERO,
                frames: 3,
                gap: Duration::ZERO,
                burst: false,
            },
            None,
        );
        let whole: serde_json::Value = serde_json::from_slice(&answers.gemini).unwrap();
        assert_eq!(whole["candidates"][0]["finishReason"], "STOP");
        for (frame, last) in [
            (&answers.gemini_content, false),
            (&answers.gemini_tail, true),
        ] {
            let text = std::str::from_utf8(frame).unwrap();
            let data = text
                .strip_prefix("data: ")
                .unwrap()
                .strip_suffix("\r\n\r\n")
                .unwrap();
            let chunk: serde_json::Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                chunk["candidates"][0]["content"]["parts"][0]["text"],
                String::from_utf8_lossy(CONTENT_MARKER).as_ref()
            );
            assert_eq!(chunk["candidates"][0]["finishReason"].is_string(), last);
            assert_eq!(
                chunk["usageMetadata"]["candidatesTokenCount"].as_u64(),
                last.then_some(3)
            );
        }
    }

    #[test]
    fn a_converse_stream_is_valid_event_stream_messages_in_bedrock_order() {
        let answers = Answers::new(
            &Pacing {
                ttft: Duration::ZERO,
                frames: 3,
                gap: Duration::ZERO,
                burst: false,
            },
            None,
        );
        let Frames::Listed(chunks) = answers.converse_stream() else {
            panic!("a converse stream is listed");
        };
        assert_eq!(chunks.len(), 3);
        let mut bytes = bytes::BytesMut::new();
        for (_, chunk) in chunks {
            bytes.extend_from_slice(&chunk);
        }
        let mut kinds = Vec::new();
        while !bytes.is_empty() {
            let message = aws_smithy_eventstream::frame::read_message_from(&mut bytes).unwrap();
            let kind = message
                .headers()
                .iter()
                .find(|h| h.name().as_str() == ":event-type")
                .and_then(|h| h.value().as_string().ok())
                .map(|v| v.as_str().to_owned())
                .unwrap();
            let payload: serde_json::Value = serde_json::from_slice(message.payload()).unwrap();
            if kind == "metadata" {
                assert_eq!(payload["usage"]["outputTokens"], 3);
            }
            kinds.push(kind);
        }
        assert_eq!(
            kinds,
            [
                "messageStart",
                "contentBlockDelta",
                "contentBlockDelta",
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata"
            ]
        );
        let whole: serde_json::Value = serde_json::from_slice(&answers.converse).unwrap();
        assert_eq!(whole["stopReason"], "end_turn");
    }
}
