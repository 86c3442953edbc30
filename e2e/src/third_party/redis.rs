//! Redis (Debian's `redis-server`) on a free loopback port, with no persistence: the shared
//! store of rate-limit counters. Tests stop it, pause it and start it again on the same port.
//! [`RedisCluster`] is three such servers made one Redis Cluster by `redis-cli --cluster create`.

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
    /// Arguments beyond the port, bind address and persistence.
    extra: Vec<String>,
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
        Redis::start_with(Vec::new())
    }

    fn start_with(extra: Vec<String>) -> Redis {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let mut redis = Redis {
            process: None,
            addr,
            dir,
            extra,
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
            .arg(self.dir.path())
            .args(&self.extra);
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

/// A Redis Cluster of three primaries (no replicas) on free loopback ports, each with its own
/// dir; every node stopped on drop.
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts three `redis-server --cluster-enabled yes`, joins them with `redis-cli --cluster
    /// create … --cluster-replicas 0 --cluster-yes`, and waits until every node reports
    /// `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<Redis> = (0..3)
            .map(|_| {
                Redis::start_with(
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                    ]
                    .map(str::to_owned)
                    .to_vec(),
                )
            })
            .collect();
        let mut create = Command::new(cli_binary());
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(node.addr.to_string());
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let output = create.output().expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|node| {
            node.command(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        }) {
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster never reported cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node's URL, separated by commas: `ratelimit.redis.url` in cluster mode.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(Redis::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The keys matching `pattern` on every node, each with the node that holds it.
    pub fn keys(&self, pattern: &str) -> Vec<(&Redis, String)> {
        self.nodes
            .iter()
            .flat_map(|node| {
                node.command(&["KEYS", pattern])
                    .lines()
                    .filter(|line| !line.starts_with(['*', '$']) && !line.is_empty())
                    .map(|key| (node, key.to_owned()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The slot Redis Cluster puts `key` in.
    pub fn slot(&self, key: &str) -> u64 {
        let reply = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]);
        reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT answered {reply:?}"))
    }
}

/// `redis-cli`, from the same package as `redis-server` (beside it).
fn cli_binary() -> PathBuf {
    binary().with_file_name("redis-cli")
}

/// The number a RESP reply holds: an integer (`:5`) or a bulk string (`$1` then `5`); 0 for
/// nil.
pub fn number(reply: &str) -> u64 {
    let mut lines = reply.lines();
    match lines.next() {
        Some(line) if line.starts_with(':') => line[1..].parse().unwrap_or(0),
        Some(line) if line.starts_with('$') => {
            lines.next().and_then(|v| v.parse().ok()).unwrap_or(0)
        }
        _ => 0,
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
