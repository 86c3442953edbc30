//! Small HTTP clients for tests: a blocking probe, async one-shot requests over HTTP/1.1 or
//! HTTP/2 (prior knowledge), and a keep-alive HTTP/1.1 connection; each returns status, headers
//! and the whole body. For raw sockets: read one small response, see whether the peer closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A response read to the end.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// `GET path` on a fresh connection; the status, or `None` if nothing answered.
pub fn blocking_get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Builds a request with a JSON body (or none) and the given headers.
pub fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    builder
        .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))
        .expect("valid request")
}

/// `POST /v1/chat/completions` with `body`, authorized by `key`, with `id` as its
/// `x-request-id`.
pub fn chat_request(key: &str, id: &str, body: &str) -> Request<Full<Bytes>> {
    request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {key}")),
            ("x-request-id", id),
        ],
        Some(body),
    )
}

/// An HTTP/1.1 keep-alive connection, for many requests in a row.
pub struct Connection {
    addr: SocketAddr,
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> Connection {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("http1 handshake");
        tokio::spawn(conn);
        Connection { addr, sender }
    }

    /// Sends a request once the previous response is done; returns the head with the body
    /// still streaming.
    pub async fn send_streaming(
        &mut self,
        mut request: Request<Full<Bytes>>,
    ) -> http::Response<Incoming> {
        if !request.headers().contains_key("host") {
            let host = self.addr.to_string().parse().expect("host header");
            request.headers_mut().insert("host", host);
        }
        self.sender.ready().await.expect("connection ready");
        self.sender
            .send_request(request)
            .await
            .expect("send request")
    }

    /// Sends a request and reads the whole response.
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> Reply {
        collect(self.send_streaming(request).await).await
    }
}

/// Sends one request over a fresh HTTP/1.1 connection and returns the response head with its
/// body still streaming (for SSE tests).
pub async fn send_streaming(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> http::Response<Incoming> {
    Connection::open(addr).await.send_streaming(request).await
}

/// Sends one request over a fresh HTTP/1.1 connection and reads the whole response.
pub async fn send(addr: SocketAddr, request: Request<Full<Bytes>>) -> Reply {
    collect(send_streaming(addr, request).await).await
}

/// `GET path` over a fresh HTTP/1.1 connection.
/// A one-message chat completion (`hi`) for `model`, with the client key `key`.
pub async fn chat(addr: SocketAddr, key: &str, model: &str) -> Reply {
    let body = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    let authorization = format!("Bearer {key}");
    let request = request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &authorization)],
        Some(&body),
    );
    send(addr, request).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, request("GET", path, &[], None)).await
}

/// Sends one request over HTTP/2 with prior knowledge (h2c).
pub async fn send_h2(addr: SocketAddr, request: Request<Full<Bytes>>) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{addr}{}", parts.uri)
        .parse()
        .expect("absolute uri");
    let response = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .expect("send h2 request");
    collect(response).await
}

/// Reads a response body to the end.
pub async fn collect(response: http::Response<Incoming>) -> Reply {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("read body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// Reads one small response with a content-length body.
pub fn read_response(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).unwrap();
        assert_eq!(n, 1, "connection closed mid-head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// True if the peer closes the connection (read returns 0 or a reset) within `within`.
pub fn closed_by_peer(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}
