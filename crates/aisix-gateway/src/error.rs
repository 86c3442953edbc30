//! Gateway errors: typed where they happen, rendered once into the client's envelope. The
//! message a client sees never carries a secret or an upstream host; details for operators go
//! to the log.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

pub use aisix_obs::metrics::labels::AuthFailure;

use crate::body::GatewayBody;

/// Which side of the gateway a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

/// Every way a request can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No route for the path.
    NotFound,
    MethodNotAllowed,
    /// No key, unknown key, disabled key, expired key.
    Unauthorized(AuthFailure),
    ModelNotAllowed,
    ModelNotFound,
    InvalidJson,
    /// A required or known field is missing or has the wrong type.
    InvalidRequest,
    BodyTooLarge,
    /// The request body did not arrive in full within `downstream.request_body_timeout_secs`.
    RequestTimeout,
    /// Could not connect to, or talk to, the upstream.
    UpstreamUnavailable,
    UpstreamTimeout,
    /// The upstream answered 5xx.
    UpstreamServerError,
    /// The upstream answered 4xx; its status is passed through.
    UpstreamClientError(StatusCode),
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub kind: ErrorKind,
    /// Safe to show the client.
    pub message: String,
    /// The request field at fault, if any (`param` in the envelope).
    pub param: Option<&'static str>,
    /// Forwarded from an upstream 429/503.
    pub retry_after: Option<HeaderValue>,
    /// An upstream 4xx error object to pass through instead of our own (already scrubbed).
    pub upstream_body: Option<Bytes>,
}

impl GatewayError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
            upstream_body: None,
        }
    }

    pub fn with_param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    pub fn side(&self) -> Side {
        match self.kind {
            ErrorKind::UpstreamUnavailable
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamServerError
            | ErrorKind::UpstreamClientError(_) => Side::Upstream,
            ErrorKind::Internal => Side::Internal,
            _ => Side::Client,
        }
    }

    /// Whether trying again (here or on another target) may succeed.
    pub fn retryable(&self) -> bool {
        match self.kind {
            ErrorKind::UpstreamUnavailable
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamServerError => true,
            ErrorKind::UpstreamClientError(status) => status == StatusCode::TOO_MANY_REQUESTS,
            _ => false,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::NotFound | ErrorKind::ModelNotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ErrorKind::ModelNotAllowed => StatusCode::FORBIDDEN,
            ErrorKind::InvalidJson | ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorKind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::UpstreamUnavailable | ErrorKind::UpstreamServerError => {
                StatusCode::BAD_GATEWAY
            }
            ErrorKind::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::UpstreamClientError(status) => status,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI `error.type`.
    fn error_type(&self) -> &'static str {
        match self.kind {
            ErrorKind::Unauthorized(_)
            | ErrorKind::ModelNotAllowed
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::ModelNotFound
            | ErrorKind::InvalidJson
            | ErrorKind::InvalidRequest
            | ErrorKind::BodyTooLarge
            | ErrorKind::RequestTimeout => "invalid_request_error",
            ErrorKind::UpstreamClientError(status) if status == StatusCode::TOO_MANY_REQUESTS => {
                "rate_limit_error"
            }
            ErrorKind::UpstreamClientError(_) => "invalid_request_error",
            ErrorKind::UpstreamUnavailable
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamServerError => "upstream_error",
            ErrorKind::Internal => "server_error",
        }
    }

    /// The OpenAI `error.code`.
    pub fn code(&self) -> &'static str {
        match self.kind {
            ErrorKind::NotFound => "unknown_url",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Unauthorized(_) => "invalid_api_key",
            ErrorKind::ModelNotAllowed => "model_not_allowed",
            ErrorKind::ModelNotFound => "model_not_found",
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::BodyTooLarge => "request_too_large",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::UpstreamUnavailable => "upstream_unavailable",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::UpstreamServerError => "upstream_error",
            ErrorKind::UpstreamClientError(_) => "upstream_rejected",
            ErrorKind::Internal => "internal_error",
        }
    }

    /// The OpenAI error object, as JSON bytes.
    pub fn openai_error_object(&self) -> serde_json::Value {
        serde_json::json!({
            "message": self.message,
            "type": self.error_type(),
            "param": self.param,
            "code": self.code(),
        })
    }

    /// The OpenAI error envelope `{"error":{"message","type","param","code"}}`, with the status
    /// and headers that go with it. The one place errors become responses.
    pub fn to_response(&self) -> Response<GatewayBody> {
        let bytes = match &self.upstream_body {
            Some(body) => body.clone(),
            None => {
                Bytes::from(serde_json::json!({ "error": self.openai_error_object() }).to_string())
            }
        };
        let mut response = Response::new(GatewayBody::full(bytes));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(retry_after) = &self.retry_after {
            headers.insert(header::RETRY_AFTER, retry_after.clone());
        }
        if matches!(self.kind, ErrorKind::Unauthorized(_)) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_renders_the_openai_envelope_with_its_status() {
        let cases = [
            (ErrorKind::NotFound, 404),
            (ErrorKind::MethodNotAllowed, 405),
            (ErrorKind::Unauthorized(AuthFailure::Missing), 401),
            (ErrorKind::ModelNotAllowed, 403),
            (ErrorKind::ModelNotFound, 404),
            (ErrorKind::InvalidJson, 400),
            (ErrorKind::BodyTooLarge, 413),
            (ErrorKind::RequestTimeout, 408),
            (ErrorKind::UpstreamUnavailable, 502),
            (ErrorKind::UpstreamTimeout, 504),
            (ErrorKind::UpstreamServerError, 502),
            (
                ErrorKind::UpstreamClientError(StatusCode::UNPROCESSABLE_ENTITY),
                422,
            ),
        ];
        for (kind, status) in cases {
            let response = GatewayError::new(kind, "m").to_response();
            assert_eq!(response.status().as_u16(), status, "{kind:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        }
    }

    #[test]
    fn upstream_failures_are_retryable_and_client_failures_are_not() {
        assert!(GatewayError::new(ErrorKind::UpstreamTimeout, "").retryable());
        assert!(!GatewayError::new(ErrorKind::ModelNotFound, "").retryable());
        assert_eq!(
            GatewayError::new(ErrorKind::UpstreamServerError, "").side(),
            Side::Upstream
        );
    }
}
