//! The worker's memory budget (`proxy.max_buffered_bytes_per_worker`): the bytes its requests
//! hold in memory at once. A request charges its body before holding it (from its
//! `Content-Length`, or piece by piece as it arrives) and gives it back when its response
//! ends; one that would cross the budget waits for room until its own deadline, then gets 503
//! `gateway_overloaded` with `Retry-After`. An upstream answer held whole (to translate it) is
//! charged piece by piece as it arrives and refused at once when there is no room. Bytes are
//! counted in KiB, rounded up.

use std::sync::Arc;

use http::HeaderValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{ErrorKind, GatewayError};

const UNIT: u64 = 1024;

/// One worker's budget; cloned cheaply.
#[derive(Clone)]
pub(crate) struct Budget {
    // shared: one worker's tasks (all of the process in the shared runtime) draw from it.
    room: Arc<Semaphore>,
}

/// Bytes a request holds against its worker's budget, given back when dropped.
#[derive(Debug, Default)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes covered, a whole number of units.
    bytes: u64,
}

impl Budget {
    pub(crate) fn new(bytes: u64) -> Self {
        let units = usize::try_from(bytes.div_ceil(UNIT))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            room: Arc::new(Semaphore::new(units)),
        }
    }

    /// Grows `held` to cover `bytes`, waiting for room until `deadline`.
    pub(crate) async fn cover(
        &self,
        held: &mut Held,
        bytes: u64,
        deadline: Instant,
    ) -> Result<(), GatewayError> {
        let Some(wanted) = held.wanted(bytes)? else {
            return Ok(());
        };
        let permit = match self.room.clone().try_acquire_many_owned(wanted) {
            Ok(permit) => permit,
            Err(_) => {
                tracing::debug!(bytes, "worker memory budget full: waiting");
                match tokio::time::timeout_at(
                    deadline,
                    self.room.clone().acquire_many_owned(wanted),
                )
                .await
                {
                    Ok(Ok(permit)) => permit,
                    _ => return Err(overloaded()),
                }
            }
        };
        held.add(permit, wanted);
        Ok(())
    }

    /// Grows `held` to cover `bytes` if there is room now. For an upstream answer arriving:
    /// one that waited would hold its connection and what it has read, and answers waiting
    /// for each other's room would all wait until their deadlines.
    pub(crate) fn try_cover(&self, held: &mut Held, bytes: u64) -> Result<(), GatewayError> {
        let Some(wanted) = held.wanted(bytes)? else {
            return Ok(());
        };
        match self.room.clone().try_acquire_many_owned(wanted) {
            Ok(permit) => {
                held.add(permit, wanted);
                Ok(())
            }
            Err(_) => Err(overloaded()),
        }
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

    fn add(&mut self, permit: OwnedSemaphorePermit, units: u32) {
        self.merge(Held {
            permit: Some(permit),
            bytes: u64::from(units) * UNIT,
        });
    }

    /// Holds what `other` holds too, until this is dropped.
    pub(crate) fn merge(&mut self, mut other: Held) {
        if let Some(permit) = other.permit.take() {
            self.bytes += other.bytes;
            match self.permit.as_mut() {
                Some(mine) => mine.merge(permit),
                None => self.permit = Some(permit),
            }
        }
    }
}

fn overloaded() -> GatewayError {
    tracing::warn!("request refused: the worker's memory budget had no room in time");
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
        let budget = Budget::new(4 * UNIT);
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

    #[test]
    fn an_answer_s_bytes_are_refused_at_once_without_room_and_given_back_with_the_request() {
        let budget = Budget::new(4 * UNIT);
        let mut request = Held::default();
        budget.try_cover(&mut request, UNIT).unwrap();

        let mut answer = Held::default();
        budget.try_cover(&mut answer, 2 * UNIT).unwrap();
        let error = budget.try_cover(&mut answer, 3 * UNIT + 1).unwrap_err();
        assert_eq!(error.code(), "gateway_overloaded");
        assert_eq!(error.retry_after, Some(HeaderValue::from_static("1")));
        assert_eq!(answer.bytes, 2 * UNIT, "a refusal takes nothing");
        budget.try_cover(&mut answer, 3 * UNIT).unwrap();

        // The answer's charge moves to the request's and goes back with it.
        request.merge(answer);
        assert_eq!(request.bytes, 4 * UNIT);
        let mut other = Held::default();
        assert!(budget.try_cover(&mut other, 1).is_err());
        drop(request);
        budget.try_cover(&mut other, 4 * UNIT).unwrap();
    }
}
