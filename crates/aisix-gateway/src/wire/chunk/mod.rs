//! OpenAI stream chunks beyond their usage: whether one carries content (its first token), which
//! choices it finishes, the text it adds, and where its `model` is. The cheap checks scan bytes;
//! a chunk is parsed only when one of them says it must be (a finish, or while the caller still
//! waits for the first token or keeps the text).

use std::sync::LazyLock;

use memchr::memmem;

mod read;

pub use read::{ChunkFacts, read};

/// Whether some `"finish_reason"` in `data` has a value other than `null`: only then is a
/// chunk worth parsing for the choices it finishes.
pub fn may_finish(data: &[u8]) -> bool {
    // Built once: `memmem::find_iter` would build a searcher for every chunk of every stream.
    static FINDER: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\"finish_reason\""));
    some_value_after_key(&FINDER, data, |value| !value.starts_with(b"null"))
}

/// Whether, after some match in `data` of the key `finder` looks for (quotes included), a
/// colon follows and then a value `accepts` takes (handed the bytes from its first one on).
/// Searched with `find` from each match on: `Finder::find_iter` copies the searcher at every
/// call (twice an event, for every event relayed).
pub fn some_value_after_key(
    finder: &memmem::Finder<'_>,
    data: &[u8],
    accepts: impl Fn(&[u8]) -> bool,
) -> bool {
    let key = finder.needle().len();
    let mut from = 0usize;
    while let Some(at) = data.get(from..).and_then(|rest| finder.find(rest)) {
        let found = from.saturating_add(at);
        let accepted = data
            .get(found.saturating_add(key)..)
            .map(<[u8]>::trim_ascii_start)
            .and_then(|rest| rest.strip_prefix(b":"))
            .is_some_and(|value| accepts(value.trim_ascii_start()));
        if accepted {
            return true;
        }
        // On past the whole match, as `find_iter` goes (in JSON no match begins inside another:
        // what follows a string's closing quote is never a letter), so that a rest shorter
        // than the key is not searched at all.
        from = found.saturating_add(key.max(1));
    }
    false
}

/// Whether a `data` payload is shaped like a JSON object at all: a stream that sends anything
/// else (a cut-off object, plain text) is malformed. Two byte checks, no parse.
pub fn is_object(data: &[u8]) -> bool {
    let data = data.trim_ascii();
    data.first() == Some(&b'{') && data.last() == Some(&b'}')
}

/// Whether a `data` payload is an error object (`{"error": ...}`) rather than a chunk.
pub fn is_error(data: &[u8]) -> bool {
    data.trim_ascii_start()
        .strip_prefix(b"{")
        .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"\"error\""))
}

/// The byte range of the first `"model"` string value in `json` (an answer or a chunk, where
/// `model` comes before the choices), quotes included. A `"model"` inside a string is escaped
/// (`\"model\"`) and never matches.
pub fn model_span(json: &[u8]) -> Option<(usize, usize)> {
    let at = MODEL_FINDER.find(json)?;
    match string_value_after_key(json, at.saturating_add(MODEL_KEY.len())) {
        Value::String(start, end) => Some((start, end)),
        Value::Other | Value::Incomplete => None,
    }
}

// shared: a searcher built once for the process, read-only (building one costs more than a
// short search).
static MODEL_FINDER: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(MODEL_KEY));

/// Where the first `"model"` key's value starts in `json`, just past its opening quote, when
/// that value is a string: the string itself is not read (see [`string_end`] for its end).
pub fn model_value_start(json: &[u8]) -> Option<usize> {
    let after_key = MODEL_FINDER.find(json)?.saturating_add(MODEL_KEY.len());
    string_start_after_key(json, after_key).ok()
}

/// The first `"model"` string value of `json` (an answer, a chunk, or an event that holds
/// one), unescaped: the model the upstream says answered.
pub fn model(json: &[u8]) -> Option<String> {
    model_text(json).map(std::borrow::Cow::into_owned)
}

/// [`model`], borrowed from `json` when the name has no escape in it (as names have).
pub fn model_text(json: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let (start, end) = model_span(json)?;
    let quoted = json.get(start..end)?;
    match quoted.get(1..quoted.len().saturating_sub(1)) {
        // No escape: the bytes between the quotes are the name.
        Some(inner) if !inner.contains(&b'\\') => std::str::from_utf8(inner)
            .ok()
            .map(std::borrow::Cow::Borrowed),
        _ => serde_json::from_slice::<String>(quoted)
            .ok()
            .map(std::borrow::Cow::Owned),
    }
}

/// The key [`model_span`] looks for, quotes included.
pub const MODEL_KEY: &[u8] = b"\"model\"";

/// What follows a key in a JSON text that may not have fully arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// `: "..."`: the string's byte range, quotes included.
    String(usize, usize),
    /// Something else: not a colon, or not a string.
    Other,
    /// The text ends before the answer is known.
    Incomplete,
}

/// Reads what follows a key that ends at `at` in `json`: a string value's span, something
/// else, or not enough bytes to tell. Each byte is looked at once.
pub fn string_value_after_key(json: &[u8], at: usize) -> Value {
    let start = match string_start_after_key(json, at) {
        Ok(start) => start,
        Err(other) => return other,
    };
    match string_end(json, start) {
        Some(end) => Value::String(start.saturating_sub(1), end.saturating_add(1)),
        None => Value::Incomplete,
    }
}

/// Where the string value after a key that ends at `at` starts, just past its opening quote;
/// or, when none does, what follows the key instead ([`Value::Other`], [`Value::Incomplete`]).
fn string_start_after_key(json: &[u8], at: usize) -> Result<usize, Value> {
    let rest = json.get(at..).unwrap_or_default();
    let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Err(Value::Incomplete);
    };
    if rest.get(colon) != Some(&b':') {
        return Err(Value::Other);
    }
    let after = at.saturating_add(colon).saturating_add(1);
    let Some(ws) = json
        .get(after..)
        .and_then(|rest| rest.iter().position(|b| !b.is_ascii_whitespace()))
    else {
        return Err(Value::Incomplete);
    };
    let value_start = after.saturating_add(ws);
    if json.get(value_start) != Some(&b'"') {
        return Err(Value::Other);
    }
    Ok(value_start.saturating_add(1))
}

/// Where the string whose text starts at `start` in `json` ends: its closing quote, past any
/// escape; `None` when the text ends first.
pub fn string_end(json: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while let Some(byte) = json.get(i) {
        match byte {
            b'\\' => i = i.saturating_add(2),
            b'"' => return Some(i),
            _ => i = i.saturating_add(1),
        }
    }
    None
}

/// `json` with its `model` value replaced by `model` (a JSON string literal), or `None` when it
/// has no model or already says `model`.
pub fn with_model(json: &[u8], model: &[u8]) -> Option<Vec<u8>> {
    let (start, end) = model_span(json)?;
    if json.get(start..end)? == model {
        return None;
    }
    let mut out = Vec::with_capacity(json.len().saturating_add(model.len()));
    out.extend_from_slice(json.get(..start)?);
    out.extend_from_slice(model);
    out.extend_from_slice(json.get(end..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_an_answer_or_event_names_is_read_unescaped_and_a_model_version_is_not_one() {
        let answer = br#"{"id":"c","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"message":{"content":"\"model\": \"no\""}}]}"#;
        assert_eq!(model(answer).as_deref(), Some("gpt-4o-2024-08-06"));
        let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude\\u002d3\"}}\n\n";
        assert_eq!(model(start).as_deref(), Some("claude-3"));
        assert_eq!(model(br#"{"modelVersion":"gemini-2.0-flash-001"}"#), None);
        assert_eq!(model(br#"{"model":null}"#), None);
    }

    #[test]
    fn finishes_are_found_per_choice() {
        let chunk = br#"{"choices":[{"index":1,"delta":{},"finish_reason":"stop"},{"index":0,"delta":{"content":"x"},"finish_reason":null}]}"#;
        assert!(may_finish(chunk));
        let facts = read(chunk, true).unwrap();
        assert_eq!(facts.finished, [1]);
        assert!(facts.content);
        assert!(!may_finish(
            br#"{"choices":[{"delta":{"content":"finish_reason"},"finish_reason" : null}]}"#
        ));
        assert!(may_finish(br#"{"choices":[{"finish_reason" : "length"}]}"#));
    }

    #[test]
    fn a_key_s_value_is_looked_for_after_every_match_not_only_the_first() {
        let finder = memmem::Finder::new(b"\"k\"");
        let object = |v: &[u8]| v.first() == Some(&b'{');
        // The first match is a string value, the second a key whose value is null: the third
        // is the one.
        let data = br#"{"a":"k","x":{"k":null},"k" : {"n":1}}"#;
        assert!(some_value_after_key(&finder, data, object));
        assert!(!some_value_after_key(
            &finder,
            br#"{"k":null,"b":"k"}"#,
            object
        ));
        // A match at the very end, or with no colon after it, is no key.
        assert!(!some_value_after_key(&finder, br#"{"a":"k""#, object));
        assert!(!some_value_after_key(&finder, br#"["k", {}]"#, object));
        assert!(!some_value_after_key(&finder, b"", object));
    }

    #[test]
    fn malformed_and_error_payloads_are_told_apart_from_chunks() {
        assert!(is_object(b" {\"choices\":[]} "));
        assert!(!is_object(b"{\"choices\":[{\"delta\":"));
        assert!(!is_object(b"hello"));
        assert!(is_error(br#"{ "error": {"message": "overloaded"}}"#));
        assert!(!is_error(br#"{"choices":[],"error_count":1}"#));
        assert_eq!(read(b"{\"choices\":[{\"delta\":", true), None);
    }

    #[test]
    fn a_model_string_s_start_is_found_past_its_key_colon_and_quote_and_nothing_else_is_one() {
        let answer = br#"{"id":"c", "model" :  "gpt-4o","choices":[]}"#;
        let start = model_value_start(answer).unwrap();
        assert!(answer[start..].starts_with(b"gpt-4o\""));
        assert_eq!(model_span(answer).map(|(s, _)| s + 1), Some(start));
        for other in [
            &br#"{"model":17}"#[..],
            br#"{"model" "x"}"#,
            br#"{"model":"#,
            br#"{"id":"c"}"#,
        ] {
            assert_eq!(
                model_value_start(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn the_model_value_is_replaced_in_place() {
        let chunk =
            br#"{"id":"c","model" : "up-x","choices":[{"delta":{"content":"say \"model\": 1"}}]}"#;
        let out = with_model(chunk, br#""primary""#).unwrap();
        assert_eq!(
            out,
            br#"{"id":"c","model" : "primary","choices":[{"delta":{"content":"say \"model\": 1"}}]}"#
        );
        assert_eq!(with_model(&out, br#""primary""#), None, "already named");
        assert_eq!(with_model(br#"{"id":"x"}"#, br#""p""#), None);
        let escaped = br#"{"model":"a\"b","x":1}"#;
        assert_eq!(
            with_model(escaped, br#""p""#).unwrap(),
            br#"{"model":"p","x":1}"#
        );
    }
}
