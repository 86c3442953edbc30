//! The configuration tables in docs/configuration.md and README.md against the code: every
//! bootstrap key has a row in both (and no row names a key that does not exist), the environment
//! column is the key's variable, and a default written as a literal is the real default: setting
//! the key to it changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use aisix_config::{bootstrap_keys, env_var_for, load_bootstrap};

/// A documented row: default cell and environment cell, by key.
type Rows = BTreeMap<String, (String, String)>;

fn rows(file: &str) -> Rows {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut rows = Rows::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `key` | default | `AISIX_…` | meaning |
        if cells.len() < 5 || !cells[3].starts_with("`AISIX_") {
            continue;
        }
        let key = cells[1].trim_matches('`').to_owned();
        let previous = rows.insert(
            key.clone(),
            (cells[2].to_owned(), cells[3].trim_matches('`').to_owned()),
        );
        assert!(previous.is_none(), "{file} documents {key} twice");
    }
    rows
}

/// The other settings a key only makes sense with: the `ratelimit.redis.*` keys are refused
/// unless the Redis backend is on.
fn context_of(key: &str) -> Vec<(String, String)> {
    if key.starts_with("ratelimit.redis.") {
        vec![
            ("AISIX_RATELIMIT__BACKEND".to_owned(), "redis".to_owned()),
            (
                "AISIX_RATELIMIT__REDIS__URL".to_owned(),
                "redis://127.0.0.1:6379".to_owned(),
            ),
        ]
    } else {
        Vec::new()
    }
}

fn check(file: &str) {
    let documented = rows(file);
    let keys = bootstrap_keys();
    for key in &keys {
        let (default, env) = documented
            .get(*key)
            .unwrap_or_else(|| panic!("{file} does not document the key {key}"));
        assert_eq!(
            env,
            &env_var_for(key),
            "{file}: environment variable of {key}"
        );
        // A default written as `literal` must be the real one.
        if let Some(literal) = default.split('`').nth(1) {
            let base = context_of(key);
            let defaults = load_bootstrap(None, base.clone()).unwrap();
            let mut with_key = base;
            with_key.push((env.clone(), literal.to_owned()));
            let set = load_bootstrap(None, with_key)
                .unwrap_or_else(|e| panic!("{file}: {key} = {literal} is not valid: {e}"));
            assert_eq!(
                set, defaults,
                "{file}: the default of {key} is not {literal}"
            );
        }
    }
    for key in documented.keys() {
        assert!(
            keys.contains(&key.as_str()),
            "{file} documents {key}, which is not a key"
        );
    }
}

#[test]
fn the_configuration_reference_documents_every_key_with_its_real_default() {
    check("docs/configuration.md");
}

#[test]
fn the_readme_table_documents_every_key_with_its_real_default() {
    check("README.md");
}
