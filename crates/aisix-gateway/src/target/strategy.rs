//! The order in which one request meets a group's targets: priorities first (highest first),
//! then each priority's targets by the group's strategy. Pure functions of the group's shape,
//! its rotation turn and its targets' load, so they are tested without a server.

use std::ops::Range;

use aisix_config::Strategy;

/// The targets of one priority, as a run of the group's members, with their round-robin
/// schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tier {
    pub members: Range<usize>,
    /// Member indices in smooth weighted round-robin order, one slot per unit of weight
    /// (weights divided by their greatest common divisor).
    pub schedule: Vec<usize>,
}

impl Tier {
    /// The tier of `members` with these `weights` (one per member, each at least 1).
    pub(crate) fn new(members: Range<usize>, weights: &[u32]) -> Self {
        let schedule = smooth_weighted(weights)
            .into_iter()
            .map(|i| members.start + i)
            .collect();
        Self { members, schedule }
    }
}

/// The nginx smooth weighted round-robin sequence over `weights`: each turn every target gains
/// its weight, the richest is picked and pays the total. The sequence repeats after the sum of
/// the (reduced) weights, and within it each target appears `weight` times, spread out rather
/// than in runs.
pub(crate) fn smooth_weighted(weights: &[u32]) -> Vec<usize> {
    let divisor = weights.iter().copied().fold(0, gcd).max(1);
    let weights: Vec<i64> = weights
        .iter()
        .map(|w| i64::from((*w / divisor).max(1)))
        .collect();
    let total: i64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut schedule = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for _ in 0..total {
        let mut best = 0;
        for (i, weight) in weights.iter().enumerate() {
            current[i] += weight;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        schedule.push(best);
    }
    schedule
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Member indices in the order a request tries them. `turn` is the group's rotation (one per
/// request); `load(i)` is member `i`'s in-flight count (`least_busy`) or average time to first
/// byte (`least_latency`), lower first, ties in listed order.
pub(crate) fn order(
    strategy: Strategy,
    tiers: &[Tier],
    turn: u64,
    load: impl Fn(usize) -> u64,
) -> Vec<usize> {
    let mut order = Vec::with_capacity(tiers.last().map_or(0, |t| t.members.end));
    for tier in tiers {
        let start = order.len();
        order.extend(tier.members.clone());
        let tried = &mut order[start..];
        match strategy {
            Strategy::Failover => {}
            Strategy::RoundRobin => {
                let len = tier.schedule.len() as u64;
                if let Some(&pick) = usize::try_from(turn % len.max(1))
                    .ok()
                    .and_then(|slot| tier.schedule.get(slot))
                {
                    tried.rotate_left(pick - tier.members.start);
                }
            }
            Strategy::LeastBusy | Strategy::LeastLatency => tried.sort_by_key(|&i| load(i)),
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_honours_weights_within_one_percent_over_10k_picks() {
        let weights = [1, 3, 6, 7];
        let tier = Tier::new(0..4, &weights);
        let mut picks = [0usize; 4];
        for turn in 0..10_000 {
            picks[order(
                Strategy::RoundRobin,
                std::slice::from_ref(&tier),
                turn,
                |_| 0,
            )[0]] += 1;
        }
        let total: u32 = weights.iter().sum();
        for (i, weight) in weights.iter().enumerate() {
            let expected = 10_000.0 * f64::from(*weight) / f64::from(total);
            let off = (picks[i] as f64 - expected).abs() / 10_000.0;
            assert!(
                off < 0.01,
                "target {i}: {} picks, expected {expected}",
                picks[i]
            );
        }
    }

    #[test]
    fn smooth_weighting_spreads_picks_rather_than_running_them() {
        // nginx's example: weights 5, 1, 1 give a a b a c a a, not a a a a a b c.
        assert_eq!(smooth_weighted(&[5, 1, 1]), [0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(
            smooth_weighted(&[2, 2]),
            [0, 1],
            "reduced by the common divisor"
        );
        assert_eq!(smooth_weighted(&[1]), [0]);
    }

    #[test]
    fn higher_priorities_come_first_and_the_rest_follow_as_fallbacks() {
        // Members 0 and 1 at the top priority, 2 and 3 below.
        let tiers = [Tier::new(0..2, &[1, 1]), Tier::new(2..4, &[1, 1])];
        assert_eq!(order(Strategy::Failover, &tiers, 7, |_| 0), [0, 1, 2, 3]);
        assert_eq!(order(Strategy::RoundRobin, &tiers, 0, |_| 0), [0, 1, 2, 3]);
        assert_eq!(order(Strategy::RoundRobin, &tiers, 1, |_| 0), [1, 0, 3, 2]);
    }

    #[test]
    fn least_busy_and_least_latency_prefer_the_lowest_load_within_a_priority() {
        let tiers = [Tier::new(0..3, &[1, 1, 1]), Tier::new(3..4, &[1])];
        let load = |i: usize| [5, 2, 9, 0][i];
        assert_eq!(order(Strategy::LeastBusy, &tiers, 0, load), [1, 0, 2, 3]);
        assert_eq!(order(Strategy::LeastLatency, &tiers, 0, load), [1, 0, 2, 3]);
        // Ties keep the listed order.
        assert_eq!(order(Strategy::LeastBusy, &tiers, 0, |_| 1), [0, 1, 2, 3]);
    }
}
