//! Golden files for every translation to and from Google's Gemini API: chat requests (and
//! Anthropic Messages requests through chat), whole answers, streams, embeddings and error
//! bodies, and Vertex AI's own forms (`:predict` embeddings, the `countTokens` body). Inputs are `tests/golden/gemini/<kind>/<case>.in.*`; the expected outputs sit
//! beside each (`<case>.out.*` for an OpenAI client, `<case>.anthropic.*` for an Anthropic
//! one; JSON compared as values, SSE byte for byte). Streams go through the relay's own path
//! with the adapter's [`GeminiStream`], so an error event in an expected file is the one
//! clients get.

use std::path::PathBuf;

use serde_json::json;

use super::Diffs;
use crate::provider::StreamMap;
use crate::provider::gemini::GeminiStream;
use crate::testing;
use crate::wire::Dialect;
use crate::wire::anthropic::request::{self as anthropic_request, OutputTokensField};
use crate::wire::anthropic::response as anthropic_response;
use crate::wire::gemini::{error, request, response, vertex};

/// The `created` time the translations to OpenAI report.
const CREATED: u64 = 1_700_000_000;

/// Every `<case>.in.<ext>` of `dir` (under `tests/golden/gemini`), sorted, with its bytes.
fn cases(dir: &str, ext: &str) -> Vec<(String, PathBuf, Vec<u8>)> {
    super::cases(&format!("gemini/{dir}"), ext)
}

#[test]
fn chat_requests_translate_to_gemini_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("request", "json") {
        let translated = request::from_chat(&input).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn anthropic_requests_translate_to_gemini_through_chat_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("request_anthropic", "json") {
        let chat = anthropic_request::to_openai(
            &input,
            "gemini-upstream",
            OutputTokensField::MaxCompletionTokens,
        )
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let translated = request::from_chat(&chat.body).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn gemini_answers_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("response", "json") {
        let answer =
            response::to_chat(&input, CREATED, "").unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", answer.body.to_vec(), true);
        let usage = serde_json::to_vec(&answer.usage).unwrap();
        diffs.expect(&path, "usage.json", usage, true);
        let message = anthropic_response::to_anthropic(&answer.body)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "anthropic.json", message.body.to_vec(), true);
    }
    diffs.check();
}

/// A Gemini stream (its body arriving as `chunks`) relayed to a client of `dialect`: the
/// client's bytes, and a report of whether it completed and the usage it read.
fn relayed(dialect: Dialect, chunks: &[&[u8]]) -> (Vec<u8>, serde_json::Value) {
    let anthropic = dialect == Dialect::Anthropic;
    let map = GeminiStream::new(true, CREATED, None, anthropic);
    let relayed = testing::relay(StreamMap::Gemini(Box::new(map)), dialect, chunks);
    // What settles the request: the usage reported, else the output the relay counted.
    let usage = relayed.events.usage();
    let produced = relayed.events.map().produced();
    let report = json!({"complete": relayed.complete, "usage": usage, "produced": produced});
    (relayed.out, report)
}

#[test]
fn gemini_streams_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("stream", "sse") {
        let (openai, report) = relayed(Dialect::OpenAi, &[&input]);
        diffs.expect(&path, "out.sse", openai, false);
        diffs.expect(&path, "report.json", report.to_string().into_bytes(), true);
        let (anthropic, anthropic_report) = relayed(Dialect::Anthropic, &[&input]);
        diffs.expect(&path, "anthropic.sse", anthropic, false);
        assert_eq!(
            report["complete"],
            anthropic_report["complete"],
            "{}: the two clients' streams end alike",
            path.display()
        );
    }
    diffs.check();
}

#[test]
fn embeddings_translate_both_ways_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("embeddings", "json") {
        let translated = request::embeddings(&input, "models/text-embedding-004")
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
        let answer = std::fs::read(path.with_file_name(format!("{name}.answer.json"))).unwrap();
        let list = response::embeddings_to_openai(&answer, "text-embedding-004", translated.base64)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "list.json", list.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn vertex_predict_embeddings_translate_both_ways_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("vertex_embeddings", "json") {
        let sent = vertex::embeddings(&input).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", sent.body.to_vec(), true);
        let answer = std::fs::read(path.with_file_name(format!("{name}.answer.json"))).unwrap();
        let list = vertex::embeddings_to_openai(&answer, "text-embedding-005", &sent)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "list.json", list.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn anthropic_count_tokens_requests_become_vertex_count_tokens_bodies_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("vertex_count_tokens", "json") {
        let chat = anthropic_request::count_tokens_to_openai(
            &input,
            "gemini-2.5-flash",
            OutputTokensField::MaxCompletionTokens,
        )
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let body = vertex::count_tokens(&chat).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn gemini_errors_become_openai_envelopes_with_the_key_masked() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("error", "json") {
        let status = if name.contains("exhausted") { 429 } else { 400 };
        let body = error::upstream_to_openai(status, &input, Some("AIzaSECRETKEY123"))
            .unwrap_or_else(|| panic!("{name}: not a Gemini error"));
        assert!(!String::from_utf8_lossy(&body).contains("AIzaSECRETKEY123"));
        diffs.expect(&path, "out.json", body.to_vec(), true);
    }
    diffs.check();
}
