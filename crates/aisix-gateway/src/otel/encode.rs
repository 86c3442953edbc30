//! OTLP's protobuf messages, written by hand: the few fields the gateway sends, by the field
//! numbers of opentelemetry-proto (`trace/v1/trace.proto`, `logs/v1/logs.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto`). Runs on the exporter only.
//! The e2e receiver decodes what this writes with OpenTelemetry's own generated classes.

use bytes::{BufMut, BytesMut};

/// A protobuf message being written.
#[derive(Debug, Default)]
pub(crate) struct Message {
    buf: BytesMut,
}

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// `n` as a varint in `out`; how many bytes it took.
fn varint_into(out: &mut [u8; 10], mut n: u64) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        out[i] = (n as u8) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i + 1
}

impl Message {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Bytes already written as fields of this message (attributes written once, copied).
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// [`Message::raw`] of each of `parts`, one after another, with one check of the room for
    /// all of them (not one per part).
    #[inline(always)]
    pub(crate) fn raw_all<const N: usize>(&mut self, parts: [&[u8]; N]) {
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        let buf = &mut self.buf;
        buf.reserve(total);
        // SAFETY: `reserve` left room for `total` bytes past the buffer's length, and the
        // parts are `total` bytes together, so every copy lands in that room, one after
        // another, and all of it is written before the length moves past it.
        unsafe {
            let mut at = buf.spare_capacity_mut().as_mut_ptr().cast::<u8>();
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
            buf.set_len(buf.len() + total);
        }
    }

    /// A message written into what is left of `buf`: one buffer kept for every export, whose
    /// space comes back once the export that took it is sent.
    pub(crate) fn reusing(buf: BytesMut) -> Self {
        Self { buf }
    }

    /// What was written (the buffer keeps its spare room for the next message).
    pub(crate) fn split(&mut self) -> BytesMut {
        self.buf.split()
    }

    pub(crate) fn into_buffer(self) -> BytesMut {
        self.buf
    }

    #[cfg(test)]
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf.to_vec()
    }

    #[inline]
    fn varint(&mut self, n: u64) {
        if n < 0x80 {
            self.buf.put_u8(n as u8);
        } else {
            let mut out = [0u8; 10];
            let len = varint_into(&mut out, n);
            self.buf.extend_from_slice(&out[..len]);
        }
    }

    #[inline]
    fn tag(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }

    #[inline]
    pub(crate) fn bytes(&mut self, field: u64, bytes: &[u8]) {
        self.tag(field, LEN);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    #[inline]
    pub(crate) fn string(&mut self, field: u64, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    /// A string field made of `parts`, joined with no buffer of its own.
    pub(crate) fn strings(&mut self, field: u64, parts: &[&str]) {
        self.tag(field, LEN);
        self.varint(parts.iter().map(|p| p.len() as u64).sum());
        for part in parts {
            self.buf.extend_from_slice(part.as_bytes());
        }
    }

    #[inline]
    pub(crate) fn uint(&mut self, field: u64, n: u64) {
        self.tag(field, VARINT);
        self.varint(n);
    }

    #[inline]
    pub(crate) fn fixed64(&mut self, field: u64, n: u64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    #[inline]
    pub(crate) fn fixed32(&mut self, field: u64, n: u32) {
        self.tag(field, FIXED32);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn double(&mut self, field: u64, f: f64) {
        self.fixed64(field, f.to_bits());
    }

    /// A nested message, written by `write` in place: one byte is kept for its length, and
    /// a message of 128 bytes or more is moved up to make room for a longer one (no buffer of
    /// its own per nested message).
    pub(crate) fn message(&mut self, field: u64, write: impl FnOnce(&mut Message)) {
        self.message_sized(field, 1, write);
    }

    /// [`Message::message`] for one expected to need `reserved` bytes for its length (a span:
    /// 2, up to 16 KiB; a batch: 3, up to 2 MiB): that many are kept, and the message is moved
    /// only when its length needs another count (a move per span, and two of the whole batch
    /// per export request, otherwise).
    pub(crate) fn message_sized(
        &mut self,
        field: u64,
        reserved: usize,
        write: impl FnOnce(&mut Message),
    ) {
        self.tag(field, LEN);
        let at = self.buf.len();
        self.buf.put_bytes(0, reserved);
        write(self);
        let end = self.buf.len();
        let len = (end - at - reserved) as u64;
        if reserved == 1 && len < 0x80 {
            self.buf[at] = len as u8;
            return;
        }
        // A span or an event, as most are: 128 bytes to 16 KiB, its two bytes written in place.
        if reserved == 2 && (0x80..0x4000).contains(&len) {
            self.buf[at..at + 2].copy_from_slice(&[len as u8 | 0x80, (len >> 7) as u8]);
            return;
        }
        let mut head = [0u8; 10];
        let n = varint_into(&mut head, len);
        if n > reserved {
            self.buf.resize(end + n - reserved, 0);
            self.buf.copy_within(at + reserved..end, at + n);
        } else if n < reserved {
            self.buf.copy_within(at + reserved..end, at + n);
            self.buf.truncate(end - (reserved - n));
        }
        self.buf[at..at + n].copy_from_slice(&head[..n]);
    }
}

/// An attribute value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    /// A string given as bytes known to be ASCII (a request id): written as `Str` is, with no
    /// check of its bytes.
    Ascii(&'a [u8]),
    Int(i64),
    Double(f64),
    Bool(bool),
}

/// An attribute's key as it is written: `KeyValue.key` (its tag, its length, its bytes) and
/// the tag of `KeyValue.value` that follows it, built at compile time ([`keys!`]), so writing
/// the key is one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key(pub(super) &'static [u8]);

impl Key {
    /// The key's name.
    pub(crate) fn name(self) -> &'static str {
        std::str::from_utf8(&self.0[2..self.0.len() - 1]).unwrap_or_default()
    }
}

/// `key`'s [`Key`] bytes; `N` is its length plus 3. A key of 128 bytes or more does not build.
pub(crate) const fn key_bytes<const N: usize>(key: &str) -> [u8; N] {
    let name = key.as_bytes();
    assert!(name.len() < 0x80 && N == name.len() + 3);
    let mut out = [0u8; N];
    out[0] = 0x0a;
    out[1] = name.len() as u8;
    let mut i = 0;
    while i < name.len() {
        out[2 + i] = name[i];
        i += 1;
    }
    out[N - 1] = 0x12;
    out
}

/// Attribute keys as [`Key`] constants: `keys! { NAME = "attribute.name", ... }`.
macro_rules! keys {
    ($($(#[$doc:meta])* $name:ident = $key:literal,)*) => {
        $(
            $(#[$doc])*
            pub(crate) const $name: $crate::otel::encode::Key = $crate::otel::encode::Key(
                &$crate::otel::encode::key_bytes::<{ $key.len() + 3 }>($key),
            );
        )*
    };
}
pub(crate) use keys;

/// A `KeyValue` at `field` of `message`. The usual one (field, key and value short enough
/// that every length is one byte) is written in four copies (two of them of a few fixed bytes)
/// with one check of the room, and no nested message to size.
// Inlined where it is called: there the key's length and the value's kind are constants, so
// the key is copied without a call and the value's `match` folds away.
#[inline(always)]
pub(crate) fn attribute(message: &mut Message, field: u64, key: Key, value: &Value<'_>) {
    let mut scratch = [0u8; 10];
    // `AnyValue`'s field: its tag, and its bytes (a string's with their length first).
    let (tag, payload): (u8, &[u8]) = match value {
        Value::Str(s) => (0x0a, s.as_bytes()),
        Value::Ascii(s) => (0x0a, *s),
        Value::Bool(b) => {
            scratch[0] = u8::from(*b);
            (0x10, &scratch[..1])
        }
        Value::Int(n) => {
            let len = varint_into(&mut scratch, *n as u64);
            (0x18, &scratch[..len])
        }
        Value::Double(f) => {
            scratch[..8].copy_from_slice(&f.to_bits().to_le_bytes());
            (0x21, &scratch[..8])
        }
    };
    let is_str = matches!(value, Value::Str(_) | Value::Ascii(_));
    let any_len = 1 + usize::from(is_str) + payload.len();
    // The key's bytes, then `value`'s length.
    let kv_len = key.0.len() + 1 + any_len;
    if field >= 16 || kv_len >= 0x80 {
        return cold_attribute(message, field, key, value);
    }
    let head = [(field << 3 | LEN) as u8, kv_len as u8];
    let value_head = [any_len as u8, tag, payload.len() as u8];
    let value_head = &value_head[..2 + usize::from(is_str)];
    message.raw_all([&head, key.0, value_head, payload]);
}

/// The rare attribute [`attribute`] does not write itself (a long value), out of its line.
#[cold]
#[inline(never)]
fn cold_attribute(message: &mut Message, field: u64, key: Key, value: &Value<'_>) {
    named_attribute(message, field, key.name(), value);
}

/// A `KeyValue` at `field` of `message` whose key is known only at run time (a resource's,
/// written once per export request).
pub(crate) fn named_attribute(message: &mut Message, field: u64, key: &str, value: &Value<'_>) {
    message.message(field, |kv| {
        kv.string(1, key);
        kv.message(2, |any| any_value(any, value));
    });
}

/// The fields of an `AnyValue`.
pub(crate) fn any_value(any: &mut Message, value: &Value<'_>) {
    match value {
        Value::Str(s) => any.string(1, s),
        Value::Ascii(s) => any.bytes(1, s),
        Value::Bool(b) => any.uint(2, u64::from(*b)),
        Value::Int(n) => any.uint(3, *n as u64),
        Value::Double(f) => any.double(4, *f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_written_with_protobuf_tags_and_lengths() {
        let mut m = Message::new();
        m.uint(1, 300);
        m.string(2, "hi");
        m.fixed64(7, 1);
        assert_eq!(
            m.into_bytes(),
            vec![
                0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x39, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
    }

    #[test]
    fn a_nested_message_written_in_place_has_its_minimal_length_at_every_size_and_reserve() {
        for (size, reserved) in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000, 2_097_152]
            .into_iter()
            .flat_map(|size| [(size, 1), (size, 2), (size, 3)])
        {
            let text = "x".repeat(size);
            let mut nested = Message::new();
            nested.uint(1, 5);
            nested.message_sized(2, reserved, |inner| inner.string(3, &text));
            nested.uint(4, 6);
            let mut expected = Message::new();
            expected.uint(1, 5);
            let mut inner = Message::new();
            inner.string(3, &text);
            expected.bytes(2, &inner.into_bytes());
            expected.uint(4, 6);
            assert_eq!(
                nested.into_bytes(),
                expected.into_bytes(),
                "size {size}, {reserved} reserved"
            );
        }
    }

    keys! {
        MODEL = "gen_ai.request.model",
        SERVER = "server.address",
        K = "k",
    }

    #[test]
    fn a_key_knows_its_name() {
        assert_eq!(MODEL.name(), "gen_ai.request.model");
        assert_eq!(K.name(), "k");
    }

    #[test]
    fn an_attribute_is_written_as_a_nested_key_value_of_every_value_kind_and_size() {
        let long = "v".repeat(200);
        for value in [
            Value::Str("gpt-4o"),
            Value::Str(""),
            Value::Str(&long),
            Value::Ascii(b"01JD2ZP8K3Q4R5S6T7V8W9X0YZ"),
            Value::Ascii(long.as_bytes()),
            Value::Int(0),
            Value::Int(300),
            Value::Int(-1),
            Value::Double(0.25),
            Value::Bool(true),
            Value::Bool(false),
        ] {
            for key in [MODEL, SERVER, K] {
                let mut fast = Message::new();
                attribute(&mut fast, 9, key, &value);
                let mut nested = Message::new();
                nested.message(9, |kv| {
                    kv.string(1, key.name());
                    kv.message(2, |any| any_value(any, &value));
                });
                assert_eq!(fast.into_bytes(), nested.into_bytes(), "{key:?} {value:?}");
            }
        }
    }

    #[test]
    fn a_string_of_parts_is_written_as_the_joined_string() {
        let mut parts = Message::new();
        parts.strings(5, &["chat", " ", "gpt-4o"]);
        let mut joined = Message::new();
        joined.string(5, "chat gpt-4o");
        assert_eq!(parts.into_bytes(), joined.into_bytes());
    }

    #[test]
    fn a_negative_int_is_ten_bytes_as_protobuf_int64_is() {
        let mut m = Message::new();
        attribute(&mut m, 9, K, &Value::Int(-1));
        let bytes = m.into_bytes();
        // KeyValue{key "k", value AnyValue{int_value = -1 as 10 varint bytes}}
        assert_eq!(bytes.len(), 2 + 3 + 2 + 11);
    }
}
