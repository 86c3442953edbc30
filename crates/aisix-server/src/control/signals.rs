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

/// Sends a reload request for every SIGHUP, until the reload loop is gone.
pub(crate) async fn forward_hangups(triggers: mpsc::Sender<Trigger>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by signal is unavailable");
            return;
        };
        while hangup.recv().await.is_some() {
            if triggers.send(Trigger::Sighup).await.is_err() {
                return;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = triggers;
    }
}
