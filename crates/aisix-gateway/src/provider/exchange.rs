//! The HTTP half of every HTTP provider adapter: send a request through the worker's pool
//! within its deadlines, read bounded bodies, and map transport failures, timeouts and error
//! statuses to [`GatewayError`]s without leaking upstream bodies, hosts or credentials. What a
//! body means is left to each dialect's adapter.

use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::deadline::Deadlines;
use crate::error::{ErrorKind, GatewayError};
use crate::snapshot::Provider;
use crate::upstream::{ConnectError, Lease, Pool, SendError};

/// Largest non-streaming upstream body the gateway buffers (embeddings can be large).
pub(crate) const MAX_UPSTREAM_BODY: usize = 64 * 1024 * 1024;
/// Largest upstream error body read to relay its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// An upstream's answer whose head has arrived.
pub(crate) struct Head {
    pub response: Response<Incoming>,
    pub lease: Option<Lease>,
    /// From sending until the head arrived.
    pub waited: Duration,
}

/// An error status, its body read (bounded).
pub(crate) struct Rejection {
    pub status: StatusCode,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
}

/// Sends `request` to `provider` and waits for the response head by the first-byte deadline.
pub(crate) async fn send(
    pool: &Pool,
    provider: &Provider,
    request: Request<Full<Bytes>>,
    deadlines: &Deadlines,
) -> Result<Head, GatewayError> {
    let sent = Instant::now();
    let sending = pool.send(request, &provider.route, deadlines.connect);
    match tokio::time::timeout_at(deadlines.first_byte, sending).await {
        Ok(Ok((response, lease))) => Ok(Head {
            response,
            lease,
            waited: sent.elapsed(),
        }),
        Ok(Err(error)) => Err(transport_error(&provider.name, &error)),
        Err(_) => Err(timeout(&provider.name)),
    }
}

/// Reads a whole body of at most `limit` bytes by `deadline`; hands the connection back when
/// it was read to the end.
pub(crate) async fn read_body(
    body: Incoming,
    lease: Option<Lease>,
    limit: usize,
    deadline: Instant,
    provider: &str,
) -> Result<Bytes, GatewayError> {
    match tokio::time::timeout_at(deadline, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => {
            if let Some(lease) = lease {
                lease.release();
            }
            Ok(collected.to_bytes())
        }
        Ok(Err(error)) => {
            tracing::warn!(provider, %error, "upstream response body failed");
            Err(GatewayError::new(
                ErrorKind::UpstreamUnavailable,
                "The upstream provider's response was cut off.",
            ))
        }
        Err(_) => Err(timeout(provider)),
    }
}

/// Reads an error status's body (what arrives of it by `deadline`, bounded).
pub(crate) async fn rejection(head: Head, deadline: Instant, provider: &str) -> Rejection {
    let status = head.response.status();
    let retry_after = head.response.headers().get(RETRY_AFTER).cloned();
    let body = read_body(
        head.response.into_body(),
        head.lease,
        MAX_ERROR_BODY,
        deadline,
        provider,
    )
    .await
    .unwrap_or_default();
    tracing::warn!(
        provider,
        status = status.as_u16(),
        "upstream answered with an error status"
    );
    Rejection {
        status,
        retry_after,
        body,
    }
}

impl Rejection {
    /// The error for this status: 5xx (and anything else that is not 4xx) becomes 502 with our
    /// own message; 4xx keeps its status, with a message of its own for 401/403, which are
    /// about the gateway's provider key and which the client cannot act on. The adapter adds
    /// the provider's error object for other 4xx, in the client's dialect.
    pub(crate) fn error(&self) -> GatewayError {
        let status = self.status;
        let mut error = if status.is_client_error() {
            let message = if matches!(status.as_u16(), 401 | 403) {
                "The upstream provider rejected the gateway's credentials.".to_owned()
            } else {
                format!(
                    "The upstream provider rejected the request (status {}).",
                    status.as_u16()
                )
            };
            GatewayError::new(ErrorKind::UpstreamClientError(status), message)
        } else {
            GatewayError::new(
                ErrorKind::UpstreamServerError(status),
                format!("The upstream provider failed (status {}).", status.as_u16()),
            )
        };
        error.retry_after = self.retry_after.clone();
        error
    }

    /// Whether the provider's own error object may be shown to the client.
    pub(crate) fn passes_through(&self) -> bool {
        self.status.is_client_error() && !matches!(self.status.as_u16(), 401 | 403)
    }
}

fn transport_error(provider: &str, error: &SendError) -> GatewayError {
    tracing::warn!(provider, %error, "upstream request failed");
    let message = match error {
        SendError::Connect(ConnectError::TimedOut) => {
            "The gateway could not connect to the upstream provider in time."
        }
        SendError::Connect(ConnectError::Failed(_)) => {
            "The gateway could not connect to the upstream provider."
        }
        SendError::Request(_) => "The connection to the upstream provider failed.",
    };
    GatewayError::new(ErrorKind::UpstreamUnavailable, message)
}

fn timeout(provider: &str) -> GatewayError {
    tracing::warn!(provider, "upstream request timed out");
    GatewayError::new(
        ErrorKind::UpstreamTimeout,
        "The upstream provider did not answer in time.",
    )
}
