//! The limit phase of a request: after the model (or group) it names is known and before it is
//! routed, its rate limits and budgets are reserved; when it ends, the reservation is settled
//! with the usage it really had. No limits are configurable yet, so every request is let
//! through and nothing is held: this is the seam where they plug in.

use crate::error::GatewayError;
use crate::inbound::Inbound;
use crate::snapshot::{ApiKeyEntry, Named};
use crate::wire::usage::Usage;

/// What a request holds against its limits until it ends; settled once, by the request's
/// record, whether the request completed, failed or was abandoned.
#[derive(Debug)]
#[must_use = "a reservation is settled when the request ends"]
pub(crate) struct Reservation(());

/// Reserves what `inbound` may consume of the limits of `key` and of `model`, or refuses the
/// request (a 429 in the client's envelope).
pub(crate) fn reserve(
    _key: &ApiKeyEntry,
    _model: &Named,
    _inbound: &Inbound,
) -> Result<Reservation, GatewayError> {
    Ok(Reservation(()))
}

impl Reservation {
    /// Gives back what the request did not use (`usage` is what it reported, `None` when it
    /// reported nothing).
    pub(crate) fn settle(self, _usage: Option<Usage>) {}
}
