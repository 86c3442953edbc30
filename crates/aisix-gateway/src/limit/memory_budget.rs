//! The memory budget (`proxy.max_buffered_bytes_per_worker`) and each API key's share of it
//! (`proxy.max_buffered_percent_per_key`): the bytes requests hold in memory at once. A worker
//! has its own budget in thread-per-core mode; the shared runtime's one service draws on the
//! process's, workers × the setting. A request body is charged piece by piece as it arrives
//! (its `Content-Length` charges nothing: idle uploads hold no room) and given back when its
//! response ends. A request whose key holds its share, or whose worker holds its budget, waits
//! for room until its own deadline, then gets 503 `gateway_overloaded` with `Retry-After`;
//! other keys are not held up by one at its share. A whole answer held to translate has room
//! for the answer its request may expect reserved before the upstream call, so a refusal comes
//! before anything is billed; a longer answer takes more as it arrives, waiting for it rather
//! than being refused, and what an answer did not use is given back once it is in. Bytes are
//! counted in KiB, rounded up.

use std::sync::Arc;

use http::HeaderValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{ErrorKind, GatewayError};

const UNIT: u64 = 1024;

/// One worker's budget (the process's in the shared runtime), with the share of the key a
/// request comes from once it is known; cloned cheaply.
#[derive(Clone)]
pub(crate) struct MemoryBudget {
    // shared: one worker's tasks (all of the process in the shared runtime) draw from it.
    room: Arc<Semaphore>,
    /// Units in `room` when nothing is held.
    units: usize,
    /// Units a key's share holds when nothing is held.
    share_units: usize,
    /// The share of the key the request comes from; `None` before authentication.
    share: Option<Share>,
}

/// One API key's share of one budget: held by the key's entry in the worker's lookup tables.
#[derive(Debug, Clone)]
// shared: every request of the key on the worker (the process in the shared runtime) draws on it.
pub(crate) struct Share(Arc<Semaphore>);

/// Bytes a request holds against its budget (and its key's share), given back when dropped.
#[derive(Debug, Default)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// The same units, held against the key's share.
    share: Option<OwnedSemaphorePermit>,
    /// Permits of another semaphore than the first ones (a merge across a reload's budgets,
    /// which a request never makes): held apart rather than merged.
    apart: Vec<OwnedSemaphorePermit>,
    /// Bytes covered, a whole number of units.
    bytes: u64,
}

impl MemoryBudget {
    /// A budget of `bytes` whose keys may each hold `share_bytes` of it at most.
    pub(crate) fn new(bytes: u64, share_bytes: u64) -> Self {
        let units = units_of(bytes);
        Self {
            room: Arc::new(Semaphore::new(units)),
            units,
            share_units: units_of(share_bytes).min(units),
            share: None,
        }
    }

    /// A new key's share of this budget.
    pub(crate) fn share(&self) -> Share {
        Share(Arc::new(Semaphore::new(self.share_units)))
    }

    /// This budget for a request of the key holding `share` (none: the budget alone).
    pub(crate) fn for_key(&self, share: Option<&Share>) -> Self {
        Self {
            share: share.cloned(),
            ..self.clone()
        }
    }

    /// Grows `held` to cover `bytes`, waiting for room (the key's share first, then the
    /// budget's) until `deadline`.
    pub(crate) async fn cover(
        &self,
        held: &mut Held,
        bytes: u64,
        deadline: Instant,
    ) -> Result<(), GatewayError> {
        let Some(wanted) = held.wanted(bytes)? else {
            return Ok(());
        };
        let share = match &self.share {
            Some(share) => Some(acquire(&share.0, wanted, deadline, "key's share").await?),
            None => None,
        };
        let permit = acquire(&self.room, wanted, deadline, "worker memory budget").await?;
        held.add(permit, share, wanted);
        Ok(())
    }

    /// Grows `held` to cover `bytes` if there is room now (in the key's share and the
    /// budget), without waiting; whether it did. For a stream's hold, which commits the stream
    /// rather than wait.
    pub(crate) fn try_cover(&self, held: &mut Held, bytes: u64) -> bool {
        let Ok(wanted) = held.wanted(bytes) else {
            return false;
        };
        let Some(wanted) = wanted else {
            return true;
        };
        let share = match &self.share {
            Some(share) => match share.0.clone().try_acquire_many_owned(wanted) {
                Ok(permit) => Some(permit),
                Err(_) => return false,
            },
            None => None,
        };
        let Ok(permit) = self.room.clone().try_acquire_many_owned(wanted) else {
            return false;
        };
        held.add(permit, share, wanted);
        true
    }

    /// The budget's bytes and a key's share's, when nothing is held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> (u64, u64) {
        (self.units as u64 * UNIT, self.share_units as u64 * UNIT)
    }

    /// Reserves room for the `expected` bytes of a whole answer of at most `limit`, for a
    /// request whose body of `body` bytes is held already, waiting for it until `deadline`.
    /// Returns the reservation and the answer's bound: `limit`, or less when the budget or the
    /// key's share could never hold the body and that much.
    pub(crate) async fn reserve(
        &self,
        body: u64,
        limit: usize,
        expected: u64,
        deadline: Instant,
    ) -> Result<(Held, usize), GatewayError> {
        let capacity = match self.share {
            Some(_) => self.share_units,
            None => self.units,
        } as u64
            * UNIT;
        let bound = (limit as u64).min(capacity.saturating_sub(body.div_ceil(UNIT) * UNIT));
        let mut held = Held::default();
        self.cover(&mut held, expected.min(bound), deadline).await?;
        Ok((held, usize::try_from(bound).unwrap_or(limit)))
    }
}

impl Share {
    /// Whether this is `other` (the same key's share, kept across a reload).
    #[cfg(test)]
    pub(crate) fn is(&self, other: &Share) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// `bytes` in units, rounded up and bounded by what a semaphore holds.
fn units_of(bytes: u64) -> usize {
    usize::try_from(bytes.div_ceil(UNIT))
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS)
}

/// `units` of `room`, now or once given back by `deadline`.
async fn acquire(
    room: &Arc<Semaphore>,
    units: u32,
    deadline: Instant,
    what: &'static str,
) -> Result<OwnedSemaphorePermit, GatewayError> {
    if let Ok(permit) = room.clone().try_acquire_many_owned(units) {
        return Ok(permit);
    }
    tracing::debug!(units, what, "memory budget full: waiting");
    match tokio::time::timeout_at(deadline, room.clone().acquire_many_owned(units)).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(overloaded()),
    }
}

impl Held {
    /// The units to add to cover `bytes`, `None` when they are covered already.
    fn wanted(&self, bytes: u64) -> Result<Option<u32>, GatewayError> {
        if bytes <= self.bytes {
            return Ok(None);
        }
        let units = (bytes - self.bytes).div_ceil(UNIT);
        u32::try_from(units).map(Some).map_err(|_| overloaded())
    }

    fn add(
        &mut self,
        permit: OwnedSemaphorePermit,
        share: Option<OwnedSemaphorePermit>,
        units: u32,
    ) {
        self.merge(Held {
            permit: Some(permit),
            share,
            apart: Vec::new(),
            bytes: u64::from(units) * UNIT,
        });
    }

    /// Gives back what is held beyond `bytes` (rounded up to a unit).
    pub(crate) fn keep(&mut self, bytes: u64) {
        let keep = bytes.div_ceil(UNIT) * UNIT;
        if keep >= self.bytes {
            return;
        }
        let excess = usize::try_from((self.bytes - keep) / UNIT).unwrap_or(usize::MAX);
        for permit in [self.permit.as_mut(), self.share.as_mut()]
            .into_iter()
            .flatten()
        {
            drop(permit.split(excess));
        }
        self.bytes = keep;
    }

    /// Holds what `other` holds too, until this is dropped. Both must come from one budget.
    pub(crate) fn merge(&mut self, mut other: Held) {
        if let Some(permit) = other.permit.take() {
            self.bytes += other.bytes;
            join(&mut self.permit, permit, &mut self.apart);
            if let Some(share) = other.share.take() {
                join(&mut self.share, share, &mut self.apart);
            }
            self.apart.append(&mut other.apart);
        }
    }
}

/// Merges `other` into `mine`, or holds it `apart` when it is another semaphore's.
fn join(
    mine: &mut Option<OwnedSemaphorePermit>,
    other: OwnedSemaphorePermit,
    apart: &mut Vec<OwnedSemaphorePermit>,
) {
    match mine.as_mut() {
        Some(mine) if Arc::ptr_eq(mine.semaphore(), other.semaphore()) => mine.merge(other),
        Some(_) => apart.push(other),
        None => *mine = Some(other),
    }
}

fn overloaded() -> GatewayError {
    tracing::warn!("request refused: the memory budget had no room in time");
    let mut error = GatewayError::new(
        ErrorKind::Overloaded,
        "The gateway is holding as much data as it may; retry shortly.",
    );
    error.retry_after = Some(HeaderValue::from_static("1"));
    error
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_room_and_is_refused_at_its_deadline() {
        let budget = MemoryBudget::new(4 * UNIT, 4 * UNIT);
        let mut first = Held::default();
        budget
            .cover(&mut first, 3 * UNIT, Instant::now())
            .await
            .unwrap();
        budget
            .cover(&mut first, 3 * UNIT + 1, Instant::now())
            .await
            .unwrap();
        assert_eq!(first.bytes, 4 * UNIT, "rounded up to whole units");

        let mut second = Held::default();
        let deadline = Instant::now() + Duration::from_secs(1);
        let error = budget.cover(&mut second, UNIT, deadline).await.unwrap_err();
        assert_eq!(error.status(), 503);
        assert_eq!(error.code(), "gateway_overloaded");
        assert_eq!(error.retry_after, Some(HeaderValue::from_static("1")));
        assert!(Instant::now() >= deadline, "it waited for its deadline");

        // Room given back is taken by a waiting request.
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let mut third = Held::default();
                let deadline = Instant::now() + Duration::from_secs(10);
                budget
                    .cover(&mut third, 2 * UNIT, deadline)
                    .await
                    .map(|()| third.bytes)
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        assert_eq!(waiting.await.unwrap().unwrap(), 2 * UNIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_at_its_share_waits_while_another_key_is_served() {
        let budget = MemoryBudget::new(8 * UNIT, 2 * UNIT);
        let (one, other) = (budget.share(), budget.share());
        let first = budget.for_key(Some(&one));
        let mut held = Held::default();
        first
            .cover(&mut held, 2 * UNIT, Instant::now())
            .await
            .unwrap();

        let deadline = Instant::now() + Duration::from_secs(1);
        let mut more = Held::default();
        let error = first.cover(&mut more, 1, deadline).await.unwrap_err();
        assert_eq!(error.code(), "gateway_overloaded");
        assert!(Instant::now() >= deadline, "it waited for its deadline");
        assert_eq!(more.bytes, 0, "a refusal takes nothing");

        let second = budget.for_key(Some(&other));
        let mut theirs = Held::default();
        second.cover_now(&mut theirs, 2 * UNIT).await.unwrap();
        drop(held);
        first.cover_now(&mut more, 2 * UNIT).await.unwrap();
        assert_eq!(budget.room.available_permits(), 4);
    }

    impl MemoryBudget {
        /// Covers `bytes` if there is room now.
        async fn cover_now(&self, held: &mut Held, bytes: u64) -> Result<(), GatewayError> {
            self.cover(held, bytes, Instant::now()).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn room_is_refused_at_once_past_its_deadline_and_given_back_with_the_request() {
        let budget = MemoryBudget::new(4 * UNIT, 4 * UNIT);
        let mut request = Held::default();
        budget.cover_now(&mut request, UNIT).await.unwrap();

        let mut answer = Held::default();
        budget.cover_now(&mut answer, 2 * UNIT).await.unwrap();
        let error = budget
            .cover_now(&mut answer, 3 * UNIT + 1)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "gateway_overloaded");
        assert_eq!(error.retry_after, Some(HeaderValue::from_static("1")));
        assert_eq!(answer.bytes, 2 * UNIT, "a refusal takes nothing");
        budget.cover_now(&mut answer, 3 * UNIT).await.unwrap();

        // The answer's charge moves to the request's and goes back with it.
        request.merge(answer);
        assert_eq!(request.bytes, 4 * UNIT);
        let mut other = Held::default();
        assert!(budget.cover_now(&mut other, 1).await.is_err());
        drop(request);
        budget.cover_now(&mut other, 4 * UNIT).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_s_room_is_reserved_up_front_and_the_rest_given_back_once_it_is_in() {
        let budget = MemoryBudget::new(16 * UNIT, 8 * UNIT);
        let share = budget.share();
        let keyed = budget.for_key(Some(&share));
        let mut body = Held::default();
        keyed.cover_now(&mut body, 2 * UNIT).await.unwrap();

        // The share holds 8 units: with 2 held by the body, the answer is bounded by 6, and
        // the 3 expected are reserved.
        let (mut answer, bound) = keyed
            .reserve(2 * UNIT, 1 << 20, 3 * UNIT, Instant::now())
            .await
            .unwrap();
        assert_eq!(bound as u64, 6 * UNIT);
        assert_eq!(answer.bytes, 3 * UNIT);
        assert_eq!(share.0.available_permits(), 3);
        // A longer answer takes more as it arrives.
        keyed.cover_now(&mut answer, 6 * UNIT).await.unwrap();
        assert_eq!(share.0.available_permits(), 0);
        // Arrived whole at 1.5 units: the rest goes back.
        answer.keep(UNIT + 512);
        assert_eq!(answer.bytes, 2 * UNIT);
        assert_eq!(share.0.available_permits(), 4);
        assert_eq!(budget.room.available_permits(), 12);

        // No room before the call: refused by its deadline, before anything is sent.
        let (_full, _) = keyed
            .reserve(4 * UNIT, 1 << 20, 1 << 20, Instant::now())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(1);
        let error = keyed.reserve(0, 1024, 1024, deadline).await.unwrap_err();
        assert_eq!(error.code(), "gateway_overloaded");
        body.merge(answer);
        assert_eq!(body.bytes, 4 * UNIT);
    }
}
