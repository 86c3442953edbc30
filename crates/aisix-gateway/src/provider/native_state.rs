//! A native response's state, asked of the provider key that created it:
//! `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`
//! relayed to that key's Responses URI (the id → key pin says which), the answer whole, the
//! client's query string carried. What the gateway stores itself is answered by `stored`.

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, Uri};

use super::exchange;
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::request::deadline::Deadlines;
use crate::snapshot::DirectRoute;
use crate::upstream::pool::Pool;

/// The request to relay: its method, the response id, whether it asks for `input_items`, and
/// the client's query string.
pub(crate) struct Asked<'a> {
    pub method: Method,
    pub id: &'a str,
    pub items: bool,
    pub query: Option<&'a str>,
}

/// Relays `asked` to the provider key of `route` (a direct model on the key that created the
/// response): its answer's status, `Content-Type` and body, read whole up to `limit` bytes.
pub(crate) async fn relay(
    pool: &Pool,
    route: &DirectRoute,
    asked: Asked<'_>,
    request_id: &HeaderValue,
    deadlines: &Deadlines,
    limit: usize,
) -> Result<(StatusCode, HeaderValue, Bytes), GatewayError> {
    let provider = &route.provider;
    let base = route.uris.get(Endpoint::Responses).ok_or_else(|| {
        GatewayError::new(
            ErrorKind::Internal,
            "The gateway could not build the upstream request.",
        )
    })?;
    let uri = uri(base, &asked).ok_or_else(|| crate::stored::not_found(asked.id, None))?;
    exchange::fetch(
        pool,
        provider,
        asked.method,
        &uri,
        request_id,
        deadlines,
        limit,
    )
    .await
}

/// `{base}/{id}` (`/input_items`), `base`'s own query (Azure's) before the client's; `None` for
/// an id that is not one OpenAI mints (letters, digits, `_`, `-`), which no pin can hold.
fn uri(base: &Uri, asked: &Asked<'_>) -> Option<Uri> {
    let id = asked.id;
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return None;
    }
    let mut text = String::with_capacity(128);
    if let Some(scheme) = base.scheme_str() {
        text.push_str(scheme);
        text.push_str("://");
    }
    if let Some(authority) = base.authority() {
        text.push_str(authority.as_str());
    }
    text.push_str(base.path());
    text.push('/');
    text.push_str(id);
    if asked.items {
        text.push_str("/input_items");
    }
    let queries = [base.query(), asked.query];
    let mut first = true;
    for query in queries.into_iter().flatten().filter(|q| !q.is_empty()) {
        text.push(if first { '?' } else { '&' });
        text.push_str(query);
        first = false;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked<'a>(id: &'a str, items: bool, query: Option<&'a str>) -> Asked<'a> {
        Asked {
            method: Method::GET,
            id,
            items,
            query,
        }
    }

    #[test]
    fn the_id_and_both_queries_follow_the_key_s_responses_uri() {
        let openai: Uri = "http://127.0.0.1:9/v1/responses".parse().unwrap();
        assert_eq!(
            uri(&openai, &asked("resp_1", false, None)).unwrap(),
            "http://127.0.0.1:9/v1/responses/resp_1"
        );
        assert_eq!(
            uri(&openai, &asked("resp_1", true, Some("limit=2&order=asc"))).unwrap(),
            "http://127.0.0.1:9/v1/responses/resp_1/input_items?limit=2&order=asc"
        );
        let azure: Uri = "https://r.openai.azure.com/openai/v1/responses?api-version=preview"
            .parse()
            .unwrap();
        assert_eq!(
            uri(&azure, &asked("resp_1", true, Some("limit=2"))).unwrap(),
            "https://r.openai.azure.com/openai/v1/responses/resp_1/input_items?api-version=preview&limit=2"
        );
        assert!(uri(&openai, &asked("../x", false, None)).is_none());
        assert!(uri(&openai, &asked("", false, None)).is_none());
    }
}
