//! The usage scan of a relayed answer: any bytes, cut anywhere, no panic; an answer that fits
//! its window reads the usage of the whole.
#![no_main]

use aisix_gateway::wire::usage::{self, UsageWindow, WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u16, &[u8])| {
    let (cut, body) = input;
    let cut = if body.is_empty() {
        0
    } else {
        usize::from(cut) % body.len()
    };
    let mut window = UsageWindow::default();
    window.push(&body[..cut]);
    window.push(&body[cut..]);
    let read = window.usage();
    if body.len() <= WINDOW {
        assert_eq!(read, usage::from_response(body));
    }
});
