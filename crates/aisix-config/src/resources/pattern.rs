//! `allowed_models` patterns: an exact model name, or a glob where `*` matches any run of
//! characters. No other character is special.

use std::fmt;

/// One entry of an API key's `allowed_models`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelPattern {
    /// Matches this name only.
    Exact(String),
    /// Contains at least one `*`, which matches any run of characters, possibly empty.
    Glob(String),
}

impl ModelPattern {
    /// A glob when `pattern` contains `*`, else an exact name.
    pub fn new(pattern: &str) -> Self {
        if pattern.contains('*') {
            ModelPattern::Glob(pattern.to_owned())
        } else {
            ModelPattern::Exact(pattern.to_owned())
        }
    }

    /// The pattern as written in the file.
    pub fn as_str(&self) -> &str {
        match self {
            ModelPattern::Exact(s) | ModelPattern::Glob(s) => s,
        }
    }

    /// Whether `name` matches. No allocation; a glob costs at most
    /// O(pattern length × name length), linear in practice.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            ModelPattern::Exact(exact) => exact == name,
            ModelPattern::Glob(glob) => glob_matches(glob.as_bytes(), name.as_bytes()),
        }
    }
}

impl fmt::Display for ModelPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Byte-wise wildcard match with single-star backtracking. Bytes are safe here: a literal run of
/// valid UTF-8 can only match starting at a character boundary of `name`.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // After the latest `*`: where the pattern resumes, and where in `name` that `*` stops.
    let mut backtrack: Option<(usize, usize)> = None;
    while let Some(&c) = name.get(n) {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                backtrack = Some((p, n));
            }
            Some(&pc) if pc == c => {
                p += 1;
                n += 1;
            }
            _ => match backtrack {
                Some((resume, star_end)) => {
                    p = resume;
                    n = star_end + 1;
                    backtrack = Some((resume, star_end + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        ModelPattern::new(pattern).matches(name)
    }

    #[test]
    fn exact_pattern_matches_only_its_name() {
        assert_eq!(
            ModelPattern::new("gpt-4o"),
            ModelPattern::Exact("gpt-4o".into())
        );
        assert!(matches("gpt-4o", "gpt-4o"));
        assert!(!matches("gpt-4o", "gpt-4o-mini"));
        assert!(!matches("gpt-4o", "GPT-4o"));
        assert!(!matches("gpt-4o", ""));
    }

    #[test]
    fn glob_star_matches_any_suffix() {
        assert_eq!(
            ModelPattern::new("claude-*"),
            ModelPattern::Glob("claude-*".into())
        );
        assert!(matches("claude-*", "claude-3-opus"));
        assert!(matches("claude-*", "claude-"));
        assert!(!matches("claude-*", "claude"));
        assert!(!matches("claude-*", "my-claude-3"));
    }

    #[test]
    fn glob_star_matches_any_prefix_and_middle() {
        assert!(matches("*-mini", "gpt-4o-mini"));
        assert!(!matches("*-mini", "gpt-4o-mini-2"));
        assert!(matches("gpt-*-mini", "gpt-4o-mini"));
        assert!(matches("gpt-*-mini", "gpt--mini"));
        assert!(!matches("gpt-*-mini", "gpt-mini"));
    }

    #[test]
    fn glob_with_several_stars_backtracks() {
        assert!(matches("*a*b*", "xxaxxbxx"));
        assert!(matches("a*b*c", "abbbc"));
        assert!(matches("a*ab", "aaab"));
        assert!(!matches("*a*b*", "xxbxxaxx"));
        assert!(matches("**", ""));
    }

    #[test]
    fn lone_star_matches_every_name() {
        assert!(matches("*", "gpt-4o"));
        assert!(matches("*", ""));
    }

    #[test]
    fn glob_has_no_metacharacters_besides_star() {
        assert!(!matches("gpt-?o*", "gpt-4o"));
        assert!(matches("gpt-?o*", "gpt-?o"));
        assert!(!matches("[gc]*", "gpt"));
        assert!(matches("a.b*", "a.bc"));
        assert!(!matches("a.b*", "axbc"));
    }

    #[test]
    fn glob_matches_multibyte_names() {
        assert!(matches("模型-*", "模型-一"));
        assert!(matches("*é", "café"));
        assert!(!matches("*é", "cafe"));
    }
}
