//! `aisix export` and `aisix import`: the etcd documents as a resources file, and a resources
//! file into etcd. An import is checked first (the file alone, then together with what etcd
//! already holds) and written in one transaction; `key_env` becomes `key_hash`, so no client
//! key's plaintext ever reaches etcd. `${VAR}` stays as written: each replica fills it in.

use std::collections::BTreeMap;
use std::path::Path;

use aisix_config::{COLLECTIONS, EtcdConfig, document_key, document_place};
use etcd_client::{Client, DeleteOptions, GetOptions, Txn, TxnOp};
use serde_yaml::{Mapping, Value};

/// The resources under the prefix, as a resources file.
pub(crate) async fn export(config: &EtcdConfig) -> Result<String, String> {
    let mut client = super::connect::connect(config).await?;
    let documents = read_all(&mut client, config).await?.0;
    let mut collections: [Vec<Value>; 3] = Default::default();
    for (key, bytes) in &documents {
        let Some((collection, _)) = document_place(&config.prefix, key) else {
            continue;
        };
        let at = COLLECTIONS
            .iter()
            .position(|c| *c == collection)
            .unwrap_or(0);
        let json: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("etcd key {key} is not valid JSON: {e}"))?;
        let value = serde_yaml::to_value(json).map_err(|e| format!("etcd key {key}: {e}"))?;
        collections[at].push(value);
    }
    let mut file = Mapping::new();
    file.insert("_format_version".into(), "1".into());
    for (i, entries) in collections.into_iter().enumerate() {
        file.insert(COLLECTIONS[i].into(), Value::Sequence(entries));
    }
    serde_yaml::to_string(&Value::Mapping(file)).map_err(|e| e.to_string())
}

/// What an import wrote.
#[derive(Debug)]
pub(crate) struct Imported {
    pub written: usize,
    pub deleted: usize,
    pub revision: i64,
}

/// Writes the resources file at `path` into etcd. With `replace`, documents of the three
/// collections that the file does not hold are deleted in the same transaction.
pub(crate) async fn import(
    config: &EtcdConfig,
    path: &Path,
    replace: bool,
) -> Result<Imported, Vec<String>> {
    let env = |name: &str| std::env::var(name).ok();
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("cannot read {}: {e}", path.display())])?;
    aisix_config::parse_resources(&text, path, &env)
        .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let documents = documents_of(&text, &config.prefix, &env).map_err(|e| vec![e])?;

    let mut client = super::connect::connect(config).await.map_err(|e| vec![e])?;
    let (existing, _) = read_all(&mut client, config).await.map_err(|e| vec![e])?;
    let mut after: BTreeMap<String, Vec<u8>> = if replace {
        existing
            .iter()
            .filter(|(key, _)| document_place(&config.prefix, key).is_none())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        existing.clone()
    };
    after.extend(documents.iter().map(|(k, v)| (k.clone(), v.clone())));
    aisix_config::parse_documents(&config.prefix, &after, &env)
        .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;

    let mut ops: Vec<TxnOp> = documents
        .iter()
        .map(|(key, value)| TxnOp::put(key.as_str(), value.clone(), None))
        .collect();
    let mut deleted = 0;
    if replace {
        for key in existing.keys() {
            if document_place(&config.prefix, key).is_some() && !documents.contains_key(key) {
                ops.push(TxnOp::delete(key.as_str(), None::<DeleteOptions>));
                deleted += 1;
            }
        }
    }
    let written = documents.len();
    let response = client
        .txn(Txn::new().and_then(ops))
        .await
        .map_err(|e| vec![format!("the import transaction failed: {e}")])?;
    Ok(Imported {
        written,
        deleted,
        revision: response.header().map_or(0, |h| h.revision()),
    })
}

/// Every key under the prefix and its bytes, and the revision read.
pub(crate) async fn read_all(
    client: &mut Client,
    config: &EtcdConfig,
) -> Result<(BTreeMap<String, Vec<u8>>, i64), String> {
    let response = tokio::time::timeout(
        config.dial_timeout,
        client.get(
            format!("{}/", config.prefix),
            Some(GetOptions::new().with_prefix()),
        ),
    )
    .await
    .map_err(|_| "timed out reading from etcd".to_owned())?
    .map_err(|e| format!("cannot read from etcd: {e}"))?;
    let revision = response.header().map_or(0, |h| h.revision());
    let all = response
        .kvs()
        .iter()
        .filter_map(|kv| Some((kv.key_str().ok()?.to_owned(), kv.value().to_vec())))
        .collect();
    Ok((all, revision))
}

/// The file's entries as etcd documents (key → JSON), each named by its display name.
fn documents_of(
    text: &str,
    prefix: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut file: Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    file.apply_merge().map_err(|e| e.to_string())?;
    let mut documents = BTreeMap::new();
    for collection in COLLECTIONS {
        let Some(Value::Sequence(entries)) = file.get(collection) else {
            continue;
        };
        for entry in entries {
            let mut entry = entry.clone();
            let name = entry
                .get("display_name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("an entry of {collection} has no display_name"))?
                .to_owned();
            if collection == "api_keys" {
                hash_key_env(&mut entry, env)?;
            }
            let json = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
            documents.insert(document_key(prefix, collection, &document_id(&name)), json);
        }
    }
    Ok(documents)
}

/// A display name as the last segment of a key: `/` and `%` percent-encoded.
pub(crate) fn document_id(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

/// Replaces `key_env: VAR` with `key_hash: <SHA-256 of $VAR>`.
fn hash_key_env(entry: &mut Value, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    let Value::Mapping(fields) = entry else {
        return Ok(());
    };
    let Some(var) = fields.remove("key_env") else {
        return Ok(());
    };
    let var = var.as_str().unwrap_or_default().to_owned();
    let plaintext = env(&var).ok_or_else(|| format!("environment variable {var} is not set"))?;
    fields.insert(
        "key_hash".into(),
        Value::String(hex(&aisix_config::hash_key(&plaintext).0)),
    );
    Ok(())
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_env_becomes_key_hash_and_names_become_keys() {
        let text = "_format_version: \"1\"\napi_keys:\n  - display_name: team/a\n    key_env: K\n    allowed_models: [\"*\"]\n";
        let env = |name: &str| (name == "K").then(|| "sk-secret-value".to_owned());
        let documents = documents_of(text, "/aisix", &env).unwrap();
        let (key, json) = documents.iter().next().unwrap();
        assert_eq!(key, "/aisix/api_keys/team%2Fa");
        let json = String::from_utf8(json.clone()).unwrap();
        assert!(!json.contains("sk-secret-value") && !json.contains("key_env"));
        assert!(json.contains(&hex(&aisix_config::hash_key("sk-secret-value").0)));
    }
}
