//! Golden files for the translation of OpenAI's Responses API to and from chat completions:
//! requests (Responses → chat), whole answers and streams (chat → Responses). Inputs are
//! `tests/golden/responses/<kind>/<case>.in.*`; the expected output sits beside each as
//! `<case>.out.*` (JSON compared as values, SSE byte for byte after the random item ids are
//! replaced by their order of appearance). A request case whose translation is refused has a
//! `<case>.out.json` holding `{"refused": message, "param": field}`. Streams go through the
//! relay's own path, so a stream's `response.failed` is the one clients get.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::Diffs;
use crate::wire::responses::answer;
use crate::wire::responses::object::Echo;
use crate::wire::responses::request::{self, RequestError};

const UPSTREAM_MODEL: &str = "chat-upstream";

/// Every `<case>.in.<ext>` of `dir` (under `tests/golden/responses`), sorted, with its bytes.
fn cases(dir: &str, ext: &str) -> Vec<(String, PathBuf, Vec<u8>)> {
    super::cases(&format!("responses/{dir}"), ext)
}

/// `text` with every id the translator minted (`msg_…`, `fc_…`, `call_…` of 32 hex digits)
/// replaced by its prefix and its order of appearance.
fn stable_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut seen: Vec<String> = Vec::new();
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for prefix in ["msg_", "fc_", "call_"] {
            if let Some(tail) = rest.strip_prefix(prefix)
                && tail.len() >= 32
                && tail.as_bytes()[..32].iter().all(u8::is_ascii_hexdigit)
                && !tail
                    .as_bytes()
                    .get(32)
                    .is_some_and(u8::is_ascii_alphanumeric)
            {
                let id = &rest[..prefix.len() + 32];
                let n = match seen.iter().position(|s| s == id) {
                    Some(n) => n,
                    None => {
                        seen.push(id.to_owned());
                        seen.len() - 1
                    }
                };
                out.push_str(&format!("{prefix}gen{n}"));
                rest = &rest[prefix.len() + 32..];
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn echo(request: &[u8]) -> Echo {
    let request: Map<String, Value> = serde_json::from_slice(request).unwrap_or_default();
    Echo {
        id: "resp_golden".into(),
        created_at: 1_700_000_000,
        model: UPSTREAM_MODEL.into(),
        request,
    }
}

/// The Responses request a whole-answer or stream case answers: `<case>.request.json` if
/// present, else a plain one.
fn request_of(path: &Path) -> Vec<u8> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let case = name.split(".in.").next().unwrap();
    std::fs::read(path.with_file_name(format!("{case}.request.json")))
        .unwrap_or_else(|_| br#"{"model":"m","input":"Hi"}"#.to_vec())
}

#[test]
fn responses_requests_translate_to_chat_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, bytes) in cases("request", "json") {
        let got = match request::to_chat(&bytes, UPSTREAM_MODEL, &[], true) {
            Ok(chat) => serde_json::from_slice(&chat.body).unwrap(),
            Err(RequestError::Invalid(message, param)) => {
                json!({"refused": message, "param": param})
            }
            Err(RequestError::InvalidJson(message)) => json!({"invalid_json": message}),
        };
        diffs.expect(&path, "out.json", serde_json::to_vec(&got).unwrap(), true);
    }
    diffs.check();
}

#[test]
fn chat_answers_translate_to_responses_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, bytes) in cases("answer", "json") {
        let answer = answer::from_chat(&bytes, &echo(&request_of(&path))).unwrap();
        let text = stable_ids(std::str::from_utf8(&answer.body).unwrap());
        let got: Value = serde_json::from_str(&text).unwrap();
        diffs.expect(&path, "out.json", serde_json::to_vec(&got).unwrap(), true);
    }
    diffs.check();
}

/// Relays a chat stream (its body arriving as `chunks`) to a Responses client.
fn translate(request: &[u8], chunks: &[&[u8]]) -> String {
    String::from_utf8(super::to_responses(echo(request), false, chunks)).unwrap()
}

#[test]
fn chat_streams_translate_to_responses_events_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, bytes) in cases("stream", "sse") {
        let got = stable_ids(&translate(&request_of(&path), &[&bytes]));
        diffs.expect(&path, "out.sse", got.into_bytes(), false);
    }
    diffs.check();
}

#[test]
fn a_stream_split_anywhere_translates_the_same() {
    for (_, path, bytes) in cases("stream", "sse") {
        let request = request_of(&path);
        let whole = stable_ids(&translate(&request, &[&bytes]));
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            assert_eq!(
                stable_ids(&translate(&request, &[a, b])),
                whole,
                "{} split at {at}",
                path.display()
            );
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(stable_ids(&translate(&request, &bytewise)), whole);
    }
}

#[test]
fn an_anthropic_error_event_fails_a_responses_stream_with_the_upstream_s_words() {
    let stream = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded, key sk-golden-key\"}}\n\n",
    );
    let out = super::to_responses(echo(b"{}"), true, &[stream]);
    let out = String::from_utf8(out).unwrap();
    let last = out.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: response.failed\n"), "{out}");
    let data: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
    assert_eq!(data["response"]["error"]["code"], "server_error");
    assert_eq!(
        data["response"]["error"]["message"], "Overloaded, key ***",
        "the upstream's words, the key masked"
    );
    assert_eq!(out.matches("event: error").count(), 0, "{out}");
}
