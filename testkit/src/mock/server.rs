//! The mock's server side: each worker's accept loop, one hyper connection per socket
//! (HTTP/1.1 with keep-alive, or HTTP/2 with prior knowledge), and the service that counts a
//! request, records it, and answers it: scripted reply, fast path, or the dialect's default.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::body::{Finish, Frames, MockBody};
use super::record::RecordedRequest;
use super::reply::{Content, Ending, Frame, Reply};
use super::state::State;

/// One worker thread's view of the mock; cloned per request, so its reference count stays on
/// this worker's cache lines.
pub(crate) struct Worker {
    pub(crate) state: Arc<State>,
    pub(crate) index: usize,
}

/// Accepts connections until the stop sender is dropped. Dropping the runtime that runs this
/// drops every connection with it.
pub(crate) async fn serve(
    listener: TcpListener,
    worker: Arc<Worker>,
    mut stop: watch::Receiver<()>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _peer)) = accepted else {
            // Out of descriptors or similar: back off rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if stream.set_nodelay(true).is_err() {
            continue;
        }
        let connection = worker.state.connections_accepted.fetch_add(1, Relaxed) + 1;
        let builder = builder.clone();
        let worker = Arc::clone(&worker);
        tokio::spawn(async move {
            let service_worker = Arc::clone(&worker);
            let stream = Resettable::new(stream);
            let reset = stream.reset.clone();
            let service = service_fn(move |req| {
                handle(Arc::clone(&service_worker), connection, reset.clone(), req)
            });
            // An error here is the peer or a scripted disconnect ending the connection early;
            // either way it is closed now.
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
            worker.state.connections_closed.fetch_add(1, Relaxed);
        });
    }
}

/// The service's error: hyper closes the connection (HTTP/2: resets the stream) without
/// sending a response.
#[derive(Debug)]
pub(crate) struct NoResponse;

impl fmt::Display for NoResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mock provider: closing without a response, as scripted")
    }
}

impl std::error::Error for NoResponse {}

async fn handle(
    worker: Arc<Worker>,
    connection: usize,
    reset: Arc<AtomicBool>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, NoResponse> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| NoResponse)?.to_bytes();
    let state = &worker.state;
    if let Some(fast) = &state.fast
        && !state.is_scripted()
    {
        state.arrived(worker.index, None);
        return Ok(fast.respond(&parts, &body, Arc::clone(&worker)));
    }

    let request = RecordedRequest::new(&parts, body, connection);
    let seq = state.arrived(worker.index, state.records().then(|| request.clone()));
    let reply = state
        .next_reply(seq, &request.path)
        .unwrap_or_else(|| Reply::dialect_default(state.dialect));
    match reply.content {
        Content::Reset => {
            reset.store(true, Relaxed);
            return Err(NoResponse);
        }
        Content::Silence => {
            let _head = HeadGuard { state, sent: false };
            return std::future::pending().await;
        }
        _ => {}
    }

    let mut head = HeadGuard { state, sent: false };
    if !reply.head_delay.is_zero() {
        tokio::time::sleep(reply.head_delay).await;
    }
    head.sent = true;
    drop(head);

    respond(reply, &request, seq, Arc::clone(&worker))
}

/// A connection's socket that closes with a TCP reset when its service asks for one.
struct Resettable {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Resettable {
    fn new(stream: TcpStream) -> Resettable {
        Resettable {
            stream,
            reset: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.load(Relaxed) {
            // Linger 0: close(2) sends RST and discards anything unsent.
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Counts a request whose peer left before its response head was due.
struct HeadGuard<'a> {
    state: &'a State,
    sent: bool,
}

impl Drop for HeadGuard<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.state.requests_abandoned.fetch_add(1, Relaxed);
        }
    }
}

fn respond(
    reply: Reply,
    request: &RecordedRequest,
    seq: usize,
    worker: Arc<Worker>,
) -> Result<Response<MockBody>, NoResponse> {
    let mut headers = HeaderMap::new();
    // A default answer ends as its own dialect does; a scripted stream as the mock's.
    let mut dialect = worker.state.dialect;
    let mut terminated = true;
    let (status, mut frames, sse) = match reply.content {
        Content::NoResponse | Content::Reset | Content::Silence => return Err(NoResponse),
        Content::Dialect(answered) => {
            dialect = answered;
            let answer = answered.answer(request, seq, &worker.state.kept);
            terminated = answer.terminated;
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(answer.content_type));
            if answer.sse {
                headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            }
            let frames: Vec<Frame> = answer.chunks.into_iter().map(Frame::raw).collect();
            (answer.status, frames, answer.sse)
        }
        Content::Fixed(body) => (reply.status, vec![Frame::raw(body)], false),
        Content::Sse(frames) => (reply.status, frames, true),
    };
    for (name, _) in &reply.headers {
        headers.remove(name);
    }
    for (name, value) in reply.headers {
        headers.append(name, value);
    }
    if sse && terminated && reply.ending == Ending::Done {
        frames.push(dialect.terminator());
    }

    let chunks: VecDeque<(Duration, Bytes)> = frames
        .into_iter()
        .map(|frame| (frame.delay.unwrap_or(reply.frame_delay), frame.bytes))
        .filter(|(delay, bytes)| !(delay.is_zero() && bytes.is_empty()))
        .collect();
    let finish = match reply.ending {
        Ending::Done | Ending::Eof => Finish::Complete,
        Ending::Disconnect => Finish::Disconnect { flushed: false },
        Ending::Hang => Finish::Hang,
    };
    let frames = Frames::Listed(chunks);
    // A complete JSON body gets a content-length; streams and broken bodies are chunked.
    let exact_len = (finish == Finish::Complete && !sse).then(|| frames.len_bytes());

    let mut response = Response::new(MockBody::new(frames, finish, exact_len, worker));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}
