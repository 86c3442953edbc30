#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The mock's fast path, as the bench harness drives it: precomputed chat completions, paced
//! streams, nothing recorded, scripted replies still first, several workers on one port.

use std::net::SocketAddr;
use std::time::Duration;

use aisix_testkit::mock::fast::CONTENT_MARKER;
use aisix_testkit::mock::{MockProvider, Pacing, Reply};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

const PACING: Pacing = Pacing {
    ttft: Duration::from_millis(1),
    frames: 3,
    gap: Duration::from_millis(1),
    burst: false,
};

fn fast_mock(workers: usize) -> MockProvider {
    MockProvider::builder()
        .workers(workers)
        .fast(PACING)
        .start()
        .unwrap()
}

struct Answer {
    status: StatusCode,
    content_length: Option<String>,
    body: String,
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let content_length = response
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        content_length,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

#[tokio::test]
async fn a_chat_completion_is_answered_counted_and_not_recorded() {
    let mock = fast_mock(1);
    let answer = post(mock.addr(), "/v1/chat/completions", r#"{"model":"m"}"#).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_length, Some(answer.body.len().to_string()));
    let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(json["object"], "chat.completion");
    assert_eq!(json["usage"]["total_tokens"], 17);
    assert_eq!(mock.request_count(), 1);
    assert!(mock.requests().is_empty(), "the fast path records nothing");
}

#[tokio::test]
async fn an_anthropic_message_is_answered_in_anthropics_shape() {
    let mock = fast_mock(1);
    let answer = post(
        mock.addr(),
        "/v1/messages",
        r#"{"model":"c","max_tokens":8}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.content_length, Some(answer.body.len().to_string()));
    let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(json["type"], "message");
    assert_eq!(json["content"][0]["type"], "text");
    assert_eq!(json["usage"]["output_tokens"], 8);
    let other = post(mock.addr(), "/v1/messages/count_tokens", "{}").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_stream_sends_every_frame_then_usage_only_when_asked_then_done() {
    let mock = fast_mock(1);
    let with_usage = post(
        mock.addr(),
        "/v1/chat/completions",
        r#"{"model":"m","stream": true,"stream_options":{"include_usage":true}}"#,
    )
    .await;
    let marker = std::str::from_utf8(CONTENT_MARKER).unwrap();
    assert_eq!(with_usage.status, StatusCode::OK);
    assert_eq!(with_usage.content_length, None, "a stream is chunked");
    assert_eq!(with_usage.body.matches(marker).count(), PACING.frames);
    assert!(
        with_usage
            .body
            .contains(r#""usage":{"prompt_tokens":9,"completion_tokens":3"#)
    );
    assert!(with_usage.body.ends_with("data: [DONE]\n\n"));

    let without = post(mock.addr(), "/v1/chat/completions", r#"{"stream":true}"#).await;
    assert_eq!(without.body.matches(marker).count(), PACING.frames);
    assert!(!without.body.contains("usage"), "{}", without.body);
    assert!(without.body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn a_scripted_reply_comes_before_the_fast_answer() {
    let mock = fast_mock(1);
    mock.enqueue(Reply::openai_error(503, "overloaded", "try later"));
    let scripted = post(mock.addr(), "/v1/chat/completions", "{}").await;
    assert_eq!(scripted.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(scripted.body.contains("try later"));
    let fast = post(mock.addr(), "/v1/chat/completions", "{}").await;
    assert_eq!(fast.status, StatusCode::OK);
    assert!(fast.body.contains("Hello from the aisix bench mock."));
    assert_eq!(mock.queued(), 0);
}

#[tokio::test]
async fn other_paths_are_404_in_openai_error_shape() {
    let mock = fast_mock(1);
    let answer = post(mock.addr(), "/v1/embeddings", "{}").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(json["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn several_workers_serve_one_port() {
    let mock = fast_mock(3);
    for _ in 0..12 {
        let answer = post(mock.addr(), "/v1/chat/completions", "{}").await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(mock.connections_accepted(), 12);
    assert_eq!(mock.request_count(), 12);
}

/// The chunks of a raw chunked HTTP/1.1 response (the terminating empty chunk left out): how
/// the mock cut its body into writes.
fn chunks(raw: &[u8]) -> Vec<Vec<u8>> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut rest = &raw[head_end..];
    let mut chunks = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return chunks;
        }
        chunks.push(rest[..size].to_vec());
        rest = &rest[size + 2..];
    }
}

fn raw_stream(addr: SocketAddr) -> Vec<u8> {
    use std::io::{Read, Write};
    let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    raw
}

#[test]
fn a_burst_stream_comes_as_one_chunk_and_a_paced_one_as_one_chunk_per_frame() {
    let marker = std::str::from_utf8(CONTENT_MARKER).unwrap();
    let burst = MockProvider::builder()
        .fast(Pacing {
            frames: 24,
            burst: true,
            ..PACING
        })
        .start()
        .unwrap();
    let burst_chunks = chunks(&raw_stream(burst.addr()));
    assert_eq!(burst_chunks.len(), 1);
    let whole = String::from_utf8(burst_chunks[0].clone()).unwrap();
    assert_eq!(whole.matches(marker).count(), 24);
    assert!(whole.contains(r#""completion_tokens":24"#), "{whole}");
    assert!(whole.ends_with("data: [DONE]\n\n"));

    let paced = fast_mock(1);
    let paced_chunks = chunks(&raw_stream(paced.addr()));
    assert_eq!(paced_chunks.len(), PACING.frames);
    assert!(
        paced_chunks
            .iter()
            .all(|chunk| String::from_utf8_lossy(chunk).matches(marker).count() == 1)
    );
}
