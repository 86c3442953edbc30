//! The admin API, on its own listener on the control runtime (never a worker), off unless
//! `admin:` is set. Reads list the resources without secrets and each direct model's state;
//! writes go to etcd (the watch applies them, here and at every replica) and are refused with
//! 409 when the resources come from a file. Every write is logged: which admin key (by hash
//! prefix), what, when; never a secret.

mod error;
mod openapi;
mod store;
mod types;

use std::sync::Arc;

use aisix_config::{AdminConfig, KeyHash, Resources};
use aisix_gateway::GatewayFactory;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;

use self::error::AdminError;
use self::store::Expect;
pub(crate) use self::store::Store;
use self::types::{
    ApiKeyFields, ApiKeyView, AtRevision, CreatedApiKey, ModelStatusView, ModelView,
    ProviderKeyView, UpdateApiKey, UpdateModel, Written,
};
use crate::etcd::transfer::{document_id, hex};

/// Where writes go.
pub(crate) enum Source {
    /// Resources come from this file (or nowhere): the admin API only reads.
    File(Option<std::path::PathBuf>),
    Etcd(Box<Store>),
}

/// Everything a handler reads.
struct Admin {
    keys: Vec<KeyHash>,
    factory: Arc<GatewayFactory>,
    source: Source,
}

type Shared = State<Arc<Admin>>;

/// Binds `admin.addr` (a taken port is a startup failure).
pub(crate) fn bind(config: &AdminConfig) -> Result<std::net::TcpListener, String> {
    let listener = std::net::TcpListener::bind(config.addr)
        .map_err(|e| format!("cannot listen on admin.addr {}: {e}", config.addr))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("admin listener: {e}"))?;
    Ok(listener)
}

/// Serves the admin API on `listener` until the process ends. Call on the control runtime.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    config: AdminConfig,
    factory: Arc<GatewayFactory>,
    source: Source,
) {
    let addr = listener.local_addr().ok();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "admin listener failed; the admin API is unavailable");
            return;
        }
    };
    let admin = Arc::new(Admin {
        keys: config.admin_keys,
        factory,
        source,
    });
    let app = Router::new()
        .route("/admin/openapi.json", get(openapi_json))
        .route("/admin/v1/models", get(list_models).post(create_model))
        .route("/admin/v1/models/status", get(model_status))
        .route(
            "/admin/v1/models/{id}",
            put(update_model).delete(delete_model),
        )
        .route("/admin/v1/provider_keys", get(list_provider_keys))
        .route(
            "/admin/v1/api_keys",
            get(list_api_keys).post(create_api_key),
        )
        .route(
            "/admin/v1/api_keys/{id}",
            put(update_api_key).delete(delete_api_key),
        )
        .route("/admin/v1/api_keys/{id}/disable", post(disable_api_key))
        .fallback(|| async { AdminError::NotFound("such admin endpoint".to_owned()) })
        .with_state(admin);
    if let Some(addr) = addr {
        tracing::info!(%addr, "admin listening");
    }
    if let Err(error) = axum::serve(listener, app).await {
        tracing::error!(%error, "admin listener stopped");
    }
}

impl Admin {
    /// The caller's admin key, by the first 8 hex digits of its hash (for the write log).
    fn authenticate(&self, headers: &HeaderMap) -> Result<String, AdminError> {
        let presented = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .ok_or(AdminError::Unauthorized)?;
        let hash = aisix_config::hash_key(presented.trim());
        // Every configured hash is compared whole, so the time taken says nothing of which
        // bytes matched.
        let known = self.keys.iter().fold(false, |found, key| {
            let same = key
                .0
                .iter()
                .zip(hash.0.iter())
                .fold(0u8, |d, (a, b)| d | (a ^ b))
                == 0;
            found | same
        });
        if known {
            Ok(hex(&hash.0[..4]))
        } else {
            Err(AdminError::Unauthorized)
        }
    }

    fn store(&self) -> Result<&Store, AdminError> {
        match &self.source {
            Source::Etcd(store) => Ok(store),
            Source::File(file) => Err(AdminError::Conflict(match file {
                Some(path) => format!(
                    "resources come from the file {}: edit it and reload; the admin API writes only to etcd",
                    path.display()
                ),
                None => {
                    "no resources source is writable: configure etcd to write through the admin API"
                        .to_owned()
                }
            })),
        }
    }
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, AdminError> {
    serde_json::from_slice(body).map_err(|e| AdminError::BadRequest(format!("invalid body: {e}")))
}

/// `revision=N` from the query string (deletes).
fn revision_param(query: Option<String>) -> Result<i64, AdminError> {
    query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("revision="))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            AdminError::BadRequest("?revision=<the revision read> is required".to_owned())
        })
}

fn written(who: &str, action: &str, key: &str, revision: i64) {
    tracing::info!(target: "aisix::admin", admin = who, action, key, revision, "admin write");
}

fn refused(who: &str, action: &str, key: &str, error: &AdminError) {
    tracing::warn!(target: "aisix::admin", admin = who, action, key, %error, "admin write refused");
}

async fn openapi_json(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, AdminError> {
    admin.authenticate(&headers)?;
    Ok(Json(openapi::document()))
}

async fn list_models(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<ModelView>>, AdminError> {
    admin.authenticate(&headers)?;
    if let Source::Etcd(store) = &admin.source {
        let stored = store.list("models").await?;
        return Ok(Json(
            stored
                .into_iter()
                .map(|s| ModelView {
                    display_name: text(&s.document, "display_name"),
                    id: s.id,
                    document: s.document,
                    revision: Some(s.revision),
                })
                .collect(),
        ));
    }
    Ok(Json(models_of(&admin.factory.resources())))
}

async fn model_status(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<ModelStatusView>>, AdminError> {
    admin.authenticate(&headers)?;
    Ok(Json(
        admin
            .factory
            .model_status()
            .into_iter()
            .map(|s| ModelStatusView {
                model: s.model,
                provider_key: s.provider_key,
                health: s.health.as_str().to_owned(),
                cooldown_remaining_ms: s.cooldown_remaining_ms,
                in_flight: s.in_flight,
                latency_estimate_ms: s.latency_estimate_ms,
            })
            .collect(),
    ))
}

async fn list_provider_keys(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<ProviderKeyView>>, AdminError> {
    admin.authenticate(&headers)?;
    if let Source::Etcd(store) = &admin.source {
        let stored = store.list("provider_keys").await?;
        return Ok(Json(
            stored
                .into_iter()
                .map(|s| ProviderKeyView {
                    display_name: text(&s.document, "display_name"),
                    provider: text(&s.document, "provider"),
                    api_base: s
                        .document
                        .get("api_base")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned),
                    id: s.id,
                    revision: Some(s.revision),
                })
                .collect(),
        ));
    }
    Ok(Json(
        admin
            .factory
            .resources()
            .provider_keys
            .iter()
            .map(|k| ProviderKeyView {
                id: document_id(&k.display_name),
                display_name: k.display_name.clone(),
                provider: k.provider.as_str().to_owned(),
                api_base: Some(k.api_base.clone()),
                revision: None,
            })
            .collect(),
    ))
}

async fn list_api_keys(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<ApiKeyView>>, AdminError> {
    admin.authenticate(&headers)?;
    if let Source::Etcd(store) = &admin.source {
        let stored = store.list("api_keys").await?;
        return Ok(Json(
            stored
                .into_iter()
                .map(|s| ApiKeyView {
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
                    expires_at: s
                        .document
                        .get("expires_at")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned),
                    id: s.id,
                    revision: Some(s.revision),
                })
                .collect(),
        ));
    }
    Ok(Json(
        admin
            .factory
            .resources()
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
            .collect(),
    ))
}

async fn create_api_key(
    State(admin): Shared,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedApiKey>), AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let fields: ApiKeyFields = parse(&body)?;
    let id = document_id(&fields.display_name);
    let key = store.key("api_keys", &id);
    let secret = new_secret().map_err(AdminError::Unavailable)?;
    let hash = hex(&aisix_config::hash_key(&secret).0);
    let document = with_hash(&fields, &hash)?;
    match store.write(&key, Some(document), Expect::Absent).await {
        Ok(revision) => {
            written(&who, "create", &key, revision);
            Ok((
                StatusCode::CREATED,
                Json(CreatedApiKey {
                    id,
                    key: secret,
                    key_hash_prefix: hash[..12].to_owned(),
                    revision,
                }),
            ))
        }
        Err(error) => {
            refused(&who, "create", &key, &error);
            Err(error)
        }
    }
}

async fn update_api_key(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let update: UpdateApiKey = parse(&body)?;
    let key = store.key("api_keys", &id);
    let result = async {
        let hash = stored_hash(store, &key).await?;
        let document = with_hash(&update.value, &hash)?;
        store
            .write(&key, Some(document), Expect::Revision(update.revision))
            .await
    }
    .await;
    finish(&who, "update", key, id, result)
}

async fn disable_api_key(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let at: AtRevision = parse(&body)?;
    let key = store.key("api_keys", &id);
    let result = async {
        let (mut document, _) = store
            .get(&key)
            .await?
            .ok_or_else(|| AdminError::NotFound(key.clone()))?;
        if let Some(fields) = document.as_object_mut() {
            fields.insert("disabled".to_owned(), serde_json::Value::Bool(true));
        }
        let bytes =
            serde_json::to_vec(&document).map_err(|e| AdminError::BadRequest(e.to_string()))?;
        store
            .write(&key, Some(bytes), Expect::Revision(at.revision))
            .await
    }
    .await;
    finish(&who, "disable", key, id, result)
}

async fn delete_api_key(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let revision = revision_param(query)?;
    let key = store.key("api_keys", &id);
    let result = store.write(&key, None, Expect::Revision(revision)).await;
    finish(&who, "delete", key, id, result)
}

async fn create_model(
    State(admin): Shared,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Written>), AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let document: serde_json::Value = parse(&body)?;
    let name = document
        .get("display_name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| AdminError::BadRequest("display_name is required".to_owned()))?;
    let id = document_id(name);
    let key = store.key("models", &id);
    let bytes = serde_json::to_vec(&document).map_err(|e| AdminError::BadRequest(e.to_string()))?;
    let result = store.write(&key, Some(bytes), Expect::Absent).await;
    finish(&who, "create", key, id, result).map(|written| (StatusCode::CREATED, written))
}

async fn update_model(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let update: UpdateModel = parse(&body)?;
    let key = store.key("models", &id);
    let bytes =
        serde_json::to_vec(&update.value).map_err(|e| AdminError::BadRequest(e.to_string()))?;
    let result = store
        .write(&key, Some(bytes), Expect::Revision(update.revision))
        .await;
    finish(&who, "update", key, id, result)
}

async fn delete_model(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let revision = revision_param(query)?;
    let key = store.key("models", &id);
    let result = store.write(&key, None, Expect::Revision(revision)).await;
    finish(&who, "delete", key, id, result)
}

/// Logs the write's end and shapes its answer.
fn finish(
    who: &str,
    action: &str,
    key: String,
    id: String,
    result: Result<i64, AdminError>,
) -> Result<Json<Written>, AdminError> {
    match result {
        Ok(revision) => {
            written(who, action, &key, revision);
            Ok(Json(Written { id, revision }))
        }
        Err(error) => {
            refused(who, action, &key, &error);
            Err(error)
        }
    }
}

/// The API key document: the fields and the hash of its secret.
fn with_hash(fields: &ApiKeyFields, hash: &str) -> Result<Vec<u8>, AdminError> {
    let mut document =
        serde_json::to_value(fields).map_err(|e| AdminError::BadRequest(e.to_string()))?;
    if let Some(map) = document.as_object_mut() {
        map.insert(
            "key_hash".to_owned(),
            serde_json::Value::String(hash.to_owned()),
        );
    }
    serde_json::to_vec(&document).map_err(|e| AdminError::BadRequest(e.to_string()))
}

/// The `key_hash` stored at `key`: an update never changes the secret.
async fn stored_hash(store: &Store, key: &str) -> Result<String, AdminError> {
    let (document, _) = store
        .get(key)
        .await?
        .ok_or_else(|| AdminError::NotFound(key.to_owned()))?;
    document
        .get("key_hash")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .ok_or_else(|| AdminError::Conflict(format!("{key} has no key_hash to keep")))
}

/// A new client key: `sk-aisix-` and 48 hex digits from the kernel's random source.
fn new_secret() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read random bytes: {e}"))?;
    Ok(format!("sk-aisix-{}", hex(&bytes)))
}

fn text(document: &serde_json::Value, field: &str) -> String {
    document
        .get(field)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The models of a file source, as documents.
fn models_of(resources: &Resources) -> Vec<ModelView> {
    let direct = resources.models.iter().map(|m| ModelView {
        id: document_id(&m.display_name),
        display_name: m.display_name.clone(),
        document: serde_json::json!({
            "display_name": m.display_name,
            "provider": m.provider.as_str(),
            "model_name": m.model_name,
            "provider_key": resources.provider_keys.get(m.provider_key_index).map(|k| k.display_name.as_str()),
        }),
        revision: None,
    });
    let groups = resources.groups.iter().map(|g| ModelView {
        id: document_id(&g.display_name),
        display_name: g.display_name.clone(),
        document: serde_json::json!({
            "display_name": g.display_name,
            "routing": {
                "strategy": g.routing.strategy.as_str(),
                "targets": g.routing.targets.iter().map(|t| t.model.as_str()).collect::<Vec<_>>(),
            },
        }),
        revision: None,
    });
    direct.chain(groups).collect()
}
