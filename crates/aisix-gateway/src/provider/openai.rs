//! The OpenAI-compatible upstream: builds the upstream request from scratch (only the gateway's
//! own headers and the provider key travel; nothing of the client's), sends it through the
//! worker's pool, and maps every failure to a [`GatewayError`] without leaking upstream bodies,
//! hosts or credentials.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::deadline::Deadlines;
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::snapshot::{ModelRoute, Target};
use crate::upstream::{ConnectError, Lease, Pool, SendError};

/// Largest non-streaming upstream body the gateway buffers (embeddings can be large).
const MAX_UPSTREAM_BODY: usize = 64 * 1024 * 1024;
/// Largest upstream error body read to relay its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

static GATEWAY_AGENT: HeaderValue =
    HeaderValue::from_static(concat!("aisix/", env!("CARGO_PKG_VERSION")));

/// The upstream's successful answer: a whole body, or a stream still arriving.
pub(crate) enum Reply {
    Complete {
        content_type: HeaderValue,
        body: Bytes,
    },
    Stream(Response<Incoming>, Option<Lease>),
}

/// Sends `body` to the route's target for `endpoint` and waits for the head (streams) or the
/// whole body (everything else): the head by the first-byte deadline, the body by the end.
pub(crate) async fn call(
    pool: &Pool,
    route: &ModelRoute,
    endpoint: Endpoint,
    body: Bytes,
    stream: bool,
    request_id: &HeaderValue,
    deadlines: &Deadlines,
) -> Result<(StatusCode, Reply), GatewayError> {
    let target = &*route.target;
    let deadline = deadlines.end;
    let Some(uri) = route.uris.get(endpoint) else {
        tracing::error!(provider = %target.name, "api_base is not a usable URI");
        return Err(GatewayError::new(
            ErrorKind::Internal,
            "The gateway could not build the upstream request.",
        ));
    };
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(
            ACCEPT,
            HeaderValue::from_static(if stream { "text/event-stream" } else { "application/json" }),
        )
        .header(USER_AGENT, GATEWAY_AGENT.clone())
        .header("x-request-id", request_id.clone())
        .body(Full::new(body))
        .map_err(|e| {
            tracing::error!(provider = %target.name, error = %e, "cannot build the upstream request");
            GatewayError::new(ErrorKind::Internal, "The gateway could not build the upstream request.")
        })?;
    for (name, value) in &target.headers {
        request.headers_mut().insert(name, value.clone());
    }

    let sending = pool.send(request, &target.route, deadlines.connect);
    let (response, lease) = match tokio::time::timeout_at(deadlines.first_byte, sending).await {
        Ok(Ok(sent)) => sent,
        Ok(Err(error)) => return Err(transport_error(&target.name, &error)),
        Err(_) => return Err(timeout(&target.name)),
    };
    let status = response.status();
    if !status.is_success() {
        return Err(upstream_status(target, response, lease, deadline).await);
    }
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if stream && is_sse {
        return Ok((status, Reply::Stream(response, lease)));
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("application/json"));
    let body = read_body(
        response.into_body(),
        MAX_UPSTREAM_BODY,
        deadline,
        &target.name,
    )
    .await?;
    if let Some(lease) = lease {
        lease.release();
    }
    Ok((status, Reply::Complete { content_type, body }))
}

async fn read_body(
    body: Incoming,
    limit: usize,
    deadline: Instant,
    provider: &str,
) -> Result<Bytes, GatewayError> {
    match tokio::time::timeout_at(deadline, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
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

/// Maps an upstream error status. 5xx becomes 502 with our own message; 4xx keeps its status
/// and the provider's error object, unless it concerns the provider credentials (401/403),
/// which the client cannot act on and must not learn about.
async fn upstream_status(
    target: &Target,
    response: Response<Incoming>,
    lease: Option<Lease>,
    deadline: Instant,
) -> GatewayError {
    let status = response.status();
    let retry_after = response.headers().get(RETRY_AFTER).cloned();
    let body = match read_body(response.into_body(), MAX_ERROR_BODY, deadline, &target.name).await {
        Ok(body) => {
            // Read to the end: the connection can serve the next request.
            if let Some(lease) = lease {
                lease.release();
            }
            body
        }
        Err(_) => Bytes::new(),
    };
    tracing::warn!(provider = %target.name, status = status.as_u16(), "upstream answered with an error status");

    let mut error = if status.is_server_error() || !status.is_client_error() {
        GatewayError::new(
            ErrorKind::UpstreamServerError,
            format!("The upstream provider failed (status {}).", status.as_u16()),
        )
    } else {
        let mut error = GatewayError::new(
            ErrorKind::UpstreamClientError(status),
            format!(
                "The upstream provider rejected the request (status {}).",
                status.as_u16()
            ),
        );
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            error.message = "The upstream provider rejected the gateway's credentials.".to_owned();
        } else {
            error.upstream_body = openai_error_body(&body, target);
        }
        error
    };
    error.retry_after = retry_after;
    error
}

/// The provider's `{"error": {...}}` body if it is one, with the provider key scrubbed.
fn openai_error_body(body: &[u8], target: &Target) -> Option<Bytes> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if !value.get("error").is_some_and(serde_json::Value::is_object) {
        return None;
    }
    let text = value.to_string();
    let secret = target.secret.as_deref().filter(|k| k.len() >= 8);
    Some(Bytes::from(match secret {
        Some(key) => text.replace(key, "***"),
        None => text,
    }))
}
