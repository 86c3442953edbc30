//! The usage scan of an Anthropic stream relayed unchanged, ended as the relay ends it.
#![no_main]

use aisix_gateway::wire::anthropic::stream::{Step, UsageScan};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut scan = UsageScan::new();
    let mut out = BytesMut::new();
    if aisix_fuzz::feed(data, |event| scan.event(event)) == Step::Continue {
        scan.end(&mut out);
    }
    let _ = scan.usage();
});
