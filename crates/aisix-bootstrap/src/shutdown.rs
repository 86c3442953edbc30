//! Readiness and the drain signal that every worker watches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::watch;
use tokio::time::Instant;

/// Whether the process should receive new traffic: not yet (a resources source still loading
/// its first snapshot), yes, or no more (draining; never yes again).
// shared: SIGTERM flips it once for every worker's `/readyz`.
#[derive(Debug, Clone)]
pub struct Readiness(Arc<AtomicU8>);

const WAITING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

impl Readiness {
    /// Ready from the start.
    pub fn new() -> Self {
        Self(Arc::new(AtomicU8::new(READY)))
    }

    /// Not ready until [`Readiness::set_ready`].
    pub fn waiting() -> Self {
        Self(Arc::new(AtomicU8::new(WAITING)))
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed) == READY
    }

    /// Ready, unless the process already drains.
    pub fn set_ready(&self) {
        let _ = self
            .0
            .compare_exchange(WAITING, READY, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn set_draining(&self) {
        self.0.store(DRAINING, Ordering::Relaxed);
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

/// `Some(deadline)` once the process drains: stop accepting now, finish in-flight work by then.
// shared: one control thread tells every worker at the same moment.
pub(crate) type DrainSender = watch::Sender<Option<Instant>>;
pub(crate) type DrainReceiver = watch::Receiver<Option<Instant>>;

pub(crate) fn drain_channel() -> (DrainSender, DrainReceiver) {
    watch::channel(None)
}

/// Resolves with the drain deadline once the drain starts (or the sender is gone).
pub(crate) async fn drain_started(rx: &mut DrainReceiver) -> Option<Instant> {
    match rx.wait_for(Option::is_some).await {
        Ok(deadline) => *deadline,
        Err(_) => None,
    }
}
