//! Starting the workers and supervising them: the first worker to exit before the drain ends
//! the process non-zero; a stop request drains every worker together and ends it cleanly.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use aisix_config::{Balance, Bootstrap};
use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::affinity;
use crate::balance::Balancer;
use crate::conn::ConnSettings;
use crate::listen::BoundListeners;
use crate::liveness::{Heartbeat, Liveness};
use crate::plan::{Mode, ServingPlan};
use crate::service::{ServiceFactory, WorkerContext};
use crate::shutdown::{DrainSender, Readiness, drain_channel};
use crate::worker::{self, ConnSetup, ExitSender, TpcWorker, WorkerExit};

/// Serving settings taken from the bootstrap config.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub header_read_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    /// After the stop signal: `/readyz` is 503 but the listeners still accept, this long.
    pub readiness_grace: Duration,
    pub drain_timeout: Duration,
    /// Count open connections per worker in `aisix_worker_connections_open`.
    pub count_connections: bool,
    /// The request that reaches this count is its connection's last.
    pub max_requests_per_connection: Option<NonZeroU64>,
    /// A connection open this long closes gracefully.
    pub max_connection_age: Option<Duration>,
    /// hyper's HTTP/1 `max_buf_size`.
    pub http1_max_buf_size: usize,
}

impl ServeSettings {
    pub fn from_config(config: &Bootstrap) -> Self {
        Self {
            header_read_timeout: config.downstream.header_read_timeout,
            idle_timeout: config.downstream.idle_timeout,
            readiness_grace: config.shutdown.readiness_grace,
            drain_timeout: config.shutdown.drain_timeout,
            count_connections: config.observability.metrics.prometheus.enabled,
            max_requests_per_connection: config.downstream.max_requests_per_connection,
            max_connection_age: config.downstream.max_connection_age,
            http1_max_buf_size: config.downstream.http1_max_buf_size,
        }
    }

    fn conn(&self) -> ConnSettings {
        ConnSettings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            count_connections: self.count_connections,
            max_requests: self.max_requests_per_connection,
            max_age: self.max_connection_age,
            http1_max_buf_size: self.http1_max_buf_size,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot start worker {worker}: {source}")]
    Worker {
        worker: String,
        #[source]
        source: io::Error,
    },
}

/// How serving ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// A stop was requested and in-flight work drained (or hit the deadline).
    Drained,
    /// A worker exited on its own; the others were drained and the process must fail.
    WorkerFailed { worker: String, reason: String },
    /// A second stop request came during the grace or the drain: stop at once, non-zero.
    Aborted,
}

/// The running workers.
pub struct Server {
    addr: SocketAddr,
    readiness: Readiness,
    drain: DrainSender,
    exits: mpsc::UnboundedReceiver<WorkerExit>,
    running: usize,
    readiness_grace: Duration,
    drain_timeout: Duration,
    liveness: Liveness,
    shared_runtime: Option<tokio::runtime::Runtime>,
}

impl Server {
    /// Starts every worker on its listener. Must be called outside the workers' runtimes (the
    /// control thread), since the shared mode builds its runtime here.
    pub fn start<F: ServiceFactory>(
        plan: &ServingPlan,
        listeners: BoundListeners,
        tls: Option<RustlsConfig>,
        settings: &ServeSettings,
        readiness: Readiness,
        factory: Arc<F>,
    ) -> Result<Self, StartError> {
        let (exit_tx, exits) = mpsc::unbounded_channel();
        let (drain, drain_rx) = drain_channel();
        let addr = listeners.addr;
        let workers = plan.workers.get();
        let liveness = Liveness::new(match plan.mode {
            Mode::ThreadPerCore => workers,
            Mode::Shared => 1,
        });
        let mut server = Self {
            addr,
            readiness: readiness.clone(),
            drain,
            exits,
            running: 0,
            readiness_grace: settings.readiness_grace,
            drain_timeout: settings.drain_timeout,
            liveness: liveness.clone(),
            shared_runtime: None,
        };

        match plan.mode {
            Mode::ThreadPerCore => {
                let cpus = pinned_cpus(plan);
                let mut balancers = balancers(plan);
                for (id, listener) in listeners.listeners.into_iter().enumerate() {
                    let ctx = WorkerContext {
                        id,
                        name: plan.worker_name(id),
                        mode: plan.mode,
                        workers,
                        readiness: readiness.clone(),
                    };
                    let name = ctx.name.clone();
                    let worker = TpcWorker {
                        listener,
                        ctx,
                        setup: ConnSetup::new(settings.conn(), tls.clone()),
                        drain: drain_rx.clone(),
                        heartbeat: liveness.heartbeat(id),
                        factory: factory.clone(),
                        addr,
                        cpu: cpus.as_ref().and_then(|cpus| cpus.get(id).copied()),
                        balancer: balancers.next(),
                    };
                    worker::spawn_tpc(worker, exit_tx.clone()).map_err(|source| {
                        StartError::Worker {
                            worker: name,
                            source,
                        }
                    })?;
                    server.running += 1;
                }
            }
            Mode::Shared => {
                for (key, why) in plan.ignored_settings() {
                    tracing::warn!(key, why, "setting ignored in the shared runtime");
                }
                let links = SupervisorLinks {
                    drain: drain_rx,
                    heartbeat: liveness.heartbeat(0),
                    exits: exit_tx,
                };
                let runtime =
                    start_shared(plan, listeners, tls, settings, readiness, factory, links)?;
                server.shared_runtime = Some(runtime);
                server.running = 1;
            }
        }
        Ok(server)
    }

    /// The address the proxy listens on (the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The workers' liveness, for a supervisor's watchdog.
    pub fn liveness(&self) -> Liveness {
        self.liveness.clone()
    }

    /// Serves until `stop` resolves or a worker exits, then stops in two phases. The grace:
    /// `/readyz` answers 503 at once while the listeners keep accepting for
    /// `shutdown.readiness_grace_secs` (skipped when a worker failed), so load balancers stop
    /// sending first. The drain: every listener closes, open connections finish their current
    /// request, and whatever still runs at `shutdown.drain_timeout_secs` is cut. `abort`
    /// resolving during either phase ends serving at once with [`Stopped::Aborted`].
    pub async fn run(
        mut self,
        stop: impl Future<Output = ()>,
        abort: impl Future<Output = ()>,
    ) -> Stopped {
        let mut failure = tokio::select! {
            () = stop => None,
            exit = self.exits.recv() => exit.map(|exit| self.worker_exited(exit)),
        };
        self.readiness.set_draining();
        tokio::pin!(abort);

        if failure.is_none() && !self.readiness_grace.is_zero() {
            tracing::info!(
                readiness_grace_secs = self.readiness_grace.as_secs(),
                "readiness grace: /readyz answers 503, listeners still accept"
            );
            tokio::select! {
                () = tokio::time::sleep(self.readiness_grace) => {}
                exit = self.exits.recv() => failure = exit.map(|exit| self.worker_exited(exit)),
                () = &mut abort => return self.abort(),
            }
        }

        let deadline = Instant::now() + self.drain_timeout;
        self.drain.send_replace(Some(deadline));
        tracing::info!(
            drain_timeout_secs = self.drain_timeout.as_secs(),
            "draining: listeners closed, waiting for in-flight requests"
        );

        // Workers stop by the deadline; the slack covers their last bookkeeping.
        let give_up = deadline + Duration::from_secs(2);
        while self.running > 0 {
            let exit = tokio::select! {
                exit = tokio::time::timeout_at(give_up, self.exits.recv()) => exit,
                () = &mut abort => return self.abort(),
            };
            match exit {
                Ok(Some(exit)) => {
                    self.running -= 1;
                    if let Err(reason) = exit.outcome {
                        tracing::error!(worker = %exit.worker, %reason, "worker failed while draining");
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(
                        workers = self.running,
                        "workers still busy after the drain deadline"
                    );
                    break;
                }
            }
        }
        if let Some(runtime) = self.shared_runtime.take() {
            runtime.shutdown_background();
        }
        match failure {
            None => {
                tracing::info!("drained; exiting");
                Stopped::Drained
            }
            Some((worker, reason)) => Stopped::WorkerFailed { worker, reason },
        }
    }

    fn worker_exited(&mut self, exit: WorkerExit) -> (String, String) {
        self.running -= 1;
        let reason = match exit.outcome {
            Ok(()) => "exited without a shutdown signal".to_owned(),
            Err(reason) => reason,
        };
        tracing::error!(worker = %exit.worker, %reason, "worker exited unexpectedly; stopping every listener");
        (exit.worker, reason)
    }

    fn abort(mut self) -> Stopped {
        tracing::warn!(
            workers = self.running,
            "second stop signal: exiting now without finishing in-flight requests"
        );
        if let Some(runtime) = self.shared_runtime.take() {
            runtime.shutdown_background();
        }
        Stopped::Aborted
    }
}

/// The CPU of each `tpc-N` thread when `proxy.pin_workers` is on, logged as one mapping line.
/// A mask that cannot be read leaves the workers unpinned, with a warning: pinning is a
/// performance setting, not a reason to refuse to serve.
fn pinned_cpus(plan: &ServingPlan) -> Option<Vec<usize>> {
    if !plan.pin_workers {
        return None;
    }
    let workers = plan.workers.get();
    match affinity::worker_cpus(workers) {
        Ok(cpus) => {
            let names: Vec<String> = (0..workers).map(|id| plan.worker_name(id)).collect();
            tracing::info!(
                mapping = %affinity::describe(&names, &cpus),
                "pinning each worker to one CPU of the process's allowed set"
            );
            let mut distinct = cpus.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < workers {
                tracing::warn!(
                    workers,
                    cpus = distinct.len(),
                    "more workers than allowed CPUs: some CPUs run two workers"
                );
            }
            Some(cpus)
        }
        Err(error) => {
            tracing::warn!(%error, "proxy.pin_workers: cannot read the CPUs this process may use; workers run unpinned");
            None
        }
    }
}

/// Each worker's balancer when `proxy.balance` is `handoff` (and there is someone to hand to).
fn balancers(plan: &ServingPlan) -> std::vec::IntoIter<Balancer> {
    let workers = plan.workers.get();
    let balancers = if plan.balance == Balance::Handoff && workers > 1 {
        tracing::info!(
            balance = plan.balance.as_str(),
            "a worker with clearly more connections than the least-loaded one hands new ones over"
        );
        Balancer::for_workers(workers)
    } else {
        Vec::new()
    };
    balancers.into_iter()
}

/// What ties the shared runtime to the supervisor: the drain signal, the liveness heartbeat and
/// the channel its accept task reports its exit on.
struct SupervisorLinks {
    drain: crate::shutdown::DrainReceiver,
    heartbeat: Heartbeat,
    exits: ExitSender,
}

fn start_shared<F: ServiceFactory>(
    plan: &ServingPlan,
    mut listeners: BoundListeners,
    tls: Option<RustlsConfig>,
    settings: &ServeSettings,
    readiness: Readiness,
    factory: Arc<F>,
    links: SupervisorLinks,
) -> Result<tokio::runtime::Runtime, StartError> {
    let SupervisorLinks {
        drain,
        heartbeat,
        exits,
    } = links;
    let name = plan.worker_name(0);
    let worker_error = |source| StartError::Worker {
        worker: name.clone(),
        source,
    };
    let ctx = WorkerContext {
        id: 0,
        name: name.clone(),
        mode: Mode::Shared,
        workers: plan.workers.get(),
        readiness,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.workers.get())
        .global_queue_interval(2)
        .enable_all()
        .on_thread_start({
            let factory = factory.clone();
            let ctx = ctx.clone();
            move || factory.thread_started(&ctx)
        })
        .build()
        .map_err(worker_error)?;
    let listener = listeners.listeners.pop().ok_or_else(|| {
        worker_error(io::Error::other(
            "no listener was bound for the shared runtime",
        ))
    })?;
    // The service is built inside the runtime, as each tpc worker builds its own.
    let (listener, service) = {
        let _guard = runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(worker_error)?;
        (listener, factory.make_service(&ctx))
    };
    for id in 0..plan.workers.get() {
        tracing::info!(mode = %Mode::Shared, worker = id, addr = %listeners.addr, "worker accepting (one shared listener)");
    }
    let setup = ConnSetup::new(settings.conn(), tls);
    runtime.spawn(heartbeat.run());
    let accept = runtime.spawn(async move {
        worker::accept_loop::<F>(listener, service, setup, drain, None, "shared").await
    });
    runtime.spawn(async move {
        let outcome = match accept.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(join) if join.is_panic() => Err(format!(
                "panicked: {}",
                worker::panic_message(join.into_panic().as_ref())
            )),
            Err(join) => Err(join.to_string()),
        };
        let _ = exits.send(WorkerExit {
            worker: name,
            outcome,
        });
    });
    Ok(runtime)
}
