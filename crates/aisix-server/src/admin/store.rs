//! Writes through the admin API: each change is checked with every other document in etcd by
//! the resources loader, then written in a transaction that holds only if the entry is still at
//! the revision the caller read (or, for a create, absent). Every replica applies it through
//! its watch, this one included.

use std::collections::BTreeMap;

use aisix_config::{EtcdConfig, document_key};
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, Txn, TxnOp};

use super::error::AdminError;

/// What a write expects of the entry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect {
    Absent,
    /// At this revision (its `mod_revision`).
    Revision(i64),
}

/// One stored document with its revision.
#[derive(Debug)]
pub(crate) struct Stored {
    pub id: String,
    pub document: serde_json::Value,
    pub revision: i64,
}

/// The etcd the resources live in.
pub(crate) struct Store {
    config: EtcdConfig,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl Store {
    pub(crate) fn new(config: EtcdConfig) -> Self {
        Self {
            config,
            client: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn key(&self, collection: &str, id: &str) -> String {
        document_key(&self.config.prefix, collection, id)
    }

    /// A connected client, made on first use and kept while it works.
    async fn client(&self) -> Result<Client, AdminError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = crate::etcd::connect::connect(&self.config)
            .await
            .map_err(AdminError::Unavailable)?;
        *slot = Some(client.clone());
        Ok(client)
    }

    async fn forget_client(&self) {
        *self.client.lock().await = None;
    }

    /// Every document of `collection`, in key order.
    pub(crate) async fn list(&self, collection: &str) -> Result<Vec<Stored>, AdminError> {
        let mut client = self.client().await?;
        let prefix = format!("{}/{collection}/", self.config.prefix);
        let response = match tokio::time::timeout(
            self.config.dial_timeout,
            client.get(
                prefix.clone(),
                Some(etcd_client::GetOptions::new().with_prefix()),
            ),
        )
        .await
        {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                self.forget_client().await;
                return Err(AdminError::Unavailable(e.to_string()));
            }
            Err(_) => return Err(AdminError::Unavailable("timed out".to_owned())),
        };
        Ok(response
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = kv.key_str().ok()?;
                let id = key.strip_prefix(&prefix)?.to_owned();
                let document =
                    serde_json::from_slice(kv.value()).unwrap_or(serde_json::Value::Null);
                Some(Stored {
                    id,
                    document,
                    revision: kv.mod_revision(),
                })
            })
            .collect())
    }

    /// The document at `key` and its revision, if any.
    pub(crate) async fn get(
        &self,
        key: &str,
    ) -> Result<Option<(serde_json::Value, i64)>, AdminError> {
        let mut client = self.client().await?;
        let response = client
            .get(key, None)
            .await
            .map_err(|e| AdminError::Unavailable(e.to_string()))?;
        Ok(response.kvs().first().map(|kv| {
            (
                serde_json::from_slice(kv.value()).unwrap_or(serde_json::Value::Null),
                kv.mod_revision(),
            )
        }))
    }

    /// Writes `document` at `key` (or deletes it when `None`) if the entry is as `expect`
    /// says and every document together still validates. Returns the revision written.
    pub(crate) async fn write(
        &self,
        key: &str,
        document: Option<Vec<u8>>,
        expect: Expect,
    ) -> Result<i64, AdminError> {
        let mut client = self.client().await?;
        let (mut all, _) = crate::etcd::transfer::read_all(&mut client, &self.config)
            .await
            .map_err(AdminError::Unavailable)?;
        match (expect, all.contains_key(key)) {
            (Expect::Absent, true) => {
                return Err(AdminError::Conflict(format!("{key} exists already")));
            }
            (Expect::Revision(_), false) => return Err(AdminError::NotFound(key.to_owned())),
            _ => {}
        }
        let before = errors_of(&self.config.prefix, &all);
        match &document {
            Some(bytes) => {
                all.insert(key.to_owned(), bytes.clone());
            }
            None => {
                all.remove(key);
            }
        }
        // Only what this change breaks refuses it: a document refused earlier is the watch's
        // business, not a reason to block every other write.
        let new: Vec<String> = errors_of(&self.config.prefix, &all)
            .into_iter()
            .filter(|error| !before.contains(error))
            .collect();
        if !new.is_empty() {
            return Err(AdminError::Invalid(new));
        }
        let compare = match expect {
            Expect::Absent => Compare::create_revision(key, CompareOp::Equal, 0),
            Expect::Revision(revision) => Compare::mod_revision(key, CompareOp::Equal, revision),
        };
        let op = match document {
            Some(bytes) => TxnOp::put(key, bytes, None),
            None => TxnOp::delete(key, None::<DeleteOptions>),
        };
        let response = client
            .txn(Txn::new().when([compare]).and_then([op]))
            .await
            .map_err(|e| AdminError::Unavailable(e.to_string()))?;
        if !response.succeeded() {
            return Err(AdminError::Conflict(match expect {
                Expect::Absent => format!("{key} exists already"),
                Expect::Revision(revision) => {
                    format!("{key} changed since revision {revision}; read it again and retry")
                }
            }));
        }
        Ok(response.header().map_or(0, |h| h.revision()))
    }
}

/// What the watch would refuse in these documents, each error rendered once.
fn errors_of(prefix: &str, all: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    match aisix_config::parse_documents(prefix, all, &|name| std::env::var(name).ok()) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}
