//! Bedrock's ConverseStream golden cases through the relay's own path: the event-stream bytes
//! (framed from `tests/golden/bedrock/stream/<case>.in.jsonl`) read by the stream reader,
//! whose framing follows the adapter's [`BedrockStream`], and ended as the relay ends them, so
//! an error event in an expected file (`<case>.relay.out.sse` for an OpenAI client,
//! `<case>.relay.anthropic.sse` for an Anthropic one) is the one clients get. The wire-level
//! translations (requests, answers, embeddings, errors) are pinned by `tests/bedrock_golden.rs`.

use serde_json::json;

use super::Diffs;
use crate::provider::StreamMap;
use crate::provider::bedrock::BedrockStream;
use crate::testing;
use crate::wire::Dialect;
use crate::wire::bedrock::frames;

/// The `created` time the translations to OpenAI report.
const CREATED: u64 = 1_700_000_000;

/// A ConverseStream (its body arriving as `chunks`) relayed to a client of `dialect`: the
/// client's bytes, and whether it completed with the usage it read.
fn relayed(dialect: Dialect, chunks: &[&[u8]]) -> (Vec<u8>, serde_json::Value) {
    let anthropic = dialect == Dialect::Anthropic;
    let map = BedrockStream::new(
        "msg_req-1",
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        anthropic,
        true,
        false,
        CREATED,
    );
    let relayed = testing::relay(StreamMap::Bedrock(Box::new(map)), dialect, chunks);
    let usage = relayed.events.map().carried().usage;
    (
        relayed.out,
        json!({"complete": relayed.complete, "usage": usage}),
    )
}

#[test]
fn bedrock_streams_relay_to_both_clients_as_the_golden_files_say() {
    let mut diffs = Diffs::default();
    for (_, path, input) in super::cases("bedrock/stream", "jsonl") {
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
