//! Reading a rendered `/metrics` page back, for the integration tests.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use aisix_obs::metrics::Metrics;

/// A label set, sorted by label name.
pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// Runs `f` with `metrics` as this thread's recorder.
pub fn local<R>(metrics: &Metrics, f: impl FnOnce() -> R) -> R {
    ::metrics::with_local_recorder(metrics.recorder(), f)
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Every sample line of a page.
pub fn samples(page: &str) -> Vec<Sample> {
    page.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = line[..name_end].to_owned();
    let mut labels = Labels::new();
    let mut rest = &line[name_end..];
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            if c == '}' {
                end = Some(i);
                break;
            }
            if c == ',' {
                continue;
            }
            let mut key = String::from(c);
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "in {line:?}");
            let mut value = String::new();
            while let Some((_, c)) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(other) => value.push(other),
                        None => panic!("dangling escape in {line:?}"),
                    },
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
        }
        let end = end.unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
        rest = &after[end + 1..];
    }
    let value = rest
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bad value in {line:?}"));
    Sample {
        name,
        labels,
        value,
    }
}

/// The value of `name` with exactly `labels`, if the page has it.
pub fn value(page: &str, name: &str, labels: &Labels) -> Option<f64> {
    let mut found = samples(page)
        .into_iter()
        .filter(|s| s.name == name && &s.labels == labels);
    let first = found.next().map(|s| s.value);
    assert!(found.next().is_none(), "{name}{labels:?} appears twice");
    first
}

/// Every series of a family with its value: a counter's or gauge's value, a histogram's count.
pub fn series(page: &str, family: &str) -> BTreeMap<Labels, f64> {
    let count_name = format!("{family}_count");
    let mut out = BTreeMap::new();
    for sample in samples(page) {
        if sample.name == family || sample.name == count_name {
            let previous = out.insert(sample.labels.clone(), sample.value);
            assert!(
                previous.is_none(),
                "{family}{:?} appears twice",
                sample.labels
            );
        }
    }
    out
}

/// The label sets of a family's series.
pub fn label_sets(page: &str, family: &str) -> BTreeSet<Labels> {
    series(page, family).into_keys().collect()
}

/// The page's lines, sorted, blank lines dropped: two pages with the same content compare
/// equal whatever order their families came out in.
pub fn sorted_lines(page: &str) -> Vec<String> {
    let mut lines: Vec<String> = page
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}
