//! An Anthropic provider's stream translated for an OpenAI client, event by event, ended as
//! the relay ends it.
#![no_main]

use aisix_gateway::wire::anthropic::stream::ToOpenAi;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    aisix_fuzz::translate(&mut ToOpenAi::new(true, 1_700_000_000), data);
});
