//! Command-line value parsers shared by the subcommands: durations (`2s`, `500ms`, `1.5s`) and
//! comma-separated lists (`1,8,32`).

use std::str::FromStr;
use std::time::Duration;

/// `2s`, `1.5s`, `500ms`, `250us`, or a bare number of seconds.
pub fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 2s or 500ms)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// A comma-separated list of values, at least one: `1,8,32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommaList<T>(pub Vec<T>);

impl<T: FromStr> FromStr for CommaList<T> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let items = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| format!("{s:?} is not a valid value")))
            .collect::<Result<Vec<T>, String>>()?;
        if items.is_empty() {
            return Err("an empty list".into());
        }
        Ok(CommaList(items))
    }
}

/// `KEY=VALUE`, for `--gateway-env`.
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_suffixes() {
        assert_eq!(duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert!(duration("fast").is_err());
        assert!(duration("-1s").is_err());
    }

    #[test]
    fn lists_split_on_commas() {
        assert_eq!("1, 8,32".parse(), Ok(CommaList(vec![1usize, 8, 32])));
        assert!("1,x".parse::<CommaList<usize>>().is_err());
        assert!("".parse::<CommaList<usize>>().is_err());
    }
}
