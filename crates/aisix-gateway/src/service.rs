//! The per-worker gateway service. One request's life reads top to bottom in [`Worker::proxy`]:
//! authenticate → read body → inspect → route → dispatch → relay, each stage returning
//! `Result<_, GatewayError>`; [`Worker::handle`] renders errors once and records the request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aisix_bootstrap::WorkerContext;
use aisix_config::ProviderKind;
use aisix_obs::request_id::RequestIds;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use aisix_obs::metrics::labels::{
    AuthFailure, Endpoint as EndpointLabel, Outcome, UpstreamErrorKind,
};

use crate::account::{Accounted, Record};
use crate::auth;
use crate::body::GatewayBody;
use crate::deadline::Deadlines;
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::factory::Shared;
use crate::health;
use crate::models;
use crate::provider::{mock, openai};
use crate::relay::SseRelay;
use crate::snapshot::{Snapshot, SnapshotCache};
use crate::upstream::{Lease, Pool};
use crate::wire::openai::{BodyError, inspect};
use crate::wire::usage;

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static X_OVERHEAD: HeaderName = HeaderName::from_static("x-aisix-overhead-us");

/// One worker's gateway; cloned per connection (one reference-count increment).
#[derive(Clone)]
pub struct Gateway {
    worker: Arc<Worker>,
}

/// Everything one worker owns: its upstream pool, its id generator, its copy of the lookup
/// tables. In thread-per-core mode none of it is touched by another thread.
struct Worker {
    ctx: WorkerContext,
    shared: Arc<Shared>,
    /// This worker's lookup tables, rebuilt from `shared.resources` when a reload happened.
    snapshots: SnapshotCache,
    pool: Pool,
    ids: RequestIds,
}

impl Gateway {
    pub(crate) fn new(ctx: WorkerContext, shared: Arc<Shared>) -> Self {
        let snapshots = SnapshotCache::new(&shared.resources, &shared.egress);
        let pool = Pool::new(&shared.settings.upstream, shared.tls.clone());
        let ids = RequestIds::new(ctx.id);
        Self {
            worker: Arc::new(Worker {
                ctx,
                shared,
                snapshots,
                pool,
                ids,
            }),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Gateway {
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let worker = self.worker.clone();
        Box::pin(async move { Ok(worker.handle(request).await) })
    }
}

/// A successful answer before it becomes a response.
enum Answer {
    Complete {
        content_type: HeaderValue,
        body: Bytes,
    },
    Stream {
        upstream: Incoming,
        lease: Option<Lease>,
        strip_usage_chunk: bool,
        deadlines: Deadlines,
        sent_at: Instant,
    },
    Ready(Response<GatewayBody>),
}

impl Worker {
    async fn handle(&self, request: Request<Incoming>) -> Response<GatewayBody> {
        let received = Instant::now();
        let request_id = self.ids.for_request(request.headers().get(&X_REQUEST_ID));
        let version = request.version();
        let resolved = Endpoint::resolve(request.method(), request.uri().path());
        let mut response = match resolved {
            // Probes are answered without a record: they are neither traffic nor worth a log line.
            Ok(Endpoint::Livez) => health::livez(),
            Ok(Endpoint::Readyz) => health::readyz(self.ctx.readiness.is_ready()),
            resolved => {
                let label = resolved
                    .as_ref()
                    .map_or(EndpointLabel::Other, |e| e.label());
                let mut record = Accounted(Record::new(
                    request_id.clone(),
                    label,
                    request.method().clone(),
                    request.uri().clone(),
                    received,
                    self.shared.sinks,
                ));
                let answer = match resolved {
                    Ok(endpoint) => self.serve(endpoint, request, &mut record.0).await,
                    Err(error) => Err(error),
                };
                self.respond(answer, record)
            }
        };
        // A body that never arrived in full leaves the HTTP/1.1 connection mid-message: close
        // it (HTTP/2 resets just the stream when the unread body is dropped).
        if response.status() == StatusCode::REQUEST_TIMEOUT && version < Version::HTTP_2 {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
            .headers_mut()
            .insert(X_REQUEST_ID.clone(), request_id);
        response
    }

    async fn serve(
        &self,
        endpoint: Endpoint,
        request: Request<Incoming>,
        record: &mut Record,
    ) -> Result<Answer, GatewayError> {
        let snapshot = self.snapshot();
        match endpoint {
            Endpoint::Models => {
                let key = auth::authenticate(&snapshot, request.headers())?;
                record.key_name = Some(key.name.clone());
                Ok(Answer::Ready(models::list(&snapshot, key)))
            }
            Endpoint::Model => {
                let key = auth::authenticate(&snapshot, request.headers())?;
                record.key_name = Some(key.name.clone());
                let id = request.uri().path().trim_start_matches("/v1/models/");
                models::get(&snapshot, key, id).map(Answer::Ready)
            }
            _ => self.proxy(endpoint, request, &snapshot, record).await,
        }
    }

    /// The life of a model request.
    async fn proxy(
        &self,
        endpoint: Endpoint,
        request: Request<Incoming>,
        snapshot: &Snapshot,
        record: &mut Record,
    ) -> Result<Answer, GatewayError> {
        let key = auth::authenticate(snapshot, request.headers())?;
        record.key_name = Some(key.name.clone());

        let body_deadline = self.shared.settings.deadlines.body(record.received);
        let body = self.read_body(request, body_deadline).await?;
        let inspected = inspect(&body).map_err(body_error)?;
        let stream = inspected.stream && endpoint.can_stream();
        record.stream = stream;

        let route = snapshot
            .model(&inspected.model)
            .ok_or_else(|| models::model_not_found(&inspected.model))?;
        record.model = Some(route.name.clone());
        record.provider = Some(route.target.name.clone());
        if !key.allows(&route.name) {
            return Err(GatewayError::new(
                ErrorKind::ModelNotAllowed,
                format!(
                    "This API key is not allowed to use the model '{}'.",
                    route.name
                ),
            )
            .with_param("model"));
        }

        match route.target.provider {
            ProviderKind::Mock => {
                let reply = mock::respond(
                    endpoint,
                    &route.upstream_model,
                    &body,
                    stream,
                    inspected.client_wants_usage(),
                    record.request_id.to_str().unwrap_or_default(),
                )?;
                record.usage = Some(reply.usage);
                Ok(Answer::Complete {
                    content_type: HeaderValue::from_static(reply.content_type),
                    body: reply.body,
                })
            }
            ProviderKind::OpenAi | ProviderKind::AzureOpenAi => {
                let include_usage = stream && route.target.stream_usage;
                let upstream_body =
                    inspected.rewrite(&body, route.upstream_model_json.as_deref(), include_usage);
                let sent_at = Instant::now();
                let deadlines = self.shared.settings.deadlines.upstream(
                    &route.timeouts,
                    record.received,
                    sent_at,
                );
                let result = openai::call(
                    &self.pool,
                    route,
                    endpoint,
                    upstream_body,
                    stream,
                    &record.request_id,
                    &deadlines,
                )
                .await;
                record.upstream_wait = sent_at.elapsed();
                let (status, reply) = result.inspect_err(|e| {
                    if let ErrorKind::UpstreamClientError(s) = e.kind {
                        record.upstream_status = Some(s.as_u16());
                    }
                })?;
                record.upstream_status = Some(status.as_u16());
                Ok(match reply {
                    openai::Reply::Complete { content_type, body } => {
                        record.usage = usage::from_response(&body);
                        Answer::Complete { content_type, body }
                    }
                    openai::Reply::Stream(response, lease) => Answer::Stream {
                        upstream: response.into_body(),
                        lease,
                        strip_usage_chunk: !inspected.client_wants_usage(),
                        deadlines,
                        sent_at,
                    },
                })
            }
        }
    }

    /// Reads the request body by `deadline`, refusing one over the limit from its
    /// `Content-Length` before reading, and otherwise as soon as it passes the limit. A body
    /// already in when the head arrived is read without arming a timer.
    async fn read_body(
        &self,
        request: Request<Incoming>,
        deadline: Instant,
    ) -> Result<Bytes, GatewayError> {
        let limit = self.shared.settings.body_limit;
        let too_large = || {
            GatewayError::new(
                ErrorKind::BodyTooLarge,
                format!("The request body is larger than the limit of {limit} bytes."),
            )
        };
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit) {
            return Err(too_large());
        }
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let reading = Limited::new(request.into_body(), limit).collect();
        match tokio::time::timeout_at(deadline, reading).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Ok(Err(_)) => Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                "The request body could not be read.",
            )),
            Err(_) => Err(GatewayError::new(
                ErrorKind::RequestTimeout,
                format!(
                    "The request body did not arrive within {} seconds.",
                    self.shared.settings.deadlines.request_body.as_secs()
                ),
            )),
        }
    }

    /// Turns the answer (or the error, rendered here and only here) into the response, and
    /// completes the record: now for whole responses, when the stream ends for streams.
    fn respond(
        &self,
        answer: Result<Answer, GatewayError>,
        mut record: Accounted,
    ) -> Response<GatewayBody> {
        if answer.is_ok() {
            record.0.outcome = Outcome::Success;
            record.0.error = None;
        }
        let mut response = match answer {
            Ok(Answer::Ready(response)) => response,
            Ok(Answer::Complete { content_type, body }) => {
                let mut response = Response::new(GatewayBody::full(body));
                response.headers_mut().insert(CONTENT_TYPE, content_type);
                response
            }
            Ok(Answer::Stream {
                upstream,
                lease,
                strip_usage_chunk,
                deadlines,
                sent_at,
            }) => {
                record.0.status = StatusCode::OK.as_u16();
                let overhead = HeaderValue::from(record.0.mark_head().as_micros() as u64);
                let relay = SseRelay::new(
                    upstream,
                    lease,
                    strip_usage_chunk,
                    self.shared.settings.stream,
                    deadlines,
                    sent_at,
                    record,
                );
                let mut response = Response::new(GatewayBody::Sse(Box::new(relay)));
                sse_headers(&mut response, overhead);
                return response;
            }
            Err(error) => {
                note_error(&mut record.0, &error);
                error.to_response()
            }
        };
        record.0.status = response.status().as_u16();
        let overhead = HeaderValue::from(record.0.mark_head().as_micros() as u64);
        response.headers_mut().insert(X_OVERHEAD.clone(), overhead);
        response
    }

    /// This worker's lookup tables, rebuilt here if a reload happened since the last request.
    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots
            .get(&self.shared.resources, &self.shared.egress)
    }
}

/// What an error means for metrics and the access log.
fn note_error(record: &mut Record, error: &GatewayError) {
    record.error = Some(error.code());
    record.outcome = match error.kind {
        ErrorKind::UpstreamClientError(StatusCode::TOO_MANY_REQUESTS) => Outcome::RateLimited,
        ErrorKind::UpstreamClientError(StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
            Outcome::UpstreamError
        }
        ErrorKind::UpstreamClientError(_) => Outcome::ClientError,
        _ => match error.side() {
            Side::Client => Outcome::ClientError,
            Side::Upstream | Side::Internal => Outcome::UpstreamError,
        },
    };
    match error.kind {
        ErrorKind::Unauthorized(reason) => record.auth_failure = Some(reason),
        ErrorKind::ModelNotAllowed => record.auth_failure = Some(AuthFailure::ModelNotAllowed),
        ErrorKind::BodyTooLarge => record.body_rejected = true,
        ErrorKind::UpstreamUnavailable => record.upstream_error = Some(UpstreamErrorKind::Connect),
        ErrorKind::UpstreamTimeout => record.upstream_error = Some(UpstreamErrorKind::Timeout),
        ErrorKind::UpstreamServerError | ErrorKind::UpstreamClientError(_) => {
            record.upstream_error = Some(UpstreamErrorKind::Status);
        }
        _ => {}
    }
}

fn sse_headers(response: &mut Response<GatewayBody>, overhead: HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert(X_OVERHEAD.clone(), overhead);
}

fn body_error(error: BodyError) -> GatewayError {
    match error {
        BodyError::InvalidJson(message) => GatewayError::new(ErrorKind::InvalidJson, message),
        BodyError::MissingModel => GatewayError::new(
            ErrorKind::InvalidRequest,
            "You must provide a model parameter.",
        )
        .with_param("model"),
        BodyError::InvalidField(field, expected) => GatewayError::new(
            ErrorKind::InvalidRequest,
            format!("'{field}' must be {expected}."),
        )
        .with_param(field),
    }
}
