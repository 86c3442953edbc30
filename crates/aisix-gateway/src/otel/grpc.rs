//! OTLP/gRPC (`protocol: grpc`): the same export requests as OTLP/HTTP, sent over HTTP/2 to the
//! collector's `TraceService/Export` and `LogsService/Export` methods in gRPC's framing (a
//! compressed flag and a 4-byte length before the message), and answered by a `grpc-status`
//! in the trailers (or, in a trailers-only answer, the headers). The codes OTLP's
//! specification calls retryable are tried again, as a 429/502/503/504 is over HTTP.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};

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

/// How the collector answered an export.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Delivered,
    /// A failure another try may cure.
    Retry(String),
    Fatal(String),
}

/// The answer of an export with HTTP status `status`, `headers` and `trailers`.
pub(super) fn answer(
    status: StatusCode,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
) -> Answer {
    if status != StatusCode::OK {
        // gRPC's mapping of an HTTP status from something in front of the server: these are
        // UNAVAILABLE, the rest UNKNOWN or INTERNAL.
        return match status.as_u16() {
            429 | 502 | 503 | 504 => Answer::Retry(format!("status {status}")),
            _ => Answer::Fatal(format!("status {status}")),
        };
    }
    let field = |name: &str| {
        trailers
            .and_then(|t| t.get(name))
            .or_else(|| headers.get(name))
            .and_then(|v| v.to_str().ok())
    };
    let Some(code) = field("grpc-status") else {
        return Answer::Fatal("answered with no grpc-status".to_owned());
    };
    let message = field("grpc-message").unwrap_or("");
    let why = || {
        format!("grpc-status {code} {message}")
            .trim_end()
            .to_owned()
    };
    match code.parse::<u32>() {
        Ok(0) => Answer::Delivered,
        // CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE,
        // UNAVAILABLE, DATA_LOSS: retryable in OTLP's specification.
        Ok(1 | 4 | 8 | 10 | 11 | 14 | 15) => Answer::Retry(why()),
        _ => Answer::Fatal(why()),
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn grpc_status_in_trailers_or_headers_decides_and_the_retryable_codes_are_tried_again() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        let none = HeaderMap::new();
        let ok = with(&[("grpc-status", "0")]);
        assert_eq!(answer(StatusCode::OK, &none, Some(&ok)), Answer::Delivered);
        // A trailers-only answer carries its status in the headers.
        assert_eq!(answer(StatusCode::OK, &ok, None), Answer::Delivered);
        let unavailable = with(&[("grpc-status", "14"), ("grpc-message", "collector busy")]);
        assert_eq!(
            answer(StatusCode::OK, &unavailable, None),
            Answer::Retry("grpc-status 14 collector busy".to_owned())
        );
        for code in ["1", "4", "8", "10", "11", "15"] {
            let status = with(&[("grpc-status", code)]);
            assert!(
                matches!(
                    answer(StatusCode::OK, &none, Some(&status)),
                    Answer::Retry(_)
                ),
                "{code}"
            );
        }
        for code in ["2", "3", "5", "7", "12", "13", "16", "x"] {
            let status = with(&[("grpc-status", code)]);
            assert!(
                matches!(
                    answer(StatusCode::OK, &none, Some(&status)),
                    Answer::Fatal(_)
                ),
                "{code}"
            );
        }
        assert!(matches!(
            answer(StatusCode::OK, &none, None),
            Answer::Fatal(_)
        ));
        assert!(matches!(
            answer(StatusCode::SERVICE_UNAVAILABLE, &ok, None),
            Answer::Retry(_)
        ));
        assert!(matches!(
            answer(StatusCode::NOT_FOUND, &ok, None),
            Answer::Fatal(_)
        ));
    }

    #[test]
    fn grpc_timeout_is_the_limit_in_milliseconds_within_eight_digits() {
        assert_eq!(timeout(Duration::from_secs(10)), "10000m");
        assert_eq!(timeout(Duration::from_micros(10)), "1m");
        assert_eq!(timeout(Duration::from_secs(1_000_000)), "99999999m");
    }
}
