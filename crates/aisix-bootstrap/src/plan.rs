//! The serving plan: mode and worker count, resolved from the config before any runtime exists.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use aisix_config::ProxyConfig;

/// How requests are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// N threads `tpc-0..N-1`, each with its own current-thread runtime and listener.
    ThreadPerCore,
    /// One multi-thread runtime with N threads and one listener.
    Shared,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ThreadPerCore => "thread_per_core",
            Mode::Shared => "shared",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
        let mode = if proxy.thread_per_core {
            Mode::ThreadPerCore
        } else {
            Mode::Shared
        };
        Self {
            mode,
            workers,
            workers_source,
            addr: proxy.addr,
            backlog: proxy.backlog,
        }
    }

    /// The name a worker shows in logs, metrics and (thread-per-core) `ps -T`.
    pub fn worker_name(&self, id: usize) -> String {
        match self.mode {
            Mode::ThreadPerCore => format!("tpc-{id}"),
            Mode::Shared => format!("shared-{id}"),
        }
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
}
