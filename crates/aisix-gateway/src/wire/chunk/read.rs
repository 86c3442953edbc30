//! A chunk read for its facts (its first token, the choices it finishes, the text it adds):
//! hand-written serde visitors over the payload, one pass, nothing kept but the facts.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What a parsed chunk says about its choices.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChunkFacts {
    /// Some choice carries content: text, a tool call, a refusal, reasoning, or a finish.
    pub content: bool,
    /// The indices of the choices it finishes.
    pub finished: Vec<u32>,
    /// The text it adds to choice 0 (`delta.content`, or `text` of a legacy completion).
    pub text: Option<String>,
}

/// Reads a chunk's `data` payload; `None` when it is not a chunk (not a JSON object, or
/// `choices` not a list of objects). The text of choice 0 is copied out only when `text` asks
/// for it.
///
/// Read by hand-written visitors, one pass, no tree and no list: keys are compared as the bytes
/// between their quotes (no UTF-8 check, no copy unless escaped), and the values that only
/// matter for being there (a finish reason, a tool call, the role, the chunk's id and model) are
/// skipped unread. Only a string that may be the choice's text is read as text.
pub fn read(data: &[u8], text: bool) -> Option<ChunkFacts> {
    let mut facts = ChunkFacts::default();
    let mut de = serde_json::Deserializer::from_slice(data);
    de.deserialize_map(ChunkVisitor {
        facts: &mut facts,
        text,
    })
    .ok()?;
    de.end().ok()?;
    Some(facts)
}

/// A key, as the bytes between its quotes (unescaped when it holds an escape).
struct Key<'de>(Cow<'de, [u8]>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_bytes<E>(self, key: &'de [u8]) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_bytes<E>(self, key: &[u8]) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_vec())))
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key.as_bytes())))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.as_bytes().to_vec())))
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

/// The chunk: its `choices` read, every other member skipped.
struct ChunkVisitor<'f> {
    facts: &'f mut ChunkFacts,
    text: bool,
}

impl<'de> Visitor<'de> for ChunkVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a chunk object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if *key.0 == *b"choices" {
                map.next_value_seed(Choices {
                    facts: &mut *self.facts,
                    text: self.text,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// `choices`: each read as it comes, none kept.
struct Choices<'f> {
    facts: &'f mut ChunkFacts,
    text: bool,
}

impl<'de> DeserializeSeed<'de> for Choices<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Choices<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of choices")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(choice) = seq.next_element::<Choice<'de>>()? {
            choice.tell(self.facts, self.text);
        }
        Ok(())
    }
}

/// What one choice says: its index, whether it finishes, whether its `delta` carries
/// anything but the role, and the text it adds (`delta.content`, or a legacy `text`).
#[derive(Default)]
struct Choice<'de> {
    index: u32,
    finished: bool,
    carries: bool,
    content: Option<Cow<'de, str>>,
    text: Option<Cow<'de, str>>,
}

impl<'de> Choice<'de> {
    fn tell(self, facts: &mut ChunkFacts, text: bool) {
        if self.finished {
            facts.finished.push(self.index);
        }
        let added = match self.content {
            Some(content) => Some(content),
            None => self.text.filter(|t| !t.is_empty()),
        };
        facts.content |= self.finished || self.carries || added.is_some();
        if text
            && self.index == 0
            && let Some(added) = added
        {
            facts.text = Some(added.into_owned());
        }
    }
}

impl<'de> Deserialize<'de> for Choice<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Choice<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a choice object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Choice<'de>, A::Error> {
                let mut choice = Choice::default();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match &*key.0 {
                        b"index" => choice.index = map.next_value()?,
                        b"finish_reason" => {
                            choice.finished = map.next_value::<Option<IgnoredAny>>()?.is_some();
                        }
                        b"text" => choice.text = map.next_value::<Option<Cow<'de, str>>>()?,
                        b"delta" => {
                            let delta = map.next_value::<Option<Delta<'de>>>()?.unwrap_or_default();
                            (choice.carries, choice.content) = (delta.carries, delta.content);
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(choice)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// What a choice's `delta` says, read key by key with no map built: whether it carries anything
/// but its role (a member whose value is neither `null` nor `""`), and its `content` when that
/// is a string it carries.
#[derive(Debug, Default)]
struct Delta<'de> {
    carries: bool,
    content: Option<Cow<'de, str>>,
}

impl<'de> Deserialize<'de> for Delta<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Delta<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a delta object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta<'de>, A::Error> {
                let mut delta = Delta::default();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    if *key.0 == *b"role" {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                    match map.next_value::<Member<'de>>()? {
                        Member::Null | Member::Empty => {}
                        Member::Text(text) => {
                            delta.carries = true;
                            if *key.0 == *b"content" {
                                delta.content = Some(text);
                            }
                        }
                        Member::Other => {
                            delta.carries = true;
                            if *key.0 == *b"content" {
                                delta.content = None;
                            }
                        }
                    }
                }
                Ok(delta)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// A `delta` member's value, as far as it matters: `null`, `""`, other text, or anything else
/// (skipped unread).
enum Member<'de> {
    Null,
    Empty,
    Text(Cow<'de, str>),
    Other,
}

impl<'de> Deserialize<'de> for Member<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Kind;
        impl<'de> Visitor<'de> for Kind {
            type Value = Member<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Null)
            }
            fn visit_none<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Null)
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Member<'de>, E> {
                Ok(match text.is_empty() {
                    true => Member::Empty,
                    false => Member::Text(Cow::Borrowed(text)),
                })
            }
            fn visit_str<E>(self, text: &str) -> Result<Member<'de>, E> {
                Ok(match text.is_empty() {
                    true => Member::Empty,
                    false => Member::Text(Cow::Owned(text.to_owned())),
                })
            }
            fn visit_bool<E>(self, _: bool) -> Result<Member<'de>, E> {
                Ok(Member::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Member<'de>, E> {
                Ok(Member::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Member<'de>, E> {
                Ok(Member::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Member<'de>, E> {
                Ok(Member::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Member::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Member<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Member::Other)
            }
        }
        deserializer.deserialize_any(Kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reading `read` replaced (serde's derived structs, each value kept raw): the oracle
    /// its tests compare with.
    mod by_derive {
        use std::borrow::Cow;

        use serde::Deserialize;
        use serde_json::value::RawValue;

        use super::super::ChunkFacts;

        #[derive(Deserialize)]
        struct Chunk<'a> {
            #[serde(borrow, default)]
            choices: Vec<Choice<'a>>,
        }

        #[derive(Deserialize)]
        struct Choice<'a> {
            #[serde(default)]
            index: u32,
            #[serde(borrow, default)]
            delta: Option<Delta<'a>>,
            #[serde(borrow, default)]
            text: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            finish_reason: Option<&'a RawValue>,
        }

        /// What a choice's `delta` says, read key by key with no map built: whether it carries anything
        /// but its role (a key whose value is neither `null` nor `""`), and its `content` when that is
        /// one of them.
        #[derive(Debug, Default)]
        struct Delta<'a> {
            carries: bool,
            content: Option<&'a RawValue>,
        }

        impl<'de: 'a, 'a> Deserialize<'de> for Delta<'a> {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Keys<'a>(std::marker::PhantomData<&'a ()>);
                impl<'de: 'a, 'a> serde::de::Visitor<'de> for Keys<'a> {
                    type Value = Delta<'a>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a delta object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Delta<'a>, A::Error> {
                        let mut delta = Delta::default();
                        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                            let value: &'de RawValue = map.next_value()?;
                            let raw = value.get();
                            if key == "role" || raw == "null" || raw == "\"\"" {
                                continue;
                            }
                            delta.carries = true;
                            if key == "content" {
                                delta.content = Some(value);
                            }
                        }
                        Ok(delta)
                    }
                }
                deserializer.deserialize_map(Keys(std::marker::PhantomData))
            }
        }

        /// Reads a chunk's `data` payload; `None` when it is not a chunk (not JSON, no choices). The
        /// text of choice 0 is copied out only when `text` asks for it.
        pub(super) fn read(data: &[u8], text: bool) -> Option<ChunkFacts> {
            let chunk: Chunk<'_> = serde_json::from_slice(data).ok()?;
            let mut facts = ChunkFacts::default();
            for choice in chunk.choices {
                let finished = choice.finish_reason.is_some_and(|r| r.get() != "null");
                if finished {
                    facts.finished.push(choice.index);
                }
                let delta = choice.delta.unwrap_or_default();
                let added = match delta.content {
                    Some(content) => serde_json::from_str::<Cow<'_, str>>(content.get()).ok(),
                    None => choice.text.filter(|t| !t.is_empty()),
                };
                facts.content |= finished || delta.carries || added.is_some();
                if text
                    && choice.index == 0
                    && let Some(added) = added
                {
                    facts.text = Some(added.into_owned());
                }
            }
            Some(facts)
        }
    }

    #[test]
    fn a_role_only_chunk_is_not_content_and_a_delta_is() {
        let role = br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(read(role, true), Some(ChunkFacts::default()));
        let delta = br#"{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let facts = read(delta, true).unwrap();
        assert!(facts.content && facts.finished.is_empty());
        assert_eq!(facts.text.as_deref(), Some("Hel"));
        let tool = br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#;
        assert!(read(tool, true).unwrap().content);
        let legacy = br#"{"choices":[{"index":0,"text":"Hi","finish_reason":null}]}"#;
        assert_eq!(read(legacy, true).unwrap().text.as_deref(), Some("Hi"));
    }

    #[test]
    fn a_delta_is_read_key_by_key_and_its_text_copied_only_when_asked() {
        let delta = br#"{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let unasked = read(delta, false).unwrap();
        assert!(unasked.content && unasked.text.is_none());
        let escaped = br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b"}}]}"#;
        assert_eq!(read(escaped, true).unwrap().text.as_deref(), Some("a\"b"));
        let null = br#"{"choices":[{"index":0,"delta":null}]}"#;
        assert_eq!(read(null, true), Some(ChunkFacts::default()));
        let refusal = br#"{"choices":[{"index":0,"delta":{"content":null,"refusal":"no"}}]}"#;
        let facts = read(refusal, true).unwrap();
        assert!(facts.content && facts.text.is_none());
        // A delta that is not an object is not a chunk.
        assert_eq!(read(br#"{"choices":[{"delta":"x"}]}"#, true), None);
    }

    #[test]
    fn the_hand_written_reading_agrees_with_the_derived_one_on_every_kind_of_chunk() {
        let chunks: &[&[u8]] = &[
            br#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            br#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"a \"quoted\" \u00e9 \ud83d\ude00 line\nbreak"},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            br#"{"choices":[{"index":1,"delta":{},"finish_reason":"length"},{"index":0,"delta":{"content":"x"},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"refusal":"no"},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm","content":null},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":["not","text"]},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":{"k":[1,{"x":null}]}},"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":7,"x":true,"y":1.5,"z":-2}}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"one"},"finish_reason":null},{"index":1,"delta":{"content":"two"}}]}"#,
            br#"{"choices":[{"index":0,"delta":null,"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"text":"legacy","logprobs":null,"finish_reason":null}]}"#,
            br#"{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#,
            br#"{"id":"c","model":"m"}"#,
            br#"{"cho\u0069ces":[{"\u0069ndex":0,"delta":{"c\u006fntent":"esc"}}]}"#,
            br#" { "choices" : [ { "index" : 2 , "delta" : { "content" : "sp" } , "finish_reason" : "stop" } ] } "#,
            br#"{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":{"odd":true}}]}"#,
            br#"{"choices":null}"#,
            br#"{"choices":{"index":0}}"#,
            br#"{"choices":[1,2]}"#,
            br#"{"choices":[{"index":"0"}]}"#,
            br#"{"choices":[{"index":-1}]}"#,
            br#"{"choices":[{"delta":"x"}]}"#,
            br#"{"choices":[{"delta":{"content":"cut"#,
            br#"{"choices":[]} trailing"#,
            br#"not json"#,
            b"",
            br#""a string""#,
            b"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bad \xff utf-8\"}}]}",
        ];
        for chunk in chunks {
            for text in [false, true] {
                assert_eq!(
                    read(chunk, text),
                    by_derive::read(chunk, text),
                    "{} (text: {text})",
                    String::from_utf8_lossy(chunk)
                );
            }
        }
    }

    #[test]
    fn bytes_that_are_not_utf_8_in_a_member_not_read_do_not_refuse_the_chunk() {
        // The derived reading checked a delta's every member (its role, a tool call) as text;
        // what is skipped now is not checked. The text itself still is.
        let tool = b"{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"\xff\"}}]}}]}";
        let facts = read(tool, false).unwrap();
        assert!(facts.content && facts.finished.is_empty());
        assert_eq!(
            read(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}", true),
            None
        );
    }
}
