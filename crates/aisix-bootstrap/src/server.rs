//! Starting the workers and supervising them: the first worker to exit before the drain ends
//! the process non-zero; a stop request drains every worker together and ends it cleanly.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aisix_config::Bootstrap;
use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::conn::ConnSettings;
use crate::listen::BoundListeners;
use crate::liveness::{Heartbeat, Liveness};
use crate::plan::{Mode, ServingPlan};
use crate::service::{ServiceFactory, WorkerContext};
use crate::shutdown::{DrainSender, Readiness, drain_channel};
use crate::worker::{self, ExitSender, Shared, TpcWorker, WorkerExit};

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
}

impl ServeSettings {
    pub fn from_config(config: &Bootstrap) -> Self {
        Self {
            header_read_timeout: config.downstream.header_read_timeout,
            idle_timeout: config.downstream.idle_timeout,
            readiness_grace: config.shutdown.readiness_grace,
            drain_timeout: config.shutdown.drain_timeout,
            count_connections: config.observability.metrics.prometheus.enabled,
        }
    }

    fn conn(&self) -> ConnSettings {
        ConnSettings {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            count_connections: self.count_connections,
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
                        shared: Shared::new(settings.conn(), tls.clone()),
                        drain: drain_rx.clone(),
                        heartbeat: liveness.heartbeat(id),
                        factory: factory.clone(),
                        addr,
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
                let workers = SharedWorkers {
                    drain: drain_rx,
                    heartbeat: liveness.heartbeat(0),
                    exits: exit_tx,
                };
                let runtime =
                    start_shared(plan, listeners, tls, settings, readiness, factory, workers)?;
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

/// What the shared runtime's accept task is handed besides its listener.
struct SharedWorkers {
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
    workers: SharedWorkers,
) -> Result<tokio::runtime::Runtime, StartError> {
    let SharedWorkers {
        drain,
        heartbeat,
        exits,
    } = workers;
    let name = "shared".to_owned();
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
    let shared = Shared::new(settings.conn(), tls);
    runtime.spawn(heartbeat.run());
    let accept = runtime.spawn(async move {
        worker::accept_loop::<F>(listener, service, shared, drain, "shared").await
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
