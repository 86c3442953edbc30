#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Golden files for every translation to and from Google's Gemini API: chat requests (and
//! Anthropic Messages requests through chat), whole answers, streams, embeddings and error
//! bodies. Inputs are `tests/golden/gemini/<kind>/<case>.in.*`; the expected outputs sit
//! beside each (`<case>.out.*` for an OpenAI client, `<case>.anthropic.*` for an Anthropic
//! one; JSON compared as values, SSE byte for byte).
//!
//! After a deliberate change, `AISIX_BLESS=1 cargo test -p aisix-gateway --test
//! gemini_golden` rewrites the expected files; review the diff before committing it.

use std::path::{Path, PathBuf};

use aisix_gateway::wire::anthropic::request::OutputTokensField;
use aisix_gateway::wire::anthropic::stream::{Step, ToAnthropic, Translator};
use aisix_gateway::wire::anthropic::{
    request as anthropic_request, response as anthropic_response,
};
use aisix_gateway::wire::gemini::stream::ToChat;
use aisix_gateway::wire::gemini::{error, request, response};
use aisix_gateway::wire::sse;
use bytes::BytesMut;
use serde_json::Value;

const CREATED: u64 = 1_700_000_000;

fn golden(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/gemini")
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
fn chat_requests_translate_to_gemini_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("request", "json") {
        let translated = request::from_chat(&input).unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
    }
    diffs.check();
}

#[test]
fn anthropic_requests_translate_to_gemini_through_chat_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("request_anthropic", "json") {
        let chat = anthropic_request::to_openai(
            &input,
            "gemini-upstream",
            OutputTokensField::MaxCompletionTokens,
        )
        .unwrap();
        let translated = request::from_chat(&chat.body).unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
    }
    diffs.check();
}

#[test]
fn gemini_answers_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("response", "json") {
        let answer = response::to_chat(&input, CREATED, "").unwrap();
        diffs.expect(&path, "out.json", &answer.body, true);
        diffs.expect(
            &path,
            "usage.json",
            &serde_json::to_vec(&answer.usage).unwrap(),
            true,
        );
        let message = anthropic_response::to_anthropic(&answer.body).unwrap();
        diffs.expect(&path, "anthropic.json", &message.body, true);
    }
    diffs.check();
}

/// What a stream came to: the client's bytes, whether it completed, and the usage.
pub struct Streamed {
    pub out: Vec<u8>,
    pub last: Step,
    pub usage: Option<Value>,
}

/// Feeds `chunks` through a [`ToChat`] (and on through a [`ToAnthropic`] when `anthropic`),
/// splitting them into complete events as the relay does.
pub fn stream<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, anthropic: bool) -> Streamed {
    let mut to_chat = ToChat::new(true, CREATED, None);
    let mut to_anthropic = ToAnthropic::new();
    let (mut pending, mut out, mut chat) = (Vec::new(), BytesMut::new(), BytesMut::new());
    let mut last = Step::Continue;
    'read: for chunk in chunks {
        pending.extend_from_slice(chunk);
        let mut at = 0;
        while let Some(len) = sse::event_end(&pending[at..]) {
            last = to_chat.event(&pending[at..at + len], &mut chat);
            at += len;
            if anthropic {
                let chunks = chat.split();
                let mut rest = &chunks[..];
                while let Some(end) = sse::event_end(rest) {
                    to_anthropic.event(&rest[..end], &mut out);
                    rest = &rest[end..];
                }
            } else {
                out.extend_from_slice(&chat.split());
            }
            if last != Step::Continue {
                break 'read;
            }
        }
        pending.drain(..at);
    }
    Streamed {
        out: out.to_vec(),
        last,
        usage: to_chat
            .usage()
            .map(|u| serde_json::to_value(u.to_usage()).unwrap()),
    }
}

#[test]
fn gemini_streams_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("stream", "sse") {
        let openai = stream([&input[..]], false);
        diffs.expect(&path, "out.sse", &openai.out, false);
        let report =
            serde_json::json!({"last": format!("{:?}", openai.last), "usage": openai.usage});
        diffs.expect(&path, "report.json", report.to_string().as_bytes(), true);
        let anthropic = stream([&input[..]], true);
        diffs.expect(&path, "anthropic.sse", &anthropic.out, false);
    }
    diffs.check();
}

#[test]
fn embeddings_translate_both_ways_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("embeddings", "json") {
        let translated = request::embeddings(&input, "models/text-embedding-004").unwrap();
        diffs.expect(&path, "out.json", &translated.body, true);
        let answer_path = path.with_file_name(
            path.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .replace(".in.json", ".answer.json"),
        );
        let answer = std::fs::read(answer_path).unwrap();
        let list = response::embeddings_to_openai(&answer, "text-embedding-004", translated.base64)
            .unwrap();
        diffs.expect(&path, "list.json", &list.body, true);
    }
    diffs.check();
}

#[test]
fn gemini_errors_become_openai_envelopes_with_the_key_masked() {
    let mut diffs = Diffs::default();
    for (path, input) in cases("error", "json") {
        let status = if path.to_str().unwrap().contains("exhausted") {
            429
        } else {
            400
        };
        let body = error::upstream_to_openai(status, &input, Some("AIzaSECRETKEY123")).unwrap();
        assert!(!String::from_utf8_lossy(&body).contains("AIzaSECRETKEY123"));
        diffs.expect(&path, "out.json", &body, true);
    }
    diffs.check();
}
