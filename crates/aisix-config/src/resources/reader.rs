//! A strict reader over a YAML tree: each lookup carries its path (`models[2].timeout`), each
//! failure is recorded rather than returned, and fields nobody asked for are reported unknown.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_yaml::Value;

use crate::duration::{self, Unit};
use crate::error::{ConfigError, ConfigErrors, Origin};
use crate::suggest;

/// The errors found so far in one resources file.
pub(super) struct Report {
    origin: Origin,
    errors: ConfigErrors,
    /// Paths whose `${VAR}` interpolation failed: already reported, so not judged again.
    poisoned: BTreeSet<String>,
}

impl Report {
    pub(super) fn new(file: &Path) -> Self {
        Self {
            origin: Origin::File(file.to_path_buf()),
            errors: ConfigErrors::default(),
            poisoned: BTreeSet::new(),
        }
    }

    /// The folder of the file being read, which relative paths in it are resolved against.
    pub(super) fn folder(&self) -> Option<&Path> {
        match &self.origin {
            Origin::File(file) => file.parent(),
            _ => None,
        }
    }

    pub(super) fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors
            .push(ConfigError::new(path, message, self.origin.clone()));
    }

    pub(super) fn poison(&mut self, path: String) {
        self.poisoned.insert(path);
    }

    pub(super) fn is_poisoned(&self, path: &str) -> bool {
        self.poisoned.contains(path)
    }

    pub(super) fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }

    /// `Ok(value)` when nothing was recorded, else every recorded error. `value` is `None`
    /// only when something was recorded; should that ever not hold, say so rather than panic.
    pub(super) fn finish<T>(mut self, value: Option<T>) -> Result<T, ConfigErrors> {
        match value {
            Some(value) => self.errors.into_result(value),
            None => {
                if self.errors.is_empty() {
                    self.error("", "internal error: an entry was dropped without a reason");
                }
                Err(self.errors)
            }
        }
    }
}

/// `parent.name`, or `name` at the top level.
pub(super) fn field_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// `parent[index]`.
pub(super) fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// The fields of one YAML mapping, taken one by one; what is left over is unknown.
pub(super) struct Fields<'v> {
    path: String,
    entries: Vec<(&'v str, &'v Value, bool)>,
    asked: Vec<&'static str>,
}

/// What a mapping holds under one name.
pub(super) enum Slot<'v> {
    /// Not there, or `null`.
    Absent,
    /// There, but its interpolation failed (already reported).
    Poisoned,
    Present(&'v Value, String),
}

impl<'v> Fields<'v> {
    /// The fields of `value`, or `None` (recorded) when it is not a mapping.
    pub(super) fn new(report: &mut Report, path: String, value: &'v Value) -> Option<Self> {
        let Value::Mapping(mapping) = value else {
            report.error(path, "expected a mapping");
            return None;
        };
        let mut entries = Vec::with_capacity(mapping.len());
        for (key, value) in mapping {
            match key {
                Value::String(name) => entries.push((name.as_str(), value, false)),
                _ => report.error(path.clone(), "field names must be strings"),
            }
        }
        Some(Self {
            path,
            entries,
            asked: Vec::new(),
        })
    }

    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// The field `name`, marking it known.
    pub(super) fn take(&mut self, report: &Report, name: &'static str) -> Slot<'v> {
        self.asked.push(name);
        let Some(entry) = self.entries.iter_mut().find(|(n, _, _)| *n == name) else {
            return Slot::Absent;
        };
        entry.2 = true;
        let path = field_path(&self.path, name);
        if report.is_poisoned(&path) {
            Slot::Poisoned
        } else if entry.1.is_null() {
            Slot::Absent
        } else {
            Slot::Present(entry.1, path)
        }
    }

    /// An optional field's value and path.
    pub(super) fn optional(
        &mut self,
        report: &Report,
        name: &'static str,
    ) -> Option<(&'v Value, String)> {
        match self.take(report, name) {
            Slot::Present(value, path) => Some((value, path)),
            Slot::Absent | Slot::Poisoned => None,
        }
    }

    /// A required field's value and path; its absence is recorded.
    pub(super) fn required(
        &mut self,
        report: &mut Report,
        name: &'static str,
    ) -> Option<(&'v Value, String)> {
        self.required_or(report, name, "is required")
    }

    /// Like [`Fields::required`], with a message of the caller's for the absence.
    pub(super) fn required_or(
        &mut self,
        report: &mut Report,
        name: &'static str,
        message: &str,
    ) -> Option<(&'v Value, String)> {
        match self.take(report, name) {
            Slot::Present(value, path) => Some((value, path)),
            Slot::Poisoned => None,
            Slot::Absent => {
                report.error(field_path(&self.path, name), message);
                None
            }
        }
    }

    /// Refuses the field `name` with `message` if it is there, without offering it among the
    /// known names (a field of AISIX's that aisix does not implement).
    pub(super) fn refuse(&mut self, report: &mut Report, name: &str, message: &str) {
        if let Some(entry) = self.entries.iter_mut().find(|(n, _, _)| *n == name) {
            entry.2 = true;
            report.error(field_path(&self.path, name), message);
        }
    }

    /// Records every field no one took; `noun` is "field" or "collection".
    pub(super) fn finish(self, report: &mut Report, noun: &str) {
        for (name, _, taken) in &self.entries {
            if *taken {
                continue;
            }
            let hint = match suggest(name, &self.asked) {
                Some(known) => format!("did you mean {known}?"),
                None => format!("expected one of: {}", self.asked.join(", ")),
            };
            report.error(
                field_path(&self.path, name),
                format!("unknown {noun} ({hint})"),
            );
        }
    }
}

/// The known name closest to `name`, when it is a plausible typo.
fn suggest(name: &str, known: &[&'static str]) -> Option<&'static str> {
    suggest::closest(name, known.iter().copied(), 2.min(name.len() / 2).max(1))
}

/// The items of a list, or `None` (recorded) when `value` is not a list.
pub(super) fn list<'v>(report: &mut Report, value: &'v Value, path: &str) -> Option<&'v [Value]> {
    match value {
        Value::Sequence(items) => Some(items),
        _ => {
            report.error(path, "expected a list");
            None
        }
    }
}

pub(super) fn string<'v>(report: &mut Report, value: &'v Value, path: &str) -> Option<&'v str> {
    match value {
        Value::String(s) => Some(s),
        _ => {
            report.error(path, "expected a string");
            None
        }
    }
}

pub(super) fn non_empty_string<'v>(
    report: &mut Report,
    value: &'v Value,
    path: &str,
) -> Option<&'v str> {
    let s = string(report, value, path)?;
    if s.is_empty() {
        report.error(path, "must not be empty");
        return None;
    }
    Some(s)
}

/// `true`/`false`, also as strings so a `${VAR}` can supply them.
pub(super) fn bool(report: &mut Report, value: &Value, path: &str) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        _ => {
            report.error(path, "expected true or false");
            None
        }
    }
}

/// An integer of at least 1, also as a string of digits so a `${VAR}` can supply it.
pub(super) fn positive_integer(
    report: &mut Report,
    value: &Value,
    path: &str,
    unit: &str,
) -> Option<u64> {
    let n = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    match n {
        Some(n) if n >= 1 => Some(n),
        _ => {
            report.error(path, format!("expected a positive integer ({unit})"));
            None
        }
    }
}

/// A duration of at least `min`: a humantime string (`30s`, `250ms`) or a bare number of
/// `unit`, also as a string of digits so a `${VAR}` can supply it.
pub(super) fn duration(
    report: &mut Report,
    value: &Value,
    path: &str,
    unit: Unit,
    min: Duration,
) -> Option<Duration> {
    let parsed = match value {
        Value::Number(n) => n.as_u64().map(|n| unit.of(n)),
        Value::String(s) => duration::parse(s, unit).ok(),
        _ => None,
    };
    match parsed {
        Some(d) if d >= min => Some(d),
        Some(_) => {
            report.error(path, format!("must be at least {}", duration::display(min)));
            None
        }
        None => {
            report.error(path, duration::expected(unit));
            None
        }
    }
}

/// An integer in `min..=max`, also as a string so a `${VAR}` can supply it.
pub(super) fn integer(
    report: &mut Report,
    value: &Value,
    path: &str,
    min: i64,
    max: i64,
) -> Option<i64> {
    let n = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Some(n),
        _ => {
            report.error(path, format!("expected an integer from {min} to {max}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_need_a_close_name() {
        let known = ["display_name", "provider", "model_name", "timeout"];
        assert_eq!(suggest("timout", &known), Some("timeout"));
        assert_eq!(suggest("model", &known), None);
        assert_eq!(suggest("foo", &known), None);
    }
}
