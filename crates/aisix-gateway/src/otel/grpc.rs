//! OTLP/gRPC (`protocol: grpc`): the same export requests as OTLP/HTTP, sent over HTTP/2 to the
//! collector's `TraceService/Export` and `LogsService/Export` methods in gRPC's framing (a
//! compressed flag and a 4-byte length before the message), and answered by a `grpc-status`
//! in the trailers (or, in a trailers-only answer, the headers). The codes OTLP's
//! specification calls retryable are tried again, as a 429/502/503/504 is over HTTP, after the
//! delay of a `RetryInfo` when the collector sends one; `RESOURCE_EXHAUSTED` only with one.
//! An accepted export's reply is read for its partial success ([`super::reply`]).

use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};

use super::reply::{self, Answer};

/// The bytes of a gRPC frame's head: its compressed flag, then the message's length (big
/// endian).
pub(super) const HEAD: usize = 5;

/// Fills the head of the frame `frame` (its [`HEAD`] bytes, then the message): whether the
/// message is compressed (gzip, as `grpc-encoding` says), and its length. `None` for a message
/// longer than gRPC's 4 GiB.
pub(super) fn frame(frame: &mut [u8], compressed: bool) -> Option<()> {
    let len = u32::try_from(frame.len().checked_sub(HEAD)?).ok()?;
    let head = frame.get_mut(..HEAD)?;
    head[0] = u8::from(compressed);
    head[1..].copy_from_slice(&len.to_be_bytes());
    Some(())
}

/// `grpc-timeout`: the export's limit in milliseconds (gRPC allows at most 8 digits).
pub(super) fn timeout(limit: Duration) -> HeaderValue {
    let ms = limit.as_millis().clamp(1, 99_999_999);
    HeaderValue::from_str(&format!("{ms}m")).unwrap_or(HeaderValue::from_static("10000m"))
}

/// The answer of an export with HTTP status `status`, `headers`, `trailers`, and `body` (its
/// reply: a frame holding an `Export*ServiceResponse`, read for its partial success).
pub(super) fn answer(
    status: StatusCode,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    body: &[u8],
) -> Answer {
    if status != StatusCode::OK {
        // An HTTP status from something in front of the server: gRPC maps 429, 502, 503 and
        // 504 to UNAVAILABLE, the rest to UNKNOWN or INTERNAL, which is OTLP/HTTP's reading.
        return reply::http(status, headers, b"");
    }
    let field = |name: &str| {
        trailers
            .and_then(|t| t.get(name))
            .or_else(|| headers.get(name))
    };
    let Some(code) = field("grpc-status").and_then(|v| v.to_str().ok()) else {
        return Answer::Fatal("answered with no grpc-status".to_owned());
    };
    // Percent-encoded on the wire, as gRPC's protocol says; printable for the log.
    let message = field("grpc-message").map_or(String::new(), |v| {
        reply::printable(&percent_decoded(v.as_bytes()))
    });
    let why = || {
        format!("grpc-status {code} {message}")
            .trim_end()
            .to_owned()
    };
    // A throttling collector's `RetryInfo`: how long to wait before trying again.
    let after = || {
        field("grpc-status-details-bin")
            .and_then(|v| reply::status_details(v.as_bytes()))
            .and_then(|s| s.retry_delay)
    };
    match code.parse::<u32>() {
        Ok(0) => {
            Answer::Delivered(message_of(body, headers).and_then(|m| reply::partial_success(&m)))
        }
        // RESOURCE_EXHAUSTED: tried again only when the collector says recovery is possible
        // (a `RetryInfo`), as OTLP's specification says; otherwise the records are dropped.
        Ok(8) => match after() {
            Some(delay) => Answer::Retry {
                why: why(),
                after: Some(delay),
            },
            None => Answer::Fatal(why()),
        },
        // CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS:
        // retryable in OTLP's specification.
        Ok(1 | 4 | 10 | 11 | 14 | 15) => Answer::Retry {
            why: why(),
            after: after(),
        },
        _ => Answer::Fatal(why()),
    }
}

/// `text` with its `%XX` escapes decoded (a `%` not followed by two hex digits is kept).
fn percent_decoded(text: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let escaped = match text.get(i..i + 3) {
            Some([b'%', high, low]) => hex(*high).zip(hex(*low)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

/// The message of the reply frame `body`, unzipped when it is compressed (the collector
/// names the encoding in `grpc-encoding`; only gzip is read). `None` when there is none or it
/// cannot be read.
fn message_of<'a>(body: &'a [u8], headers: &HeaderMap) -> Option<std::borrow::Cow<'a, [u8]>> {
    let head = body.get(..HEAD)?;
    let len = usize::try_from(u32::from_be_bytes(head[1..].try_into().ok()?)).ok()?;
    let message = body.get(HEAD..HEAD.checked_add(len)?)?;
    match head[0] {
        0 => Some(std::borrow::Cow::Borrowed(message)),
        _ if headers.get("grpc-encoding").is_some_and(|e| e == "gzip") => {
            use std::io::Read;
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(message)
                .take(reply::MAX_REPLY as u64)
                .read_to_end(&mut out)
                .ok()?;
            Some(std::borrow::Cow::Owned(out))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::encode::Message;
    use super::*;

    #[test]
    fn a_frame_s_head_is_its_compressed_flag_and_big_endian_length() {
        let mut bytes = vec![9u8; HEAD + 300];
        frame(&mut bytes, false).unwrap();
        assert_eq!(bytes[..HEAD], [0, 0, 0, 1, 44]);
        frame(&mut bytes, true).unwrap();
        assert_eq!(bytes[0], 1);
        assert_eq!(frame(&mut [0u8; 3], false), None, "no room for a head");
        let mut empty = [7u8; HEAD];
        frame(&mut empty, false).unwrap();
        assert_eq!(empty, [0; HEAD]);
    }

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn retry(after: Option<Duration>) -> impl Fn(&Answer) -> bool {
        move |answer| matches!(answer, Answer::Retry { after: a, .. } if *a == after)
    }

    #[test]
    fn grpc_status_in_trailers_or_headers_decides_and_the_retryable_codes_are_tried_again() {
        let none = HeaderMap::new();
        let ok = with(&[("grpc-status", "0")]);
        assert_eq!(
            answer(StatusCode::OK, &none, Some(&ok), b""),
            Answer::Delivered(None)
        );
        // A trailers-only answer carries its status in the headers.
        assert_eq!(
            answer(StatusCode::OK, &ok, None, b""),
            Answer::Delivered(None)
        );
        let unavailable = with(&[("grpc-status", "14"), ("grpc-message", "collector busy")]);
        assert_eq!(
            answer(StatusCode::OK, &unavailable, None, b""),
            Answer::Retry {
                why: "grpc-status 14 collector busy".to_owned(),
                after: None
            }
        );
        for code in ["1", "4", "10", "11", "15"] {
            let status = with(&[("grpc-status", code)]);
            assert!(
                retry(None)(&answer(StatusCode::OK, &none, Some(&status), b"")),
                "{code}"
            );
        }
        // RESOURCE_EXHAUSTED with no `RetryInfo`: the collector says nothing of recovery, and
        // the records are dropped, as OTLP's specification says.
        for code in ["2", "3", "5", "7", "8", "12", "13", "16", "x"] {
            let status = with(&[("grpc-status", code)]);
            assert!(
                matches!(
                    answer(StatusCode::OK, &none, Some(&status), b""),
                    Answer::Fatal(_)
                ),
                "{code}"
            );
        }
        assert!(matches!(
            answer(StatusCode::OK, &none, None, b""),
            Answer::Fatal(_)
        ));
        assert!(retry(None)(&answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &ok,
            None,
            b""
        )));
        assert!(matches!(
            answer(StatusCode::NOT_FOUND, &ok, None, b""),
            Answer::Fatal(_)
        ));
    }

    /// `grpc-status-details-bin` holding a `google.rpc.Status` with a `RetryInfo` of
    /// `seconds`.
    fn retry_info(seconds: u64) -> String {
        use base64::Engine;
        let mut status = Message::new();
        status.uint(1, 8);
        status.string(2, "over quota");
        status.message(3, |any| {
            any.string(1, "type.googleapis.com/google.rpc.RetryInfo");
            any.message(2, |info| info.message(1, |d| d.uint(1, seconds)));
        });
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(status.into_bytes())
    }

    #[test]
    fn grpc_message_is_percent_decoded_and_printable() {
        let status = with(&[
            ("grpc-status", "3"),
            ("grpc-message", "bad%20span%3A%20%E2%9C%97 name%0Aline 100%"),
        ]);
        assert_eq!(
            answer(StatusCode::OK, &status, None, b""),
            Answer::Fatal("grpc-status 3 bad span: \u{2717} name line 100%".to_owned())
        );
    }

    #[test]
    fn a_throttling_collector_s_retry_info_is_the_wait_and_makes_resource_exhausted_retryable() {
        let details = retry_info(3);
        for code in ["8", "14"] {
            let trailers = with(&[("grpc-status", code), ("grpc-status-details-bin", &details)]);
            let read = answer(StatusCode::OK, &HeaderMap::new(), Some(&trailers), b"");
            assert!(
                retry(Some(Duration::from_secs(3)))(&read),
                "{code}: {read:?}"
            );
        }
    }

    #[test]
    fn an_accepted_export_s_partial_success_is_read_from_its_reply_frame_gzipped_or_not() {
        use std::io::Write;
        let mut response = Message::new();
        response.message(1, |p| {
            p.uint(1, 2);
            p.string(2, "2 spans had no name");
        });
        let message = response.into_bytes();
        let framed = |compressed: bool, message: &[u8]| {
            let mut frame = vec![0u8; HEAD];
            frame.extend_from_slice(message);
            super::frame(&mut frame, compressed).unwrap();
            frame
        };
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&message).unwrap();
        let gzipped = gzip.finish().unwrap();
        let ok = with(&[("grpc-status", "0")]);
        let expected = Answer::Delivered(Some(reply::Partial {
            rejected: 2,
            message: "2 spans had no name".into(),
        }));
        let encoded = with(&[("grpc-encoding", "gzip")]);
        assert_eq!(
            answer(
                StatusCode::OK,
                &HeaderMap::new(),
                Some(&ok),
                &framed(false, &message)
            ),
            expected
        );
        assert_eq!(
            answer(StatusCode::OK, &encoded, Some(&ok), &framed(true, &gzipped)),
            expected
        );
        // An empty reply, one cut short, and a compressed one in an encoding not named: a
        // whole success (nothing more is known).
        for body in [
            framed(false, b""),
            framed(false, &message)[..HEAD + 3].to_vec(),
            framed(true, &gzipped),
        ] {
            assert_eq!(
                answer(StatusCode::OK, &HeaderMap::new(), Some(&ok), &body),
                Answer::Delivered(None)
            );
        }
    }

    #[test]
    fn grpc_timeout_is_the_limit_in_milliseconds_within_eight_digits() {
        assert_eq!(timeout(Duration::from_secs(10)), "10000m");
        assert_eq!(timeout(Duration::from_micros(10)), "1m");
        assert_eq!(timeout(Duration::from_secs(1_000_000)), "99999999m");
    }
}
