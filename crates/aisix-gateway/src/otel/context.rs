//! W3C trace context (`traceparent`, `tracestate`): the client's read, the attempt's written;
//! and the ids of new traces and spans, from a per-thread generator seeded once, so a request
//! makes no system call for them.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use http::HeaderValue;

pub(crate) type TraceId = [u8; 16];
pub(crate) type SpanId = [u8; 8];

/// The trace a client's `traceparent` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

/// The client's `traceparent`, when it is valid: `00-<32 hex>-<16 hex>-<2 hex>` (a later
/// version may append fields after a `-`; version `ff` and all-zero ids are invalid).
pub(crate) fn parse(value: &[u8]) -> Option<Parent> {
    if value.len() < 55 || (value.len() > 55 && value[55] != b'-') {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || (version == 0 && value.len() != 55) {
        return None;
    }
    let mut trace_id = [0u8; 16];
    for (i, byte) in trace_id.iter_mut().enumerate() {
        *byte = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span_id = [0u8; 8];
    for (i, byte) in span_id.iter_mut().enumerate() {
        *byte = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&value[53..55])?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        span_id,
        sampled: flags & 1 == 1,
    })
}

/// Lowercase hex only, as the specification requires.
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// Each byte's two lowercase hex digits, looked up rather than computed.
#[cfg(any(test, not(target_arch = "x86_64")))]
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [HEX[i >> 4], HEX[i & 15]];
        i += 1;
    }
    pairs
};

/// The lowercase hex digits of `bytes` into `out`, two per byte.
#[cfg(not(target_arch = "x86_64"))]
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(*byte)]);
    }
}

/// The lowercase hex digits of `bytes` into `out`, two per byte, sixteen bytes at a time with
/// SSE2: each byte's two nibbles interleaved in order, then `'0'` added, and `'a' - '0' - 10`
/// more to those past 9.
#[cfg(target_arch = "x86_64")]
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    // SAFETY: SSE2 is part of the x86_64 baseline: every CPU this build runs on has it.
    unsafe { hex_sse2(bytes, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn hex_sse2(bytes: &[u8], out: &mut [u8]) {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_cmpgt_epi8, _mm_cvtsi128_si64, _mm_set_epi64x,
        _mm_set1_epi8, _mm_srli_epi16, _mm_unpackhi_epi8, _mm_unpackhi_epi64, _mm_unpacklo_epi8,
    };
    /// 16 hex digits (8 bytes' nibbles, in order) into `out`.
    #[target_feature(enable = "sse2")]
    fn store(digits: __m128i, out: &mut [u8]) {
        let letters = _mm_and_si128(_mm_cmpgt_epi8(digits, _mm_set1_epi8(9)), _mm_set1_epi8(39));
        let ascii = _mm_add_epi8(_mm_add_epi8(digits, _mm_set1_epi8(b'0' as i8)), letters);
        let low = _mm_cvtsi128_si64(ascii).to_le_bytes();
        let high = _mm_cvtsi128_si64(_mm_unpackhi_epi64(ascii, ascii)).to_le_bytes();
        out[..8].copy_from_slice(&low);
        out[8..16].copy_from_slice(&high);
    }
    for (chunk, out) in bytes.chunks(16).zip(out.chunks_mut(32)) {
        let mut padded = [0u8; 16];
        padded[..chunk.len()].copy_from_slice(chunk);
        let half = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&padded[at..at + 8]);
            i64::from_le_bytes(word)
        };
        let v = _mm_set_epi64x(half(8), half(0));
        let nibble = _mm_set1_epi8(0x0f);
        let high = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
        let low = _mm_and_si128(v, nibble);
        let (first, rest) = out.split_at_mut(out.len().min(16));
        store(_mm_unpacklo_epi8(high, low), first);
        if !rest.is_empty() {
            store(_mm_unpackhi_epi8(high, low), rest);
        }
    }
}

/// The `traceparent` of span `span_id` in trace `trace_id`.
pub(crate) fn traceparent(trace_id: &TraceId, span_id: &SpanId, sampled: bool) -> HeaderValue {
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex_into(trace_id, &mut out[3..35]);
    hex_into(span_id, &mut out[36..52]);
    if sampled {
        out[54] = b'1';
    }
    let bytes = TRACEPARENTS.with_borrow_mut(|chunk| {
        if chunk.capacity() - chunk.len() < out.len() {
            *chunk = bytes::BytesMut::with_capacity(out.len() * TRACEPARENTS_PER_CHUNK);
        }
        chunk.extend_from_slice(&out);
        chunk.split().freeze()
    });
    // SAFETY: `out` holds only lowercase hex digits and dashes, every one a visible ASCII
    // byte, as a header value must. (Debug builds check them again: the tests below would
    // panic on any other byte.)
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}

/// Traceparents written into one allocation: each is a share of it, so an attempt's header
/// takes no allocation of its own, and its clone for the upstream request only counts a
/// reference. A chunk is freed when the last request that shares it is done.
const TRACEPARENTS_PER_CHUNK: usize = 64;

thread_local! {
    static TRACEPARENTS: std::cell::RefCell<bytes::BytesMut> =
        std::cell::RefCell::new(bytes::BytesMut::new());
}

thread_local! {
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// The next 64 random bits of this thread's generator (splitmix64), seeded from the standard
/// library's random hasher keys on first use.
fn next() -> u64 {
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_usize(std::ptr::from_ref(state) as usize);
            s = hasher.finish() | 1;
        }
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A new span id (never all zeros).
pub(crate) fn span_id() -> SpanId {
    let n = next();
    (if n == 0 { 1 } else { n }).to_be_bytes()
}

/// A new trace id (never all zeros).
pub(crate) fn trace_id() -> TraceId {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&next().to_be_bytes());
    id[8..].copy_from_slice(&span_id());
    id
}

/// Whether a new root trace is sampled at `ppm` parts per million: its id's low 64 bits
/// against the ratio's share of their range, as the specification's ratio sampler does.
pub(crate) fn sampled(trace_id: &TraceId, ppm: u32) -> bool {
    if ppm >= 1_000_000 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let threshold = (u64::MAX / 1_000_000).saturating_mul(u64::from(ppm));
    u64::from_be_bytes(low) < threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    const W3C_EXAMPLE: &[u8] = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_w3c_example_traceparent_is_read_and_written_back_the_same() {
        let parent = parse(W3C_EXAMPLE).unwrap();
        assert!(parent.sampled);
        assert_eq!(
            parent.span_id,
            [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
        );
        let written = traceparent(&parent.trace_id, &parent.span_id, true);
        assert_eq!(written.as_bytes(), W3C_EXAMPLE);
    }

    #[test]
    fn every_byte_is_written_as_two_lowercase_hex_digits_and_the_flag_follows_sampling() {
        let trace_id: TraceId = core::array::from_fn(|i| (i * 17) as u8);
        let span_id: SpanId = [0x00, 0x0f, 0x10, 0x7f, 0x80, 0xa5, 0xf0, 0xff];
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        for sampled in [true, false] {
            let written = traceparent(&trace_id, &span_id, sampled);
            let flag = if sampled { "01" } else { "00" };
            let expected = format!("00-{}-{}-{flag}", hex(&trace_id), hex(&span_id));
            assert_eq!(written.to_str().unwrap(), expected);
            let parent = parse(written.as_bytes()).unwrap();
            assert_eq!(
                (parent.trace_id, parent.span_id, parent.sampled),
                (trace_id, span_id, sampled)
            );
        }
    }

    #[test]
    fn every_byte_value_is_written_as_its_two_digits_at_every_place() {
        for start in 0..=255u8 {
            let bytes: [u8; 16] =
                core::array::from_fn(|i| start.wrapping_add((i as u8).wrapping_mul(37)));
            for len in [8, 16] {
                let mut out = [0u8; 32];
                hex_into(&bytes[..len], &mut out[..len * 2]);
                let expected: Vec<u8> = bytes[..len]
                    .iter()
                    .flat_map(|b| HEX_PAIRS[usize::from(*b)])
                    .collect();
                assert_eq!(&out[..len * 2], &expected[..], "{bytes:?} {len}");
                assert!(
                    out[len * 2..].iter().all(|b| *b == 0),
                    "nothing written past"
                );
            }
        }
    }

    #[test]
    fn traceparents_written_one_after_another_keep_their_own_bytes() {
        let written: Vec<_> = (0..TRACEPARENTS_PER_CHUNK * 2 + 3)
            .map(|n| {
                let span_id = (n as u64 + 1).to_be_bytes();
                (span_id, traceparent(&[7; 16], &span_id, n % 2 == 0))
            })
            .collect();
        for (n, (span_id, value)) in written.iter().enumerate() {
            let parent = parse(value.as_bytes()).unwrap();
            assert_eq!((parent.span_id, parent.sampled), (*span_id, n % 2 == 0));
            assert_eq!(value.clone().as_bytes(), value.as_bytes());
        }
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            &b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"[..],
            b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
            b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            b"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        // A later version may append fields.
        assert!(parse(b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-more").is_some());
    }

    #[test]
    fn ratio_sampling_keeps_about_its_share_of_new_traces() {
        let kept = (0..10_000)
            .filter(|_| sampled(&trace_id(), 250_000))
            .count();
        assert!((2_000..3_000).contains(&kept), "{kept}");
        assert!(!sampled(&trace_id(), 0));
        assert!(sampled(&trace_id(), 1_000_000));
    }
}
