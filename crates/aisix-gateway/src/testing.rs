//! Test helpers shared by the unit tests of several modules.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

/// A real hyper HTTP/1.1 response whose raw bytes (head and body) an upstream writes in one go
/// on an in-memory connection; the upstream keeps its end open unless `close`.
pub(crate) async fn raw_response(raw: Vec<u8>, close: bool) -> Response<Incoming> {
    let (client, mut server) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let mut head = [0u8; 1024];
        let _ = tokio::io::AsyncReadExt::read(&mut server, &mut head).await;
        let _ = server.write_all(&raw).await;
        if !close {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::post("/v1/chat/completions")
        .header("host", "up")
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.send_request(request).await.unwrap()
}
