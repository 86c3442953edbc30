//! Golden files for every translation to and from Amazon Bedrock, under
//! `tests/golden/bedrock/<kind>/`: Anthropic Messages requests (and chat requests through
//! Messages) to Converse, whole answers for both clients, InvokeModel embeddings both ways,
//! error bodies in both envelopes, and ConverseStreams through the relay's own path: the
//! event-stream bytes (framed from `stream/<case>.in.jsonl`, one JSON line per message) read by
//! the stream reader, whose framing follows the adapter's [`BedrockStream`], and ended as the
//! relay ends them, so an error event in an expected file (`<case>.relay.out.sse` for an OpenAI
//! client, `<case>.relay.anthropic.sse` for an Anthropic one) is the one clients get.

use serde_json::json;

use super::{Diffs, cases};
use crate::provider::StreamMap;
use crate::provider::bedrock::BedrockStream;
use crate::testing;
use crate::wire::Dialect;
use crate::wire::anthropic::request::DEFAULT_MAX_TOKENS;
use crate::wire::anthropic::response as anthropic_response;
use crate::wire::bedrock::request::EmbeddingFamily;
use crate::wire::bedrock::{error, frames, request, response};

/// The model every request and answer case names.
const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// A model Bedrock serves with prompt caching.
const CACHING_MODEL: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

/// The `created` time the translations to OpenAI report.
const CREATED: u64 = 1_700_000_000;

/// A ConverseStream (its body arriving as `chunks`) relayed to a client of `dialect`: the
/// client's bytes, and whether it completed, with the usage it read and the output it counted.
fn relayed(dialect: Dialect, chunks: &[&[u8]]) -> (Vec<u8>, serde_json::Value) {
    let anthropic = dialect == Dialect::Anthropic;
    let map = BedrockStream::new("msg_req-1", MODEL, anthropic, true, false, CREATED);
    let relayed = testing::relay(StreamMap::Bedrock(Box::new(map)), dialect, chunks);
    // What settles the request: the usage reported, else the output the relay counted.
    let usage = relayed.events.usage();
    let produced = relayed.events.map().produced();
    (
        relayed.out,
        json!({"complete": relayed.complete, "usage": usage, "produced": produced}),
    )
}

#[test]
fn bedrock_streams_relay_to_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("bedrock/stream", "jsonl") {
        let bytes = frames::from_json_lines(&input);
        let (openai, report) = relayed(Dialect::OpenAi, &[&bytes]);
        diffs.expect(&path, "relay.out.sse", openai, false);
        diffs.expect(
            &path,
            "relay.report.json",
            report.to_string().into_bytes(),
            true,
        );
        let (anthropic, anthropic_report) = relayed(Dialect::Anthropic, &[&bytes]);
        diffs.expect(&path, "relay.anthropic.sse", anthropic, false);
        assert_eq!(
            report,
            anthropic_report,
            "{}: the two clients' streams end alike",
            path.display()
        );
        // Every message split apart from the next, and each cut in two: the same bytes out.
        let (halves, _) = relayed(Dialect::OpenAi, &bytes.chunks(7).collect::<Vec<_>>());
        let (whole, _) = relayed(Dialect::OpenAi, &[&bytes]);
        assert_eq!(halves, whole, "{}: split in 7-byte chunks", path.display());
    }
    diffs.check();
}

#[test]
fn messages_requests_translate_to_converse_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("bedrock/request", "json") {
        // A model with prompt caching, so that `cache_control` becomes `cachePoint`.
        let translated = request::from_messages(&input, CACHING_MODEL).unwrap();
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn chat_requests_translate_to_converse_through_messages_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("bedrock/request_chat", "json") {
        let translated = request::from_chat(&input, MODEL, DEFAULT_MAX_TOKENS).unwrap();
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn converse_answers_translate_for_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in cases("bedrock/response", "json") {
        let (message, usage) = response::to_messages_body(&input, "msg_req-1", MODEL).unwrap();
        diffs.expect(&path, "anthropic.json", message.to_vec(), true);
        let answer = anthropic_response::to_openai(&message, CREATED).unwrap();
        diffs.expect(&path, "out.json", answer.body.to_vec(), true);
        diffs.expect(
            &path,
            "usage.json",
            serde_json::to_vec(&usage.to_usage()).unwrap(),
            true,
        );
    }
    diffs.check();
}

#[test]
fn embeddings_translate_both_ways_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("bedrock/embeddings", "json") {
        let model = if name.starts_with("titan") {
            "amazon.titan-embed-text-v2:0"
        } else {
            "cohere.embed-english-v3"
        };
        let translated = request::embeddings(&input, model).unwrap();
        diffs.expect(&path, "out.json", translated.body.to_vec(), true);
        let answer = std::fs::read(path.with_file_name(format!("{name}.answer.json"))).unwrap();
        assert_eq!(translated.family, EmbeddingFamily::of(model).unwrap());
        let (list, _) =
            response::embeddings_to_openai(&answer, translated.family, model, translated.base64)
                .unwrap();
        diffs.expect(&path, "list.json", list.to_vec(), true);
    }
    diffs.check();
}

#[test]
fn bedrock_errors_become_each_clients_envelope_with_the_secret_masked() {
    let mut diffs = Diffs::default();
    for (name, path, input) in cases("bedrock/error", "json") {
        let status = if name.contains("throttling") {
            429
        } else {
            400
        };
        let secret = Some("AKIAMOCKBEDROCK1-secret");
        let openai = error::upstream_to_openai(status, &input, secret).unwrap();
        assert!(!String::from_utf8_lossy(&openai).contains("AKIAMOCKBEDROCK1-secret"));
        diffs.expect(&path, "out.json", openai.to_vec(), true);
        let anthropic = error::upstream_to_anthropic(status, &input, secret).unwrap();
        diffs.expect(&path, "anthropic.json", anthropic.to_vec(), true);
    }
    diffs.check();
}
