//! A Google service account's OAuth2 access token (RFC 7523): an RS256 assertion signed with
//! the account's key (`iss` the account, `scope` cloud-platform, `aud` its `token_uri`, one
//! hour), exchanged at `token_uri` for a bearer token. A [`Source`] of
//! [`super::credential`]: when to fetch is that module's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use super::credential::{Fetching, Fresh, Source};
use crate::upstream::egress::{Egress, Route};
use crate::upstream::pool::Pool;

/// The scope Vertex AI's endpoints accept.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// How long an assertion is good for (Google's maximum).
const ASSERTION_LIFETIME: u64 = 3600;
/// How long one token request may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest token answer read (a token is a few KiB).
const MAX_ANSWER: usize = 64 * 1024;

/// The token of one service account.
pub(crate) struct ServiceAccountToken {
    client_email: String,
    key_id: Option<String>,
    /// The parsed key, or why it cannot sign (said at every fetch, and logged).
    key: Result<EncodingKey, String>,
    token_uri: Result<Uri, String>,
    route: Route,
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

impl ServiceAccountToken {
    pub(crate) fn new(account: &aisix_config::ServiceAccount, egress: &Egress) -> Self {
        let file = account.file.display();
        let key = EncodingKey::from_rsa_pem(account.private_key.expose().as_bytes())
            .map_err(|_| format!("the private_key of {file} is not a valid RSA key"));
        let token_uri = account
            .token_uri
            .parse::<Uri>()
            .map_err(|_| format!("the token_uri of {file} is not a valid URI"));
        let route = token_uri
            .as_ref()
            .map_or(Route::Direct, |uri| egress.route(uri));
        Self {
            client_email: account.client_email.clone(),
            key_id: account.private_key_id.clone(),
            key,
            token_uri,
            route,
        }
    }

    /// The signed assertion for now.
    fn assertion(&self, key: &EncodingKey, aud: &str) -> Result<String, String> {
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut header = Header::new(Algorithm::RS256);
        header.kid = self.key_id.clone();
        let claims = Claims {
            iss: &self.client_email,
            scope: SCOPE,
            aud,
            iat,
            exp: iat + ASSERTION_LIFETIME,
        };
        jsonwebtoken::encode(&header, &claims, key)
            .map_err(|e| format!("cannot sign the service-account assertion: {e}"))
    }

    async fn token(&self, pool: &Pool) -> Result<Fresh<HeaderValue>, String> {
        let key = self.key.as_ref().map_err(Clone::clone)?;
        let uri = self.token_uri.as_ref().map_err(Clone::clone)?;
        let assertion = self.assertion(key, &uri.to_string())?;
        let form = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let mut request = Request::new(Full::new(Bytes::from(form)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        let headers = request.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let exchange = async {
            let (response, _lease) = pool
                .send(request, &self.route, TIMEOUT)
                .await
                .map_err(|e| format!("the token endpoint could not be reached: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("the token answer could not be read: {e}"))?
                .to_bytes();
            if !status.is_success() {
                // Google's token errors (`invalid_grant`, …) name no secret; a short excerpt.
                let excerpt = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                return Err(format!("the token endpoint answered {status}: {excerpt}"));
            }
            Ok(body)
        };
        let body = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| format!("the token endpoint did not answer within {TIMEOUT:?}"))??;
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| "the token answer is not the JSON of an access token".to_owned())?;
        let mut value = HeaderValue::try_from(format!("Bearer {}", answer.access_token))
            .map_err(|_| "the access token is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        Ok(Fresh {
            value,
            lifetime: Duration::from_secs(answer.expires_in.unwrap_or(ASSERTION_LIFETIME)),
        })
    }
}

impl Source<HeaderValue> for ServiceAccountToken {
    fn fetch<'a>(&'a self, pool: &'a Pool) -> Fetching<'a, HeaderValue> {
        Box::pin(self.token(pool))
    }
}
