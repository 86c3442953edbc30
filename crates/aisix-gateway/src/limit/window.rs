//! What a limit counts over: fixed windows of one second, minute, hour or day, and budget
//! periods of one day, ISO week or month, all aligned to UTC; and the one atomic word that holds
//! a count together with the window it belongs to.
//!
//! # Window kind and accuracy
//!
//! Windows are **fixed** and aligned to the Unix epoch: `rpm` counts from hh:mm:00.000 to
//! hh:mm:59.999 UTC, then starts again from 0. Within one window the count never passes the
//! limit (beyond what requests used over their reservation, see the module above). Across a
//! boundary a client can spend one window's limit at its very end and the next window's at the
//! very start, so any sliding span of one window length may see up to twice the limit. A
//! sliding window would bound that better, but costs a second counter per limit and makes
//! reconciliation ambiguous; fixed windows are what AISIX and the providers' own headers use.

use std::sync::atomic::{AtomicU64, Ordering};

use aisix_config::{BudgetPeriod, RateLimit};
use aisix_obs::metrics::labels::RateLimitKind;
use time::{Date, Month, OffsetDateTime};

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;

/// What a window limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Requests,
    Tokens,
}

/// One of the six window limits of `rate_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Rps,
    Rpm,
    Rph,
    Rpd,
    Tpm,
    Tpd,
}

impl Window {
    pub const ALL: [Window; 6] = [
        Window::Rps,
        Window::Rpm,
        Window::Rph,
        Window::Rpd,
        Window::Tpm,
        Window::Tpd,
    ];

    /// Its position in [`Window::ALL`] (and in a subject's counters).
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn kind(self) -> RateLimitKind {
        match self {
            Window::Rps => RateLimitKind::Rps,
            Window::Rpm => RateLimitKind::Rpm,
            Window::Rph => RateLimitKind::Rph,
            Window::Rpd => RateLimitKind::Rpd,
            Window::Tpm => RateLimitKind::Tpm,
            Window::Tpd => RateLimitKind::Tpd,
        }
    }

    pub const fn unit(self) -> Unit {
        match self {
            Window::Rps | Window::Rpm | Window::Rph | Window::Rpd => Unit::Requests,
            Window::Tpm | Window::Tpd => Unit::Tokens,
        }
    }

    pub const fn length_ms(self) -> u64 {
        match self {
            Window::Rps => SECOND_MS,
            Window::Rpm | Window::Tpm => MINUTE_MS,
            Window::Rph => HOUR_MS,
            Window::Rpd | Window::Tpd => DAY_MS,
        }
    }

    /// The limit `rate_limit` sets for this window, if any.
    pub fn limit_in(self, limits: &RateLimit) -> Option<u64> {
        match self {
            Window::Rps => limits.rps,
            Window::Rpm => limits.rpm,
            Window::Rph => limits.rph,
            Window::Rpd => limits.rpd,
            Window::Tpm => limits.tpm,
            Window::Tpd => limits.tpd,
        }
    }

    /// The span `at` falls in.
    pub fn span(self, at: u64) -> Span {
        let length = self.length_ms();
        let epoch = at / length;
        Span {
            epoch,
            end: (epoch + 1).saturating_mul(length),
        }
    }
}

/// One window or period: its number since the Unix epoch, and when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub epoch: u64,
    /// Unix milliseconds of the first instant of the next span.
    pub end: u64,
}

/// The position of `period` among the budget periods: day, week, month.
pub const fn period_index(period: BudgetPeriod) -> usize {
    match period {
        BudgetPeriod::Day => 0,
        BudgetPeriod::Week => 1,
        BudgetPeriod::Month => 2,
    }
}

/// The budget period `at` falls in: days and weeks (from Monday) counted from the epoch, months
/// as `year * 12 + month - 1`.
pub fn period_span(period: BudgetPeriod, at: u64) -> Span {
    let day = at / DAY_MS;
    match period {
        BudgetPeriod::Day => Span {
            epoch: day,
            end: (day + 1) * DAY_MS,
        },
        BudgetPeriod::Week => {
            // 1970-01-01 was a Thursday: shifting by 3 days puts every Monday on a multiple of 7.
            let week = (day + 3) / 7;
            Span {
                epoch: week,
                end: ((week + 1) * 7 - 3) * DAY_MS,
            }
        }
        BudgetPeriod::Month => month_span(at),
    }
}

fn month_span(at: u64) -> Span {
    let seconds = i64::try_from(at / SECOND_MS).unwrap_or(i64::MAX);
    let date = OffsetDateTime::from_unix_timestamp(seconds)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
        .date();
    let (year, month) = (date.year(), date.month());
    let epoch = u64::try_from(i64::from(year) * 12 + i64::from(u8::from(month)) - 1).unwrap_or(0);
    let next = match month {
        Month::December => Date::from_calendar_date(year + 1, Month::January, 1),
        _ => Date::from_calendar_date(year, month.next(), 1),
    };
    let end = next
        .map(|d| d.midnight().assume_utc().unix_timestamp())
        .ok()
        .and_then(|s| u64::try_from(s).ok())
        .map_or(u64::MAX, |s| s * SECOND_MS);
    Span { epoch, end }
}

/// A count and the span it belongs to, in one atomic word: the top `TAG_BITS` bits hold the
/// span's epoch (modulo 2^TAG_BITS), the rest the count. A word tagged with an older span reads
/// as 0, so a new window starts empty without a reset racing the first requests in it.
///
/// The word only moves forward. A writer whose clock still reads an earlier span than the word
/// holds (a worker that read the clock just before another one opened the next window, or a
/// wall clock stepped back) counts into the word's span instead of replacing it: a count is
/// never lost at a boundary, and the stale writer errs on the side of refusing. "Earlier" is
/// at most [`PackedCounter::MAX_BEHIND`] spans; a word further away is taken for an older span.
///
/// Counts saturate at [`PackedCounter::MAX`]. The tag can alias only for a counter left
/// untouched for within `MAX_BEHIND` spans of a multiple of 2^TAG_BITS spans (194 days of
/// one-second windows); it then counts into the aliased span until that span's time passes.
// shared: one per limited entry and limit, written by every worker that serves the entry.
#[derive(Debug, Default)]
pub struct PackedCounter<const TAG_BITS: u32>(AtomicU64);

/// Window counters: 24 bits of window, 40 of count (up to about 1.1 × 10^12 tokens).
pub type WindowCounter = PackedCounter<24>;
/// Budget counters: 16 bits of period (179 years of days), 48 of micro-dollars ($281M).
pub type PeriodCounter = PackedCounter<16>;

impl<const TAG_BITS: u32> PackedCounter<TAG_BITS> {
    const COUNT_BITS: u32 = 64 - TAG_BITS;
    const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
    pub const MAX: u64 = (1 << Self::COUNT_BITS) - 1;
    /// How many spans a writer's clock may lag the word and still count into it.
    pub const MAX_BEHIND: u64 = 64;

    fn tag(epoch: u64) -> u64 {
        epoch & Self::TAG_MASK
    }

    /// The span a write for `epoch` lands in (as a tag) and its count so far: the word's own
    /// when it holds `epoch` or a span at most `MAX_BEHIND` ahead of it, else a new one at 0.
    fn resolve(word: u64, epoch: u64) -> (u64, u64) {
        let held = word >> Self::COUNT_BITS;
        let ahead = held.wrapping_sub(Self::tag(epoch)) & Self::TAG_MASK;
        if ahead <= Self::MAX_BEHIND {
            (held, word & Self::MAX)
        } else {
            (Self::tag(epoch), 0)
        }
    }

    fn word(tag: u64, count: u64) -> u64 {
        (tag << Self::COUNT_BITS) | count.min(Self::MAX)
    }

    /// The count a request in span `epoch` is measured against.
    pub fn get(&self, epoch: u64) -> u64 {
        Self::resolve(self.0.load(Ordering::Relaxed), epoch).1
    }

    /// Adds `amount` to span `epoch` (or the later span the word already holds) unless the
    /// count has reached `limit` or would pass it. `Ok` with the new count, or `Err` with the
    /// count that refused.
    pub fn try_add(&self, epoch: u64, amount: u64, limit: u64) -> Result<u64, u64> {
        let mut counted = 0;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                let (tag, count) = Self::resolve(word, epoch);
                counted = count;
                if count >= limit || count.saturating_add(amount) > limit {
                    None
                } else {
                    Some(Self::word(tag, count.saturating_add(amount)))
                }
            })
            .map(|_| counted.saturating_add(amount))
            .map_err(|_| counted)
    }

    /// Adds `amount` to span `epoch` (or the later span the word already holds) without a
    /// limit (usage beyond a reservation).
    pub fn add(&self, epoch: u64, amount: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                let (tag, count) = Self::resolve(word, epoch);
                Some(Self::word(tag, count.saturating_add(amount)))
            });
    }

    /// Takes `amount` back from span `epoch`, if that span is still the one counted.
    pub fn sub(&self, epoch: u64, amount: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                (word >> Self::COUNT_BITS == Self::tag(epoch)).then(|| {
                    Self::word(Self::tag(epoch), (word & Self::MAX).saturating_sub(amount))
                })
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-03-15T12:34:56.789Z, a Friday.
    const AT: u64 = 1_710_506_096_789;

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let minute = Window::Rpm.span(AT);
        assert_eq!(minute.epoch, AT / 60_000);
        assert_eq!(minute.end, 1_710_506_100_000);
        assert_eq!(Window::Rps.span(AT).end, 1_710_506_097_000);
        assert_eq!(Window::Rph.span(AT).end, 1_710_507_600_000);
        assert_eq!(Window::Tpd.span(AT).end, 1_710_547_200_000);
        assert_eq!(Window::Rpm.span(minute.end).epoch, minute.epoch + 1);
        assert_eq!(Window::Rpm.span(minute.end - 1).epoch, minute.epoch);
    }

    #[test]
    fn windows_name_their_kind_and_unit() {
        for window in Window::ALL {
            assert_eq!(Window::ALL[window.index()], window);
        }
        assert_eq!(Window::Tpm.kind(), RateLimitKind::Tpm);
        assert_eq!(Window::Tpd.unit(), Unit::Tokens);
        assert_eq!(Window::Rph.unit(), Unit::Requests);
    }

    #[test]
    fn budget_days_end_at_utc_midnight() {
        let day = period_span(BudgetPeriod::Day, AT);
        assert_eq!(day.end, 1_710_547_200_000); // 2024-03-16T00:00:00Z
        assert_eq!(period_span(BudgetPeriod::Day, day.end).epoch, day.epoch + 1);
    }

    #[test]
    fn budget_weeks_run_monday_to_sunday() {
        let week = period_span(BudgetPeriod::Week, AT);
        assert_eq!(week.end, 1_710_720_000_000); // Monday 2024-03-18T00:00:00Z
        // Sunday 23:59:59.999 is still this week; Monday 00:00 is the next.
        assert_eq!(
            period_span(BudgetPeriod::Week, week.end - 1).epoch,
            week.epoch
        );
        assert_eq!(
            period_span(BudgetPeriod::Week, week.end).epoch,
            week.epoch + 1
        );
        // Monday 2024-03-11 started it.
        assert_eq!(
            period_span(BudgetPeriod::Week, 1_710_115_200_000).epoch,
            week.epoch
        );
        assert_eq!(
            period_span(BudgetPeriod::Week, 1_710_115_199_999).epoch,
            week.epoch - 1
        );
    }

    #[test]
    fn budget_months_follow_the_calendar() {
        let march = period_span(BudgetPeriod::Month, AT);
        assert_eq!(march.epoch, 2024 * 12 + 2);
        assert_eq!(march.end, 1_711_929_600_000); // 2024-04-01T00:00:00Z
        let february = period_span(BudgetPeriod::Month, 1_709_251_199_999); // Feb 29 23:59:59.999
        assert_eq!(february.epoch, march.epoch - 1);
        assert_eq!(february.end, 1_709_251_200_000);
        let december = period_span(BudgetPeriod::Month, 1_735_689_599_000); // 2024-12-31T23:59:59Z
        assert_eq!(december.end, 1_735_689_600_000); // 2025-01-01
        assert_eq!(
            period_span(BudgetPeriod::Month, december.end).epoch,
            december.epoch + 1
        );
    }

    #[test]
    fn a_counter_refuses_what_would_pass_its_limit() {
        let counter = WindowCounter::default();
        assert_eq!(counter.try_add(7, 6, 10), Ok(6));
        assert_eq!(counter.try_add(7, 5, 10), Err(6));
        assert_eq!(counter.try_add(7, 4, 10), Ok(10));
        assert_eq!(
            counter.try_add(7, 0, 10),
            Err(10),
            "a full window refuses even nothing"
        );
        assert_eq!(counter.get(7), 10);
    }

    #[test]
    fn a_new_span_starts_from_zero() {
        let counter = WindowCounter::default();
        assert_eq!(counter.try_add(7, 10, 10), Ok(10));
        assert_eq!(counter.get(8), 0);
        assert_eq!(counter.try_add(8, 3, 10), Ok(3));
        assert_eq!(counter.get(9), 0, "a later window starts from zero too");
    }

    #[test]
    fn a_writer_behind_the_word_counts_into_its_later_span() {
        let counter = WindowCounter::default();
        assert_eq!(counter.try_add(1_008, 3, 10), Ok(3));
        // A worker whose clock still reads window 1_007 must not put the word back.
        assert_eq!(counter.try_add(1_007, 2, 10), Ok(5));
        counter.add(1_007, 1);
        assert_eq!(counter.get(1_008), 6, "window 1_008 kept every count");
        assert_eq!(
            counter.get(1_007),
            6,
            "the stale reader is measured against the later window"
        );
        assert_eq!(counter.try_add(1_007, 5, 10), Err(6));
        // A clock stepped back far past the bound starts a window of its own.
        let far = 1_008 - WindowCounter::MAX_BEHIND - 1;
        assert_eq!(counter.get(far), 0);
    }

    #[test]
    fn the_word_never_goes_back_across_the_tag_wrap() {
        let counter = WindowCounter::default();
        let last = (1 << 24) - 1;
        counter.try_add(last + 1, 4, 10).unwrap();
        assert_eq!(
            counter.try_add(last, 1, 10),
            Ok(5),
            "the wrap is one step ahead"
        );
    }

    #[test]
    fn no_count_is_lost_when_workers_straddle_a_boundary() {
        // Half the writers still read window 1 while the other half are in window 2: every
        // admission lands in window 2 and none passes its limit.
        let counter = std::sync::Arc::new(WindowCounter::default());
        let admitted: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8u64)
                .map(|t| {
                    let counter = counter.clone();
                    scope.spawn(move || {
                        (0..1_000u64)
                            .filter(|i| {
                                let epoch = if (t + i) % 2 == 0 { 1 } else { 2 };
                                counter.try_add(epoch, 1, 2_500).is_ok()
                            })
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        // Window 1 may have admitted some before window 2 first appeared; window 2 never more
        // than its limit, and nothing admitted after it opened is missing from its count.
        let in_two = counter.get(2);
        assert!(in_two <= 2_500, "window 2 counted {in_two}");
        assert!(admitted <= 2 * 2_500);
        assert_eq!(counter.get(1), in_two, "window 1 reads as the later window");
    }

    #[test]
    fn sub_returns_only_to_the_span_that_reserved() {
        let counter = WindowCounter::default();
        counter.try_add(7, 8, 10).unwrap();
        counter.sub(7, 5);
        assert_eq!(counter.get(7), 3);
        counter.sub(7, 100);
        assert_eq!(counter.get(7), 0, "never below zero");
        counter.try_add(8, 4, 10).unwrap();
        counter.sub(7, 4);
        assert_eq!(
            counter.get(8),
            4,
            "a late return to a past window is dropped"
        );
    }

    #[test]
    fn add_passes_the_limit_and_saturates() {
        let counter = PeriodCounter::default();
        counter.try_add(1, 5, 10).unwrap();
        counter.add(1, 20);
        assert_eq!(counter.get(1), 25);
        counter.add(2, 3);
        assert_eq!(counter.get(2), 3, "an add in a new span starts it");
        counter.add(2, u64::MAX);
        assert_eq!(counter.get(2), PeriodCounter::MAX);
    }

    #[test]
    fn counters_hold_under_contention() {
        let counter = std::sync::Arc::new(WindowCounter::default());
        let admitted: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let counter = counter.clone();
                    scope.spawn(move || {
                        (0..1_000)
                            .filter(|_| counter.try_add(1, 1, 2_500).is_ok())
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 2_500);
        assert_eq!(counter.get(1), 2_500);
    }
}
