//! The fast mock provider (`aisix-bench mock`) and the harness's handle on it. One current-thread
//! runtime per worker thread, each with its own SO_REUSEPORT listener; hyper HTTP/1.1 with
//! keep-alive; answers are precomputed bytes and the request body is only byte-searched for
//! `"stream": true` and `"include_usage": true`. Accepted connections and requests are counted
//! per worker and served as JSON on a separate stats port, so asking does not add a connection.

use std::convert::Infallible;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::time::{Instant, Sleep};

use crate::process::{Child, CpuList};

/// The marker every content frame carries; the load generator counts frames by it.
pub const CONTENT_MARKER: &[u8] = b"aisixbenchtok";

/// How the mock behaves; the same knobs on the command line and in the harness.
#[derive(Debug, Clone, clap::Args)]
pub struct MockArgs {
    /// Address for the chat completions listener (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// Address for the stats listener (`GET /__stats`).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub stats_addr: SocketAddr,
    /// Worker threads, each with its own runtime and SO_REUSEPORT listener.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Streaming: delay before the first frame.
    #[arg(long, default_value = "20ms", value_parser = crate::args::duration)]
    pub ttft: Duration,
    /// Streaming: content frames per stream.
    #[arg(long, default_value_t = 16)]
    pub frames: usize,
    /// Streaming: delay between content frames.
    #[arg(long, default_value = "10ms", value_parser = crate::args::duration)]
    pub gap: Duration,
}

/// Per-worker counters, on their own cache lines.
/// shared: written by one worker, read by the stats thread.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Counters {
    accepted: AtomicU64,
    requests: AtomicU64,
}

/// The precomputed answers.
struct Script {
    completion: Bytes,
    content: Bytes,
    /// The last content frame, the finish chunk and `[DONE]`, with and without the usage chunk.
    tail: Bytes,
    tail_with_usage: Bytes,
    frames: usize,
    ttft: Duration,
    gap: Duration,
}

impl Script {
    fn new(args: &MockArgs) -> Script {
        let head = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"mock-model","#;
        let content = format!(
            "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
            String::from_utf8_lossy(CONTENT_MARKER)
        );
        let finish = format!(
            "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        );
        let usage = format!(
            "data: {head}\"choices\":[],\"usage\":{{\"prompt_tokens\":9,\"completion_tokens\":{},\"total_tokens\":{}}}}}\n\n",
            args.frames,
            args.frames + 9
        );
        let done = "data: [DONE]\n\n";
        Script {
            completion: Bytes::from_static(
                br#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the aisix bench mock."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":8,"total_tokens":17}}"#,
            ),
            tail: Bytes::from(format!("{content}{finish}{done}")),
            tail_with_usage: Bytes::from(format!("{content}{finish}{usage}{done}")),
            content: Bytes::from(content),
            frames: args.frames.max(1),
            ttft: args.ttft,
            gap: args.gap,
        }
    }
}

/// Serves until killed.
pub fn serve(args: MockArgs) -> Result<()> {
    let server = Server::bind(&args)?;
    println!(
        "mock listening addr={} stats={}",
        server.addr, server.stats_addr
    );
    std::io::stdout().flush()?;
    server.run()
}

/// A bound mock, not yet serving.
pub struct Server {
    pub addr: SocketAddr,
    pub stats_addr: SocketAddr,
    listeners: Vec<StdListener>,
    stats: StdListener,
    script: Arc<Script>,
}

impl Server {
    /// Binds one SO_REUSEPORT listener per worker on `args.addr` (port 0: the first one's port
    /// for all) and the stats listener.
    pub fn bind(args: &MockArgs) -> Result<Server> {
        let first = reuseport_listener(args.addr)?;
        let addr = first.local_addr()?;
        let mut listeners = vec![first];
        for _ in 1..args.workers.max(1) {
            listeners.push(reuseport_listener(addr)?);
        }
        let stats = StdListener::bind(args.stats_addr).context("bind the stats listener")?;
        Ok(Server {
            addr,
            stats_addr: stats.local_addr()?,
            listeners,
            stats,
            script: Arc::new(Script::new(args)),
        })
    }

    /// Serves on one thread per worker (plus the stats thread) until a worker fails.
    pub fn run(self) -> Result<()> {
        let counters: Vec<Arc<Counters>> = self.listeners.iter().map(|_| Arc::default()).collect();
        let mut threads = Vec::new();
        for (i, listener) in self.listeners.into_iter().enumerate() {
            let script = self.script.clone();
            let counters = counters[i].clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("mock-{i}"))
                    .spawn(move || worker(listener, script, counters))?,
            );
        }
        let stats = self.stats;
        std::thread::Builder::new()
            .name("mock-stats".into())
            .spawn(move || serve_stats(stats, counters))?;
        for thread in threads {
            match thread.join() {
                Ok(result) => result?,
                Err(_) => bail!("a mock worker panicked"),
            }
        }
        Ok(())
    }
}

fn reuseport_listener(addr: SocketAddr) -> Result<StdListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("bind {addr}"))?;
    socket.listen(4096)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn worker(listener: StdListener, script: Arc<Script>, counters: Arc<Counters>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors or a connection reset before accept: keep serving.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            counters.accepted.fetch_add(1, Ordering::Relaxed);
            let script = script.clone();
            let counters = counters.clone();
            tokio::task::spawn_local(async move {
                let service = service_fn(move |request| {
                    counters.requests.fetch_add(1, Ordering::Relaxed);
                    answer(request, script.clone())
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

async fn answer(
    request: Request<Incoming>,
    script: Arc<Script>,
) -> Result<Response<MockBody>, Infallible> {
    if request.method() != Method::POST || !request.uri().path().ends_with("/chat/completions") {
        return Ok(respond(
            StatusCode::NOT_FOUND,
            "application/json",
            Bytes::from_static(
                b"{\"error\":{\"message\":\"mock: not found\",\"type\":\"invalid_request_error\"}}",
            ),
        ));
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(respond(StatusCode::BAD_REQUEST, "text/plain", Bytes::new())),
    };
    if !json_flag_is_true(&body, b"\"stream\"") {
        return Ok(respond(
            StatusCode::OK,
            "application/json",
            script.completion.clone(),
        ));
    }
    let include_usage = json_flag_is_true(&body, b"\"include_usage\"");
    let sleep = Box::pin(tokio::time::sleep(script.ttft));
    let body = MockBody::Sse(SseBody {
        script,
        sent: 0,
        include_usage,
        sleep,
        finished: false,
    });
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    Ok(response)
}

fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<MockBody> {
    let mut response = Response::new(MockBody::Once(Some(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// True when `key` (quoted) is followed by `:` and `true`, whitespace allowed: a byte search,
/// not a JSON parse, so the mock stays far cheaper than the gateway in front of it.
fn json_flag_is_true(body: &[u8], quoted_key: &[u8]) -> bool {
    memchr::memmem::find_iter(body, quoted_key).any(|at| {
        let rest = body[at + quoted_key.len()..].trim_ascii_start();
        rest.strip_prefix(b":")
            .is_some_and(|v| v.trim_ascii_start().starts_with(b"true"))
    })
}

enum MockBody {
    Once(Option<Bytes>),
    Sse(SseBody),
}

struct SseBody {
    script: Arc<Script>,
    sent: usize,
    include_usage: bool,
    sleep: Pin<Box<Sleep>>,
    finished: bool,
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            MockBody::Once(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Sse(sse) => {
                if sse.finished {
                    return Poll::Ready(None);
                }
                ready!(sse.sleep.as_mut().poll(cx));
                sse.sent += 1;
                let frame = if sse.sent < sse.script.frames {
                    let next = Instant::now() + sse.script.gap;
                    sse.sleep.as_mut().reset(next);
                    sse.script.content.clone()
                } else {
                    sse.finished = true;
                    if sse.include_usage {
                        sse.script.tail_with_usage.clone()
                    } else {
                        sse.script.tail.clone()
                    }
                };
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Once(body) => body.is_none(),
            MockBody::Sse(sse) => sse.finished,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Once(Some(body)) => SizeHint::with_exact(body.len() as u64),
            MockBody::Once(None) => SizeHint::with_exact(0),
            MockBody::Sse(_) => SizeHint::default(),
        }
    }
}

fn serve_stats(listener: StdListener, counters: Vec<Arc<Counters>>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = stream.read(&mut request);
        let accepted: u64 = counters
            .iter()
            .map(|c| c.accepted.load(Ordering::Relaxed))
            .sum();
        let requests: u64 = counters
            .iter()
            .map(|c| c.requests.load(Ordering::Relaxed))
            .sum();
        let body = format!("{{\"accepted\":{accepted},\"requests\":{requests}}}");
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// What the mock has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockStats {
    pub accepted: u64,
    pub requests: u64,
}

/// The harness's handle on a running `aisix-bench mock` process.
pub struct Mock {
    child: Child,
    pub addr: SocketAddr,
    stats_addr: SocketAddr,
}

impl Mock {
    /// Starts this executable's `mock` subcommand pinned to `cpus` and waits for its address.
    pub fn start(args: &MockArgs, cpus: Option<&CpuList>, log: &Path) -> Result<Mock> {
        let exe = std::env::current_exe().context("locate the aisix-bench executable")?;
        let mut command = Command::new(exe);
        command
            .arg("mock")
            .arg(format!("--addr={}", args.addr))
            .arg(format!("--stats-addr={}", args.stats_addr))
            .arg(format!("--workers={}", args.workers))
            .arg(format!("--ttft={}us", args.ttft.as_micros()))
            .arg(format!("--frames={}", args.frames))
            .arg(format!("--gap={}us", args.gap.as_micros()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?);
        let mut child = Child::spawn("the mock provider", command, cpus)?;
        let stdout = child
            .inner_mut()
            .stdout
            .take()
            .context("the mock's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let field = |name: &str| -> Result<SocketAddr> {
            let value = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .with_context(|| {
                    format!("the mock did not report {name} (log: {})", log.display())
                })?;
            Ok(value.parse()?)
        };
        let addr = field("addr=")?;
        let stats_addr = field("stats=")?;
        Ok(Mock {
            child,
            addr,
            stats_addr,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Asks the stats listener (a connection of its own, never counted as upstream traffic).
    pub fn stats(&self) -> Result<MockStats> {
        fetch_stats(self.stats_addr)
    }
}

/// `GET /__stats` from a mock's stats listener.
pub fn fetch_stats(stats_addr: SocketAddr) -> Result<MockStats> {
    let mut stream = StdStream::connect(stats_addr).context("connect to the mock's stats")?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /__stats HTTP/1.1\r\nhost: mock\r\nconnection: close\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let body = memchr::memmem::find(&response, b"\r\n\r\n")
        .map(|at| &response[at + 4..])
        .context("malformed stats response")?;
    let json: serde_json::Value = serde_json::from_slice(body)?;
    let get = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    Ok(MockStats {
        accepted: get("accepted"),
        requests: get("requests"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_flag_is_found_with_or_without_spaces_and_never_in_stream_options() {
        assert!(json_flag_is_true(
            br#"{"model":"m","stream":true}"#,
            b"\"stream\""
        ));
        assert!(json_flag_is_true(br#"{"stream" :  true}"#, b"\"stream\""));
        assert!(!json_flag_is_true(br#"{"stream":false}"#, b"\"stream\""));
        assert!(!json_flag_is_true(
            br#"{"stream_options":{"include_usage":true}}"#,
            b"\"stream\""
        ));
        assert!(json_flag_is_true(
            br#"{"stream":true,"stream_options":{"include_usage": true}}"#,
            b"\"include_usage\""
        ));
    }
}
