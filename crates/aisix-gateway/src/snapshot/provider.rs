//! A provider key made ready to send: its credential and static headers (marked sensitive),
//! the masks of every value the gateway adds, its egress route and its health-check URI.

use std::borrow::Cow;
use std::sync::Arc;

use aisix_config::{DEFAULT_ANTHROPIC_VERSION, HealthCheck, ProviderKey, ProviderKind};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use super::credential::Refreshed;
use super::uris::{EndpointUris, percent_encoded};
use crate::error::GatewayError;
use crate::mask::Masks;
use crate::upstream::egress::{Egress, Route};
use crate::upstream::sigv4::Signer;

/// A provider key as the request path uses it: where to send, with which credential.
#[derive(Debug)]
pub struct Provider {
    /// The provider key's display name (a metric label; never the key).
    pub name: Arc<str>,
    pub kind: ProviderKind,
    /// The provider key's `api_base` joined with each endpoint's path, parsed once.
    pub uris: Arc<EndpointUris>,
    /// The headers each request to it starts from: the gateway's own and its own
    /// ([`Provider::headers`]).
    pub(crate) heads: crate::upstream::head::Heads,
    /// The provider key itself, to scrub it from the error bodies the provider sends back.
    pub secret: Option<Box<str>>,
    /// Every value the gateway adds (the key and each `headers` value), masked in whatever
    /// the provider sends back that reaches a client or a log.
    pub(crate) masks: Masks,
    /// Whether streams ask for `stream_options.include_usage`.
    pub stream_usage: bool,
    /// Whether it bills the prompt of a request it answers with an error status.
    pub bill_prompt_on_error: bool,
    /// Whether it serves the Responses API itself (else `/v1/responses` is translated).
    pub responses: bool,
    /// `anthropic` only: the `anthropic-version` sent when the client sent none.
    pub anthropic_version: HeaderValue,
    /// Directly, or through the proxy the environment names.
    pub(crate) route: Route,
    /// Its active health check, if the key has one, and the model list it requests
    /// (`None` for a base that is no URI: the `mock` provider's).
    pub(crate) health_check: Option<(HealthCheck, Uri)>,
    /// `vertex`: the `Authorization` header refreshed off the request path.
    pub(crate) credential: Option<Arc<Refreshed<HeaderValue>>>,
    /// `bedrock` only: signs each request with the key's AWS credentials (`None` when neither
    /// the key nor the environment gave any: its requests fail with a clear error).
    pub(crate) signer: Option<Signer>,
    /// `bedrock` without keys of its own or in the environment, with a web identity: the
    /// signer of its temporary keys, refreshed off the request path.
    pub(crate) assumed: Option<Arc<Refreshed<Arc<Signer>>>>,
}

/// The cheapest request that proves a key works: the provider's model list.
/// `{api_base}/models` (OpenAI and compatible servers), `{api_base}/v1/models` (Anthropic),
/// `{api_base}/openai/models?api-version=…` (Azure), with `api_base`'s query string kept.
fn health_uri(key: &ProviderKey) -> Option<Uri> {
    let (base, query) = match key.api_base.split_once('?') {
        Some((base, query)) => (base, Some(query.to_owned())),
        None => (key.api_base.as_str(), None),
    };
    let (path, extra) = match key.provider {
        ProviderKind::OpenAi | ProviderKind::Mock => ("/models", None),
        ProviderKind::Anthropic => ("/v1/models", None),
        ProviderKind::Gemini => ("/models", None),
        // Vertex has no model list under a project; its check is left out.
        ProviderKind::Vertex => return None,
        // Bedrock's model list is on another host (`bedrock.{region}`) and signed: no check.
        ProviderKind::Bedrock => return None,
        ProviderKind::AzureOpenAi => (
            "/openai/models",
            key.api_version
                .as_deref()
                .map(|v| format!("api-version={}", percent_encoded(v))),
        ),
    };
    let query = match (query, extra) {
        (Some(a), Some(b)) => format!("?{a}&{b}"),
        (Some(q), None) | (None, Some(q)) => format!("?{q}"),
        (None, None) => String::new(),
    };
    format!("{base}{path}{query}").parse().ok()
}

impl Provider {
    /// Headers every request to this provider carries: its credential (`Authorization: Bearer`,
    /// `api-key` for Azure, `x-goog-api-key` for Gemini) and its static `headers`, all marked
    /// sensitive so hyper never logs them.
    pub fn headers(&self) -> &HeaderMap {
        self.heads.provider()
    }

    /// `error` with every value the gateway adds to this provider's requests masked: the
    /// static ones ([`Masks`]) and the credential refreshed off the request path as it is now
    /// (a Vertex token, a web identity's temporary AWS keys), which no static mask knows.
    pub(crate) fn mask_error(&self, error: GatewayError) -> GatewayError {
        let error = self.masks.error(error);
        match self.refreshed_masks() {
            Some(refreshed) => refreshed.error(error),
            None => error,
        }
    }

    /// `text` with every value the gateway adds masked, as [`Provider::mask_error`] does.
    pub(crate) fn mask_text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(refreshed) = self.refreshed_masks() else {
            return self.masks.text(text);
        };
        match self.masks.text(text) {
            Cow::Borrowed(text) => refreshed.text(text),
            Cow::Owned(text) => Cow::Owned(refreshed.text(&text).into_owned()),
        }
    }

    /// The masks of the refreshed credential's current values (an expired one included: it
    /// may still be echoed), built only on an error's path; `None` without one.
    fn refreshed_masks(&self) -> Option<Masks> {
        let mut values: Vec<String> = Vec::new();
        if let Some(header) = self.credential.as_ref().and_then(|cell| cell.peek())
            && let Ok(header) = header.to_str()
        {
            values.push(header.to_owned());
            if let Some(token) = header.strip_prefix("Bearer ") {
                values.push(token.to_owned());
            }
        }
        if let Some(signer) = self.assumed.as_ref().and_then(|cell| cell.peek()) {
            values.extend(signer.secrets());
        }
        (!values.is_empty()).then(|| Masks::new(values.iter().map(String::as_str)))
    }

    /// The key to scrub from an error the provider sends back, whole or mid-stream (keys
    /// shorter than 8 characters are not looked for: they would match ordinary text).
    pub(crate) fn error_secret(&self) -> Option<&str> {
        self.secret.as_deref().filter(|k| k.len() >= 8)
    }

    pub(super) fn new(
        key: &ProviderKey,
        egress: &Egress,
        credential: Option<Arc<Refreshed<HeaderValue>>>,
        assumed: Option<Arc<Refreshed<Arc<Signer>>>>,
    ) -> Self {
        let (uris, auth_header, auth_value) = match key.provider {
            ProviderKind::AzureOpenAi => (
                EndpointUris::default(),
                HeaderName::from_static("api-key"),
                key.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            ProviderKind::Gemini => (
                EndpointUris::default(),
                HeaderName::from_static("x-goog-api-key"),
                key.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            // Its token is `credential`'s, added to each request.
            ProviderKind::Vertex => (EndpointUris::default(), http::header::AUTHORIZATION, None),
            // Signed per request: no credential header.
            ProviderKind::Bedrock => (EndpointUris::default(), http::header::AUTHORIZATION, None),
            ProviderKind::Anthropic => (
                EndpointUris::new(&key.api_base, "", None),
                HeaderName::from_static("x-api-key"),
                key.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            ProviderKind::OpenAi | ProviderKind::Mock => (
                EndpointUris::new(&key.api_base, "", None),
                http::header::AUTHORIZATION,
                key.api_key
                    .as_ref()
                    .map(|k| format!("Bearer {}", k.expose())),
            ),
        };
        let mut headers = HeaderMap::new();
        let sensitive = |value: &str| {
            let mut value = HeaderValue::try_from(value).ok()?;
            value.set_sensitive(true);
            Some(value)
        };
        for (name, value) in &key.headers {
            // Validated at load; a header that still does not parse is left out.
            if let (Ok(name), Some(value)) = (
                HeaderName::try_from(name.as_str()),
                sensitive(value.expose()),
            ) {
                headers.append(name, value);
            }
        }
        if let Some(value) = auth_value.as_deref().and_then(sensitive) {
            headers.insert(auth_header, value);
        }
        let health_check = key.health_check.zip(health_uri(key));
        let aws = (key.provider == ProviderKind::Bedrock).then(|| aws_credentials(key));
        let signer = aws.as_ref().and_then(|aws| {
            let Some((id, secret, token)) = aws else {
                if assumed.is_some() {
                    return None;
                }
                tracing::warn!(
                    provider = %key.display_name,
                    "bedrock key has no AWS credentials (neither access_key_id in the resources nor AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment): its requests will fail"
                );
                return None;
            };
            Some(Signer::new(
                id,
                secret,
                token.as_deref(),
                key.region.as_deref().unwrap_or_default(),
                "bedrock",
            ))
        });
        let aws_secrets = aws.iter().flatten().flat_map(|(id, secret, token)| {
            [Some(id.as_str()), Some(secret.as_str()), token.as_deref()]
                .into_iter()
                .flatten()
        });
        // The route depends only on the scheme and host, the same for every endpoint.
        let base = key.api_base.parse::<Uri>().ok();
        let route = base.as_ref().map_or(Route::Direct, |uri| egress.route(uri));
        Self {
            name: key.display_name.as_str().into(),
            kind: key.provider,
            uris: Arc::new(uris),
            heads: crate::upstream::head::Heads::new(headers, base.as_ref()),
            secret: key.api_key.as_ref().map(|k| k.expose().into()).or_else(|| {
                aws.iter()
                    .flatten()
                    .map(|(_, secret, _)| secret.as_str().into())
                    .next()
            }),
            masks: Masks::new(
                key.api_key
                    .iter()
                    .chain(key.headers.iter().map(|(_, value)| value))
                    .map(|secret| secret.expose())
                    .chain(aws_secrets),
            ),
            stream_usage: key.stream_usage,
            bill_prompt_on_error: key.bill_prompt_on_error,
            responses: key.responses,
            health_check,
            anthropic_version: key
                .anthropic_version
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok())
                .unwrap_or_else(|| HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION)),
            route,
            credential,
            signer,
            assumed,
        }
    }
}

/// A `bedrock` key's credentials: its own, else `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
/// and `AWS_SESSION_TOKEN` from the environment, read once here (never on a request).
fn aws_credentials(key: &ProviderKey) -> Option<(String, String, Option<String>)> {
    if let Some(aws) = &key.aws {
        return Some((
            aws.access_key_id.expose().to_owned(),
            aws.secret_access_key.expose().to_owned(),
            aws.session_token.as_ref().map(|t| t.expose().to_owned()),
        ));
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Some((
        var("AWS_ACCESS_KEY_ID")?,
        var("AWS_SECRET_ACCESS_KEY")?,
        var("AWS_SESSION_TOKEN"),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::error::ErrorKind;
    use crate::snapshot::credential::Refreshed;

    /// An `openai` provider key (key `sk-static-key-1234`) with `edit` applied.
    fn provider(edit: impl FnOnce(&mut Provider)) -> Provider {
        let shared = crate::testing::provider("sk-static-key-1234");
        let mut provider = Arc::try_unwrap(shared).expect("the snapshot is gone");
        edit(&mut provider);
        provider
    }

    fn echoed(secrets: &[&str]) -> GatewayError {
        let mut error = GatewayError::new(
            ErrorKind::UpstreamServerError(http::StatusCode::BAD_GATEWAY),
            format!("the upstream said: {}", secrets.join(" ")),
        );
        error.upstream_body = Some(Bytes::from(format!(
            r#"{{"error":{{"message":"bad credential {}"}}}}"#,
            secrets.join(", ")
        )));
        error
    }

    fn body(error: &GatewayError) -> String {
        String::from_utf8(error.upstream_body.clone().unwrap().to_vec()).unwrap()
    }

    #[test]
    fn a_refreshed_vertex_token_is_masked_beside_the_static_key_expired_or_not() {
        let token = "ya29.refreshed-token-value";
        for lifetime in [Duration::from_secs(3600), Duration::ZERO] {
            let provider = provider(|p| {
                let header = HeaderValue::try_from(format!("Bearer {token}")).unwrap();
                p.credential = Some(Arc::new(Refreshed::holding("vtx", header, lifetime)));
            });
            let masked = provider.mask_error(echoed(&[token, "sk-static-key-1234"]));
            for text in [masked.message.clone(), body(&masked)] {
                assert!(
                    !text.contains(token) && !text.contains("sk-static"),
                    "{text}"
                );
                assert!(text.contains("***"), "{text}");
            }
            assert_eq!(
                provider.mask_text(&format!("Authorization: Bearer {token}")),
                "Authorization: ***"
            );
        }
    }

    #[test]
    fn a_web_identity_s_temporary_keys_are_masked() {
        let (id, secret, session) = (
            "ASIATEMPORARYKEYID",
            "temporary/secret+key",
            "FwoGZXIvYXdzEtoken",
        );
        let provider = provider(|p| {
            let signer = Signer::new(id, secret, Some(session), "us-east-1", "bedrock");
            p.assumed = Some(Arc::new(Refreshed::holding(
                "bedrock",
                Arc::new(signer),
                Duration::from_secs(900),
            )));
        });
        let masked = provider.mask_error(echoed(&[id, secret, session]));
        for text in [masked.message.clone(), body(&masked)] {
            for value in [id, secret, session] {
                assert!(!text.contains(value), "{value} in {text}");
            }
        }
        assert_eq!(provider.mask_text("nothing secret"), "nothing secret");
    }

    #[test]
    fn without_a_refreshed_credential_only_the_static_values_are_masked() {
        let provider = provider(|_| {});
        let masked = provider.mask_error(echoed(&["sk-static-key-1234", "ya29.not-ours-at-all"]));
        assert!(!masked.message.contains("sk-static-key-1234"));
        assert!(masked.message.contains("ya29.not-ours-at-all"));
        assert!(matches!(provider.mask_text("plain"), Cow::Borrowed(_)));
    }
}
