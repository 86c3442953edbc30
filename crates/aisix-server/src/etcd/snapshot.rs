//! The documents in force and the changes etcd reports, checked as whole snapshots. A change
//! whose snapshot does not validate is refused (logged with its key) and kept aside: the last
//! good version of its key keeps serving, and it is tried again after every later change, so
//! a model written before its provider key is taken once the key arrives.

use std::collections::BTreeMap;

use aisix_config::{COLLECTIONS, ConfigError, Origin, Resources, document_place};

/// What etcd holds for a key: its bytes, or `None` once deleted.
pub(crate) type Change = Option<Vec<u8>>;

/// How many rounds of blaming keys a check takes before falling back to one change at a time.
const BLAME_ROUNDS: usize = 8;

/// The documents a snapshot was built from, and the changes refused so far.
#[derive(Debug, Default)]
pub(crate) struct Documents {
    prefix: String,
    applied: BTreeMap<String, Vec<u8>>,
    refused: BTreeMap<String, Change>,
}

/// What checking some changes produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The new snapshot, when anything in force changed.
    pub resources: Option<Resources>,
    /// Why each refused key was refused, key by key (each error names it).
    pub refused: Vec<ConfigError>,
}

impl Documents {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            ..Self::default()
        }
    }

    /// The documents in force.
    #[cfg(test)]
    pub(crate) fn applied(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.applied
    }

    /// Starts over from everything etcd holds (startup, or after a compaction).
    pub(crate) fn replace_all(
        &mut self,
        all: BTreeMap<String, Vec<u8>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Outcome {
        let changes = all.into_iter().map(|(k, v)| (k, Some(v))).collect();
        self.applied.clear();
        self.refused.clear();
        let mut outcome = self.apply(changes, env);
        // A full load always publishes, even an empty or unchanged set: it is the first.
        if outcome.resources.is_none() {
            outcome.resources = self.check(&self.applied, env).ok();
        }
        outcome
    }

    /// Applies the changes of one etcd revision (and retries the refused ones).
    pub(crate) fn apply(
        &mut self,
        changes: BTreeMap<String, Change>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Outcome {
        let mut pending = std::mem::take(&mut self.refused);
        for (key, change) in changes {
            if document_place(&self.prefix, &key).is_none() {
                continue;
            }
            pending.insert(key, change);
        }
        // Keys whose wanted state is already in force need no check.
        pending.retain(|key, change| self.applied.get(key) != change.as_ref());
        if pending.is_empty() {
            return Outcome {
                resources: None,
                refused: Vec::new(),
            };
        }
        let mut errors = Vec::new();
        let mut blamed: BTreeMap<String, Change> = BTreeMap::new();
        for _ in 0..BLAME_ROUNDS {
            let candidate = overlay(&self.applied, &pending);
            match self.check(&candidate, env) {
                Ok(resources) => {
                    // Every change refused: what is in force did not change.
                    let changed = !pending.is_empty();
                    self.applied = candidate;
                    self.refused = blamed;
                    return Outcome {
                        resources: changed.then_some(resources),
                        refused: errors,
                    };
                }
                Err(found) => {
                    let mut moved = false;
                    for error in found {
                        let key = match &error.origin {
                            Origin::Etcd(key) if pending.contains_key(key) => key.clone(),
                            _ => continue,
                        };
                        if let Some(change) = pending.remove(&key) {
                            blamed.insert(key, change);
                            moved = true;
                        }
                        errors.push(error);
                    }
                    if !moved {
                        break;
                    }
                }
            }
        }
        // What is left breaks documents it does not name (a provider key deleted under its
        // models): take the changes one at a time, in the order the collections depend.
        pending.append(&mut blamed);
        let mut current = self.applied.clone();
        let mut changed = false;
        let mut order: Vec<(String, Change)> = pending.into_iter().collect();
        order.sort_by_key(|(key, _)| {
            let collection = document_place(&self.prefix, key).map_or("", |(c, _)| c);
            COLLECTIONS.iter().position(|c| *c == collection)
        });
        let mut errors = Vec::new();
        let mut refused = BTreeMap::new();
        for (key, change) in order {
            let one = BTreeMap::from([(key.clone(), change.clone())]);
            let candidate = overlay(&current, &one);
            match self.check(&candidate, env) {
                Ok(_) => {
                    current = candidate;
                    changed = true;
                }
                Err(found) => {
                    errors.extend(found.into_iter().map(|error| blame(error, &key)));
                    refused.insert(key, change);
                }
            }
        }
        self.refused = refused;
        let resources = if changed {
            let resources = self.check(&current, env).ok();
            self.applied = current;
            resources
        } else {
            None
        };
        Outcome {
            resources,
            refused: errors,
        }
    }

    fn check(
        &self,
        documents: &BTreeMap<String, Vec<u8>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Resources, Vec<ConfigError>> {
        aisix_config::parse_documents(&self.prefix, documents, env).map_err(|e| e.0)
    }
}

/// `base` with `changes` written over it.
fn overlay(
    base: &BTreeMap<String, Vec<u8>>,
    changes: &BTreeMap<String, Change>,
) -> BTreeMap<String, Vec<u8>> {
    let mut out = base.clone();
    for (key, change) in changes {
        match change {
            Some(bytes) => {
                out.insert(key.clone(), bytes.clone());
            }
            None => {
                out.remove(key);
            }
        }
    }
    out
}

/// An error caused by the change at `key`, though it may be reported at another document.
fn blame(error: ConfigError, key: &str) -> ConfigError {
    match &error.origin {
        Origin::Etcd(at) if at == key => error,
        Origin::Etcd(at) => ConfigError::new(
            error.path.clone(),
            format!(
                "{} (in etcd key {at}, broken by this change)",
                error.message
            ),
            Origin::Etcd(key.to_owned()),
        ),
        _ => ConfigError::new(error.path, error.message, Origin::Etcd(key.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PK: &str = r#"{"display_name":"oai","provider":"openai","api_key":"sk-test-123456789"}"#;
    const MODEL: &str = r#"{"display_name":"gpt","provider":"openai","provider_key":"oai","model_name":"gpt-4o-mini"}"#;

    fn env(_: &str) -> Option<String> {
        None
    }

    fn put(key: &str, value: &str) -> BTreeMap<String, Change> {
        BTreeMap::from([(key.to_owned(), Some(value.as_bytes().to_vec()))])
    }

    fn loaded(documents: &mut Documents, entries: &[(&str, &str)]) {
        let all = entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect();
        let outcome = documents.replace_all(all, &env);
        assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
        assert!(outcome.resources.is_some());
    }

    #[test]
    fn a_bad_document_is_refused_with_its_key_and_the_good_one_keeps_serving() {
        let mut documents = Documents::new("/aisix");
        loaded(
            &mut documents,
            &[("/aisix/provider_keys/p", PK), ("/aisix/models/m", MODEL)],
        );
        let outcome = documents.apply(put("/aisix/models/m", r#"{"display_name":"gpt"}"#), &env);
        assert!(outcome.resources.is_none());
        assert!(
            outcome
                .refused
                .iter()
                .all(|e| e.origin == Origin::Etcd("/aisix/models/m".into())),
            "{:?}",
            outcome.refused
        );
        assert!(!outcome.refused.is_empty());
        assert_eq!(
            documents.applied()["/aisix/models/m"],
            MODEL.as_bytes().to_vec()
        );
    }

    #[test]
    fn deleting_a_provider_key_its_models_use_is_refused_at_the_deleted_key() {
        let mut documents = Documents::new("/aisix");
        loaded(
            &mut documents,
            &[("/aisix/provider_keys/p", PK), ("/aisix/models/m", MODEL)],
        );
        let outcome = documents.apply(
            BTreeMap::from([("/aisix/provider_keys/p".to_owned(), None)]),
            &env,
        );
        assert!(outcome.resources.is_none());
        assert_eq!(
            outcome.refused[0].origin,
            Origin::Etcd("/aisix/provider_keys/p".into())
        );
        assert!(outcome.refused[0].to_string().contains("/aisix/models/m"));
    }

    #[test]
    fn a_refused_model_is_taken_once_its_provider_key_arrives() {
        let mut documents = Documents::new("/aisix");
        loaded(&mut documents, &[]);
        let outcome = documents.apply(put("/aisix/models/m", MODEL), &env);
        assert!(outcome.resources.is_none());
        let outcome = documents.apply(put("/aisix/provider_keys/p", PK), &env);
        let resources = outcome.resources.unwrap();
        assert_eq!(resources.models.len(), 1);
        assert!(outcome.refused.is_empty());
    }

    #[test]
    fn a_good_change_beside_a_bad_one_is_applied() {
        let mut documents = Documents::new("/aisix");
        loaded(&mut documents, &[("/aisix/provider_keys/p", PK)]);
        let mut changes = put("/aisix/models/m", MODEL);
        changes.insert("/aisix/models/bad".into(), Some(b"[1,2]".to_vec()));
        let outcome = documents.apply(changes, &env);
        assert_eq!(outcome.resources.unwrap().models.len(), 1);
        assert_eq!(outcome.refused.len(), 1);
        assert_eq!(
            outcome.refused[0].origin,
            Origin::Etcd("/aisix/models/bad".into())
        );
    }

    #[test]
    fn a_full_load_serves_what_validates_and_refuses_the_rest() {
        let mut documents = Documents::new("/aisix");
        let all = BTreeMap::from([
            ("/aisix/provider_keys/p".to_owned(), PK.as_bytes().to_vec()),
            ("/aisix/models/m".to_owned(), MODEL.as_bytes().to_vec()),
            ("/aisix/models/bad".to_owned(), b"{".to_vec()),
        ]);
        let outcome = documents.replace_all(all, &env);
        assert_eq!(outcome.resources.unwrap().models.len(), 1);
        assert_eq!(outcome.refused.len(), 1);
    }

    #[test]
    fn keys_outside_the_layout_are_ignored() {
        let mut documents = Documents::new("/aisix");
        loaded(&mut documents, &[]);
        let outcome = documents.apply(put("/aisix/guardrails/g", "nonsense"), &env);
        assert!(outcome.resources.is_none() && outcome.refused.is_empty());
    }
}
