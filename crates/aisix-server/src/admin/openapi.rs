//! `/admin/openapi.json`: OpenAPI 3.1, its schemas generated from the bodies in [`super::types`].

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::types::{
    ApiKeyFields, ApiKeyView, AtRevision, CreatedApiKey, ErrorBody, ModelStatusView, ModelView,
    ProviderKeyView, UpdateApiKey, UpdateModel, Written,
};

/// The whole document.
pub(crate) fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas/".into())
        .into_generator();
    let mut refs = serde_json::Map::new();
    macro_rules! schema {
        ($($t:ty),*) => {$(
            let schema = generator.subschema_for::<$t>();
            refs.insert(stringify!($t).to_owned(), schema.to_value());
        )*};
    }
    schema!(
        ApiKeyFields,
        ApiKeyView,
        AtRevision,
        CreatedApiKey,
        ErrorBody,
        ModelStatusView,
        ModelView,
        ProviderKeyView,
        UpdateApiKey,
        UpdateModel,
        Written
    );
    let schemas: serde_json::Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    let r = |name: &str| refs.get(name).cloned().unwrap_or(Value::Null);
    let list = |name: &str| json!({"type": "array", "items": r(name)});
    let ok = |schema: Value| json!({"description": "OK", "content": {"application/json": {"schema": schema}}});
    let errors = json!({
        "401": {"description": "missing or wrong admin key", "content": {"application/json": {"schema": r("ErrorBody")}}},
        "default": {"description": "an error", "content": {"application/json": {"schema": r("ErrorBody")}}}
    });
    let with_errors = |mut responses: Value| {
        if let (Some(map), Some(extra)) = (responses.as_object_mut(), errors.as_object()) {
            for (k, v) in extra {
                map.insert(k.clone(), v.clone());
            }
        }
        responses
    };
    let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let id_and_revision = json!([
        {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "revision", "in": "query", "required": true, "schema": {"type": "integer"}}
    ]);
    let at_revision = |summary: &str| {
        json!({"post": {"summary": summary, "parameters": id, "requestBody": body(r("AtRevision")),
                        "responses": with_errors(json!({"200": ok(r("Written"))}))}})
    };
    json!({
        "openapi": "3.1.0",
        "info": {"title": "aisix admin API", "version": env!("CARGO_PKG_VERSION")},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"adminKey": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"adminKey": []}],
        "paths": {
            "/admin/v1/models": {
                "get": {"summary": "List models", "responses": with_errors(json!({"200": ok(list("ModelView"))}))},
                "post": {"summary": "Create a model (etcd source only)", "requestBody": body(json!({"type": "object"})),
                         "responses": with_errors(json!({"201": ok(r("Written"))}))}
            },
            "/admin/v1/models/{id}": {
                "put": {"summary": "Update a model at the revision read", "parameters": id, "requestBody": body(r("UpdateModel")),
                        "responses": with_errors(json!({"200": ok(r("Written"))}))},
                "delete": {"summary": "Delete a model at the revision read", "parameters": id_and_revision,
                           "responses": with_errors(json!({"200": ok(r("Written"))}))}
            },
            "/admin/v1/models/status": {
                "get": {"summary": "Each direct model's health in this replica", "responses": with_errors(json!({"200": ok(list("ModelStatusView"))}))}
            },
            "/admin/v1/provider_keys": {
                "get": {"summary": "List provider keys (no secrets)", "responses": with_errors(json!({"200": ok(list("ProviderKeyView"))}))}
            },
            "/admin/v1/api_keys": {
                "get": {"summary": "List API keys (hash prefixes, no secrets)", "responses": with_errors(json!({"200": ok(list("ApiKeyView"))}))},
                "post": {"summary": "Create an API key; its secret is returned this once", "requestBody": body(r("ApiKeyFields")),
                         "responses": with_errors(json!({"201": ok(r("CreatedApiKey"))}))}
            },
            "/admin/v1/api_keys/{id}": {
                "put": {"summary": "Update an API key at the revision read (the secret stays)", "parameters": id, "requestBody": body(r("UpdateApiKey")),
                        "responses": with_errors(json!({"200": ok(r("Written"))}))},
                "delete": {"summary": "Delete an API key at the revision read", "parameters": id_and_revision,
                           "responses": with_errors(json!({"200": ok(r("Written"))}))}
            },
            "/admin/v1/api_keys/{id}/disable": at_revision("Disable an API key at the revision read: it is refused with 401"),
            "/admin/v1/api_keys/{id}/enable": at_revision("Enable an API key again at the revision read"),
            "/admin/v1/models/{id}/disable": at_revision("Disable a model or group at the revision read: it is answered as an unknown model (404), and groups skip it"),
            "/admin/v1/models/{id}/enable": at_revision("Enable a model or group again at the revision read")
        }
    })
}
