//! Properties of every parser on the Anthropic translation path: no input makes one panic; a
//! stream gives the same output however its bytes are split; a translation there and back
//! keeps the content, the tool calls and the usage; and Anthropic's event order always holds.
//! Streams go through the relay's own path.

use std::collections::BTreeMap;

use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{passthrough, to_anthropic, to_openai};
use crate::wire::anthropic::stream::{Step, ToAnthropic, ToOpenAi, Translator};
use crate::wire::anthropic::types::{MessageResponse, ResponseBlock, Role, TokenUsage, ToolUse};
use crate::wire::anthropic::{error, mapping, request, response};
use crate::wire::chat::{
    ChatMessage, ChatRequest, ChatTool, ChatToolChoice, ContentPart, FunctionCall, FunctionDef,
    ImageUrl, NamedFunction, StreamOptions, ToolCall,
};
use crate::wire::content::TextOr;
use crate::wire::sse;

/// `cases` per property; a failure prints its minimal input, and no file is written.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, newlines and multi-byte characters: what escaping must survive.
    "[a-z0-9 \"\\\\\n\u{e9}\u{1F600}]{1,12}"
}

fn id(prefix: &'static str) -> impl Strategy<Value = String> {
    "[A-Za-z0-9_]{1,12}".prop_map(move |s| format!("{prefix}{s}"))
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_]{1,10}"
}

/// A JSON object as compact text, as a model writes a call's arguments.
fn arguments() -> impl Strategy<Value = String> {
    prop::collection::btree_map(
        "[a-z]{1,6}",
        prop_oneof![
            any::<i32>().prop_map(Value::from),
            text().prop_map(Value::from)
        ],
        0..4,
    )
    .prop_map(|map: BTreeMap<String, Value>| Value::Object(map.into_iter().collect()).to_string())
}

fn usage() -> impl Strategy<Value = TokenUsage> {
    (
        0u64..100_000,
        0u64..10_000,
        prop::option::of(0u64..10_000),
        prop::option::of(0u64..10_000),
    )
        .prop_map(|(input, output, write, read)| TokenUsage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
        })
}

/// One piece of an answer: some text, or a tool call with its arguments in pieces.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Call {
        id: String,
        name: String,
        arguments: Vec<String>,
    },
}

/// Splits `s` into up to `n` pieces at character boundaries chosen by `cuts`.
fn split_text(s: &str, cuts: &[usize]) -> Vec<String> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).skip(1).collect();
    let mut at: Vec<usize> = cuts
        .iter()
        .filter(|_| !bounds.is_empty())
        .map(|c| bounds[c % bounds.len()])
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut pieces = Vec::new();
    let mut from = 0;
    for cut in at {
        pieces.push(s[from..cut].to_owned());
        from = cut;
    }
    pieces.push(s[from..].to_owned());
    pieces
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        text().prop_map(Piece::Text),
        (
            id("call_"),
            name(),
            arguments(),
            prop::collection::vec(any::<usize>(), 0..4)
        )
            .prop_map(|(id, name, args, cuts)| Piece::Call {
                id,
                name,
                arguments: split_text(&args, &cuts),
            }),
    ]
}

/// A whole answer: its pieces, why it stopped, and its usage.
#[derive(Debug, Clone)]
struct Answer {
    pieces: Vec<Piece>,
    finish: &'static str,
    usage: TokenUsage,
}

fn answer() -> impl Strategy<Value = Answer> {
    (
        prop::collection::vec(piece(), 0..6),
        prop::sample::select(vec!["stop", "length", "tool_calls", "content_filter"]),
        usage(),
    )
        .prop_map(|(pieces, finish, usage)| Answer {
            pieces,
            finish,
            usage,
        })
}

/// What an answer comes to once accumulated: all its text, its calls, why it stopped, usage.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Accumulated {
    text: String,
    /// (id, name, arguments as a JSON value)
    calls: Vec<(String, String, Value)>,
    finish: String,
    usage: (u64, u64, u64, u64),
}

fn usage_tuple(usage: &TokenUsage) -> (u64, u64, u64, u64) {
    (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read(),
        usage.cache_write(),
    )
}

fn parse_arguments(text: &str) -> Value {
    if text.is_empty() {
        json!({})
    } else {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("arguments {text:?}: {e}"))
    }
}

impl Answer {
    fn expected(&self) -> Accumulated {
        let mut text = String::new();
        let mut calls = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => text.push_str(t),
                Piece::Call {
                    id,
                    name,
                    arguments,
                } => calls.push((
                    id.clone(),
                    name.clone(),
                    parse_arguments(&arguments.concat()),
                )),
            }
        }
        Accumulated {
            text,
            calls,
            finish: self.finish.to_owned(),
            usage: usage_tuple(&self.usage),
        }
    }

    /// The answer as an OpenAI stream with the usage chunk.
    fn openai_stream(&self) -> Vec<u8> {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "chatcmpl-p", "object": "chat.completion.chunk", "created": 1,
                    "model": "gpt-p", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let mut out = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
        let mut call_index = 0;
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(&chunk(json!({"content": t}), Value::Null)),
                Piece::Call {
                    id,
                    name,
                    arguments,
                } => {
                    out.push_str(&chunk(
                        json!({"tool_calls": [{"index": call_index, "id": id, "type": "function",
                            "function": {"name": name, "arguments": ""}}]}),
                        Value::Null,
                    ));
                    for part in arguments {
                        out.push_str(&chunk(
                            json!({"tool_calls": [{"index": call_index, "function": {"arguments": part}}]}),
                            Value::Null,
                        ));
                    }
                    call_index += 1;
                }
            }
        }
        out.push_str(&chunk(json!({}), json!(self.finish)));
        let usage = mapping::usage_to_openai(&self.usage);
        out.push_str(&format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-p", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-p", "choices": [], "usage": usage})
        ));
        out.push_str("data: [DONE]\n\n");
        out.into_bytes()
    }

    /// The answer as an Anthropic stream.
    fn anthropic_stream(&self) -> Vec<u8> {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let start_usage = TokenUsage {
            output_tokens: 1,
            ..self.usage
        };
        let mut out = event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_p", "type": "message",
                "role": "assistant", "content": [], "model": "claude-p", "stop_reason": null,
                "stop_sequence": null, "usage": start_usage}}),
        );
        out.push_str(&event("ping", json!({"type": "ping"})));
        for (index, piece) in self.pieces.iter().enumerate() {
            match piece {
                Piece::Text(t) => {
                    out.push_str(&event(
                        "content_block_start",
                        json!({"type": "content_block_start",
                        "index": index, "content_block": {"type": "text", "text": ""}}),
                    ));
                    out.push_str(&event(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": index, "delta": {"type": "text_delta", "text": t}}),
                    ));
                }
                Piece::Call {
                    id,
                    name,
                    arguments,
                } => {
                    out.push_str(&event("content_block_start", json!({"type": "content_block_start",
                        "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                    for part in arguments {
                        out.push_str(&event("content_block_delta", json!({"type": "content_block_delta",
                            "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})));
                    }
                }
            }
            out.push_str(&event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        out.push_str(&event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": mapping::stop_reason(self.finish),
                "stop_sequence": null}, "usage": {"output_tokens": self.usage.output_tokens}}),
        ));
        out.push_str(&event("message_stop", json!({"type": "message_stop"})));
        out.into_bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// Readers of translated streams, checking each dialect's rules as they go

fn events(bytes: &[u8]) -> Vec<(Option<String>, String)> {
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(len) = sse::event_end(&bytes[at..]) {
        let fields = sse::fields(&bytes[at..at + len]);
        let name = fields.name.map(|n| String::from_utf8(n.to_vec()).unwrap());
        let data = fields
            .data
            .map(|d| String::from_utf8(d.into_owned()).unwrap());
        events.push((name, data.unwrap_or_default()));
        at += len;
    }
    assert_eq!(at, bytes.len(), "output ends inside an event");
    events
}

/// Accumulates an OpenAI stream as a client does, checking it is well formed.
fn accumulate_openai(bytes: &[u8]) -> Accumulated {
    let events = events(bytes);
    let (last, chunks) = events.split_last().expect("an empty stream");
    assert_eq!(last.1, "[DONE]", "the stream must end with [DONE]");
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = None;
    let mut usage = None;
    for (i, (name, data)) in chunks.iter().enumerate() {
        assert_eq!(name, &None, "OpenAI chunks are unnamed");
        let chunk: Value = serde_json::from_str(data).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk");
        if i == 0 {
            assert_eq!(chunk["choices"][0]["delta"]["role"], "assistant");
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = Some(mapping::usage_from_openai(
                &serde_json::from_value(u.clone()).unwrap(),
            ));
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            text.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(index, calls.len(), "tool calls are numbered in order");
                calls.push((
                    id.to_owned(),
                    call["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            calls[index]
                .2
                .push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    Accumulated {
        text,
        calls: calls
            .into_iter()
            .map(|(id, name, args)| (id, name, parse_arguments(&args)))
            .collect(),
        finish: finish.expect("no finish_reason"),
        usage: usage_tuple(&usage.expect("no usage chunk")),
    }
}

/// Accumulates an Anthropic stream as the SDK does, checking Anthropic's exact event order.
fn accumulate_anthropic(bytes: &[u8]) -> Accumulated {
    let events = events(bytes);
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut usage = TokenUsage::default();
    let mut stop = None;
    let mut open: Option<(u64, bool)> = None; // (index, is a tool)
    let mut next_index = 0;
    for (i, (name, data)) in events.iter().enumerate() {
        let name = name.as_deref().expect("every Anthropic event is named");
        let event: Value = serde_json::from_str(data).unwrap();
        assert_eq!(event["type"], name, "event name and data type agree");
        match (i, name) {
            (0, "message_start") => {
                usage = serde_json::from_value(event["message"]["usage"].clone()).unwrap();
            }
            (0, other) => panic!("first event is {other}, not message_start"),
            (1, "ping") => {}
            (1, other) => panic!("second event is {other}, not ping"),
            (_, "content_block_start") => {
                assert!(open.is_none(), "a block starts while another is open");
                assert_eq!(event["index"], next_index, "block indices count up from 0");
                let block = &event["content_block"];
                let tool = block["type"] == "tool_use";
                if tool {
                    calls.push((
                        block["id"].as_str().unwrap().to_owned(),
                        block["name"].as_str().unwrap().to_owned(),
                        String::new(),
                    ));
                }
                open = Some((next_index, tool));
                next_index += 1;
            }
            (_, "content_block_delta") => {
                let (index, tool) = open.expect("a delta outside a block");
                assert_eq!(event["index"], index);
                let delta = &event["delta"];
                if tool {
                    assert_eq!(delta["type"], "input_json_delta");
                    calls
                        .last_mut()
                        .unwrap()
                        .2
                        .push_str(delta["partial_json"].as_str().unwrap());
                } else {
                    assert_eq!(delta["type"], "text_delta");
                    text.push_str(delta["text"].as_str().unwrap());
                }
            }
            (_, "content_block_stop") => {
                let (index, _) = open.take().expect("a stop outside a block");
                assert_eq!(event["index"], index);
            }
            (_, "message_delta") => {
                assert!(open.is_none(), "message_delta while a block is open");
                assert_eq!(
                    i,
                    events.len() - 2,
                    "message_delta comes right before message_stop"
                );
                stop = event["delta"]["stop_reason"].as_str().map(str::to_owned);
                let delta = &event["usage"];
                usage.output_tokens = delta["output_tokens"].as_u64().unwrap();
                if let Some(n) = delta["input_tokens"].as_u64() {
                    usage.input_tokens = n;
                }
                if let Some(n) = delta["cache_read_input_tokens"].as_u64() {
                    usage.cache_read_input_tokens = Some(n);
                }
                if let Some(n) = delta["cache_creation_input_tokens"].as_u64() {
                    usage.cache_creation_input_tokens = Some(n);
                }
            }
            (_, "message_stop") => assert_eq!(i, events.len() - 1, "message_stop is last"),
            (_, other) => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(
        events.last().map(|e| e.0.as_deref()),
        Some(Some("message_stop"))
    );
    Accumulated {
        text,
        calls: calls
            .into_iter()
            .map(|(id, name, args)| (id, name, parse_arguments(&args)))
            .collect(),
        finish: mapping::finish_reason(&stop.expect("no stop_reason")).to_owned(),
        usage: usage_tuple(&usage),
    }
}

/// Splits `bytes` at the given points.
fn chunks<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in at {
        chunks.push(&bytes[from..cut]);
        from = cut;
    }
    chunks.push(&bytes[from..]);
    chunks
}

// ---------------------------------------------------------------------------------------------
// Streams

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn openai_stream_to_anthropic_keeps_content_tools_and_usage_in_anthropic_order(answer in answer()) {
        let streamed = to_anthropic(&[&answer.openai_stream()]);
        prop_assert!(streamed.complete);
        prop_assert_eq!(streamed.started, !answer.pieces.is_empty());
        let mut expected = answer.expected();
        // Anthropic has one reason for OpenAI's "stop" and "length" alike; the mapping is fixed.
        expected.finish = mapping::finish_reason(mapping::stop_reason(answer.finish)).to_owned();
        prop_assert_eq!(accumulate_anthropic(&streamed.out), expected);
    }

    #[test]
    fn anthropic_stream_to_openai_keeps_content_tools_and_usage(answer in answer()) {
        let streamed = to_openai(true, 1, false, &[&answer.anthropic_stream()]);
        prop_assert!(streamed.complete);
        prop_assert_eq!(streamed.started, !answer.pieces.is_empty());
        let mut expected = answer.expected();
        expected.finish = mapping::finish_reason(mapping::stop_reason(answer.finish)).to_owned();
        prop_assert_eq!(accumulate_openai(&streamed.out), expected);
    }

    #[test]
    fn a_stream_there_and_back_keeps_content_tools_and_usage(answer in answer()) {
        let anthropic = to_anthropic(&[&answer.openai_stream()]);
        let openai = to_openai(true, 1, false, &[&anthropic.out]);
        prop_assert!(openai.complete);
        let mut expected = answer.expected();
        expected.finish = mapping::finish_reason(mapping::stop_reason(answer.finish)).to_owned();
        prop_assert_eq!(accumulate_openai(&openai.out), expected);
        prop_assert_eq!(openai.usage.map(|u| u.to_usage()), Some(answer.usage.to_usage()));
    }

    #[test]
    fn every_split_of_a_stream_translates_the_same(
        answer in answer(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let openai = answer.openai_stream();
        let whole = to_anthropic(&[&openai]);
        prop_assert_eq!(&to_anthropic(&chunks(&openai, &cuts)), &whole);

        let anthropic = answer.anthropic_stream();
        let whole = to_openai(false, 1, false, &[&anthropic]);
        prop_assert_eq!(&to_openai(false, 1, false, &chunks(&anthropic, &cuts)), &whole);

        let whole = passthrough(&[&anthropic]);
        prop_assert!(whole.complete);
        prop_assert_eq!(whole.usage.map(|u| usage_tuple(&u)), Some(usage_tuple(&answer.usage)));
        prop_assert_eq!(&passthrough(&chunks(&anthropic, &cuts)), &whole);
    }

    #[test]
    fn a_stream_cut_anywhere_never_completes_and_ends_with_an_error_event(
        answer in answer(),
        cut in any::<usize>(),
    ) {
        // Cut strictly before the last event's end: the final marker never arrives.
        let openai = answer.openai_stream();
        let cut_at = cut % (openai.len() - "data: [DONE]\n\n".len());
        let streamed = to_anthropic(&[&openai[..cut_at]]);
        if !streamed.complete {
            let events = events(&streamed.out);
            prop_assert!(events.iter().all(|e| e.0.as_deref() != Some("message_stop")));
            prop_assert_eq!(events.last().and_then(|e| e.0.as_deref()), Some("error"));
        } else {
            // Completed only when the finish reason had arrived before the cut.
            let finish = format!("\"finish_reason\":\"{}\"", answer.finish);
            prop_assert!(std::str::from_utf8(&openai[..cut_at]).unwrap().contains(&finish));
        }

        let anthropic = answer.anthropic_stream();
        let stop_event = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".len();
        let cut_at = cut % (anthropic.len() - stop_event);
        for streamed in [
            to_openai(true, 1, false, &[&anthropic[..cut_at]]),
            passthrough(&[&anthropic[..cut_at]]),
        ] {
            if !streamed.complete {
                let events = events(&streamed.out);
                prop_assert!(events.iter().all(|e| e.1 != "[DONE]" && e.0.as_deref() != Some("message_stop")));
                prop_assert_eq!(events.last().and_then(|e| e.0.as_deref()), Some("error"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// An OpenAI conversation in the canonical shape a translation there and back reproduces
/// exactly: turns alternate, tool results follow their calls, texts are not empty.
fn chat_request() -> impl Strategy<Value = ChatRequest> {
    let user = prop_oneof![
        text().prop_map(TextOr::Text),
        prop::collection::vec(
            prop_oneof![
                text().prop_map(|text| ContentPart::Text { text }),
                "[A-Za-z0-9+/]{4,16}".prop_map(|data| ContentPart::ImageUrl {
                    image_url: ImageUrl {
                        url: format!("data:image/png;base64,{data}"),
                        detail: None
                    },
                }),
                "[a-z]{1,8}".prop_map(|p| ContentPart::ImageUrl {
                    image_url: ImageUrl {
                        url: format!("https://example.com/{p}.png"),
                        detail: None
                    },
                }),
            ],
            1..4,
        )
        .prop_map(TextOr::Parts),
    ]
    .prop_map(|content| ChatMessage::User { content });
    // Ids OpenAI-compatible servers make, which Anthropic refuses, and ids that sanitize alike.
    let call_id = "call[._:]?[A-Za-z0-9]{1,3}";
    let calls = prop::collection::vec((call_id, name(), arguments()), 0..3);
    let exchange = (
        user,
        prop::option::of(text()),
        calls,
        prop::option::of(text()),
    )
        .prop_map(|(user, reply, calls, after)| {
            let mut messages = vec![user];
            // Every exchange ends with the assistant, so that user turns never meet (they
            // would merge into one).
            let reply = match reply {
                None if calls.is_empty() => Some("ok".to_owned()),
                reply => reply,
            };
            let tool_calls: Vec<ToolCall> = calls
                .iter()
                .map(|(id, name, arguments)| ToolCall {
                    id: id.clone(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: arguments.clone(),
                    },
                })
                .collect();
            messages.push(ChatMessage::Assistant {
                content: reply.map(TextOr::Text),
                refusal: None,
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            });
            for (id, _, _) in &calls {
                messages.push(ChatMessage::Tool {
                    content: TextOr::Text(after.clone().unwrap_or_else(|| "ok".into())),
                    tool_call_id: id.clone(),
                });
            }
            if !calls.is_empty() {
                // After the results, the assistant answers before the user speaks again.
                messages.push(ChatMessage::Assistant {
                    content: Some(TextOr::Text("done".into())),
                    refusal: None,
                    tool_calls: None,
                });
            }
            messages
        });
    let tools = prop::collection::vec(
        (name(), prop::option::of(text())).prop_map(|(name, description)| ChatTool {
            kind: "function".into(),
            function: Some(FunctionDef {
                name,
                description,
                parameters: Some(json!({"type": "object", "properties": {}})),
            }),
        }),
        0..3,
    );
    (
        prop::option::of(text()),
        prop::collection::vec(exchange, 1..4),
        tools,
        prop::sample::select(vec!["auto", "required", "none", "function"]),
        any::<bool>(),
        (
            1u64..8192,
            prop::option::of(0.0f64..1.0),
            prop::option::of(0.0f64..1.0),
        ),
        (
            prop::option::of(prop::collection::vec(text(), 1..3)),
            any::<bool>(),
            prop::option::of(name()),
        ),
    )
        .prop_map(
            |(
                system,
                exchanges,
                tools,
                choice,
                serial,
                (max_tokens, temperature, top_p),
                (stop, stream, user),
            )| {
                let mut messages: Vec<ChatMessage> = system
                    .map(|s| ChatMessage::System {
                        content: TextOr::Text(s),
                    })
                    .into_iter()
                    .collect();
                messages.extend(exchanges.into_iter().flatten());
                let has_tools = !tools.is_empty();
                let tool_choice = has_tools.then(|| match choice {
                    "function" => ChatToolChoice::Function {
                        kind: "function".into(),
                        function: NamedFunction {
                            name: tools[0].function.as_ref().unwrap().name.clone(),
                        },
                    },
                    mode => ChatToolChoice::Mode(mode.into()),
                });
                ChatRequest {
                    model: "m".into(),
                    messages,
                    max_tokens: Some(max_tokens),
                    temperature,
                    top_p,
                    stop: stop.map(TextOr::Parts),
                    stream: stream.then_some(true),
                    stream_options: stream.then_some(StreamOptions {
                        include_usage: true,
                    }),
                    parallel_tool_calls: (has_tools && serial && choice != "none").then_some(false),
                    tool_choice,
                    tools: has_tools.then_some(tools),
                    user,
                    ..ChatRequest::default()
                }
            },
        )
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn an_openai_request_there_and_back_is_the_same_request_its_tool_ids_mapped_back(chat in chat_request()) {
        let body = serde_json::to_vec(&chat).unwrap();
        let anthropic = request::to_anthropic(&body, "claude", 4096).unwrap();
        let back = request::to_openai(&anthropic.body, "m", request::OutputTokensField::MaxTokens).unwrap();
        let mut back: ChatRequest = serde_json::from_slice(&back.body).unwrap();
        for message in &mut back.messages {
            match message {
                ChatMessage::Assistant { tool_calls: Some(calls), .. } => {
                    for call in calls {
                        call.id = anthropic.tool_ids.client(&call.id).to_owned();
                    }
                }
                ChatMessage::Tool { tool_call_id, .. } => {
                    *tool_call_id = anthropic.tool_ids.client(tool_call_id).to_owned();
                }
                _ => {}
            }
        }
        prop_assert_eq!(back, chat);
    }
}

// ---------------------------------------------------------------------------------------------
// Complete answers

fn anthropic_message() -> impl Strategy<Value = MessageResponse> {
    (
        prop::collection::vec(
            prop_oneof![
                text().prop_map(|text| ResponseBlock::Text { text }),
                (id("toolu_"), name(), arguments()).prop_map(|(id, name, args)| {
                    ResponseBlock::ToolUse(ToolUse {
                        id,
                        name,
                        input: serde_json::from_str(&args).unwrap(),
                    })
                }),
            ],
            0..5,
        ),
        prop::sample::select(vec!["end_turn", "max_tokens", "tool_use", "refusal"]),
        usage(),
    )
        .prop_map(|(content, stop, usage)| MessageResponse {
            id: "msg_p".into(),
            kind: "message".into(),
            role: Role::Assistant,
            content,
            model: "claude-p".into(),
            stop_reason: Some(stop.into()),
            stop_sequence: None,
            usage,
        })
}

/// Text, calls, stop reason and usage of an Anthropic message.
fn summary(message: &MessageResponse) -> Accumulated {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            ResponseBlock::Text { text: t } => text.push_str(t),
            ResponseBlock::ToolUse(ToolUse { id, name, input }) => {
                calls.push((id.clone(), name.clone(), input.clone()))
            }
            _ => {}
        }
    }
    Accumulated {
        text,
        calls,
        finish: message.stop_reason.clone().unwrap_or_default(),
        usage: usage_tuple(&message.usage),
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn an_anthropic_answer_there_and_back_keeps_content_tools_and_usage(message in anthropic_message()) {
        let body = serde_json::to_vec(&message).unwrap();
        let openai = response::to_openai(&body, 1).unwrap();
        prop_assert_eq!(openai.usage, message.usage);
        let back = response::to_anthropic(&openai.body).unwrap();
        let back: MessageResponse = serde_json::from_slice(&back.body).unwrap();
        prop_assert_eq!(summary(&back), summary(&message));
    }

    #[test]
    fn an_openai_answer_there_and_back_keeps_content_tools_and_usage(answer in answer()) {
        let expected = answer.expected();
        let calls: Vec<Value> = expected.calls.iter().enumerate().map(|(i, (id, name, args))| json!({
            "id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}, "index": i,
        })).collect();
        let completion = json!({"id": "chatcmpl-p", "object": "chat.completion", "created": 1, "model": "gpt-p",
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": (!expected.text.is_empty()).then_some(&expected.text),
                "tool_calls": (!calls.is_empty()).then_some(calls)},
                "finish_reason": answer.finish}],
            "usage": mapping::usage_to_openai(&answer.usage)});
        let anthropic = response::to_anthropic(completion.to_string().as_bytes()).unwrap();
        let back = response::to_openai(&anthropic.body, 1).unwrap();
        let back: Value = serde_json::from_slice(&back.body).unwrap();
        let message = &back["choices"][0]["message"];
        prop_assert_eq!(message["content"].as_str().unwrap_or_default(), expected.text.as_str());
        let back_calls: Vec<(String, String, Value)> = message["tool_calls"].as_array().into_iter().flatten()
            .map(|c| (c["id"].as_str().unwrap().to_owned(), c["function"]["name"].as_str().unwrap().to_owned(),
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap()))
            .collect();
        prop_assert_eq!(back_calls, expected.calls);
        let usage: crate::wire::chat::ChatUsage = serde_json::from_value(back["usage"].clone()).unwrap();
        prop_assert_eq!(usage_tuple(&mapping::usage_from_openai(&usage)), usage_tuple(&answer.usage));
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile input: nothing panics, whatever arrives

/// JSON documents made of the words these parsers look for, in any arrangement.
fn vocabulary_json() -> impl Strategy<Value = Value> {
    let word = prop::sample::select(vec![
        "type",
        "index",
        "delta",
        "content_block",
        "message",
        "usage",
        "choices",
        "tool_calls",
        "function",
        "arguments",
        "id",
        "name",
        "text",
        "partial_json",
        "stop_reason",
        "error",
        "content",
        "role",
        "messages",
        "model",
        "max_tokens",
        "tools",
        "tool_choice",
        "system",
        "source",
        "input",
        "tool_use",
        "text_delta",
        "input_json_delta",
        "image",
        "image_url",
        "url",
        "user",
        "assistant",
        "tool",
        "input_tokens",
        "output_tokens",
        "prompt_tokens",
        "stop",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        word.clone().prop_map(Value::from),
        "data:[a-z/;,=]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(word.clone().prop_map(str::to_owned), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn sse_event() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec![
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
        "other",
    ]);
    prop_oneof![
        (prop::option::of(name), vocabulary_json()).prop_map(|(name, data)| {
            let mut event = String::new();
            if let Some(name) = name {
                event.push_str(&format!("event: {name}\n"));
            }
            event.push_str(&format!("data: {data}\n\n"));
            event.into_bytes()
        }),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|mut bytes| {
            bytes.extend_from_slice(b"\n\n");
            bytes
        }),
        Just(b"data: [DONE]\n\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn request_and_answer_parsers_never_panic_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = request::to_anthropic(&bytes, "m", 1);
        let _ = request::to_openai(&bytes, "m", request::OutputTokensField::MaxCompletionTokens);
        let _ = request::count_tokens_to_openai(&bytes, "m", request::OutputTokensField::MaxTokens);
        let _ = response::to_openai(&bytes, 1);
        let _ = response::to_anthropic(&bytes);
        let _ = response::count_tokens_from_openai(&bytes);
        let _ = error::upstream_to_openai(400, &bytes, Some("sk-secret-key"));
        let _ = error::upstream_to_anthropic(400, &bytes, Some("sk-secret-key"));
    }

    #[test]
    fn request_and_answer_parsers_never_panic_on_odd_json(doc in vocabulary_json()) {
        let bytes = doc.to_string().into_bytes();
        let _ = request::to_anthropic(&bytes, "m", 1);
        let _ = request::to_openai(&bytes, "m", request::OutputTokensField::MaxCompletionTokens);
        let _ = request::count_tokens_to_openai(&bytes, "m", request::OutputTokensField::MaxTokens);
        let _ = response::to_openai(&bytes, 1);
        let _ = response::to_anthropic(&bytes);
        let _ = response::count_tokens_from_openai(&bytes);
        let _ = error::upstream_to_openai(429, &bytes, None);
        let _ = error::upstream_to_anthropic(529, &bytes, None);
    }

    #[test]
    fn stream_translators_never_panic_and_stay_silent_once_over(
        events in prop::collection::vec(sse_event(), 0..16),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let bytes = events.concat();
        let translators: [Box<dyn Translator>; 2] = [Box::new(ToOpenAi::new(true, 1)), Box::new(ToAnthropic::new())];
        for mut translator in translators {
            let mut out = BytesMut::new();
            let mut over = false;
            for event in &events {
                let before = out.len();
                let step = translator.event(event, &mut out);
                if over {
                    prop_assert_eq!(out.len(), before, "wrote after the stream was over");
                }
                over |= step != Step::Continue;
            }
            translator.end(&mut out);
        }
        let _ = passthrough(&chunks(&bytes, &cuts));
        let _ = to_anthropic(&chunks(&bytes, &cuts));
        let _ = to_openai(false, 1, false, &chunks(&bytes, &cuts));
    }
}
