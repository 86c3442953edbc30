//! `${VAR}` interpolation: every string value in the document is filled from the environment
//! before anything is typed. Keys are left alone, substituted text is not scanned again, and
//! errors name the variable, never a value.

use serde_yaml::Value;

use super::reader::{Report, field_path, index_path};

/// Replaces each `${VAR}` in every string value under `value`; a value that cannot be filled
/// is reported and marked poisoned so later checks leave it alone.
pub(super) fn interpolate(
    value: &mut Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    report: &mut Report,
) {
    match value {
        Value::String(s) => match fill(s, env) {
            Ok(None) => {}
            Ok(Some(filled)) => *s = filled,
            Err(problems) => {
                for problem in problems {
                    report.error(path, problem);
                }
                report.poison(path.to_owned());
            }
        },
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, &index_path(path, i), env, report);
            }
        }
        Value::Mapping(mapping) => {
            for (key, item) in mapping.iter_mut() {
                interpolate(item, &field_path(path, &key_name(key)), env, report);
            }
        }
        Value::Tagged(tagged) => interpolate(&mut tagged.value, path, env, report),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A mapping key as a path segment; non-string keys are refused later by the reader.
fn key_name(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => "?".to_owned(),
    }
}

/// `Ok(None)` when `s` has no `${`; otherwise the filled string, or every problem in it.
fn fill(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, Vec<String>> {
    if !s.contains("${") {
        return Ok(None);
    }
    let mut out = String::with_capacity(s.len());
    let mut problems = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            problems.push("unterminated \"${\" (expected ${NAME})".to_owned());
            break;
        };
        let name = &after[..end];
        if !is_var_name(name) {
            // The text between the braces is not echoed: it may be a pasted secret.
            problems.push(
                "\"${...}\" must name an environment variable ([A-Za-z_][A-Za-z0-9_]*)".to_owned(),
            );
        } else {
            match env(name) {
                Some(value) => out.push_str(&value),
                None => problems.push(format!("environment variable {name} is not set")),
            }
        }
        rest = &after[end + 1..];
    }
    if problems.is_empty() {
        out.push_str(rest);
        Ok(Some(out))
    } else {
        Err(problems)
    }
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("example.com".to_owned()),
            "PORT" => Some("8080".to_owned()),
            "EMPTY" => Some(String::new()),
            "NESTED" => Some("${HOST}".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn string_without_placeholder_is_untouched() {
        assert_eq!(fill("plain $ and $HOST and {HOST}", &env), Ok(None));
    }

    #[test]
    fn placeholders_are_replaced_anywhere_in_the_string() {
        assert_eq!(
            fill("https://${HOST}:${PORT}/v1", &env),
            Ok(Some("https://example.com:8080/v1".to_owned()))
        );
        assert_eq!(fill("${EMPTY}", &env), Ok(Some(String::new())));
        assert_eq!(fill("$${PORT}$", &env), Ok(Some("$8080$".to_owned())));
    }

    #[test]
    fn substituted_text_is_not_scanned_again() {
        assert_eq!(fill("${NESTED}", &env), Ok(Some("${HOST}".to_owned())));
    }

    #[test]
    fn every_missing_variable_is_named() {
        assert_eq!(
            fill("${A}-${HOST}-${B}", &env),
            Err(vec![
                "environment variable A is not set".to_owned(),
                "environment variable B is not set".to_owned(),
            ])
        );
    }

    #[test]
    fn unterminated_placeholder_is_an_error() {
        let problems = fill("abc ${HOST", &env).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("unterminated"), "{problems:?}");
    }

    #[test]
    fn invalid_variable_names_are_errors_without_echo() {
        for bad in ["${}", "${1ABC}", "${A-B}", "${sk-secret value}"] {
            let problems = fill(bad, &env).unwrap_err();
            assert_eq!(problems.len(), 1, "{bad}");
            assert!(!problems[0].contains("secret"), "{problems:?}");
        }
    }
}
