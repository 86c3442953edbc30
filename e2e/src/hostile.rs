//! A misbehaving upstream on raw TCP: each connection gets one scripted abuse (a huge answer,
//! endless headers, bad chunking, one endless SSE event, garbage), generated as it is written
//! so the test process never holds it; writes block when the gateway stops reading. Also the
//! gateway's resident memory, read from `/proc`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One abuse.
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
    /// An SSE stream whose first event is this many bytes with no line end.
    LongEvent(usize),
    /// Bytes that are not HTTP at all.
    Garbage,
}

/// The content a huge answer's `content` string is made of, written piece by piece.
const PIECE: usize = 64 * 1024;

/// The usage a huge answer reports (the gateway reads it from the answer's tail).
pub const HUGE_USAGE: (u64, u64) = (7, 11);

impl Abuse {
    /// The body of a huge answer of `size` bytes: its head, filler length and tail.
    fn huge_parts(size: usize) -> (String, usize, String) {
        let head = r#"{"id":"huge","object":"chat.completion","model":"up-x","choices":[{"index":0,"message":{"role":"assistant","content":""#.to_owned();
        let (prompt, completion) = HUGE_USAGE;
        let tail = format!(
            r#""}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}}}"#,
            prompt + completion
        );
        let filler = size.saturating_sub(head.len() + tail.len());
        (head, filler, tail)
    }

    /// The exact length of a huge answer's body.
    pub fn huge_len(size: usize) -> usize {
        let (head, filler, tail) = Abuse::huge_parts(size);
        head.len() + filler + tail.len()
    }

    fn write(self, out: &mut TcpStream) -> std::io::Result<()> {
        match self {
            Abuse::HugeChunked(size) | Abuse::HugeWithLength(size) => {
                let chunked = matches!(self, Abuse::HugeChunked(_));
                let (head, filler, tail) = Abuse::huge_parts(size);
                let framing = if chunked {
                    "transfer-encoding: chunked".to_owned()
                } else {
                    format!("content-length: {}", head.len() + filler + tail.len())
                };
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
                )?;
                let mut send = |bytes: &[u8]| -> std::io::Result<()> {
                    if chunked {
                        write!(out, "{:x}\r\n", bytes.len())?;
                        out.write_all(bytes)?;
                        out.write_all(b"\r\n")
                    } else {
                        out.write_all(bytes)
                    }
                };
                send(head.as_bytes())?;
                let piece = vec![b'a'; PIECE];
                let mut left = filler;
                while left > 0 {
                    let n = left.min(PIECE);
                    send(&piece[..n])?;
                    left -= n;
                }
                send(tail.as_bytes())?;
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
                out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"")?;
                let piece = vec![b'e'; PIECE];
                let mut left = size;
                while left > 0 {
                    let n = left.min(PIECE);
                    out.write_all(&piece[..n])?;
                    left -= n;
                }
                out.write_all(b"\"}}]}\n\ndata: [DONE]\n\n")
            }
            Abuse::Garbage => {
                let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
                let mut bytes = vec![0u8; 64 * 1024];
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

/// A misbehaving upstream serving one abuse to every connection, until dropped.
pub struct HostileUpstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl HostileUpstream {
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

/// The resident memory of process `pid`, in bytes (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS in /proc/<pid>/status")
        * 1024
}
