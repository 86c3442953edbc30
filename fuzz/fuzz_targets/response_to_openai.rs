//! An Anthropic provider's complete answer translated for an OpenAI client.
#![no_main]

use aisix_gateway::wire::anthropic::response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = response::to_openai(data, 1_700_000_000);
});
