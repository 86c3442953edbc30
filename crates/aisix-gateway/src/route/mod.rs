//! Routing: which direct models may answer a request and in which order ([`Plan`], the route
//! phase), the attempt loop that walks a plan ([`attempt`]), and the active health checks that
//! feed the targets' state ([`check`]). What is known of each target (state, strategies,
//! retry pauses) is [`crate::target`]'s.

pub(crate) mod attempt;
pub(crate) mod check;

use std::sync::Arc;

use aisix_config::{TimeoutOverrides, UpstreamTimeouts};
use tokio::time::Instant;

use crate::snapshot::{DirectRoute, GroupRoute, Named, Policy};
use crate::target::state::{Excuse, StateClock};
use crate::target::strategy;

/// The rules of a request to a direct model.
static DIRECT: Policy = Policy::DIRECT;

/// The direct models one request may call, in order, and the rules for moving among them.
#[derive(Debug)]
pub(crate) struct Plan {
    named: Named,
    /// For a group: its members in the order this request tries them.
    order: Vec<usize>,
}

impl Plan {
    /// The route phase: a direct model is a plan of one; a group's targets are ordered by its
    /// strategy (which takes one turn of its rotation).
    pub(crate) fn new(named: &Named) -> Self {
        let order = match named {
            Named::Direct(_) => Vec::new(),
            Named::Group(group) => {
                let turn = group.state.next_turn();
                strategy::order(group.strategy, &group.tiers, turn, |i| {
                    group.members.get(i).map_or(0, |m| match group.strategy {
                        aisix_config::Strategy::LeastLatency => m.state.latency_us(),
                        _ => u64::from(m.state.in_flight()),
                    })
                })
            }
        };
        Self {
            named: named.clone(),
            order,
        }
    }

    /// Keeps only the group targets `keep` accepts, in their order, when any is (a direct model
    /// is left as it is).
    pub(crate) fn keep_only(&mut self, keep: impl Fn(&DirectRoute) -> bool) {
        let Named::Group(group) = &self.named else {
            return;
        };
        let kept: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&i| group.members.get(i).is_some_and(|m| keep(m)))
            .collect();
        if !kept.is_empty() {
            self.order = kept;
        }
    }

    /// The name the client sent.
    pub(crate) fn name(&self) -> &Arc<str> {
        self.named.name()
    }

    pub(crate) fn group(&self) -> Option<&Arc<GroupRoute>> {
        match &self.named {
            Named::Group(group) => Some(group),
            Named::Direct(_) => None,
        }
    }

    pub(crate) fn policy(&self) -> &Policy {
        match &self.named {
            Named::Group(group) => &group.policy,
            Named::Direct(_) => &DIRECT,
        }
    }

    /// The `index`th direct model to try.
    pub(crate) fn target(&self, index: usize) -> Option<&Arc<DirectRoute>> {
        match &self.named {
            Named::Direct(direct) => (index == 0).then_some(direct),
            Named::Group(group) => group.members.get(*self.order.get(index)?),
        }
    }

    /// How many direct models the plan holds.
    pub(crate) fn len(&self) -> usize {
        match &self.named {
            Named::Direct(_) => 1,
            Named::Group(_) => self.order.len(),
        }
    }

    /// The deadlines of a call to `target`: the group's own over the direct model's.
    pub(crate) fn timeouts(&self, target: &DirectRoute) -> TimeoutOverrides {
        match &self.named {
            Named::Group(group) => group.timeouts.over(&target.timeouts),
            Named::Direct(_) => target.timeouts,
        }
    }

    /// Which deadlines of a call to `target` are its group's and shorter than the model's
    /// own (`defaults` filling what neither sets), for a request due by `end`. A direct
    /// model's request has none.
    pub(crate) fn excuse(
        &self,
        target: &DirectRoute,
        defaults: UpstreamTimeouts,
        clock: StateClock,
        end: Instant,
    ) -> Excuse {
        let Named::Group(group) = &self.named else {
            return Excuse::default();
        };
        if group.timeouts == TimeoutOverrides::default() {
            return Excuse::default();
        }
        let own = defaults.with(&target.timeouts);
        let asked = defaults.with(&group.timeouts.over(&target.timeouts));
        Excuse {
            first_token: asked.first_token < own.first_token,
            stream_idle: asked.stream_idle < own.stream_idle,
            total: asked.total < own.total,
            end: clock.ms_at(end),
        }
    }
}
