//! `GET /v1/models` and `GET /v1/models/{id}`: the models and groups the caller's key may use,
//! in the shape of the client's dialect. An Anthropic client (one that sends `x-api-key` or
//! `anthropic-version`) gets Anthropic's paged list (`limit`, `after_id`, `before_id`); any
//! other OpenAI's.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, header};
use serde_json::{Value, json};

use crate::error::{ErrorKind, GatewayError, echo};
use crate::relay::body::GatewayBody;
use crate::snapshot::{ApiKeyEntry, Named, Snapshot};
use crate::wire::Dialect;

/// What every model reports as its creation time: the gateway does not know it (OpenAI's
/// `created: 0`).
const CREATED_AT: &str = "1970-01-01T00:00:00Z";

/// Anthropic's page size when the client names none, and the largest it may name.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 1000;

/// The dialect of the client asking for the list: Anthropic's SDKs send `x-api-key` and
/// `anthropic-version`; OpenAI's send neither.
pub(crate) fn dialect(headers: &HeaderMap) -> Dialect {
    if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

pub(crate) fn list(
    snapshot: &Snapshot,
    key: &ApiKeyEntry,
    dialect: Dialect,
    query: Option<&str>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let allowed = snapshot.models().filter(|m| key.allows(m.name()));
    let body = match dialect {
        Dialect::OpenAi | Dialect::Responses => {
            let data: Vec<Value> = allowed.map(openai_model).collect();
            json!({"object": "list", "data": data})
        }
        Dialect::Anthropic => {
            let page = Page::read(query.unwrap_or_default())?;
            let names: Vec<&str> = allowed.map(|m| &**m.name()).collect();
            page.of(&names)
        }
    };
    Ok(json_response(&body))
}

pub(crate) fn get(
    snapshot: &Snapshot,
    key: &ApiKeyEntry,
    id: &str,
    dialect: Dialect,
) -> Result<Response<GatewayBody>, GatewayError> {
    match snapshot.model(id) {
        Some(model) if key.allows(model.name()) => Ok(json_response(&match dialect {
            Dialect::OpenAi | Dialect::Responses => openai_model(model),
            Dialect::Anthropic => anthropic_model(model.name()),
        })),
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
fn openai_model(model: &Named) -> Value {
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

/// A model in Anthropic's shape.
fn anthropic_model(name: &str) -> Value {
    json!({"type": "model", "id": name, "display_name": name, "created_at": CREATED_AT})
}

/// One page of Anthropic's list: up to `limit` models after `after_id` or before `before_id`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Page<'q> {
    limit: Option<usize>,
    after_id: Option<&'q str>,
    before_id: Option<&'q str>,
}

impl<'q> Page<'q> {
    fn read(query: &'q str) -> Result<Self, GatewayError> {
        let mut page = Page::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "limit" => {
                    let limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            GatewayError::new(
                                ErrorKind::InvalidRequest,
                                format!("limit: must be an integer from 1 to {MAX_LIMIT}"),
                            )
                            .with_param("limit")
                        })?;
                    page.limit = Some(limit);
                }
                "after_id" => page.after_id = Some(value),
                "before_id" => page.before_id = Some(value),
                _ => {}
            }
        }
        Ok(page)
    }

    /// The page of `names` (the list in its order), in Anthropic's shape.
    fn of(&self, names: &[&str]) -> Value {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        let position = |id: &str| names.iter().position(|n| *n == id);
        let (start, end) = match (self.after_id, self.before_id) {
            (Some(after), _) => {
                let start = position(after).map_or(names.len(), |i| i + 1);
                (start, names.len().min(start + limit))
            }
            (None, Some(before)) => {
                let end = position(before).unwrap_or(0);
                (end.saturating_sub(limit), end)
            }
            (None, None) => (0, names.len().min(limit)),
        };
        let page = &names[start..end];
        let has_more = match self.before_id {
            Some(_) if self.after_id.is_none() => start > 0,
            _ => end < names.len(),
        };
        let data: Vec<Value> = page.iter().map(|n| anthropic_model(n)).collect();
        json!({
            "data": data,
            "has_more": has_more,
            "first_id": page.first(),
            "last_id": page.last(),
        })
    }
}

fn json_response(value: &Value) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(Bytes::from(value.to_string())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anthropic_client_is_known_by_its_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(dialect(&headers), Dialect::OpenAi);
        headers.insert("authorization", HeaderValue::from_static("Bearer k"));
        assert_eq!(dialect(&headers), Dialect::OpenAi);
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        assert_eq!(dialect(&headers), Dialect::Anthropic);
        let mut key_only = HeaderMap::new();
        key_only.insert("x-api-key", HeaderValue::from_static("k"));
        assert_eq!(dialect(&key_only), Dialect::Anthropic);
    }

    #[test]
    fn anthropic_pages_follow_after_and_before_ids() {
        let names = ["a", "b", "c", "d", "e"];
        let page = |query: &str| Page::read(query).unwrap().of(&names);
        let all = page("");
        assert_eq!(all["data"].as_array().unwrap().len(), 5);
        assert_eq!(all["has_more"], false);
        assert_eq!(
            (&all["first_id"], &all["last_id"]),
            (&json!("a"), &json!("e"))
        );
        assert_eq!(
            all["data"][0],
            json!({"type": "model", "id": "a", "display_name": "a", "created_at": CREATED_AT})
        );
        let first = page("limit=2");
        assert_eq!(
            (&first["last_id"], &first["has_more"]),
            (&json!("b"), &json!(true))
        );
        let next = page("limit=2&after_id=b");
        assert_eq!(
            (&next["first_id"], &next["last_id"]),
            (&json!("c"), &json!("d"))
        );
        let last = page("limit=2&after_id=d");
        assert_eq!(
            (&last["first_id"], &last["has_more"]),
            (&json!("e"), &json!(false))
        );
        let before = page("limit=2&before_id=e");
        assert_eq!(
            (&before["first_id"], &before["has_more"]),
            (&json!("c"), &json!(true))
        );
        let empty = page("after_id=e");
        assert_eq!(
            (&empty["first_id"], &empty["has_more"]),
            (&Value::Null, &json!(false))
        );
        assert_eq!(Page::read("limit=0").unwrap_err().status(), 400);
        assert_eq!(Page::read("limit=x").unwrap_err().status(), 400);
    }
}
