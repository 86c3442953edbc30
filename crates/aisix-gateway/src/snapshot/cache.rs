//! The per-worker reload cache: a worker's snapshot tagged with the resources it was built
//! from, rebuilt on the first request after a reload, each key keeping its memory-budget share.

use std::sync::Arc;

use aisix_config::{Resilience, Resources};
use arc_swap::ArcSwap;

use super::Snapshot;
use super::credential::Credentials;
use crate::limit::Limiter;
use crate::limit::memory_budget::MemoryBudget;
use crate::target::state::States;
use crate::upstream::egress::Egress;

/// A worker's snapshot, tagged with the resources it was built from. A request compares that
/// identity with the resources published now and rebuilds on a mismatch. The pair is swapped as
/// one value, so a slow rebuild from older resources can never leave an old snapshot under a
/// newer tag: at worst the next request rebuilds again.
///
/// Cost per request: two `ArcSwap` loads, a pointer comparison and one reference count.
pub(crate) struct SnapshotCache {
    current: ArcSwap<Built>,
    /// The worker's memory budget, which each key's share is of.
    budget: MemoryBudget,
}

/// Resources as published to every worker, with the shared state of their entries.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub resources: Resources,
    pub states: States,
    /// The credentials refreshed off the request path (`vertex` keys), by provider key.
    pub credentials: Credentials,
}

impl Loaded {
    /// `resources` with the state of `previous`'s unchanged entries carried over.
    pub(crate) fn new(
        resources: Resources,
        previous: Option<&Loaded>,
        settings: Resilience,
        egress: &Egress,
    ) -> Self {
        let states = States::carry_over(previous.map(|p| &p.states), &resources, settings);
        let credentials =
            Credentials::carry_over(previous.map(|p| &p.credentials), &resources, egress);
        Self {
            resources,
            states,
            credentials,
        }
    }
}

struct Built {
    source: Arc<Loaded>,
    snapshot: Arc<Snapshot>,
}

impl SnapshotCache {
    pub(crate) fn new(
        published: &ArcSwap<Loaded>,
        egress: &Egress,
        limiter: &Limiter,
        budget: &MemoryBudget,
    ) -> Self {
        let source = published.load_full();
        let snapshot = Arc::new(Snapshot::build(&source, egress, limiter).shared(budget, None));
        Self {
            current: ArcSwap::from_pointee(Built { source, snapshot }),
            budget: budget.clone(),
        }
    }

    /// The snapshot of the resources published now, built here if this worker has not yet.
    pub(crate) fn get(
        &self,
        published: &ArcSwap<Loaded>,
        egress: &Egress,
        limiter: &Limiter,
    ) -> Arc<Snapshot> {
        let source = published.load();
        let cached = self.current.load();
        if Arc::ptr_eq(&cached.source, &source) {
            return cached.snapshot.clone();
        }
        let snapshot = Arc::new(
            Snapshot::build(&source, egress, limiter).shared(&self.budget, Some(&cached.snapshot)),
        );
        self.current.store(Arc::new(Built {
            source: Arc::clone(&source),
            snapshot: snapshot.clone(),
        }));
        snapshot
    }
}

impl Snapshot {
    /// Gives each key its share of `budget`: the one it had in `previous` (a reload keeps what
    /// its requests in flight hold), else a new one.
    fn shared(mut self, budget: &MemoryBudget, previous: Option<&Snapshot>) -> Self {
        for (hash, entry) in &mut self.keys {
            let kept = previous
                .and_then(|p| p.keys.get(hash))
                .and_then(|e| e.share.clone());
            entry.share = Some(kept.unwrap_or_else(|| budget.share()));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::SystemClock;
    use crate::snapshot::tests::parse;

    fn resources(model: &str) -> Loaded {
        let yaml = format!(
            "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: mock}}]\nmodels: [{{display_name: {model}, provider: mock, model_name: m, provider_key: p}}]\n"
        );
        Loaded::new(parse(&yaml), None, Resilience::default(), &Egress::direct())
    }

    #[test]
    fn a_stale_rebuild_finishing_last_is_replaced_by_the_next_request() {
        let egress = Egress::direct();
        let limiter = Limiter::in_memory(Arc::new(SystemClock));
        let published = ArcSwap::from_pointee(resources("old"));
        let budget = MemoryBudget::new(1 << 20, 1 << 18);
        let cache = SnapshotCache::new(&published, &egress, &limiter, &budget);
        let old_source = published.load_full();
        assert!(
            cache
                .get(&published, &egress, &limiter)
                .model("old")
                .is_some()
        );

        published.store(Arc::new(resources("new")));
        assert!(
            cache
                .get(&published, &egress, &limiter)
                .model("new")
                .is_some()
        );
        // A request that loaded the old resources before the reload stores its rebuild last.
        cache.current.store(Arc::new(Built {
            snapshot: Arc::new(Snapshot::build(&old_source, &egress, &limiter)),
            source: old_source,
        }));
        let snapshot = cache.get(&published, &egress, &limiter);
        assert!(snapshot.model("new").is_some() && snapshot.model("old").is_none());
        assert!(Arc::ptr_eq(
            &cache.get(&published, &egress, &limiter),
            &cache.get(&published, &egress, &limiter)
        ));
    }

    #[test]
    fn a_key_keeps_its_share_of_the_budget_across_a_reload() {
        let yaml = |model: &str| {
            format!(
                "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: mock}}]\nmodels: [{{display_name: {model}, provider: mock, model_name: m, provider_key: p}}]\napi_keys: [{{display_name: k, key_hash: fdee306ee20284546953efcaf060f0b555c52d4941bfa7c55d95b87acba3d26b, allowed_models: [\"*\"]}}]\n"
            )
        };
        let loaded = |model: &str| {
            Loaded::new(
                parse(&yaml(model)),
                None,
                Resilience::default(),
                &Egress::direct(),
            )
        };
        let (egress, limiter) = (Egress::direct(), Limiter::in_memory(Arc::new(SystemClock)));
        let published = ArcSwap::from_pointee(loaded("old"));
        let budget = MemoryBudget::new(1 << 20, 1 << 18);
        let cache = SnapshotCache::new(&published, &egress, &limiter, &budget);
        let hash = published.load().resources.api_keys[0].key_hash;
        let share = |snapshot: &Snapshot| snapshot.api_key(&hash).unwrap().share.clone().unwrap();
        let before = share(&cache.get(&published, &egress, &limiter));

        published.store(Arc::new(loaded("new")));
        let snapshot = cache.get(&published, &egress, &limiter);
        assert!(snapshot.model("new").is_some());
        assert!(
            share(&snapshot).is(&before),
            "what its requests hold stays counted"
        );
    }
}
