//! Resources kept as one JSON document per entry under AISIX's etcd key layout
//! (`{prefix}/provider_keys/{id}`, `{prefix}/models/{id}`, `{prefix}/api_keys/{id}`), checked
//! as one whole snapshot by the same walk as the resources file. Errors name the key.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::{Mapping, Value};

use super::load::parse_resources_value;
use super::types::Resources;
use crate::error::{ConfigError, ConfigErrors, Origin};

/// The collections this gateway reads, in the order the file lists them. Keys under other
/// collections (AISIX's guardrails, MCP servers, …) are left alone, so one etcd can serve both.
pub const COLLECTIONS: [&str; 3] = ["provider_keys", "models", "api_keys"];

/// Where a key sits in the layout: its collection and id, or `None` for a key outside it.
pub fn document_place<'k>(prefix: &str, key: &'k str) -> Option<(&'static str, &'k str)> {
    let rest = key
        .strip_prefix(prefix.trim_end_matches('/'))?
        .strip_prefix('/')?;
    let (collection, id) = rest.split_once('/')?;
    let collection = COLLECTIONS.into_iter().find(|c| *c == collection)?;
    (!id.is_empty()).then_some((collection, id))
}

/// The key a document of `collection` with `id` lives at.
pub fn document_key(prefix: &str, collection: &str, id: &str) -> String {
    format!("{}/{collection}/{id}", prefix.trim_end_matches('/'))
}

/// Validates the documents (full key → JSON bytes) as one snapshot. Keys outside the layout are
/// skipped. Each error carries [`Origin::Etcd`] with the key at fault when one is.
pub fn parse_documents(
    prefix: &str,
    documents: &BTreeMap<String, Vec<u8>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resources, ConfigErrors> {
    let mut errors = Vec::new();
    let mut lists: [(Vec<Value>, Vec<&str>); 3] = Default::default();
    for (key, bytes) in documents {
        let Some((collection, _)) = document_place(prefix, key) else {
            continue;
        };
        let at = COLLECTIONS
            .iter()
            .position(|c| *c == collection)
            .unwrap_or(0);
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(json @ serde_json::Value::Object(_)) => match serde_yaml::to_value(json) {
                Ok(value) => {
                    lists[at].0.push(value);
                    lists[at].1.push(key);
                }
                Err(e) => errors.push(at_key(key, "", format!("cannot read: {e}"))),
            },
            Ok(_) => errors.push(at_key(key, "", "expected a JSON object")),
            Err(e) => errors.push(at_key(key, "", format!("not valid JSON: {e}"))),
        }
    }
    let mut document = Mapping::new();
    document.insert("_format_version".into(), "1".into());
    let mut keys: [Vec<&str>; 3] = Default::default();
    for (i, (values, names)) in lists.into_iter().enumerate() {
        document.insert(COLLECTIONS[i].into(), Value::Sequence(values));
        keys[i] = names;
    }
    let checked = parse_resources_value(Value::Mapping(document), Path::new("etcd"), env);
    match checked {
        Ok(resources) if errors.is_empty() => Ok(resources),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(found) => {
            errors.extend(found.0.into_iter().map(|error| to_key(error, &keys)));
            Err(ConfigErrors(errors))
        }
    }
}

fn at_key(key: &str, path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(path, message, Origin::Etcd(key.to_owned()))
}

/// Turns `models[3].provider_key` into `provider_key` in the key of the fourth model.
fn to_key(error: ConfigError, keys: &[Vec<&str>; 3]) -> ConfigError {
    for (i, collection) in COLLECTIONS.iter().enumerate() {
        let Some(rest) = error
            .path
            .strip_prefix(collection)
            .and_then(|r| r.strip_prefix('['))
        else {
            continue;
        };
        let Some((index, rest)) = rest.split_once(']') else {
            continue;
        };
        let Some(key) = index.parse::<usize>().ok().and_then(|n| keys[i].get(n)) else {
            continue;
        };
        let rest = rest.strip_prefix('.').unwrap_or(rest);
        // A duplicate names the first entry by index too; name it by key.
        let message = rename_indexes(&error.message, keys);
        return at_key(key, rest, message);
    }
    ConfigError::new(error.path, error.message, Origin::Unknown)
}

/// Replaces each `collection[n]` in `message` with the key of that entry.
fn rename_indexes(message: &str, keys: &[Vec<&str>; 3]) -> String {
    let mut out = message.to_owned();
    for (i, collection) in COLLECTIONS.iter().enumerate() {
        for (n, key) in keys[i].iter().enumerate().rev() {
            out = out.replace(&format!("{collection}[{n}]"), key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(_: &str) -> Option<String> {
        None
    }

    fn docs(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    const PK: &str = r#"{"display_name":"oai","provider":"openai","api_key":"sk-test-123456789"}"#;
    const MODEL: &str = r#"{"display_name":"gpt","provider":"openai","provider_key":"oai","model_name":"gpt-4o-mini"}"#;
    const KEY: &str = r#"{"display_name":"team-a","key_hash":"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8","allowed_models":["*"]}"#;

    #[test]
    fn documents_under_the_layout_load_as_one_snapshot() {
        let loaded = parse_documents(
            "/aisix",
            &docs(&[
                ("/aisix/provider_keys/p1", PK),
                ("/aisix/models/m1", MODEL),
                ("/aisix/api_keys/k1", KEY),
                ("/aisix/guardrails/g1", "{}"),
                ("/aisixother/models/m2", "not json"),
            ]),
            &env,
        )
        .unwrap();
        assert_eq!(loaded.models.len(), 1);
        assert_eq!(loaded.api_keys[0].display_name, "team-a");
    }

    #[test]
    fn a_bad_reference_is_reported_at_the_key_of_its_document() {
        let errors = parse_documents(
            "/aisix",
            &docs(&[
                ("/aisix/provider_keys/p1", PK),
                (
                    "/aisix/models/m9",
                    r#"{"display_name":"x","provider":"openai","provider_key":"nope","model_name":"m"}"#,
                ),
            ]),
            &env,
        )
        .unwrap_err();
        assert_eq!(errors.0.len(), 1, "{errors:?}");
        assert_eq!(errors.0[0].origin, Origin::Etcd("/aisix/models/m9".into()));
        assert_eq!(errors.0[0].path, "provider_key");
        assert!(
            errors.0[0]
                .to_string()
                .contains("in etcd key /aisix/models/m9")
        );
    }

    #[test]
    fn a_document_that_is_not_json_is_reported_at_its_key() {
        let errors = parse_documents("/aisix", &docs(&[("/aisix/models/bad", "{not json")]), &env)
            .unwrap_err();
        assert_eq!(errors.0[0].origin, Origin::Etcd("/aisix/models/bad".into()));
    }

    #[test]
    fn a_duplicate_name_names_both_keys() {
        let errors = parse_documents(
            "/aisix",
            &docs(&[
                ("/aisix/provider_keys/p1", PK),
                ("/aisix/models/a", MODEL),
                ("/aisix/models/b", MODEL),
            ]),
            &env,
        )
        .unwrap_err();
        assert_eq!(errors.0[0].origin, Origin::Etcd("/aisix/models/b".into()));
        assert!(
            errors.0[0].message.contains("/aisix/models/a"),
            "{errors:?}"
        );
    }

    #[test]
    fn keys_outside_the_layout_have_no_place() {
        assert_eq!(document_place("/aisix", "/aisix/models/"), None);
        assert_eq!(document_place("/aisix", "/aisixmodels/x"), None);
        assert_eq!(
            document_place("/aisix/", "/aisix/api_keys/k"),
            Some(("api_keys", "k"))
        );
        assert_eq!(document_key("/aisix", "models", "m"), "/aisix/models/m");
    }
}
