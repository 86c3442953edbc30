//! How each collection the admin API lists is shown: from a document stored in etcd, or from
//! the resources a file source loaded. Never a secret: keys show a hash prefix and their name.

use aisix_config::Resources;
use serde::Serialize;

use super::store::Stored;
use super::types::{ApiKeyView, ModelView, ProviderKeyView};
use crate::etcd::transfer::{document_id, hex};

/// A collection of resources, as the admin API lists it and writes to it.
pub(crate) trait Collection: Serialize + Sized {
    /// Its folder under the etcd prefix, as in AISIX's layout.
    const NAME: &'static str;
    /// One entry read from etcd.
    fn stored(stored: Stored) -> Self;
    /// Every entry of a file source.
    fn loaded(resources: &Resources) -> Vec<Self>;
}

impl Collection for ModelView {
    const NAME: &'static str = "models";

    fn stored(s: Stored) -> Self {
        ModelView {
            display_name: text(&s.document, "display_name"),
            id: s.id,
            document: s.document,
            revision: Some(s.revision),
        }
    }

    /// Direct models, then groups, as documents.
    fn loaded(resources: &Resources) -> Vec<Self> {
        let direct = resources.models.iter().map(|m| {
            let mut document = serde_json::json!({
                "display_name": m.display_name,
                "provider": m.provider.as_str(),
                "model_name": m.model_name,
                "provider_key": resources.provider_keys.get(m.provider_key_index).map(|k| k.display_name.as_str()),
            });
            with_disabled(&mut document, m.disabled);
            ModelView {
                id: document_id(&m.display_name),
                display_name: m.display_name.clone(),
                document,
                revision: None,
            }
        });
        let groups = resources.groups.iter().map(|g| {
            let mut document = serde_json::json!({
                "display_name": g.display_name,
                "routing": {
                    "strategy": g.routing.strategy.as_str(),
                    "targets": g.routing.targets.iter().map(|t| t.model.as_str()).collect::<Vec<_>>(),
                },
            });
            with_disabled(&mut document, g.disabled);
            ModelView {
                id: document_id(&g.display_name),
                display_name: g.display_name.clone(),
                document,
                revision: None,
            }
        });
        direct.chain(groups).collect()
    }
}

impl Collection for ProviderKeyView {
    const NAME: &'static str = "provider_keys";

    fn stored(s: Stored) -> Self {
        ProviderKeyView {
            display_name: text(&s.document, "display_name"),
            provider: text(&s.document, "provider"),
            api_base: optional_text(&s.document, "api_base"),
            id: s.id,
            revision: Some(s.revision),
        }
    }

    fn loaded(resources: &Resources) -> Vec<Self> {
        resources
            .provider_keys
            .iter()
            .map(|k| ProviderKeyView {
                id: document_id(&k.display_name),
                display_name: k.display_name.clone(),
                provider: k.provider.as_str().to_owned(),
                api_base: Some(k.api_base.clone()),
                revision: None,
            })
            .collect()
    }
}

impl Collection for ApiKeyView {
    const NAME: &'static str = "api_keys";

    fn stored(s: Stored) -> Self {
        ApiKeyView {
            display_name: text(&s.document, "display_name"),
            key_hash_prefix: s
                .document
                .get("key_hash")
                .and_then(|v| v.as_str())
                .and_then(|h| h.get(..12))
                .map(str::to_ascii_lowercase),
            allowed_models: s
                .document
                .get("allowed_models")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            disabled: s
                .document
                .get("disabled")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            expires_at: optional_text(&s.document, "expires_at"),
            id: s.id,
            revision: Some(s.revision),
        }
    }

    fn loaded(resources: &Resources) -> Vec<Self> {
        resources
            .api_keys
            .iter()
            .map(|k| ApiKeyView {
                id: document_id(&k.display_name),
                display_name: k.display_name.clone(),
                key_hash_prefix: Some(hex(&k.key_hash.0[..6])),
                allowed_models: k
                    .allowed_models
                    .iter()
                    .map(|p| p.as_str().to_owned())
                    .collect(),
                disabled: k.disabled,
                expires_at: k
                    .expires_at
                    .map(|at| humantime::format_rfc3339_seconds(at).to_string()),
                revision: None,
            })
            .collect()
    }
}

fn text(document: &serde_json::Value, field: &str) -> String {
    optional_text(document, field).unwrap_or_default()
}

fn optional_text(document: &serde_json::Value, field: &str) -> Option<String> {
    document
        .get(field)
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// `disabled: true` on a document, as a resources file would say it; nothing when enabled.
fn with_disabled(document: &mut serde_json::Value, disabled: bool) {
    if let (true, Some(fields)) = (disabled, document.as_object_mut()) {
        fields.insert("disabled".to_owned(), serde_json::Value::Bool(true));
    }
}
