//! A stand-in OTLP/HTTP collector for the export legs: one that answers every request at once
//! (200, empty body, keep-alive), or one that accepts connections and never answers (a stalled
//! collector). Threads of the harness; nothing is decoded (the e2e tests check the content).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use anyhow::Result;

/// `aisix-bench otlp-sink`: the sink as a process of its own.
#[derive(Debug, Clone, clap::Args)]
pub struct SinkArgs {
    /// Accept connections and never answer (a stalled collector).
    #[arg(long)]
    pub stalled: bool,
}

/// Starts a sink, prints `otlp-sink endpoint=<base URL>` and serves until killed.
pub fn serve(args: SinkArgs) -> Result<()> {
    let sink = Sink::start(args.stalled)?;
    println!("otlp-sink endpoint={}", sink.endpoint());
    std::io::stdout().flush()?;
    loop {
        std::thread::park();
    }
}

/// A running sink; its threads end with the harness.
#[derive(Debug)]
pub struct Sink {
    pub addr: SocketAddr,
}

impl Sink {
    /// Starts a sink on an ephemeral 127.0.0.1 port: `stalled` holds every connection open and
    /// unread instead of answering.
    pub fn start(stalled: bool) -> Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::Builder::new()
            .name("otlp-sink".into())
            .spawn(move || {
                let mut held = Vec::new();
                for stream in listener.incoming().flatten() {
                    if stalled {
                        held.push(stream);
                    } else {
                        let _ = std::thread::Builder::new()
                            .name("otlp-sink-conn".into())
                            .spawn(move || answer(stream));
                    }
                }
            })?;
        Ok(Sink { addr })
    }

    /// The base URL the gateway is given.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Reads each request (head, then `content-length` bytes) and answers 200, until the peer
/// closes.
fn answer(stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let response =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(response).is_err() {
            return;
        }
    }
}
