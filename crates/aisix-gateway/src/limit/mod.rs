//! Limits that hold under concurrency: request and token windows, concurrency caps and
//! spending budgets of API keys and model entries. A request **reserves** what it is expected
//! to use before it is dispatched (refused up front if that would cross a limit), keeps the
//! [`Reservation`] until it ends, and **settles** it with what it used; the unused part goes
//! back. Rendering a refusal is the error renderer's job; estimating a request is
//! [`estimate`]'s. The bytes a worker's requests hold in memory are limited apart, by
//! [`memory_budget`].
//!
//! # One set of counters
//!
//! With `ratelimit.backend: memory` every worker of the process reaches the same counters:
//! one atomic word per limit, updated with compare-and-swap (no lock on the request path).
//! They are not sharded: admission needs the exact sum, and a contended compare-and-swap per
//! configured limit is far cheaper than a request. With `backend: redis` the counters live in
//! Redis, updated atomically by Lua scripts, so every replica enforces one limit (the `redis`
//! module says what happens when Redis is away).
//!
//! # Accuracy
//!
//! Windows are fixed and aligned to UTC (see [`window`]). Within a window, a limit is passed
//! only by what requests in flight use beyond their reservation: a reservation is refused if
//! it would cross a limit, and a request's usage above its estimate is charged when it settles.
//! Checks are taken one after another and taken back if a later one refuses, so for that
//! instant a refused request may hold a unit another request then misses: limits err on the
//! side of refusing, never of admitting.
//! Requests that set `max_tokens` and whose prompts tokenize at four or more bytes per token
//! (see [`estimate`]) never pass a token limit at all. A request whose estimate alone is above a
//! token limit or a budget reserves the whole of it, so it runs only when nothing else is
//! counted in that window.
//!
//! # Reloads
//!
//! Counters belong to the entry (`api_keys` or `models` scope, and `display_name`), not to its
//! configuration: a reload keeps every counter of an entry that is still there, and a changed
//! limit applies to the count so far. Requests in flight settle against the counters they
//! reserved from.

mod clock;
pub mod estimate;
mod memory;
pub(crate) mod memory_budget;
mod redis;
mod refusal;
pub mod window;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use aisix_config::{
    BudgetPeriod, OnRedisError, RateLimit, RateLimitBackend, RateLimitConfig, SpendBudget, Usd,
};
use aisix_obs::metrics::emit;
use aisix_obs::metrics::labels::{RateLimitKind, RateLimitScope};

#[cfg(feature = "test-hooks")]
pub use clock::SkewedClock;
pub use clock::{Clock, ManualClock, SystemClock};
pub(crate) use redis::Warnings;
pub use refusal::{Headroom, Refusal, Refused, Standing};

use memory::Counters;
use window::{Span, Unit, Window, period_span};

/// What a request reserves, or what it turned out to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Charge {
    /// Input and output tokens together.
    pub tokens: u64,
    /// At the prices of the model entry that answered (zero without `cost`).
    pub spend: Usd,
}

/// The limiter of one process: hands out [`Subject`]s when resources are loaded, and
/// reservations to requests. Cheap to clone.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    // shared: every worker builds its subjects from here, so an entry's counters are one set
    // for the process and outlive reloads; locked only while a snapshot is built.
    counters: Mutex<Registry>,
    redis: Option<redis::RedisBackend>,
    /// Whether requests are refused while Redis cannot be reached.
    deny_without_redis: bool,
    /// Whether requests that count against a budget are refused while Redis cannot be reached.
    deny_budget_without_redis: bool,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("redis", &self.inner.redis.is_some())
            .finish_non_exhaustive()
    }
}

/// The counters of each entry, by scope and name, while some subject holds them.
type Registry = HashMap<(RateLimitScope, Arc<str>), Weak<Counters>>;

/// Why the limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LimiterInitError {
    #[error("ratelimit.redis.url: {0}")]
    RedisUrl(String),
    #[error("cannot start the rate-limit backend thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl Limiter {
    /// The limiter `config` asks for. With Redis it starts one thread, `aisix-ratelimit`, that
    /// connects (and reconnects) in the background and settles reservations; requests never
    /// wait for it to connect.
    pub fn new(config: &RateLimitConfig, clock: Arc<dyn Clock>) -> Result<Self, LimiterInitError> {
        let (redis, deny_without_redis, deny_budget_without_redis) = match &config.backend {
            RateLimitBackend::Memory => (None, false, false),
            RateLimitBackend::Redis(redis) => (
                Some(redis::RedisBackend::start(
                    redis,
                    config.concurrency_ttl,
                    clock.clone(),
                )?),
                redis.on_error == OnRedisError::Deny,
                redis.budget_on_error == OnRedisError::Deny,
            ),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                clock,
                counters: Mutex::new(HashMap::new()),
                redis,
                deny_without_redis,
                deny_budget_without_redis,
            }),
        })
    }

    /// An in-memory limiter on `clock`.
    pub fn in_memory(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                counters: Mutex::new(HashMap::new()),
                redis: None,
                deny_without_redis: false,
                deny_budget_without_redis: false,
            }),
        }
    }

    /// Whether counters are shared through Redis right now: `false` in memory, and while
    /// Redis is away.
    pub fn redis_connected(&self) -> bool {
        self.inner
            .redis
            .as_ref()
            .is_some_and(|redis| redis.connected())
    }

    /// Waits until the settlements of every reservation settled or dropped before this call
    /// are applied in Redis; at once in memory, where settling applies at once. Bound it with
    /// a timeout: while Redis is away it waits for Redis.
    pub async fn flush(&self) {
        if let Some(redis) = &self.inner.redis {
            redis.flush().await;
        }
    }

    /// The limits of one entry, or `None` when it sets none (its requests then cost nothing
    /// here). Call when resources are (re)loaded, never per request: it locks.
    pub fn subject(
        &self,
        scope: RateLimitScope,
        name: &str,
        limits: &RateLimit,
        budget: Option<SpendBudget>,
    ) -> Option<Arc<Subject>> {
        if limits.is_empty() && budget.is_none() {
            return None;
        }
        let name: Arc<str> = name.into();
        let counters = {
            let mut registry = self
                .inner
                .counters
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            registry.retain(|_, counters| counters.strong_count() > 0);
            match registry.get(&(scope, name.clone())).and_then(Weak::upgrade) {
                Some(counters) => counters,
                None => {
                    let counters = Arc::new(Counters::default());
                    registry.insert((scope, name.clone()), Arc::downgrade(&counters));
                    counters
                }
            }
        };
        let mut windows = [None; Window::ALL.len()];
        for window in Window::ALL {
            windows[window.index()] = window.limit_in(limits);
        }
        Some(Arc::new(Subject {
            scope,
            redis_prefix: format!("aisix:rl:{{{}:{name}}}", scope.as_str()),
            name,
            windows,
            concurrency: limits.concurrency,
            budget: budget.map(|b| (b.period, b.usd.nanos() / NANOS_PER_MICRO)),
            counters,
            limiter: self.clone(),
        }))
    }

    /// Reserves one request and `estimate` on every subject (an API key, a model entry), all or
    /// nothing. The reservation holds until [`Reservation::settle`] or its drop.
    pub async fn reserve(
        &self,
        subjects: &[&Arc<Subject>],
        estimate: Charge,
    ) -> Result<Reservation, Refused> {
        let now = self.inner.clock.unix_millis();
        let checks = plan(subjects, estimate, now);
        if checks.is_empty() {
            return Ok(Reservation::default());
        }
        let (store, evaluated) = match &self.inner.redis {
            None => (Store::Memory, memory::reserve(subjects, &checks)),
            Some(redis) => match redis.reserve(subjects, &checks, now).await {
                Some((lease, evaluated)) => (Store::Redis { lease }, evaluated),
                None if self.inner.deny_without_redis => return Err(Refused::Unavailable),
                None if self.inner.deny_budget_without_redis
                    && checks.iter().any(|c| matches!(c.what, What::Budget(_))) =>
                {
                    return Err(Refused::Unavailable);
                }
                None => (Store::Memory, memory::reserve(subjects, &checks)),
            },
        };
        let headroom = headroom(&checks, &evaluated, now);
        if let Some(i) = evaluated.refused {
            let check = checks[i];
            let subject = subjects[check.subject];
            let kind = check.what.kind();
            emit::ratelimit_rejection(subject.scope, kind);
            return Err(Refused::Limit(Refusal {
                scope: subject.scope,
                name: subject.name.clone(),
                kind,
                limit: check.limit,
                used: evaluated.counts[i],
                period: match check.what {
                    What::Budget(period) => Some(period),
                    _ => None,
                },
                retry_after: match check.what {
                    What::Concurrency => None,
                    _ => Some(Duration::from_millis(check.span.end.saturating_sub(now))),
                },
                headroom,
            }));
        }
        Ok(Reservation {
            subjects: subjects.iter().map(|s| Arc::clone(s)).collect(),
            checks,
            store,
            headroom,
            settled: false,
        })
    }
}

const NANOS_PER_MICRO: u64 = 1_000;

/// Budgets are counted in micro-dollars, rounded up.
fn micros(usd: Usd) -> u64 {
    usd.nanos().div_ceil(NANOS_PER_MICRO)
}

/// The limits of one API key or model entry, with its counters; built per worker from the
/// loaded resources.
pub struct Subject {
    scope: RateLimitScope,
    name: Arc<str>,
    /// By [`Window::index`].
    windows: [Option<u64>; Window::ALL.len()],
    concurrency: Option<u64>,
    /// The period and the budget in micro-dollars.
    budget: Option<(BudgetPeriod, u64)>,
    counters: Arc<Counters>,
    /// `aisix:rl:{scope:name}`: the braces keep one subject's keys in one Redis Cluster slot.
    redis_prefix: String,
    limiter: Limiter,
}

impl Subject {
    /// The limiter this subject's counters belong to.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("scope", &self.scope)
            .field("name", &self.name)
            .field("windows", &self.windows)
            .field("concurrency", &self.concurrency)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// Which counter a check or an adjustment touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    Window(Window),
    Concurrency,
    Budget(BudgetPeriod),
}

impl What {
    fn kind(self) -> RateLimitKind {
        match self {
            What::Window(window) => window.kind(),
            What::Concurrency => RateLimitKind::Concurrency,
            What::Budget(_) => RateLimitKind::Budget,
        }
    }
}

/// One limit a reservation must fit under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Check {
    /// Index into the subjects passed to `reserve`.
    subject: usize,
    what: What,
    /// What is reserved: 1 request, the token estimate, the spend estimate in micro-dollars,
    /// or 1 slot; never more than `limit`.
    amount: u64,
    limit: u64,
    /// The window or period reserved in (unused for concurrency).
    span: Span,
}

/// What a backend found: each check's count after the reservation (or, when refused, as it
/// stood), and the first check that refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Evaluated {
    counts: Vec<u64>,
    refused: Option<usize>,
}

/// Every limit of every subject, in a fixed order: windows, concurrency, budget.
fn plan(subjects: &[&Arc<Subject>], estimate: Charge, now: u64) -> Vec<Check> {
    let mut checks = Vec::new();
    for (index, subject) in subjects.iter().enumerate() {
        for window in Window::ALL {
            let Some(limit) = subject.windows[window.index()] else {
                continue;
            };
            let amount = match window.unit() {
                Unit::Requests => 1,
                Unit::Tokens => estimate.tokens,
            };
            checks.push(Check {
                subject: index,
                what: What::Window(window),
                amount: amount.min(limit),
                limit,
                span: window.span(now),
            });
        }
        if let Some(limit) = subject.concurrency {
            checks.push(Check {
                subject: index,
                what: What::Concurrency,
                amount: 1,
                limit,
                span: Span { epoch: 0, end: 0 },
            });
        }
        if let Some((period, limit)) = subject.budget {
            checks.push(Check {
                subject: index,
                what: What::Budget(period),
                amount: micros(estimate.spend).min(limit),
                limit,
                span: period_span(period, now),
            });
        }
    }
    checks
}

/// The tightest window of each unit, from the counts a backend found.
fn headroom(checks: &[Check], evaluated: &Evaluated, now: u64) -> Headroom {
    let mut headroom = Headroom::default();
    for (i, (check, count)) in checks.iter().zip(&evaluated.counts).enumerate() {
        let What::Window(window) = check.what else {
            continue;
        };
        // Checks before the refusing one were taken back: report them as they stand again.
        let count = match evaluated.refused {
            Some(refused) if i < refused => count.saturating_sub(check.amount),
            _ => *count,
        };
        headroom.note(
            window.unit(),
            Standing {
                limit: check.limit,
                remaining: check.limit.saturating_sub(count),
                reset_in: Duration::from_millis(check.span.end.saturating_sub(now)),
            },
        );
    }
    headroom
}

/// Where a reservation is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Store {
    /// Nothing was reserved: no limit applies.
    #[default]
    None,
    Memory,
    /// In Redis, with the concurrency lease this reservation holds.
    Redis {
        lease: u64,
    },
}

/// A change to one counter when a reservation settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adjust {
    /// Take back the unused part from the window or period reserved in.
    Return { check: usize, amount: u64 },
    /// Charge usage beyond the reservation to the window or period current at settlement.
    Add {
        check: usize,
        amount: u64,
        span: Span,
    },
    /// Give the concurrency slot back.
    Release { check: usize },
}

/// What one request holds against its limits until it ends. Settle it with what the request
/// used; dropping it unsettled (a request that ended without a usage count) releases its
/// concurrency slots and leaves the rest charged as reserved.
#[derive(Debug, Default)]
pub struct Reservation {
    subjects: Vec<Arc<Subject>>,
    checks: Vec<Check>,
    store: Store,
    headroom: Headroom,
    settled: bool,
}

impl Reservation {
    /// The `x-ratelimit-*` standing after this reservation, for the response headers.
    pub fn headroom(&self) -> &Headroom {
        &self.headroom
    }

    /// Whether any limit applies to this request.
    pub fn is_limited(&self) -> bool {
        !self.checks.is_empty()
    }

    /// Reconciles the reservation with what the request used: the unused part of the token
    /// and spend reservations goes back to the windows they were taken from (if those are
    /// still current), usage beyond them is charged to the current ones, concurrency slots
    /// are released.
    pub fn settle(mut self, used: Charge) {
        self.settled = true;
        let (now, adjustments) = self.adjustments(Some(used));
        self.apply(now, &adjustments);
        self.write_back(now, used);
    }

    /// A reservation counted here because Redis was away (`on_error: allow`): its spend is also
    /// queued for Redis, which gets it once it is back, so a budget shared by the replicas does
    /// not lose what was spent during the outage.
    fn write_back(&self, now: u64, used: Charge) {
        if self.store != Store::Memory || used.spend == Usd::ZERO {
            return;
        }
        let Some(redis) = self
            .subjects
            .first()
            .and_then(|s| s.limiter.inner.redis.as_ref())
        else {
            return;
        };
        let spend: Vec<Adjust> = self
            .checks
            .iter()
            .enumerate()
            .filter_map(|(check, c)| match c.what {
                What::Budget(period) => Some(Adjust::Add {
                    check,
                    amount: micros(used.spend),
                    span: period_span(period, now),
                }),
                _ => None,
            })
            .collect();
        if !spend.is_empty() {
            redis.settle(&self.subjects, &self.checks, &spend, 0, now);
        }
    }

    /// The adjustments settling with `used` makes (only the releases without it), and when.
    fn adjustments(&self, used: Option<Charge>) -> (u64, Vec<Adjust>) {
        let Some(subject) = self.subjects.first() else {
            return (0, Vec::new());
        };
        let now = subject.limiter.inner.clock.unix_millis();
        let mut adjustments = Vec::with_capacity(self.checks.len());
        for (i, check) in self.checks.iter().enumerate() {
            let (actual, span_now) = match (check.what, used) {
                (What::Concurrency, _) => {
                    adjustments.push(Adjust::Release { check: i });
                    continue;
                }
                (_, None) => continue,
                (What::Window(window), Some(used)) if window.unit() == Unit::Tokens => {
                    (used.tokens, window.span(now))
                }
                (What::Budget(period), Some(used)) => {
                    (micros(used.spend), period_span(period, now))
                }
                (What::Window(_), Some(_)) => continue,
            };
            if actual < check.amount {
                if span_now.epoch == check.span.epoch {
                    adjustments.push(Adjust::Return {
                        check: i,
                        amount: check.amount - actual,
                    });
                }
            } else if actual > check.amount {
                adjustments.push(Adjust::Add {
                    check: i,
                    amount: actual - check.amount,
                    span: span_now,
                });
            }
        }
        (now, adjustments)
    }

    fn apply(&self, now: u64, adjustments: &[Adjust]) {
        if adjustments.is_empty() {
            return;
        }
        match self.store {
            Store::None => {}
            Store::Memory => memory::settle(&self.subjects, &self.checks, adjustments),
            Store::Redis { lease } => {
                if let Some(redis) = self
                    .subjects
                    .first()
                    .and_then(|s| s.limiter.inner.redis.as_ref())
                {
                    redis.settle(&self.subjects, &self.checks, adjustments, lease, now);
                }
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            let (now, releases) = self.adjustments(None);
            self.apply(now, &releases);
        }
    }
}

#[cfg(test)]
mod tests;
