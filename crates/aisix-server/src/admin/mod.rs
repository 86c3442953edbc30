//! The admin API, on its own listener on the control runtime (never a worker), off unless
//! `admin:` is set. Reads list the resources without secrets and each direct model's state;
//! writes go to etcd (the watch applies them, here and at every replica) and are refused with
//! 409 when the resources come from a file. Every write is logged: which admin key (by hash
//! prefix), what, when; never a secret.

mod error;
mod openapi;
mod store;
mod types;
mod views;

use std::sync::Arc;

use aisix_config::{AdminConfig, KeyHash};
use aisix_gateway::GatewayFactory;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{MethodRouter, get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;

use self::error::AdminError;
use self::store::Expect;
pub(crate) use self::store::Store;
use self::types::{
    ApiKeyFields, ApiKeyView, AtRevision, CreatedApiKey, ModelStatusView, ModelView,
    ProviderKeyView, UpdateApiKey, UpdateModel, Written,
};
use self::views::Collection;
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
        .route(
            "/admin/v1/models",
            get(list::<ModelView>).post(create_model),
        )
        .route("/admin/v1/models/status", get(model_status))
        .route("/admin/v1/provider_keys", get(list::<ProviderKeyView>))
        .route(
            "/admin/v1/api_keys",
            get(list::<ApiKeyView>).post(create_api_key),
        );
    let app = entries::<ModelView>(app, put(update_model));
    let app = entries::<ApiKeyView>(app, put(update_api_key))
        .fallback(|| async { AdminError::NotFound("such admin endpoint".to_owned()) })
        .with_state(admin);
    if let Some(addr) = addr {
        tracing::info!(%addr, "admin listening");
    }
    if let Err(error) = axum::serve(listener, app).await {
        tracing::error!(%error, "admin listener stopped");
    }
}

/// The routes of one writable collection's entries: `update`, delete at a revision, disable
/// and enable.
fn entries<T: Collection + 'static>(
    app: Router<Arc<Admin>>,
    update: MethodRouter<Arc<Admin>>,
) -> Router<Arc<Admin>> {
    let entry = format!("/admin/v1/{}/{{id}}", T::NAME);
    app.route(&entry, update.delete(delete::<T>))
        .route(&format!("{entry}/disable"), post(set_disabled::<T, true>))
        .route(&format!("{entry}/enable"), post(set_disabled::<T, false>))
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

    /// What a write to the entry `id` of `collection` starts from: the caller (checked), the
    /// store (etcd only), the entry's etcd key, and the body read as `B`.
    fn entry_write<B: DeserializeOwned>(
        &self,
        headers: &HeaderMap,
        collection: &str,
        id: &str,
        body: &Bytes,
    ) -> Result<(String, &Store, String, B), AdminError> {
        let who = self.authenticate(headers)?;
        let store = self.store()?;
        let body = parse(body)?;
        Ok((who, store, store.key(collection, id), body))
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

fn to_bytes(document: &serde_json::Value) -> Result<Vec<u8>, AdminError> {
    serde_json::to_vec(document).map_err(|e| AdminError::BadRequest(e.to_string()))
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

/// Every entry of `T`'s collection: from etcd with its revision, or from the file source.
async fn list<T: Collection>(
    State(admin): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<T>>, AdminError> {
    admin.authenticate(&headers)?;
    if let Source::Etcd(store) = &admin.source {
        let stored = store.list(T::NAME).await?;
        return Ok(Json(stored.into_iter().map(T::stored).collect()));
    }
    Ok(Json(T::loaded(&admin.factory.resources())))
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
                disabled: s.disabled,
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
    let key = store.key(ApiKeyView::NAME, &id);
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
    let (who, store, key, update) =
        admin.entry_write::<UpdateApiKey>(&headers, ApiKeyView::NAME, &id, &body)?;
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

/// Sets `disabled` on an entry of `T`'s collection (an API key or a model) at the revision
/// read; the rest of its document stays.
async fn set_disabled<T: Collection, const DISABLED: bool>(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Written>, AdminError> {
    let (who, store, key, at) = admin.entry_write::<AtRevision>(&headers, T::NAME, &id, &body)?;
    let result = async {
        let (mut document, _) = store
            .get(&key)
            .await?
            .ok_or_else(|| AdminError::NotFound(key.clone()))?;
        if let Some(fields) = document.as_object_mut() {
            fields.insert("disabled".to_owned(), serde_json::Value::Bool(DISABLED));
        }
        store
            .write(
                &key,
                Some(to_bytes(&document)?),
                Expect::Revision(at.revision),
            )
            .await
    }
    .await;
    let action = if DISABLED { "disable" } else { "enable" };
    finish(&who, action, key, id, result)
}

/// Deletes an entry of `T`'s collection at `?revision=`.
async fn delete<T: Collection>(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Written>, AdminError> {
    let who = admin.authenticate(&headers)?;
    let store = admin.store()?;
    let revision = revision_param(query)?;
    let key = store.key(T::NAME, &id);
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
    let key = store.key(ModelView::NAME, &id);
    let result = store
        .write(&key, Some(to_bytes(&document)?), Expect::Absent)
        .await;
    finish(&who, "create", key, id, result).map(|written| (StatusCode::CREATED, written))
}

async fn update_model(
    State(admin): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Written>, AdminError> {
    let (who, store, key, update) =
        admin.entry_write::<UpdateModel>(&headers, ModelView::NAME, &id, &body)?;
    let result = store
        .write(
            &key,
            Some(to_bytes(&update.value)?),
            Expect::Revision(update.revision),
        )
        .await;
    finish(&who, "update", key, id, result)
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
    to_bytes(&document)
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
