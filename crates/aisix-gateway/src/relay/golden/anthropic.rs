//! Golden files for every translation between OpenAI chat completions and Anthropic's Messages
//! API: requests, complete answers, streams (and the passthrough usage scan), error bodies.
//! Inputs are `tests/golden/anthropic/<kind>/<direction>/<case>.in.*`; the expected output sits
//! beside each as `<case>.out.*` (JSON compared as values, SSE byte for byte), and a stream's
//! completion and usage as `<case>.report.json`. Streams go through the relay's own path, so an
//! error event in an expected file is the one clients get.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{Diffs, Streamed};
use crate::wire::anthropic::{error, request, response};
use crate::wire::sse;

/// The `created` time the translations to OpenAI report.
const CREATED: u64 = 1_700_000_000;
const ANTHROPIC_MODEL: &str = "claude-upstream";
const OPENAI_MODEL: &str = "gpt-upstream";

/// Every `<case>.in.<ext>` of `dir` (under `tests/golden/anthropic`), sorted, with its bytes.
fn cases(dir: &str, ext: &str) -> Vec<(String, PathBuf, Vec<u8>)> {
    super::cases(&format!("anthropic/{dir}"), ext)
}

impl Diffs {
    fn answer(&mut self, input: &Path, answer: response::Answer) {
        self.expect(input, "out.json", answer.body.to_vec(), true);
        let usage = serde_json::to_vec(&answer.usage).unwrap();
        self.expect(input, "usage.json", usage, true);
    }

    fn stream(&mut self, input: &Path, streamed: Streamed) {
        let report = json!({"complete": streamed.complete, "usage": streamed.usage});
        self.expect(input, "out.sse", streamed.out, false);
        self.expect(input, "report.json", report.to_string().into_bytes(), true);
    }
}

#[test]
fn openai_requests_translate_to_anthropic_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("request/to_anthropic", "json") {
        let out = request::to_anthropic(&input, ANTHROPIC_MODEL, request::DEFAULT_MAX_TOKENS)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", out.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn anthropic_requests_translate_to_openai_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("request/to_openai", "json") {
        // A case named `o3_…` goes to a reasoning model, whose family wants
        // `max_completion_tokens` and takes `reasoning_effort`.
        let model = if name.starts_with("o3_") {
            "o3"
        } else {
            OPENAI_MODEL
        };
        let field = request::OutputTokensField::for_model(model);
        let out =
            request::to_openai(&input, model, field).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", out.body.to_vec(), true);
    }
    for (name, path, input) in cases("request/count_tokens", "json") {
        let field = request::OutputTokensField::for_model(OPENAI_MODEL);
        let out = request::count_tokens_to_openai(&input, OPENAI_MODEL, field)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.expect(&path, "out.json", out.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn anthropic_answers_translate_to_openai_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("response/to_openai", "json") {
        // A case named `structured_…` answers a request that asked for structured output.
        let structured = name.starts_with("structured_");
        let answer = response::to_openai_with(&input, CREATED, structured)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.answer(&path, answer);
    }
    diffs.check();
}

#[test]
fn openai_answers_translate_to_anthropic_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("response/to_anthropic", "json") {
        let answer = response::to_anthropic(&input).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        diffs.answer(&path, answer);
    }
    diffs.check();
}

#[test]
fn anthropic_streams_translate_to_openai_chunks_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("stream/to_openai", "sse") {
        let structured = name.starts_with("structured_");
        let streamed = super::to_openai(true, CREATED, structured, &[&input]);
        diffs.stream(&path, streamed);
    }
    diffs.check();
}

#[test]
fn anthropic_streams_relayed_unchanged_report_their_usage_and_end_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("stream/to_openai", "sse") {
        let streamed = super::passthrough(&[&input]);
        // The client gets the upstream's events unchanged up to where the stream ended; the
        // events the gateway did not relay as they were (an upstream error event, rendered
        // again in the client's envelope) are `replaced`; what it added is `appended`.
        let prefix = streamed
            .out
            .iter()
            .zip(&input)
            .take_while(|(a, b)| a == b)
            .count();
        let mut same = 0;
        while let Some(len) = sse::event_end(&input[same..]).filter(|len| same + len <= prefix) {
            same += len;
        }
        let appended = String::from_utf8_lossy(&streamed.out[same..]).into_owned();
        let mut report = json!({
            "complete": streamed.complete,
            "usage": streamed.usage,
            "appended": appended,
        });
        if same < input.len() {
            report["replaced"] = String::from_utf8_lossy(&input[same..]).into_owned().into();
        }
        diffs.expect(
            &path,
            "passthrough.json",
            report.to_string().into_bytes(),
            true,
        );
    }
    diffs.check();
}

#[test]
fn openai_streams_translate_to_anthropic_events_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("stream/to_anthropic", "sse") {
        let streamed = super::to_anthropic(&[&input]);
        diffs.stream(&path, streamed);
    }
    diffs.check();
}

/// The status an error case stands for: the number its name starts with.
fn status_of(name: &str) -> u16 {
    name.split('_')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{name}: name must start with a status"))
}

#[test]
fn upstream_error_bodies_cross_to_the_other_envelope_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("error/to_openai", "json") {
        let out = error::upstream_to_openai(status_of(&name), &input, None)
            .unwrap_or_else(|| panic!("{name}: not translated"));
        diffs.expect(&path, "out.json", out.to_vec(), true);
    }
    for (name, path, input) in cases("error/to_anthropic", "json") {
        let out = error::upstream_to_anthropic(status_of(&name), &input, None)
            .unwrap_or_else(|| panic!("{name}: not translated"));
        diffs.expect(&path, "out.json", out.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn every_golden_stream_split_anywhere_reaches_the_client_the_same() {
    let split = |input: &[u8], at: usize| -> Vec<Vec<u8>> {
        vec![input[..at].to_vec(), input[at..].to_vec()]
    };
    for (name, path, input) in cases("stream/to_openai", "sse") {
        let structured = name.starts_with("structured_");
        let whole = super::to_openai(true, CREATED, structured, &[&input]);
        let relayed = super::passthrough(&[&input]);
        // Every 7th byte and the last few keep the run short; a byte at a time covers the rest.
        let ends = input.len().saturating_sub(3)..=input.len();
        for at in (0..=input.len()).step_by(7).chain(ends) {
            let parts = split(&input, at);
            let cut = super::to_openai(true, CREATED, structured, &parts);
            assert_eq!(cut, whole, "{} split at {at}", path.display());
            let cut = super::passthrough(&parts);
            assert_eq!(cut, relayed, "{} relayed, split at {at}", path.display());
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(super::to_openai(true, CREATED, structured, &bytes), whole);
        assert_eq!(super::passthrough(&bytes), relayed);
    }
    for (_, path, input) in cases("stream/to_anthropic", "sse") {
        let whole = super::to_anthropic(&[&input]);
        let ends = input.len().saturating_sub(3)..=input.len();
        for at in (0..=input.len()).step_by(7).chain(ends) {
            let parts = split(&input, at);
            let cut = super::to_anthropic(&parts);
            assert_eq!(cut, whole, "{} split at {at}", path.display());
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(super::to_anthropic(&bytes), whole, "{}", path.display());
    }
}
