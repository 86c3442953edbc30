//! The serving plan: mode and worker count, resolved from the config before any runtime exists.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use aisix_config::{Balance, ProxyConfig};

pub use aisix_obs::metrics::labels::Mode;

/// Where the worker count came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkersSource {
    /// `proxy.workers` was set.
    Configured,
    /// `std::thread::available_parallelism()`, which follows cgroup CPU quotas and affinity.
    AvailableParallelism,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingPlan {
    pub mode: Mode,
    pub workers: NonZeroUsize,
    pub workers_source: WorkersSource,
    pub addr: SocketAddr,
    pub backlog: u32,
    /// Pin `tpc-N` to the N-th allowed CPU (thread-per-core only).
    pub pin_workers: bool,
    /// How connections are spread over `tpc-N` workers (thread-per-core only).
    pub balance: Balance,
}

impl ServingPlan {
    pub fn resolve(proxy: &ProxyConfig) -> Self {
        let (workers, workers_source) = match proxy.workers {
            Some(n) => (n, WorkersSource::Configured),
            None => (
                std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
                WorkersSource::AvailableParallelism,
            ),
        };
        Self {
            mode: Mode::from_thread_per_core(proxy.thread_per_core),
            workers,
            workers_source,
            addr: proxy.addr,
            backlog: proxy.backlog,
            pin_workers: proxy.pin_workers,
            balance: proxy.balance,
        }
    }

    /// The name a worker shows in logs, metrics and (thread-per-core) `ps -T`: `tpc-<id>`, or
    /// `shared` for the shared runtime (one worker, however many threads).
    pub fn worker_name(&self, id: usize) -> String {
        self.mode.worker(id).to_string()
    }

    /// Settings that have no effect in this plan's mode, each with why, for a startup warning:
    /// the shared runtime has one listener and moves work between its threads itself.
    pub fn ignored_settings(&self) -> Vec<(&'static str, &'static str)> {
        let mut ignored = Vec::new();
        if self.mode == Mode::Shared {
            if self.pin_workers {
                ignored.push((
                    "proxy.pin_workers",
                    "the shared runtime moves tasks between its threads; only thread-per-core workers are pinned",
                ));
            }
            if self.balance == Balance::Handoff {
                ignored.push((
                    "proxy.balance",
                    "the shared runtime has one listener and work-stealing threads; handoff applies to thread-per-core workers",
                ));
            }
        }
        ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_workers_win_over_available_parallelism() {
        let proxy = ProxyConfig {
            workers: NonZeroUsize::new(7),
            thread_per_core: true,
            ..ProxyConfig::default()
        };
        let plan = ServingPlan::resolve(&proxy);
        assert_eq!(plan.workers.get(), 7);
        assert_eq!(plan.workers_source, WorkersSource::Configured);
        assert_eq!(plan.mode, Mode::ThreadPerCore);
    }

    #[test]
    fn unset_workers_follow_available_parallelism() {
        let proxy = ProxyConfig {
            workers: None,
            thread_per_core: false,
            ..ProxyConfig::default()
        };
        let plan = ServingPlan::resolve(&proxy);
        assert_eq!(plan.workers, std::thread::available_parallelism().unwrap());
        assert_eq!(plan.workers_source, WorkersSource::AvailableParallelism);
        assert_eq!(plan.mode, Mode::Shared);
    }

    #[test]
    fn pinning_and_handoff_are_reported_as_ignored_in_the_shared_runtime_only() {
        let proxy = ProxyConfig {
            pin_workers: true,
            balance: Balance::Handoff,
            ..ProxyConfig::default()
        };
        let shared = ServingPlan::resolve(&ProxyConfig {
            thread_per_core: false,
            ..proxy.clone()
        });
        let keys: Vec<_> = shared.ignored_settings().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["proxy.pin_workers", "proxy.balance"]);
        let tpc = ServingPlan::resolve(&ProxyConfig {
            thread_per_core: true,
            ..proxy
        });
        assert!(tpc.ignored_settings().is_empty());
        assert!(
            ServingPlan::resolve(&ProxyConfig::default())
                .ignored_settings()
                .is_empty()
        );
    }

    #[test]
    fn worker_names_match_the_worker_label() {
        let plan = |thread_per_core| {
            ServingPlan::resolve(&ProxyConfig {
                thread_per_core,
                workers: NonZeroUsize::new(2),
                ..ProxyConfig::default()
            })
        };
        assert_eq!(plan(true).worker_name(1), "tpc-1");
        assert_eq!(
            plan(false).worker_name(0),
            "shared",
            "the shared runtime is one worker"
        );
        assert_eq!(
            plan(false).worker_name(0),
            plan(false).mode.worker(0).label().as_str()
        );
    }
}
