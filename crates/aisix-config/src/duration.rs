//! Durations as the config files write them: a humantime string (`30s`, `250ms`, `1m 30s`), or a
//! bare number in the key's own unit (seconds for `_secs` keys, milliseconds for `_ms` and the
//! unit-less resource keys such as `timeout`), so that files written for numbers keep their meaning.

use std::fmt;
use std::time::Duration;

/// What a bare number means for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Seconds,
    Milliseconds,
}

impl Unit {
    pub(crate) fn of(self, n: u64) -> Duration {
        match self {
            Unit::Seconds => Duration::from_secs(n),
            Unit::Milliseconds => Duration::from_millis(n),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
        })
    }
}

/// What a duration key expects, for its error messages.
pub(crate) fn expected(unit: Unit) -> String {
    format!("expected a duration such as 30s or 250ms, or a whole number of {unit}")
}

/// `text` as a duration: digits alone are a number of `unit`, anything else a humantime string.
/// The error says what was expected without echoing the value.
pub(crate) fn parse(text: &str, unit: Unit) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map(|n| unit.of(n)).map_err(|_| expected(unit));
    }
    humantime::parse_duration(text).map_err(|_| expected(unit))
}

/// `d` as the config would write it (`1s`, `250ms`, `1h 1m`), for bounds in error messages.
pub(crate) fn display(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_keep_the_keys_unit_and_strings_carry_their_own() {
        assert_eq!(parse("30", Unit::Seconds), Ok(Duration::from_secs(30)));
        assert_eq!(
            parse("30", Unit::Milliseconds),
            Ok(Duration::from_millis(30))
        );
        assert_eq!(
            parse("30s", Unit::Milliseconds),
            Ok(Duration::from_secs(30))
        );
        assert_eq!(
            parse("250ms", Unit::Seconds),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(
            parse(" 1m 30s ", Unit::Seconds),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(parse("2h", Unit::Seconds), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn words_signs_and_fractions_are_refused_without_echoing_them() {
        for text in [
            "",
            "soon",
            "-5",
            "1.5",
            "5 parsecs",
            "99999999999999999999999",
        ] {
            let error = parse(text, Unit::Milliseconds).unwrap_err();
            assert_eq!(error, expected(Unit::Milliseconds), "{text:?}");
        }
    }

    #[test]
    fn bounds_print_as_a_config_would_write_them() {
        assert_eq!(display(Duration::from_millis(1)), "1ms");
        assert_eq!(display(Duration::from_secs(90)), "1m 30s");
    }
}
