//! The `model` of a whole JSON answer renamed while the answer streams past, piece by piece:
//! the same edit as [`chunk::with_model`] on the whole body, holding back at most the bytes of
//! one key and its value ([`MAX_HELD`]) instead of the body. Linear in the body's length.

use bytes::{Bytes, BytesMut};

use super::chunk::{self, MODEL_KEY, Value};

/// The most bytes held back while a `"model"` key's value is still arriving; a longer value
/// (no model name is) is relayed as it is.
pub const MAX_HELD: usize = 4096;

/// Renames the first `"model"` string value of a JSON text fed in pieces.
#[derive(Debug)]
pub struct Renamer {
    /// The new value, a JSON string literal.
    model: Bytes,
    /// Bytes not sent yet: a possible start of the key, or the key and its value so far.
    held: BytesMut,
    /// The key was found at the start of `held`.
    in_value: bool,
    /// Renamed, or found not to need it: the rest passes as it comes.
    done: bool,
}

impl Renamer {
    /// Renames `model` into `model` (a JSON string literal).
    pub fn new(model: Bytes) -> Self {
        Self {
            model,
            held: BytesMut::new(),
            in_value: false,
            done: false,
        }
    }

    /// Takes the body's next piece and returns what may be sent now (possibly nothing).
    pub fn push(&mut self, piece: Bytes) -> Bytes {
        if self.done {
            return piece;
        }
        self.held.extend_from_slice(&piece);
        if !self.in_value {
            match memchr::memmem::find(&self.held, MODEL_KEY) {
                Some(at) => {
                    let before = self.held.split_to(at).freeze();
                    self.in_value = true;
                    return join(before, self.value());
                }
                None => {
                    // A key cut by this piece's end may complete with the next one.
                    let keep = MODEL_KEY.len().saturating_sub(1).min(self.held.len());
                    let sendable = self.held.len().saturating_sub(keep);
                    return self.held.split_to(sendable).freeze();
                }
            }
        }
        self.value()
    }

    /// The body has ended: whatever is still held.
    pub fn finish(&mut self) -> Bytes {
        self.done = true;
        self.held.split().freeze()
    }

    /// With the key at the start of `held`: the renamed key and value once the value is in,
    /// everything held when it is not a string (or too long to be a name), else nothing yet.
    fn value(&mut self) -> Bytes {
        match chunk::string_value_after_key(&self.held, MODEL_KEY.len()) {
            Value::String(start, end) => {
                self.done = true;
                let (Some(before), Some(after)) = (self.held.get(..start), self.held.get(end..))
                else {
                    return self.finish();
                };
                let mut out =
                    BytesMut::with_capacity(self.held.len().saturating_add(self.model.len()));
                out.extend_from_slice(before);
                out.extend_from_slice(&self.model);
                out.extend_from_slice(after);
                self.held.clear();
                out.freeze()
            }
            Value::Incomplete if self.held.len() <= MAX_HELD => Bytes::new(),
            Value::Other | Value::Incomplete => self.finish(),
        }
    }
}

/// `a` then `b`, copied only when both have bytes.
pub fn join(a: Bytes, b: Bytes) -> Bytes {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let mut out = BytesMut::with_capacity(a.len().saturating_add(b.len()));
    out.extend_from_slice(&a);
    out.extend_from_slice(&b);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed_in_pieces(json: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut renamer = Renamer::new(Bytes::from_static(br#""primary""#));
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&json.len())) {
            let cut = cut.clamp(from, json.len());
            out.extend_from_slice(&renamer.push(Bytes::copy_from_slice(&json[from..cut])));
            from = cut;
        }
        out.extend_from_slice(&renamer.finish());
        out
    }

    #[test]
    fn the_model_is_renamed_however_the_answer_is_cut() {
        let json = br#"{"id":"c","model" : "up-x","choices":[{"message":{"content":"say \"model\": 1"}}]}"#;
        let whole = chunk::with_model(json, br#""primary""#).unwrap();
        for cut in 0..=json.len() {
            assert_eq!(renamed_in_pieces(json, &[cut]), whole, "cut at {cut}");
        }
        assert_eq!(
            renamed_in_pieces(json, &(0..json.len()).collect::<Vec<_>>()),
            whole
        );
    }

    #[test]
    fn an_answer_without_a_model_string_passes_unchanged() {
        for json in [
            &br#"{"object":"list","data":[{"embedding":[0.1]}]}"#[..],
            br#"{"model":null,"x":1}"#,
            br#"{"model"  "#,
        ] {
            for cut in 0..=json.len() {
                assert_eq!(renamed_in_pieces(json, &[cut]), json, "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_value_too_long_to_be_a_name_is_not_held() {
        let mut json = br#"{"model":""#.to_vec();
        json.extend(std::iter::repeat_n(b'a', 2 * MAX_HELD));
        json.extend_from_slice(br#""}"#);
        let mut renamer = Renamer::new(Bytes::from_static(br#""p""#));
        let mut out = Vec::new();
        let mut most_held = 0;
        for piece in json.chunks(100) {
            out.extend_from_slice(&renamer.push(Bytes::copy_from_slice(piece)));
            most_held = most_held.max(renamer.held.len());
        }
        out.extend_from_slice(&renamer.finish());
        assert_eq!(out, json);
        assert!(most_held <= MAX_HELD, "held {most_held}");
    }
}
