//! Debian's nginx as a load balancer in front of gateways, for rollout tests: started on
//! 127.0.0.1 with a generated config, its upstream list rewritten and reloaded (SIGHUP) the way
//! an operator or an orchestrator takes an instance out of rotation and puts one back.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx master process; stopped on drop.
pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    generation: u32,
}

impl Nginx {
    /// Starts nginx balancing over `upstreams`. Panics with a hint if nginx is not installed.
    pub fn start(upstreams: &[SocketAddr]) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = {
            let probe = TcpListener::bind("127.0.0.1:0").expect("free port");
            probe.local_addr().expect("probe addr")
        };
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, render(dir.path(), addr, 1, upstreams)).expect("write nginx.conf");
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run nginx ({e}); install Debian's `nginx` package (scripts/test.sh does)")
            });
        let mut nginx = Nginx {
            child,
            addr,
            dir,
            generation: 1,
        };
        nginx.wait_generation();
        nginx
    }

    /// Replaces the upstream list and reloads; returns once new workers answer with it.
    pub fn set_upstreams(&mut self, upstreams: &[SocketAddr]) {
        self.generation += 1;
        let config = render(self.dir.path(), self.addr, self.generation, upstreams);
        std::fs::write(self.dir.path().join("nginx.conf"), config).expect("write nginx.conf");
        let pid = i32::try_from(self.child.id()).expect("pid fits i32");
        // SAFETY: kill(2) on the nginx master this struct started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0, "reload nginx");
        self.wait_generation();
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn wait_generation(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let expected = self.generation.to_string();
        loop {
            if let Some(body) = get_body(self.addr, "/__nginx/generation")
                && body == expected
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("nginx exited ({status}):\n{}", self.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not serve config generation {expected}:\n{}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The config: one worker, `upstreams` with passive failure detection and keep-alive, SSE
/// unbuffered, and a location that names the config's generation.
fn render(dir: &Path, addr: SocketAddr, generation: u32, upstreams: &[SocketAddr]) -> String {
    let dir = dir.display();
    // SAFETY: geteuid has no preconditions.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user root;\n"
    } else {
        ""
    };
    let servers: String = upstreams
        .iter()
        .map(|upstream| format!("    server {upstream} max_fails=1 fail_timeout=2s;\n"))
        .collect();
    format!(
        "{user}worker_processes 1;\ndaemon off;\nmaster_process on;\npid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\nevents {{\n  worker_connections 1024;\n}}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir}/client_body;\n  \
         proxy_temp_path {dir}/proxy;\n  fastcgi_temp_path {dir}/fastcgi;\n  \
         uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n  \
         upstream aisix {{\n{servers}    keepalive 32;\n  }}\n  \
         server {{\n    listen {addr};\n    \
         location = /__nginx/generation {{\n      return 200 \"{generation}\";\n    }}\n    \
         location / {{\n      proxy_pass http://aisix;\n      proxy_http_version 1.1;\n      \
         proxy_set_header Connection \"\";\n      proxy_buffering off;\n      \
         proxy_next_upstream error timeout;\n    }}\n  }}\n}}\n"
    )
}

fn get_body(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.starts_with("HTTP/1.1 200").then(|| {
        response
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned()
    })
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the nginx master this struct started; QUIT stops it gracefully.
            unsafe { libc::kill(pid, libc::SIGQUIT) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
