#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Properties of the Bedrock translators: no input makes one panic; a ConverseStream gives the
//! same Anthropic events however its bytes are split (at every single boundary, and at random
//! many); its text, tool input and usage are the ones sent; and any flipped byte of a message
//! ends the stream as malformed rather than as something else.

mod bedrock_support;

use aisix_gateway::wire::anthropic::stream::Step;
use aisix_gateway::wire::bedrock::frames;
use aisix_gateway::wire::bedrock::{error, request, response};
use bedrock_support::stream;
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

/// Text deltas, maybe a tool call's input in pieces, a stop reason, input and output tokens.
type Described = (Vec<String>, Option<Vec<String>>, &'static str, (u64, u64));

/// A ConverseStream: text deltas, then maybe a tool call whose input comes in pieces, a stop
/// reason and the usage.
fn converse_stream() -> impl Strategy<Value = Described> {
    (
        prop::collection::vec(text(), 1..5),
        prop::option::of(prop::collection::vec(text(), 1..4)),
        prop_oneof![
            Just("end_turn"),
            Just("max_tokens"),
            Just("tool_use"),
            Just("guardrail_intervened")
        ],
        (0u64..10_000, 0u64..10_000),
    )
}

fn frames_of(
    texts: &[String],
    tool: &Option<Vec<String>>,
    stop: &str,
    usage: (u64, u64),
) -> Vec<u8> {
    let mut bytes = frames::event("messageStart", r#"{"role":"assistant"}"#);
    for t in texts {
        bytes.extend(frames::event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"text": t}}).to_string(),
        ));
    }
    bytes.extend(frames::event(
        "contentBlockStop",
        r#"{"contentBlockIndex":0}"#,
    ));
    if let Some(pieces) = tool {
        bytes.extend(frames::event(
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}"#,
        ));
        for piece in pieces {
            bytes.extend(frames::event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": piece}}})
                    .to_string(),
            ));
        }
        bytes.extend(frames::event(
            "contentBlockStop",
            r#"{"contentBlockIndex":1}"#,
        ));
    }
    bytes.extend(frames::event(
        "messageStop",
        &json!({"stopReason": stop}).to_string(),
    ));
    bytes.extend(frames::event(
        "metadata",
        &json!({"usage": {"inputTokens": usage.0, "outputTokens": usage.1, "totalTokens": usage.0 + usage.1}}).to_string(),
    ));
    bytes
}

/// The data of each SSE event.
fn datas(events: &[u8]) -> Vec<Value> {
    String::from_utf8(events.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn a_stream_split_at_every_byte_boundary_reads_the_same((texts, tool, stop, usage) in converse_stream()) {
        let bytes = frames_of(&texts, &tool, stop, usage);
        let whole = stream([&bytes[..]]);
        prop_assert_eq!(whole.last, Step::Complete);
        for at in 0..=bytes.len() {
            let split = stream([&bytes[..at], &bytes[at..]]);
            prop_assert_eq!(&split.events, &whole.events, "split at {}", at);
            prop_assert_eq!(split.last, whole.last);
        }
        let one_by_one = stream(bytes.iter().map(std::slice::from_ref));
        prop_assert_eq!(&one_by_one.events, &whole.events);

        let events = datas(&whole.events);
        let text: String = events.iter().filter_map(|e| e.pointer("/delta/text").and_then(Value::as_str)).collect();
        prop_assert_eq!(text, texts.concat());
        let input: String = events.iter().filter_map(|e| e.pointer("/delta/partial_json").and_then(Value::as_str)).collect();
        prop_assert_eq!(input, tool.map(|p| p.concat()).unwrap_or_default());
        let usage_seen = whole.usage.unwrap();
        prop_assert_eq!(&usage_seen["prompt_tokens"], &json!(usage.0));
        prop_assert_eq!(&usage_seen["completion_tokens"], &json!(usage.1));
    }

    #[test]
    fn a_flipped_byte_in_any_message_ends_the_stream_as_malformed(
        (texts, tool, stop, usage) in converse_stream(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut bytes = frames_of(&texts, &tool, stop, usage);
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        let read = stream([&bytes[..]]);
        // CRC32 catches every single-bit error, the prelude's (its length too) and the
        // message's: the splitter never trusts a length whose CRC fails.
        prop_assert_eq!(read.last, Step::Malformed);
    }

    #[test]
    fn no_bytes_make_a_translator_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = request::from_messages(&data, "anthropic.claude-x");
        let _ = request::from_chat(&data, "amazon.nova-lite-v1:0", 4096);
        let _ = request::embeddings(&data, "amazon.titan-embed-text-v2:0");
        let _ = response::to_messages_body(&data, "msg_1", "m");
        let _ = error::upstream_to_openai(400, &data, Some("secret"));
        let _ = stream([&data[..]]);
        let text = String::from_utf8_lossy(&data);
        let mut framed = Vec::new();
        for kind in ["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"] {
            framed.extend(frames::event(kind, &text));
        }
        let _ = stream([&framed[..]]);
    }
}
