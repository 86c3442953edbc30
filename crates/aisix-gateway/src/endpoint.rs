//! The routes of the proxy port: which endpoint a method and path name.

use aisix_obs::metrics::labels::Endpoint as EndpointLabel;
use http::Method;

use crate::error::{ErrorKind, GatewayError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Livez,
    Readyz,
    ChatCompletions,
    Completions,
    Embeddings,
    Models,
    /// `GET /v1/models/{id}`.
    Model,
}

impl Endpoint {
    /// The endpoint for `method path`, or the 404/405 to answer.
    pub fn resolve(method: &Method, path: &str) -> Result<Self, GatewayError> {
        let (endpoint, allowed) = match path {
            "/livez" => (Endpoint::Livez, Allowed::Get),
            "/readyz" => (Endpoint::Readyz, Allowed::Get),
            "/v1/chat/completions" => (Endpoint::ChatCompletions, Allowed::Post),
            "/v1/completions" => (Endpoint::Completions, Allowed::Post),
            "/v1/embeddings" => (Endpoint::Embeddings, Allowed::Post),
            "/v1/models" => (Endpoint::Models, Allowed::Get),
            p if p.starts_with("/v1/models/") && p.len() > "/v1/models/".len() => {
                (Endpoint::Model, Allowed::Get)
            }
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

    /// The path appended to a provider's `api_base` (which ends in `/v1`).
    pub fn upstream_path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Models | Endpoint::Model => "/models",
            Endpoint::Livez | Endpoint::Readyz => "",
        }
    }

    /// Whether `"stream": true` makes this endpoint answer with SSE.
    pub fn can_stream(self) -> bool {
        matches!(self, Endpoint::ChatCompletions | Endpoint::Completions)
    }

    /// The `endpoint` metric label.
    pub fn label(self) -> EndpointLabel {
        match self {
            Endpoint::Livez | Endpoint::Readyz => EndpointLabel::Health,
            Endpoint::ChatCompletions => EndpointLabel::ChatCompletions,
            Endpoint::Completions => EndpointLabel::Completions,
            Endpoint::Embeddings => EndpointLabel::Embeddings,
            Endpoint::Models | Endpoint::Model => EndpointLabel::Models,
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
            Endpoint::resolve(&Method::POST, "/v1/chat/completions"),
            Ok(Endpoint::ChatCompletions)
        );
        assert_eq!(
            Endpoint::resolve(&Method::GET, "/v1/models"),
            Ok(Endpoint::Models)
        );
        assert_eq!(
            Endpoint::resolve(&Method::GET, "/v1/models/gpt-4o"),
            Ok(Endpoint::Model)
        );
        assert_eq!(
            Endpoint::resolve(&Method::HEAD, "/livez"),
            Ok(Endpoint::Livez)
        );
    }

    #[test]
    fn wrong_method_is_405_and_unknown_path_is_404() {
        let err = Endpoint::resolve(&Method::GET, "/v1/chat/completions").unwrap_err();
        assert_eq!(err.status(), 405);
        let err = Endpoint::resolve(&Method::POST, "/v2/nothing").unwrap_err();
        assert_eq!(err.status(), 404);
        assert_eq!(
            Endpoint::resolve(&Method::GET, "/v1/models/")
                .unwrap_err()
                .status(),
            404
        );
    }
}
