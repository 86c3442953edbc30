//! The events of a Responses stream as the relay reads them: each event's type (its `event:`
//! name, else its data's `type`), the response's identity from `response.created`, the usage of
//! the event that ends it, an `error` event's words, and the `response.failed` the gateway
//! writes to end a stream that broke after it started. Only the events that start or end a
//! stream are parsed; the rest are classified by their name.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::usage::ResponsesUsage;
use crate::wire::sse;

/// What one Responses stream event is to the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `response.created`: the response's id, model and creation time.
    Created,
    /// Output: a `*.delta` event or a finished output item (`response.output_item.done`).
    Output,
    /// `response.completed` or `response.incomplete`: the answer is over, with its usage.
    Ending(Ending),
    /// `response.failed`: the upstream's own account of a failure.
    Failed,
    /// `error`: a failure reported with its code and message.
    Error,
    /// Anything else (`response.in_progress`, `*.added`, `*.done` parts, keep-alives).
    Other,
}

/// How an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Completed,
    Incomplete,
}

/// The kind of an event named `name` (its `event:` field or its data's `type`).
pub fn kind_of(name: &[u8]) -> Kind {
    match name {
        b"response.created" => Kind::Created,
        b"response.completed" => Kind::Ending(Ending::Completed),
        b"response.incomplete" => Kind::Ending(Ending::Incomplete),
        b"response.failed" => Kind::Failed,
        b"error" => Kind::Error,
        b"response.output_item.done" => Kind::Output,
        name if name.ends_with(b".delta") => Kind::Output,
        _ => Kind::Other,
    }
}

/// An event's type: its `event:` name, else the `type` of its data (read without parsing the
/// rest). `None` for an event without either (a comment).
pub fn event_type<'a>(fields: &'a sse::Fields<'a>) -> Option<&'a [u8]> {
    if let Some(name) = fields.name {
        return Some(name);
    }
    let data = fields.data.as_deref()?;
    let at = memchr::memmem::find(data, b"\"type\"")?;
    match crate::wire::chunk::string_value_after_key(data, at.saturating_add(6)) {
        crate::wire::chunk::Value::String(start, end) => {
            data.get(start.saturating_add(1)..end.saturating_sub(1))
        }
        _ => None,
    }
}

/// Who a response is: what `response.failed` repeats of it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Identity {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub created_at: u64,
}

#[derive(Deserialize)]
struct Wrapped<T> {
    response: T,
}

#[derive(Deserialize)]
struct UsageOnly {
    usage: Option<ResponsesUsage>,
}

/// The response's identity, from the data of `response.created`.
pub fn identity(data: &[u8]) -> Option<Identity> {
    serde_json::from_slice::<Wrapped<Identity>>(data)
        .ok()
        .map(|w| w.response)
}

/// The usage of an event that carries the whole response (`response.completed`, `incomplete`,
/// `failed`), or of a whole answer.
pub fn response_usage(data: &[u8]) -> Option<ResponsesUsage> {
    serde_json::from_slice::<Wrapped<UsageOnly>>(data)
        .ok()
        .and_then(|w| w.response.usage)
}

/// What an `error` event says: `{"type":"error","code","message"}`, or an `{"error":{...}}`
/// envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Reported {
    #[serde(default, deserialize_with = "string_or_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// The code and message of an `error` event's data.
pub fn reported(data: &[u8]) -> Reported {
    #[derive(Deserialize)]
    struct Either {
        #[serde(default)]
        error: Option<Reported>,
        #[serde(flatten)]
        flat: Reported,
    }
    match serde_json::from_slice::<Either>(data) {
        Ok(Either {
            error: Some(inner), ..
        }) => inner,
        Ok(Either { flat, .. }) => flat,
        Err(_) => Reported::default(),
    }
}

fn string_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(value.as_str().map(str::to_owned))
}

/// The `response.failed` event that ends a stream which broke after it started: the response
/// `who` with `status: failed`, no output, and `error` `{code, message}`, numbered `sequence`.
pub fn failed_event(sequence: u64, who: &Identity, code: &str, message: &str) -> Bytes {
    // The API's error codes for a failed response; any other is a server error.
    let code = match code {
        "rate_limit_exceeded" | "invalid_prompt" | "server_error" => code,
        _ => "server_error",
    };
    let data = json!({
        "type": "response.failed",
        "sequence_number": sequence,
        "response": {
            "id": who.id,
            "object": "response",
            "created_at": who.created_at,
            "status": "failed",
            "error": {"code": code, "message": message},
            "incomplete_details": null,
            "instructions": null,
            "metadata": {},
            "model": who.model,
            "output": [],
            "parallel_tool_calls": true,
            "temperature": null,
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "usage": null,
        },
    });
    Bytes::from(format!("event: response.failed\ndata: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_s_type_comes_from_its_name_or_its_data() {
        let named = sse::fields(b"event: response.output_text.delta\ndata: {\"type\":\"x\"}\n\n");
        assert_eq!(event_type(&named), Some(&b"response.output_text.delta"[..]));
        let bare = sse::fields(b"data: {\"type\" : \"response.completed\",\"response\":{}}\n\n");
        assert_eq!(event_type(&bare), Some(&b"response.completed"[..]));
        assert_eq!(event_type(&sse::fields(b": ping\n\n")), None);
        assert_eq!(
            kind_of(b"response.function_call_arguments.delta"),
            Kind::Output
        );
        assert_eq!(
            kind_of(b"response.incomplete"),
            Kind::Ending(Ending::Incomplete)
        );
        assert_eq!(kind_of(b"response.in_progress"), Kind::Other);
    }

    #[test]
    fn identity_usage_and_errors_are_read_from_their_events() {
        let created = br#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1700000000,"model":"gpt-4.1","output":[]}}"#;
        assert_eq!(
            identity(created),
            Some(Identity {
                id: "resp_1".into(),
                model: "gpt-4.1".into(),
                created_at: 1_700_000_000
            })
        );
        let completed = br#"{"type":"response.completed","response":{"id":"r","output":[{"type":"message","content":[{"type":"output_text","text":"\"usage\":{}"}]}],"usage":{"input_tokens":5,"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":12}}}"#;
        let usage = response_usage(completed).unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.output_tokens_details.reasoning_tokens
            ),
            (5, 7, 3)
        );
        let flat = reported(br#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null,"sequence_number":3}"#);
        assert_eq!(flat.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(flat.message.as_deref(), Some("slow down"));
        let wrapped = reported(br#"{"error":{"code":"server_error","message":"boom"}}"#);
        assert_eq!(wrapped.message.as_deref(), Some("boom"));
        assert_eq!(reported(b"not json"), Reported::default());
    }

    #[test]
    fn the_failed_event_is_a_complete_failed_response() {
        let who = Identity {
            id: "resp_9".into(),
            model: "m".into(),
            created_at: 7,
        };
        let event = failed_event(12, &who, "server_error", "cut \"short\"");
        let text = std::str::from_utf8(&event).unwrap();
        let data = text
            .strip_prefix("event: response.failed\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(value["sequence_number"], 12);
        assert_eq!(value["response"]["id"], "resp_9");
        assert_eq!(value["response"]["status"], "failed");
        assert_eq!(value["response"]["error"]["message"], "cut \"short\"");
    }
}
