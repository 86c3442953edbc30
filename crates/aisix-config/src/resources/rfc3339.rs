//! RFC 3339 timestamps (`2027-01-01T00:00:00Z`, `2027-01-01T09:30:00.5+02:00`) to `SystemTime`,
//! for `expires_at`. Strict: the full date-time with an offset, nothing before or after.

use std::time::{Duration, SystemTime};

/// Parses an RFC 3339 `date-time`. `T` may also be `t` or a space (RFC 3339 §5.6 note); `Z`
/// may be `z`; a leap second (`:60`) counts as the first second of the next minute; fraction
/// digits beyond nanoseconds are ignored.
pub(super) fn parse(text: &str) -> Option<SystemTime> {
    let mut s = Cursor(text.as_bytes());
    let year = s.digits(4)?;
    s.byte(b'-')?;
    let month = s.digits(2)?;
    s.byte(b'-')?;
    let day = s.digits(2)?;
    s.one_of(b"Tt ")?;
    let hour = s.digits(2)?;
    s.byte(b':')?;
    let minute = s.digits(2)?;
    s.byte(b':')?;
    let second = s.digits(2)?;
    let nanos = if s.byte(b'.').is_some() {
        s.fraction_nanos()?
    } else {
        0
    };
    let offset_secs = match s.one_of(b"Zz+-")? {
        b'Z' | b'z' => 0,
        sign => {
            let hours = s.digits(2)?;
            s.byte(b':')?;
            let minutes = s.digits(2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if sign == b'-' { -offset } else { offset }
        }
    };
    if !s.0.is_empty()
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }

    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_secs;
    let nanos = Duration::from_nanos(nanos);
    match u64::try_from(secs) {
        Ok(after) => SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(after) + nanos),
        Err(_) => SystemTime::UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(nanos),
    }
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn next(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn byte(&mut self, expected: u8) -> Option<()> {
        (self.0.first() == Some(&expected)).then(|| self.0 = &self.0[1..])
    }

    fn one_of(&mut self, choices: &[u8]) -> Option<u8> {
        let c = *self.0.first()?;
        choices.contains(&c).then(|| {
            self.0 = &self.0[1..];
            c
        })
    }

    /// Exactly `count` ASCII digits.
    fn digits(&mut self, count: usize) -> Option<i64> {
        (0..count).try_fold(0i64, |n, _| {
            let c = self.next().filter(u8::is_ascii_digit)?;
            Some(n * 10 + i64::from(c - b'0'))
        })
    }

    /// One or more digits after the `.`, as nanoseconds.
    fn fraction_nanos(&mut self) -> Option<u64> {
        let count = self.0.iter().take_while(|c| c.is_ascii_digit()).count();
        if count == 0 {
            return None;
        }
        let (digits, rest) = self.0.split_at(count);
        self.0 = rest;
        let nanos = (0..9).fold(0u64, |n, i| {
            n * 10 + digits.get(i).map_or(0, |&c| u64::from(c - b'0'))
        });
        Some(nanos)
    }
}

fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (H. Hinnant's algorithm); the
/// year is 0..=9999 here, so every intermediate value is non-negative.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
    }

    #[test]
    fn utc_timestamps_parse_to_unix_time() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), at(0, 0));
        assert_eq!(parse("2027-01-01T00:00:00Z"), at(1_798_761_600, 0));
        assert_eq!(parse("2000-02-29T12:34:56z"), at(951_827_696, 0));
        assert_eq!(parse("2024-12-31t23:59:59Z"), at(1_735_689_599, 0));
        assert_eq!(parse("2024-12-31 23:59:59Z"), at(1_735_689_599, 0));
    }

    #[test]
    fn offsets_are_applied() {
        assert_eq!(parse("2027-01-01T02:00:00+02:00"), at(1_798_761_600, 0));
        assert_eq!(parse("2026-12-31T19:30:00-04:30"), at(1_798_761_600, 0));
        assert_eq!(parse("2027-01-01T00:00:00-00:00"), at(1_798_761_600, 0));
    }

    #[test]
    fn fractions_are_nanoseconds() {
        assert_eq!(parse("1970-01-01T00:00:01.5Z"), at(1, 500_000_000));
        assert_eq!(parse("1970-01-01T00:00:01.123456789Z"), at(1, 123_456_789));
        assert_eq!(parse("1970-01-01T00:00:01.1234567891Z"), at(1, 123_456_789));
    }

    #[test]
    fn leap_second_rolls_into_the_next_minute() {
        assert_eq!(parse("2016-12-31T23:59:60Z"), parse("2017-01-01T00:00:00Z"));
    }

    #[test]
    fn times_before_the_epoch_parse() {
        assert_eq!(
            parse("1969-12-31T23:59:59.5Z"),
            Some(SystemTime::UNIX_EPOCH - Duration::from_millis(500))
        );
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for bad in [
            "",
            "2027-01-01",
            "2027-01-01T00:00:00",
            "2027-01-01T00:00Z",
            "2027-1-01T00:00:00Z",
            "2027-01-01T00:00:00.Z",
            "2027-01-01T00:00:00+0200",
            "2027-01-01T00:00:00+24:00",
            "2027-01-01T00:00:00Z ",
            " 2027-01-01T00:00:00Z",
            "2027-13-01T00:00:00Z",
            "2027-00-01T00:00:00Z",
            "2027-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2027-04-31T00:00:00Z",
            "2027-01-00T00:00:00Z",
            "2027-01-01T24:00:00Z",
            "2027-01-01T00:60:00Z",
            "2027-01-01T00:00:61Z",
            "2027-01-01X00:00:00Z",
            "+027-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z2",
            "next tuesday",
        ] {
            assert_eq!(parse(bad), None, "{bad:?} should be rejected");
        }
    }

    #[test]
    fn leap_days_follow_the_gregorian_rules() {
        assert!(parse("2000-02-29T00:00:00Z").is_some());
        assert!(parse("2024-02-29T00:00:00Z").is_some());
        assert!(parse("2100-02-29T00:00:00Z").is_none());
    }
}
