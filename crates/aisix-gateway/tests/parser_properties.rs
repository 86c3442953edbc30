#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Properties of every parser on the OpenAI request path (issue 15): the body inspector, the
//! SSE splitter, the usage scan of a relayed answer and the streaming `model` rename. No input
//! makes one panic, and a parser fed in pieces gives what it gives on the whole input, however
//! the input is split. Each also has a `cargo fuzz` target in `fuzz/` (README, "Fuzzing").

use aisix_gateway::wire::rename::Renamer;
use aisix_gateway::wire::usage::{self, UsageWindow};
use aisix_gateway::wire::{Dialect, chunk, openai, sse};
use bytes::Bytes;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `bytes` cut at `cuts` (positions taken modulo its length, in order).
fn pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| if bytes.is_empty() { 0 } else { c % bytes.len() })
        .collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for cut in at.into_iter().chain(std::iter::once(bytes.len())) {
        out.push(bytes[from..cut].to_vec());
        from = cut;
    }
    out
}

/// Bytes that look like what each parser reads, with garbage mixed in.
fn json_ish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"\"model\"".to_vec()),
        Just(b"\"usage\"".to_vec()),
        Just(b"\"stream\"".to_vec()),
        Just(b"\"stream_options\"".to_vec()),
        Just(b"{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}".to_vec()),
        Just(b":".to_vec()),
        Just(b",".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\"gpt-x\"".to_vec()),
        Just(b"true".to_vec()),
        Just(b"null".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// A chat completion of some size with its usage somewhere, and a name in `model`.
fn answer() -> impl Strategy<Value = Vec<u8>> {
    (
        "[a-z0-9\\-]{1,20}",
        "[a-z \"\\\\\u{e9}]{0,40}",
        0usize..40_000,
        any::<bool>(),
        0u64..1000,
    )
        .prop_map(|(model, text, filler, usage_first, tokens)| {
            let usage = format!(
                r#""usage":{{"prompt_tokens":{tokens},"completion_tokens":1,"total_tokens":{}}}"#,
                tokens + 1
            );
            let content = serde_json::to_string(&format!("{text}{}", "a".repeat(filler))).unwrap();
            let choices = format!(r#""choices":[{{"message":{{"content":{content}}}}}]"#);
            let (first, second) = if usage_first {
                (usage, choices)
            } else {
                (choices, usage)
            };
            format!(r#"{{"id":"x","model":"{model}",{first},{second}}}"#).into_bytes()
        })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_body_inspector_never_panics_and_reads_what_serde_reads(body in json_ish()) {
        let inspected = openai::inspect(&body);
        if let Ok(inspected) = inspected {
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            prop_assert_eq!(value["model"].as_str(), Some(inspected.model.as_str()));
        }
    }

    #[test]
    fn the_sse_splitter_finds_the_same_events_however_the_stream_is_cut(
        stream in json_ish(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        // An event ending in a CR whose LF is in the next piece ends at the CR; the LF is then
        // skipped as the rest of that CRLF. Counted the same: past the LF.
        let settled = |ends: Vec<usize>| -> Vec<usize> {
            ends.into_iter()
                .map(|end| {
                    let split_crlf = end < stream.len() && stream[end - 1] == b'\r' && stream[end] == b'\n';
                    if split_crlf { end + 1 } else { end }
                })
                .collect()
        };
        let ends_of = |parts: Vec<Vec<u8>>| -> Vec<usize> {
            let mut ends = Vec::new();
            let mut splitter = sse::Splitter::default();
            let mut offset = 0;
            for piece in parts {
                let mut from = 0;
                while let Some(len) = splitter.next_end(&piece[from..]) {
                    from += len;
                    ends.push(offset + from);
                }
                offset += piece.len();
            }
            ends
        };
        let whole = ends_of(vec![stream.clone()]);
        let split = ends_of(pieces(&stream, &cuts));
        prop_assert_eq!(settled(split), settled(whole));
    }

    #[test]
    fn a_relayed_answer_s_usage_is_the_whole_answer_s_however_it_is_cut(
        body in answer(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut window = UsageWindow::new(Some(Dialect::OpenAi));
        for piece in pieces(&body, &cuts) {
            window.push(&piece);
        }
        prop_assert_eq!(window.usage(), usage::from_response(&body));
        prop_assert!(window.usage().is_some());
    }

    #[test]
    fn the_usage_scan_never_panics_on_garbage(
        body in json_ish(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut window = UsageWindow::new(Some(Dialect::OpenAi));
        for piece in pieces(&body, &cuts) {
            window.push(&piece);
        }
        let _ = window.usage();
        let _ = usage::from_response(&body);
    }

    #[test]
    fn the_streaming_rename_gives_the_whole_answer_s_rename_however_it_is_cut(
        body in prop_oneof![answer(), json_ish()],
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let name: &[u8] = br#""primary""#;
        let expected = chunk::with_model(&body, name).unwrap_or_else(|| body.clone());
        let mut renamer = Renamer::new(Bytes::from_static(br#""primary""#));
        let mut out = Vec::new();
        for piece in pieces(&body, &cuts) {
            out.extend_from_slice(&renamer.push(Bytes::from(piece)));
        }
        out.extend_from_slice(&renamer.finish());
        prop_assert_eq!(out, expected);
    }
}
