//! The wall clock the limiter reads: windows and budget periods are aligned to UTC, so every
//! replica (and Redis) agrees on which window a moment belongs to. Injected, so tests roll
//! windows and periods over without sleeping.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Milliseconds since the Unix epoch, UTC.
pub trait Clock: Send + Sync + fmt::Debug {
    fn unix_millis(&self) -> u64;
}

/// The system's real-time clock (`clock_gettime` through the vDSO: no system call).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            })
    }
}

/// A clock that moves only when told to; for tests.
// shared: read by every worker that checks a limit, moved by the test.
#[derive(Debug, Default)]
pub struct ManualClock {
    millis: AtomicU64,
}

impl ManualClock {
    pub fn at(unix_millis: u64) -> Self {
        Self {
            millis: AtomicU64::new(unix_millis),
        }
    }

    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(by, Ordering::Relaxed);
    }

    pub fn set(&self, unix_millis: u64) {
        self.millis.store(unix_millis, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn unix_millis(&self) -> u64 {
        self.millis.load(Ordering::Relaxed)
    }
}

/// The system clock moved forward by an offset the end-to-end tests set through
/// `/__aisix/test/advance-clock`, so they roll windows and budget periods over without
/// sleeping. Only in builds with the `test-hooks` feature, which release builds refuse.
#[cfg(feature = "test-hooks")]
// shared: read by every worker that checks a limit, moved by the test hook.
#[derive(Debug, Default)]
pub struct SkewedClock {
    offset_millis: AtomicU64,
}

#[cfg(feature = "test-hooks")]
impl SkewedClock {
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.offset_millis.fetch_add(by, Ordering::Relaxed);
    }
}

#[cfg(feature = "test-hooks")]
impl Clock for SkewedClock {
    fn unix_millis(&self) -> u64 {
        SystemClock
            .unix_millis()
            .saturating_add(self.offset_millis.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_reads_the_present() {
        // 2024-01-01T00:00:00Z: any machine running these tests is past it.
        assert!(SystemClock.unix_millis() > 1_704_067_200_000);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(1_000);
        assert_eq!(clock.unix_millis(), 1_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.unix_millis(), 3_000);
        clock.set(10);
        assert_eq!(clock.unix_millis(), 10);
    }
}
