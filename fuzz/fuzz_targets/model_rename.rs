//! The streaming `model` rename of a relayed answer: any bytes, cut anywhere, give what the
//! rename of the whole body gives.
#![no_main]

use aisix_gateway::wire::chunk;
use aisix_gateway::wire::rename::Renamer;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u16, &[u8])| {
    let (cut, body) = input;
    let cut = if body.is_empty() {
        0
    } else {
        usize::from(cut) % body.len()
    };
    let name: &'static [u8] = br#""primary""#;
    let expected = chunk::with_model(body, name).unwrap_or_else(|| body.to_vec());
    let mut renamer = Renamer::new(Bytes::from_static(name));
    let mut out = renamer.push(Bytes::copy_from_slice(&body[..cut])).to_vec();
    out.extend_from_slice(&renamer.push(Bytes::copy_from_slice(&body[cut..])));
    out.extend_from_slice(&renamer.finish());
    assert_eq!(out, expected);
});
