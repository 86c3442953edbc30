//! The HTTP half of every HTTP provider adapter: send a request through the worker's pool
//! within its deadlines, read bounded bodies, and map transport failures, timeouts and error
//! statuses to [`GatewayError`]s without leaking upstream bodies, hosts or credentials; and the
//! steps every HTTP adapter takes with a [`Call`] (send, hold a whole answer, relay one). What
//! a body means is left to each dialect's adapter.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::{Answer, Call, StreamMap, Unary};
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::limit::memory_budget::{Held, MemoryBudget};
use crate::pieces::Pieces;
use crate::request::deadline::Deadlines;
use crate::snapshot::Provider;
use crate::target::refusal;
use crate::upstream::pool::{ConnectError, Lease, Pool, SendError};
use crate::wire::anthropic::response::Malformed;
use crate::wire::usage::Usage;
use crate::wire::{Dialect, chunk};

/// Largest upstream error body read to relay its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The upstream request: built from scratch, so only the gateway's own headers, `extra` (what
/// the adapter forwards of the client's) and the provider's (its credential and static
/// headers, which win) travel.
fn request(
    provider: &Provider,
    uri: &Uri,
    body: Bytes,
    stream: bool,
    request_id: &HeaderValue,
    context: Option<&crate::otel::Outgoing>,
    extra: &HeaderMap,
) -> Request<Full<Bytes>> {
    let context = context.map(|c| crate::upstream::head::TraceContext {
        traceparent: &c.traceparent,
        tracestate: c.tracestate.as_ref(),
    });
    let headers = provider
        .heads
        .headers(uri, &body, stream, request_id, context, extra);
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    *request.headers_mut() = headers;
    request
}

/// The error for a provider whose `api_base` gave no URI for an endpoint.
fn no_uri(provider: &Provider) -> GatewayError {
    tracing::error!(provider = %provider.name, "api_base is not a usable URI");
    GatewayError::new(
        ErrorKind::Internal,
        "The gateway could not build the upstream request.",
    )
}

/// Whether a response's `Content-Type` says it is an event stream.
fn is_sse(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The Unix time now, for the `created` of translated answers.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An upstream's answer whose head has arrived.
pub(crate) struct UpstreamHead {
    pub response: Response<Incoming>,
    pub lease: Option<Lease>,
    /// From sending until the head arrived.
    pub waited: Duration,
}

/// Bytes of a translated answer's JSON besides its output tokens' (ids, usage, stop reason).
const ANSWER_OVERHEAD: u64 = 16 * 1024;

/// Bytes per output token reserved for a translated answer: text runs about 4 per token, and
/// a token of escaped or multi-byte characters several times that.
const BYTES_PER_TOKEN: u64 = 32;

/// The bytes of a whole answer a request asking for at most `max_output_tokens` may expect
/// (4096 when it names no bound, the translator's default).
fn expected_answer(max_output_tokens: Option<u64>) -> u64 {
    let tokens = max_output_tokens.unwrap_or(crate::wire::anthropic::request::DEFAULT_MAX_TOKENS);
    ANSWER_OVERHEAD.saturating_add(tokens.saturating_mul(BYTES_PER_TOKEN))
}

/// Room reserved for a whole answer before its call ([`Call::reserve`]).
pub(crate) struct Reserved {
    held: Held,
    /// The most bytes the answer may have.
    bound: usize,
}

/// An error status, its body read (bounded).
struct Rejection {
    status: StatusCode,
    retry_after: Option<HeaderValue>,
    body: Bytes,
}

/// An adapter's reading of a provider's error body (`status`, `body`, the provider key to
/// scrub): the body the client gets in its dialect, `None` when it is not an error object.
pub(crate) type ErrorBody = fn(u16, &[u8], Option<&str>, Dialect) -> Option<Bytes>;

impl Call<'_> {
    /// The direct model's provider.
    pub(crate) fn provider(&self) -> &Provider {
        &self.route.provider
    }

    /// The name the answer to a group's request gives as its `model`: the direct model's,
    /// or the group's when the key may not call that direct model itself.
    pub(crate) fn shown_name(&self) -> &str {
        self.hidden_by
            .map_or(&*self.route.name, |group| &*group.name)
    }

    /// [`Call::shown_name`] as a JSON string literal.
    pub(crate) fn shown_json(&self) -> &Bytes {
        self.hidden_by
            .map_or(&self.route.name_json, |group| &group.name_json)
    }

    /// The URI of the direct model's `endpoint`.
    pub(crate) fn uri(&self, endpoint: Endpoint) -> Result<&Uri, GatewayError> {
        self.route
            .uris
            .get(endpoint)
            .ok_or_else(|| no_uri(self.provider()))
    }

    /// The URI this call goes to when its provider names streams by URI (Gemini's
    /// `streamGenerateContent`, Bedrock's `converse-stream`, Vertex's `streamRawPredict`): the
    /// route's stream URI for a stream, else `unary`'s.
    pub(crate) fn uri_or_stream(&self, unary: Endpoint) -> Result<&Uri, GatewayError> {
        if self.inbound.stream {
            self.route
                .uris
                .stream()
                .ok_or_else(|| no_uri(self.provider()))
        } else {
            self.uri(unary)
        }
    }

    /// Sends `body` (with `extra` headers) to `uri` and waits for a successful response head
    /// by the first-byte deadline. An error status is an error that carries, for the 4xx a
    /// client may see, the provider's own error object as `error_body` renders it.
    pub(crate) async fn send(
        &self,
        uri: &Uri,
        body: Bytes,
        extra: &HeaderMap,
        error_body: ErrorBody,
    ) -> Result<UpstreamHead, GatewayError> {
        let provider = self.provider();
        let stream = self.inbound.stream;
        let mut request = request(
            provider,
            uri,
            body,
            stream,
            self.request_id,
            self.context,
            extra,
        );
        if let Some(credential) = &provider.credential {
            let value = credential.get(self.pool).await?;
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value);
        }
        let head = send(self.pool, provider, request, self.deadlines).await?;
        if !head.response.status().is_success() {
            // An error's body comes with its head: it is read by the first-byte deadline, so
            // a slow one cannot hold the request past the time a fallback still has.
            // Boxed: reading an error's body is the cold path; inline, its future made every
            // request's larger.
            let rejection =
                Box::pin(rejection(head, self.deadlines.first_byte, &provider.name)).await;
            let mut error = rejection.error();
            error.refusal = refusal::classify(rejection.status.as_u16(), &rejection.body);
            if let Some(refusal) = error.refusal.filter(|r| r.of_the_key()) {
                tracing::warn!(
                    provider = %provider.name,
                    status = rejection.status.as_u16(),
                    reason = refusal.as_str(),
                    "the upstream refused the provider key; its direct models cool down"
                );
                aisix_obs::metrics::emit::provider_key_refused(&provider.name, refusal.as_str());
            }
            if rejection.passes_through() {
                error.upstream_body = error_body(
                    rejection.status.as_u16(),
                    &rejection.body,
                    provider.error_secret(),
                    self.inbound.dialect,
                );
            }
            return Err(provider.mask_error(error));
        }
        Ok(head)
    }

    /// Reserves room in the request's memory budget for the whole answer this call will hold
    /// (to translate it), before anything is sent: a refusal (503 `gateway_overloaded`, after
    /// waiting for room within the request's body deadline) then comes before the provider has
    /// produced and billed anything. What is reserved is what the request may expect
    /// ([`expected_answer`]), never more than `upstream.max_response_bytes`.
    pub(crate) async fn reserve(&self) -> Result<Reserved, GatewayError> {
        let body = self.inbound.body.len() as u64;
        let expected = expected_answer(self.inbound.inspected.max_output_tokens);
        let (held, bound) = self
            .budget
            .reserve(body, self.max_response_bytes, expected, self.room_by)
            .await?;
        Ok(Reserved { held, bound })
    }

    /// [`Call::reserve`] when the call will hold a whole answer to translate (`whole`); nothing
    /// for an answer relayed or streamed.
    pub(crate) async fn reserve_if(&self, whole: bool) -> Result<Option<Reserved>, GatewayError> {
        Ok(if whole {
            Some(self.reserve().await?)
        } else {
            None
        })
    }

    /// Holds the whole answer of `head` (up to `upstream.max_response_bytes`) in the room
    /// `reserved` before the call, taking more as a longer answer arrives (waiting for it within
    /// the request's deadline: an answer already produced is never refused for room), and
    /// `translate`s it into the client's dialect: its JSON body, named for the direct model
    /// when the client named a group, and its usage. What the answer did not use of its room
    /// is given back.
    pub(crate) async fn translate(
        &self,
        head: UpstreamHead,
        reserved: Option<Reserved>,
        translate: impl FnOnce(&[u8]) -> Result<(Bytes, Option<Usage>), Malformed>,
    ) -> Result<Answer, GatewayError> {
        let provider = self.provider();
        let status = head.response.status();
        let Reserved { mut held, bound } = match reserved {
            Some(reserved) => reserved,
            // A stream answered whole: nothing reserved, its room taken as it arrives.
            None => {
                let body = self.inbound.body.len() as u64;
                let (held, bound) = self
                    .budget
                    .reserve(body, self.max_response_bytes, 0, Instant::now())
                    .await?;
                Reserved { held, bound }
            }
        };
        let body = read_body(
            head.response.into_body(),
            head.lease,
            bound,
            self.deadlines.end,
            &provider.name,
            Some((self.budget, &mut held)),
        )
        .await?;
        held.keep(body.len() as u64);
        let (body, usage) = translate(&body).map_err(|m| malformed(provider, &m.0))?;
        // Read before a group's rename: the model the upstream named.
        let model = self.context.and_then(|_| chunk::model(&body));
        // A group's answer names the direct model (or the group), as the relayed ones do.
        let body = match self
            .rename
            .then(|| chunk::with_model(&body, self.shown_json()))
        {
            Some(Some(renamed)) => Bytes::from(renamed),
            _ => body,
        };
        Ok(Answer::Complete {
            status,
            content_type: HeaderValue::from_static("application/json"),
            body,
            usage,
            model,
            held,
            waited: head.waited,
        })
    }

    /// The whole answer of `head`, already in the client's dialect, relayed as it arrives:
    /// named as [`Call::shown_name`] says when `rename`, its usage read in the `usage` dialect.
    pub(crate) fn unary(&self, head: UpstreamHead, rename: bool, usage: Option<Dialect>) -> Answer {
        let content_type = head
            .response
            .headers()
            .get(CONTENT_TYPE)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("application/json"));
        Answer::Unary {
            answer: Unary {
                status: head.response.status(),
                content_type,
                body: head.response.into_body(),
                lease: head.lease,
                rename: rename.then(|| self.shown_json().clone()),
                usage,
                end: self.deadlines.end,
                ticket: None,
                pin: None,
            },
            waited: head.waited,
        }
    }
}

impl UpstreamHead {
    /// Whether the answer is the event stream a streaming request asked for.
    pub(crate) fn is_stream(&self, stream: bool) -> bool {
        stream && is_sse(self.response.headers().get(CONTENT_TYPE))
    }

    /// The answer as a stream whose events `map` turns into the client's.
    pub(crate) fn stream(self, map: StreamMap) -> Answer {
        Answer::Stream {
            status: self.response.status(),
            body: self.response.into_body(),
            lease: self.lease,
            map,
        }
    }
}

/// Sends `request` to `provider` and waits for the response head by the first-byte deadline.
async fn send(
    pool: &Pool,
    provider: &Provider,
    request: Request<Full<Bytes>>,
    deadlines: &Deadlines,
) -> Result<UpstreamHead, GatewayError> {
    let sent = Instant::now();
    let sending = pool.send(request, &provider.route, deadlines.connect);
    match tokio::time::timeout_at(deadlines.first_byte, sending).await {
        Ok(Ok((response, lease))) => Ok(UpstreamHead {
            response,
            lease,
            waited: sent.elapsed(),
        }),
        Ok(Err(error)) => Err(transport_error(&provider.name, &error)),
        Err(_) => Err(timeout(&provider.name)),
    }
}

/// A bodiless `method` request (`GET`, `DELETE`) to `uri` on `provider`, its whole answer read
/// (at most `limit` bytes) by the deadlines: the status, `Content-Type` and body of a success;
/// an error status becomes the error every call makes of it, the provider's own error object
/// passed through in OpenAI's envelope with every value the gateway adds masked.
pub(crate) async fn fetch(
    pool: &Pool,
    provider: &Provider,
    method: Method,
    uri: &Uri,
    request_id: &HeaderValue,
    deadlines: &Deadlines,
    limit: usize,
) -> Result<(StatusCode, HeaderValue, Bytes), GatewayError> {
    let mut request = request(
        provider,
        uri,
        Bytes::new(),
        false,
        request_id,
        None,
        &HeaderMap::new(),
    );
    *request.method_mut() = method;
    request.headers_mut().remove(CONTENT_TYPE);
    let head = send(pool, provider, request, deadlines).await?;
    let status = head.response.status();
    if !status.is_success() {
        let rejection = rejection(head, deadlines.end, &provider.name).await;
        let mut error = rejection.error();
        if rejection.passes_through() {
            error.upstream_body = super::openai::error_body(
                status.as_u16(),
                &rejection.body,
                provider.error_secret(),
                Dialect::Responses,
            );
        }
        return Err(provider.mask_error(error));
    }
    let content_type = head
        .response
        .headers()
        .get(CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("application/json"));
    let body = read_body(
        head.response.into_body(),
        head.lease,
        limit,
        deadlines.end,
        &provider.name,
        None,
    )
    .await?;
    Ok((status, content_type, body))
}

/// Reads a whole body of at most `limit` bytes by `deadline`, each piece covered in `room`
/// (when given) as it arrives, waiting for room if need be; hands the connection back when
/// it was read to the end. A longer body is `upstream_response_too_large`, one still waiting
/// for room at the deadline `upstream_timeout`, and either way its connection is closed
/// (never pooled with the rest unread).
async fn read_body(
    body: Incoming,
    lease: Option<Lease>,
    limit: usize,
    deadline: Instant,
    provider: &str,
    mut room: Option<(&MemoryBudget, &mut Held)>,
) -> Result<Bytes, GatewayError> {
    let read = async move {
        let (mut body, mut pieces) = (body, Pieces::default());
        let mut len = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                tracing::warn!(provider, %error, "upstream response body failed");
                GatewayError::new(
                    ErrorKind::UpstreamUnavailable,
                    "The upstream provider's response was cut off.",
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            len = len.saturating_add(data.len());
            if len > limit {
                tracing::warn!(provider, limit, "upstream response body too large");
                return Err(GatewayError::new(
                    ErrorKind::UpstreamResponseTooLarge,
                    format!(
                        "The upstream provider's answer is larger than the limit of {limit} bytes."
                    ),
                ));
            }
            if let Some((budget, held)) = room.as_mut() {
                budget
                    .cover(held, len as u64, deadline)
                    .await
                    .map_err(|_| {
                        tracing::warn!(provider, "held answer waited for room past its deadline");
                        timeout(provider)
                    })?;
            }
            pieces.push(data);
        }
        Ok(pieces.take())
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(read)) => {
            if let Some(lease) = lease {
                lease.release();
            }
            Ok(read)
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Err(timeout(provider)),
    }
}

/// Reads an error status's body (what arrives of it by `deadline`, bounded).
async fn rejection(head: UpstreamHead, deadline: Instant, provider: &str) -> Rejection {
    let status = head.response.status();
    let retry_after = head.response.headers().get(RETRY_AFTER).cloned();
    let body = read_body(
        head.response.into_body(),
        head.lease,
        MAX_ERROR_BODY,
        deadline,
        provider,
        None,
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
    fn error(&self) -> GatewayError {
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
    fn passes_through(&self) -> bool {
        self.status.is_client_error() && !matches!(self.status.as_u16(), 401 | 403)
    }
}

/// An upstream answer that could not be translated.
fn malformed(provider: &Provider, why: &str) -> GatewayError {
    let why = provider.mask_text(why);
    tracing::warn!(provider = %provider.name, %why, "upstream answer could not be translated");
    GatewayError::new(
        ErrorKind::UpstreamMalformed,
        "The upstream provider's answer could not be translated.",
    )
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::raw_response;

    /// A raw 200 answer whose chunked body is four 1 KiB chunks.
    fn four_kib_chunked() -> Vec<u8> {
        let mut raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..4 {
            raw.extend_from_slice(b"400\r\n");
            raw.extend_from_slice(&[b'a'; 0x400]);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        raw
    }

    /// [`read_body`] on a [`four_kib_chunked`] answer.
    async fn read_four_kib(limit: usize) -> Result<Bytes, GatewayError> {
        let response = raw_response(four_kib_chunked(), false).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        read_body(response.into_body(), None, limit, deadline, "p", None).await
    }

    #[tokio::test]
    async fn a_held_answer_past_the_limit_is_refused_as_too_large() {
        let error = read_four_kib(3000).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::UpstreamResponseTooLarge);
        assert_eq!(error.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(error.code(), "upstream_response_too_large");
        let body = read_four_kib(4096).await.unwrap();
        assert_eq!(body.len(), 4096);
    }
}
