//! The counters of one entry in this process, and reserving and settling against them: every
//! check a compare-and-swap on one atomic word, taken back in order if a later one refuses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::window::{PeriodCounter, Window, WindowCounter, period_index};
use super::{Adjust, Check, Evaluated, Subject, What};

/// Every counter one API key or model entry may need. Aligned to a cache line so that two
/// entries' counters never share one.
// shared: one per entry for the whole process, written by every worker serving the entry.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct Counters {
    /// By [`Window::index`].
    windows: [WindowCounter; Window::ALL.len()],
    in_flight: AtomicU64,
    /// By [`period_index`], in micro-dollars.
    spend: [PeriodCounter; 3],
}

impl Counters {
    fn apply(&self, check: &Check) -> Result<u64, u64> {
        match check.what {
            What::Window(window) => {
                self.windows[window.index()].try_add(check.span.epoch, check.amount, check.limit)
            }
            What::Budget(period) => self.spend[period_index(period)].try_add(
                check.span.epoch,
                check.amount,
                check.limit,
            ),
            What::Concurrency => {
                let mut held = 0;
                self.in_flight
                    .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                        held = n;
                        (n < check.limit).then_some(n + 1)
                    })
                    .map(|n| n + 1)
                    .map_err(|_| held)
            }
        }
    }

    fn current(&self, check: &Check) -> u64 {
        match check.what {
            What::Window(window) => self.windows[window.index()].get(check.span.epoch),
            What::Budget(period) => self.spend[period_index(period)].get(check.span.epoch),
            What::Concurrency => self.in_flight.load(Ordering::Relaxed),
        }
    }

    /// Takes back what `check` reserved.
    fn undo(&self, check: &Check) {
        match check.what {
            What::Window(window) => {
                self.windows[window.index()].sub(check.span.epoch, check.amount)
            }
            What::Budget(period) => {
                self.spend[period_index(period)].sub(check.span.epoch, check.amount)
            }
            What::Concurrency => self.release(),
        }
    }

    fn release(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// Applies every check in order; on the first refusal, takes back those already applied.
pub(super) fn reserve(subjects: &[&Arc<Subject>], checks: &[Check]) -> Evaluated {
    let mut counts = Vec::with_capacity(checks.len());
    for (i, check) in checks.iter().enumerate() {
        let counters = &subjects[check.subject].counters;
        match counters.apply(check) {
            Ok(count) => counts.push(count),
            Err(count) => {
                for done in &checks[..i] {
                    subjects[done.subject].counters.undo(done);
                }
                counts.push(count);
                counts.extend(
                    checks[i + 1..]
                        .iter()
                        .map(|c| subjects[c.subject].counters.current(c)),
                );
                return Evaluated {
                    counts,
                    refused: Some(i),
                };
            }
        }
    }
    Evaluated {
        counts,
        refused: None,
    }
}

pub(super) fn settle(subjects: &[Arc<Subject>], checks: &[Check], adjustments: &[Adjust]) {
    for adjustment in adjustments {
        let (Adjust::Return { check, .. } | Adjust::Add { check, .. } | Adjust::Release { check }) =
            *adjustment;
        let check = &checks[check];
        let counters = &subjects[check.subject].counters;
        match (*adjustment, check.what) {
            (Adjust::Release { .. }, _) => counters.release(),
            (Adjust::Return { amount, .. }, What::Window(window)) => {
                counters.windows[window.index()].sub(check.span.epoch, amount);
            }
            (Adjust::Return { amount, .. }, What::Budget(period)) => {
                counters.spend[period_index(period)].sub(check.span.epoch, amount);
            }
            (Adjust::Add { amount, span, .. }, What::Window(window)) => {
                counters.windows[window.index()].add(span.epoch, amount);
            }
            (Adjust::Add { amount, span, .. }, What::Budget(period)) => {
                counters.spend[period_index(period)].add(span.epoch, amount);
            }
            (Adjust::Return { .. } | Adjust::Add { .. }, What::Concurrency) => {}
        }
    }
}
