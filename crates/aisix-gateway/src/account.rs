//! What one request did, recorded exactly once: when its response is complete, when its stream
//! ends or fails, or when the client goes away. The [`Record`] is its own drop guard, so every
//! ending is covered: dropping it settles the request's limit reservation with its usage and
//! emits its metrics and its access-log line.

use std::sync::Arc;
use std::time::Duration;

use aisix_obs::access_log::{self, Attempt};
use aisix_obs::metrics::emit::{self, InFlightGuard, RequestFacts, RequestLabels};
use aisix_obs::metrics::labels::{Endpoint as EndpointLabel, Outcome, StatusClass, UNROUTED};
use http::{HeaderValue, Method, Uri};
use tokio::time::Instant;

use aisix_config::{Cost, Usd};

use crate::error::{ErrorKind, GatewayError};
use crate::limit::estimate::Tokens;
use crate::limit::memory_budget::Held;
use crate::limit::{Charge, Headroom, Reservation};
use crate::wire::usage::Usage;

/// The status recorded for a request whose client left before its response was ready.
const CLIENT_CLOSED: u16 = 499;

/// Which outputs a record feeds; fixed at startup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sinks {
    pub metrics: bool,
    pub access_log: bool,
}

/// The facts about one request, filled in as it goes, and emitted once when dropped. Its
/// fields are its own: each phase tells it what happened through a verb (`authenticated`,
/// `admitted`, `attempted`, `answered`, `streamed`, `cut`, …), and its end is written in one
/// place, its drop.
#[derive(Debug)]
pub(crate) struct Record {
    request_id: HeaderValue,
    endpoint: EndpointLabel,
    method: Method,
    uri: Uri,
    received: Instant,
    // Names are shared with this worker's snapshot: a clone is a worker-local count increment.
    key_name: Option<Arc<str>>,
    /// The direct model that answered (or was tried last), once routed.
    model: Option<Arc<str>>,
    /// The group the client named, when it named one.
    group: Option<Arc<str>>,
    /// The provider key's configured name of `model`.
    provider: Option<Arc<str>>,
    stream: bool,
    status: u16,
    upstream_status: Option<u16>,
    /// Time spent waiting on upstreams: each attempt until its answer was in hand, and the
    /// pauses between retries.
    upstream_wait: Duration,
    /// Time in the gateway itself, fixed when the response head is ready.
    overhead: Duration,
    /// When the response head was ready.
    head_at: Option<Instant>,
    /// When the request body was in: the gateway's own time starts there, not counting the
    /// client's upload.
    body_read: Option<Instant>,
    /// The request's charge against its worker's memory budget, given back as it drops.
    held: Held,
    ttft: Option<Duration>,
    usage: Option<Usage>,
    /// Every call to a direct model, in order.
    attempts: Vec<Attempt>,
    /// The error code, when the request failed.
    error: Option<&'static str>,
    outcome: Outcome,
    /// The kind of the request's own failure (not its attempts').
    failure: Option<ErrorKind>,
    /// What the request holds against its limits, settled with its usage when it ends.
    reservation: Option<Reservation>,
    /// What it holds against the limits of the group target it is calling, settled likewise.
    target_reservation: Option<Reservation>,
    /// What the calls before a continuation used, and what that cost at their own prices.
    carried: Option<(Tokens, Usd)>,
    /// The prices of the direct model that answered, for the settlement's spend.
    cost: Option<Cost>,
    /// Whether the provider called last bills the prompt of a request it answers with an
    /// error status (its key's `bill_prompt_on_error`).
    bill_prompt_on_error: bool,
    /// Where the request's limits stood when it was admitted or refused (`x-ratelimit-*`).
    limits: Option<Headroom>,
    /// What the limit phase estimated the request would use.
    estimate: Tokens,
    /// Output tokens a stream produced so far, counted by the relay: for a stream that ends
    /// without a usage count (the client left, the upstream broke off).
    produced: Option<u64>,
    /// The offered tools a translated Responses request left out (`x-aisix-dropped-tools`).
    dropped_tools: Option<HeaderValue>,
    /// The request's trace, when OpenTelemetry export is on.
    trace: Option<Box<crate::otel::Trace>>,
    sinks: Sinks,
    _in_flight: Option<InFlightGuard>,
}

impl Record {
    /// A request's record, boxed: it goes from the handler to the relay and into the response
    /// body (about 1 KiB: every move of it was a copy of that much; a box moves as a pointer).
    pub(crate) fn new(
        request_id: HeaderValue,
        endpoint: EndpointLabel,
        method: Method,
        uri: Uri,
        received: Instant,
        sinks: Sinks,
    ) -> Box<Self> {
        let in_flight = sinks.metrics.then(|| emit::request_started(endpoint));
        Box::new(Self {
            request_id,
            endpoint,
            method,
            uri,
            received,
            key_name: None,
            model: None,
            group: None,
            provider: None,
            stream: false,
            // Until a response is ready, the request's ending is the client's leaving: 499, as
            // nginx records it.
            status: CLIENT_CLOSED,
            upstream_status: None,
            upstream_wait: Duration::ZERO,
            overhead: Duration::ZERO,
            head_at: None,
            body_read: None,
            held: Held::default(),
            ttft: None,
            usage: None,
            attempts: Vec::new(),
            error: Some("client_closed"),
            outcome: Outcome::ClientClosed,
            failure: None,
            reservation: None,
            target_reservation: None,
            carried: None,
            cost: None,
            bill_prompt_on_error: false,
            limits: None,
            estimate: Tokens::default(),
            dropped_tools: None,
            produced: None,
            trace: None,
            sinks,
            _in_flight: in_flight,
        })
    }

    pub(crate) fn request_id(&self) -> &HeaderValue {
        &self.request_id
    }

    pub(crate) fn endpoint(&self) -> EndpointLabel {
        self.endpoint
    }

    pub(crate) fn received(&self) -> Instant {
        self.received
    }

    /// What the limit phase estimated the request would use.
    pub(crate) fn estimate(&self) -> Tokens {
        self.estimate
    }

    /// Output tokens a stream produced so far, as the relay counted them.
    pub(crate) fn produced(&self) -> Option<u64> {
        self.produced
    }

    /// Where the request's limits stood when it was admitted or refused.
    pub(crate) fn limits(&self) -> Option<Headroom> {
        self.limits
    }

    /// OpenTelemetry export is on: the request is traced from here.
    pub(crate) fn traced(&mut self, trace: Box<crate::otel::Trace>) {
        self.trace = Some(trace);
    }

    /// An attempt to `target` starts at `sent_at`: its trace context for the upstream
    /// request, when the request is traced.
    pub(crate) fn trace_attempt(
        &mut self,
        sent_at: Instant,
        target: &Arc<crate::snapshot::DirectRoute>,
        inbound: &crate::request::inbound::Inbound,
    ) -> Option<crate::otel::Outgoing> {
        self.trace
            .as_mut()
            .map(|trace| trace.attempt(sent_at, target, inbound))
    }

    /// The answer named `model`: the trace's `gen_ai.response.model`.
    pub(crate) fn answered_by(&mut self, model: Option<&str>) {
        if let Some(trace) = self.trace.as_mut() {
            trace.answered_by(model);
        }
    }

    /// The answer `json` names its model (read only when the request is traced): the trace's
    /// `gen_ai.response.model`.
    pub(crate) fn answered_in(&mut self, json: &[u8]) {
        if let Some(trace) = self.trace.as_mut() {
            trace.answered_in(json);
        }
    }

    /// What the request's trace reads of it when it ends, moved out of it: called once, as it
    /// drops, after its metrics and access-log line.
    fn take_facts(&mut self) -> crate::otel::Facts {
        crate::otel::Facts {
            request_id: crate::otel::Id::new(self.request_id.as_bytes()),
            endpoint: self.endpoint,
            method: std::mem::take(&mut self.method),
            path: crate::otel::Path::of(self.uri.path()),
            key_name: self.key_name.take(),
            model: self.model.take(),
            group: self.group.take(),
            provider: self.provider.take(),
            stream: self.stream,
            status: self.status,
            ttft: self.ttft,
            usage: self.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            attempts: crate::otel::Attempts::of(std::mem::take(&mut self.attempts)),
            outcome: self.outcome,
            error: self.error,
        }
    }

    /// The client's key is known: the request is counted against its name.
    pub(crate) fn authenticated(&mut self, key_name: Arc<str>) {
        self.key_name = Some(key_name);
    }

    /// The request's charge against its worker's memory budget, which its body read adds to.
    pub(crate) fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    /// The request body is in: the gateway's own time starts now.
    pub(crate) fn body_read(&mut self) {
        self.body_read = Some(Instant::now());
    }

    /// The body was inspected: whether the client asked for a stream.
    pub(crate) fn inspected(&mut self, stream: bool) {
        self.stream = stream;
    }

    /// What the limit phase estimated the request will use.
    pub(crate) fn estimated(&mut self, estimate: Tokens) {
        self.estimate = estimate;
    }

    /// The request's limits admitted it: it holds `reservation` until it ends.
    pub(crate) fn admitted(&mut self, reservation: Reservation) {
        self.limits = Some(*reservation.headroom());
        self.reservation = Some(reservation);
    }

    /// The request's limits refused it, standing at `limits`.
    pub(crate) fn refused(&mut self, limits: Option<Headroom>) {
        self.limits = limits;
    }

    /// The request was routed to `name` (a group's, when `group` is set): until a direct model
    /// is called, it is counted against that name.
    pub(crate) fn routed(&mut self, group: Option<Arc<str>>, name: Arc<str>) {
        self.group = group;
        self.model = Some(name);
    }

    /// A call to the direct model `model` of provider key `provider` starts: a client that
    /// leaves during it is counted against this model, and its answer priced at `cost` (an
    /// error answer at its prompt, where the provider bills prompts on errors).
    pub(crate) fn calling(
        &mut self,
        model: Arc<str>,
        provider: Arc<str>,
        cost: Option<Cost>,
        bill_prompt_on_error: bool,
    ) {
        self.model = Some(model);
        self.provider = Some(provider);
        self.cost = cost;
        self.bill_prompt_on_error = bill_prompt_on_error;
    }

    /// The request waited `pause` between retries.
    pub(crate) fn paused(&mut self, pause: Duration) {
        self.upstream_wait += pause;
    }

    /// A call to `target` (of provider key `provider`) ended after `duration`, answered with
    /// `status` or failed with `error`.
    pub(crate) fn attempted(
        &mut self,
        target: Arc<str>,
        provider: Arc<str>,
        status: Option<u16>,
        duration: Duration,
        error: Option<&GatewayError>,
    ) {
        self.upstream_wait += duration;
        self.upstream_status = status.or_else(|| error.and_then(GatewayError::upstream_status));
        let meaning = error.map(GatewayError::meaning);
        self.attempts.push(Attempt {
            target,
            provider,
            status: self.upstream_status,
            duration,
            error: meaning.map(|m| m.code),
            result: meaning.map_or(Outcome::Success, |m| m.outcome),
            failure: meaning.and_then(|m| m.upstream_error),
        });
    }

    /// A whole answer is in hand, with its `usage` and its charge against the memory budget.
    pub(crate) fn answered(&mut self, usage: Option<Usage>, held: Held) {
        self.held.merge(held);
        self.usage = usage;
    }

    /// What a stream has done so far: its time to first token (kept from the first call that
    /// had one), its usage when reported, and the output tokens the relay counted.
    pub(crate) fn streamed(&mut self, ttft: Option<Duration>, usage: Option<Usage>, produced: u64) {
        self.ttft = self.ttft.or(ttft);
        if let Some(usage) = usage {
            self.usage = Some(usage);
        }
        self.produced = Some(produced);
    }

    /// A whole answer's body passed to its end, reporting `usage`.
    pub(crate) fn completed(&mut self, usage: Option<Usage>) {
        self.usage = usage;
        self.succeeded();
    }

    /// A whole answer's body was cut off with `error`, after reporting `usage`.
    pub(crate) fn cut(&mut self, usage: Option<Usage>, error: &GatewayError) {
        self.usage = usage;
        self.stream_failed(error);
    }

    /// The offered tools a translated Responses request left out, for the access log.
    pub(crate) fn left_out_tools(&mut self, tools: Option<HeaderValue>) {
        self.dropped_tools = tools;
    }

    /// A stream is held until its first token: from here a client that leaves abandons a 200.
    pub(crate) fn holding_stream(&mut self) {
        self.status = 200;
        self.streaming();
    }

    /// The response head is ready with `status`: fixes the gateway's own time (returned).
    pub(crate) fn responded(&mut self, status: u16) -> Duration {
        self.status = status;
        self.mark_head()
    }

    /// The request succeeded (a stream: it ended complete).
    pub(crate) fn succeeded(&mut self) {
        self.outcome = Outcome::Success;
        self.error = None;
        self.failure = None;
    }

    /// The request failed with `error`: its code, outcome and metric labels, as the error kind
    /// says.
    pub(crate) fn failed(&mut self, error: &GatewayError) {
        let meaning = error.meaning();
        self.outcome = meaning.outcome;
        self.error = Some(meaning.code);
        self.failure = Some(error.kind);
    }

    /// A stream under way failed: the request failed, and so did the call that was answering
    /// it.
    pub(crate) fn stream_failed(&mut self, error: &GatewayError) {
        self.failed(error);
        self.answer_broke(error);
    }

    /// The call answering a stream broke off with `error` (the request may still go on, with a
    /// continuation).
    pub(crate) fn answer_broke(&mut self, error: &GatewayError) {
        let meaning = error.meaning();
        if let Some(attempt) = self.attempts.last_mut() {
            attempt.error = Some(meaning.code);
            attempt.result = meaning.outcome;
            attempt.failure = meaning.upstream_error;
        }
    }

    /// Holds `reservation` on the limits of the group target being called, settled with the
    /// request (a previous target's is settled with nothing first).
    pub(crate) fn hold_target(&mut self, reservation: Reservation) {
        self.release_target();
        self.target_reservation = Some(reservation);
    }

    /// The target being called failed before any output: its limits are charged nothing.
    pub(crate) fn release_target(&mut self) {
        if let Some(held) = self.target_reservation.take() {
            held.settle(Charge::default());
        }
    }

    /// A cut stream is about to be continued on another target: what it used so far is priced
    /// now, at the prices of the target that produced it; the continuation's own share will be
    /// priced at its target's.
    pub(crate) fn continuing(&mut self) {
        let used = self.settlement();
        let spend = self.cost.map(|cost| used.cost(&cost)).unwrap_or_default();
        self.carried = Some((used, spend));
    }

    /// What `used` (the whole request's usage) costs: each call at its own target's prices.
    fn spend(&self, used: Tokens) -> Option<Usd> {
        let Some((before, spent)) = self.carried else {
            return self.cost.map(|cost| used.cost(&cost));
        };
        let own = Tokens {
            input: used.input.saturating_sub(before.input),
            output: used.output.saturating_sub(before.output),
        };
        let own = self.cost.map(|cost| own.cost(&cost)).unwrap_or_default();
        Some(Usd::from_nanos(spent.nanos().saturating_add(own.nanos())))
    }

    /// From here on the stream's ending is the client's leaving, until it ends otherwise.
    pub(crate) fn streaming(&mut self) {
        self.outcome = Outcome::ClientClosed;
        self.error = Some("client_closed");
        self.failure = None;
    }

    /// Fixes the gateway's own time so far: everything since the request body was in (or the
    /// head, for a request refused before its body was read) except the upstream wait.
    pub(crate) fn mark_head(&mut self) -> Duration {
        let now = Instant::now();
        self.head_at = Some(now);
        let start = self.body_read.unwrap_or(self.received);
        self.overhead = now
            .saturating_duration_since(start)
            .saturating_sub(self.upstream_wait);
        self.overhead
    }

    /// What the request is charged, by how it ended: the one settlement rule (README,
    /// "Settlement"), applied to its limit reservation and to the spend metric alike.
    ///
    /// | ending | charged |
    /// |---|---|
    /// | the upstream reported usage | that usage (`count_tokens` translated to a chat call: the prompt that call was billed) |
    /// | `count_tokens` otherwise | nothing (free at Anthropic; no output is reserved) |
    /// | a stream ended without usage (cut, client gone, no usage chunk) | the prompt estimate and the output the relay counted |
    /// | a whole answer without usage | the estimate: prompt, and the output reserved |
    /// | the client left while an upstream call was under way | the prompt estimate |
    /// | the provider answered with an error status, before any output, and bills prompts on errors | the prompt estimate |
    /// | refused, or failed upstream before any output | nothing |
    fn settlement(&self) -> Tokens {
        if let Some(usage) = self.usage {
            return Tokens {
                input: usage.prompt_tokens,
                output: usage.completion_tokens,
            };
        }
        if self.endpoint == EndpointLabel::CountTokens {
            return Tokens::default();
        }
        if let Some(output) = self.produced {
            return Tokens {
                input: self.estimate.input,
                output,
            };
        }
        let answered_an_error = self.upstream_status.is_some_and(|status| status >= 400);
        match self.outcome {
            _ if answered_an_error && self.bill_prompt_on_error => Tokens {
                input: self.estimate.input,
                output: 0,
            },
            Outcome::Success => self.estimate,
            // `provider` is named as a call starts: the prompt went out.
            Outcome::ClientClosed if self.provider.is_some() => Tokens {
                input: self.estimate.input,
                output: 0,
            },
            _ => Tokens::default(),
        }
    }

    fn emit_metrics(&self, latency: Duration, spend: Option<Usd>) {
        let model = self.model.as_deref().unwrap_or(UNROUTED);
        let provider = self.provider.as_deref().unwrap_or(UNROUTED);
        emit::request(
            &RequestLabels {
                endpoint: self.endpoint,
                api_key: self.key_name.as_deref().unwrap_or(UNROUTED),
                model,
                provider,
                status: StatusClass::from_status(self.status),
                outcome: self.outcome,
            },
            &RequestFacts {
                duration: latency,
                overhead: self.overhead,
                tokens: self.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
                ttft: self.ttft.filter(|_| self.stream),
            },
        );
        if let (Some(spend), Some(key)) = (spend.filter(|s| *s > Usd::ZERO), &self.key_name) {
            emit::spend(key, model, spend.nanos() as f64 / 1e9);
        }
        // The name the client sent: the group's, or the direct model's own.
        let named = self.group.as_deref().unwrap_or(model);
        let mut previous: Option<&str> = None;
        for attempt in &self.attempts {
            emit::upstream_attempt(named, &attempt.target, attempt.result);
            if let Some(kind) = attempt.failure {
                emit::upstream_error(&attempt.provider, kind);
            }
            if let Some(from) = previous.filter(|from| *from != &*attempt.target) {
                emit::fallback(named, from, &attempt.target);
            }
            previous = Some(&attempt.target);
        }
        if let Some(meaning) = self.failure.map(ErrorKind::meaning) {
            if let Some(reason) = meaning.auth_failure {
                emit::auth_failure(reason);
            }
            if self.failure == Some(ErrorKind::BodyTooLarge) {
                emit::body_rejected(self.endpoint);
            }
        }
    }

    fn write_access_log(&self, latency: Duration) {
        access_log::record(&access_log::Entry {
            request_id: self.request_id.to_str().unwrap_or_default(),
            method: self.method.as_str(),
            path: self.uri.path(),
            status: self.status,
            model: self.model.as_deref(),
            group: self.group.as_deref(),
            provider: self.provider.as_deref(),
            key: self.key_name.as_deref(),
            input_tokens: self.usage.map(|u| u.prompt_tokens),
            output_tokens: self.usage.map(|u| u.completion_tokens),
            latency,
            ttft: self.ttft,
            upstream_status: self.upstream_status,
            error: self.error,
            stream: self.stream,
            overhead: self.overhead,
            attempts: &self.attempts,
            dropped_tools: self.dropped_tools.as_ref().and_then(|v| v.to_str().ok()),
        });
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let used = self.settlement();
        let spend = self.spend(used);
        let charge = Charge {
            tokens: used.total(),
            spend: spend.unwrap_or_default(),
        };
        for reservation in [self.reservation.take(), self.target_reservation.take()]
            .into_iter()
            .flatten()
        {
            reservation.settle(charge);
        }
        // A whole response is done when its head is (its body goes out with it); a stream
        // ends now.
        let latency = match self.head_at {
            Some(head_at) if !self.stream => head_at - self.received,
            _ => self.received.elapsed(),
        };
        if self.sinks.metrics {
            self.emit_metrics(latency, spend);
        }
        if self.sinks.access_log {
            self.write_access_log(latency);
        }
        if let Some(trace) = self.trace.take() {
            crate::otel::finish(trace, self.take_facts(), latency, spend);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::record;

    fn usage(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }

    #[tokio::test]
    async fn a_continued_stream_is_priced_at_each_target_s_own_prices() {
        let cheap = Cost {
            input_per_1k: Usd::parse("0.001").unwrap(),
            output_per_1k: Usd::parse("0.002").unwrap(),
        };
        let dear = Cost {
            input_per_1k: Usd::parse("0.01").unwrap(),
            output_per_1k: Usd::parse("0.02").unwrap(),
        };
        let mut record = record();
        // The first target streamed 10 prompt + 40 output tokens, then was cut.
        record.cost = Some(cheap);
        record.usage = Some(usage(10, 40));
        record.continuing();
        // The dear one continued: the summed usage adds its 60 prompt and 20 output tokens.
        record.cost = Some(dear);
        record.usage = Some(usage(70, 60));
        let used = record.settlement();
        assert_eq!((used.input, used.output), (70, 60));
        // 10×1 + 40×2 micro-dollars, then 60×10 + 20×20.
        assert_eq!(
            record.spend(used),
            Some(Usd::from_nanos((90 + 1000) * 1000))
        );
    }

    #[tokio::test]
    async fn an_error_answer_charges_its_prompt_only_where_the_provider_bills_it() {
        let mut record = record();
        record.estimate = Tokens {
            input: 30,
            output: 16,
        };
        record.upstream_status = Some(500);
        assert_eq!(record.settlement(), Tokens::default(), "off by default");
        record.bill_prompt_on_error = true;
        assert_eq!(
            record.settlement(),
            Tokens {
                input: 30,
                output: 0
            }
        );
        // No answer at all (connection refused): the provider saw nothing to bill.
        record.upstream_status = None;
        assert_eq!(record.settlement(), Tokens::default());
    }

    #[tokio::test(start_paused = true)]
    async fn the_overhead_starts_when_the_body_has_been_read() {
        let mut record = record();
        // The client takes a second to upload its body.
        tokio::time::advance(Duration::from_secs(1)).await;
        record.body_read = Some(Instant::now());
        tokio::time::advance(Duration::from_millis(5)).await;
        record.upstream_wait = Duration::from_millis(3);
        assert_eq!(record.mark_head(), Duration::from_millis(2));
    }
}
