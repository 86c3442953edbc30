//! What the gateway knows of each target (a direct model behind a provider key), shared by every
//! worker: its state (health, cooldown, load, latency, the ticket each call reports its outcome
//! on), the strategies that order a group's targets, the pauses between retries, and what an
//! upstream's refusal is about. Knows no request, connection or body.

pub(crate) mod refusal;
pub(crate) mod retry;
pub(crate) mod state;
pub mod status;
pub(crate) mod strategy;
