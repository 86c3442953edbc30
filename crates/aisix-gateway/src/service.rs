//! The per-worker gateway service. A model request's life reads top to bottom in
//! [`Inner::model_request`], one named call per phase: authenticate → read → inspect → limit →
//! route → attempt → relay, each returning `Result<_, GatewayError>`; the request's [`Record`]
//! accounts for it when it ends (its drop). Errors are rendered once, in [`relay`], and every
//! response header is set in [`Head::apply`].

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aisix_bootstrap::WorkerContext;
use aisix_obs::request_id::RequestIds;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::uri::{Authority, PathAndQuery};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::account::Record;
use crate::endpoint::{self, Endpoint, Proxied};
use crate::error::{ErrorKind, GatewayError};
use crate::factory::Common;
use crate::health;
use crate::limit::estimate::Tokens;
use crate::limit::memory_budget::MemoryBudget;
use crate::limit::{Charge, Headroom};
use crate::models;
use crate::pieces::Pieces;
use crate::relay::body::GatewayBody;
use crate::relay::stream::{SseRelay, Starting};
use crate::relay::unary::UnaryRelay;
use crate::request::auth;
use crate::request::inbound::{self, Inbound};
use crate::request::spending;
use crate::route::Plan;
use crate::route::attempt::{Attempts, Ctx, Served};
use crate::snapshot::{ApiKeyEntry, GroupRoute, Named, Snapshot, SnapshotCache};
use crate::upstream::pool::Pool;
use crate::wire::Dialect;

use aisix_obs::request_id::HEADER as X_REQUEST_ID;
static X_OVERHEAD: HeaderName = HeaderName::from_static("x-aisix-overhead-us");
static X_SERVED_BY: HeaderName = HeaderName::from_static("x-aisix-served-by");
static X_DROPPED_TOOLS: HeaderName = HeaderName::from_static("x-aisix-dropped-tools");

/// One worker's gateway; cloned per connection (one reference-count increment).
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

/// Everything the gateway keeps on one worker: its upstream pool, its id generator, its copy
/// of the lookup tables. In thread-per-core mode none of it is touched by another thread.
struct Inner {
    ctx: WorkerContext,
    common: Arc<Common>,
    /// This worker's lookup tables, rebuilt from `common.loaded` when a reload happened.
    snapshots: SnapshotCache,
    pool: Pool,
    ids: RequestIds,
    /// The request bytes this worker may hold at once (the process, in the shared runtime).
    budget: MemoryBudget,
}

impl Gateway {
    pub(crate) fn new(ctx: WorkerContext, common: Arc<Common>) -> Self {
        let budget = common.settings.budget(&ctx);
        let snapshots =
            SnapshotCache::new(&common.loaded, &common.egress, &common.limiter, &budget);
        let pool = Pool::new(&common.settings.upstream, common.tls.clone());
        let ids = RequestIds::new(ctx.id);
        Self {
            inner: Arc::new(Inner {
                ctx,
                common,
                snapshots,
                pool,
                ids,
                budget,
            }),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Gateway {
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        // `handle` is the future itself (no `async` block around it): its state (8.4 KiB,
        // benches/PROFILE.md) is written once where it is built and moved once, into its box.
        // An `async move` wrapper built the inner future on its first poll and moved it in
        // again, a second copy.
        Box::pin(Inner::handle(self.inner.clone(), request))
    }
}

/// The facts a response's head is made of.
struct Head {
    request_id: HeaderValue,
    /// The gateway's own time so far, in µs; `None` for probes.
    overhead: Option<u64>,
    /// The direct model that answered.
    served_by: Option<HeaderValue>,
    sse: bool,
    /// The request's body never arrived in full: an HTTP/1.1 connection is left mid-message.
    close: bool,
    /// Where the request's limits stand, for the `x-ratelimit-*` headers.
    limits: Option<Headroom>,
    /// The offered tools a translated Responses request left out.
    dropped_tools: Option<HeaderValue>,
}

impl Head {
    /// Sets every header the gateway adds to a response (the error renderer adds those of its
    /// envelope).
    fn apply(self, response: &mut Response<GatewayBody>) {
        let headers = response.headers_mut();
        if self.sse {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        }
        if let Some(overhead) = self.overhead {
            headers.insert(X_OVERHEAD.clone(), HeaderValue::from(overhead));
        }
        if let Some(served_by) = self.served_by {
            headers.insert(X_SERVED_BY.clone(), served_by);
        }
        if let Some(dropped) = self.dropped_tools {
            headers.insert(X_DROPPED_TOOLS.clone(), dropped);
        }
        if self.close {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(limits) = self.limits {
            limits.write_headers(headers);
        }
        headers.insert(X_REQUEST_ID.clone(), self.request_id);
    }
}

impl Inner {
    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<GatewayBody>, Infallible> {
        let received = Instant::now();
        let request_id = self.ids.for_request(request.headers().get(&X_REQUEST_ID));
        let version = request.version();
        #[cfg(feature = "test-hooks")]
        if request.uri().path() == crate::test_hooks::ADVANCE_CLOCK_PATH {
            return Ok(crate::test_hooks::advance_clock(
                &self.common.clock,
                &request,
            ));
        }
        // The error boxed: `resolved` is kept across every await below (it is dropped at the
        // end), so its size is the future's; a path that resolves to nothing is rare.
        let resolved = endpoint::resolve(request.method(), request.uri().path()).map_err(Box::new);
        let mut record = match resolved {
            // Probes are answered without a record: they are neither traffic nor worth a log line.
            Ok(Endpoint::Health) => {
                let mut response = match request.uri().path() {
                    "/livez" => health::livez(),
                    "/" => health::root(),
                    _ => health::readyz(self.ctx.readiness.is_ready()),
                };
                Head {
                    request_id,
                    overhead: None,
                    served_by: None,
                    sse: false,
                    close: false,
                    limits: None,
                    dropped_tools: None,
                }
                .apply(&mut response);
                return Ok(response);
            }
            _ => Record::new(
                request_id.clone(),
                resolved.as_ref().map_or(Endpoint::Other, |e| *e),
                request.method().clone(),
                detached_uri(request.uri()),
                received,
                self.common.sinks,
            ),
        };
        if let Some(tracing) = self.common.otel {
            record.traced(crate::otel::Trace::begin(
                tracing,
                request.headers(),
                received,
            ));
        }
        // The model list answers in the dialect of the client asking, errors included.
        let dialect = match resolved {
            Ok(Endpoint::Models) => models::dialect(request.headers()),
            _ => record.endpoint().dialect(),
        };
        let answer = match resolved {
            Ok(Endpoint::Models) => self
                .models(&request, &mut record, dialect)
                .map(Reply::Ready),
            Ok(Endpoint::Responses) if request.method() != http::Method::POST => {
                self.stored(&request, &mut record).await.map(Reply::Ready)
            }
            Ok(endpoint) => self.model_request(endpoint, request, &mut record).await,
            Err(error) => Err(*error),
        };
        // Bound only after the awaits above, so that the future does not keep room for it
        // beside theirs (704 bytes).
        let mut served = answer;
        if let Ok(Reply::Held(..)) = &served
            && let Ok(Reply::Held(attempts, every)) =
                std::mem::replace(&mut served, Ok(Reply::Pending))
        {
            let limits = record.limits();
            match hold(attempts, record, every).await {
                Ok((answer, attempts, answered)) => {
                    record = answered;
                    served = answer.map(|answer| Reply::Served(answer, attempts));
                }
                Err(starting) => {
                    // Still holding after a keep-alive interval: the head goes out now and
                    // the body sends keep-alives until the loop has its answer.
                    let relay = SseRelay::starting(starting, every);
                    let mut response = Response::new(GatewayBody::Sse(Box::new(relay)));
                    Head {
                        request_id,
                        overhead: None,
                        served_by: None,
                        sse: true,
                        close: false,
                        limits,
                        dropped_tools: None,
                    }
                    .apply(&mut response);
                    return Ok(response);
                }
            }
        }
        let (mut response, mut head) = relay(served, record, dialect);
        // A body that never arrived in full leaves the HTTP/1.1 connection mid-message: close
        // it (HTTP/2 resets just the stream when the unread body is dropped).
        head.close = response.status() == StatusCode::REQUEST_TIMEOUT && version < Version::HTTP_2;
        head.request_id = request_id;
        head.apply(&mut response);
        Ok(response)
    }

    /// `GET /v1/models` and `GET /v1/models/{id}`.
    fn models(
        &self,
        request: &Request<Incoming>,
        record: &mut Record,
        dialect: Dialect,
    ) -> Result<Response<GatewayBody>, GatewayError> {
        let snapshot = self.snapshot();
        let key = self.authenticate(&snapshot, request, record)?;
        match endpoint::model_id(request.uri().path()) {
            Some(id) => models::get(&snapshot, key, id, dialect),
            None => models::list(&snapshot, key, dialect, request.uri().query()),
        }
    }

    /// `GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`: relayed to
    /// the provider key that created a native response, else answered from the store.
    async fn stored(
        &self,
        request: &Request<Incoming>,
        record: &mut Record,
    ) -> Result<Response<GatewayBody>, GatewayError> {
        let snapshot = self.snapshot();
        let key = self.authenticate(&snapshot, request, record)?;
        let keeper = crate::stored::Keeper {
            store: Arc::clone(&self.common.responses),
            pins: Arc::clone(&self.common.pins),
            owner: Arc::clone(&key.name),
        };
        let uri = request.uri();
        let Some((id, items)) = endpoint::stored_response(uri.path()) else {
            return Err(crate::stored::not_found(uri.path(), None));
        };
        let pinned = keeper.pinned(id).await;
        let Some(route) = pinned.and_then(|p| snapshot.responses_route(&p)) else {
            return crate::stored::answer(&keeper, request.method(), id, items, uri.query()).await;
        };
        record.calling(route.name.clone(), route.provider.name.clone(), None, false);
        let settings = &self.common.settings;
        let deadlines =
            settings
                .deadlines
                .upstream(&route.timeouts, record.received(), Instant::now());
        let asked = crate::provider::native_state::Asked {
            method: request.method().clone(),
            id,
            items,
            query: uri.query(),
        };
        let answer = crate::provider::native_state::relay(
            &self.pool,
            route,
            asked,
            record.request_id(),
            &deadlines,
            settings.upstream.max_response_bytes,
        )
        .await;
        if *request.method() == http::Method::DELETE && answer.is_ok() {
            keeper.unpin(id).await;
        }
        let (status, content_type, body) = answer?;
        let mut response = Response::new(GatewayBody::full(body));
        *response.status_mut() = status;
        response.headers_mut().insert(CONTENT_TYPE, content_type);
        Ok(response)
    }

    /// The life of a model request.
    async fn model_request(
        &self,
        endpoint: Endpoint,
        request: Request<Incoming>,
        record: &mut Record,
    ) -> Result<Reply, GatewayError> {
        let snapshot = self.snapshot();
        let key = self.authenticate(&snapshot, &request, record)?;
        let budget = self.budget.for_key(key.share.as_ref());
        let forwarded = inbound::forwarded(endpoint, request.headers());
        let body = self.read(request, &budget, record).await?;
        record.body_read();
        let (mut inbound, model) = self.inspect(endpoint, body, &snapshot, key, record)?;
        inbound.forwarded = forwarded;
        if let Some(policy) = &key.spending {
            spending::check(policy, &inbound)?;
        }
        if endpoint == Endpoint::Responses {
            inbound.stored = Some(crate::stored::Keeper {
                store: Arc::clone(&self.common.responses),
                pins: Arc::clone(&self.common.pins),
                owner: Arc::clone(&key.name),
            });
        }
        self.limit(key, &model, &inbound, record).await?;
        let mut plan = Plan::new(&model);
        let pinned = match &inbound.stored {
            Some(keeper) => pinned_provider(keeper, &inbound).await,
            None => None,
        };
        if let Some(provider) = pinned {
            // A native response's state lives with the provider key that created it.
            plan.keep_only(|target| target.provider.name.as_bytes() == &provider[..]);
        }
        let keepalive = self.common.settings.stream.keepalive;
        let held = inbound.stream && plan.group().is_some();
        let mut attempts = self.attempts(plan, inbound, budget, record, &snapshot);
        if let Named::Group(group) = &model {
            attempts.hide(hidden_members(group, key));
        }
        if let (true, Some(every)) = (held, keepalive) {
            // Its first token may be held for a while: the loop runs where it can go on
            // inside the response body, should the head have to go out first.
            return Ok(Reply::Held(attempts, every));
        }
        let served = attempts.run(record).await?;
        Ok(Reply::Served(served, attempts))
    }

    /// The caller's API key, before anything else is read.
    fn authenticate<'s>(
        &self,
        snapshot: &'s Snapshot,
        request: &Request<Incoming>,
        record: &mut Record,
    ) -> Result<&'s ApiKeyEntry, GatewayError> {
        let key = auth::authenticate(snapshot, request.headers())?;
        record.authenticated(key.name.clone());
        Ok(key)
    }

    /// Reads the request body by its deadline, refusing one over the limit from its
    /// `Content-Length` before reading, and otherwise as soon as it passes the limit. The body
    /// is charged to `budget` (the worker's, and the key's share) piece by piece as it arrives,
    /// never from its declared length, and the record holds the charge until the request ends.
    async fn read(
        &self,
        request: Request<Incoming>,
        budget: &MemoryBudget,
        record: &mut Record,
    ) -> Result<Bytes, GatewayError> {
        let settings = &self.common.settings;
        let limit = settings.body_limit;
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
        let deadline = settings.deadlines.body(record.received());
        let timed_out = || {
            GatewayError::new(
                ErrorKind::RequestTimeout,
                format!(
                    "The request body did not arrive within {} seconds.",
                    settings.deadlines.request_body.as_secs()
                ),
            )
        };
        let held = record.held();
        let mut body = request.into_body();
        let (mut pieces, mut len) = (Pieces::default(), 0u64);
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(None) => return Ok(detached_body(pieces.take())),
                Ok(Some(Err(_))) => {
                    return Err(GatewayError::new(
                        ErrorKind::InvalidRequest,
                        "The request body could not be read.",
                    ));
                }
                Err(_) => return Err(timed_out()),
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            len += data.len() as u64;
            if len > limit {
                return Err(too_large());
            }
            budget.cover(held, len, deadline).await?;
            pieces.push(data);
        }
    }

    /// Validates the body and finds the model or group it names, which the key must allow.
    fn inspect(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        snapshot: &Snapshot,
        key: &ApiKeyEntry,
        record: &mut Record,
    ) -> Result<(Inbound, Named), GatewayError> {
        let inbound = inbound::inspect(endpoint, body)?;
        record.inspected(inbound.stream);
        let name = &inbound.inspected.model;
        let model = snapshot
            .model(name)
            .ok_or_else(|| models::model_not_found(name))?
            .clone();
        if !key.allows(model.name()) {
            return Err(models::model_not_allowed(name));
        }
        Ok((inbound, model))
    }

    /// The limit phase: reserves what the request may use of its key's and its model's (or
    /// group's) limits before it is routed, or refuses it; the record holds the reservation
    /// until the response or stream ends and settles it with the usage. The estimate is
    /// [`Tokens::estimate`]'s, priced at the model's prices (a group's: the highest of its
    /// targets').
    async fn limit(
        &self,
        key: &ApiKeyEntry,
        model: &Named,
        inbound: &Inbound,
        record: &mut Record,
    ) -> Result<(), GatewayError> {
        let (model_limits, cost) = match model {
            Named::Direct(direct) => (direct.limits.as_ref(), direct.cost),
            Named::Group(group) => (group.limits.as_ref(), group.cost),
        };
        let estimate = Tokens::estimate(
            inbound.body.len(),
            inbound.inspected.max_output_tokens,
            inbound.inspected.choices,
            !matches!(
                inbound.endpoint,
                Endpoint::Embeddings | Endpoint::CountTokens
            ),
        );
        // Kept even without limits here: a group's targets may have their own.
        record.estimated(estimate);
        let charge = || Charge {
            tokens: estimate.total(),
            spend: cost.map(|cost| estimate.cost(&cost)).unwrap_or_default(),
        };
        let limiter = &self.common.limiter;
        let reserved = match (key.limits.as_ref(), model_limits) {
            (None, None) => return Ok(()),
            (Some(key), Some(model)) => limiter.reserve(&[key, model], charge()).await,
            (Some(one), None) | (None, Some(one)) => limiter.reserve(&[one], charge()).await,
        };
        match reserved {
            Ok(reservation) => {
                record.admitted(reservation);
                Ok(())
            }
            Err(refused) => {
                record.refused(refused.headroom());
                Err(refused.into())
            }
        }
    }

    /// The attempt loop for `plan`, with what this worker gives every attempt.
    fn attempts(
        &self,
        plan: Plan,
        inbound: Inbound,
        budget: MemoryBudget,
        record: &Record,
        snapshot: &Snapshot,
    ) -> Box<Attempts> {
        let settings = &self.common.settings;
        let ctx = Ctx {
            pool: self.pool.clone(),
            deadlines: settings.deadlines,
            stream: settings.stream,
            max_response_bytes: settings.upstream.max_response_bytes,
            budget,
            clock: snapshot.clock,
        };
        Box::new(Attempts::new(
            ctx,
            plan,
            inbound,
            record.request_id().clone(),
            record.received(),
        ))
    }

    /// This worker's lookup tables, rebuilt here if a reload happened since the last request.
    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.get(
            &self.common.loaded,
            &self.common.egress,
            &self.common.limiter,
        )
    }
}

/// The provider key that created the response a Responses request's `previous_response_id`
/// names, when a native key answered it.
async fn pinned_provider(keeper: &crate::stored::Keeper, inbound: &Inbound) -> Option<Bytes> {
    let previous = inbound.inspected.previous_response_id(&inbound.body)?;
    keeper.pinned(&previous).await
}

/// The direct models of `group` that `key` may not call: answers from them name the group.
fn hidden_members(group: &GroupRoute, key: &ApiKeyEntry) -> Vec<Arc<str>> {
    group
        .members
        .iter()
        .filter(|member| !key.allows(&member.name))
        .map(|member| member.name.clone())
        .collect()
}

/// hyper's initial read buffer per HTTP/1 connection, 8 KiB.
const HYPER_READ_BUFFER: usize = 8 * 1024;

/// The request body in an allocation of its own when it is small. hyper hands the body out as a
/// slice of the connection's read buffer; held for the request's life, that slice keeps the
/// buffer from being reused, and hyper's next read (the end-of-connection check it makes while
/// the response is pending) allocates a second one, 8 to 16 KiB per request in flight
/// (benches/PROFILE.md, "After"). A copy of at most [`HYPER_READ_BUFFER`] bytes costs far less.
fn detached_body(body: Bytes) -> Bytes {
    if body.len() <= HYPER_READ_BUFFER {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

/// `uri` in an allocation of its own, for the record to hold: hyper parses an HTTP/1 target as a
/// slice of the read buffer, which [`detached_body`] explains the cost of holding.
fn detached_uri(uri: &Uri) -> Uri {
    let mut parts = uri.clone().into_parts();
    if let Some(target) = &parts.path_and_query
        && let Ok(copy) =
            PathAndQuery::from_maybe_shared(Bytes::copy_from_slice(target.as_str().as_bytes()))
    {
        parts.path_and_query = Some(copy);
    }
    if let Some(authority) = &parts.authority
        && let Ok(copy) =
            Authority::from_maybe_shared(Bytes::copy_from_slice(authority.as_str().as_bytes()))
    {
        parts.authority = Some(copy);
    }
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// A successful request before it becomes a response.
enum Reply {
    /// Answered by the gateway itself (the model list).
    Ready(Response<GatewayBody>),
    /// A direct model's answer, with the rest of the plan.
    Served(Served, Box<Attempts>),
    /// A stream to a group whose attempt loop is yet to run, with the keep-alive interval.
    Held(Box<Attempts>, Duration),
    /// Taken by [`hold`].
    Pending,
}

/// Runs the attempt loop of a held stream: its answer (with the rest of the plan and the
/// record) when it comes within `every`; else the loop, still running, for the response body
/// to go on with.
async fn hold(
    attempts: Box<Attempts>,
    mut record: Box<Record>,
    every: Duration,
) -> Result<(Result<Served, GatewayError>, Box<Attempts>, Box<Record>), Starting> {
    // From here the request counts as abandoned if its client leaves.
    record.holding_stream();
    let mut starting: Starting = Box::pin(async move {
        let mut attempts = attempts;
        let answer = attempts.run(&mut record).await;
        (answer, attempts, record)
    });
    match tokio::time::timeout(every, &mut starting).await {
        Ok(done) => Ok(done),
        Err(_) => Err(starting),
    }
}

/// The relay phase: turns the answer (or the error, rendered here and only here) into the
/// response, and hands the record on. A relayed body (a stream's, or a whole answer still
/// upstream) takes the record and accounts for the request when it ends; any other response
/// is accounted for now, its head complete.
fn relay(
    result: Result<Reply, GatewayError>,
    mut record: Box<Record>,
    dialect: Dialect,
) -> (Response<GatewayBody>, Head) {
    let mut head = Head {
        request_id: record.request_id().clone(),
        overhead: None,
        served_by: None,
        sse: false,
        close: false,
        limits: record.limits(),
        dropped_tools: None,
    };
    let response = match result {
        Ok(Reply::Ready(response)) => {
            record.succeeded();
            response
        }
        Ok(Reply::Served(
            Served::Complete {
                status,
                content_type,
                body,
            },
            attempts,
        )) => {
            record.succeeded();
            head.served_by = attempts.served_by();
            head.dropped_tools = attempts.dropped_tools();
            record.left_out_tools(head.dropped_tools.clone());
            let mut response = Response::new(GatewayBody::full(body));
            *response.status_mut() = status;
            response.headers_mut().insert(CONTENT_TYPE, content_type);
            response
        }
        Ok(Reply::Served(Served::Unary(answer), attempts)) => {
            let (status, content_type) = (answer.status, answer.content_type.clone());
            head.overhead = Some(record.responded(status.as_u16()).as_micros() as u64);
            head.served_by = attempts.served_by();
            head.dropped_tools = attempts.dropped_tools();
            record.left_out_tools(head.dropped_tools.clone());
            let relay = UnaryRelay::new(*answer, record);
            let mut response = Response::new(GatewayBody::Unary(Box::new(relay)));
            *response.status_mut() = status;
            response.headers_mut().insert(CONTENT_TYPE, content_type);
            return (response, head);
        }
        Ok(Reply::Served(Served::Stream(events), attempts)) => {
            head.overhead = Some(record.responded(StatusCode::OK.as_u16()).as_micros() as u64);
            head.served_by = attempts.served_by();
            head.dropped_tools = attempts.dropped_tools();
            record.left_out_tools(head.dropped_tools.clone());
            head.sse = true;
            let rest = attempts.continues_cut_streams().then_some(attempts);
            let relay = SseRelay::new(events, record, rest);
            return (Response::new(GatewayBody::Sse(Box::new(relay))), head);
        }
        Ok(Reply::Held(..) | Reply::Pending) => {
            let error = GatewayError::new(ErrorKind::Internal, "The request was not answered.");
            record.failed(&error);
            error.to_response(record.endpoint().dialect())
        }
        Err(error) => {
            record.failed(&error);
            error.to_response(dialect)
        }
    };
    head.overhead = Some(record.responded(response.status().as_u16()).as_micros() as u64);
    // Account: the record is complete and emitted as it drops.
    drop(record);
    (response, head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_body_is_copied_out_of_the_connection_read_buffer() {
        let read_buffer = Bytes::from(vec![b'x'; HYPER_READ_BUFFER]);
        let body = read_buffer.slice(100..300);
        let detached = detached_body(body.clone());
        assert_eq!(detached, body);
        assert_ne!(detached.as_ptr(), body.as_ptr());
    }

    #[test]
    fn body_larger_than_hyper_read_buffer_is_kept_as_is() {
        let body = Bytes::from(vec![b'x'; HYPER_READ_BUFFER + 1]);
        assert_eq!(detached_body(body.clone()).as_ptr(), body.as_ptr());
    }

    #[test]
    fn detached_uri_is_equal_and_owns_its_bytes() {
        for text in [
            "/v1/chat/completions?x=1",
            "http://gateway.example:8080/v1/models",
        ] {
            let head = Bytes::from(format!("POST {text} HTTP/1.1"));
            let uri = Uri::from_maybe_shared(head.slice(5..5 + text.len())).unwrap();
            let detached = detached_uri(&uri);
            assert_eq!(detached, uri);
            assert_ne!(detached.path().as_ptr(), uri.path().as_ptr());
        }
    }

    fn returned_size<F, A, B, R>(_: F) -> usize
    where
        F: FnOnce(A, B) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// Every request's future is boxed (`Gateway::call`) and moved into its box whole: at
    /// 7 KiB or less it takes jemalloc's 7 KiB size class, not the 8 KiB one, and 512 requests
    /// in flight hold half a MiB less. A local kept across an await is part of the size: box
    /// what is large and rare, and bind what an await returns only after it.
    #[test]
    fn a_request_future_fits_the_allocators_7_kib_class() {
        let size = returned_size(Inner::handle);
        assert!(size <= 7 * 1024, "{size} bytes");
    }
}
