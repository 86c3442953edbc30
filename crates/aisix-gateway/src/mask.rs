//! What the gateway adds to every upstream request and must never echo: a provider key's
//! `api_key` and each of its static `headers` values. [`Masks`] writes them as `***` in what a
//! provider sends back that reaches a client or a log (a 4xx error body, a stream's error
//! event, a translation's complaint). Values shorter than 8 characters are not looked for:
//! they would match ordinary text.

use std::borrow::Cow;

use bytes::Bytes;

use crate::error::GatewayError;

/// The shortest value looked for.
const MIN_LEN: usize = 8;

const MASK: &str = "***";

/// One provider key's values to mask, longest first (so one that contains another is masked
/// whole), each also as a JSON string spells it when that differs.
#[derive(Debug, Default)]
pub(crate) struct Masks {
    values: Box<[Box<str>]>,
}

impl Masks {
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut all: Vec<Box<str>> = Vec::new();
        for value in values.into_iter().filter(|v| v.len() >= MIN_LEN) {
            all.push(value.into());
            let quoted = serde_json::Value::from(value).to_string();
            let escaped = &quoted[1..quoted.len() - 1];
            if escaped != value {
                all.push(escaped.into());
            }
        }
        all.sort_by_key(|v| std::cmp::Reverse(v.len()));
        all.dedup();
        Self {
            values: all.into_boxed_slice(),
        }
    }

    /// `text` with every value masked.
    pub(crate) fn text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut masked = Cow::Borrowed(text);
        for value in &self.values {
            if masked.contains(&**value) {
                masked = Cow::Owned(masked.replace(&**value, MASK));
            }
        }
        masked
    }

    /// `error` with every value masked in its message and in the provider's error object it
    /// carries (one that is not text is dropped: the gateway's own message stands).
    pub(crate) fn error(&self, mut error: GatewayError) -> GatewayError {
        if self.values.is_empty() {
            return error;
        }
        if let Cow::Owned(message) = self.text(&error.message) {
            error.message = message;
        }
        if let Some(body) = error.upstream_body.take() {
            error.upstream_body = match std::str::from_utf8(&body).map(|text| self.text(text)) {
                Ok(Cow::Borrowed(_)) => Some(body),
                Ok(Cow::Owned(masked)) => Some(Bytes::from(masked)),
                Err(_) => None,
            };
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn every_value_is_masked_raw_and_as_json_spells_it_and_short_ones_are_left() {
        let masks = Masks::new(["sk-provider-key-1", "Bearer \"front\"-secret", "org-1"]);
        let text = "key sk-provider-key-1, header Bearer \"front\"-secret, org org-1";
        assert_eq!(masks.text(text), "key ***, header ***, org org-1");

        let mut error = GatewayError::new(ErrorKind::InvalidRequest, text);
        let body = serde_json::json!({"error": {"message": text}}).to_string();
        error.upstream_body = Some(Bytes::from(body));
        let error = masks.error(error);
        assert_eq!(error.message, "key ***, header ***, org org-1");
        let body: serde_json::Value =
            serde_json::from_slice(error.upstream_body.as_deref().unwrap()).unwrap();
        assert_eq!(body["error"]["message"], "key ***, header ***, org org-1");
    }

    #[test]
    fn a_value_inside_a_longer_one_leaves_no_part_of_the_longer_one() {
        let masks = Masks::new(["secret-value", "Bearer secret-value-extended"]);
        assert_eq!(masks.text("got Bearer secret-value-extended"), "got ***");
        assert!(matches!(masks.text("nothing here"), Cow::Borrowed(_)));
    }
}
