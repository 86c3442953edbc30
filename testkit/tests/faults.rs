#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The faults a test can script: a reset before the head, no answer at all, replies by path
//! and by request ordinal, and the chat stream frames the routing tests build on.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use aisix_testkit::mock::{Frame, MockProvider, Reply};

/// Sends one HTTP/1.1 request on a fresh connection and reads until the server closes it.
fn exchange(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(timeout))?;
    let body = r#"{"model":"m","messages":[]}"#;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn a_reset_reaches_the_peer_as_a_tcp_reset_before_any_head() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::reset());
    let error = exchange(mock.addr(), "/v1/chat/completions", Duration::from_secs(5))
        .expect_err("a reset, not an answer");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    assert_eq!(mock.request_count(), 1, "the request arrived first");
    let answer = exchange(mock.addr(), "/v1/chat/completions", Duration::from_secs(5)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn silence_never_answers_and_counts_the_peer_that_gave_up() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::silence());
    let error = exchange(
        mock.addr(),
        "/v1/chat/completions",
        Duration::from_millis(300),
    )
    .expect_err("no answer");
    assert!(
        matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{error}"
    );
    // The client's socket is closed when `exchange` returns.
    assert!(mock.wait_until(Duration::from_secs(5), |m| m.requests_abandoned() == 1));
}

#[test]
fn replies_by_ordinal_and_by_path_come_before_the_queue() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::status(500));
    mock.enqueue_for("/v1/embeddings", Reply::status(418));
    mock.reply_at(2, Reply::status(429));
    let status = |path: &str| {
        let answer = exchange(mock.addr(), path, Duration::from_secs(5)).unwrap();
        answer.split_whitespace().nth(1).unwrap().to_owned()
    };
    assert_eq!(status("/v1/embeddings"), "418", "the path's own reply");
    assert_eq!(status("/v1/embeddings"), "429", "request 2 by its ordinal");
    assert_eq!(status("/v1/embeddings"), "500", "then the common queue");
    assert_eq!(
        status("/v1/chat/completions"),
        "200",
        "then the default answer"
    );
    let seen = mock.requests();
    assert!(seen[1].received_at >= seen[0].received_at);
}

#[test]
fn a_chat_stream_sends_role_pieces_finish_usage_and_done() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::chat_stream("up", &["Hel", "lo"], 7));
    mock.enqueue(Reply::sse([Frame::chat_delta("up", "x"), Frame::malformed()]).without_done());
    let answer = exchange(mock.addr(), "/v1/chat/completions", Duration::from_secs(5)).unwrap();
    let data: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.len(), 6, "{answer}");
    assert!(data[0].contains(r#""role":"assistant""#));
    assert!(data[1].contains(r#""content":"Hel""#) && data[2].contains(r#""content":"lo""#));
    assert!(data[3].contains(r#""finish_reason":"stop""#));
    assert!(
        data[4].contains(r#""completion_tokens":2"#) && data[4].contains(r#""prompt_tokens":7"#)
    );
    assert_eq!(data[5], "[DONE]");
    let broken = exchange(mock.addr(), "/v1/chat/completions", Duration::from_secs(5)).unwrap();
    assert!(broken.contains("\"cont\n"), "{broken}");
    assert!(!broken.contains("[DONE]"), "{broken}");
}
