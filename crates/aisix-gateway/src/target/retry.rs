//! How long a request waits before calling the same direct model again: jittered exponential
//! backoff, or the upstream's `Retry-After` when it names one that is worth waiting for.

use std::cell::Cell;
use std::time::Duration;

use http::HeaderValue;

/// The first retry waits this long (plus jitter); each later one twice the one before.
const BASE: Duration = Duration::from_millis(250);
/// No backoff grows past this (plus jitter).
const CAP: Duration = Duration::from_secs(2);
/// Up to this much is added at random, so clients failed together do not retry together.
const JITTER: Duration = Duration::from_millis(250);
/// A `Retry-After` longer than this is not waited for inside a request: the direct model cools
/// down until then instead, and the request moves on.
pub(crate) const LONG_WAIT: Duration = Duration::from_secs(10);

/// The pause before retry number `retry` (1 for the first): 250 ms × 2^(retry−1), capped at
/// 2 s, plus 0–250 ms; `Retry-After` instead when the upstream sent one within
/// [`LONG_WAIT`].
pub(crate) fn pause(retry: u32, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(wait) if wait <= LONG_WAIT => wait,
        _ => backoff(retry, jitter()),
    }
}

/// The backoff of retry number `retry` with `jitter` added.
pub(crate) fn backoff(retry: u32, jitter: Duration) -> Duration {
    let doublings = retry.saturating_sub(1).min(16);
    (BASE * (1u32 << doublings)).min(CAP) + jitter.min(JITTER)
}

/// A jitter in `0..=250 ms` from this thread's generator (seeded once per thread; no system
/// call per use).
fn jitter() -> Duration {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    let next = STATE.with(|state| {
        // xorshift64
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    });
    let millis = u64::try_from(JITTER.as_millis()).unwrap_or(250);
    Duration::from_millis(next % (millis + 1))
}

fn seed() -> u64 {
    use std::hash::BuildHasher;
    // foldhash's random state is seeded once per process; the thread id tells threads apart.
    foldhash::fast::RandomState::default().hash_one(std::thread::current().id()) | 1
}

/// `Retry-After` as a delay: its seconds, or the time until its HTTP date (none for a date
/// already past). `None` for a value that is neither.
pub(crate) fn retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_250_ms_up_to_2_s_plus_at_most_250_ms() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(1, Duration::ZERO), ms(250));
        assert_eq!(backoff(2, Duration::ZERO), ms(500));
        assert_eq!(backoff(3, Duration::ZERO), ms(1000));
        assert_eq!(backoff(4, Duration::ZERO), ms(2000));
        assert_eq!(backoff(30, Duration::ZERO), ms(2000));
        assert_eq!(backoff(30, Duration::from_secs(9)), ms(2250));
        for retry in 1..10 {
            for _ in 0..200 {
                let wait = pause(retry, None);
                let floor = backoff(retry, Duration::ZERO);
                assert!(
                    wait >= floor && wait <= floor + ms(250),
                    "{retry}: {wait:?}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_long_wait() {
        assert_eq!(
            pause(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        let wait = pause(1, Some(Duration::from_secs(60)));
        assert!(wait <= Duration::from_millis(500), "{wait:?}");
        assert_eq!(
            retry_after(&HeaderValue::from_static(" 7")),
            Some(Duration::from_secs(7))
        );
        // A date already past: no wait. One ahead: the time until it.
        assert_eq!(
            retry_after(&HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
        let ahead = std::time::SystemTime::now() + Duration::from_secs(120);
        let value = HeaderValue::from_str(&httpdate::fmt_http_date(ahead)).unwrap();
        let wait = retry_after(&value).unwrap();
        assert!(
            wait > Duration::from_secs(110) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
        for nonsense in ["soon", "-3", "1.5", ""] {
            assert_eq!(
                retry_after(&HeaderValue::from_static(nonsense)),
                None,
                "{nonsense}"
            );
        }
    }

    #[test]
    fn jitter_varies_between_calls() {
        let seen: std::collections::HashSet<Duration> = (0..50).map(|_| jitter()).collect();
        assert!(seen.len() > 10, "{seen:?}");
    }
}
