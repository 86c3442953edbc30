//! Workers: the accept loop shared by both modes, the `tpc-N` threads that each run it on their
//! own current-thread runtime (pinned to a CPU when asked), and exit reporting for supervision.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::affinity;
use crate::balance::{Balancer, Handed, Placed, Slot};
use crate::conn::{self, ConnHooks, ConnSettings};
use crate::liveness::Heartbeat;
use crate::service::{ServiceFactory, WorkerContext};
use crate::shutdown::{DrainReceiver, drain_started};

/// How a worker ended; any exit before the drain is fatal to the process.
#[derive(Debug)]
pub(crate) struct WorkerExit {
    pub worker: String,
    pub outcome: Result<(), String>,
}

pub(crate) type ExitSender = mpsc::UnboundedSender<WorkerExit>;

/// What a worker sets each accepted connection up with: the HTTP builder, the connection
/// settings, the TLS acceptor and the test hooks.
pub(crate) struct ConnSetup {
    pub builder: auto::Builder<TokioExecutor>,
    pub settings: ConnSettings,
    pub tls: Option<RustlsAcceptor>,
    pub hooks: ConnHooks,
}

impl ConnSetup {
    pub(crate) fn new(settings: ConnSettings, tls: Option<RustlsConfig>) -> Self {
        let handshake_timeout = settings.header_read_timeout;
        Self {
            builder: conn::http_builder(&settings),
            settings,
            tls: tls.map(|config| RustlsAcceptor::new(config).handshake_timeout(handshake_timeout)),
            hooks: ConnHooks::default(),
        }
    }
}

/// Accepts until the drain starts, then waits for this worker's connections to finish or for
/// the drain deadline, whichever comes first. With a balancer (`proxy.balance: handoff`), a
/// connection accepted while this worker is clearly busier goes to the least-loaded worker,
/// and connections handed over by the others are served here.
pub(crate) async fn accept_loop<F: ServiceFactory>(
    listener: TcpListener,
    service: F::Service,
    setup: ConnSetup,
    mut drain: DrainReceiver,
    mut balancer: Option<Balancer>,
    worker: &str,
) -> io::Result<()> {
    #[cfg(feature = "test-hooks")]
    let (setup, crash) = {
        let mut setup = setup;
        let notify = Arc::new(tokio::sync::Notify::new());
        setup.hooks.crash_worker = Some(notify.clone());
        (setup, notify)
    };
    let setup = Arc::new(setup);
    let tracker = TaskTracker::new();
    let closing = CancellationToken::new();
    let serve = |stream: TcpStream, slot: Option<Slot>| {
        let task = connection::<F>(
            stream,
            slot,
            service.clone(),
            setup.clone(),
            closing.clone(),
        );
        #[cfg(feature = "poll-probe")]
        let task = crate::poll_probe::timed(task);
        tracker.spawn(task);
    };
    let take = |handed: Handed| match TcpStream::from_std(handed.stream) {
        Ok(stream) => serve(stream, Some(handed.slot)),
        Err(error) => tracing::debug!(worker, %error, "cannot take a handed-over socket"),
    };

    let deadline = loop {
        #[cfg(feature = "test-hooks")]
        let crashed = crash.notified();
        #[cfg(not(feature = "test-hooks"))]
        let crashed = std::future::pending::<()>();
        tokio::select! {
            biased;
            deadline = drain_started(&mut drain) => break deadline,
            () = crashed => crash_for_test(worker),
            handed = next_handed(&mut balancer) => take(handed),
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => match balancer.as_ref() {
                    None => serve(stream, None),
                    Some(balancer) => match balancer.place(stream) {
                        Placed::Here(stream, slot) => serve(stream, Some(slot)),
                        Placed::Handed => {}
                    },
                },
                Err(error) => on_accept_error(error, worker).await?,
            },
        }
    };
    drop(listener);
    // Sockets handed over just before the drain are served (and closed) like this worker's own.
    if let Some(balancer) = balancer.as_mut() {
        balancer.close().into_iter().for_each(take);
    }
    closing.cancel();
    tracker.close();
    if let Some(deadline) = deadline
        && tokio::time::timeout_at(deadline, tracker.wait())
            .await
            .is_err()
    {
        tracing::warn!(
            worker,
            connections = tracker.len(),
            "drain deadline reached; closing the remaining connections"
        );
    }
    Ok(())
}

/// The next socket handed to this worker; never, without a balancer.
async fn next_handed(balancer: &mut Option<Balancer>) -> Handed {
    match balancer {
        Some(balancer) => balancer.next_handed().await,
        None => std::future::pending().await,
    }
}

/// Serves one connection; `_slot` keeps it in its worker's count for the handoff until it ends.
async fn connection<F: ServiceFactory>(
    stream: TcpStream,
    _slot: Option<Slot>,
    service: F::Service,
    setup: Arc<ConnSetup>,
    closing: CancellationToken,
) {
    // Responses and SSE frames must not wait for Nagle's algorithm.
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
    let ConnSetup {
        builder,
        settings,
        tls,
        hooks,
    } = &*setup;
    match tls {
        None => conn::serve(stream, service, builder, settings, closing, hooks.clone()).await,
        Some(acceptor) => {
            let handshake = acceptor.accept(stream, ());
            let tls_stream = tokio::select! {
                result = handshake => match result {
                    Ok((tls_stream, _)) => tls_stream,
                    Err(error) => {
                        tracing::debug!(%error, "TLS handshake failed");
                        return;
                    }
                },
                () = closing.cancelled() => return,
            };
            conn::serve(
                tls_stream,
                service,
                builder,
                settings,
                closing,
                hooks.clone(),
            )
            .await;
        }
    }
}

/// Running out of descriptors or buffers is transient: back off and keep accepting. Anything
/// else means the listener is broken, and the worker ends (which ends the process).
async fn on_accept_error(error: io::Error, worker: &str) -> io::Result<()> {
    match error.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::Interrupted => Ok(()),
        _ if is_resource_exhaustion(&error) => {
            tracing::warn!(worker, %error, "accept failed; retrying in 100ms");
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(())
        }
        _ => Err(error),
    }
}

fn is_resource_exhaustion(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(
            error.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        )
    }
    #[cfg(not(unix))]
    {
        let _ = error;
        false
    }
}

#[cfg(feature = "test-hooks")]
#[allow(clippy::panic)] // the point of the hook: a worker dying the way a bug would kill it
fn crash_for_test(worker: &str) -> ! {
    panic!("test hook: worker {worker} was asked to crash");
}

#[cfg(not(feature = "test-hooks"))]
fn crash_for_test(_worker: &str) {}

/// Everything a `tpc-N` thread needs, moved into it.
pub(crate) struct TpcWorker<F> {
    pub listener: std::net::TcpListener,
    pub ctx: WorkerContext,
    pub setup: ConnSetup,
    pub drain: DrainReceiver,
    pub heartbeat: Heartbeat,
    pub factory: Arc<F>,
    pub addr: SocketAddr,
    /// The CPU this thread pins itself to (`proxy.pin_workers`).
    pub cpu: Option<usize>,
    /// This worker's side of the handoff (`proxy.balance: handoff`).
    pub balancer: Option<Balancer>,
}

/// Starts one `tpc-N` thread: its own current-thread runtime, its own listener, its own service.
pub(crate) fn spawn_tpc<F: ServiceFactory>(
    worker: TpcWorker<F>,
    exits: ExitSender,
) -> io::Result<std::thread::JoinHandle<()>> {
    let name = worker.ctx.name.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| run_tpc(worker))) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(panic) => Err(format!("panicked: {}", panic_message(panic.as_ref()))),
            };
            // The receiver is gone only when the process is already exiting.
            let _ = exits.send(WorkerExit {
                worker: name,
                outcome,
            });
        })
}

fn run_tpc<F: ServiceFactory>(worker: TpcWorker<F>) -> io::Result<()> {
    // Pinned before the runtime exists, so everything it allocates is first touched there.
    let cpu = worker.cpu.filter(|&cpu| match affinity::pin_current_thread(cpu) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(worker = %worker.ctx.name, cpu, %error, "cannot pin the worker to its CPU; it runs unpinned");
            false
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let TpcWorker {
            listener,
            ctx,
            setup,
            drain,
            heartbeat,
            factory,
            addr,
            cpu: _,
            balancer,
        } = worker;
        let listener = TcpListener::from_std(listener)?;
        tokio::spawn(heartbeat.run());
        #[cfg(feature = "poll-probe")]
        tokio::spawn(crate::poll_probe::run());
        factory.thread_started(&ctx);
        let service = factory.make_service(&ctx);
        match cpu {
            Some(cpu) => {
                tracing::info!(mode = %ctx.mode, worker = %ctx.name, %addr, cpu, "worker accepting")
            }
            None => tracing::info!(mode = %ctx.mode, worker = %ctx.name, %addr, "worker accepting"),
        }
        accept_loop::<F>(listener, service, setup, drain, balancer, &ctx.name).await
    })
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}
