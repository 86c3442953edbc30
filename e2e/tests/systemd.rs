//! aisix under systemd: the shipped unit passes `systemd-analyze verify` without a diagnostic
//! and declares what the service relies on; the notify protocol is spoken in order, with
//! watchdog pings while healthy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, GatewayConfig, binary};

fn unit_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/systemd/aisix.service")
}

/// `[Service]` keys of the unit; a key given more than once keeps its last value.
fn service_section() -> BTreeMap<String, String> {
    let unit = std::fs::read_to_string(unit_path()).unwrap();
    let mut section = "";
    let mut keys = BTreeMap::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && !line.starts_with('#')
            && let Some((key, value)) = line.split_once('=')
        {
            keys.insert(key.to_owned(), value.to_owned());
        }
    }
    keys
}

#[test]
fn the_unit_passes_systemd_analyze_verify_without_a_diagnostic() {
    // verify checks that ExecStart's binary exists; point it at the one just built.
    let unit = std::fs::read_to_string(unit_path()).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/aisix "));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("aisix.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/aisix", &binary().display().to_string()),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run systemd-analyze ({e}); install Debian's `systemd` package (scripts/test.sh does)")
        });
    let diagnostics = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{diagnostics}");
    // verify exits 0 on unknown keys and bad values, and only prints them.
    assert!(diagnostics.trim().is_empty(), "{diagnostics}");
}

#[test]
fn the_unit_is_notify_with_watchdog_reload_limits_and_hardening() {
    let service = service_section();
    let get = |key: &str| service.get(key).map(String::as_str);
    assert_eq!(get("Type"), Some("notify"));
    assert_eq!(get("NotifyAccess"), Some("main"));
    assert_eq!(get("ExecReload"), Some("/bin/kill -HUP $MAINPID"));
    assert_eq!(get("KillSignal"), Some("SIGTERM"));
    let secs = |key: &str| -> u64 { get(key).unwrap().trim_end_matches('s').parse().unwrap() };
    assert!(secs("WatchdogSec") > 0);
    // Above the default shutdown.readiness_grace_secs (0) + shutdown.drain_timeout_secs (30),
    // so systemd never kills a drain that is within its own deadline.
    assert!(secs("TimeoutStopSec") > 30);
    assert!(get("LimitNOFILE").unwrap().parse::<u64>().unwrap() >= 65_536);
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ] {
        assert_eq!(get(key), Some(value), "{key}");
    }
}

/// Every datagram received on the socket, in order.
struct NotifySocket {
    path: PathBuf,
    messages: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn bind() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        Self {
            path,
            messages,
            _dir: dir,
        }
    }

    fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until some message satisfies `found`; false on timeout.
    fn wait_for(&self, found: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if found(&self.messages()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

fn count(messages: &[String], state: &str) -> usize {
    messages
        .iter()
        .filter(|m| m.lines().any(|l| l == state))
        .count()
}

both_modes! {
    async fn sd_notify_sends_ready_reloading_ready_and_stopping_in_order_with_watchdog_pings(mode: Mode) {
        let notify = NotifySocket::bind();
        let mut gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .env("NOTIFY_SOCKET", &notify.path.display().to_string())
                .env("WATCHDOG_USEC", "200000"),
        );
        assert!(notify.wait_for(|m| count(m, "READY=1") == 1), "{:?}", notify.messages());
        assert!(notify.wait_for(|m| count(m, "WATCHDOG=1") >= 3), "{:?}\n{}", notify.messages(), gateway.logs());

        gateway.signal(libc::SIGHUP);
        assert!(notify.wait_for(|m| count(m, "READY=1") == 2), "{:?}", notify.messages());
        gateway.signal(libc::SIGTERM);
        assert_eq!(gateway.wait_exit(Duration::from_secs(15)).unwrap().code(), Some(0), "{}", gateway.logs());

        let states: Vec<String> = notify
            .messages()
            .into_iter()
            .filter(|m| m != "WATCHDOG=1")
            .collect();
        assert_eq!(states.len(), 4, "{states:?}");
        assert!(states[0].starts_with("READY=1\n"), "{states:?}");
        let reloading: Vec<&str> = states[1].lines().collect();
        assert_eq!(reloading[0], "RELOADING=1", "{states:?}");
        let usec: u64 = reloading[1].strip_prefix("MONOTONIC_USEC=").unwrap().parse().unwrap();
        assert!(usec > 0);
        assert!(states[2].starts_with("READY=1\n"), "{states:?}");
        assert!(states[3].starts_with("STOPPING=1\n"), "{states:?}");
    }
}

/// Only with the debug build's test hooks, which can wedge a worker's event loop.
#[cfg(debug_assertions)]
#[test]
fn a_wedged_worker_stops_the_watchdog_pings_until_it_answers_again() {
    // Thread-per-core: each worker's own event loop answers the liveness tick. (In the shared
    // runtime another thread picks the heartbeat up; the runtime as a whole is what answers.)
    let notify = NotifySocket::bind();
    let gateway = Gateway::start(
        &GatewayConfig::new(aisix_e2e::gateway::Mode::ThreadPerCore)
            .workers(Some(1))
            .env("NOTIFY_SOCKET", &notify.path.display().to_string())
            .env("WATCHDOG_USEC", "200000"),
    );
    assert!(
        notify.wait_for(|m| count(m, "WATCHDOG=1") >= 2),
        "{:?}",
        notify.messages()
    );
    // The only worker blocks its thread inside the request.
    let addr = gateway.addr();
    let stalled = std::thread::spawn(move || {
        aisix_e2e::client::blocking_get_status(addr, "/__aisix/test/stall-worker")
    });
    assert!(
        gateway.wait_for_log("withholding WATCHDOG=1", Duration::from_secs(10)),
        "{}",
        gateway.logs()
    );
    stalled.join().unwrap();
    // Once it answers again, the pings come back.
    let before = count(&notify.messages(), "WATCHDOG=1");
    assert!(
        notify.wait_for(|m| count(m, "WATCHDOG=1") >= before + 2),
        "{}",
        gateway.logs()
    );
}
