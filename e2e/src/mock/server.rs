//! The mock's server side: the accept loop, one hyper connection per socket (HTTP/1.1 with
//! keep-alive, or HTTP/2 with prior knowledge), the service that records a request and plays
//! its reply, and the body that plays frames and notices when the peer leaves.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame as BodyFrame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Sleep;

use super::Shared;
use super::openai;
use super::record::RecordedRequest;
use super::reply::{Content, Ending, Frame, Reply};

/// Accepts connections until `stop` fires or its sender is dropped. Dropping the runtime that
/// runs this drops every connection with it.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
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
        let connection = shared.connections_accepted.fetch_add(1, Relaxed) + 1;
        let builder = builder.clone();
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service_state = Arc::clone(&shared);
            let service =
                service_fn(move |req| handle(Arc::clone(&service_state), connection, req));
            // An error here is the peer or a scripted disconnect ending the connection early;
            // either way it is closed now.
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
            shared.connections_closed.fetch_add(1, Relaxed);
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

/// The body's error: hyper drops the connection mid-body (HTTP/2: resets the stream).
#[derive(Debug)]
pub(crate) struct Disconnect;

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mock provider: disconnecting mid-body, as scripted")
    }
}

impl std::error::Error for Disconnect {}

async fn handle(
    shared: Arc<Shared>,
    connection: usize,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, NoResponse> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| NoResponse)?.to_bytes();
    let request = RecordedRequest::new(&parts, body, connection);
    let seq = shared.record(request.clone());
    let reply = shared.next_reply();

    let mut head = HeadGuard {
        shared: &shared,
        sent: false,
    };
    if !reply.head_delay.is_zero() {
        tokio::time::sleep(reply.head_delay).await;
    }
    head.sent = true;
    drop(head);

    respond(reply, &request, seq, &shared)
}

/// Counts a request whose peer left before its response head was due.
struct HeadGuard<'a> {
    shared: &'a Shared,
    sent: bool,
}

impl Drop for HeadGuard<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.shared.requests_abandoned.fetch_add(1, Relaxed);
        }
    }
}

fn respond(
    reply: Reply,
    request: &RecordedRequest,
    seq: usize,
    shared: &Arc<Shared>,
) -> Result<Response<MockBody>, NoResponse> {
    let mut headers = HeaderMap::new();
    let (status, mut frames, sse) = match reply.content {
        Content::NoResponse => return Err(NoResponse),
        Content::OpenAi => {
            let answer = openai::answer(request, seq);
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
    if sse && reply.ending == Ending::Done {
        frames.push(Frame::done());
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
    // A complete JSON body gets a content-length; streams and broken bodies are chunked.
    let exact_len = (finish == Finish::Complete && !sse)
        .then(|| chunks.iter().map(|(_, bytes)| bytes.len() as u64).sum());

    let mut response = Response::new(MockBody {
        chunks,
        sleep: None,
        finish,
        finished: false,
        exact_len,
        shared: Arc::clone(shared),
    });
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// A response body played chunk by chunk, each after its delay. Dropped before its end, it
/// counts as a stream the peer abandoned.
pub(crate) struct MockBody {
    chunks: VecDeque<(Duration, Bytes)>,
    sleep: Option<Pin<Box<Sleep>>>,
    finish: Finish,
    finished: bool,
    exact_len: Option<u64>,
    shared: Arc<Shared>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finish {
    Complete,
    /// `flushed` is set after one yield, so that hyper writes out the frames already handed
    /// to it before the error makes it drop the connection.
    Disconnect {
        flushed: bool,
    },
    Hang,
}

impl MockBody {
    fn at_end(&self) -> bool {
        self.finished || (self.chunks.is_empty() && self.finish == Finish::Complete)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Disconnect;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, Disconnect>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(&(delay, _)) = this.chunks.front() {
            if !delay.is_zero() {
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(delay)));
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
            }
            if let Some((_, bytes)) = this.chunks.pop_front() {
                return Poll::Ready(Some(Ok(BodyFrame::data(bytes))));
            }
        }
        match this.finish {
            Finish::Complete => {
                this.finished = true;
                Poll::Ready(None)
            }
            Finish::Disconnect { flushed: false } => {
                this.finish = Finish::Disconnect { flushed: true };
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Finish::Disconnect { flushed: true } => {
                this.finished = true;
                Poll::Ready(Some(Err(Disconnect)))
            }
            Finish::Hang => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.at_end()
    }

    fn size_hint(&self) -> SizeHint {
        self.exact_len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl Drop for MockBody {
    fn drop(&mut self) {
        if !self.at_end() {
            self.shared.streams_cancelled.fetch_add(1, Relaxed);
        }
    }
}
