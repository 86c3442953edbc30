//! Worker liveness for a supervisor's watchdog: the control thread sends a tick, and a small
//! task on every worker's runtime acknowledges it. A worker whose event loop is stuck never
//! acknowledges, so the process stops telling its supervisor it is healthy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// The control thread's side: tick, then later ask whether every worker answered.
// shared: the control thread writes the tick; each worker writes only its own slot.
#[derive(Debug, Clone)]
pub struct Liveness {
    tick: Arc<watch::Sender<u64>>,
    acks: Arc<[AtomicU64]>,
}

/// One worker's side, moved onto the worker's runtime.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    tick: watch::Receiver<u64>,
    acks: Arc<[AtomicU64]>,
    slot: usize,
}

impl Liveness {
    /// Liveness for `slots` heartbeats (one per worker runtime).
    pub(crate) fn new(slots: usize) -> Self {
        let (tick, _) = watch::channel(0);
        Self {
            tick: Arc::new(tick),
            acks: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The heartbeat of slot `slot`.
    pub(crate) fn heartbeat(&self, slot: usize) -> Heartbeat {
        Heartbeat {
            tick: self.tick.subscribe(),
            acks: self.acks.clone(),
            slot,
        }
    }

    /// Whether every worker acknowledged the last tick (true before the first one).
    pub fn all_answered(&self) -> bool {
        let tick = *self.tick.borrow();
        self.acks
            .iter()
            .all(|ack| ack.load(Ordering::Acquire) == tick)
    }

    /// Sends the next tick; workers acknowledge it as soon as their runtime gets to it.
    pub fn tick(&self) {
        self.tick.send_modify(|tick| *tick += 1);
    }
}

impl Heartbeat {
    /// Acknowledges every tick until the control thread is gone. Spawn it on the worker's
    /// runtime: it costs one wake-up per tick.
    pub(crate) async fn run(mut self) {
        loop {
            let tick = *self.tick.borrow_and_update();
            if let Some(ack) = self.acks.get(self.slot) {
                ack.store(tick, Ordering::Release);
            }
            if self.tick.changed().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tick_counts_as_answered_only_once_every_heartbeat_ran() {
        let liveness = Liveness::new(2);
        assert!(liveness.all_answered());
        let first = tokio::spawn(liveness.heartbeat(0).run());
        tokio::task::yield_now().await;
        liveness.tick();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(
            !liveness.all_answered(),
            "slot 1 has no running heartbeat, so the tick stays unanswered"
        );
        let second = tokio::spawn(liveness.heartbeat(1).run());
        for _ in 0..100 {
            if liveness.all_answered() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(liveness.all_answered());
        first.abort();
        second.abort();
    }
}
