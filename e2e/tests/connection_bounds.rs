//! A client connection's bounded life: `downstream.max_requests_per_connection` and
//! `downstream.max_connection_age_secs`. HTTP/1.1 gets `Connection: close` on the response
//! that reaches the bound and the gateway closes after it; HTTP/2 gets GOAWAY, and streams
//! already open finish. Both serving modes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, closed_by_peer, read_response};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, Reply};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};

const KEY: &str = "sk-bounds-test-1";

fn gateway(mode: Mode, mock: &MockProvider, downstream: &str) -> Gateway {
    Gateway::start(
        &GatewayConfig::new(mode)
            .openai(&mock.base_url(), &[("m", "up-m")], KEY)
            .extra(&format!(
                "downstream:\n  sse_keepalive_interval_secs: 0\n{downstream}"
            )),
    )
}

fn chat_request(stream: bool) -> http::Request<Full<Bytes>> {
    let body = serde_json::json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(&body.to_string()),
    )
}

/// `connection: close` among a raw response's headers.
fn says_close(response: &str) -> bool {
    response
        .lines()
        .take_while(|l| !l.is_empty())
        .any(|l| l.eq_ignore_ascii_case("connection: close"))
}

fn livez(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let response = read_response(stream);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

both_modes! {
    async fn http1_response_that_reaches_the_request_bound_says_close_and_the_connection_ends(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = gateway(mode, &mock, "  max_requests_per_connection: 3\n");
        let mut stream = TcpStream::connect(gateway.addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for n in 1..=2 {
            let response = livez(&mut stream);
            assert!(!says_close(&response), "request {n} is not the last:\n{response}");
        }
        let last = livez(&mut stream);
        assert!(says_close(&last), "the third response closes:\n{last}");
        assert!(closed_by_peer(&mut stream, Duration::from_secs(5)));

        // A fresh connection starts a fresh count.
        let mut again = TcpStream::connect(gateway.addr()).unwrap();
        again.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(!says_close(&livez(&mut again)));
    }
}

both_modes! {
    async fn http1_connection_past_its_age_is_closed_idle_or_after_its_request(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = gateway(mode, &mock, "  max_connection_age_secs: 1\n");

        // Idle when the age is reached: closed.
        let mut idle = TcpStream::connect(gateway.addr()).unwrap();
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(!says_close(&livez(&mut idle)));
        assert!(closed_by_peer(&mut idle, Duration::from_secs(5)));

        // Busy when the age is reached: the request finishes, its response says close.
        mock.enqueue(Reply::openai().delay_head(Duration::from_millis(1500)));
        let mut busy = TcpStream::connect(gateway.addr()).unwrap();
        busy.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        write!(
            busy,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let response = read_response(&mut busy);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("Hello from the mock provider."), "{response}");
        assert!(says_close(&response), "{response}");
        assert!(closed_by_peer(&mut busy, Duration::from_secs(5)));
    }
}

/// An HTTP/2 (prior knowledge) connection and a handle that resolves when it has ended.
async fn h2(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    (sender, tokio::spawn(conn))
}

fn absolute(
    addr: SocketAddr,
    mut request: http::Request<Full<Bytes>>,
) -> http::Request<Full<Bytes>> {
    *request.uri_mut() = format!("http://{addr}{}", request.uri()).parse().unwrap();
    request
}

/// Starts a slow stream (the mock's default stream, one frame every 250 ms) on `sender`.
fn slow_stream(
    addr: SocketAddr,
    sender: &hyper::client::conn::http2::SendRequest<Full<Bytes>>,
) -> tokio::task::JoinHandle<(client::Reply, Instant)> {
    let mut sender = sender.clone();
    tokio::spawn(async move {
        let response = sender
            .send_request(absolute(addr, chat_request(true)))
            .await
            .unwrap();
        let reply = client::collect(response).await;
        (reply, Instant::now())
    })
}

fn assert_complete_stream(reply: &client::Reply) {
    assert_eq!(reply.status, 200);
    let text = reply.text();
    assert!(text.contains(" provider."), "{text}");
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the stream finished:\n{text}"
    );
}

both_modes! {
    async fn http2_request_that_reaches_the_bound_brings_goaway_and_open_streams_finish(mode: Mode) {
        let mock = MockProvider::start();
        mock.enqueue(Reply::openai().frame_delay(Duration::from_millis(250)));
        let gateway = gateway(mode, &mock, "  max_requests_per_connection: 2\n");
        let addr = gateway.addr();
        let (mut sender, ended) = h2(addr).await;

        let stream = slow_stream(addr, &sender);
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);
        // The second request reaches the bound: it is answered, then GOAWAY.
        let second = client::collect(
            sender.send_request(absolute(addr, client::request("GET", "/livez", &[], None))).await.unwrap(),
        )
        .await;
        assert_eq!(second.status, 200);

        let (reply, _) = tokio::time::timeout(Duration::from_secs(10), stream).await.unwrap().unwrap();
        assert_complete_stream(&reply);
        let result = tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("the gateway ends the connection once its streams are done")
            .unwrap();
        assert!(result.is_ok(), "a graceful end, not an error: {result:?}");
        let refused = sender.send_request(absolute(addr, client::request("GET", "/livez", &[], None))).await;
        assert!(refused.is_err(), "no request after GOAWAY");
    }
}

both_modes! {
    async fn http2_connection_past_its_age_gets_goaway_and_its_open_stream_finishes(mode: Mode) {
        let mock = MockProvider::start();
        mock.enqueue(Reply::openai().frame_delay(Duration::from_millis(250)));
        let gateway = gateway(mode, &mock, "  max_connection_age_secs: 1\n");
        let addr = gateway.addr();
        let (mut sender, ended) = h2(addr).await;
        let opened = Instant::now();

        let stream = slow_stream(addr, &sender);
        let (reply, finished) = tokio::time::timeout(Duration::from_secs(10), stream).await.unwrap().unwrap();
        assert_complete_stream(&reply);
        assert!(
            finished - opened > Duration::from_secs(1),
            "the stream ran past the connection's age and was not cut"
        );
        let result = tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("the gateway ends the connection once its stream is done")
            .unwrap();
        assert!(result.is_ok(), "a graceful end, not an error: {result:?}");
        let refused = sender.send_request(absolute(addr, client::request("GET", "/livez", &[], None))).await;
        assert!(refused.is_err(), "no request after GOAWAY");
    }
}
