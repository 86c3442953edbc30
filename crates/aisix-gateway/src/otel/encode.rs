//! OTLP's protobuf messages, written by hand: the few fields the gateway sends, by the field
//! numbers of opentelemetry-proto (`trace/v1/trace.proto`, `logs/v1/logs.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto`). Runs on the exporter only.
//! The e2e receiver decodes what this writes with OpenTelemetry's own generated classes.

/// A protobuf message being written.
#[derive(Debug, Default)]
pub(crate) struct Message {
    buf: Vec<u8>,
}

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

impl Message {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.buf.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.buf.push(n as u8);
    }

    fn tag(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }

    pub(crate) fn bytes(&mut self, field: u64, bytes: &[u8]) {
        self.tag(field, LEN);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    pub(crate) fn string(&mut self, field: u64, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    pub(crate) fn uint(&mut self, field: u64, n: u64) {
        self.tag(field, VARINT);
        self.varint(n);
    }

    pub(crate) fn fixed64(&mut self, field: u64, n: u64) {
        self.tag(field, FIXED64);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn fixed32(&mut self, field: u64, n: u32) {
        self.tag(field, FIXED32);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn double(&mut self, field: u64, f: f64) {
        self.fixed64(field, f.to_bits());
    }

    /// A nested message, written by `write` in place: one byte is kept for its length, and
    /// the rare message of 128 bytes or more is moved up to make room for a longer one (no
    /// buffer of its own per nested message).
    pub(crate) fn message(&mut self, field: u64, write: impl FnOnce(&mut Message)) {
        self.tag(field, LEN);
        let at = self.buf.len();
        self.buf.push(0);
        write(self);
        let mut len = (self.buf.len() - at - 1) as u64;
        let mut head = [0u8; 10];
        let mut n = 0;
        while len >= 0x80 {
            head[n] = (len as u8) | 0x80;
            len >>= 7;
            n += 1;
        }
        head[n] = len as u8;
        self.buf.splice(at..=at, head[..=n].iter().copied());
    }
}

/// An attribute value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Double(f64),
    Bool(bool),
}

/// A `KeyValue` at `field` of `message`.
pub(crate) fn attribute(message: &mut Message, field: u64, key: &str, value: &Value<'_>) {
    message.message(field, |kv| {
        kv.string(1, key);
        kv.message(2, |any| any_value(any, value));
    });
}

/// The fields of an `AnyValue`.
pub(crate) fn any_value(any: &mut Message, value: &Value<'_>) {
    match value {
        Value::Str(s) => any.string(1, s),
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
    fn a_nested_message_written_in_place_has_its_minimal_length_at_every_size() {
        for size in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let text = "x".repeat(size);
            let mut nested = Message::new();
            nested.uint(1, 5);
            nested.message(2, |inner| inner.string(3, &text));
            nested.uint(4, 6);
            let mut expected = Message::new();
            expected.uint(1, 5);
            let mut inner = Message::new();
            inner.string(3, &text);
            expected.bytes(2, &inner.into_bytes());
            expected.uint(4, 6);
            assert_eq!(nested.into_bytes(), expected.into_bytes(), "size {size}");
        }
    }

    #[test]
    fn a_negative_int_is_ten_bytes_as_protobuf_int64_is() {
        let mut m = Message::new();
        attribute(&mut m, 9, "k", &Value::Int(-1));
        let bytes = m.into_bytes();
        // KeyValue{key "k", value AnyValue{int_value = -1 as 10 varint bytes}}
        assert_eq!(bytes.len(), 2 + 3 + 2 + 11);
    }
}
