//! An OpenAI provider's complete answer translated for an Anthropic client (and read as a
//! count_tokens answer).
#![no_main]

use aisix_gateway::wire::anthropic::response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = response::to_anthropic(data);
    let _ = response::count_tokens_from_openai(data);
});
