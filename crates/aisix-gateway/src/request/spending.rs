//! The spending policy of an API key (`api_keys[].spending`): what a request may buy beyond its
//! tokens, checked once its body is inspected. Only keys that set a policy pay for the check.

use aisix_config::SpendingPolicy;

use crate::error::{ErrorKind, GatewayError, echo};
use crate::request::inbound::Inbound;

/// Refuses what `policy` does not allow, naming the field: more choices than `max_n`, a
/// `service_tier` or an `anthropic-beta` value not on its list.
pub(crate) fn check(policy: &SpendingPolicy, inbound: &Inbound) -> Result<(), GatewayError> {
    let choices = inbound.inspected.choices;
    if !policy.allows_n(choices) {
        return Err(refused(format!(
            "n: this API key may ask for at most {} choices per request, not {choices}.",
            policy.max_n.unwrap_or(1)
        )));
    }
    if let Some(tier) = inbound.inspected.service_tier(&inbound.body)
        && !policy.allows_service_tier(&tier)
    {
        return Err(refused(format!(
            "service_tier: this API key may not use the service tier {}.",
            echo(&tier)
        )));
    }
    for value in inbound.forwarded.get_all("anthropic-beta") {
        let betas = value.to_str().unwrap_or_default();
        for beta in betas.split(',').map(str::trim).filter(|b| !b.is_empty()) {
            if !policy.allows_anthropic_beta(beta) {
                return Err(refused(format!(
                    "anthropic-beta: this API key may not use the beta {}.",
                    echo(beta)
                )));
            }
        }
    }
    Ok(())
}

fn refused(message: String) -> GatewayError {
    GatewayError::new(ErrorKind::NotPermitted, message)
}
