//! An upstream error body carried over to the other dialect's envelope.
#![no_main]

use aisix_gateway::wire::anthropic::error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (status, body) = match data.split_first() {
        Some((&first, rest)) => (400 + u16::from(first), rest),
        None => (400, data),
    };
    let _ = error::upstream_to_openai(status, body, Some("sk-fuzz-secret"));
    let _ = error::upstream_to_anthropic(status, body, Some("sk-fuzz-secret"));
});
