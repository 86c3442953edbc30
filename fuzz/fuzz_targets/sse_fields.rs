//! The fields (name, joined data lines) of one server-sent event.
#![no_main]

use aisix_gateway::wire::sse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fields = sse::fields(data);
    // Joined data lines never outgrow the event: each joining newline replaces a `data:`.
    if let Some(joined) = fields.data {
        assert!(joined.len() <= data.len());
    }
});
