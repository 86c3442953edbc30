//! Command-line value parsers shared by the subcommands: comma-separated lists (`1,8,32`) and
//! `KEY=VALUE` pairs. Durations (`2s`, `500ms`, `1s 500ms`) are `humantime`'s.

use std::str::FromStr;

/// A comma-separated list of values, at least one: `1,8,32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommaList<T>(pub Vec<T>);

impl<T: FromStr> FromStr for CommaList<T> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        comma_list(text, |s| {
            s.parse().map_err(|_| format!("{s:?} is not a valid value"))
        })
    }
}

/// A comma-separated list, each item read by `parse`.
pub fn comma_list<T>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<CommaList<T>, String> {
    let items = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse)
        .collect::<Result<Vec<T>, String>>()?;
    if items.is_empty() {
        return Err("an empty list".into());
    }
    Ok(CommaList(items))
}

/// `--modes`: `tpc,shared`.
pub fn modes(text: &str) -> Result<CommaList<crate::gateway::Mode>, String> {
    comma_list(text, crate::gateway::parse_mode)
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
    fn lists_split_on_commas() {
        assert_eq!("1, 8,32".parse(), Ok(CommaList(vec![1usize, 8, 32])));
        assert!("1,x".parse::<CommaList<usize>>().is_err());
        assert!("".parse::<CommaList<usize>>().is_err());
    }

    #[test]
    fn modes_read_the_short_names_into_the_gateways_type() {
        use crate::gateway::{Mode, mode_leg};
        let parsed = modes("tpc, shared").unwrap();
        assert_eq!(parsed.0, [Mode::ThreadPerCore, Mode::Shared]);
        assert_eq!(mode_leg(Mode::ThreadPerCore), "aisix-tpc");
        assert!(modes("tpc,both").is_err());
    }
}
