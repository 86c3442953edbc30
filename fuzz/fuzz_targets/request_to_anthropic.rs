//! An OpenAI chat request translated for an Anthropic provider.
#![no_main]

use aisix_gateway::wire::anthropic::request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = request::to_anthropic(data, "claude", request::DEFAULT_MAX_TOKENS);
});
