//! Servers this project did not write: nginx as a reverse proxy ([`nginx`]) and ASGI servers
//! (uvicorn, hypercorn) serving a small OpenAI-like app ([`asgi`]) as providers for the
//! conformance matrix; nginx as a load balancer in front of gateways ([`balancer`]); Redis
//! ([`redis`]) as the shared rate-limit store; and etcd ([`etcd`]) as the shared resources
//! store. Each is a child process with its files in a temp dir, stopped by PID on drop.

pub mod asgi;
pub mod balancer;
pub mod etcd;
pub mod gemini;
pub mod nginx;
pub mod otlp;
pub mod redis;
pub mod vertex;

use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long a server may take to start, and to stop after `SIGTERM`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A server started by a test: its own process group, killed with the test's thread
/// (`PR_SET_PDEATHSIG`) if the test process dies, and stopped on drop: `SIGTERM` to its PID,
/// then `SIGKILL` to its process group (its own workers only) if it lingers.
pub struct ServerProcess {
    name: &'static str,
    child: Child,
    /// Where the server's stdout and stderr go.
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl ServerProcess {
    /// Spawns `command` with stdout and stderr appended to `log`. `inherit_fd` is a listening
    /// socket the child keeps under the same number (Rust opens every fd close-on-exec).
    ///
    /// `PR_SET_PDEATHSIG` fires when the spawning *thread* ends: spawn from the test's own
    /// thread, which outlives the guard.
    pub fn spawn(
        name: &'static str,
        mut command: Command,
        log: &Path,
        inherit_fd: Option<RawFd>,
    ) -> ServerProcess {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {name}'s log {}: {e}", log.display()));
        command
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().expect("clone log file"))
            .stderr(out)
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and calls only prctl(2) and
        // fcntl(2), which are async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = inherit_fd
                    && libc::fcntl(fd, libc::F_SETFD, 0) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {name} ({program}: {e}); `bash scripts/test.sh` installs it \
                 (Debian's nginx, and the venv of e2e/python/requirements.txt)"
            )
        });
        ServerProcess {
            name,
            child,
            log: log.to_path_buf(),
            exit: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status, if the server has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait on a server");
        }
        self.exit
    }

    /// Polls `ready` until it holds; panics with the server's log if the server exits first
    /// or [`START_TIMEOUT`] passes.
    pub fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready() {
                return;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "{} exited ({status}) before {what} (a missing package? `bash \
                     scripts/test.sh` installs them all):\n{}",
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not get to {what} within {START_TIMEOUT:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Freezes the server (`SIGSTOP`): its sockets stay open and its peers get no answer, as
    /// from a hung host.
    pub fn pause(&self) {
        if let Ok(pid) = i32::try_from(self.pid()) {
            self.signal(pid, libc::SIGSTOP);
        }
    }

    /// Lets a paused server run again (`SIGCONT`).
    pub fn resume(&self) {
        if let Ok(pid) = i32::try_from(self.pid()) {
            self.signal(pid, libc::SIGCONT);
        }
    }

    fn signal(&self, target: i32, signal: i32) {
        // SAFETY: kill(2) has no memory-safety preconditions; `target` is our child's PID or
        // the process group it leads.
        unsafe { libc::kill(target, signal) };
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.try_exit().is_some() {
            return;
        }
        let Ok(pid) = i32::try_from(self.pid()) else {
            return;
        };
        // A paused server would not act on SIGTERM.
        self.signal(pid, libc::SIGCONT);
        self.signal(pid, libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.try_exit().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.exit.is_none() {
            // Not reaped yet, so the group's ID is still ours: its workers go with it.
            self.signal(-pid, libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago, for servers that cannot take a socket.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// A listening socket on an ephemeral 127.0.0.1 port, to hand to a server by fd.
pub fn listener() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port")
}

/// Parses a JSON-lines file written by a server; a missing file has no lines.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", path.display()))
        })
        .collect()
}
