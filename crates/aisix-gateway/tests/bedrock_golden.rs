#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Golden files for every translation to and from Amazon Bedrock: Anthropic Messages requests
//! (and chat requests through Messages) to Converse, whole answers, ConverseStream messages,
//! InvokeModel embeddings and error bodies. Inputs are `tests/golden/bedrock/<kind>/<case>.in.*`;
//! a stream's input is one JSON line per event-stream message (`event` or `exception` with its
//! `payload`; `corrupt` flips a byte so its CRC fails), framed here with `aws-smithy-eventstream`.
//! Expected outputs sit beside each (`<case>.out.*` for an OpenAI client, `<case>.anthropic.*`
//! for an Anthropic one; JSON compared as values, SSE byte for byte).
//!
//! After a deliberate change, `AISIX_BLESS=1 cargo test -p aisix-gateway --test
//! bedrock_golden` rewrites the expected files; review the diff before committing it.

use std::path::{Path, PathBuf};

use aisix_gateway::wire::anthropic::request::DEFAULT_MAX_TOKENS;
use aisix_gateway::wire::anthropic::response as anthropic_response;
use aisix_gateway::wire::anthropic::stream::{Step, ToOpenAi, Translator};
use aisix_gateway::wire::bedrock::request::EmbeddingFamily;
use aisix_gateway::wire::bedrock::{error, request, response};
use aisix_gateway::wire::sse;
use bytes::BytesMut;
use serde_json::Value;

mod bedrock_support;

use bedrock_support::{MODEL, framed, stream};

const CREATED: u64 = 1_700_000_000;

fn golden(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/bedrock")
        .join(dir)
}

fn bless() -> bool {
    std::env::var_os("AISIX_BLESS").is_some_and(|v| v == "1")
}

/// Every `<case>.in.<ext>` of `dir`, sorted, with its path and bytes.
fn cases(dir: &str, ext: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let suffix = format!(".in.{ext}");
    let mut cases: Vec<_> = std::fs::read_dir(golden(dir))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix))
        })
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no golden cases in {dir}");
    cases
}

/// Mismatches of one test, reported together at its end.
#[derive(Default)]
struct Diffs(Vec<String>);

impl Diffs {
    fn expect(&mut self, input: &Path, suffix: &str, actual: &[u8], as_json: bool) {
        let name = input.file_name().unwrap().to_str().unwrap();
        let stem = name.split(".in.").next().unwrap();
        let path = input.with_file_name(format!("{stem}.{suffix}"));
        let actual = if as_json {
            let value: Value = serde_json::from_slice(actual).unwrap_or_else(|e| {
                panic!(
                    "{name}: not JSON ({e}): {}",
                    String::from_utf8_lossy(actual)
                )
            });
            let mut pretty = serde_json::to_vec_pretty(&value).unwrap();
            pretty.push(b'\n');
            pretty
        } else {
            actual.to_vec()
        };
        if bless() {
            std::fs::write(&path, &actual).unwrap();
            return;
        }
        let Ok(expected) = std::fs::read(&path) else {
            self.0.push(format!(
                "{}: missing (run with AISIX_BLESS=1)",
                path.display()
            ));
            return;
        };
        let same = if as_json {
            serde_json::from_slice::<Value>(&expected).ok()
                == serde_json::from_slice::<Value>(&actual).ok()
        } else {
            expected == actual
        };
        if !same {
            self.0.push(format!(
                "{}:\n--- expected\n{}\n--- actual\n{}",
                path.display(),
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&actual)
            ));
        }
    }

    fn check(self) {
        assert!(
            self.0.is_empty(),
            "golden mismatches:\n{}",
            self.0.join("\n\n")
        );
    }
}

#[test]
fn messages_requests_translate_to_converse_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("request", "json") {
        let translated = request::from_messages(&input, MODEL).unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
    }
    diffs.check();
}

#[test]
fn chat_requests_translate_to_converse_through_messages_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("request_chat", "json") {
        let translated = request::from_chat(&input, MODEL, DEFAULT_MAX_TOKENS).unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
    }
    diffs.check();
}

#[test]
fn converse_answers_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("response", "json") {
        let (message, usage) = response::to_messages_body(&input, "msg_req-1", MODEL).unwrap();
        diffs.expect(&path, "anthropic.json", &message, true);
        let answer = anthropic_response::to_openai(&message, CREATED).unwrap();
        diffs.expect(&path, "out.json", &answer.body, true);
        diffs.expect(
            &path,
            "usage.json",
            &serde_json::to_vec(&usage.to_usage()).unwrap(),
            true,
        );
    }
    diffs.check();
}

/// Anthropic's events on to OpenAI chunks, as an OpenAI client gets them.
fn to_openai(events: &[u8]) -> Vec<u8> {
    let mut translator = ToOpenAi::new(true, CREATED);
    let mut out = BytesMut::new();
    let mut rest = events;
    while let Some(end) = sse::event_end(rest) {
        if translator.event(&rest[..end], &mut out) != Step::Continue {
            break;
        }
        rest = &rest[end..];
    }
    out.to_vec()
}

#[test]
fn converse_streams_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("stream", "jsonl") {
        let bytes = framed(&input);
        let streamed = stream([&bytes[..]]);
        diffs.expect(&path, "anthropic.sse", &streamed.events, false);
        let report =
            serde_json::json!({"last": format!("{:?}", streamed.last), "usage": streamed.usage});
        diffs.expect(&path, "report.json", report.to_string().as_bytes(), true);
        diffs.expect(&path, "out.sse", &to_openai(&streamed.events), false);
    }
    diffs.check();
}

#[test]
fn embeddings_translate_both_ways_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("embeddings", "json") {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let model = if name.starts_with("titan") {
            "amazon.titan-embed-text-v2:0"
        } else {
            "cohere.embed-english-v3"
        };
        let translated = request::embeddings(&input, model).unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
        let answer =
            std::fs::read(path.with_file_name(name.replace(".in.json", ".answer.json"))).unwrap();
        assert_eq!(translated.family, EmbeddingFamily::of(model).unwrap());
        let (list, _) =
            response::embeddings_to_openai(&answer, translated.family, model, translated.base64)
                .unwrap();
        diffs.expect(&path, "list.json", &list, true);
    }
    diffs.check();
}

#[test]
fn bedrock_errors_become_each_clients_envelope_with_the_secret_masked() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("error", "json") {
        let status = if path.to_str().unwrap().contains("throttling") {
            429
        } else {
            400
        };
        let secret = Some("AKIAMOCKBEDROCK1-secret");
        let openai = error::upstream_to_openai(status, &input, secret).unwrap();
        assert!(!String::from_utf8_lossy(&openai).contains("AKIAMOCKBEDROCK1-secret"));
        diffs.expect(&path, "out.json", &openai, true);
        let anthropic = error::upstream_to_anthropic(status, &input, secret).unwrap();
        diffs.expect(&path, "anthropic.json", &anthropic, true);
    }
    diffs.check();
}
