//! Token usage as OpenAI reports it, read from response bodies and stream chunks (and from
//! Anthropic's whole answers relayed as they are).

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Dialect;
use super::anthropic::types::TokenUsage;
use super::responses::ResponsesUsage;

/// Tokens one request consumed (the counts of an OpenAI `usage` object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// Both usages together (a stream and its continuation). Counts come from upstreams, so
    /// they saturate rather than overflow.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
        }
    }

    /// This usage with at least `pieces` completion tokens: a stream's content chunks (a model
    /// streams at least a token in each) count when its usage so far says less.
    pub fn with_output_at_least(mut self, pieces: u64) -> Usage {
        if self.completion_tokens < pieces {
            self.total_tokens = self
                .total_tokens
                .saturating_add(pieces.saturating_sub(self.completion_tokens));
            self.completion_tokens = pieces;
        }
        self
    }
}

#[derive(Deserialize)]
struct UsageProbe {
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct ResponsesProbe {
    usage: Option<ResponsesUsage>,
}

/// The `usage` object of a complete JSON response, if it has one.
///
/// OpenAI-shaped responses put `usage` last, so the last `"usage"` key is read first and only
/// its object is parsed (a few hundred bytes, whatever the size of the choices before it); when
/// that does not yield usage, the whole document is parsed, skipping everything else without
/// allocating. A `"usage"` inside a string value is escaped (`\"usage\"`) and never matches.
pub fn from_response(body: &[u8]) -> Option<Usage> {
    last_usage_object(body).or_else(|| serde_json::from_slice::<UsageProbe>(body).ok()?.usage)
}

/// The object after the last `"usage":` key of `body`, read as a `T` (whatever follows the
/// object is not looked at). A `"usage"` inside a string value is escaped and never matches.
pub fn last_usage_object<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    // Read once, from where it starts: the reading checks it is an object, and where it ends
    // is not needed.
    T::deserialize(&mut serde_json::Deserializer::from_slice(last_usage_value(
        body,
    )?))
    .ok()
}

/// `json` from the value of its last `"usage"` key on, when that value is an object.
fn last_usage_value(json: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"usage\"";
    // Built once: `memmem::rfind` would build a searcher for every answer.
    static FINDER: std::sync::LazyLock<memchr::memmem::FinderRev<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::FinderRev::new(KEY));
    let at = FINDER.rfind(json)?.saturating_add(KEY.len());
    let rest = json.get(at..)?.trim_ascii_start().strip_prefix(b":")?;
    let value = rest.trim_ascii_start();
    (value.first() == Some(&b'{')).then_some(value)
}

/// The byte range of the last `"usage"` object value in `json`.
fn last_usage_span(json: &[u8]) -> Option<(usize, usize)> {
    let value = last_usage_value(json)?;
    let start = json.len().saturating_sub(value.len());
    let raw: &serde_json::value::RawValue =
        serde::Deserialize::deserialize(&mut serde_json::Deserializer::from_slice(value)).ok()?;
    Some((start, start.saturating_add(raw.get().len())))
}

/// The usage of a whole answer that is relayed rather than held: its first and last
/// [`WINDOW`] bytes are kept as they pass (amortized one copy per byte), and read at the end,
/// the tail first ([`from_response`] on the whole answer when it fit in the head), in the
/// answer's dialect.
#[derive(Debug, Default)]
pub struct UsageWindow {
    /// The shape of the answer's `usage` object; `None` for an answer that reports none (a
    /// token count), whose bytes are not kept.
    dialect: Option<Dialect>,
    /// The first piece, kept by reference rather than copied while it is the only one and fits
    /// the window ([`UsageWindow::push_shared`]): a whole answer in one piece costs no copy.
    first: Option<Bytes>,
    head: Vec<u8>,
    /// The last bytes, between `WINDOW` and `2 * WINDOW` of them once more than `WINDOW` came
    /// (until then the head holds them all, and the tail is left empty).
    tail: Vec<u8>,
    total: usize,
}

/// The bytes [`UsageWindow`] keeps at each end: a usage object with its details is a few
/// hundred.
pub const WINDOW: usize = 16 * 1024;

impl UsageWindow {
    /// A window for an answer whose `usage` is in `dialect`'s shape (`None`: it has none).
    pub fn new(dialect: Option<Dialect>) -> Self {
        Self {
            dialect,
            ..Self::default()
        }
    }

    /// Notes the answer's next piece, kept by reference (no copy) if it is the first and fits
    /// the window.
    pub fn push_shared(&mut self, piece: &Bytes) {
        if self.dialect.is_some()
            && self.total == 0
            && self.first.is_none()
            && piece.len() <= WINDOW
        {
            self.total = piece.len();
            self.first = Some(piece.clone());
            return;
        }
        self.push(piece);
    }

    /// Notes the answer's next piece.
    pub fn push(&mut self, piece: &[u8]) {
        if self.dialect.is_none() {
            return;
        }
        if let Some(first) = self.first.take() {
            self.head.extend_from_slice(&first);
        }
        let before = self.total;
        self.total = self.total.saturating_add(piece.len());
        let room = WINDOW.saturating_sub(self.head.len());
        self.head
            .extend_from_slice(piece.get(..room.min(piece.len())).unwrap_or_default());
        if self.total <= WINDOW {
            // All of it is in the head.
            return;
        }
        if before <= WINDOW {
            // Past the window for the first time: the tail starts with all that came before,
            // which the head holds.
            self.tail.clear();
            self.tail
                .extend_from_slice(self.head.get(..before).unwrap_or_default());
        }
        if let Some(last) = piece
            .len()
            .checked_sub(WINDOW)
            .and_then(|from| piece.get(from..))
        {
            self.tail.clear();
            self.tail.extend_from_slice(last);
            return;
        }
        if self.tail.len().saturating_add(piece.len()) > 2 * WINDOW {
            let keep = WINDOW.saturating_sub(piece.len());
            self.tail.drain(..self.tail.len().saturating_sub(keep));
        }
        self.tail.extend_from_slice(piece);
    }

    /// The answer's first bytes (up to [`WINDOW`]) as kept; empty for an answer that reports
    /// no usage.
    pub fn head(&self) -> &[u8] {
        self.first.as_deref().unwrap_or(&self.head)
    }

    /// The answer's usage, once it has all passed.
    pub fn usage(&self) -> Option<Usage> {
        match self.dialect? {
            Dialect::OpenAi if self.total <= WINDOW => from_response(self.head()),
            Dialect::OpenAi => {
                last_usage_object(&self.tail).or_else(|| last_usage_object(self.head()))
            }
            // The Responses API puts `usage` after the output; a small answer is all in the head.
            Dialect::Responses => {
                let read = |bytes: &[u8]| last_usage_object::<ResponsesUsage>(bytes);
                let usage = if self.total <= WINDOW {
                    read(self.head()).or_else(|| {
                        serde_json::from_slice::<ResponsesProbe>(self.head())
                            .ok()?
                            .usage
                    })
                } else {
                    read(&self.tail).or_else(|| read(self.head()))
                };
                usage.map(ResponsesUsage::to_usage)
            }
            // Anthropic's answers put `usage` last; a small one is all in the head.
            Dialect::Anthropic => {
                let read = |bytes: &[u8]| last_usage_object::<TokenUsage>(bytes);
                let usage = if self.total <= WINDOW {
                    read(self.head())
                } else {
                    read(&self.tail).or_else(|| read(self.head()))
                };
                usage.map(|u| u.to_usage())
            }
        }
    }
}

/// `json` (an answer or a chunk) with its usage object replaced by `usage`.
pub fn with_usage(json: &[u8], usage: Usage) -> Option<Vec<u8>> {
    let (start, end) = last_usage_span(json)?;
    let object = format!(
        "{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}}}",
        usage.prompt_tokens, usage.completion_tokens, usage.total_tokens
    );
    let mut out = Vec::with_capacity(json.len().saturating_add(object.len()));
    out.extend_from_slice(json.get(..start)?);
    out.extend_from_slice(object.as_bytes());
    out.extend_from_slice(json.get(end..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_pieces_raise_the_output_only_when_the_usage_says_less() {
        let usage = Usage {
            prompt_tokens: 9,
            completion_tokens: 0,
            total_tokens: 9,
        };
        let raised = usage.with_output_at_least(2);
        assert_eq!((raised.completion_tokens, raised.total_tokens), (2, 11));
        let reported = Usage {
            completion_tokens: 5,
            total_tokens: 14,
            ..usage
        };
        assert_eq!(reported.with_output_at_least(2), reported);
    }

    #[test]
    fn usages_from_upstreams_add_up_saturating_instead_of_overflowing() {
        let huge = Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: u64::MAX - 1,
            total_tokens: u64::MAX,
        };
        let small = Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            total_tokens: 7,
        };
        let max = Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: u64::MAX,
            total_tokens: u64::MAX,
        };
        assert_eq!(huge.plus(small), max);
        assert_eq!(small.plus(huge), max);
        assert_eq!(
            small.plus(small),
            Usage {
                prompt_tokens: 6,
                completion_tokens: 8,
                total_tokens: 14,
            }
        );
    }

    #[test]
    fn usage_is_read_from_a_chat_completion() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"usage"}}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;
        assert_eq!(
            from_response(body),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 5,
                total_tokens: 8
            })
        );
    }

    #[test]
    fn usage_before_the_choices_is_found_too() {
        let body = br#"{"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"choices":[{"message":{"content":"say \"usage\": {}"}}]}"#;
        assert_eq!(from_response(body).map(|u| u.total_tokens), Some(3));
    }

    #[test]
    fn nested_details_are_ignored() {
        let body = br#"{"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        assert_eq!(from_response(body).map(|u| u.prompt_tokens), Some(9));
    }

    #[test]
    fn missing_or_null_usage_is_none() {
        assert_eq!(from_response(br#"{"id":"x"}"#), None);
        assert_eq!(from_response(br#"{"usage":null}"#), None);
        assert_eq!(from_response(b"garbage"), None);
    }

    #[test]
    fn usage_is_replaced_in_place() {
        let chunk = b"data: {\"choices\":[],\"usage\": {\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3,\"x\":{}}}\n\n";
        let usage = Usage {
            prompt_tokens: 10,
            completion_tokens: 20,
            total_tokens: 30,
        };
        let out = with_usage(chunk, usage).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "data: {\"choices\":[],\"usage\": {\"prompt_tokens\":10,\"completion_tokens\":20,\"total_tokens\":30}}\n\n"
        );
        assert_eq!(with_usage(b"{\"usage\":null}", usage), None);
    }

    #[test]
    fn embeddings_usage_has_no_completion_tokens() {
        let usage = from_response(br#"{"usage":{"prompt_tokens":4,"total_tokens":4}}"#).unwrap();
        assert_eq!(usage.completion_tokens, 0);
        assert_eq!(usage.total_tokens, 4);
    }
    #[test]
    fn a_relayed_answer_s_usage_is_read_from_its_ends_however_it_is_cut() {
        let usage = r#""usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}"#;
        let small = format!(r#"{{"id":"x",{usage}}}"#);
        let filler = "a".repeat(5 * WINDOW);
        let large_last =
            format!(r#"{{"choices":[{{"message":{{"content":"{filler}"}}}}],{usage}}}"#);
        let large_first =
            format!(r#"{{{usage},"choices":[{{"message":{{"content":"{filler}"}}}}]}}"#);
        for body in [&small, &large_last, &large_first] {
            let whole = from_response(body.as_bytes());
            assert!(whole.is_some());
            for size in [1, 7, 1000, WINDOW - 1, WINDOW, WINDOW + 1, body.len()] {
                let mut window = UsageWindow::new(Some(Dialect::OpenAi));
                for piece in body.as_bytes().chunks(size) {
                    window.push(piece);
                }
                assert_eq!(window.usage(), whole, "pieces of {size}");
                assert!(window.tail.len() <= 2 * WINDOW && window.head.len() <= WINDOW);
            }
        }
    }

    #[test]
    fn pieces_pushed_shared_read_as_pieces_pushed_copied_and_a_lone_small_piece_is_not_copied() {
        let usage = r#""usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}"#;
        let filler = "a".repeat(3 * WINDOW);
        let small = format!(r#"{{"choices":[],{usage}}}"#);
        let large = format!(r#"{{"choices":[{{"message":{{"content":"{filler}"}}}}],{usage}}}"#);
        for body in [&small, &large] {
            for size in [1, 1000, WINDOW, WINDOW + 1, body.len()] {
                let mut copied = UsageWindow::new(Some(Dialect::OpenAi));
                let mut shared = UsageWindow::new(Some(Dialect::OpenAi));
                for piece in body.as_bytes().chunks(size) {
                    copied.push(piece);
                    shared.push_shared(&Bytes::copy_from_slice(piece));
                }
                assert_eq!(shared.usage(), copied.usage(), "pieces of {size}");
                assert!(shared.usage().is_some());
                assert_eq!(shared.head(), copied.head(), "pieces of {size}");
            }
        }
        let mut lone = UsageWindow::new(Some(Dialect::OpenAi));
        lone.push_shared(&Bytes::from(small.clone()));
        assert!(
            lone.head.is_empty() && lone.tail.is_empty(),
            "kept by reference"
        );
        assert_eq!(lone.head(), small.as_bytes());
    }

    #[test]
    fn an_anthropic_answer_s_usage_counts_cached_prompt_tokens() {
        let usage = r#""usage":{"input_tokens":3,"output_tokens":5,"cache_read_input_tokens":7,"cache_creation_input_tokens":11}"#;
        let filler = "a".repeat(3 * WINDOW);
        let small = format!(r#"{{"type":"message","content":[],{usage}}}"#);
        let large = format!(
            r#"{{"type":"message","content":[{{"type":"text","text":"{filler}"}}],{usage}}}"#
        );
        let expected = Usage {
            prompt_tokens: 21,
            completion_tokens: 5,
            total_tokens: 26,
        };
        for body in [&small, &large] {
            for size in [1, 1000, WINDOW + 1, body.len()] {
                let mut window = UsageWindow::new(Some(Dialect::Anthropic));
                for piece in body.as_bytes().chunks(size) {
                    window.push(piece);
                }
                assert_eq!(window.usage(), Some(expected), "pieces of {size}");
            }
        }
        let mut none = UsageWindow::new(None);
        none.push_shared(&Bytes::from(small.clone()));
        assert!(none.first.is_none(), "an answer without usage is not kept");
        none.push(small.as_bytes());
        assert_eq!(none.usage(), None);
        assert!(none.head.is_empty(), "an answer without usage is not kept");
    }
}
