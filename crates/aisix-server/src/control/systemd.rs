//! systemd's notify protocol (sd_notify(3)) over the datagram socket named by `NOTIFY_SOCKET`:
//! `READY=1` once every listener is bound, `RELOADING=1` (with `MONOTONIC_USEC`) then `READY=1`
//! around a reload, `STOPPING=1` when the stop begins, and `WATCHDOG=1` while every worker
//! answers. Without `NOTIFY_SOCKET` (not under systemd) every message is skipped.

use std::sync::Arc;
use std::time::Duration;

use aisix_bootstrap::{Liveness, Readiness};

/// Where notifications go; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Notifier {
    #[cfg(unix)]
    target: Option<Arc<Target>>,
}

#[cfg(unix)]
#[derive(Debug)]
struct Target {
    socket: std::os::unix::net::UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
    pub(crate) fn from_env() -> Self {
        #[cfg(unix)]
        {
            let Some(name) = std::env::var_os("NOTIFY_SOCKET") else {
                return Self::default();
            };
            match target(&name) {
                Ok(target) => Self {
                    target: Some(Arc::new(target)),
                },
                Err(error) => {
                    tracing::warn!(%error, socket = ?name, "NOTIFY_SOCKET is unusable; not notifying systemd");
                    Self::default()
                }
            }
        }
        #[cfg(not(unix))]
        Self::default()
    }

    pub(crate) fn ready(&self) {
        self.send("READY=1\nSTATUS=serving");
    }

    /// Before a reload; `READY=1` must follow when it is done, whatever its result.
    pub(crate) fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
            monotonic_usec()
        ));
    }

    pub(crate) fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining");
    }

    fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    fn send(&self, message: &str) {
        #[cfg(unix)]
        if let Some(target) = &self.target
            && let Err(error) = target.socket.send_to_addr(message.as_bytes(), &target.addr)
        {
            tracing::warn!(%error, "cannot notify systemd");
        }
        #[cfg(not(unix))]
        let _ = message;
    }
}

#[cfg(unix)]
fn target(name: &std::ffi::OsStr) -> std::io::Result<Target> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = name.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name)?
        }
        #[cfg(not(target_os = "linux"))]
        Some(_) => {
            return Err(std::io::Error::other(
                "abstract sockets exist only on Linux",
            ));
        }
        None => SocketAddr::from_pathname(std::path::Path::new(name))?,
    };
    Ok(Target {
        socket: UnixDatagram::unbound()?,
        addr,
    })
}

/// `CLOCK_MONOTONIC` in microseconds, the clock systemd compares `MONOTONIC_USEC` with.
fn monotonic_usec() -> u64 {
    #[cfg(unix)]
    {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the struct we own; CLOCK_MONOTONIC always exists.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
            return 0;
        }
        let secs = u64::try_from(now.tv_sec).unwrap_or(0);
        let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000;
        secs.saturating_mul(1_000_000).saturating_add(micros)
    }
    #[cfg(not(unix))]
    0
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when systemd set it for this process
/// (`WATCHDOG_PID` unset or ours).
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim().parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2).max(Duration::from_millis(10)))
}

/// Sends `WATCHDOG=1` every `interval` while every worker answered the previous liveness tick.
/// While draining, workers wind down by design and the drain has its own deadline, so the pings
/// go on unconditionally.
pub(crate) async fn watchdog(
    notifier: Notifier,
    liveness: Liveness,
    readiness: Readiness,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if liveness.all_answered() || !readiness.is_ready() {
            notifier.watchdog();
        } else {
            tracing::error!("a worker did not answer the liveness tick; withholding WATCHDOG=1");
        }
        liveness.tick();
    }
}
