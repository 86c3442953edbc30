//! Message content as both OpenAI and Anthropic accept it: a plain string, or a list of typed
//! parts. One type for both dialects, so that the translators and their errors agree on it.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// A string, or a list of parts of type `P`.
#[derive(Debug, Clone, PartialEq)]
pub enum TextOr<P> {
    Text(String),
    Parts(Vec<P>),
}

impl<P> Default for TextOr<P> {
    fn default() -> Self {
        TextOr::Text(String::new())
    }
}

impl<P: Serialize> Serialize for TextOr<P> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            TextOr::Text(text) => serializer.serialize_str(text),
            TextOr::Parts(parts) => parts.serialize(serializer),
        }
    }
}

// Written out rather than `#[serde(untagged)]`, whose only error is "did not match any
// variant": a bad part inside the list is reported with its own message and index.
impl<'de, P: Deserialize<'de>> Deserialize<'de> for TextOr<P> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextOrVisitor<P>(PhantomData<P>);

        impl<'de, P: Deserialize<'de>> Visitor<'de> for TextOrVisitor<P> {
            type Value = TextOr<P>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(TextOr::Text(text))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                // The hint comes from the input; it is capped so that it cannot size memory.
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(TextOr::Parts(parts))
            }
        }

        deserializer.deserialize_any(TextOrVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
    struct Part {
        text: String,
    }

    #[test]
    fn a_string_and_a_list_both_parse_and_serialize_back_the_same() {
        let text: TextOr<Part> = serde_json::from_str(r#""hi""#).unwrap();
        assert_eq!(text, TextOr::Text("hi".into()));
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""hi""#);
        let parts: TextOr<Part> = serde_json::from_str(r#"[{"text":"a"}]"#).unwrap();
        assert_eq!(serde_json::to_string(&parts).unwrap(), r#"[{"text":"a"}]"#);
    }

    #[test]
    fn a_bad_part_is_reported_by_its_own_error() {
        let error = serde_json::from_str::<TextOr<Part>>(r#"[{"text":"a"},{"txt":1}]"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing field `text`"), "{error}");
        let error = serde_json::from_str::<TextOr<Part>>("5")
            .unwrap_err()
            .to_string();
        assert!(error.contains("a string or an array"), "{error}");
    }
}
