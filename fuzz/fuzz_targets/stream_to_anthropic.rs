//! An OpenAI provider's stream translated for an Anthropic client, event by event, ended as
//! the relay ends it.
#![no_main]

use aisix_gateway::wire::anthropic::stream::ToAnthropic;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    aisix_fuzz::translate(&mut ToAnthropic::new(), data);
});
