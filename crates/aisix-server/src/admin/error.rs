//! The admin API's errors, turned into a status and `{"error": {...}}` in one place. Messages
//! name keys and fields, never a secret.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::types::{ErrorBody, ErrorDetail};

#[derive(Debug, thiserror::Error)]
pub(crate) enum AdminError {
    #[error("missing or wrong admin key")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    /// The change would leave resources the loader refuses: every error, each naming its key.
    #[error("refused: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("no {0}")]
    NotFound(String),
    /// A stale revision, an entry that exists already, or a file source.
    #[error("{0}")]
    Conflict(String),
    #[error("etcd is unavailable: {0}")]
    Unavailable(String),
}

impl AdminError {
    fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match self {
            AdminError::Unauthorized => (StatusCode::UNAUTHORIZED, "authentication_error"),
            AdminError::BadRequest(_) | AdminError::Invalid(_) => {
                (StatusCode::BAD_REQUEST, "invalid_request_error")
            }
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found_error"),
            AdminError::Conflict(_) => (StatusCode::CONFLICT, "conflict_error"),
            AdminError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable_error"),
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_kind();
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: kind.to_owned(),
            },
        };
        (status, Json(body)).into_response()
    }
}
