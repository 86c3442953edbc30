//! What every worker knows about each direct model and group, shared across workers without a
//! lock: a direct model's cooldown (closed, cooling, half-open with one probe), its retry
//! budget, its requests in flight and its moving average of time to first byte; a group's
//! round-robin position. All of it lives in atomics read and written on the request path.
//!
//! State is keyed by name and a hash of the entry's configuration: a reload keeps it for
//! entries that did not change ([`States::carry_over`]) and starts afresh for those that did.
//! Times are milliseconds since the process's routing epoch (see [`Clock`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use aisix_config::{Model, ModelGroup, ProviderKey, Resilience, Resources};
use aisix_obs::metrics::emit;
use tokio::time::Instant;

/// The retry budget's window.
const BUDGET_WINDOW_SECS: u64 = 10;
/// Retries a direct model may take per budget window whatever its traffic, so that a quiet
/// one can still retry (the budget is on when its percentage is above zero).
const BUDGET_FLOOR: u64 = 3;
/// Weight of a new sample in the time-to-first-byte average.
const EWMA_WEIGHT: f64 = 0.3;

/// Milliseconds on one clock for every worker: the time since the epoch the clock was made at.
/// Built on tokio's clock, so tests that pause time move it too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }
}

impl Clock {
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
    /// The cooldown is over and this request is the one probe that tests it.
    Probe,
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
    /// Whether the cooldown gauge counts this model (from its start to its successful probe).
    counted: AtomicBool,
    /// `window (10 s periods since the epoch) << 32 | requests << 16 | retries`.
    budget: AtomicU64,
    in_flight: AtomicU32,
    /// Moving average of time to first byte, in µs; 0 before the first sample.
    ttfb_us: AtomicU64,
}

impl TargetState {
    pub(crate) fn new(name: &str, settings: Resilience) -> Self {
        Self {
            name: name.into(),
            settings,
            failures: AtomicU64::new(0),
            cooling_until: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
            counted: AtomicBool::new(false),
            budget: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            ttfb_us: AtomicU64::new(0),
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
        match self
            .probe_at
            .compare_exchange(probe, now.max(1), Relaxed, Relaxed)
        {
            Ok(_) => Admission::Probe,
            Err(_) => Admission::Cooling(now.saturating_add(lease)),
        }
    }

    /// A call answered: a cooldown (and its probe) is over. Costs two loads when there was none.
    pub(crate) fn succeeded(&self) {
        if self.cooling_until.load(Relaxed) != 0 && self.cooling_until.swap(0, Relaxed) != 0 {
            self.probe_at.store(0, Relaxed);
            self.failures.store(0, Relaxed);
            if self.counted.swap(false, Relaxed) {
                emit::targets_cooling(false);
            }
        }
    }

    /// A call failed in a way another call may not (`retryable`); `retry_after` is what the
    /// upstream asked for. Starts a cooldown after `cooldown_failures` of them within the
    /// window, at once for a failed probe, and at once for a `Retry-After` longer than
    /// `long_wait`.
    pub(crate) fn failed(&self, now: u64, retry_after: Option<Duration>, long_wait: Duration) {
        let settings = self.settings;
        if !settings.enabled {
            return;
        }
        let ttl = duration_ms(settings.cooldown);
        let asked = retry_after
            .map(|wait| duration_ms(wait.min(settings.retry_after_max)))
            .unwrap_or(0);
        let probing = self.cooling_until.load(Relaxed) != 0;
        let trip = probing
            || retry_after.is_some_and(|wait| wait > long_wait)
            || self.count_failure(now) >= settings.cooldown_failures;
        if !trip {
            return;
        }
        let until = now.saturating_add(ttl.max(asked)).max(1);
        self.cooling_until.store(until, Relaxed);
        self.probe_at.store(0, Relaxed);
        self.failures.store(0, Relaxed);
        emit::cooldown(&self.name);
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

    /// Counts a call in flight until the guard drops.
    pub(crate) fn busy(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Relaxed)
    }

    /// Folds one time to first byte into the moving average.
    pub(crate) fn observe_ttfb(&self, ttfb: Duration) {
        let sample = u64::try_from(ttfb.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self.ttfb_us.fetch_update(Relaxed, Relaxed, |old| {
            Some(if old == 0 {
                sample
            } else {
                (old as f64 + EWMA_WEIGHT * (sample as f64 - old as f64)).max(1.0) as u64
            })
        });
    }

    /// The average time to first byte in µs; 0 before the first sample.
    pub(crate) fn ttfb_us(&self) -> u64 {
        self.ttfb_us.load(Relaxed)
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

/// One call counted in its direct model's in-flight count.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<TargetState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
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
    pub(crate) clock: Clock,
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
                    || Arc::new(TargetState::new(&model.display_name, settings)),
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
            retry_after_max: Duration::from_secs(600),
            retry_budget_percent: 20,
        }
    }

    const LONG_WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn three_failures_in_the_window_start_a_cooldown_and_one_probe_ends_it() {
        let state = TargetState::new("m", settings());
        state.failed(1_000, None, LONG_WAIT);
        state.failed(2_000, None, LONG_WAIT);
        assert_eq!(state.admit(2_500), Admission::Open);
        state.failed(3_000, None, LONG_WAIT);
        assert_eq!(state.admit(3_001), Admission::Cooling(33_000));
        assert_eq!(state.admit(32_999), Admission::Cooling(33_000));
        // Half-open: exactly one probe passes.
        assert_eq!(state.admit(33_000), Admission::Probe);
        assert!(matches!(state.admit(33_001), Admission::Cooling(_)));
        state.succeeded();
        assert_eq!(state.admit(33_002), Admission::Open);
    }

    #[test]
    fn failures_spread_wider_than_the_window_never_start_one() {
        let state = TargetState::new("m", settings());
        for at in [0, 6_000, 12_000, 18_000, 24_000] {
            state.failed(at + 1, None, LONG_WAIT);
            assert_eq!(state.admit(at + 2), Admission::Open, "at {at}");
        }
    }

    #[test]
    fn a_failed_probe_cools_again_and_a_long_retry_after_cools_at_once() {
        let state = TargetState::new("m", settings());
        for at in 1..=3 {
            state.failed(at, None, LONG_WAIT);
        }
        assert_eq!(state.admit(30_003), Admission::Probe);
        state.failed(30_004, None, LONG_WAIT);
        assert_eq!(state.admit(30_005), Admission::Cooling(60_004));

        let state = TargetState::new("m", settings());
        state.failed(1_000, Some(Duration::from_secs(120)), LONG_WAIT);
        assert_eq!(state.admit(1_001), Admission::Cooling(121_000));
        // Retry-After is honoured up to retry_after_max.
        let state = TargetState::new("m", settings());
        state.failed(1_000, Some(Duration::from_secs(3600)), LONG_WAIT);
        assert_eq!(state.admit(1_001), Admission::Cooling(601_000));
        // A short one is no reason on its own.
        let state = TargetState::new("m", settings());
        state.failed(1_000, Some(Duration::from_secs(2)), LONG_WAIT);
        assert_eq!(state.admit(1_001), Admission::Open);
    }

    #[test]
    fn a_model_with_cooldown_disabled_never_cools_down() {
        let state = TargetState::new(
            "m",
            Resilience {
                enabled: false,
                ..settings()
            },
        );
        for at in 1..=10 {
            state.failed(at, None, LONG_WAIT);
        }
        state.failed(11, Some(Duration::from_secs(3600)), LONG_WAIT);
        assert_eq!(state.admit(12), Admission::Open);
    }

    #[test]
    fn an_abandoned_probe_frees_its_place_after_a_cooldown() {
        let state = TargetState::new("m", settings());
        for at in 1..=3 {
            state.failed(at, None, LONG_WAIT);
        }
        assert_eq!(state.admit(30_003), Admission::Probe);
        assert!(matches!(state.admit(59_000), Admission::Cooling(_)));
        assert_eq!(state.admit(60_003), Admission::Probe);
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
    fn the_latency_average_follows_samples_and_in_flight_counts_guards() {
        let state = Arc::new(TargetState::new("m", settings()));
        state.observe_ttfb(Duration::from_millis(100));
        assert_eq!(state.ttfb_us(), 100_000);
        state.observe_ttfb(Duration::from_millis(200));
        assert_eq!(state.ttfb_us(), 130_000);
        let a = state.busy();
        let b = state.busy();
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
