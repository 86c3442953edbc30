//! Properties of the Responses translation: no bytes make a parser panic (requests, whole
//! answers, stream events), and a chat stream of any text and tool calls, however its bytes are
//! split, translates to the same Responses events, numbered from 0 without a gap: streams
//! through the relay's own path.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::wire::responses::object::Echo;
use crate::wire::responses::{answer, event, request};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn echo() -> Echo {
    Echo {
        id: "resp_p".into(),
        created_at: 1,
        model: "m".into(),
        request: Map::new(),
    }
}

/// Relays `chunks` to a Responses client; the events it got, in order.
fn translate(chunks: &[&[u8]]) -> Vec<u8> {
    super::to_responses(echo(), false, chunks)
}

/// Ids minted by the translator, made comparable between runs.
fn stable(bytes: &[u8]) -> Vec<Value> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    text.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| {
            let mut value: Value = serde_json::from_str(data).unwrap();
            for key in ["item_id"] {
                if value.get(key).is_some() {
                    value[key] = json!("id");
                }
            }
            if let Some(item) = value.get_mut("item") {
                item["id"] = json!("id");
            }
            if let Some(output) = value
                .pointer_mut("/response/output")
                .and_then(Value::as_array_mut)
            {
                for item in output {
                    item["id"] = json!("id");
                }
            }
            value
        })
        .collect()
}

/// A chat stream: text pieces, then tool calls (name and argument pieces), then a finish.
fn chat_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec("[a-z \"\\\\\u{e9}]{1,6}", 0..5),
        prop::collection::vec(("[a-z_]{1,6}", prop::collection::vec("[a-z{}\":,]{1,5}", 0..3)), 0..3),
        prop::bool::ANY,
    )
        .prop_map(|(texts, calls, done)| {
            let mut out = String::new();
            let mut chunk = |delta: Value, finish: Value| {
                let data = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                out.push_str(&format!("data: {data}\n\n"));
            };
            for text in texts {
                chunk(json!({"content": text}), Value::Null);
            }
            for (i, (name, pieces)) in calls.into_iter().enumerate() {
                chunk(json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "function": {"name": name, "arguments": ""}}]}), Value::Null);
                for piece in pieces {
                    chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}), Value::Null);
                }
            }
            chunk(json!({}), json!("stop"));
            if done {
                out.push_str("data: [DONE]\n\n");
            }
            out.into_bytes()
        })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn no_bytes_make_a_responses_parser_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = request::to_chat(&bytes, "m", &[], true);
        let _ = answer::from_chat(&bytes, &echo());
        let _ = event::reported(&bytes);
        let _ = event::identity(&bytes);
        let _ = event::response_usage(&bytes);
        let mut framed = b"data: ".to_vec();
        framed.extend_from_slice(&bytes);
        framed.extend_from_slice(b"\n\n");
        let _ = translate(&[&bytes, &framed]);
    }

    #[test]
    fn a_chat_stream_translates_the_same_however_it_is_split(stream in chat_stream(), cut in any::<prop::sample::Index>()) {
        let whole = translate(&[&stream]);
        let at = cut.index(stream.len() + 1);
        let (a, b) = stream.split_at(at);
        prop_assert_eq!(stable(&translate(&[a, b])), stable(&whole));
        let events = stable(&whole);
        for (i, event) in events.iter().enumerate() {
            prop_assert_eq!(&event["sequence_number"], &json!(i));
        }
        prop_assert!(events.last().unwrap()["type"] == "response.completed");
    }
}
