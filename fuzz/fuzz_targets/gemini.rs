//! Every Gemini translator on bytes it did not expect: a chat request to `generateContent`, an
//! embeddings request, a whole answer and an embeddings answer back, an error body, and the
//! stream event by event (split as the relay splits it), then on to Anthropic's events; and
//! Vertex AI's own forms (`:predict` embeddings both ways, the `countTokens` body).
#![no_main]

use aisix_gateway::wire::anthropic::stream::ToAnthropic;
use aisix_gateway::wire::gemini::stream::ToChat;
use aisix_gateway::wire::gemini::{error, request, response, vertex};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = request::from_chat(data);
    let _ = request::embeddings(data, "models/m");
    let _ = response::to_chat(data, 1_700_000_000, "");
    let _ = response::embeddings_to_openai(data, "m", true);
    let _ = error::upstream_to_openai(429, data, Some("secret-key"));
    let _ = vertex::count_tokens(data);
    if let Ok(sent) = vertex::embeddings(data) {
        let _ = vertex::embeddings_to_openai(data, "m", &sent);
    }
    if let Ok(sent) = vertex::embeddings(br#"{"input":["a","b"]}"#) {
        let _ = vertex::embeddings_to_openai(data, "m", &sent);
    }
    let mut to_chat = ToChat::new(true, 1_700_000_000, None);
    let mut chunks = BytesMut::new();
    aisix_fuzz::feed(data, |event| to_chat.event(event, &mut chunks));
    let _ = to_chat.usage();
    aisix_fuzz::translate(&mut ToAnthropic::new(), &chunks);
});
