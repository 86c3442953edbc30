//! The reaper: closes a pool's idle connections by timer, so reuse holds at any concurrency and
//! nothing churns into TIME_WAIT.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::client::conn::http2;
use tokio::time::Instant;

use super::Inner;

/// Closes idle connections that have sat for two to three half-timeouts (so at least the idle
/// timeout), ticking every half timeout; ends with the pool.
pub(super) async fn reap(pool: Weak<Inner>) {
    let Some(every) = pool
        .upgrade()
        .map(|p| (p.idle_timeout / 2).max(Duration::from_millis(100)))
    else {
        return;
    };
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let tick = pool.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let mut hosts = pool.hosts();
        hosts.retain(|_, host| {
            host.idle
                .retain(|conn| !conn.sender.is_closed() && tick - conn.since_tick < 3);
            if host
                .http2
                .as_ref()
                .is_some_and(http2::SendRequest::is_closed)
            {
                host.http2 = None;
            }
            host.waiters.retain(|waiter| !waiter.is_closed());
            // A host with connections still counted keeps its entry, so its count stays right.
            !host.idle.is_empty() || host.http2.is_some() || host.open > 0 || host.probing
        });
    }
}
