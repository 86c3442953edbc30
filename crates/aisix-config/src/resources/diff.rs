//! What a reload changes, entry by entry. Per-entry state that must outlive a reload (rate-limit
//! counters, cooldowns) is kept for the entries named `unchanged` and rebuilt for the rest.

use std::fmt;

use super::types::{Model, Resources};

/// The entries of each collection, by `display_name`, sorted into four lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourcesDiff {
    pub provider_keys: CollectionDiff,
    pub models: CollectionDiff,
    pub api_keys: CollectionDiff,
}

/// One collection's entries, by `display_name`, each in file order of the file it is in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionDiff {
    /// In the new file only.
    pub added: Vec<String>,
    /// In both, with some value different (for a model: its provider key's too).
    pub changed: Vec<String>,
    /// In the old file only.
    pub removed: Vec<String>,
    /// In both, equal.
    pub unchanged: Vec<String>,
}

impl ResourcesDiff {
    /// Whether the two files define the same entries.
    pub fn is_empty(&self) -> bool {
        [&self.provider_keys, &self.models, &self.api_keys]
            .iter()
            .all(|c| c.added.is_empty() && c.changed.is_empty() && c.removed.is_empty())
    }
}

impl fmt::Display for CollectionDiff {
    /// `+1 ~0 -2`: added, changed, removed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "+{} ~{} -{}",
            self.added.len(),
            self.changed.len(),
            self.removed.len()
        )
    }
}

impl Resources {
    /// What changes when `self` is replaced by `new`.
    pub fn diff(&self, new: &Resources) -> ResourcesDiff {
        let provider_keys = diff_by_name(
            &self.provider_keys,
            &new.provider_keys,
            |k| &k.display_name,
            |old, new| old == new,
        );
        let models = diff_by_name(
            &self.models,
            &new.models,
            |m| &m.display_name,
            |old, new| same_model(old, new) && !provider_keys.changed.contains(&new.provider_key),
        );
        let api_keys = diff_by_name(
            &self.api_keys,
            &new.api_keys,
            |k| &k.display_name,
            |old, new| old == new,
        );
        ResourcesDiff {
            provider_keys,
            models,
            api_keys,
        }
    }
}

/// Equal but for where the provider key sits in its list, which says nothing about the model.
/// Written as a whole-struct comparison so a field added to `Model` is compared too.
fn same_model(old: &Model, new: &Model) -> bool {
    let old = Model {
        provider_key_index: new.provider_key_index,
        ..old.clone()
    };
    old == *new
}

fn diff_by_name<T>(
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &String,
    same: impl Fn(&T, &T) -> bool,
) -> CollectionDiff {
    let mut diff = CollectionDiff::default();
    for entry in new {
        match old.iter().find(|o| name(o) == name(entry)) {
            None => diff.added.push(name(entry).clone()),
            Some(previous) if same(previous, entry) => diff.unchanged.push(name(entry).clone()),
            Some(_) => diff.changed.push(name(entry).clone()),
        }
    }
    for entry in old {
        if !new.iter().any(|n| name(n) == name(entry)) {
            diff.removed.push(name(entry).clone());
        }
    }
    diff
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::resources::parse_resources;

    fn parse(yaml: &str) -> crate::Resources {
        parse_resources(yaml, Path::new("r.yaml"), &|_| None).unwrap()
    }

    const BASE: &str = r#"_format_version: "1"
provider_keys:
  - {display_name: a, provider: openai, api_base: "http://a/v1"}
  - {display_name: b, provider: openai, api_base: "http://b/v1"}
models:
  - {display_name: m1, provider: openai, model_name: x, provider_key: a}
  - {display_name: m2, provider: openai, model_name: y, provider_key: b}
api_keys:
  - {display_name: k1, key_hash: "fdee306ee20284546953efcaf060f0b555c52d4941bfa7c55d95b87acba3d26b", allowed_models: ["*"]}
"#;

    #[test]
    fn an_identical_file_changes_nothing() {
        let diff = parse(BASE).diff(&parse(BASE));
        assert!(diff.is_empty());
        assert_eq!(diff.models.unchanged, ["m1", "m2"]);
    }

    #[test]
    fn a_changed_provider_key_changes_its_models_and_only_them() {
        let new = BASE.replace("http://b/v1", "http://b2/v1");
        let diff = parse(BASE).diff(&parse(&new));
        assert_eq!(diff.provider_keys.changed, ["b"]);
        assert_eq!(diff.models.changed, ["m2"]);
        assert_eq!(diff.models.unchanged, ["m1"]);
        assert_eq!(diff.api_keys.unchanged, ["k1"]);
    }

    #[test]
    fn reordering_provider_keys_changes_no_model() {
        let new = BASE.replace(
            "  - {display_name: a, provider: openai, api_base: \"http://a/v1\"}\n  - {display_name: b, provider: openai, api_base: \"http://b/v1\"}\n",
            "  - {display_name: b, provider: openai, api_base: \"http://b/v1\"}\n  - {display_name: a, provider: openai, api_base: \"http://a/v1\"}\n",
        );
        let diff = parse(BASE).diff(&parse(&new));
        assert!(diff.is_empty(), "{diff:?}");
    }

    #[test]
    fn added_and_removed_entries_are_named() {
        let new = BASE
            .replace("m2", "m3")
            .replace("allowed_models: [\"*\"]", "allowed_models: [\"m1\"]");
        let diff = parse(BASE).diff(&parse(&new));
        assert_eq!(diff.models.added, ["m3"]);
        assert_eq!(diff.models.removed, ["m2"]);
        assert_eq!(diff.api_keys.changed, ["k1"]);
        assert_eq!(diff.models.to_string(), "+1 ~0 -1");
    }
}
