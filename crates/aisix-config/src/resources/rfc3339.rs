//! RFC 3339 timestamps (`2027-01-01T00:00:00Z`, `2027-01-01T09:30:00.5+02:00`) to `SystemTime`,
//! for `expires_at`. Strict: the full date-time with an offset, nothing before or after. The
//! parsing is the `time` crate's; this module only narrows what it accepts.

use std::time::SystemTime;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Parses an RFC 3339 `date-time`. `T` may also be `t` or a space (RFC 3339 §5.6 note); `Z`
/// may be `z`; a leap second (`23:59:60` at the end of a month, UTC) is read as the last
/// nanosecond before the next minute; fraction digits beyond nanoseconds are ignored.
pub(super) fn parse(text: &str) -> Option<SystemTime> {
    // `time` takes any byte between the date and the time; the RFC names these three.
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
    fn a_leap_second_is_the_last_nanosecond_of_its_minute() {
        assert_eq!(
            parse("2016-12-31T23:59:60Z"),
            parse("2017-01-01T00:00:00Z").map(|t| t - Duration::from_nanos(1))
        );
        assert_eq!(
            parse("2016-12-31T23:59:60Z"),
            parse("2016-12-31T23:59:59.999999999Z")
        );
        assert_eq!(
            parse("2027-01-01T00:00:60Z"),
            None,
            "not the last second of a month"
        );
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
            "2027-01-01\u{e9}00:00:00Z",
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
