//! Process signals: SIGTERM and SIGINT counted (the first stops, the second aborts the stop),
//! SIGHUP turned into reload requests.

use tokio::sync::{mpsc, watch};

use super::reload::Trigger;

/// How many stop signals (SIGTERM or SIGINT) have arrived.
#[derive(Debug, Clone)]
pub(crate) struct StopSignals {
    count: watch::Receiver<u32>,
}

impl StopSignals {
    /// Starts counting SIGTERM and SIGINT (Ctrl-C elsewhere). Call on the control runtime,
    /// before telling anyone the process is ready: from then on neither kills it outright.
    pub(crate) fn install() -> Self {
        let (tx, count) = watch::channel(0);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::spawn(async move {
                        loop {
                            let name = tokio::select! {
                                _ = term.recv() => "SIGTERM",
                                _ = int.recv() => "SIGINT",
                            };
                            tracing::info!(signal = name, "stop signal received");
                            tx.send_modify(|n| *n += 1);
                        }
                    });
                }
                _ => {
                    tracing::error!("cannot install signal handlers; stop the process with SIGKILL")
                }
            }
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                tx.send_modify(|n| *n += 1);
            }
        });
        Self { count }
    }

    /// Resolves once `n` stop signals have arrived in all.
    pub(crate) async fn nth(&self, n: u32) {
        let mut count = self.count.clone();
        if count.wait_for(|seen| *seen >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// SIGHUP's handler, installed before the listeners say "listening" ([`Hangups::install`]):
/// a reload signal that comes before the reload loop runs waits for it, where SIGHUP's default
/// action would have ended the process (a supervisor's `ExecReload` may send one at once).
pub(crate) struct Hangups {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    /// Call on the control runtime, before telling anyone the process is ready.
    pub(crate) fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signal = signal(SignalKind::hangup())
                .inspect_err(|_| {
                    tracing::warn!("cannot listen for SIGHUP; reload by signal is unavailable");
                })
                .ok();
            Self { signal }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Sends a reload request for every SIGHUP (one that came before this ran included), until
    /// the reload loop is gone.
    pub(crate) async fn forward(self, triggers: mpsc::Sender<Trigger>) {
        #[cfg(unix)]
        if let Some(mut hangup) = self.signal {
            while hangup.recv().await.is_some() {
                if triggers.send(Trigger::Sighup).await.is_err() {
                    return;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = triggers;
    }
}
