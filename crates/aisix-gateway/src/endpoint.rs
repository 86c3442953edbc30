//! The routes of the proxy port: which endpoint a method and path name, and what the gateway
//! needs to know of each. The endpoint enum is the one the metrics label
//! ([`aisix_obs::metrics::labels::Endpoint`]), so the two can never drift apart.

use http::Method;

pub use aisix_obs::metrics::labels::Endpoint;

use crate::error::{Allow, ErrorKind, GatewayError, echo};
use crate::wire::Dialect;

/// The endpoint for `method path`, or the 404/405 to answer. `/`, `/livez` and `/readyz` are
/// [`Endpoint::Health`] (clients such as Claude Code probe `HEAD /`); `/v1/models` and `/v1/models/{id}` are [`Endpoint::Models`].
pub fn resolve(method: &Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (endpoint, allowed) = match path {
        "/" | "/livez" | "/readyz" => (Endpoint::Health, Allow::GetHead),
        "/v1/chat/completions" => (Endpoint::ChatCompletions, Allow::Post),
        "/v1/completions" => (Endpoint::Completions, Allow::Post),
        "/v1/embeddings" => (Endpoint::Embeddings, Allow::Post),
        "/v1/messages" => (Endpoint::Messages, Allow::Post),
        "/v1/messages/count_tokens" => (Endpoint::CountTokens, Allow::Post),
        "/v1/responses" => (Endpoint::Responses, Allow::Post),
        "/v1/models" => (Endpoint::Models, Allow::GetHead),
        p if model_id(p).is_some() => (Endpoint::Models, Allow::GetHead),
        p => match stored_response(p) {
            Some((_, false)) => (Endpoint::Responses, Allow::GetDelete),
            Some((_, true)) => (Endpoint::Responses, Allow::GetHead),
            None => {
                return Err(GatewayError::new(
                    ErrorKind::NotFound,
                    format!(
                        "Unknown request URL: {} {}.",
                        echo(method.as_str()),
                        echo(path)
                    ),
                ));
            }
        },
    };
    let ok = match allowed {
        Allow::GetHead => method == Method::GET || method == Method::HEAD,
        Allow::Post => method == Method::POST,
        Allow::GetDelete => method == Method::GET || method == Method::DELETE,
    };
    if ok {
        Ok(endpoint)
    } else {
        Err(GatewayError::new(
            ErrorKind::MethodNotAllowed(allowed),
            format!(
                "Method {} is not allowed on {}; use {}.",
                echo(method.as_str()),
                echo(path),
                allowed.as_str()
            ),
        ))
    }
}

/// The `{id}` of `/v1/models/{id}`.
pub fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/models/").filter(|id| !id.is_empty())
}

/// The `{id}` of `/v1/responses/{id}` (`false`) or `/v1/responses/{id}/input_items` (`true`).
pub fn stored_response(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix("/v1/responses/")?;
    let (id, items) = match rest.strip_suffix("/input_items") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    (!id.is_empty() && !id.contains('/')).then_some((id, items))
}

/// What the gateway needs to know of an endpoint it proxies.
pub trait Proxied {
    /// The path appended to a provider's `api_base` (which ends in `/v1` for OpenAI's
    /// endpoints, and is the bare origin for Anthropic's).
    fn upstream_path(self) -> &'static str;
    /// Whether `"stream": true` makes this endpoint answer with SSE.
    fn can_stream(self) -> bool;
    /// The wire format clients speak on this endpoint.
    fn dialect(self) -> Dialect;
}

impl Proxied for Endpoint {
    fn upstream_path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Models => "/models",
            Endpoint::Messages => "/v1/messages",
            Endpoint::CountTokens => "/v1/messages/count_tokens",
            Endpoint::Responses => "/responses",
            Endpoint::Health | Endpoint::Other => "",
        }
    }

    fn can_stream(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions
                | Endpoint::Completions
                | Endpoint::Messages
                | Endpoint::Responses
        )
    }

    fn dialect(self) -> Dialect {
        match self {
            Endpoint::Messages | Endpoint::CountTokens => Dialect::Anthropic,
            Endpoint::Responses => Dialect::Responses,
            _ => Dialect::OpenAi,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_paths_resolve_with_their_method() {
        assert_eq!(
            resolve(&Method::POST, "/v1/chat/completions"),
            Ok(Endpoint::ChatCompletions)
        );
        assert_eq!(resolve(&Method::GET, "/v1/models"), Ok(Endpoint::Models));
        assert_eq!(
            resolve(&Method::GET, "/v1/models/gpt-4o"),
            Ok(Endpoint::Models)
        );
        assert_eq!(model_id("/v1/models/gpt-4o"), Some("gpt-4o"));
        assert_eq!(resolve(&Method::HEAD, "/livez"), Ok(Endpoint::Health));
        assert_eq!(resolve(&Method::HEAD, "/"), Ok(Endpoint::Health));
        assert_eq!(resolve(&Method::GET, "/"), Ok(Endpoint::Health));
        assert_eq!(
            resolve(&Method::POST, "/v1/messages"),
            Ok(Endpoint::Messages)
        );
        assert_eq!(
            resolve(&Method::POST, "/v1/messages/count_tokens"),
            Ok(Endpoint::CountTokens)
        );
        assert_eq!(Endpoint::Messages.dialect(), Dialect::Anthropic);
        assert_eq!(
            resolve(&Method::POST, "/v1/responses"),
            Ok(Endpoint::Responses)
        );
        assert_eq!(Endpoint::Responses.dialect(), Dialect::Responses);
        assert_eq!(
            resolve(&Method::DELETE, "/v1/responses/resp_1"),
            Ok(Endpoint::Responses)
        );
        assert_eq!(
            resolve(&Method::GET, "/v1/responses/resp_1/input_items"),
            Ok(Endpoint::Responses)
        );
        assert_eq!(
            stored_response("/v1/responses/resp_1/input_items"),
            Some(("resp_1", true))
        );
        assert_eq!(stored_response("/v1/responses/"), None);
        assert_eq!(stored_response("/v1/responses/a/b"), None);
        let err = resolve(&Method::POST, "/v1/responses/resp_1").unwrap_err();
        assert_eq!(err.kind, ErrorKind::MethodNotAllowed(Allow::GetDelete));
    }

    #[test]
    fn a_huge_method_or_path_is_echoed_cut() {
        let method = Method::from_bytes("X".repeat(10_000).as_bytes()).unwrap();
        let err = resolve(&method, "/v1/chat/completions").unwrap_err();
        assert!(err.message.len() < 400, "{}", err.message);
        assert!(err.message.contains("… (cut)"));
        let path = format!("/{}", "p".repeat(10_000));
        let err = resolve(&Method::GET, &path).unwrap_err();
        assert!(err.message.len() < 400, "{}", err.message);
        assert!(err.message.contains("… (cut)"));
    }

    #[test]
    fn wrong_method_is_405_and_unknown_path_is_404() {
        let err = resolve(&Method::GET, "/v1/chat/completions").unwrap_err();
        assert_eq!(err.status(), 405);
        assert_eq!(err.kind, ErrorKind::MethodNotAllowed(Allow::Post));
        let err = resolve(&Method::POST, "/v1/models").unwrap_err();
        assert_eq!(err.kind, ErrorKind::MethodNotAllowed(Allow::GetHead));
        let err = resolve(&Method::POST, "/v2/nothing").unwrap_err();
        assert_eq!(err.status(), 404);
        assert_eq!(
            resolve(&Method::GET, "/v1/models/").unwrap_err().status(),
            404
        );
    }
}
