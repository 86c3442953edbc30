//! The admin API's request and response bodies. The OpenAPI document is generated from these
//! types, so what it describes is what the handlers read and write.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A provider key, without its secret or header values.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ProviderKeyView {
    /// The last segment of its etcd key (its display name with a file source).
    pub id: String,
    pub display_name: String,
    pub provider: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
    /// The etcd revision that last wrote it (absent with a file source); updates carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// A model (direct or group) as stored.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ModelView {
    pub id: String,
    pub display_name: String,
    /// The model's document, as in a resources file.
    pub document: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// An API key, without its secret: the first 12 hex digits of its SHA-256 identify it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ApiKeyView {
    pub id: String,
    pub display_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_hash_prefix: Option<String>,
    pub allowed_models: Vec<String>,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// One direct model's state in this replica.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ModelStatusView {
    pub model: String,
    pub provider_key: String,
    /// `available`, `cooling` or `half_open`.
    pub health: String,
    pub cooldown_remaining_ms: u64,
    pub in_flight: u32,
    /// Moving average of time to first token with failure penalties; 1000 before any call.
    pub latency_estimate_ms: u64,
    /// Disabled (`POST /admin/v1/models/{id}/disable`): answered as an unknown model.
    pub disabled: bool,
}

/// An API key's fields, as a resources file takes them, but never its secret: the gateway
/// makes the key on create and keeps its hash.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApiKeyFields {
    pub display_name: String,
    /// Patterns (`gpt-*`, `*`) of the models the key may call.
    pub allowed_models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// RFC 3339, such as `2027-01-01T00:00:00Z`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// As `api_keys[].rate_limit` in a resources file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<serde_json::Value>,
    /// As `api_keys[].budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<serde_json::Value>,
    /// As `api_keys[].spending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spending: Option<serde_json::Value>,
}

/// The answer to a create: the key's secret, shown this once and stored nowhere.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CreatedApiKey {
    pub id: String,
    /// The secret to hand to the client. Only its SHA-256 is stored.
    pub key: String,
    pub key_hash_prefix: String,
    pub revision: i64,
}

/// An update: the new fields, and the revision they were read at.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateApiKey {
    pub revision: i64,
    pub value: ApiKeyFields,
}

/// A model update: the new document, and the revision it was read at.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateModel {
    pub revision: i64,
    /// The model's document, as in a resources file.
    pub value: serde_json::Value,
}

/// A change that carries only the revision it was read at (disable).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AtRevision {
    pub revision: i64,
}

/// What a write did: the entry, and the etcd revision that wrote it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Written {
    pub id: String,
    pub revision: i64,
}

/// Every error: `{"error": {"message", "type"}}`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ErrorDetail {
    pub message: String,
    /// `authentication_error`, `invalid_request_error`, `not_found_error`, `conflict_error`
    /// or `unavailable_error`.
    #[serde(rename = "type")]
    pub kind: String,
}
