//! Hostile upstream answers, in one place: what they are (a huge chat completion, one endless SSE
//! event) and the two ways they are served. The mock's fast path sends them over real HTTP to
//! requests for [`HOSTILE_MODEL`] (benchmarks: a neighbour no gateway should let hurt its other
//! traffic); [`HostileUpstream`] serves them, and the abuses HTTP cannot express (endless
//! headers, bad chunking, garbage), on raw TCP to every connection (end-to-end tests). Either way
//! an answer is written from one small buffer as it goes, so the test process never holds it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::body::{Filled, Frames};

/// The upstream model name that gets the hostile answers on the fast path (the gateway's
/// `model_name`; the request body is byte-searched for it, quoted).
pub const HOSTILE_MODEL: &str = "mock-hostile";

/// The usage a huge answer reports, `(prompt, completion)`, after all its content (a gateway
/// reads it from the answer's tail).
pub const HUGE_USAGE: (u64, u64) = (7, 11);

/// The sizes of the fast path's hostile answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hostile {
    /// A streaming request gets one SSE event this long (`data: ` included) that never ends:
    /// no blank line, no newline at all; then the stream ends.
    pub event_bytes: usize,
    /// A non-streaming request gets a 200 `application/json` body this long (with
    /// `Content-Length`): one chat completion whose content is padding, ending with `usage`.
    pub body_bytes: usize,
}

/// The chunk the hostile answers are written in: one buffer, sent again and again.
const CHUNK: usize = 64 * 1024;

const EVENT_HEAD: &str = r#"data: {"id":"chatcmpl-hostile","object":"chat.completion.chunk","created":1700000000,"model":"mock-hostile","choices":[{"index":0,"delta":{"content":""#;
const BODY_HEAD: &str = r#"{"id":"chatcmpl-hostile","object":"chat.completion","created":1700000000,"model":"mock-hostile","choices":[{"index":0,"message":{"role":"assistant","content":""#;

fn body_tail() -> String {
    let (prompt, completion) = HUGE_USAGE;
    format!(
        r#""}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}}}"#,
        prompt + completion
    )
}

/// One hostile answer: a head, `fills` copies of the shared fill chunk, and a tail carrying the
/// rest of the padding (and, for a body, its end).
#[derive(Debug, Clone)]
struct Padded {
    head: Bytes,
    fills: usize,
    tail: Bytes,
}

impl Padded {
    /// `head`, padding and `tail` making `total` bytes (never less than head and tail).
    fn new(head: &str, tail: &str, total: usize) -> Padded {
        let padding = total.saturating_sub(head.len() + tail.len());
        let rest = "x".repeat(padding % CHUNK);
        Padded {
            head: Bytes::from(head.to_owned()),
            fills: padding / CHUNK,
            tail: Bytes::from(format!("{rest}{tail}")),
        }
    }

    fn len(&self) -> usize {
        self.head.len() + self.fills * CHUNK + self.tail.len()
    }

    /// Writes it to `out` in pieces of at most [`CHUNK`] bytes; `send` frames each piece.
    fn write(
        &self,
        fill: &[u8],
        mut send: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        send(&self.head)?;
        for _ in 0..self.fills {
            send(fill)?;
        }
        send(&self.tail)
    }
}

/// A huge chat completion of `size` bytes (at least its JSON frame).
fn huge_body(size: usize) -> Padded {
    Padded::new(BODY_HEAD, &body_tail(), size)
}

/// One SSE event of `size` bytes that never ends.
fn endless_event(size: usize) -> Padded {
    Padded::new(EVENT_HEAD, "", size)
}

fn fill() -> Bytes {
    Bytes::from(vec![b'x'; CHUNK])
}

/// The fast path's hostile answers, built once at start.
#[derive(Debug)]
pub(crate) struct HostileAnswers {
    fill: Bytes,
    event: Padded,
    body: Padded,
}

impl HostileAnswers {
    pub(crate) fn new(sizes: &Hostile) -> HostileAnswers {
        HostileAnswers {
            fill: fill(),
            event: endless_event(sizes.event_bytes),
            body: huge_body(sizes.body_bytes),
        }
    }

    /// The streamed answer: one endless event.
    pub(crate) fn event(&self) -> Frames {
        self.frames(&self.event)
    }

    /// The whole answer: one huge completion.
    pub(crate) fn body(&self) -> Frames {
        self.frames(&self.body)
    }

    fn frames(&self, padded: &Padded) -> Frames {
        Frames::Filled(Filled::new(
            padded.head.clone(),
            self.fill.clone(),
            padded.fills,
            padded.tail.clone(),
        ))
    }
}

/// One abuse [`HostileUpstream`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    /// A valid chat completion of about this many bytes, sent chunked.
    HugeChunked(usize),
    /// The same with a `Content-Length`.
    HugeWithLength(usize),
    /// A 200 head whose header lines never end.
    EndlessHeaders,
    /// A chunked 200 whose chunking breaks after the first chunk.
    BadChunking,
    /// An SSE stream whose first event is this many bytes with no line end; then the stream
    /// ends.
    LongEvent(usize),
    /// Bytes that are not HTTP at all.
    Garbage,
}

impl Abuse {
    /// The exact length of a huge answer's body.
    pub fn huge_len(size: usize) -> usize {
        huge_body(size).len()
    }

    fn write(self, out: &mut TcpStream) -> std::io::Result<()> {
        match self {
            Abuse::HugeChunked(size) | Abuse::HugeWithLength(size) => {
                let chunked = matches!(self, Abuse::HugeChunked(_));
                let body = huge_body(size);
                let framing = if chunked {
                    "transfer-encoding: chunked".to_owned()
                } else {
                    format!("content-length: {}", body.len())
                };
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
                )?;
                body.write(&fill(), |bytes| {
                    if chunked {
                        write!(out, "{:x}\r\n", bytes.len())?;
                        out.write_all(bytes)?;
                        out.write_all(b"\r\n")
                    } else {
                        out.write_all(bytes)
                    }
                })?;
                if chunked {
                    out.write_all(b"0\r\n\r\n")?;
                }
                Ok(())
            }
            Abuse::EndlessHeaders => {
                out.write_all(b"HTTP/1.1 200 OK\r\n")?;
                let line = format!("x-endless: {}\r\n", "h".repeat(1000));
                loop {
                    out.write_all(line.as_bytes())?;
                }
            }
            Abuse::BadChunking => out.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
                  5\r\n{\"id\"\r\nnot-a-size\r\nxx\r\n",
            ),
            Abuse::LongEvent(size) => {
                out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")?;
                endless_event(size).write(&fill(), |bytes| out.write_all(bytes))
            }
            Abuse::Garbage => {
                let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
                let mut bytes = vec![0u8; CHUNK];
                for byte in &mut bytes {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    *byte = state as u8;
                }
                out.write_all(&bytes)
            }
        }
    }
}

/// A misbehaving upstream on raw TCP serving one abuse to every connection, until dropped;
/// writes block when the gateway stops reading.
pub struct HostileUpstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl HostileUpstream {
    /// Binds a free port on loopback and serves `abuse` there; panics if it cannot bind.
    #[track_caller]
    #[allow(
        clippy::expect_used,
        reason = "test setup: an upstream that cannot start leaves the test nothing to do"
    )]
    pub fn start(abuse: Abuse) -> HostileUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind hostile upstream");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    // The request head (and its small body) arrive in one read or two.
                    let mut request = [0u8; 16 * 1024];
                    let _ = stream.read(&mut request);
                    let _ = abuse.write(&mut stream);
                    let _ = stream.flush();
                });
            }
        });
        HostileUpstream { addr, stop }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for HostileUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(mut frames: Frames) -> (u64, Vec<u8>) {
        let announced = frames.len_bytes();
        let mut bytes = Vec::new();
        while let Some(chunk) = frames.pop() {
            assert!(chunk.len() <= CHUNK.max(256), "written in small chunks");
            bytes.extend_from_slice(&chunk);
        }
        (announced, bytes)
    }

    fn hostile(event_bytes: usize, body_bytes: usize) -> HostileAnswers {
        HostileAnswers::new(&Hostile {
            event_bytes,
            body_bytes,
        })
    }

    #[test]
    fn hostile_event_is_one_unterminated_data_line_of_the_size_asked() {
        let size = 3 * CHUNK + 123;
        let answers = hostile(size, 1024);
        let (announced, event) = drain(answers.event());
        assert_eq!(event.len(), size);
        assert_eq!(announced, size as u64);
        assert!(event.starts_with(b"data: {"));
        assert!(
            !event.contains(&b'\n'),
            "no newline, so no blank line ends it"
        );
        assert!(!event.contains(&b'\r'));
    }

    #[test]
    fn hostile_body_is_one_json_completion_of_exactly_its_content_length() {
        let size = 5 * CHUNK + 77;
        let answers = hostile(1024, size);
        let (announced, body) = drain(answers.body());
        assert_eq!(body.len(), size);
        assert_eq!(announced, size as u64, "the Content-Length sent");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["object"], "chat.completion");
        let (prompt, completion) = HUGE_USAGE;
        assert_eq!(json["usage"]["prompt_tokens"], prompt);
        assert_eq!(json["usage"]["completion_tokens"], completion);
        let total = format!("\"total_tokens\":{}}}}}", prompt + completion);
        assert!(body.ends_with(total.as_bytes()), "usage comes last");
    }

    #[test]
    fn hostile_answers_are_never_shorter_than_their_frame() {
        let answers = hostile(0, 0);
        let (_, event) = drain(answers.event());
        let (_, body) = drain(answers.body());
        assert!(event.starts_with(b"data: "));
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    }

    #[test]
    fn a_huge_answer_on_raw_tcp_is_the_fast_paths_body_with_its_length() {
        let size = 2 * CHUNK + 5;
        let upstream = HostileUpstream::start(Abuse::HugeWithLength(size));
        let mut stream = TcpStream::connect(upstream.addr).unwrap();
        stream
            .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let (_, body) = drain(hostile(0, size).body());
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            Abuse::huge_len(size)
        );
        assert_eq!(Abuse::huge_len(size), size);
        assert_eq!(answer, [head.as_bytes(), &body].concat());
    }
}
