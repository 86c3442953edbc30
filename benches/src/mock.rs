//! The fast mock provider as a process of its own (`aisix-bench mock`), pinned apart from the
//! gateway, and the harness's handle on it. The server is the workspace's mock library
//! (`aisix-testkit`) on its fast path; this adds the command line and a stats port that serves
//! the mock's counters as JSON, so asking never adds a connection to the count.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use aisix_testkit::mock::{Hostile, MockProvider, Pacing};
use anyhow::{Context, Result, bail};

use crate::loadgen;
use crate::process::{Child, CpuList};

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
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// Streaming: content frames per stream.
    #[arg(long, default_value_t = 16)]
    pub frames: usize,
    /// Streaming: delay between content frames.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub gap: Duration,
    /// Streaming: send each whole stream as one write after the TTFT (no gaps), as an upstream
    /// that buffers its answer does.
    #[arg(long)]
    pub burst: bool,
    /// Hostile answers (model `mock-hostile` upstream): a streaming request gets one SSE event
    /// this many MiB long that never ends.
    #[arg(long, default_value_t = 50)]
    pub hostile_event_mib: usize,
    /// Hostile answers: a non-streaming request gets a JSON body this many MB (10^6 bytes) long.
    #[arg(long, default_value_t = 100)]
    pub hostile_body_mb: usize,
}

impl MockArgs {
    /// Starts the mock these arguments describe, in this process.
    pub fn start(&self) -> Result<MockProvider> {
        MockProvider::builder()
            .addr(self.addr)
            .workers(self.workers)
            .fast(Pacing {
                ttft: self.ttft,
                frames: self.frames,
                gap: self.gap,
                burst: self.burst,
            })
            .hostile(Hostile {
                event_bytes: self.hostile_event_mib * 1024 * 1024,
                body_bytes: self.hostile_body_mb * 1_000_000,
            })
            .start()
            .with_context(|| format!("start the mock on {}", self.addr))
    }
}

/// Serves until killed.
pub fn serve(args: MockArgs) -> Result<()> {
    let mock = args.start()?;
    let stats = StdListener::bind(args.stats_addr).context("bind the stats listener")?;
    println!(
        "mock listening addr={} stats={}",
        mock.addr(),
        stats.local_addr()?
    );
    std::io::stdout().flush()?;
    for stream in stats.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = stream.read(&mut request);
        let body = format!(
            "{{\"accepted\":{},\"requests\":{}}}",
            mock.connections_accepted(),
            mock.request_count()
        );
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    Ok(())
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
            .args(args.burst.then_some("--burst"))
            .arg(format!("--hostile-event-mib={}", args.hostile_event_mib))
            .arg(format!("--hostile-body-mb={}", args.hostile_body_mb))
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
fn fetch_stats(stats_addr: SocketAddr) -> Result<MockStats> {
    let (status, body) = loadgen::fetch(stats_addr, "/__stats", Duration::from_secs(5))
        .context("ask the mock's stats")?;
    if status != 200 {
        bail!("the mock's stats answered {status}");
    }
    let json: serde_json::Value = serde_json::from_slice(&body)?;
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
