//! Every Bedrock translator on bytes it did not expect: a Messages and a chat request to
//! Converse, an embeddings request, a whole answer and an embeddings answer back, an error
//! body, and a ConverseStream split into event-stream messages as the relay splits it
//! (including the fuzzer's bytes framed as valid messages), then on to OpenAI's chunks.
#![no_main]

use aisix_gateway::wire::anthropic::stream::{Step, ToOpenAi};
use aisix_gateway::wire::bedrock::frames::{self, FrameSplitter};
use aisix_gateway::wire::bedrock::request::EmbeddingFamily;
use aisix_gateway::wire::bedrock::stream::ToAnthropic;
use aisix_gateway::wire::bedrock::{error, request, response};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fn stream(data: &[u8]) {
    let mut to_anthropic = ToAnthropic::new("msg_1", "m");
    let mut events = BytesMut::new();
    let (mut splitter, mut at) = (FrameSplitter::default(), 0);
    while let Some(len) = splitter.next_end(&data[at..]) {
        let step = to_anthropic.event(&data[at..at + len], &mut events);
        at += len;
        if step != Step::Continue {
            break;
        }
    }
    let _ = to_anthropic.finish(&mut events);
    aisix_fuzz::translate(&mut ToOpenAi::new(true, 1_700_000_000), &events);
}

fuzz_target!(|data: &[u8]| {
    let _ = request::from_messages(data, "anthropic.claude-x");
    let _ = request::from_chat(data, "amazon.nova-lite-v1:0", 4096);
    let _ = request::embeddings(data, "amazon.titan-embed-text-v2:0");
    let _ = request::embeddings(data, "cohere.embed-english-v3");
    let _ = response::to_messages_body(data, "msg_1", "m");
    let _ = response::embeddings_to_openai(data, EmbeddingFamily::Titan, "m", true);
    let _ = response::embeddings_to_openai(data, EmbeddingFamily::Cohere, "m", false);
    let _ = error::upstream_to_openai(400, data, Some("secret-key"));
    stream(data);
    // The same bytes as the payloads of valid messages, so the JSON readers are reached.
    let text = String::from_utf8_lossy(data);
    let mut framed = Vec::new();
    for kind in [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ] {
        framed.extend(frames::event(kind, &text));
    }
    stream(&framed);
});
