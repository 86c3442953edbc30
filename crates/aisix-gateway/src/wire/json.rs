//! Typed JSON parsing for the translating paths: one pass, linear in the input, and an error
//! that names the path of the first bad value (`messages[2].content[0].type: …`) in a message
//! of bounded length, safe to show a client.

use std::borrow::Cow;

use serde::de::DeserializeOwned;

/// Longest message [`parse`] returns; serde quotes the offending input, which is the client's.
const MAX_MESSAGE: usize = 512;

/// Why a document did not parse as the expected type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON at all (a syntax error or a truncated document).
    Syntax(String),
    /// JSON, but not of the expected shape.
    Shape(String),
}

impl ParseError {
    pub fn message(&self) -> &str {
        match self {
            ParseError::Syntax(message) | ParseError::Shape(message) => message,
        }
    }
}

/// Parses `bytes` as a `T`, refusing trailing data.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ParseError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(value) => value,
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner();
            let message = if path == "." {
                inner.to_string()
            } else {
                format!("{path}: {inner}")
            };
            return Err(if inner.is_syntax() || inner.is_eof() {
                ParseError::Syntax(bounded(message))
            } else {
                ParseError::Shape(bounded(message))
            });
        }
    };
    deserializer
        .end()
        .map_err(|e| ParseError::Syntax(bounded(e.to_string())))?;
    Ok(value)
}

/// `message`, cut at a character boundary to at most 512 bytes and marked when cut.
pub fn bounded(message: String) -> String {
    match cut(&message, MAX_MESSAGE) {
        Cow::Borrowed(_) => message,
        Cow::Owned(cut) => cut,
    }
}

/// The marker that ends a text cut by [`cut`].
pub const CUT_MARK: &str = "… (cut)";

/// `text` cut at a character boundary to at most `max` bytes, marked with [`CUT_MARK`] when
/// cut; borrowed when it fits.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    Cow::Owned(format!("{}{CUT_MARK}", &text[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        items: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        n: u32,
    }

    #[test]
    fn shape_errors_name_the_path_of_the_bad_value() {
        let error = parse::<Doc>(br#"{"items":[{"n":1},{"n":"x"}]}"#).unwrap_err();
        assert!(
            matches!(&error, ParseError::Shape(m) if m.starts_with("items[1].n: invalid type")),
            "{error:?}"
        );
    }

    #[test]
    fn syntax_errors_and_trailing_data_are_syntax() {
        assert!(matches!(
            parse::<Doc>(br#"{"items":["#),
            Err(ParseError::Syntax(_))
        ));
        assert!(matches!(
            parse::<Doc>(br#"{"items":[]} x"#),
            Err(ParseError::Syntax(_))
        ));
    }

    #[test]
    fn echoed_input_is_cut() {
        let role = "r".repeat(100_000);
        let body = format!(r#"{{"items":[{{"n":"{role}"}}]}}"#);
        let error = parse::<Doc>(body.as_bytes()).unwrap_err();
        assert!(error.message().len() < MAX_MESSAGE + 16);
        assert!(error.message().ends_with("(cut)"));
    }
}
