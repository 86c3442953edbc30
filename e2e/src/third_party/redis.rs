//! Redis (Debian's `redis-server`) on a free loopback port, with no persistence: the shared
//! store of rate-limit counters. Tests stop it, pause it and start it again on the same port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{ServerProcess, free_port};

/// A Redis server; stopped on drop.
pub struct Redis {
    process: Option<ServerProcess>,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// The `redis-server` binary: on `PATH`, else Debian's `/usr/bin/redis-server`. Panics, saying
/// how to install it, when there is none.
pub fn binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "redis-server is not installed: `bash scripts/test.sh` installs it \
             (apt-get install redis-server), or install Debian's `redis-server` package by hand"
        )
    })
}

impl Redis {
    /// Starts Redis on a free port of 127.0.0.1 and waits until it answers `PING`.
    pub fn start() -> Redis {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let mut redis = Redis {
            process: None,
            addr,
            dir,
        };
        redis.restart();
        redis
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Stops the server (`SIGTERM`, waited for); the port is free again.
    pub fn stop(&mut self) {
        drop(self.process.take());
    }

    /// Starts the server (again) on the same port, empty, and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let mut command = Command::new(binary());
        command
            .arg("--port")
            .arg(self.addr.port().to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path());
        let log = self.dir.path().join("redis.log");
        let mut process = ServerProcess::spawn("redis-server", command, &log, None);
        let addr = self.addr;
        process.wait_until("answering PING", || ping(addr));
        self.process = Some(process);
    }

    /// Freezes the server: connections stay open, nothing is answered.
    pub fn pause(&self) {
        if let Some(process) = &self.process {
            process.pause();
        }
    }

    pub fn resume(&self) {
        if let Some(process) = &self.process {
            process.resume();
        }
    }

    /// Runs one command (given as its words) and returns the raw RESP reply.
    pub fn command(&self, words: &[&str]) -> String {
        let mut stream = TcpStream::connect(self.addr).expect("connect to redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        stream.write_all(request.as_bytes()).expect("send to redis");
        let mut reply = vec![0; 4096];
        let n = stream.read(&mut reply).expect("read from redis");
        String::from_utf8_lossy(&reply[..n]).into_owned()
    }
}

fn ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
