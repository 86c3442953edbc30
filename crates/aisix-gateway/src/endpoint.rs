//! The routes of the proxy port: which endpoint a method and path name, and what the gateway
//! needs to know of each. The endpoint enum is the one the metrics label
//! ([`aisix_obs::metrics::labels::Endpoint`]), so the two can never drift apart.

use http::Method;

pub use aisix_obs::metrics::labels::Endpoint;

use crate::error::{ErrorKind, GatewayError};
use crate::wire::Dialect;

/// The endpoint for `method path`, or the 404/405 to answer. `/livez` and `/readyz` are
/// [`Endpoint::Health`]; `/v1/models` and `/v1/models/{id}` are [`Endpoint::Models`].
pub fn resolve(method: &Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (endpoint, allowed) = match path {
        "/livez" | "/readyz" => (Endpoint::Health, Allowed::Get),
        "/v1/chat/completions" => (Endpoint::ChatCompletions, Allowed::Post),
        "/v1/completions" => (Endpoint::Completions, Allowed::Post),
        "/v1/embeddings" => (Endpoint::Embeddings, Allowed::Post),
        "/v1/messages" => (Endpoint::Messages, Allowed::Post),
        "/v1/messages/count_tokens" => (Endpoint::CountTokens, Allowed::Post),
        "/v1/models" => (Endpoint::Models, Allowed::Get),
        p if model_id(p).is_some() => (Endpoint::Models, Allowed::Get),
        _ => {
            return Err(GatewayError::new(
                ErrorKind::NotFound,
                format!("Unknown request URL: {method} {}.", truncate(path)),
            ));
        }
    };
    let ok = match allowed {
        Allowed::Get => method == Method::GET || method == Method::HEAD,
        Allowed::Post => method == Method::POST,
    };
    if ok {
        Ok(endpoint)
    } else {
        Err(GatewayError::new(
            ErrorKind::MethodNotAllowed,
            format!(
                "Method {method} is not allowed on {path}; use {}.",
                match allowed {
                    Allowed::Get => "GET",
                    Allowed::Post => "POST",
                }
            ),
        ))
    }
}

/// The `{id}` of `/v1/models/{id}`.
pub fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/models/").filter(|id| !id.is_empty())
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
            Endpoint::Health | Endpoint::Other => "",
        }
    }

    fn can_stream(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions | Endpoint::Completions | Endpoint::Messages
        )
    }

    fn dialect(self) -> Dialect {
        match self {
            Endpoint::Messages | Endpoint::CountTokens => Dialect::Anthropic,
            _ => Dialect::OpenAi,
        }
    }
}

enum Allowed {
    Get,
    Post,
}

/// Paths are echoed in errors; a huge one is cut.
fn truncate(path: &str) -> &str {
    match path.char_indices().nth(200) {
        Some((i, _)) => &path[..i],
        None => path,
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
        assert_eq!(
            resolve(&Method::POST, "/v1/messages"),
            Ok(Endpoint::Messages)
        );
        assert_eq!(
            resolve(&Method::POST, "/v1/messages/count_tokens"),
            Ok(Endpoint::CountTokens)
        );
        assert_eq!(Endpoint::Messages.dialect(), Dialect::Anthropic);
    }

    #[test]
    fn wrong_method_is_405_and_unknown_path_is_404() {
        let err = resolve(&Method::GET, "/v1/chat/completions").unwrap_err();
        assert_eq!(err.status(), 405);
        let err = resolve(&Method::POST, "/v2/nothing").unwrap_err();
        assert_eq!(err.status(), 404);
        assert_eq!(
            resolve(&Method::GET, "/v1/models/").unwrap_err().status(),
            404
        );
    }
}
