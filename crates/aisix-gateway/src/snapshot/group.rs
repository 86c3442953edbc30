//! Group tiering: a group's targets ordered by priority into tiers (weighted within one), its
//! routing policy, and its price (the highest among its targets).

use std::sync::Arc;

use aisix_config::{
    Cost, FallbackError, ModelGroup, Strategy, TimeoutOverrides, WhenAllUnavailable,
};
use bytes::Bytes;
use http::HeaderValue;

use super::DirectRoute;
use crate::limit::Subject;
use crate::target::refusal::UpstreamRefusal;
use crate::target::state::{GroupState, States};
use crate::target::strategy::Tier;
use crate::wire::openai::json_string;

/// A group: a name clients send, answered by one of its direct models.
#[derive(Debug)]
pub struct GroupRoute {
    pub name: Arc<str>,
    /// `name` as a JSON string literal, for the `model` of answers to a key that may not
    /// call the direct model that answered.
    pub name_json: Bytes,
    /// `name` for the `x-aisix-served-by` header, on the same answers.
    pub served_by: HeaderValue,
    /// The group's own deadlines, over those of the direct model answering.
    pub timeouts: TimeoutOverrides,
    pub strategy: Strategy,
    pub policy: Policy,
    /// The targets, highest priority first (listed order within a priority).
    pub(crate) members: Vec<Arc<DirectRoute>>,
    pub(crate) tiers: Vec<Tier>,
    pub(crate) state: Arc<GroupState>,
    /// The group's own `rate_limit`, when it sets one.
    pub limits: Option<Arc<Subject>>,
    /// The highest input and the highest output price among its targets: what a request's
    /// spend is reserved at before it is known which target answers.
    pub cost: Option<Cost>,
}

/// How a request moves among its direct models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Same-target retries of retryable failures.
    pub retries: u32,
    /// Other direct models tried after the first.
    pub max_fallbacks: u32,
    pub retry_on_429: bool,
    /// Upstream statuses that move on to the next direct model instead of being returned.
    pub fallback_on_statuses: Vec<u16>,
    /// Kinds of upstream refusal that move on to the next direct model.
    pub fallback_on_errors: Vec<UpstreamRefusal>,
    pub when_all_unavailable: WhenAllUnavailable,
    pub continue_on_cut: bool,
    /// Cooling direct models are skipped (groups); a direct model is always called.
    pub skip_cooling: bool,
}

impl Policy {
    /// A direct model's requests: one call, answered or failed as it is.
    pub const DIRECT: Policy = Policy {
        retries: 0,
        max_fallbacks: 0,
        retry_on_429: false,
        fallback_on_statuses: Vec::new(),
        fallback_on_errors: Vec::new(),
        when_all_unavailable: WhenAllUnavailable::TryAnyway,
        continue_on_cut: false,
        skip_cooling: false,
    };
}

impl GroupRoute {
    /// The group of `group`, its targets taken from `direct` (the direct models by index).
    pub(super) fn new(
        group: &ModelGroup,
        direct: &[Option<Arc<DirectRoute>>],
        states: &States,
        limits: Option<Arc<Subject>>,
    ) -> Option<Self> {
        let routing = &group.routing;
        let mut targets: Vec<(i32, u32, Arc<DirectRoute>)> = routing
            .targets
            .iter()
            .filter_map(|t| {
                let route = direct.get(t.model_index)?.clone()?;
                Some((t.priority, t.weight, route))
            })
            .collect();
        if targets.is_empty() {
            return None;
        }
        // Stable: listed order within one priority.
        targets.sort_by_key(|(priority, _, _)| std::cmp::Reverse(*priority));
        let mut tiers = Vec::new();
        let mut start = 0;
        while start < targets.len() {
            let priority = targets[start].0;
            let end = start
                + targets[start..]
                    .iter()
                    .take_while(|t| t.0 == priority)
                    .count();
            let weights: Vec<u32> = targets[start..end].iter().map(|t| t.1).collect();
            tiers.push(Tier::new(start..end, &weights));
            start = end;
        }
        let cost = highest_prices(targets.iter().map(|(_, _, route)| route.cost));
        Some(Self {
            name: group.display_name.as_str().into(),
            name_json: json_string(&group.display_name),
            served_by: HeaderValue::from_str(&group.display_name)
                .unwrap_or_else(|_| HeaderValue::from_static("-")),
            timeouts: group.timeouts,
            strategy: routing.strategy,
            policy: Policy {
                retries: routing.retries,
                max_fallbacks: routing.max_fallbacks.unwrap_or(u32::MAX),
                retry_on_429: routing.retry_on_429,
                fallback_on_statuses: routing.fallback_on_statuses.clone(),
                fallback_on_errors: routing
                    .fallback_on_errors
                    .iter()
                    .map(|kind| match kind {
                        FallbackError::ContextLengthExceeded => {
                            UpstreamRefusal::ContextLengthExceeded
                        }
                        FallbackError::ContentFilter => UpstreamRefusal::ContentFilter,
                    })
                    .collect(),
                when_all_unavailable: routing.when_all_unavailable,
                continue_on_cut: routing.continue_on_cut,
                skip_cooling: true,
            },
            members: targets.into_iter().map(|(_, _, route)| route).collect(),
            tiers,
            state: states
                .group(&group.display_name)
                .cloned()
                .unwrap_or_default(),
            limits,
            cost,
        })
    }
}

/// The highest input and the highest output price among `costs`; `None` when none is priced.
fn highest_prices(costs: impl Iterator<Item = Option<Cost>>) -> Option<Cost> {
    costs.flatten().reduce(|a, b| Cost {
        input_per_1k: a.input_per_1k.max(b.input_per_1k),
        output_per_1k: a.output_per_1k.max(b.output_per_1k),
    })
}
