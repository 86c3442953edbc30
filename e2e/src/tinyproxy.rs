//! Debian's `tinyproxy` on loopback, a real forward proxy for egress tests: started in the
//! foreground with a generated config on a free port, its log kept, killed on drop.
//! `scripts/test.sh` installs it; a missing binary fails the test that needs it.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Tinyproxy {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Tinyproxy {
    /// Starts tinyproxy allowing CONNECT to `connect_ports` (it allows only 443 and 563 by
    /// default), and waits until it accepts connections.
    pub fn start(connect_ports: &[u16]) -> Tinyproxy {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 64\nAllow 127.0.0.1\nLogLevel Connect\n"
        );
        for p in connect_ports {
            config.push_str(&format!("ConnectPort {p}\n"));
        }
        let path = dir.path().join("tinyproxy.conf");
        std::fs::write(&path, config).expect("write tinyproxy.conf");
        let mut child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tinyproxy (Debian package `tinyproxy`; scripts/test.sh installs it)");
        let (log, _readers) = crate::gateway::capture_output(&mut child);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "tinyproxy did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Tinyproxy {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT`, for `HTTP_PROXY` / `HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What tinyproxy logged so far (one line per connection and per request).
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
