//! Each target's shared state as an operator reads it (the admin API's
//! `/admin/v1/models/status`): health, cooldown left, calls in flight, latency estimate. Read on
//! the control side (the snapshot gathers it per loaded model); never on a request.

/// A direct model's health now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Available,
    /// Cooling down: skipped until its cooldown ends.
    Cooling,
    /// Its cooldown ended; one probe decides.
    HalfOpen,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Available => "available",
            Health::Cooling => "cooling",
            Health::HalfOpen => "half_open",
        }
    }
}

/// One direct model's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStatus {
    pub model: String,
    /// Its provider key's display name.
    pub provider_key: String,
    pub health: Health,
    /// How long its cooldown has left, in ms (0 when not cooling).
    pub cooldown_remaining_ms: u64,
    /// Calls to it under way, over every worker.
    pub in_flight: u32,
    /// The moving average of its time to first token (with failure penalties), in ms; a prior
    /// of one second before the first sample.
    pub latency_estimate_ms: u64,
    /// Disabled: loaded, but answered as an unknown model and skipped by groups.
    pub disabled: bool,
}
