//! What a collector's reply says beyond its status, read by the few protobuf fields OTLP's
//! specification gives it (opentelemetry-proto's `collector/*/v1/*_service.proto`, and
//! googleapis' `google/rpc/status.proto` and `error_details.proto`):
//! - an accepted export's **partial success**: how many of its records the collector rejected
//!   (`rejected_spans`, `rejected_log_records`), and why. They are lost, and not sent again;
//! - a refusal's **`google.rpc.Status`**: its message, and over gRPC its `RetryInfo`, the
//!   delay a throttling collector asks for (over HTTP, `Retry-After` says it).
//!
//! A reply that does not parse says nothing more: the status alone decides.

use std::time::Duration;

/// Bytes of a collector's reply read at most: an export's reply is a few bytes, an error's
/// a message.
pub(super) const MAX_REPLY: usize = 64 * 1024;

/// Characters of a collector's message kept for the log.
const MAX_MESSAGE: usize = 256;

/// How the collector answered one try of an export.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// Accepted: whole, or but for the records its partial success rejects.
    Delivered(Option<Partial>),
    /// A failure another try may cure; `after`: the wait the collector asked for.
    Retry {
        why: String,
        after: Option<Duration>,
    },
    Fatal(String),
}

/// The answer of an OTLP/HTTP export: `status`, and its reply `body` (an `Export*ServiceResponse`
/// when accepted, a `google.rpc.Status` when not; read only when it is protobuf). 429, 502,
/// 503 and 504 are tried again, after the `Retry-After` a throttling collector sends.
pub(super) fn http(status: http::StatusCode, headers: &http::HeaderMap, body: &[u8]) -> Answer {
    let protobuf = headers
        .get(http::header::CONTENT_TYPE)
        .is_none_or(|t| t.as_bytes().starts_with(b"application/x-protobuf"));
    if status.is_success() {
        return Answer::Delivered(protobuf.then(|| partial_success(body)).flatten());
    }
    let message = match protobuf {
        true => status_of(body).message,
        false => String::new(),
    };
    let why = format!("status {status} {message}").trim_end().to_owned();
    match status.as_u16() {
        429 | 502 | 503 | 504 => Answer::Retry {
            why,
            after: headers
                .get(http::header::RETRY_AFTER)
                .and_then(crate::target::retry::retry_after),
        },
        _ => Answer::Fatal(why),
    }
}

/// A protobuf field's value, by its wire type.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of the protobuf message `bytes`, in order, up to the first that does not parse.
fn fields(mut bytes: &[u8]) -> impl Iterator<Item = (u64, Value<'_>)> {
    std::iter::from_fn(move || {
        let key = varint(&mut bytes)?;
        let value = match key & 7 {
            0 => Value::Varint(varint(&mut bytes)?),
            1 => skip(&mut bytes, 8)?,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).ok()?;
                let (value, rest) = bytes.split_at_checked(len)?;
                bytes = rest;
                Value::Bytes(value)
            }
            5 => skip(&mut bytes, 4)?,
            // Groups (long deprecated) and the invalid wire types: nothing after is read.
            _ => return None,
        };
        Some((key >> 3, value))
    })
}

fn skip(bytes: &mut &[u8], n: usize) -> Option<Value<'static>> {
    *bytes = bytes.get(n..)?;
    Some(Value::Fixed)
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(n);
        }
    }
    None
}

/// The message, as text fit for a log line: control characters replaced, cut at
/// [`MAX_MESSAGE`] characters.
pub(super) fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_MESSAGE)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// An accepted export's partial success.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Partial {
    /// How many of its records (spans, or log records) the collector rejected.
    pub rejected: u64,
    /// Why, or a warning about records it accepted.
    pub message: String,
}

/// The partial success of `response`, an `ExportTraceServiceResponse` or
/// `ExportLogsServiceResponse` (the same shape: `partial_success` = 1, and in it the count of
/// rejected records = 1 and `error_message` = 2). `None` when it has none, or one that rejects
/// nothing and says nothing (a full success, as the specification says).
pub(super) fn partial_success(response: &[u8]) -> Option<Partial> {
    let mut partial = Partial::default();
    for (field, value) in fields(response) {
        let (1, Value::Bytes(inner)) = (field, value) else {
            continue;
        };
        for (field, value) in fields(inner) {
            match (field, value) {
                // An int64: a negative count (a collector's bug) rejects nothing.
                (1, Value::Varint(n)) => {
                    partial.rejected = i64::try_from(n).map_or(0, |n| n as u64)
                }
                (2, Value::Bytes(text)) => partial.message = printable(text),
                _ => {}
            }
        }
    }
    (partial.rejected > 0 || !partial.message.is_empty()).then_some(partial)
}

/// What a `google.rpc.Status` says: its message, and the delay of a `RetryInfo` among its
/// details.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Status {
    pub message: String,
    pub retry_delay: Option<Duration>,
}

const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// `bytes` read as a `google.rpc.Status` (code = 1, message = 2, details = 3, each detail a
/// `google.protobuf.Any`: its type's URL = 1, its message = 2).
pub(super) fn status_of(bytes: &[u8]) -> Status {
    let mut status = Status::default();
    for (field, value) in fields(bytes) {
        match (field, value) {
            (2, Value::Bytes(text)) => status.message = printable(text),
            (3, Value::Bytes(any)) => {
                let mut type_url = &[][..];
                let mut detail = &[][..];
                for (field, value) in fields(any) {
                    match (field, value) {
                        (1, Value::Bytes(url)) => type_url = url,
                        (2, Value::Bytes(message)) => detail = message,
                        _ => {}
                    }
                }
                if type_url == RETRY_INFO.as_bytes() {
                    status.retry_delay = status.retry_delay.or_else(|| retry_info(detail));
                }
            }
            _ => {}
        }
    }
    status
}

/// A `google.rpc.RetryInfo`'s `retry_delay` (= 1), a `google.protobuf.Duration` (seconds = 1,
/// nanos = 2). `None` for a negative one.
fn retry_info(bytes: &[u8]) -> Option<Duration> {
    let mut delay = None;
    for (field, value) in fields(bytes) {
        let (1, Value::Bytes(duration)) = (field, value) else {
            continue;
        };
        let (mut seconds, mut nanos) = (0i64, 0i64);
        for (field, value) in fields(duration) {
            match (field, value) {
                (1, Value::Varint(n)) => seconds = n as i64,
                // An int32, sign-extended to ten bytes when negative.
                (2, Value::Varint(n)) => nanos = n as i64,
                _ => {}
            }
        }
        let seconds = u64::try_from(seconds).ok()?;
        let nanos = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
        delay = Some(Duration::new(seconds, nanos));
    }
    delay
}

/// `grpc-status-details-bin`: a `google.rpc.Status`, base64 as every binary gRPC header is
/// (padded or not).
pub(super) fn status_details(value: &[u8]) -> Option<Status> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let bytes = ENGINE.decode(value).ok()?;
    Some(status_of(&bytes))
}

#[cfg(test)]
mod tests {
    use super::super::encode::Message;
    use super::*;

    fn partial(rejected: i64, message: &str) -> Vec<u8> {
        let mut response = Message::new();
        response.message(1, |p| {
            if rejected != 0 {
                p.uint(1, rejected as u64);
            }
            if !message.is_empty() {
                p.string(2, message);
            }
        });
        response.into_bytes()
    }

    fn retry_info_any(seconds: i64, nanos: i32) -> Vec<u8> {
        let mut any = Message::new();
        any.string(1, RETRY_INFO);
        any.message(2, |info| {
            info.message(1, |d| {
                d.uint(1, seconds as u64);
                d.uint(2, i64::from(nanos) as u64);
            })
        });
        any.into_bytes()
    }

    fn status_with(message: &str, details: &[Vec<u8>]) -> Vec<u8> {
        let mut status = Message::new();
        status.uint(1, 8);
        status.string(2, message);
        for detail in details {
            status.bytes(3, detail);
        }
        status.into_bytes()
    }

    #[test]
    fn a_partial_success_names_its_rejected_records_and_why_and_a_full_one_is_none() {
        assert_eq!(
            partial_success(&partial(3, "span 2: bad attribute")),
            Some(Partial {
                rejected: 3,
                message: "span 2: bad attribute".into()
            })
        );
        // A warning about records it kept: nothing rejected, the message kept.
        assert_eq!(
            partial_success(&partial(0, "deprecated field")),
            Some(Partial {
                rejected: 0,
                message: "deprecated field".into()
            })
        );
        // The empty response, and an empty partial success: a full success.
        assert_eq!(partial_success(&[]), None);
        assert_eq!(partial_success(&partial(0, "")), None);
        // A negative count rejects nothing.
        assert_eq!(partial_success(&partial(-1, "")), None);
        // Fields it does not know, before and after, are skipped.
        let mut response = Message::new();
        response.fixed64(7, 1);
        response.raw(&partial(2, ""));
        response.fixed32(9, 1);
        response.uint(10, 300);
        assert_eq!(partial_success(&response.into_bytes()).unwrap().rejected, 2);
        // A reply cut short, or not protobuf at all, says nothing.
        let cut = partial(5, "why");
        assert_eq!(partial_success(&cut[..cut.len() - 2]), None);
        assert_eq!(partial_success(b"<html>busy</html>"), None);
    }

    #[test]
    fn an_http_reply_is_read_by_its_status_its_protobuf_body_and_retry_after() {
        use http::{HeaderMap, HeaderValue, StatusCode};
        let protobuf = |extra: &[(http::HeaderName, &'static str)]| {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            );
            for (name, value) in extra {
                headers.insert(name, HeaderValue::from_static(value));
            }
            headers
        };
        let accepted = partial(4, "4 log records too large");
        assert_eq!(
            http(StatusCode::OK, &protobuf(&[]), &accepted),
            Answer::Delivered(Some(Partial {
                rejected: 4,
                message: "4 log records too large".into()
            }))
        );
        // No content type: read as the protobuf that was asked for. Another: not read.
        assert!(matches!(
            http(StatusCode::OK, &HeaderMap::new(), &accepted),
            Answer::Delivered(Some(_))
        ));
        let mut json = HeaderMap::new();
        json.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert_eq!(
            http(StatusCode::OK, &json, &accepted),
            Answer::Delivered(None)
        );
        assert_eq!(
            http(StatusCode::OK, &protobuf(&[]), b""),
            Answer::Delivered(None)
        );
        // Throttled: the wait `Retry-After` names, or none.
        let retry_after = [(http::header::RETRY_AFTER, "7")];
        assert_eq!(
            http(StatusCode::TOO_MANY_REQUESTS, &protobuf(&retry_after), b""),
            Answer::Retry {
                why: "status 429 Too Many Requests".into(),
                after: Some(Duration::from_secs(7))
            }
        );
        for status in [502, 503, 504] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(matches!(
                http(status, &protobuf(&[]), b""),
                Answer::Retry { after: None, .. }
            ));
        }
        // Refused for good, with the collector's reason from its `google.rpc.Status`.
        assert_eq!(
            http(
                StatusCode::BAD_REQUEST,
                &protobuf(&[]),
                &status_with("bad span", &[])
            ),
            Answer::Fatal("status 400 Bad Request bad span".into())
        );
        let mut html = HeaderMap::new();
        html.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/html"),
        );
        assert_eq!(
            http(StatusCode::NOT_FOUND, &html, b"<html>\x0a\x03no</html>"),
            Answer::Fatal("status 404 Not Found".into())
        );
    }

    #[test]
    fn a_message_is_printable_and_cut() {
        let long = format!("line\none\u{1b}[31m{}", "x".repeat(1000));
        let read = partial_success(&partial(1, &long)).unwrap().message;
        assert!(read.starts_with("line one [31m"), "{read}");
        assert_eq!(read.chars().count(), MAX_MESSAGE);
    }

    #[test]
    fn a_status_s_retry_info_is_its_delay_among_other_details() {
        let mut other = Message::new();
        other.string(1, "type.googleapis.com/google.rpc.ErrorInfo");
        other.bytes(2, b"\x0a\x03why");
        let bytes = status_with(
            "slow down",
            &[other.into_bytes(), retry_info_any(2, 500_000_000)],
        );
        assert_eq!(
            status_of(&bytes),
            Status {
                message: "slow down".into(),
                retry_delay: Some(Duration::from_millis(2500)),
            }
        );
        // None, or a negative or impossible one: no delay.
        assert_eq!(status_of(&status_with("full", &[])).retry_delay, None);
        assert_eq!(
            status_of(&status_with("", &[retry_info_any(-1, 0)])).retry_delay,
            None
        );
        assert_eq!(
            status_of(&status_with("", &[retry_info_any(1, -5)])).retry_delay,
            None
        );
        // In `grpc-status-details-bin`: base64, padded or not.
        use base64::Engine;
        let mut padding_left_out = false;
        for message in ["a", "ab", "abc"] {
            let bytes = status_with(message, &[retry_info_any(2, 500_000_000)]);
            let padded = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let unpadded = padded.trim_end_matches('=');
            padding_left_out |= unpadded != padded;
            for value in [padded.as_str(), unpadded] {
                let read = status_details(value.as_bytes()).unwrap();
                assert_eq!(
                    read.retry_delay,
                    Some(Duration::from_millis(2500)),
                    "{value}"
                );
                assert_eq!(read.message, message);
            }
        }
        assert!(padding_left_out);
        assert_eq!(status_details(b"not base64!"), None);
    }
}
