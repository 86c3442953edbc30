//! OpenAI request bodies: find `model`, `stream`, `stream_options` and the output-token cap in
//! one validating parse, then splice new values into the original bytes. The document is never re-serialized, so
//! fields the gateway does not know pass through byte for byte.
//!
//! Cost: one serde_json pass that borrows (no allocation for skipped fields), plus one copy of
//! the body when something must change.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Why a request body was refused; the message is safe to show the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or not a JSON object, or a duplicate key.
    InvalidJson(String),
    MissingModel,
    /// A known field with the wrong type: (field, expected).
    InvalidField(&'static str, &'static str),
}

/// What the gateway needs from a request body, with byte spans into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub model: String,
    pub stream: bool,
    /// `n`: how many choices the answer has (1 when absent).
    pub choices: u32,
    /// `max_completion_tokens`, else `max_tokens`, when given as a non-negative integer (the
    /// limiter's output estimate; anything else is left for the provider to judge).
    pub max_output_tokens: Option<u64>,
    /// Byte range of the `service_tier` value (a JSON string), if present and not null: only a
    /// key with a spending policy reads it.
    service_tier_span: Option<(usize, usize)>,
    /// Byte range of the Responses API's `previous_response_id` value, if present and not null.
    previous_response_span: Option<(usize, usize)>,
    /// The Responses API's `store`, when given as `true` or `false`.
    pub store: Option<bool>,
    /// Byte range of the `model` value (the quoted string) in the body.
    model_span: (usize, usize),
    /// Byte range of the `stream_options` value, if present and not null.
    stream_options: Option<StreamOptions>,
    /// Offset just after the top-level `{`.
    object_start: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamOptions {
    span: (usize, usize),
    include_usage: bool,
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow)]
    n: Option<&'a RawValue>,
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
    /// The Responses API's output cap.
    #[serde(borrow)]
    max_output_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    service_tier: Option<&'a RawValue>,
    /// The Responses API's state fields: found in the same pass, read only by that endpoint.
    #[serde(borrow)]
    previous_response_id: Option<&'a RawValue>,
    #[serde(borrow)]
    store: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct StreamOptionsProbe {
    include_usage: Option<bool>,
}

/// Validates the body as a JSON object and finds the fields the gateway acts on.
pub fn inspect(body: &[u8]) -> Result<Inspected, BodyError> {
    let object_start = match body.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) if body.get(i) == Some(&b'{') => i.saturating_add(1),
        _ => {
            return Err(BodyError::InvalidJson(
                "the request body must be a JSON object".into(),
            ));
        }
    };
    let probe: Probe<'_> = serde_json::from_slice(body)
        .map_err(|e| BodyError::InvalidJson(format!("could not parse the JSON body: {e}")))?;

    let model_raw = match probe.model {
        Some(raw) if raw.get() != "null" => raw,
        _ => return Err(BodyError::MissingModel),
    };
    let model: Cow<'_, str> = serde_json::from_str(model_raw.get())
        .map_err(|_| BodyError::InvalidField("model", "a string"))?;
    if model.is_empty() {
        return Err(BodyError::MissingModel);
    }

    let stream = match probe.stream.map(RawValue::get) {
        None | Some("null") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(BodyError::InvalidField("stream", "a boolean")),
    };

    // Not ours to judge: a provider refuses an `n` it does not accept.
    let choices = probe
        .n
        .and_then(|n| n.get().parse::<u32>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1);

    let stream_options = match probe.stream_options {
        Some(raw) if raw.get() != "null" => {
            if !raw.get().starts_with('{') {
                return Err(BodyError::InvalidField("stream_options", "an object"));
            }
            // The only field read; any other is the provider's to judge.
            let options: StreamOptionsProbe = serde_json::from_str(raw.get()).map_err(|_| {
                BodyError::InvalidField("stream_options.include_usage", "a boolean")
            })?;
            Some(StreamOptions {
                span: span_of(body, raw.get()),
                include_usage: options.include_usage.unwrap_or(false),
            })
        }
        _ => None,
    };

    let max_output_tokens = [
        probe.max_completion_tokens,
        probe.max_tokens,
        probe.max_output_tokens,
    ]
    .into_iter()
    .flatten()
    .find_map(|raw| raw.get().parse::<u64>().ok());

    Ok(Inspected {
        model: model.into_owned(),
        stream,
        choices,
        max_output_tokens,
        service_tier_span: probe
            .service_tier
            .filter(|raw| raw.get() != "null")
            .map(|raw| span_of(body, raw.get())),
        previous_response_span: probe
            .previous_response_id
            .filter(|raw| raw.get() != "null")
            .map(|raw| span_of(body, raw.get())),
        store: match probe.store.map(RawValue::get) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        },
        model_span: span_of(body, model_raw.get()),
        stream_options,
        object_start,
    })
}

/// The byte range of `part`, a slice borrowed from `whole`.
fn span_of(whole: &[u8], part: &str) -> (usize, usize) {
    let start = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    (start, start.saturating_add(part.len()))
}

impl Inspected {
    /// The request's `service_tier` as sent, `None` when absent or null; a value that is not a
    /// string reads as its JSON text (the provider refuses it).
    pub fn service_tier<'b>(&self, body: &'b [u8]) -> Option<Cow<'b, str>> {
        let (start, end) = self.service_tier_span?;
        let raw = body.get(start..end)?;
        Some(match serde_json::from_slice::<Cow<'b, str>>(raw) {
            Ok(tier) => tier,
            Err(_) => String::from_utf8_lossy(raw),
        })
    }

    /// The Responses request's `previous_response_id`, `None` when absent, null or not a string.
    pub fn previous_response_id<'b>(&self, body: &'b [u8]) -> Option<Cow<'b, str>> {
        let (start, end) = self.previous_response_span?;
        serde_json::from_slice::<Cow<'b, str>>(body.get(start..end)?).ok()
    }

    /// Whether the client asked for the usage-only final chunk of a stream.
    pub fn client_wants_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }

    /// The body for the upstream: `model` replaced by `upstream_model` (a JSON string literal,
    /// quotes included; `None` keeps the client's) and, when `include_usage` (a stream whose
    /// provider takes the option), `stream_options.include_usage` forced on so usage is exact.
    /// Returns the original bytes when nothing changes.
    pub fn rewrite(
        &self,
        body: &Bytes,
        upstream_model: Option<&[u8]>,
        include_usage: bool,
    ) -> Bytes {
        let (model_start, model_end) = self.model_span;
        let upstream_model =
            upstream_model.filter(|m| body.get(model_start..model_end) != Some(*m));
        let same_model = upstream_model.is_none();
        let usage_edit: Option<(usize, usize, Cow<'static, [u8]>)> = match &self.stream_options {
            _ if !include_usage => None,
            Some(options) if options.include_usage => None,
            Some(options) => {
                let (start, end) = options.span;
                Some((
                    start,
                    end,
                    Cow::Owned(with_include_usage(body.get(start..end).unwrap_or_default())),
                ))
            }
            None => Some((
                self.object_start,
                self.object_start,
                Cow::Borrowed(&br#""stream_options":{"include_usage":true},"#[..]),
            )),
        };
        if same_model && usage_edit.is_none() {
            return body.clone();
        }

        // At most two edits, in body order, on the stack; the output sized exactly, so that
        // freezing it allocates nothing more.
        let model_edit = upstream_model.map(|m| (model_start, model_end, m));
        let usage_edit = usage_edit
            .as_ref()
            .map(|(start, end, bytes)| (*start, *end, &bytes[..]));
        let mut edits = [model_edit, usage_edit];
        edits.sort_by_key(|edit| edit.map(|(start, _, _)| start));
        let edits = edits.iter().flatten();

        let len = edits.clone().fold(body.len(), |len, (start, end, bytes)| {
            len.saturating_sub(end.saturating_sub(*start))
                .saturating_add(bytes.len())
        });
        let mut out = BytesMut::with_capacity(len);
        let mut at = 0;
        for &(start, end, bytes) in edits {
            out.extend_from_slice(body.get(at..start).unwrap_or_default());
            out.extend_from_slice(bytes);
            at = end;
        }
        out.extend_from_slice(body.get(at..).unwrap_or_default());
        out.freeze()
    }
}

/// `stream_options` with `include_usage: true`, other options kept.
fn with_include_usage(options: &[u8]) -> Vec<u8> {
    let mut value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(options).unwrap_or_default();
    value.insert("include_usage".to_owned(), serde_json::Value::Bool(true));
    serde_json::to_vec(&value).unwrap_or_else(|_| br#"{"include_usage":true}"#.to_vec())
}

/// A JSON string literal for `s`, quotes included.
pub fn json_string(s: &str) -> Bytes {
    Bytes::from(serde_json::Value::String(s.to_owned()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(body: &str, model: &str) -> String {
        let bytes = Bytes::from(body.to_owned());
        let inspected = inspect(&bytes).unwrap();
        let out = inspected.rewrite(&bytes, Some(&json_string(model)), inspected.stream);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn model_is_replaced_in_place_and_everything_else_is_untouched() {
        let body = r#"{ "messages":[{"role":"user","content":"hi \"model\""}],  "model" : "demo", "x":1.50}"#;
        assert_eq!(
            rewrite(body, "gpt-4o-2024"),
            r#"{ "messages":[{"role":"user","content":"hi \"model\""}],  "model" : "gpt-4o-2024", "x":1.50}"#
        );
    }

    #[test]
    fn the_responses_state_fields_are_read_in_the_same_pass_escapes_included() {
        let body =
            br#"{"model":"m","input":"hi","previous_response_id":"resp_\u0061b","store":false}"#;
        let inspected = inspect(body).unwrap();
        assert_eq!(
            inspected.previous_response_id(body).as_deref(),
            Some("resp_ab")
        );
        assert_eq!(inspected.store, Some(false));
        let body = br#"{"model":"m","previous_response_id":null,"store":"yes"}"#;
        let inspected = inspect(body).unwrap();
        assert_eq!(inspected.previous_response_id(body), None);
        assert_eq!(inspected.store, None, "only a boolean counts");
        let body = br#"{"model":"m","previous_response_id":7}"#;
        assert_eq!(inspect(body).unwrap().previous_response_id(body), None);
    }

    #[test]
    fn unchanged_body_is_not_copied() {
        let bytes = Bytes::from_static(br#"{"model":"same"}"#);
        let out = inspect(&bytes)
            .unwrap()
            .rewrite(&bytes, Some(&json_string("same")), false);
        assert_eq!(out.as_ptr(), bytes.as_ptr());
        let out = inspect(&bytes).unwrap().rewrite(&bytes, None, false);
        assert_eq!(out.as_ptr(), bytes.as_ptr(), "no model to splice in");
    }

    #[test]
    fn escaped_model_names_are_decoded_and_reencoded() {
        let inspected = inspect(br#"{"model":"a\u002fb"}"#).unwrap();
        assert_eq!(inspected.model, "a/b");
        assert_eq!(
            rewrite(r#"{"model":"a\u002fb"}"#, "q\"x"),
            r#"{"model":"q\"x"}"#
        );
    }

    #[test]
    fn stream_without_options_gets_include_usage() {
        let out = rewrite(r#"{"model":"m","stream":true}"#, "m");
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["stream_options"]["include_usage"], true);
        assert_eq!(value["stream"], true);
        assert!(
            !inspect(br#"{"model":"m","stream":true}"#)
                .unwrap()
                .client_wants_usage()
        );
    }

    #[test]
    fn stream_options_keep_their_other_fields() {
        let out = rewrite(
            r#"{"model":"m","stream_options":{"other":1},"stream":true}"#,
            "u",
        );
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["stream_options"]["include_usage"], true);
        assert_eq!(value["stream_options"]["other"], 1);
        assert_eq!(value["model"], "u");
    }

    #[test]
    fn client_that_asked_for_usage_is_left_alone() {
        let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#;
        assert!(inspect(body.as_bytes()).unwrap().client_wants_usage());
        assert_eq!(rewrite(body, "m"), body);
    }

    #[test]
    fn a_provider_without_stream_usage_gets_the_stream_as_sent() {
        let body = Bytes::from_static(br#"{"model":"m","stream":true}"#);
        let out = inspect(&body).unwrap().rewrite(&body, None, false);
        assert_eq!(out, body);
    }

    #[test]
    fn non_stream_requests_get_no_stream_options() {
        assert_eq!(rewrite(r#"{"model":"m"}"#, "m"), r#"{"model":"m"}"#);
        assert_eq!(
            rewrite(r#"{"model":"m","stream":false}"#, "m"),
            r#"{"model":"m","stream":false}"#
        );
    }

    #[test]
    fn bad_bodies_are_refused_with_a_reason() {
        assert!(matches!(
            inspect(b"not json"),
            Err(BodyError::InvalidJson(_))
        ));
        assert!(matches!(inspect(b"[1,2]"), Err(BodyError::InvalidJson(_))));
        assert!(matches!(
            inspect(br#"{"model":"a","model":"b"}"#),
            Err(BodyError::InvalidJson(_))
        ));
        assert!(matches!(
            inspect(br#"{"model":"a","x":[1,,2]}"#),
            Err(BodyError::InvalidJson(_))
        ));
        assert_eq!(inspect(br#"{"messages":[]}"#), Err(BodyError::MissingModel));
        assert_eq!(inspect(br#"{"model":null}"#), Err(BodyError::MissingModel));
        assert_eq!(inspect(br#"{"model":""}"#), Err(BodyError::MissingModel));
        assert_eq!(
            inspect(br#"{"model":5}"#),
            Err(BodyError::InvalidField("model", "a string"))
        );
        assert_eq!(
            inspect(br#"{"model":"m","stream":"yes"}"#),
            Err(BodyError::InvalidField("stream", "a boolean"))
        );
        assert_eq!(
            inspect(br#"{"model":"m","stream_options":[]}"#),
            Err(BodyError::InvalidField("stream_options", "an object"))
        );
        assert_eq!(
            inspect(br#"{"model":"m","stream_options":{"include_usage":"yes"}}"#),
            Err(BodyError::InvalidField(
                "stream_options.include_usage",
                "a boolean"
            ))
        );
        assert_eq!(inspect(br#"{"model":"m","n":0}"#).unwrap().choices, 1);
        assert_eq!(inspect(br#"{"model":"m","n":3}"#).unwrap().choices, 3);
        assert_eq!(inspect(br#"{"model":"m"}"#).unwrap().choices, 1);
    }

    #[test]
    fn the_output_cap_is_max_completion_tokens_else_max_tokens() {
        let cap = |body: &str| inspect(body.as_bytes()).unwrap().max_output_tokens;
        assert_eq!(cap(r#"{"model":"m"}"#), None);
        assert_eq!(cap(r#"{"model":"m","max_tokens":64}"#), Some(64));
        assert_eq!(
            cap(r#"{"model":"m","max_completion_tokens":32,"max_tokens":64}"#),
            Some(32)
        );
        assert_eq!(
            cap(r#"{"model":"m","max_completion_tokens":null,"max_tokens":64}"#),
            Some(64)
        );
        // Not ours to judge: the provider refuses what it does not accept.
        assert_eq!(cap(r#"{"model":"m","max_tokens":-1}"#), None);
        assert_eq!(cap(r#"{"model":"m","max_tokens":"64"}"#), None);
        assert_eq!(cap(r#"{"model":"m","max_tokens":1.5}"#), None);
        // The Responses API's name for it.
        assert_eq!(cap(r#"{"model":"m","max_output_tokens":48}"#), Some(48));
    }

    #[test]
    fn nested_model_keys_are_not_the_model() {
        let inspected = inspect(br#"{"tools":[{"model":"inner"}],"model":"outer"}"#).unwrap();
        assert_eq!(inspected.model, "outer");
    }
}
