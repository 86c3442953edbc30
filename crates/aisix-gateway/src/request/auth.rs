//! Authentication: the client's key from `Authorization: Bearer` or `x-api-key`, hashed and
//! looked up. Runs before the body is read. The key itself is never stored or forwarded.

use std::time::SystemTime;

use aisix_config::hash_key;
use http::HeaderMap;

use crate::error::{AuthFailure, ErrorKind, GatewayError};
use crate::snapshot::{ApiKeyEntry, Snapshot};

/// The caller's key entry, or why there is none.
pub(crate) fn authenticate<'s>(
    snapshot: &'s Snapshot,
    headers: &HeaderMap,
) -> Result<&'s ApiKeyEntry, GatewayError> {
    let Some(presented) = presented_key(headers) else {
        return Err(unauthorized(
            AuthFailure::Missing,
            "Missing API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
        ));
    };
    let Some(entry) = snapshot.api_key(&hash_key(presented)) else {
        return Err(unauthorized(AuthFailure::Unknown, "Invalid API key."));
    };
    if entry.disabled {
        return Err(unauthorized(
            AuthFailure::Disabled,
            "This API key is disabled.",
        ));
    }
    if let Some(expires_at) = entry.expires_at
        && SystemTime::now() >= expires_at
    {
        return Err(unauthorized(
            AuthFailure::Expired,
            "This API key has expired.",
        ));
    }
    Ok(entry)
}

fn unauthorized(reason: AuthFailure, message: &str) -> GatewayError {
    GatewayError::new(ErrorKind::Unauthorized(reason), message)
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, key) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| key.trim())
            .filter(|k| !k.is_empty());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn bearer_and_x_api_key_are_both_accepted() {
        assert_eq!(
            presented_key(&headers(&[("authorization", "Bearer sk-1")])),
            Some("sk-1")
        );
        assert_eq!(
            presented_key(&headers(&[("authorization", "bearer  sk-1 ")])),
            Some("sk-1")
        );
        assert_eq!(
            presented_key(&headers(&[("x-api-key", "sk-2")])),
            Some("sk-2")
        );
    }

    #[test]
    fn other_schemes_and_empty_keys_are_missing() {
        assert_eq!(
            presented_key(&headers(&[("authorization", "Basic abc")])),
            None
        );
        assert_eq!(
            presented_key(&headers(&[("authorization", "Bearer ")])),
            None
        );
        assert_eq!(presented_key(&headers(&[("x-api-key", "")])), None);
        assert_eq!(presented_key(&HeaderMap::new()), None);
    }
}
