//! The attempt loop: walks a request's [`Plan`], calling one direct model at a time through its
//! provider adapter, until one answers or nothing is left to try. Dialect-agnostic: an attempt
//! is (direct model, the adapter's request from the client's) → the adapter's answer in the
//! client's dialect, or a [`GatewayError`] whose kind says whether another try may help.
//!
//! The rules, in order of the loop:
//! - A group skips direct models that are cooling down; when every one is, the request gets
//!   503 `all_candidates_unavailable` with `Retry-After` at the nearest cooldown's end, unless
//!   the group says `when_all_unavailable: try_anyway`. A direct model named by the client is
//!   always called.
//! - A retryable failure (connect error, reset before the head, 5xx, 408, a stream that failed
//!   before its first token, 429 with `retry_on_429`) is retried on the same direct model up to
//!   `retries` times, after a jittered backoff or the upstream's `Retry-After`, while the
//!   model's retry budget allows and the request's deadline leaves room; then the request falls
//!   over to the next direct model (at most `max_fallbacks` times).
//! - A direct model that never answered (first-byte timeout) is not retried: the request falls
//!   over at once. Nor is one whose provider key the upstream refused (401, 402, 403, an
//!   exhausted quota: `insufficient_quota`, `billing_error`), which also cools down for
//!   `upstream.key_cooldown_ms`. A `Retry-After` longer than [`retry::LONG_WAIT`] is not waited for either.
//! - Any other 4xx is returned as it is, or falls over when its status is in
//!   `fallback_on_statuses` or its kind, read from the body in any dialect, is in
//!   `fallback_on_errors` (`context_length_exceeded`, `content_filter`). Nothing is tried
//!   after the request's own deadline.
//! - A stream is held until its first token while another attempt could still follow, so one
//!   that fails before it falls over too; after it, the relay streams (and, with
//!   `continue_on_cut`, asks [`Attempts::continuation`] for the rest of an answer cut short).
//!
//! Every attempt is written to the request's record (target, status, duration, result) and
//! holds a [`Ticket`] that reports how it ended to its direct model's shared state (cooldown,
//! latency, load): at once for an answer held whole or an error, at the end of the body for
//! one relayed (a stream cut after its head counts like one cut before it).

use std::sync::Arc;
use std::time::Duration;

use aisix_config::WhenAllUnavailable;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use tokio::time::Instant;

use crate::account::Record;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::limit::memory_budget::MemoryBudget;
use crate::limit::{Charge, Refused};
use crate::provider::events::{Events, StreamSettings};
use crate::provider::{self, Answer, Call, Carried, StreamMap, Unary};
use crate::request::deadline;
use crate::request::inbound::Inbound;
use crate::route::Plan;
use crate::snapshot::{DirectRoute, GroupRoute};
use crate::target::refusal::UpstreamRefusal;
use crate::target::retry::{self, LONG_WAIT};
use crate::target::state::{Admission, Excuse, StateClock, Verdict};
use crate::upstream::pool::Pool;
use crate::wire::anthropic::stream::Blocks;

/// What every attempt of one worker needs.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub pool: Pool,
    pub deadlines: deadline::Defaults,
    pub stream: StreamSettings,
    /// `upstream.max_response_bytes`.
    pub max_response_bytes: usize,
    /// The request's memory budget: the worker's, and its key's share.
    pub budget: MemoryBudget,
    pub clock: StateClock,
}

/// A direct model's answer, ready for the relay.
pub(crate) enum Served {
    Complete {
        status: StatusCode,
        content_type: HeaderValue,
        body: Bytes,
    },
    /// A whole answer whose body is relayed as it arrives.
    Unary(Box<Unary>),
    Stream(Box<Events>),
}

/// One request's walk through its plan.
pub(crate) struct Attempts {
    ctx: Ctx,
    plan: Plan,
    inbound: Inbound,
    request_id: HeaderValue,
    received: Instant,
    /// The plan's next direct model.
    next: usize,
    /// Direct models called so far.
    called: u32,
    /// The direct model that answered.
    answered: Option<Arc<DirectRoute>>,
    /// The group's direct models the client's key may not call: an answer from one names
    /// the group instead.
    hidden: Vec<Arc<str>>,
}

/// Where a failed attempt leaves the request.
enum Move {
    /// Try this direct model again.
    Retry(Duration),
    /// On to the next direct model.
    Next,
    /// The request ends with this error.
    Stop,
}

/// The end of [`Attempts::continuation`].
pub(crate) enum Continued {
    /// The next direct model took over the stream.
    Resumed {
        events: Box<Events>,
        record: Box<Record>,
        rest: Box<Attempts>,
    },
    /// Nothing could continue it: the stream ends with this error.
    Failed(GatewayError, Box<Record>),
}

impl Attempts {
    pub(crate) fn new(
        ctx: Ctx,
        plan: Plan,
        inbound: Inbound,
        request_id: HeaderValue,
        received: Instant,
    ) -> Self {
        Self {
            ctx,
            plan,
            inbound,
            request_id,
            received,
            next: 0,
            called: 0,
            answered: None,
            hidden: Vec::new(),
        }
    }

    /// Names the group, not these direct models of it, to the client (its key may not call
    /// them).
    pub(crate) fn hide(&mut self, hidden: Vec<Arc<str>>) {
        self.hidden = hidden;
    }

    /// The group to name instead of `target`, when the client may not see `target`'s name.
    fn hidden_by(&self, target: &DirectRoute) -> Option<&GroupRoute> {
        let group = self.plan.group()?;
        self.hidden.contains(&target.name).then_some(&**group)
    }

    /// The `x-aisix-served-by` of the answer: the direct model that gave it (its group when
    /// the key may not call that model).
    pub(crate) fn served_by(&self) -> Option<HeaderValue> {
        let route = self.answered.as_ref()?;
        Some(match self.hidden_by(route) {
            Some(group) => group.served_by.clone(),
            None => route.served_by.clone(),
        })
    }

    /// The tools a translated Responses answer's request left out (`x-aisix-dropped-tools`).
    pub(crate) fn dropped_tools(&self) -> Option<HeaderValue> {
        let dropped = self.inbound.dropped_tools.get();
        if dropped.is_empty() {
            return None;
        }
        HeaderValue::from_str(&dropped.names()).ok()
    }

    /// Whether a stream cut after its first token may be continued on the next direct model.
    pub(crate) fn continues_cut_streams(&self) -> bool {
        self.plan.policy().continue_on_cut && self.next < self.plan.len()
    }

    /// The attempt loop: the first answer of the plan's direct models, or the error to return.
    pub(crate) async fn run(&mut self, record: &mut Record) -> Result<Served, GatewayError> {
        // Until a direct model is called, the request is counted against the name it used.
        record.routed(
            self.plan.group().map(|g| g.name.clone()),
            self.plan.name().clone(),
        );
        let mut last_error = None;
        let mut cooling_until: Option<u64> = None;
        let mut ignore_cooling = false;
        let mut last_refusal: Option<Refused> = None;
        loop {
            while let Some((target, probe)) = self.next_target(ignore_cooling, &mut cooling_until) {
                if let Err(refused) = self.within_target_limits(&target, probe, record).await {
                    last_refusal = Some(refused);
                    continue;
                }
                match self.call_target(&target, probe, record).await {
                    Ok(served) => return Ok(served),
                    Err((error, Move::Stop)) => return Err(error),
                    Err((error, _)) => {
                        // It failed before any output: its own limits are charged nothing.
                        record.release_target();
                        last_error = Some(error);
                    }
                }
            }
            if let Some(error) = last_error {
                return Err(error);
            }
            if let Some(refused) = last_refusal.take() {
                return Err(refused.into());
            }
            match (cooling_until, self.plan.policy().when_all_unavailable) {
                (Some(_), WhenAllUnavailable::TryAnyway) if !ignore_cooling => {
                    ignore_cooling = true;
                    self.next = 0;
                }
                _ => return Err(self.all_unavailable(cooling_until)),
            }
        }
    }

    /// The next direct model to call, skipping those cooling down (noting the soonest end),
    /// with the stamp of its probe when this call is one (else 0); `None` when the plan (or
    /// its fallbacks) are spent.
    fn next_target(
        &mut self,
        ignore_cooling: bool,
        cooling_until: &mut Option<u64>,
    ) -> Option<(Arc<DirectRoute>, u64)> {
        let policy = self.plan.policy();
        if self.called > policy.max_fallbacks {
            return None;
        }
        while let Some(target) = self.plan.target(self.next).cloned() {
            self.next += 1;
            let mut probe = 0;
            if policy.skip_cooling && !ignore_cooling {
                match target.state.admit(self.ctx.clock.now_ms()) {
                    Admission::Cooling(until) => {
                        *cooling_until = Some(cooling_until.map_or(until, |u: u64| u.min(until)));
                        continue;
                    }
                    Admission::Probe(stamp) => probe = stamp,
                    Admission::Open => {}
                }
            }
            self.called += 1;
            return Some((target, probe));
        }
        None
    }

    /// Reserves on `target`'s own limits when a group calls it (a request naming it reserved
    /// them up front): a target they refuse is passed over like a cooling one, its probe (if
    /// this call was one) given back. A direct model without limits costs nothing here.
    async fn within_target_limits(
        &self,
        target: &Arc<DirectRoute>,
        probe: u64,
        record: &mut Record,
    ) -> Result<(), Refused> {
        let (Some(_), Some(limits)) = (self.plan.group(), &target.limits) else {
            return Ok(());
        };
        let estimate = record.estimate();
        let charge = Charge {
            tokens: estimate.total(),
            spend: target.cost.map(|c| estimate.cost(&c)).unwrap_or_default(),
        };
        match limits.limiter().reserve(&[limits], charge).await {
            Ok(reservation) => {
                record.hold_target(reservation);
                Ok(())
            }
            Err(refused) => {
                tracing::debug!(target = %target.name, "passed over: its own limits refused");
                if probe != 0 {
                    let now = self.ctx.clock.now_ms();
                    drop(
                        target
                            .state
                            .ticket(self.ctx.clock, now, probe, false, Excuse::default()),
                    );
                }
                Err(refused)
            }
        }
    }

    /// Whether another direct model may be called after the current one.
    fn may_fall_over(&self) -> bool {
        self.next < self.plan.len() && self.called <= self.plan.policy().max_fallbacks
    }

    /// Calls `target`, retrying it as the policy allows.
    async fn call_target(
        &mut self,
        target: &Arc<DirectRoute>,
        mut probe: u64,
        record: &mut Record,
    ) -> Result<Served, (GatewayError, Move)> {
        let retries = target.retries.unwrap_or(self.plan.policy().retries);
        if retries > 0 {
            target.state.budget_request(self.ctx.clock.now_ms());
        }
        let mut retry = 0;
        loop {
            let hold = retry < retries || self.may_fall_over();
            // Only the first call is the probe: its failure cools the model again.
            let error = match self
                .attempt(
                    target,
                    std::mem::take(&mut probe),
                    record,
                    &self.inbound,
                    hold,
                    |_| {},
                )
                .await
            {
                Ok(served) => {
                    self.answered = Some(target.clone());
                    return Ok(served);
                }
                Err(error) => error,
            };
            match self.judge(target, &error, retry) {
                Move::Retry(pause) => {
                    tracing::debug!(target = %target.name, retry = retry + 1, ?pause, "retrying");
                    tokio::time::sleep(pause).await;
                    record.paused(pause);
                    retry += 1;
                }
                next => return Err((error, next)),
            }
        }
    }

    /// Decides what comes after a failed call (its ticket has reported it).
    fn judge(&self, target: &DirectRoute, error: &GatewayError, retry: u32) -> Move {
        let meaning = error.meaning();
        let policy = self.plan.policy();
        let now = self.ctx.clock.now_ms();
        let retry_after = error.retry_after.as_ref().and_then(retry::retry_after);
        if meaning.side != Side::Upstream {
            return Move::Stop;
        }
        // Nothing is tried after the request's own deadline, whatever the failure.
        let end = self.ctx.clock.ms_at(self.deadline_end(target));
        if now >= end {
            return Move::Stop;
        }
        let key_refused = error.refusal.is_some_and(UpstreamRefusal::of_the_key);
        if !meaning.retryable && !key_refused {
            let listed = error
                .upstream_status()
                .is_some_and(|s| policy.fallback_on_statuses.contains(&s))
                || error
                    .refusal
                    .is_some_and(|r| policy.fallback_on_errors.contains(&r));
            return if listed { Move::Next } else { Move::Stop };
        }
        // A refused key fails again on every retry: on to the next model's key.
        let never_answered = error.kind == ErrorKind::UpstreamTimeout || key_refused;
        let rate_limited = error.upstream_status() == Some(429);
        let long_wait = retry_after.is_some_and(|wait| wait > LONG_WAIT);
        if never_answered || long_wait || (rate_limited && !policy.retry_on_429) {
            return Move::Next;
        }
        if retry >= target.retries.unwrap_or(policy.retries) || !target.state.budget_retry(now) {
            return Move::Next;
        }
        let pause = retry::pause(retry + 1, retry_after);
        let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_add(pause_ms) >= end {
            return Move::Next;
        }
        Move::Retry(pause)
    }

    /// When the request must be done by, for a call to `target`.
    fn deadline_end(&self, target: &DirectRoute) -> Instant {
        self.ctx
            .deadlines
            .upstream(&self.plan.timeouts(target), self.received, self.received)
            .end
    }

    /// One call to `target` with `inbound` (the probe of its cooldown when `probe` is a stamp),
    /// written to the record; a stream is held until its first token when `hold` (`prepare`
    /// sets its map up first).
    async fn attempt(
        &self,
        target: &Arc<DirectRoute>,
        probe: u64,
        record: &mut Record,
        inbound: &Inbound,
        hold: bool,
        prepare: impl FnOnce(&mut StreamMap),
    ) -> Result<Served, GatewayError> {
        let sent_at = Instant::now();
        let deadlines =
            self.ctx
                .deadlines
                .upstream(&self.plan.timeouts(target), self.received, sent_at);
        let excuse = self.plan.excuse(
            target,
            self.ctx.deadlines.upstream,
            self.ctx.clock,
            deadlines.end,
        );
        let mut ticket = target.state.ticket(
            self.ctx.clock,
            self.ctx.clock.ms_at(sent_at),
            probe,
            target.track_load,
            excuse,
        );
        // Named before the call: a client that leaves during it is counted against this model.
        record.calling(
            target.name.clone(),
            target.provider.name.clone(),
            target.cost,
            target.provider.bill_prompt_on_error,
        );
        let context = record.trace_attempt(sent_at, target, inbound);
        let answer = provider::call(Call {
            pool: &self.ctx.pool,
            route: target,
            inbound,
            deadlines: &deadlines,
            request_id: &self.request_id,
            context: context.as_ref(),
            rename: self.plan.group().is_some(),
            hidden_by: self.hidden_by(target),
            max_response_bytes: self.ctx.max_response_bytes,
            budget: &self.ctx.budget,
            room_by: self.ctx.deadlines.body(self.received),
        })
        .await;
        let mut status = None;
        let result = match answer {
            Ok(Answer::Complete {
                status: answered,
                content_type,
                body,
                usage,
                model,
                held,
                waited,
            }) => {
                status = Some(answered);
                ticket.first_token(waited);
                ticket.settle(Verdict::Answered);
                record.answered(usage, held);
                if model.is_some() {
                    record.answered_by(model.as_deref());
                }
                Ok(Served::Complete {
                    status: answered,
                    content_type,
                    body,
                })
            }
            Ok(Answer::Unary { mut answer, waited }) => {
                status = Some(answer.status);
                ticket.first_token(waited);
                answer.ticket = Some(ticket);
                Ok(Served::Unary(Box::new(answer)))
            }
            Ok(Answer::Stream {
                status: answered,
                body,
                lease,
                mut map,
            }) => {
                // Its latency is its first token's, which its events learn.
                status = Some(answered);
                if self.plan.policy().continue_on_cut {
                    map.keep_text("");
                }
                prepare(&mut map);
                let mut events = Box::new(Events::new(
                    body,
                    lease,
                    map,
                    self.ctx.stream,
                    deadlines,
                    sent_at,
                    Some(ticket),
                ));
                events.called(&target.provider);
                if context.is_some() {
                    events.seek_model();
                }
                if hold {
                    events
                        .hold(&self.ctx.budget)
                        .await
                        .map(|()| Served::Stream(events))
                } else {
                    Ok(Served::Stream(events))
                }
            }
            Err(error) => {
                ticket.settle_error(&error);
                Err(error)
            }
        };
        let duration = sent_at.elapsed();
        record.attempted(
            target.name.clone(),
            target.provider.name.clone(),
            status.map(|s| s.as_u16()),
            duration,
            result.as_ref().err(),
        );
        result
    }

    /// 503 `all_candidates_unavailable`, to retry when the soonest cooldown ends.
    fn all_unavailable(&self, until: Option<u64>) -> GatewayError {
        let mut error = GatewayError::new(
            ErrorKind::AllCandidatesUnavailable,
            format!(
                "Every model of '{}' is cooling down after failures; retry later.",
                self.plan.name()
            ),
        );
        let wait_ms = until.map_or(0, |u| u.saturating_sub(self.ctx.clock.now_ms()));
        error.retry_after = Some(HeaderValue::from(wait_ms.div_ceil(1000).max(1)));
        error
    }

    /// Asks the plan's next direct models that truly continue (their `continuation` is not
    /// `none`), in turn, to continue a stream cut after its first token (`cause`): the
    /// client's request plus an assistant message holding `text`, the text already sent, in
    /// the form each one's method asks for. The first whose continuation reaches its own
    /// first token takes over (its usage added to `carried`, its events going on from the
    /// client's blocks `at`). One that refuses or fails is passed over; it is never restarted
    /// from the beginning. When none takes over, the stream ends with the cut itself, named
    /// with the tokens sent before it.
    pub(crate) async fn continuation(
        mut self: Box<Self>,
        mut record: Box<Record>,
        text: String,
        carried: Carried,
        at: Blocks,
        cause: GatewayError,
    ) -> Continued {
        let tokens = record.produced().unwrap_or(0);
        let mut cooling = None;
        let mut tried = 0u32;
        while let Some((target, probe)) = self.next_target(false, &mut cooling) {
            let Some(inbound) = self.inbound.continuation(&text, target.continuation) else {
                // It cannot continue this request: passed over, not counted as a fallback.
                self.called -= 1;
                continue;
            };
            if Instant::now() >= self.deadline_end(&target) {
                break;
            }
            tried += 1;
            let prepare = |map: &mut StreamMap| {
                map.continuing(carried, at);
                map.keep_text(&text);
            };
            match self
                .attempt(&target, probe, &mut record, &inbound, true, prepare)
                .await
            {
                Ok(Served::Stream(events)) => {
                    self.answered = Some(target);
                    return Continued::Resumed {
                        events,
                        record,
                        rest: self,
                    };
                }
                Ok(Served::Complete { .. } | Served::Unary(_)) => {
                    tracing::info!(target = %target.name, "a continuation was answered whole; passed over");
                }
                Err(error) => {
                    tracing::info!(target = %target.name, code = error.code(), "a continuation failed; passed over");
                }
            }
        }
        let why = if tried == 0 {
            "no other target of the group continues an answer"
        } else {
            "every target asked to continue it refused or failed"
        };
        Continued::Failed(cut_named(&cause, tokens, why), record)
    }
}

/// The error that ends a stream cut (`cause`) after `tokens` output tokens, saying `why` it
/// was not continued: the cut, not a later refusal, is what the client is told.
pub(crate) fn cut_named(cause: &GatewayError, tokens: u64, why: &str) -> GatewayError {
    GatewayError::new(
        cause.kind,
        format!(
            "The upstream stream broke off after {tokens} tokens ({}); it was not continued: {why}.",
            cause.message.trim_end_matches('.')
        ),
    )
}
