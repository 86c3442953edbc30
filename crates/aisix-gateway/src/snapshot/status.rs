//! Each direct model of the loaded resources with its target's state, for the admin API. Read
//! on the control side; nothing on the request path calls it.

use super::Loaded;
use crate::target::status::ModelStatus;

/// The state of every direct model in `loaded`, in resources order.
pub(crate) fn of(loaded: &Loaded) -> Vec<ModelStatus> {
    let now = loaded.states.clock.now_ms();
    loaded
        .resources
        .models
        .iter()
        .filter_map(|model| {
            let state = loaded.states.target(&model.display_name)?;
            let (health, remaining) = state.health(now);
            Some(ModelStatus {
                model: model.display_name.clone(),
                provider_key: loaded
                    .resources
                    .provider_keys
                    .get(model.provider_key_index)
                    .map(|k| k.display_name.clone())
                    .unwrap_or_default(),
                health,
                cooldown_remaining_ms: remaining,
                in_flight: state.in_flight(),
                latency_estimate_ms: state.latency_us() / 1000,
                disabled: model.disabled,
            })
        })
        .collect()
}
