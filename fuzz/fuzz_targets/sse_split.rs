//! The SSE splitter: any bytes, cut anywhere, find the events the uncut stream has (a CRLF cut
//! between its CR and LF counted past the LF).
#![no_main]

use aisix_gateway::wire::sse::Splitter;
use libfuzzer_sys::fuzz_target;

fn ends(parts: &[&[u8]]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut splitter = Splitter::default();
    let mut offset = 0;
    for piece in parts {
        let mut from = 0;
        while let Some(len) = splitter.next_end(&piece[from..]) {
            from += len;
            ends.push(offset + from);
        }
        offset += piece.len();
    }
    ends
}

fuzz_target!(|input: (u16, &[u8])| {
    let (cut, stream) = input;
    let cut = if stream.is_empty() {
        0
    } else {
        usize::from(cut) % stream.len()
    };
    let settled = |e: Vec<usize>| -> Vec<usize> {
        e.into_iter()
            .map(|end| {
                if end < stream.len() && stream[end - 1] == b'\r' && stream[end] == b'\n' {
                    end + 1
                } else {
                    end
                }
            })
            .collect()
    };
    assert_eq!(
        settled(ends(&[&stream[..cut], &stream[cut..]])),
        settled(ends(&[stream]))
    );
});
