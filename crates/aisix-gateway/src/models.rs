//! `GET /v1/models` and `GET /v1/models/{id}`: the models and groups the caller's key may use, in
//! OpenAI's list shape.

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use serde_json::{Value, json};

use crate::body::GatewayBody;
use crate::error::{ErrorKind, GatewayError, echo};
use crate::snapshot::{ApiKeyEntry, Named, Snapshot};

pub(crate) fn list(snapshot: &Snapshot, key: &ApiKeyEntry) -> Response<GatewayBody> {
    let data: Vec<Value> = snapshot
        .models()
        .filter(|m| key.allows(m.name()))
        .map(model_object)
        .collect();
    json_response(&json!({"object": "list", "data": data}))
}

pub(crate) fn get(
    snapshot: &Snapshot,
    key: &ApiKeyEntry,
    id: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    match snapshot.model(id) {
        Some(model) if key.allows(model.name()) => Ok(json_response(&model_object(model))),
        Some(_) => Err(model_not_allowed(id)),
        None => Err(model_not_found(id)),
    }
}

/// 404 `model_not_found` for `name`.
pub(crate) fn model_not_found(name: &str) -> GatewayError {
    not_found(ErrorKind::ModelNotFound, name)
}

/// A model the key may not use: the same answer as [`model_not_found`], byte for byte, so the
/// key cannot learn that the model exists; only the kind (for the operator's metrics) differs.
pub(crate) fn model_not_allowed(name: &str) -> GatewayError {
    not_found(ErrorKind::ModelNotAllowed, name)
}

fn not_found(kind: ErrorKind, name: &str) -> GatewayError {
    GatewayError::new(
        kind,
        format!(
            "The model '{}' does not exist or you do not have access to it.",
            echo(name)
        ),
    )
    .with_param("model")
}

/// A model in OpenAI's shape; `owned_by` is the provider kind of a direct model, `aisix` for a
/// group.
fn model_object(model: &Named) -> Value {
    let owned_by = match model {
        Named::Direct(direct) => direct.provider.kind.as_str(),
        Named::Group(_) => "aisix",
    };
    json!({
        "id": &**model.name(),
        "object": "model",
        "created": 0,
        "owned_by": owned_by,
    })
}

fn json_response(value: &Value) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(Bytes::from(value.to_string())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
