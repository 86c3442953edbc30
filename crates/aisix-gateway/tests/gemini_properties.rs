#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Properties of the Gemini translators: no input makes one panic; a stream gives the same
//! output however its bytes are split; and a stream's text, thoughts, calls and usage are the
//! whole answer's (the same events gathered into one `generateContent` answer); Vertex's
//! `:predict` answer gives each vector in order and the sum of its token counts.

use aisix_gateway::wire::anthropic::stream::Step;
use aisix_gateway::wire::gemini::stream::ToChat;
use aisix_gateway::wire::gemini::{error, request, response, vertex};
use aisix_gateway::wire::sse;
use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::{Value, json};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, newlines and multi-byte characters: what escaping must survive.
    "[a-z0-9 \"\\\\\n\u{e9}\u{1F600}]{1,12}"
}

/// One part of a candidate: text, a thought, or a function call.
fn part() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"text": t})),
        text().prop_map(|t| json!({"text": t, "thought": true})),
        ("[a-z_]{1,8}", text())
            .prop_map(|(name, v)| json!({"functionCall": {"name": name, "args": {"v": v}}})),
    ]
}

fn finish() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("STOP"),
        Just("MAX_TOKENS"),
        Just("SAFETY"),
        Just("RECITATION"),
        Just("OTHER")
    ]
}

/// Prompt, candidates, thoughts and cached token counts.
type Counts = (u64, u64, u64, u64);

/// A stream's events (each a list of parts; the last one finishes) and its final usage.
fn stream_events() -> impl Strategy<Value = (Vec<Vec<Value>>, &'static str, Counts)> {
    (
        prop::collection::vec(prop::collection::vec(part(), 0..3), 1..6),
        finish(),
        (0u64..1000, 0u64..1000, 0u64..1000, 0u64..10),
    )
}

fn usage_json(u: Counts) -> Value {
    json!({"promptTokenCount": u.0, "candidatesTokenCount": u.1, "thoughtsTokenCount": u.2,
        "cachedContentTokenCount": u.3, "totalTokenCount": u.0 + u.1 + u.2})
}

fn sse_body(events: &[Vec<Value>], finish: &str, usage: Counts) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, parts) in events.iter().enumerate() {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut event = json!({"modelVersion": "gemini-x", "responseId": "r"});
        if i + 1 == events.len() {
            candidate["finishReason"] = json!(finish);
            event["usageMetadata"] = usage_json(usage);
        }
        event["candidates"] = json!([candidate]);
        body.extend_from_slice(b"data: ");
        body.extend_from_slice(event.to_string().as_bytes());
        body.extend_from_slice(b"\r\n\r\n");
    }
    body
}

/// Feeds `pieces` through a [`ToChat`] as the relay does: complete events only.
fn run<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Vec<u8>, Step) {
    let mut to_chat = ToChat::new(true, 1, None);
    let (mut pending, mut out) = (Vec::new(), BytesMut::new());
    let mut last = Step::Continue;
    for piece in pieces {
        pending.extend_from_slice(piece);
        let mut at = 0;
        while let Some(len) = sse::event_end(&pending[at..]) {
            last = to_chat.event(&pending[at..at + len], &mut out);
            at += len;
            if last != Step::Continue {
                return (out.to_vec(), last);
            }
        }
        pending.drain(..at);
    }
    (out.to_vec(), last)
}

/// What an OpenAI stream adds up to: text, reasoning, calls (name, arguments), finish, usage.
fn gathered(out: &[u8]) -> (String, String, Vec<(String, String)>, Option<String>, Value) {
    let (mut text, mut reasoning, mut calls, mut finish, mut usage) =
        (String::new(), String::new(), Vec::new(), None, Value::Null);
    for event in String::from_utf8(out.to_vec()).unwrap().split("\n\n") {
        let Some(data) = event.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        text.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        reasoning.push_str(
            choice["delta"]["reasoning_content"]
                .as_str()
                .unwrap_or_default(),
        );
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            calls.push((
                call["function"]["name"].as_str().unwrap().to_owned(),
                call["function"]["arguments"].as_str().unwrap().to_owned(),
            ));
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = Some(reason.to_owned());
        }
    }
    (text, reasoning, calls, finish, usage)
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn a_predict_answer_gives_each_vector_in_order_and_the_sum_of_its_token_counts(
        predictions in prop::collection::vec(
            (prop::collection::vec(-1.0e3f32..1.0e3, 1..8), 0u32..10_000), 1..6),
    ) {
        let texts: Vec<String> = (0..predictions.len()).map(|i| format!("t{i}")).collect();
        let sent = vertex::embeddings(json!({"input": texts}).to_string().as_bytes()).unwrap();
        let answer = json!({"predictions": predictions.iter().map(|(values, count)| json!({
            "embeddings": {"values": values, "statistics": {"token_count": count, "truncated": false}}
        })).collect::<Vec<_>>()});
        let out = vertex::embeddings_to_openai(answer.to_string().as_bytes(), "m", &sent).unwrap();
        let list: Value = serde_json::from_slice(&out.body).unwrap();
        let total: u64 = predictions.iter().map(|(_, count)| u64::from(*count)).sum();
        prop_assert_eq!(out.usage.prompt_tokens, total);
        prop_assert_eq!(&list["usage"]["prompt_tokens"], &json!(total));
        for (i, (values, _)) in predictions.iter().enumerate() {
            let got: Vec<f32> = serde_json::from_value(list["data"][i]["embedding"].clone()).unwrap();
            prop_assert_eq!(&got, values);
            prop_assert_eq!(&list["data"][i]["index"], &json!(i));
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn no_bytes_make_a_gemini_translator_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = request::from_chat(&bytes);
        let _ = request::embeddings(&bytes, "models/m");
        let _ = response::to_chat(&bytes, 1, "");
        let _ = response::embeddings_to_openai(&bytes, "m", true);
        let _ = error::upstream_to_openai(429, &bytes, Some("secret-key"));
        let _ = vertex::count_tokens(&bytes);
        if let Ok(sent) = vertex::embeddings(&bytes) {
            let _ = vertex::embeddings_to_openai(&bytes, "m", &sent);
        }
        let sent = vertex::embeddings(br#"{"input":["a","b"]}"#).unwrap();
        let _ = vertex::embeddings_to_openai(&bytes, "m", &sent);
        let mut framed = b"data: ".to_vec();
        framed.extend_from_slice(&bytes);
        framed.extend_from_slice(b"\n\n");
        let _ = run([&bytes[..], &framed[..]]);
    }

    #[test]
    fn no_json_shape_makes_a_gemini_translator_panic(
        parts in prop::collection::vec(part(), 0..4),
        noise in prop_oneof![Just(json!(null)), Just(json!(7)), Just(json!("x")), Just(json!([])), Just(json!({}))],
    ) {
        let shapes = [
            json!({"candidates": [{"content": {"parts": parts}}], "usageMetadata": noise}),
            json!({"candidates": noise, "promptFeedback": {"blockReason": "SAFETY"}}),
            json!({"candidates": [{"content": noise, "finishReason": "STOP"}]}),
            json!({"messages": [{"role": "user", "content": noise}], "model": "m"}),
            json!({"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}], "model": "m"}),
        ];
        for shape in shapes {
            let bytes = shape.to_string().into_bytes();
            let _ = request::from_chat(&bytes);
            let _ = response::to_chat(&bytes, 1, "");
            let mut event = b"data: ".to_vec();
            event.extend_from_slice(&bytes);
            event.extend_from_slice(b"\n\n");
            let _ = run([&event[..]]);
        }
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn a_stream_translates_the_same_however_its_bytes_are_split(
        (events, finish, usage) in stream_events(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let body = sse_body(&events, finish, usage);
        let (whole, last) = run([&body[..]]);
        prop_assert_eq!(last, Step::Complete);
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        at.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for cut in at {
            pieces.push(&body[from..cut]);
            from = cut;
        }
        pieces.push(&body[from..]);
        let (split, _) = run(pieces);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn a_stream_adds_up_to_the_whole_answer_of_the_same_parts(
        (events, finish, usage) in stream_events(),
    ) {
        let body = sse_body(&events, finish, usage);
        let (out, _) = run([&body[..]]);
        let streamed = gathered(&out);
        let all: Vec<Value> = events.concat();
        let answer = json!({"candidates": [{"content": {"role": "model", "parts": all}, "finishReason": finish, "index": 0}],
            "usageMetadata": usage_json(usage), "modelVersion": "gemini-x", "responseId": "r"});
        let whole = response::to_chat(answer.to_string().as_bytes(), 1, "").unwrap();
        let whole: Value = serde_json::from_slice(&whole.body).unwrap();
        let message = &whole["choices"][0]["message"];
        prop_assert_eq!(&streamed.0, message["content"].as_str().unwrap_or_default());
        prop_assert_eq!(&streamed.1, message["reasoning_content"].as_str().unwrap_or_default());
        let calls: Vec<(String, String)> = message["tool_calls"].as_array().into_iter().flatten()
            .map(|c| (c["function"]["name"].as_str().unwrap().to_owned(), c["function"]["arguments"].as_str().unwrap().to_owned()))
            .collect();
        prop_assert_eq!(&streamed.2, &calls);
        prop_assert_eq!(streamed.3.as_deref(), whole["choices"][0]["finish_reason"].as_str());
        prop_assert_eq!(&streamed.4, &whole["usage"]);
    }
}
