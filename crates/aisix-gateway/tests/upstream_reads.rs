#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What one read of an HTTP/1.1 upstream connection may hold: a large answer comes to the relay
//! in frames of at most 64 KiB (so that no frame is written to a client in one piece that holds
//! the worker), and a response head larger than that fails the exchange.

use std::time::Duration;

use aisix_config::UpstreamConfig;
use aisix_gateway::UpstreamPool;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const READ_MAX: usize = 64 * 1024;

/// A server on 127.0.0.1 that answers its first request with `head` and `body` in one write.
async fn answering(head: String, body: Vec<u8>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = socket.read(&mut request).await;
        let mut raw = head.into_bytes();
        raw.extend_from_slice(&body);
        let _ = socket.write_all(&raw).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    addr
}

fn request(addr: std::net::SocketAddr) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

#[tokio::test]
async fn a_large_answer_reaches_the_relay_in_frames_of_at_most_64_kib() {
    let body: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let addr = answering(head, body.clone()).await;
    let pool = UpstreamPool::new(&UpstreamConfig::default()).unwrap();
    let (response, _lease) = pool
        .send(request(addr), Duration::from_secs(5))
        .await
        .unwrap();
    let mut incoming = response.into_body();
    let (mut received, mut largest) = (Vec::new(), 0);
    while let Some(frame) = incoming.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        largest = largest.max(data.len());
        received.extend_from_slice(&data);
    }
    assert_eq!(received, body);
    assert!(largest <= READ_MAX, "a frame of {largest} bytes");
    // The server wrote it all at once: the reads were full, not short.
    assert!(largest > READ_MAX / 2, "a frame of {largest} bytes at most");
}

#[tokio::test]
async fn a_response_head_larger_than_64_kib_fails_the_exchange() {
    let head = format!(
        "HTTP/1.1 200 OK\r\nx-padding: {}\r\ncontent-length: 2\r\n\r\n",
        "a".repeat(READ_MAX + 1)
    );
    let addr = answering(head, b"{}".to_vec()).await;
    let pool = UpstreamPool::new(&UpstreamConfig::default()).unwrap();
    assert!(
        pool.send(request(addr), Duration::from_secs(5))
            .await
            .is_err()
    );
}
