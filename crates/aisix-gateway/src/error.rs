//! Gateway errors: typed where they happen, rendered once into the client's envelope. Details
//! for operators go to the log; the client gets a message that never carries a secret.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::GatewayBody;

/// Which side of the gateway a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    MethodNotAllowed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub kind: ErrorKind,
    pub message: String,
}

impl GatewayError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn side(&self) -> Side {
        match self.kind {
            ErrorKind::NotFound | ErrorKind::MethodNotAllowed => Side::Client,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    fn openai_type(&self) -> &'static str {
        "invalid_request_error"
    }

    fn code(&self) -> Option<&'static str> {
        match self.kind {
            ErrorKind::NotFound => Some("not_found"),
            ErrorKind::MethodNotAllowed => Some("method_not_allowed"),
        }
    }

    /// The OpenAI error envelope `{"error":{"message","type","param","code"}}`.
    pub fn to_response(&self) -> Response<GatewayBody> {
        let body = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.openai_type(),
                "param": null,
                "code": self.code(),
            }
        });
        let bytes = Bytes::from(body.to_string());
        let mut response = Response::new(GatewayBody::full(bytes));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
