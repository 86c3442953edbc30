//! The Redis backend: counters shared by every replica. A reservation is one Lua script that
//! reads every counter it touches, and counts all of them or none (Redis runs a script alone,
//! so two replicas can never both take the last unit). Settlements go through a queue to one
//! background thread, which sends those waiting in one script call.
//!
//! # When Redis is away
//!
//! Every call from a request is bounded by `ratelimit.redis.timeout_ms`. A call that fails or
//! times out drops the connection; until the background thread has reconnected (it tries every
//! half second), requests do not call Redis at all: with `on_error: allow` they are counted on
//! this process's own counters (so each replica enforces the limits alone, N replicas letting
//! up to N times through), with `on_error: deny` they are refused with 503. Each such request
//! counts in `aisix_ratelimit_backend_errors_total`, and a warning is logged at most every ten
//! seconds. No request ever waits longer than one timeout for Redis.
//!
//! # Bounds
//!
//! Settlements are applied after the request ends, by the background thread, usually within a
//! millisecond: until then the reservation stays counted, which can only refuse early, never
//! admit too much. Settlements queued while Redis is away are sent once it is back (up to
//! [`SETTLE_QUEUE`] requests; beyond that they are dropped and counted as errors, leaving their
//! reservations charged). A reservation whose reply is lost (a timeout, an error, or the
//! request cancelled while the script was in flight) is undone the same way: its script sets
//! a marker key when it counts, and the undo takes the counts and the concurrency lease back
//! only while that marker is there, so it is harmless whether or not the script ran. Spend counted in this process while Redis was away is queued the same
//! way (`Reservation::write_back`), so a shared budget gets it once Redis is back; with
//! `budget_on_error: deny` such requests are refused instead.
//!
//! # Redis Cluster
//!
//! With `mode: cluster` the counters are spread over a Redis Cluster. Every key of one subject
//! (API key, model entry) carries the subject as its hash tag, `aisix:rl:{scope:name}:…`, so it
//! lies in one slot; a script only ever touches one subject's keys. A reservation is then one
//! script per subject, sent together: each counts all of its subject's checks or none, and if
//! one subject refuses, those that counted are undone through the settlement queue (as a lost
//! reply is), so for that instant a refused request may hold units it never uses: the limit
//! errs on the side of refusing. Settlements are sent as one script call per subject.
//!
//! A concurrency slot is a lease that expires `ratelimit.concurrency_ttl_secs` after it was
//! last renewed: the background thread renews the leases of every request still in flight
//! three times per lifetime, so a long stream keeps its slot, and a replica that dies loses
//! its slots one lifetime later.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use aisix_config::RedisMode;
use aisix_config::{OnRedisError, RedisConfig};
use aisix_obs::metrics::emit;
use arc_swap::ArcSwapOption;
use futures_util::future::join_all;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Script, Value};
use tokio::sync::{Notify, mpsc, oneshot};

use super::clock::{Clock, SystemClock};
use super::{Adjust, Check, Evaluated, LimiterInitError, Subject, What};

/// How often the background thread tries to reconnect while Redis is away.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(500);
/// Settled reservations waiting for the background thread, at most.
pub(super) const SETTLE_QUEUE: usize = 16_384;
/// Settled reservations sent in one script call, at most.
const SETTLE_BATCH: usize = 64;
/// How long a counter outlives its window in Redis.
const KEY_GRACE_MS: u64 = 1_000;
/// The shortest gap between two warnings about Redis.
const WARN_EVERY_MS: u64 = 10_000;

/// Checks every counter, then counts all of them or none.
/// KEYS: one per check, then this reservation's marker. ARGV[1]: now (Unix ms); ARGV[2]: this
/// reservation's concurrency lease; then four per check key: `w` (a window or budget counter)
/// or `c` (a concurrency set), the amount, the limit, the key's time to live in ms.
/// Returns `{refused, count1, count2, ...}`: `refused` is the 1-based index of the first check
/// that refused (0 if none), each count is after the reservation (or as found, if refused).
/// A reservation that counts also sets its marker, for as long as its longest-lived key: an
/// undo (see `SETTLE`) takes a reservation back only while its marker is there, so undoing one
/// whose reply was lost is harmless whether or not it was applied, and never applied twice.
const RESERVE: &str = r"
local now = tonumber(ARGV[1])
local checks = #KEYS - 1
local counts = {}
local refused = 0
for i = 1, checks do
  local base = 2 + (i - 1) * 4
  local count
  if ARGV[base + 1] == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    count = redis.call('ZCARD', KEYS[i])
  else
    count = tonumber(redis.call('GET', KEYS[i]) or '0')
  end
  counts[i] = count
  local amount, limit = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  if refused == 0 and (count >= limit or count + amount > limit) then
    refused = i
  end
end
if refused == 0 then
  local longest = 1
  for i = 1, checks do
    local base = 2 + (i - 1) * 4
    local ttl = tonumber(ARGV[base + 4])
    if ttl > longest then longest = ttl end
    if ARGV[base + 1] == 'c' then
      redis.call('ZADD', KEYS[i], now + ttl, ARGV[2])
    elseif tonumber(ARGV[base + 2]) > 0 then
      redis.call('INCRBY', KEYS[i], ARGV[base + 2])
    end
    redis.call('PEXPIRE', KEYS[i], ttl)
    counts[i] = counts[i] + tonumber(ARGV[base + 2])
  end
  redis.call('SET', KEYS[#KEYS], '1', 'PX', longest)
end
table.insert(counts, 1, refused)
return counts
";

/// Applies settlements. KEYS: one per adjustment. ARGV: three per key: `s` (take back this
/// much, if the counter still exists), `a` (add this much, the key expiring in the given ms if
/// it is new), `r` (remove this lease from a concurrency set), or `u` (the key is a
/// reservation's marker: delete it, and if it was not there skip the next `value` entries,
/// which undo that reservation), the amount or lease, the ms.
const SETTLE: &str = r"
local i = 1
while i <= #KEYS do
  local base = (i - 1) * 3
  local op, value = ARGV[base + 1], ARGV[base + 2]
  if op == 'u' then
    if redis.call('DEL', KEYS[i]) == 0 then
      i = i + tonumber(value)
    end
  elseif op == 'r' then
    redis.call('ZREM', KEYS[i], value)
  elseif op == 's' then
    local count = redis.call('GET', KEYS[i])
    if count then
      local left = tonumber(count) - tonumber(value)
      if left < 0 then left = 0 end
      redis.call('SET', KEYS[i], left, 'KEEPTTL')
    end
  else
    redis.call('INCRBY', KEYS[i], value)
    if redis.call('PTTL', KEYS[i]) < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[base + 3])
    end
  end
  i = i + 1
end
return #KEYS
";

/// What the background thread is asked to do.
#[derive(Debug)]
enum Queued {
    /// Apply one reservation's settlement.
    Settle(Vec<SettleEntry>),
    /// Answer once everything queued before has been sent.
    Flush(oneshot::Sender<()>),
}

/// One change a settlement makes in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SettleEntry {
    key: String,
    op: &'static str,
    value: String,
    ttl_ms: u64,
}

/// The undo of a reservation whose reply has not been read: queued as it drops unless the
/// reply came (and `entries` was emptied). Runs off the request path, on the background
/// thread, once Redis answers again.
struct Undo<'a> {
    backend: &'a RedisBackend,
    /// The marker's `u` entry, then one `s` or `r` entry per check.
    entries: Vec<SettleEntry>,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.entries.is_empty() {
            self.backend
                .queue(Queued::Settle(std::mem::take(&mut self.entries)));
        }
    }
}

pub(super) struct RedisBackend {
    state: Arc<State>,
    settlements: Option<mpsc::Sender<Queued>>,
    thread: Option<JoinHandle<()>>,
}

/// What the request path and the background thread share.
// shared: every worker reads the connection and counts leases; the background thread replaces
// the connection when it reconnects.
struct State {
    client: Connector,
    /// The URL (each node's, in a cluster) with its password as `***`, for logs.
    url: String,
    conn: ArcSwapOption<Conn>,
    /// Wakes the background thread when a request dropped the connection.
    dropped: Notify,
    timeout: Duration,
    on_error: OnRedisError,
    concurrency_ttl_ms: u64,
    /// The limiter's clock: lease expiries are on it.
    clock: Arc<dyn Clock>,
    /// Names this process in concurrency leases.
    node: u64,
    // shared: the leases of every request in flight on any worker that holds a Redis
    // concurrency slot, renewed by the background thread so that a slot outlives
    // `concurrency_ttl` while its request runs. Locked once when such a reservation is made and
    // once when it settles, beside a Redis round trip; never by other requests.
    live: Mutex<HashMap<String, Vec<String>>>,
    leases: AtomicU64,
    warnings: Warnings,
    reserve: Script,
    settle: Script,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.state.url)
            .field("connected", &self.state.conn.load().is_some())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Starts the background thread, which connects at once; requests do not wait for it.
    pub(super) fn start(
        config: &RedisConfig,
        concurrency_ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LimiterInitError> {
        let refused = |_| LimiterInitError::RedisUrl("not a Redis URL the client accepts".into());
        let (client, url) = match &config.mode {
            RedisMode::Single => (
                Connector::Single(redis::Client::open(config.url.expose()).map_err(refused)?),
                config.url.redacted().to_owned(),
            ),
            RedisMode::Cluster(nodes) => (
                Connector::Cluster(
                    ClusterClient::builder(nodes.iter().map(|node| node.expose()))
                        .connection_timeout(config.timeout)
                        .response_timeout(config.timeout)
                        .build()
                        .map_err(refused)?,
                ),
                nodes
                    .iter()
                    .map(|node| node.redacted())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        let state = Arc::new(State {
            client,
            url,
            conn: ArcSwapOption::empty(),
            dropped: Notify::new(),
            timeout: config.timeout,
            on_error: config.on_error,
            concurrency_ttl_ms: u64::try_from(concurrency_ttl.as_millis()).unwrap_or(u64::MAX),
            clock,
            live: Mutex::new(HashMap::new()),
            // Seeded from the OS once per process; leases need only be unique among replicas.
            node: std::collections::hash_map::RandomState::new().hash_one(std::process::id()),
            leases: AtomicU64::new(0),
            warnings: Warnings::default(),
            reserve: Script::new(RESERVE),
            settle: Script::new(SETTLE),
        });
        let (settlements, queue) = mpsc::channel(SETTLE_QUEUE);
        let thread = std::thread::Builder::new()
            .name("aisix-ratelimit".to_owned())
            .spawn({
                let state = state.clone();
                move || state.run(queue)
            })?;
        Ok(Self {
            state,
            settlements: Some(settlements),
            thread: Some(thread),
        })
    }

    /// Runs the reservation script (one per subject in a cluster); `None` when Redis could not
    /// answer within the timeout (counted and logged; the caller goes by `on_error`).
    pub(super) async fn reserve(
        &self,
        subjects: &[&Arc<Subject>],
        checks: &[Check],
        now: u64,
    ) -> Option<(u64, Evaluated)> {
        let state = &self.state;
        let Some(conn) = state.conn.load_full() else {
            state.unavailable(None, "not connected");
            return None;
        };
        let lease = state.leases.fetch_add(1, Ordering::Relaxed);
        let member = state.lease_member(lease);
        let evaluated = if matches!(state.client, Connector::Cluster(_)) {
            self.reserve_per_subject(&conn, subjects, checks, &member, now)
                .await?
        } else {
            let (evaluated, mut undo) = self
                .reserve_part(&conn, subjects, checks, None, &member, now)
                .await;
            let evaluated = evaluated?;
            undo.entries.clear();
            evaluated
        };
        if evaluated.refused.is_none() {
            state.hold(member, &lease_keys(checks, subjects));
        }
        Some((lease, evaluated))
    }

    /// A cluster's reservation: one script per subject, sent together. If any refuses, those
    /// that counted are undone as their [`Undo`]s drop.
    async fn reserve_per_subject(
        &self,
        conn: &Arc<Conn>,
        subjects: &[&Arc<Subject>],
        checks: &[Check],
        member: &str,
        now: u64,
    ) -> Option<Evaluated> {
        let mut parts: Vec<usize> = checks.iter().map(|c| c.subject).collect();
        parts.sort_unstable();
        parts.dedup();
        let mut replies = join_all(
            parts
                .iter()
                .map(|&s| self.reserve_part(conn, subjects, checks, Some(s), member, now)),
        )
        .await;
        let mut evaluated = Evaluated {
            counts: vec![0; checks.len()],
            refused: None,
        };
        for (&part, (reply, _)) in parts.iter().zip(&replies) {
            let reply = reply.as_ref()?;
            let in_part = checks
                .iter()
                .enumerate()
                .filter(|(_, c)| c.subject == part)
                .map(|(i, _)| i);
            for (local, i) in in_part.enumerate() {
                evaluated.counts[i] = reply.counts.get(local).copied().unwrap_or(0);
                if reply.refused == Some(local) && evaluated.refused.is_none_or(|r| i < r) {
                    evaluated.refused = Some(i);
                }
            }
        }
        if evaluated.refused.is_none() {
            for (_, undo) in &mut replies {
                undo.entries.clear();
            }
        } else {
            // Counts as found, as one script would have answered: the parts that counted are
            // being undone.
            for (&part, (reply, _)) in parts.iter().zip(&replies) {
                if reply.as_ref().is_some_and(|r| r.refused.is_none()) {
                    for (i, check) in checks.iter().enumerate() {
                        if check.subject == part {
                            evaluated.counts[i] = evaluated.counts[i].saturating_sub(check.amount);
                        }
                    }
                }
            }
        }
        Some(evaluated)
    }

    /// Runs the reservation script on the checks of subject `part` (all checks when `None`);
    /// the marker lies under the prefix of that subject (the first when `None`). The reply is
    /// `None` when it was lost; the [`Undo`] is armed unless the script refused (then it
    /// counted nothing): the caller disarms it once it keeps what was counted.
    async fn reserve_part(
        &self,
        conn: &Arc<Conn>,
        subjects: &[&Arc<Subject>],
        checks: &[Check],
        part: Option<usize>,
        member: &str,
        now: u64,
    ) -> (Option<Evaluated>, Undo<'_>) {
        let state = &self.state;
        let in_part = |check: &&Check| part.is_none_or(|s| check.subject == s);
        let count = checks.iter().filter(in_part).count();
        let mut call = state.reserve.prepare_invoke();
        call.arg(now).arg(member);
        // Until its reply is read, the reservation may be counted in Redis without anyone
        // holding it: a lost reply (timeout, error) or a cancelled request undoes it.
        let mut undo = Undo {
            backend: self,
            entries: Vec::with_capacity(count + 1),
        };
        let marker = format!("{}:res:{member}", subjects[part.unwrap_or(0)].redis_prefix);
        undo.entries.push(SettleEntry {
            key: marker.clone(),
            op: "u",
            value: count.to_string(),
            ttl_ms: 0,
        });
        for check in checks.iter().filter(in_part) {
            let subject = subjects[check.subject];
            let (op, ttl) = match check.what {
                What::Concurrency => ("c", state.concurrency_ttl_ms),
                _ => ("w", check.span.end.saturating_sub(now) + KEY_GRACE_MS),
            };
            let key = key(subject, check.what, check.span.epoch);
            call.key(&key)
                .arg(op)
                .arg(check.amount)
                .arg(check.limit)
                .arg(ttl);
            let (op, value) = match check.what {
                What::Concurrency => ("r", member.to_owned()),
                _ => ("s", check.amount.to_string()),
            };
            undo.entries.push(SettleEntry {
                key,
                op,
                value,
                ttl_ms: 0,
            });
        }
        call.key(marker);
        let mut connection = (**conn).clone();
        let reply = tokio::time::timeout(
            state.timeout,
            call.invoke_async::<Vec<i64>>(&mut connection),
        )
        .await;
        let values = match reply {
            Ok(Ok(values)) => values,
            Ok(Err(error)) => {
                state.unavailable(Some(conn), &error);
                return (None, undo);
            }
            Err(_) => {
                state.unavailable(Some(conn), "timed out");
                return (None, undo);
            }
        };
        match parse_reserved(&values, count) {
            Some(evaluated) => {
                if evaluated.refused.is_some() {
                    undo.entries.clear();
                }
                (Some(evaluated), undo)
            }
            None => {
                state.unavailable(
                    None,
                    "the reservation script answered in an unexpected shape",
                );
                (None, undo)
            }
        }
    }

    /// Queues a reservation's adjustments for the background thread; never waits.
    pub(super) fn settle(
        &self,
        subjects: &[Arc<Subject>],
        checks: &[Check],
        adjustments: &[Adjust],
        lease: u64,
        now: u64,
    ) {
        if adjustments
            .iter()
            .any(|a| matches!(a, Adjust::Release { .. }))
        {
            self.state.release(&self.state.lease_member(lease));
        }
        let entries = adjustments
            .iter()
            .map(|adjustment| {
                let (index, op, value, span) = match *adjustment {
                    Adjust::Return { check, amount } => {
                        (check, "s", amount.to_string(), checks[check].span)
                    }
                    Adjust::Add {
                        check,
                        amount,
                        span,
                    } => (check, "a", amount.to_string(), span),
                    Adjust::Release { check } => (
                        check,
                        "r",
                        self.state.lease_member(lease),
                        checks[check].span,
                    ),
                };
                let check = &checks[index];
                SettleEntry {
                    key: key(&subjects[check.subject], check.what, span.epoch),
                    op,
                    value,
                    ttl_ms: span.end.saturating_sub(now) + KEY_GRACE_MS,
                }
            })
            .collect();
        self.queue(Queued::Settle(entries));
    }

    /// Hands `queued` to the background thread; never waits.
    fn queue(&self, queued: Queued) {
        let queued = self
            .settlements
            .as_ref()
            .is_some_and(|queue| queue.try_send(queued).is_ok());
        if !queued {
            self.state.unavailable(None, "the settlement queue is full");
        }
    }
}

impl RedisBackend {
    /// Whether a connection to Redis is up now.
    pub(super) fn connected(&self) -> bool {
        self.state.conn.load().is_some()
    }

    /// Waits until every settlement queued before this call has been sent to Redis (or
    /// dropped as failed). While Redis is away that is when it is back.
    pub(super) async fn flush(&self) {
        let Some(queue) = &self.settlements else {
            return;
        };
        let (done, flushed) = oneshot::channel();
        if queue.send(Queued::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

impl Drop for RedisBackend {
    /// Closes the queue; the thread sends what is queued (if connected) and exits.
    fn drop(&mut self) {
        drop(self.settlements.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl State {
    fn lease_member(&self, lease: u64) -> String {
        format!("{:016x}:{lease}", self.node)
    }

    /// Keeps `member`'s slots in `keys` renewed until [`State::release`].
    fn hold(&self, member: String, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(member, keys.to_vec());
    }

    fn release(&self, member: &str) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(member);
    }

    /// Moves the expiry of every live lease `concurrency_ttl` past now, in one pipeline. A
    /// lease already gone (expired, or its set lost) is not brought back (`XX`).
    async fn renew(&self) {
        let leases: Vec<(String, Vec<String>)> = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(member, keys)| (member.clone(), keys.clone()))
            .collect();
        if leases.is_empty() {
            return;
        }
        let Some(conn) = self.conn.load_full() else {
            return;
        };
        let now = self.clock.unix_millis();
        let until = now.saturating_add(self.concurrency_ttl_ms);
        // One pipeline per slot: a cluster refuses a pipeline across slots.
        let mut pipes: Vec<(&str, Pipeline)> = Vec::new();
        for (member, keys) in &leases {
            for key in keys {
                let tag = self.slot_of(key);
                let at = match pipes.iter().position(|(t, _)| *t == tag) {
                    Some(at) => at,
                    None => {
                        pipes.push((tag, redis::pipe()));
                        pipes.len() - 1
                    }
                };
                pipes[at]
                    .1
                    .cmd("ZADD")
                    .arg(key)
                    .arg("XX")
                    .arg(until)
                    .arg(member)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(key)
                    .arg(self.concurrency_ttl_ms)
                    .ignore();
            }
        }
        let sent = join_all(pipes.iter().map(|(_, pipe)| {
            let mut connection = (*conn).clone();
            async move {
                tokio::time::timeout(self.timeout, pipe.query_async::<()>(&mut connection)).await
            }
        }))
        .await;
        for result in sent {
            match result {
                Ok(Ok(())) => {}
                Ok(Err(error)) => self.unavailable(Some(&conn), &error),
                Err(_) => self.unavailable(Some(&conn), "timed out"),
            }
        }
    }

    /// What keys must share to go in one script call or pipeline: their hash tag in a
    /// cluster; nothing (all keys go together) on one server.
    fn slot_of<'k>(&self, key: &'k str) -> &'k str {
        match self.client {
            Connector::Single(_) => "",
            Connector::Cluster(_) => hash_tag(key),
        }
    }

    /// A request or settlement could not use Redis: count it, warn now and then, and drop the
    /// connection it used (if any) so the background thread makes a new one.
    fn unavailable(&self, conn: Option<&Arc<Conn>>, why: impl fmt::Display) {
        emit::ratelimit_backend_error();
        if let Some(conn) = conn {
            let current = Some(conn.clone());
            let previous = self.conn.compare_and_swap(&current, None::<Arc<Conn>>);
            if previous.as_ref().is_some_and(|p| Arc::ptr_eq(p, conn)) {
                self.dropped.notify_one();
            }
        }
        self.warnings.warn(|suppressed| {
            let fallback = match self.on_error {
                OnRedisError::Allow => "counting rate limits in this process until it is back",
                OnRedisError::Deny => "refusing rate-limited requests until it is back",
            };
            tracing::warn!(redis = %self.url, error = %why, suppressed, "rate limiter cannot use Redis; {fallback}");
        });
    }

    /// The background thread: one current-thread runtime that keeps a connection and sends
    /// the queued settlements.
    fn run(self: Arc<Self>, queue: mpsc::Receiver<Queued>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "rate limiter cannot start its Redis runtime; Redis is never used");
                return;
            }
        };
        runtime.block_on(self.background(queue));
    }

    async fn background(&self, mut queue: mpsc::Receiver<Queued>) {
        let mut tick = tokio::time::interval(RECONNECT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Three renewals per lease lifetime: one lost or late renewal does not let it lapse.
        let mut renewal = tokio::time::interval(Duration::from_millis(
            (self.concurrency_ttl_ms / 3).max(100),
        ));
        renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Taken from the queue, not yet sent: kept across a lost connection.
        let mut unsent: Vec<SettleEntry> = Vec::new();
        let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            if self.conn.load().is_none() {
                // Shut down while Redis is away: what is still queued cannot be sent.
                if queue.is_closed() {
                    if !unsent.is_empty() || !queue.is_empty() {
                        self.unavailable(None, "shutting down while not connected");
                    }
                    return;
                }
                tick.tick().await;
                self.connect().await;
                continue;
            }
            if !unsent.is_empty()
                && let Err(batch) = self.send(std::mem::take(&mut unsent)).await
            {
                unsent = batch;
                continue;
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
            tokio::select! {
                next = queue.recv() => {
                    let Some(first) = next else { return };
                    let mut next = Some(first);
                    let mut taken = 0;
                    while let Some(queued) = next.take() {
                        match queued {
                            Queued::Settle(entries) => unsent.extend(entries),
                            Queued::Flush(done) => flushes.push(done),
                        }
                        taken += 1;
                        if taken < SETTLE_BATCH {
                            next = queue.try_recv().ok();
                        }
                    }
                }
                () = self.dropped.notified() => {}
                _ = renewal.tick() => self.renew().await,
            }
        }
    }

    async fn connect(&self) {
        let attempt = async {
            let mut conn = match &self.client {
                Connector::Single(client) => {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(self.timeout))
                        .set_response_timeout(Some(self.timeout));
                    Conn::Single(
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?,
                    )
                }
                Connector::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
            };
            // In a cluster, SCRIPT LOAD goes to every primary.
            self.reserve.load_async(&mut conn).await?;
            self.settle.load_async(&mut conn).await?;
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.timeout * 3, attempt).await {
            Ok(Ok(conn)) => {
                self.conn.store(Some(Arc::new(conn)));
                tracing::info!(redis = %self.url, "rate limiter connected to Redis");
            }
            Ok(Err(error)) => self.warnings.warn(|suppressed| {
                tracing::warn!(redis = %self.url, %error, suppressed, "rate limiter cannot connect to Redis");
            }),
            Err(_) => self.warnings.warn(|suppressed| {
                tracing::warn!(redis = %self.url, suppressed, "rate limiter timed out connecting to Redis");
            }),
        }
    }

    /// Sends `batch` in one script call (one per slot in a cluster, sent together); gives it
    /// back unsent when there is no connection. A call that fails or times out is not retried
    /// (it may have been applied): its reservations stay charged.
    async fn send(&self, batch: Vec<SettleEntry>) -> Result<(), Vec<SettleEntry>> {
        let Some(conn) = self.conn.load_full() else {
            return Err(batch);
        };
        // Entries keep their order within a slot, so an undo's marker stays before its
        // entries (all of one subject, so of one slot).
        let mut calls: Vec<(&str, redis::ScriptInvocation<'_>)> = Vec::new();
        for entry in &batch {
            let tag = self.slot_of(&entry.key);
            let at = match calls.iter().position(|(t, _)| *t == tag) {
                Some(at) => at,
                None => {
                    calls.push((tag, self.settle.prepare_invoke()));
                    calls.len() - 1
                }
            };
            calls[at]
                .1
                .key(&entry.key)
                .arg(entry.op)
                .arg(&entry.value)
                .arg(entry.ttl_ms);
        }
        let sent = join_all(calls.iter().map(|(_, call)| {
            let mut connection = (*conn).clone();
            async move {
                tokio::time::timeout(self.timeout, call.invoke_async::<i64>(&mut connection)).await
            }
        }))
        .await;
        for result in sent {
            match result {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => self.unavailable(Some(&conn), &error),
                Err(_) => self.unavailable(Some(&conn), "timed out"),
            }
        }
        Ok(())
    }
}

/// How the background thread connects: to one server, or to a cluster. One per process, so
/// the size of the larger client does not matter.
#[allow(clippy::large_enum_variant)]
enum Connector {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A connection to one server, or to every node of a cluster (commands routed by slot).
/// Cheap to clone: clones share one connection.
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A key's hash tag as Redis Cluster reads it: what lies between the first `{` and the first
/// `}` after it, if that is not empty; else the whole key.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}
/// The concurrency sets a reservation's checks hold a lease in.
fn lease_keys(checks: &[Check], subjects: &[&Arc<Subject>]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c.what == What::Concurrency)
        .map(|c| key(subjects[c.subject], c.what, c.span.epoch))
        .collect()
}

/// `aisix:rl:{scope:name}:rpm:28508434`, `…:budget:month:24290`, `…:concurrency`.
fn key(subject: &Subject, what: What, epoch: u64) -> String {
    let prefix = &subject.redis_prefix;
    match what {
        What::Window(window) => format!("{prefix}:{}:{epoch}", window.kind().as_str()),
        What::Budget(period) => format!("{prefix}:budget:{}:{epoch}", period.as_str()),
        What::Concurrency => format!("{prefix}:concurrency"),
    }
}

/// The reservation script's reply, if it has the shape the script gives.
fn parse_reserved(values: &[i64], checks: usize) -> Option<Evaluated> {
    let (&refused, counts) = values.split_first()?;
    if counts.len() != checks {
        return None;
    }
    let refused = usize::try_from(refused).ok()?;
    Some(Evaluated {
        counts: counts
            .iter()
            .map(|c| u64::try_from(*c).unwrap_or(0))
            .collect(),
        refused: refused.checked_sub(1),
    })
}

/// Warnings at most every [`WARN_EVERY_MS`], each saying how many were held back since the
/// last.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    next_at: AtomicU64,
    suppressed: AtomicU64,
}

impl Warnings {
    pub(crate) fn warn(&self, log: impl FnOnce(u64)) {
        let now = SystemClock.unix_millis();
        let next = self.next_at.load(Ordering::Relaxed);
        if now < next
            || self
                .next_at
                .compare_exchange(
                    next,
                    now + WARN_EVERY_MS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        log(self.suppressed.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservation_reply_is_read_or_refused() {
        assert_eq!(
            parse_reserved(&[0, 3, 40], 2),
            Some(Evaluated {
                counts: vec![3, 40],
                refused: None
            })
        );
        assert_eq!(
            parse_reserved(&[2, 3, 40], 2),
            Some(Evaluated {
                counts: vec![3, 40],
                refused: Some(1)
            })
        );
        assert_eq!(parse_reserved(&[0, 3], 2), None);
        assert_eq!(parse_reserved(&[], 0), None);
        assert_eq!(parse_reserved(&[-1], 0), None);
    }

    #[test]
    fn hash_tags_are_read_as_redis_cluster_reads_them() {
        assert_eq!(
            hash_tag("aisix:rl:{api_keys:team-a}:rpm:1"),
            "api_keys:team-a"
        );
        assert_eq!(hash_tag("aisix:rl:{api_keys:a{b}:rpm:1"), "api_keys:a{b");
        assert_eq!(hash_tag("a{}b{c}"), "a{}b{c}");
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("open{only"), "open{only");
    }

    #[test]
    fn every_key_of_a_subject_lies_in_its_slot() {
        let prefix = "aisix:rl:{models:gpt-4o}";
        for key in [
            format!("{prefix}:rpm:28508434"),
            format!("{prefix}:budget:month:24290"),
            format!("{prefix}:concurrency"),
            format!("{prefix}:res:00000000000000ff:7"),
        ] {
            assert_eq!(hash_tag(&key), "models:gpt-4o", "{key}");
        }
    }

    #[test]
    fn warnings_are_held_back_between_two() {
        let warnings = Warnings::default();
        let mut logged = Vec::new();
        for _ in 0..5 {
            warnings.warn(|suppressed| logged.push(suppressed));
        }
        assert_eq!(logged, [0]);
        assert_eq!(warnings.suppressed.load(Ordering::Relaxed), 4);
        warnings.next_at.store(0, Ordering::Relaxed);
        warnings.warn(|suppressed| logged.push(suppressed));
        assert_eq!(logged, [0, 4]);
    }
}
