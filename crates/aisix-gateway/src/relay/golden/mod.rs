//! Golden files and properties of the translations between dialects (OpenAI chat, Anthropic
//! Messages, the Responses API, Gemini). A stream runs through the path its client gets: the upstream
//! body read by [`crate::provider::events::Events`] through the adapter's [`StreamMap`], ended as the
//! relay ends it ([`testing::relay`]). Requests, whole answers and error bodies go through the
//! wire functions the adapters call.
//!
//! After a deliberate change, `AISIX_BLESS=1 cargo test -p aisix-gateway --lib golden`
//! rewrites the expected files; review the diff before committing it.

mod anthropic;
mod anthropic_properties;
mod gemini;
mod responses;
mod responses_properties;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::provider::StreamMap;
use crate::provider::responses::{ResponsesStream, ToChatChunks, Translating};
use crate::provider::translated::TranslatedStream;
use crate::testing;
use crate::wire::Dialect;
use crate::wire::anthropic::stream::ToOpenAi;
use crate::wire::anthropic::types::TokenUsage;
use crate::wire::responses::object::Echo;

/// The folder of one kind of golden case, under `tests/golden`.
fn golden(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(dir)
}

fn bless() -> bool {
    std::env::var_os("AISIX_BLESS").is_some_and(|v| v == "1")
}

/// Every `<case>.in.<ext>` of `dir` (under `tests/golden`), sorted, with its bytes.
fn cases(dir: &str, ext: &str) -> Vec<(String, PathBuf, Vec<u8>)> {
    let suffix = format!(".in.{ext}");
    let mut cases: Vec<_> = std::fs::read_dir(golden(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(&suffix)?
                .to_owned();
            let bytes = std::fs::read(&path).unwrap();
            Some((name, path, bytes))
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!cases.is_empty(), "no golden cases in {dir}");
    cases
}

/// Mismatches of one test, reported together at its end.
#[derive(Default)]
struct Diffs(Vec<String>);

impl Diffs {
    fn expect(&mut self, input: &Path, suffix: &str, actual: Vec<u8>, as_json: bool) {
        let name = input.file_name().unwrap().to_str().unwrap();
        let stem = name.split(".in.").next().unwrap();
        let path = input.with_file_name(format!("{stem}.{suffix}"));
        let actual = if as_json {
            let value: Value = serde_json::from_slice(&actual).unwrap_or_else(|e| {
                panic!(
                    "{name}: output is not JSON ({e}): {}",
                    String::from_utf8_lossy(&actual)
                )
            });
            let mut pretty = serde_json::to_vec_pretty(&value).unwrap();
            pretty.push(b'\n');
            pretty
        } else {
            actual
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

/// What a client got of a stream that crosses or carries Anthropic's dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Streamed {
    out: Vec<u8>,
    complete: bool,
    /// The usage the upstream reported, as the stream map read it.
    usage: Option<TokenUsage>,
    /// The stream carried content (its first token).
    started: bool,
}

fn streamed(map: TranslatedStream, dialect: Dialect, chunks: &[impl AsRef<[u8]>]) -> Streamed {
    let chunks: Vec<&[u8]> = chunks.iter().map(AsRef::as_ref).collect();
    let relayed = testing::relay(StreamMap::Translated(Box::new(map)), dialect, &chunks);
    let StreamMap::Translated(map) = relayed.events.map() else {
        unreachable!("the map relayed is the one given")
    };
    Streamed {
        out: relayed.out,
        complete: relayed.complete,
        usage: map.token_usage(),
        started: relayed.events.map().started(),
    }
}

/// An Anthropic stream (its body arriving as `chunks`) translated for an OpenAI client.
fn to_openai(
    include_usage: bool,
    created: u64,
    structured: bool,
    chunks: &[impl AsRef<[u8]>],
) -> Streamed {
    let map = TranslatedStream::to_openai(include_usage, created, None, structured);
    streamed(map, Dialect::OpenAi, chunks)
}

/// An OpenAI stream translated for an Anthropic client.
fn to_anthropic(chunks: &[impl AsRef<[u8]>]) -> Streamed {
    streamed(
        TranslatedStream::to_anthropic(None),
        Dialect::Anthropic,
        chunks,
    )
}

/// An Anthropic stream relayed unchanged to an Anthropic client.
fn passthrough(chunks: &[impl AsRef<[u8]>]) -> Streamed {
    streamed(
        TranslatedStream::passthrough(None),
        Dialect::Anthropic,
        chunks,
    )
}

/// A chat stream (an Anthropic one, translated to chat first, when `from_anthropic`)
/// translated for a Responses client whose request `echo` stands for.
fn to_responses(echo: Echo, from_anthropic: bool, chunks: &[impl AsRef<[u8]>]) -> Vec<u8> {
    let chunks: Vec<&[u8]> = chunks.iter().map(AsRef::as_ref).collect();
    let provider = testing::provider("sk-golden-key");
    let to_chat = from_anthropic.then(|| Box::new(ToChatChunks::Anthropic(ToOpenAi::new(true, 1))));
    let map = Translating::new(echo, Arc::clone(&provider), None, to_chat);
    let map = StreamMap::Responses(Box::new(ResponsesStream::Translated(map)));
    testing::relay(map, Dialect::Responses, &chunks).out
}
