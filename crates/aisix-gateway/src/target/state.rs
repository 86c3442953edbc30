//! What every worker knows about each direct model and group, shared across workers without a
//! lock: a direct model's cooldown (closed, cooling, half-open with one probe), its retry
//! budget, its requests in flight and its moving average of latency; a group's round-robin
//! position. All of it lives in atomics read and written on the request path.
//!
//! Every call to a direct model holds a [`Ticket`] from its send to the end of its answer (the
//! last byte of a stream or a whole body, not its head), and the ticket reports how the call
//! ended exactly once ([`Verdict`]): a failure after the head counts like one before it, a
//! probe is released whatever its end (the client leaving included), and a failure of a call
//! sent before the current cooldown started (a straggler) changes nothing.
//!
//! State is keyed by name and a hash of the entry's configuration: a reload keeps it for
//! entries that did not change ([`States::carry_over`]) and starts afresh for those that did.
//! Times are milliseconds since the process's routing epoch (see [`StateClock`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use aisix_config::{Model, ModelGroup, ProviderKey, Resilience, Resources};
use aisix_obs::metrics::emit;
use tokio::time::Instant;

use crate::error::{ErrorKind, GatewayError, Side};
use crate::target::refusal::UpstreamRefusal;
use crate::target::retry::{self, LONG_WAIT};

/// The retry budget's window.
const BUDGET_WINDOW_SECS: u64 = 10;
/// Retries a direct model may take per budget window whatever its traffic, so that a quiet
/// one can still retry (the budget is on when its percentage is above zero).
const BUDGET_FLOOR: u64 = 3;
/// Weight of a new sample in the latency average.
const EWMA_WEIGHT: f64 = 0.3;
/// The latency a direct model is taken to have until its first call is measured: one second,
/// a usual time to first token of a hosted chat model. A new (or reloaded) target sorts among
/// measured ones by it instead of first at zero.
pub(crate) const UNMEASURED_LATENCY: Duration = Duration::from_secs(1);

/// `aisix_target_state` values.
const AVAILABLE: u8 = 0;
const COOLING: u8 = 1;
const HALF_OPEN: u8 = 2;

/// Milliseconds on one clock for every worker: the time since the epoch the clock was made at.
/// Built on tokio's clock, so tests that pause time move it too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateClock {
    epoch: Instant,
}

impl Default for StateClock {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }
}

impl StateClock {
    pub(crate) fn now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    pub(crate) fn ms_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Whether a request may call a direct model now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Not cooling: go ahead.
    Open,
    /// The cooldown is over and this request is the one probe that tests it (the stamp of its
    /// place, for its [`Ticket`]).
    Probe(u64),
    /// Cooling until this time (ms): skip it.
    Cooling(u64),
}

/// One direct model's shared state.
// shared: cooldown, retry budget and load of a direct model must be the same for every worker,
// or each would hammer a failing provider on its own schedule.
#[derive(Debug)]
pub(crate) struct TargetState {
    name: Arc<str>,
    settings: Resilience,
    /// `window start (ms) << 16 | failures in it`.
    failures: AtomicU64,
    /// When the cooldown ends (ms); 0 when not cooling.
    cooling_until: AtomicU64,
    /// When the half-open probe was let through (ms); 0 when none is out.
    probe_at: AtomicU64,
    /// When the last cooldown started (ms); 0 before the first.
    tripped_at: AtomicU64,
    /// Whether the cooldown gauge counts this model (from its start to its successful probe).
    counted: AtomicBool,
    /// `window (10 s periods since the epoch) << 32 | requests << 16 | retries`.
    budget: AtomicU64,
    in_flight: AtomicU32,
    /// Moving average of time to first token (first byte of a whole answer), failures and
    /// timeouts folded in as penalties, in µs; 0 before the first sample.
    latency_us: AtomicU64,
}

impl TargetState {
    pub(crate) fn new(name: &str, settings: Resilience) -> Self {
        Self {
            name: name.into(),
            settings,
            failures: AtomicU64::new(0),
            cooling_until: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
            tripped_at: AtomicU64::new(0),
            counted: AtomicBool::new(false),
            budget: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            latency_us: AtomicU64::new(0),
        }
    }

    /// Whether a request may call this model at `now`. Costs one load when it is not cooling.
    pub(crate) fn admit(&self, now: u64) -> Admission {
        let until = self.cooling_until.load(Relaxed);
        if until == 0 {
            return Admission::Open;
        }
        if now < until {
            return Admission::Cooling(until);
        }
        // Half-open: one probe at a time; a probe that never reports back (its client left)
        // frees the place after another cooldown's length.
        let lease = duration_ms(self.settings.cooldown);
        let probe = self.probe_at.load(Relaxed);
        if probe != 0 && now < probe.saturating_add(lease) {
            return Admission::Cooling(probe.saturating_add(lease));
        }
        let stamp = now.max(1);
        match self
            .probe_at
            .compare_exchange(probe, stamp, Relaxed, Relaxed)
        {
            Ok(_) => {
                emit::target_state(&self.name, HALF_OPEN);
                Admission::Probe(stamp)
            }
            Err(_) => Admission::Cooling(now.saturating_add(lease)),
        }
    }

    /// A call for `ticket` ended as `verdict`. Costs one load for an answer when the model is
    /// not cooling and the call was no probe; the clock is read only for a failure.
    fn report(&self, ticket: &Ticket, verdict: Verdict, now: impl FnOnce() -> u64) {
        match verdict {
            Verdict::Answered => {
                if (ticket.probe != 0 || self.cooling_until.load(Relaxed) != 0)
                    && !self.straggler(ticket.sent)
                {
                    self.reopen();
                }
            }
            Verdict::Silent => {
                if ticket.probe != 0 {
                    self.release_probe(ticket.probe);
                }
            }
            Verdict::Failed { retry_after } => {
                let now = now();
                if ticket.load {
                    self.penalise(now.saturating_sub(ticket.sent));
                }
                self.failed(now, ticket, retry_after);
            }
            Verdict::KeyRefused => {
                let now = now();
                if !self.straggler(ticket.sent)
                    && (ticket.probe != 0 || self.cooling_until.load(Relaxed) == 0)
                {
                    let current = self.cooling_until.load(Relaxed);
                    self.trip(now, current, self.settings.key_cooldown, None);
                }
            }
        }
    }

    /// Whether a call sent at `sent` was already under way when the last cooldown started.
    fn straggler(&self, sent: u64) -> bool {
        sent < self.tripped_at.load(Relaxed)
    }

    /// The cooldown (and its probe) is over.
    fn reopen(&self) {
        if self.cooling_until.swap(0, Relaxed) != 0 {
            self.probe_at.store(0, Relaxed);
            self.failures.store(0, Relaxed);
            emit::target_state(&self.name, AVAILABLE);
            if self.counted.swap(false, Relaxed) {
                emit::targets_cooling(false);
            }
        }
    }

    /// A probe that says nothing of the model gives its place up to the next request.
    fn release_probe(&self, stamp: u64) {
        if self
            .probe_at
            .compare_exchange(stamp, 0, Relaxed, Relaxed)
            .is_ok()
            && self.cooling_until.load(Relaxed) != 0
        {
            emit::target_state(&self.name, COOLING);
        }
    }

    /// A call failed in a way that counts against the model; `retry_after` is what the
    /// upstream asked for. A failed probe starts a new cooldown at once; otherwise, while the
    /// model is cooling nothing changes (only its probe decides), and a cooldown starts after
    /// `cooldown_failures` failures within the window, or at once for a `Retry-After` longer
    /// than [`LONG_WAIT`]. A straggler's failure changes nothing (a probe's included, whose
    /// place a later probe took and failed).
    fn failed(&self, now: u64, ticket: &Ticket, retry_after: Option<Duration>) {
        if self.straggler(ticket.sent) {
            return;
        }
        let ttl = self.settings.cooldown;
        if ticket.probe != 0 {
            let current = self.cooling_until.load(Relaxed);
            self.trip(now, current, ttl, retry_after);
            return;
        }
        if self.cooling_until.load(Relaxed) != 0 {
            return;
        }
        let long_wait = retry_after.is_some_and(|wait| wait > LONG_WAIT);
        if long_wait || self.count_failure(now) >= self.settings.cooldown_failures {
            self.trip(now, 0, ttl, retry_after);
        }
    }

    /// Starts a cooldown of `ttl` (or the `Retry-After` asked, up to `retry_after_max`) at
    /// `now` if `cooling_until` still reads `seen`: one trip, counted once, whoever else
    /// failed at the same time.
    fn trip(&self, now: u64, seen: u64, ttl: Duration, retry_after: Option<Duration>) {
        let settings = self.settings;
        if !settings.enabled {
            return;
        }
        let ttl = duration_ms(ttl);
        let asked = retry_after
            .map(|wait| duration_ms(wait.min(settings.retry_after_max)))
            .unwrap_or(0);
        let until = now.saturating_add(ttl.max(asked)).max(1);
        if self
            .cooling_until
            .compare_exchange(seen, until, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        self.tripped_at.store(now.max(1), Relaxed);
        self.probe_at.store(0, Relaxed);
        self.failures.store(0, Relaxed);
        emit::cooldown(&self.name);
        emit::target_state(&self.name, COOLING);
        if !self.counted.swap(true, Relaxed) {
            emit::targets_cooling(true);
        }
    }

    /// Counts one failure in the current window; returns the count.
    fn count_failure(&self, now: u64) -> u32 {
        let window = duration_ms(self.settings.cooldown_window);
        let mut current = self.failures.load(Relaxed);
        loop {
            let (start, count) = (current >> 16, (current & 0xffff) as u32);
            let (start, count) = if now.saturating_sub(start) >= window || start > now {
                (now, 1)
            } else {
                (start, (count + 1).min(0xffff))
            };
            let next = (start << 16) | u64::from(count);
            match self
                .failures
                .compare_exchange_weak(current, next, Relaxed, Relaxed)
            {
                Ok(_) => return count,
                Err(seen) => current = seen,
            }
        }
    }

    /// Counts a request that may retry this model, for its retry budget.
    pub(crate) fn budget_request(&self, now: u64) {
        self.update_budget(now, |requests, retries| {
            Some((requests.saturating_add(1), retries))
        });
    }

    /// Takes one retry from the budget: whether this model may be retried now.
    pub(crate) fn budget_retry(&self, now: u64) -> bool {
        let percent = u64::from(self.settings.retry_budget_percent);
        self.update_budget(now, |requests, retries| {
            let allowed = if percent == 0 {
                0
            } else {
                u64::from(requests) * percent / 100 + BUDGET_FLOOR
            };
            (u64::from(retries) < allowed).then_some((requests, retries + 1))
        })
    }

    /// Applies `change` to this window's (requests, retries); `false` when it declines.
    fn update_budget(&self, now: u64, change: impl Fn(u16, u16) -> Option<(u16, u16)>) -> bool {
        let window = now / 1000 / BUDGET_WINDOW_SECS;
        let mut current = self.budget.load(Relaxed);
        loop {
            let (requests, retries) = if current >> 32 == window {
                ((current >> 16) as u16, current as u16)
            } else {
                (0, 0)
            };
            let Some((requests, retries)) = change(requests, retries) else {
                return false;
            };
            let next = (window << 32) | (u64::from(requests) << 16) | u64::from(retries);
            match self
                .budget
                .compare_exchange_weak(current, next, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// The ticket of a call sent at `sent` (ms on `clock`); `probe` is the stamp of
    /// [`Admission::Probe`] (0 for none); `load` counts it in flight and learns its latency.
    pub(crate) fn ticket(
        self: &Arc<Self>,
        clock: StateClock,
        sent: u64,
        probe: u64,
        load: bool,
        excuse: Excuse,
    ) -> Ticket {
        if load {
            self.in_flight.fetch_add(1, Relaxed);
        }
        Ticket {
            state: self.clone(),
            clock,
            sent,
            probe,
            load,
            excuse,
            settled: false,
        }
    }

    /// Its health at `now` and how long its cooldown has left (ms), for operators.
    pub(crate) fn health(&self, now: u64) -> (super::status::Health, u64) {
        use super::status::Health;
        let until = self.cooling_until.load(Relaxed);
        if until == 0 {
            (Health::Available, 0)
        } else if now < until {
            (Health::Cooling, until - now)
        } else {
            (Health::HalfOpen, 0)
        }
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Relaxed)
    }

    /// Folds one latency sample into the moving average.
    fn observe_latency(&self, latency: Duration) {
        let sample = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.fold(|_| sample);
    }

    /// A failed call that waited `waited_ms`: folds in at least twice the current latency, so
    /// that a model that starts failing or timing out loses its place to those that answer.
    fn penalise(&self, waited_ms: u64) {
        let waited = waited_ms.saturating_mul(1000);
        self.fold(|current| waited.max(current.saturating_mul(2)));
    }

    fn fold(&self, sample: impl Fn(u64) -> u64) {
        let _ = self.latency_us.fetch_update(Relaxed, Relaxed, |old| {
            let current = if old == 0 { unmeasured_us() } else { old };
            let sample = sample(current).max(1);
            Some(if old == 0 {
                sample
            } else {
                (old as f64 + EWMA_WEIGHT * (sample as f64 - old as f64)).max(1.0) as u64
            })
        });
    }

    /// The average latency in µs; [`UNMEASURED_LATENCY`] before the first sample.
    pub(crate) fn latency_us(&self) -> u64 {
        match self.latency_us.load(Relaxed) {
            0 => unmeasured_us(),
            measured => measured,
        }
    }
}

fn unmeasured_us() -> u64 {
    u64::try_from(UNMEASURED_LATENCY.as_micros()).unwrap_or(u64::MAX)
}

/// How a call ended, as its direct model's health sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The model answered: a whole answer or stream, or a refusal of the request that shows it
    /// up (a 400).
    Answered,
    /// The model failed, before or after its head; `retry_after` is what it asked for.
    Failed { retry_after: Option<Duration> },
    /// The upstream refused the provider key (401, 402, 403, quota exhausted): the model
    /// cools down at once, for `upstream.key_cooldown_ms`.
    KeyRefused,
    /// The call says nothing of the model: the client left, the gateway itself failed, or the
    /// call missed a deadline of its group's that is shorter than the model's own.
    Silent,
}

impl Verdict {
    /// The verdict on a call that ended with `error`, `excuse` saying which of its deadlines
    /// were a group's shorter ones; `now` (ms) tells a missed whole-request deadline from a
    /// missed first token.
    pub(crate) fn of(error: &GatewayError, excuse: &Excuse, now: u64) -> Verdict {
        let meaning = error.meaning();
        if meaning.side != Side::Upstream {
            return Verdict::Silent;
        }
        if error.refusal.is_some_and(UpstreamRefusal::of_the_key) {
            return Verdict::KeyRefused;
        }
        let excused = match error.kind {
            ErrorKind::StreamTimeout => excuse.stream_idle,
            ErrorKind::UpstreamTimeout if now >= excuse.end => excuse.total,
            ErrorKind::UpstreamTimeout => excuse.first_token,
            _ => false,
        };
        if excused {
            Verdict::Silent
        } else if meaning.retryable {
            Verdict::Failed {
                retry_after: error.retry_after.as_ref().and_then(retry::retry_after),
            }
        } else {
            Verdict::Answered
        }
    }
}

/// Which deadlines of a call were its group's and shorter than its direct model's own: a call
/// that misses one of those says nothing against the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Excuse {
    pub first_token: bool,
    pub stream_idle: bool,
    pub total: bool,
    /// The whole request's deadline (ms), to tell which deadline an `upstream_timeout` missed.
    pub end: u64,
}

/// One call to a direct model, from its send to the end of its answer: counts in its load
/// (when tracked) and reports the call's [`Verdict`] once; dropped unsettled (the client
/// left), it reports [`Verdict::Silent`], which frees a probe's place.
#[derive(Debug)]
pub(crate) struct Ticket {
    state: Arc<TargetState>,
    clock: StateClock,
    /// When the call was sent (ms).
    sent: u64,
    /// The probe's stamp; 0 when the call is no probe.
    probe: u64,
    load: bool,
    excuse: Excuse,
    settled: bool,
}

impl Ticket {
    /// The call's first token (or a whole answer's head) came after `latency`.
    pub(crate) fn first_token(&self, latency: Duration) {
        if self.load {
            self.state.observe_latency(latency);
        }
    }

    /// Reports how the call ended; later reports are ignored.
    pub(crate) fn settle(&mut self, verdict: Verdict) {
        let clock = self.clock;
        self.settle_at(verdict, || clock.now_ms());
    }

    /// [`Ticket::settle`] at the time `now` gives, read only when needed.
    fn settle_at(&mut self, verdict: Verdict, now: impl FnOnce() -> u64) {
        if !std::mem::replace(&mut self.settled, true) {
            self.state.report(self, verdict, now);
        }
    }

    /// Reports a call that ended with `error`.
    pub(crate) fn settle_error(&mut self, error: &GatewayError) {
        if self.settled {
            return;
        }
        let verdict = Verdict::of(error, &self.excuse, self.clock.now_ms());
        self.settle(verdict);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.settle(Verdict::Silent);
        if self.load {
            self.state.in_flight.fetch_sub(1, Relaxed);
        }
    }
}

impl TargetState {
    /// A reload replaced (or removed) this model while it was cooling: it leaves the gauge
    /// now, though workers may hold it until their next request.
    fn retire(&self) {
        if self.counted.swap(false, Relaxed) {
            emit::targets_cooling(false);
        }
    }
}

impl Drop for TargetState {
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            emit::targets_cooling(false);
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One group's shared state.
// shared: round robin is fair across the process only if every worker takes turns from one
// counter.
#[derive(Debug, Default)]
pub(crate) struct GroupState {
    turn: AtomicU64,
}

impl GroupState {
    /// The next turn of the group's rotation.
    pub(crate) fn next_turn(&self) -> u64 {
        self.turn.fetch_add(1, Relaxed)
    }
}

/// The shared state of every direct model and group of one loaded resources file.
#[derive(Debug, Default)]
pub struct States {
    targets: HashMap<String, (u64, Arc<TargetState>)>,
    groups: HashMap<String, (u64, Arc<GroupState>)>,
    pub(crate) clock: StateClock,
}

impl States {
    /// State for `resources`, taken from `previous` for every entry whose configuration (and,
    /// for direct models, provider key and resilience settings) is unchanged.
    pub(crate) fn carry_over(
        previous: Option<&States>,
        resources: &Resources,
        settings: Resilience,
    ) -> Self {
        let mut targets = HashMap::with_capacity(resources.models.len());
        for model in &resources.models {
            let settings = settings.with(&model.cooldown);
            let key = resources.provider_keys.get(model.provider_key_index);
            let hash = target_hash(model, key, settings);
            let state = previous
                .and_then(|p| p.targets.get(&model.display_name))
                .filter(|(old, _)| *old == hash)
                .map_or_else(
                    || {
                        // Set at load, on the control side, never on a request.
                        emit::target_state(&model.display_name, AVAILABLE);
                        Arc::new(TargetState::new(&model.display_name, settings))
                    },
                    |(_, state)| state.clone(),
                );
            targets.insert(model.display_name.clone(), (hash, state));
        }
        if let Some(previous) = previous {
            for (name, (_, state)) in &previous.targets {
                let kept = targets
                    .get(name)
                    .is_some_and(|(_, now)| Arc::ptr_eq(now, state));
                if !kept {
                    state.retire();
                }
            }
        }
        let mut groups = HashMap::with_capacity(resources.groups.len());
        for group in &resources.groups {
            let hash = group_hash(group);
            let state = previous
                .and_then(|p| p.groups.get(&group.display_name))
                .filter(|(old, _)| *old == hash)
                .map_or_else(Arc::default, |(_, state)| state.clone());
            groups.insert(group.display_name.clone(), (hash, state));
        }
        Self {
            targets,
            groups,
            clock: previous.map(|p| p.clock).unwrap_or_default(),
        }
    }

    pub(crate) fn target(&self, name: &str) -> Option<&Arc<TargetState>> {
        self.targets.get(name).map(|(_, state)| state)
    }

    pub(crate) fn group(&self, name: &str) -> Option<&Arc<GroupState>> {
        self.groups.get(name).map(|(_, state)| state)
    }
}

/// A fixed-seed hasher: hashes are compared within one process only.
fn hasher() -> impl Hasher {
    foldhash::fast::FixedState::with_seed(0x6169_7369_785f_7374).build_hasher()
}

/// What a direct model's state depends on: its entry (but not where its provider key sits in
/// the file), its provider key (the secret included, which `Debug` hides) and the settings.
fn target_hash(model: &Model, key: Option<&ProviderKey>, settings: Resilience) -> u64 {
    let mut h = hasher();
    let mut model = model.clone();
    model.provider_key_index = 0;
    format!("{model:?}").hash(&mut h);
    if let Some(key) = key {
        format!("{key:?}").hash(&mut h);
        key.api_key.as_ref().map(|k| k.expose()).hash(&mut h);
        for (_, value) in &key.headers {
            value.expose().hash(&mut h);
        }
    }
    format!("{settings:?}").hash(&mut h);
    h.finish()
}

fn group_hash(group: &ModelGroup) -> u64 {
    let mut h = hasher();
    let mut group = group.clone();
    for target in &mut group.routing.targets {
        target.model_index = 0;
    }
    format!("{group:?}").hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Resilience {
        Resilience {
            enabled: true,
            cooldown_failures: 3,
            cooldown_window: Duration::from_secs(10),
            cooldown: Duration::from_secs(30),
            key_cooldown: Duration::from_secs(300),
            retry_after_max: Duration::from_secs(600),
            retry_budget_percent: 20,
        }
    }

    /// A call sent at `sent` with `probe`'s stamp, ended at `at` as `verdict`.
    fn call(state: &Arc<TargetState>, sent: u64, probe: u64, at: u64, verdict: Verdict) {
        let mut ticket = state.ticket(StateClock::default(), sent, probe, true, Excuse::default());
        ticket.settle_at(verdict, || at);
    }

    const FAILED: Verdict = Verdict::Failed { retry_after: None };

    fn fail(state: &Arc<TargetState>, at: u64) {
        call(state, at, 0, at, FAILED);
    }

    fn after(wait: u64) -> Verdict {
        Verdict::Failed {
            retry_after: Some(Duration::from_secs(wait)),
        }
    }

    /// The probe's stamp, or a panic naming what `admit` said.
    fn probe(state: &TargetState, at: u64) -> u64 {
        match state.admit(at) {
            Admission::Probe(stamp) => stamp,
            other => panic!("{other:?} at {at}"),
        }
    }

    #[test]
    fn three_failures_in_the_window_start_a_cooldown_and_one_probe_ends_it() {
        let state = Arc::new(TargetState::new("m", settings()));
        fail(&state, 1_000);
        fail(&state, 2_000);
        assert_eq!(state.admit(2_500), Admission::Open);
        fail(&state, 3_000);
        assert_eq!(state.admit(3_001), Admission::Cooling(33_000));
        assert_eq!(state.admit(32_999), Admission::Cooling(33_000));
        // Half-open: exactly one probe passes.
        let stamp = probe(&state, 33_000);
        assert!(matches!(state.admit(33_001), Admission::Cooling(_)));
        call(&state, 33_000, stamp, 33_002, Verdict::Answered);
        assert_eq!(state.admit(33_002), Admission::Open);
    }

    #[test]
    fn failures_spread_wider_than_the_window_never_start_one() {
        let state = Arc::new(TargetState::new("m", settings()));
        for at in [0, 6_000, 12_000, 18_000, 24_000] {
            fail(&state, at + 1);
            assert_eq!(state.admit(at + 2), Admission::Open, "at {at}");
        }
    }

    #[test]
    fn a_failed_probe_cools_again_and_a_long_retry_after_cools_at_once() {
        let state = Arc::new(TargetState::new("m", settings()));
        for at in 1..=3 {
            fail(&state, at);
        }
        let stamp = probe(&state, 30_003);
        call(&state, 30_003, stamp, 30_004, FAILED);
        assert_eq!(state.admit(30_005), Admission::Cooling(60_004));

        let state = Arc::new(TargetState::new("m", settings()));
        call(&state, 1_000, 0, 1_000, after(120));
        assert_eq!(state.admit(1_001), Admission::Cooling(121_000));
        // Retry-After is honoured up to retry_after_max.
        let state = Arc::new(TargetState::new("m", settings()));
        call(&state, 1_000, 0, 1_000, after(3600));
        assert_eq!(state.admit(1_001), Admission::Cooling(601_000));
        // A short one is no reason on its own.
        let state = Arc::new(TargetState::new("m", settings()));
        call(&state, 1_000, 0, 1_000, after(2));
        assert_eq!(state.admit(1_001), Admission::Open);
    }

    #[test]
    fn a_model_with_cooldown_disabled_never_cools_down() {
        let state = Arc::new(TargetState::new(
            "m",
            Resilience {
                enabled: false,
                ..settings()
            },
        ));
        for at in 1..=10 {
            fail(&state, at);
        }
        call(&state, 11, 0, 11, after(3600));
        call(&state, 12, 0, 12, Verdict::KeyRefused);
        assert_eq!(state.admit(13), Admission::Open);
    }

    #[test]
    fn an_abandoned_probe_frees_its_place_at_once_and_a_refused_one_reopens() {
        let state = Arc::new(TargetState::new("m", settings()));
        for at in 1..=3 {
            fail(&state, at);
        }
        let stamp = probe(&state, 30_003);
        // Its client left: dropped unsettled.
        drop(state.ticket(
            StateClock::default(),
            30_003,
            stamp,
            false,
            Excuse::default(),
        ));
        let stamp = probe(&state, 30_004);
        // A 400: the model answered.
        call(&state, 30_004, stamp, 30_005, Verdict::Answered);
        assert_eq!(state.admit(30_006), Admission::Open);
    }

    #[test]
    fn a_probe_that_never_reports_frees_its_place_after_a_cooldown() {
        let state = Arc::new(TargetState::new("m", settings()));
        for at in 1..=3 {
            fail(&state, at);
        }
        let _lost = probe(&state, 30_003);
        assert!(matches!(state.admit(59_000), Admission::Cooling(_)));
        probe(&state, 60_003);
    }

    #[test]
    fn a_refused_provider_key_cools_the_model_at_once_for_longer() {
        let state = Arc::new(TargetState::new("m", settings()));
        call(&state, 1_000, 0, 1_000, Verdict::KeyRefused);
        assert_eq!(state.admit(1_001), Admission::Cooling(301_000));
        let stamp = probe(&state, 301_000);
        call(&state, 301_000, stamp, 301_001, Verdict::KeyRefused);
        assert_eq!(state.admit(301_002), Admission::Cooling(601_001));
        let mut refused = GatewayError::new(
            ErrorKind::UpstreamClientError(http::StatusCode::UNAUTHORIZED),
            "",
        );
        refused.refusal = Some(UpstreamRefusal::Credentials);
        assert_eq!(
            Verdict::of(&refused, &Excuse::default(), 0),
            Verdict::KeyRefused
        );
    }

    #[test]
    fn stragglers_neither_extend_a_cooldown_nor_end_one() {
        let state = Arc::new(TargetState::new("m", settings()));
        for at in 1..=3 {
            fail(&state, at);
        }
        // Sent before the cooldown started, failing after it: nothing changes.
        for at in [10, 20, 30_010, 30_020] {
            call(&state, 2, 0, at, FAILED);
            call(&state, 2, 0, at, after(3600));
        }
        assert_eq!(state.admit(29_999), Admission::Cooling(30_003));
        call(&state, 2, 0, 40, Verdict::Answered);
        assert_eq!(state.admit(29_999), Admission::Cooling(30_003));
        let stamp = probe(&state, 30_003);
        call(&state, 30_003, stamp, 30_004, Verdict::Answered);
        // Nor do they count towards the next one.
        for at in 30_005..30_010 {
            call(&state, 2, 0, at, FAILED);
        }
        assert_eq!(state.admit(30_011), Admission::Open);
    }

    #[test]
    fn the_verdict_excuses_only_a_group_s_shorter_deadlines() {
        let timeout = GatewayError::new(ErrorKind::UpstreamTimeout, "");
        let idle = GatewayError::new(ErrorKind::StreamTimeout, "");
        let group = Excuse {
            first_token: true,
            stream_idle: false,
            total: false,
            end: 10_000,
        };
        assert_eq!(Verdict::of(&timeout, &group, 5_000), Verdict::Silent);
        assert_eq!(Verdict::of(&timeout, &group, 10_000), FAILED);
        assert_eq!(Verdict::of(&idle, &group, 5_000), FAILED);
        assert_eq!(Verdict::of(&timeout, &Excuse::default(), 5_000), FAILED);
        let rejected = GatewayError::new(
            ErrorKind::UpstreamClientError(http::StatusCode::BAD_REQUEST),
            "",
        );
        assert_eq!(Verdict::of(&rejected, &group, 0), Verdict::Answered);
        let cut = GatewayError::new(ErrorKind::StreamCut, "");
        assert_eq!(Verdict::of(&cut, &group, 0), FAILED);
        let left = GatewayError::new(ErrorKind::Overloaded, "");
        assert_eq!(Verdict::of(&left, &group, 0), Verdict::Silent);
    }

    /// One step of a simulated run of one direct model's calls.
    #[derive(Debug, Clone)]
    enum Step {
        /// Time moves on (ms).
        Wait(u64),
        /// A group's request: admitted, or skipped while cooling.
        Send,
        /// A client naming the model: always called.
        Force,
        /// The `n`th call in flight (modulo) ends: 0 answered, 1 failed, 2 failed asking for
        /// a long wait, 3 silent, 4 its key refused, 5 dropped unsettled.
        End(usize, u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (1u64..20_000).prop_map(Step::Wait),
            Just(Step::Send),
            Just(Step::Force),
            (any::<usize>(), 0u8..6).prop_map(|(n, how)| Step::End(n, how)),
        ]
    }

    fn sampled(page: &str, series: &str) -> f64 {
        page.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Over any run of calls and outcomes: a probe's place is always given back once no
        /// probe is out, a straggler never moves a cooldown, and `aisix_cooldowns_total`
        /// counts exactly the trips.
        #[test]
        fn the_target_state_machine_keeps_its_promises(steps in proptest::collection::vec(step(), 1..200)) {
            let metrics = aisix_obs::metrics::Metrics::build().unwrap();
            let state = Arc::new(TargetState::new("m", settings()));
            let mut trips = 0u32;
            ::metrics::with_local_recorder(metrics.recorder(), || {
                let mut now = 1u64;
                let mut out: Vec<Ticket> = Vec::new();
                for step in steps {
                    match step {
                        Step::Wait(ms) => now += ms,
                        Step::Send => match state.admit(now) {
                            Admission::Open => out.push(state.ticket(StateClock::default(), now, 0, true, Excuse::default())),
                            Admission::Probe(stamp) => out.push(state.ticket(StateClock::default(), now, stamp, true, Excuse::default())),
                            Admission::Cooling(until) => assert!(until > now || state.probe_at.load(Relaxed) != 0),
                        },
                        Step::Force => out.push(state.ticket(StateClock::default(), now, 0, true, Excuse::default())),
                        Step::End(n, how) => {
                            if out.is_empty() {
                                continue;
                            }
                            let mut ticket = out.swap_remove(n % out.len());
                            let straggler = ticket.sent < state.tripped_at.load(Relaxed);
                            let before = (state.cooling_until.load(Relaxed), state.tripped_at.load(Relaxed));
                            match how {
                                0 => ticket.settle_at(Verdict::Answered, || now),
                                1 => ticket.settle_at(FAILED, || now),
                                2 => ticket.settle_at(after(3600), || now),
                                3 => ticket.settle_at(Verdict::Silent, || now),
                                4 => ticket.settle_at(Verdict::KeyRefused, || now),
                                _ => {}
                            }
                            drop(ticket);
                            let after = (state.cooling_until.load(Relaxed), state.tripped_at.load(Relaxed));
                            if straggler {
                                assert_eq!(before, after, "a straggler moved the cooldown");
                            }
                            if after.0 != 0 && after != before {
                                trips += 1;
                            }
                        }
                    }
                    if !out.iter().any(|t| t.probe != 0) {
                        assert_eq!(state.probe_at.load(Relaxed), 0, "a probe's place is held with no probe out");
                    }
                }
                drop(out);
                assert_eq!(state.probe_at.load(Relaxed), 0);
            });
            let page = metrics.render();
            assert_eq!(sampled(&page, "aisix_cooldowns_total{target=\"m\"}"), f64::from(trips), "{}", page);
            let cooling = if state.cooling_until.load(Relaxed) != 0 { 1.0 } else { 0.0 };
            assert_eq!(sampled(&page, "aisix_targets_cooling"), cooling, "{}", page);
        }
    }

    #[test]
    fn retries_stay_within_a_fifth_of_requests_plus_a_floor() {
        let state = TargetState::new("m", settings());
        for _ in 0..100 {
            state.budget_request(1_000);
        }
        let granted = (0..100).filter(|_| state.budget_retry(2_000)).count();
        assert_eq!(granted, 20 + BUDGET_FLOOR as usize);
        // The next window starts empty: the floor only.
        let granted = (0..100).filter(|_| state.budget_retry(11_000)).count();
        assert_eq!(granted, BUDGET_FLOOR as usize);

        let off = TargetState::new(
            "m",
            Resilience {
                retry_budget_percent: 0,
                ..settings()
            },
        );
        off.budget_request(0);
        assert!(!off.budget_retry(0));
    }

    #[test]
    fn the_latency_average_follows_samples_and_failures_and_in_flight_counts_tickets() {
        let state = Arc::new(TargetState::new("m", settings()));
        assert_eq!(state.latency_us(), 1_000_000, "the prior");
        state.observe_latency(Duration::from_millis(100));
        assert_eq!(state.latency_us(), 100_000);
        state.observe_latency(Duration::from_millis(200));
        assert_eq!(state.latency_us(), 130_000);
        // A failure folds in at least twice the average, a timeout its whole wait.
        fail(&state, 0);
        assert_eq!(state.latency_us(), 130_000 + 39_000);
        call(&state, 0, 0, 5_000, FAILED);
        assert!(state.latency_us() > 1_000_000, "{}", state.latency_us());
        // A model that has only failed sorts behind the prior.
        let failing = Arc::new(TargetState::new("f", settings()));
        fail(&failing, 0);
        assert_eq!(failing.latency_us(), 2_000_000);
        let a = state.ticket(StateClock::default(), 0, 0, true, Excuse::default());
        let b = state.ticket(StateClock::default(), 0, 0, true, Excuse::default());
        assert_eq!(state.in_flight(), 2);
        drop((a, b));
        assert_eq!(state.in_flight(), 0);
    }

    #[test]
    fn a_reload_keeps_the_state_of_unchanged_entries_only() {
        let parse = |primary_base: &str| {
            let yaml = format!(
                r#"_format_version: "1"
provider_keys:
  - {{display_name: a, provider: openai, api_base: "http://a.example/v1"}}
  - {{display_name: b, provider: openai, api_base: "{primary_base}"}}
models:
  - {{display_name: stable, provider: openai, model_name: s, provider_key: a}}
  - {{display_name: moved, provider: openai, model_name: m, provider_key: b}}
  - {{display_name: chat, routing: {{targets: [{{model: stable}}, {{model: moved}}]}}}}
"#
            );
            aisix_config::parse_resources(&yaml, std::path::Path::new("r.yaml"), &|_| None).unwrap()
        };
        let first = States::carry_over(None, &parse("http://b.example/v1"), settings());
        let second = States::carry_over(Some(&first), &parse("http://c.example/v1"), settings());
        let same =
            |name: &str| Arc::ptr_eq(first.target(name).unwrap(), second.target(name).unwrap());
        assert!(same("stable"));
        assert!(!same("moved"), "its provider key changed");
        assert!(Arc::ptr_eq(
            first.group("chat").unwrap(),
            second.group("chat").unwrap()
        ));
        let third = States::carry_over(
            Some(&second),
            &parse("http://c.example/v1"),
            Resilience {
                cooldown_failures: 9,
                ..settings()
            },
        );
        assert!(!Arc::ptr_eq(
            second.target("stable").unwrap(),
            third.target("stable").unwrap()
        ));
    }
}
