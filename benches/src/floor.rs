//! `aisix-bench floor`: the smallest proxy on the gateway's own stack, so a run can price the
//! stack apart from the gateway's logic. The serving core is `aisix-bootstrap` with the settings
//! of the same generated config the gateway reads (hyper's server settings, thread-per-core or
//! shared, SO_REUSEPORT), and upstream requests go through the gateway's per-worker pool
//! ([`aisix_gateway::UpstreamPool`]). One route and no logic: a POST is read whole and sent,
//! with its path and `Content-Type`, to `--upstream`; the answer's status and `Content-Type` come
//! back with its body relayed frame by frame. Any GET answers 200 (the harness's readiness
//! probe). No authentication, no model, no usage, no metrics, no log.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use aisix_bootstrap::{
    Readiness, ServeSettings, Server, ServiceFactory, ServingPlan, WorkerContext,
};
use aisix_config::UpstreamConfig;
use aisix_gateway::{UpstreamLease, UpstreamPool};
use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::signal::unix::{SignalKind, signal};

/// Connect timeout toward the upstream (the gateway's default).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, clap::Args)]
pub struct FloorArgs {
    /// The gateway config to take the serving settings from (only `proxy`, `downstream`,
    /// `shutdown` and `upstream` are read; resources are not).
    #[arg(long)]
    pub config: PathBuf,
    /// Base URL every request goes to, e.g. `http://127.0.0.1:8000` (the request's path is
    /// appended).
    #[arg(long)]
    pub upstream: String,
}

/// Serves until SIGTERM or SIGINT, then drains as the gateway does.
pub fn serve(args: FloorArgs) -> Result<()> {
    let floor = Floor::start(&args)?;
    let stop = {
        let _runtime = floor.control.enter();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
    };
    eprintln!("floor listening on {}", floor.server.local_addr());
    floor.run(stop)
}

/// The floor's workers, started, and the control runtime that supervises them.
pub(crate) struct Floor {
    control: tokio::runtime::Runtime,
    server: Server,
}

impl Floor {
    pub(crate) fn start(args: &FloorArgs) -> Result<Floor> {
        let bootstrap = aisix_config::load_bootstrap(Some(&args.config), std::iter::empty())
            .map_err(|errors| {
                let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
                anyhow!(
                    "invalid config {}:\n{}",
                    args.config.display(),
                    lines.join("\n")
                )
            })?;
        let plan = ServingPlan::resolve(&bootstrap.proxy);
        let listeners = aisix_bootstrap::bind(&plan).context("bind")?;
        let control = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let factory = Arc::new(FloorFactory {
            upstream: Arc::from(args.upstream.trim_end_matches('/')),
            config: bootstrap.upstream.clone(),
        });
        let server = Server::start(
            &plan,
            listeners,
            None,
            &ServeSettings::from_config(&bootstrap),
            Readiness::new(),
            factory,
        )?;
        Ok(Floor { control, server })
    }

    #[cfg(test)]
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// Serves until `stop`, then drains.
    pub(crate) fn run(self, stop: impl Future<Output = ()>) -> Result<()> {
        match self
            .control
            .block_on(self.server.run(stop, std::future::pending()))
        {
            aisix_bootstrap::Stopped::Drained => Ok(()),
            other => Err(anyhow!("floor stopped: {other:?}")),
        }
    }
}

struct FloorFactory {
    upstream: Arc<str>,
    config: UpstreamConfig,
}

impl ServiceFactory for FloorFactory {
    type Body = FloorBody;
    type BodyError = hyper::Error;
    type Service = FloorService;

    fn make_service(&self, _worker: &WorkerContext) -> FloorService {
        // Built on the worker's thread in thread-per-core mode: the pool is the worker's own.
        let pool = match UpstreamPool::new(&self.config) {
            Ok(pool) => Some(pool),
            Err(error) => {
                eprintln!("floor: no upstream pool: {error}");
                None
            }
        };
        FloorService {
            pool,
            upstream: self.upstream.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FloorService {
    pool: Option<UpstreamPool>,
    upstream: Arc<str>,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<FloorBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for FloorService {
    type Response = Response<FloorBody>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<Incoming>) -> Answer {
        let this = self.clone();
        Box::pin(async move { Ok(this.relay(request).await) })
    }
}

impl FloorService {
    async fn relay(self, request: Request<Incoming>) -> Response<FloorBody> {
        if request.method() != Method::POST {
            return status(StatusCode::OK);
        }
        let Some(pool) = self.pool else {
            return status(StatusCode::BAD_GATEWAY);
        };
        let (head, body) = request.into_parts();
        let Ok(body) = body.collect().await else {
            return status(StatusCode::BAD_REQUEST);
        };
        let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut upstream = Request::post(format!("{}{path}", self.upstream));
        if let Some(content_type) = head.headers.get(CONTENT_TYPE) {
            upstream = upstream.header(CONTENT_TYPE, content_type);
        }
        let Ok(upstream) = upstream.body(Full::new(body.to_bytes())) else {
            return status(StatusCode::BAD_REQUEST);
        };
        match pool.send(upstream, CONNECT_TIMEOUT).await {
            Ok((answer, lease)) => {
                let (head, body) = answer.into_parts();
                let mut response = Response::builder().status(head.status);
                if let Some(content_type) = head.headers.get(CONTENT_TYPE) {
                    response = response.header(CONTENT_TYPE, content_type);
                }
                response
                    .body(FloorBody::relay(body, lease))
                    .unwrap_or_else(|_| status(StatusCode::BAD_GATEWAY))
            }
            Err(_) => status(StatusCode::BAD_GATEWAY),
        }
    }
}

fn status(code: StatusCode) -> Response<FloorBody> {
    let mut response = Response::new(FloorBody::Empty);
    *response.status_mut() = code;
    response
}

/// The upstream's body passed on as it comes; its connection goes back to the pool when it ends.
pub enum FloorBody {
    Relay {
        upstream: Incoming,
        lease: Option<UpstreamLease>,
    },
    Empty,
}

impl FloorBody {
    fn relay(upstream: Incoming, lease: Option<UpstreamLease>) -> Self {
        let mut body = FloorBody::Relay { upstream, lease };
        body.release_if_ended();
        body
    }

    fn release_if_ended(&mut self) {
        if let FloorBody::Relay { upstream, lease } = self
            && upstream.is_end_stream()
            && let Some(lease) = lease.take()
        {
            lease.release();
        }
    }
}

impl Body for FloorBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let FloorBody::Relay { upstream, lease } = this else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(upstream).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => this.release_if_ended(),
            Poll::Ready(None) => {
                if let Some(lease) = lease.take() {
                    lease.release();
                }
            }
            // A broken body closes its connection (the lease is dropped).
            Poll::Ready(Some(Err(_))) => *lease = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match self {
            FloorBody::Relay { upstream, .. } => upstream.is_end_stream(),
            FloorBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FloorBody::Relay { upstream, .. } => upstream.size_hint(),
            FloorBody::Empty => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::{LoadRun, LoadSpec, Workload, post_request};
    use crate::mock::MockArgs;

    /// The floor with a one-worker thread-per-core config in `dir`, in front of `upstream`.
    fn start_floor(dir: &std::path::Path, upstream: std::net::SocketAddr) -> Floor {
        let port = crate::gateway::free_port().unwrap();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "proxy: {{addr: \"127.0.0.1:{port}\", thread_per_core: true, workers: 1}}\n\
                 upstream: {{pool_max_idle_per_host: 1024}}\n"
            ),
        )
        .unwrap();
        Floor::start(&FloorArgs {
            config,
            upstream: format!("http://{upstream}"),
        })
        .unwrap()
    }

    /// A short window of `workload` on `connections` connections to `target`.
    fn window(
        target: std::net::SocketAddr,
        body: &str,
        workload: Workload,
        connections: usize,
    ) -> crate::loadgen::PhaseRecord {
        let run = LoadRun::start(&LoadSpec {
            target,
            request: post_request(target, "/v1/chat/completions", "sk-test", body),
            workload,
            connections,
            threads: 1,
            cpus: None,
            timeout: Duration::from_secs(5),
            rate: None,
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        run.set_phase(1);
        std::thread::sleep(Duration::from_millis(300));
        run.set_phase(2);
        let mut records = run.stop().unwrap();
        records.resize_with(3, Default::default);
        records.swap_remove(1)
    }

    #[test]
    fn the_floor_relays_answers_and_streams_on_pooled_upstream_connections_and_drains() {
        let mock = MockArgs {
            addr: "127.0.0.1:0".parse().unwrap(),
            stats_addr: "127.0.0.1:0".parse().unwrap(),
            workers: 1,
            ttft: Duration::from_millis(2),
            frames: 3,
            gap: Duration::from_millis(1),
            burst: false,
            hostile_event_mib: 1,
            hostile_body_mb: 1,
        }
        .start()
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let floor = start_floor(dir.path(), mock.addr());
        let addr = floor.addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = std::thread::spawn(move || {
            floor.run(async {
                let _ = stopped.await;
            })
        });

        let unary = window(addr, r#"{"model":"m","messages":[]}"#, Workload::Unary, 4);
        assert!(unary.ok > 0);
        assert_eq!(unary.failures, 0, "{:?}", unary.errors);
        let streams = window(
            addr,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
            Workload::Stream {
                frames: 3,
                stall: Duration::from_secs(1),
            },
            2,
        );
        assert!(streams.ok > 0);
        assert_eq!(
            (streams.failures, streams.dropped),
            (0, 0),
            "{:?}",
            streams.errors
        );
        // Every answer handed its connection back: at most one upstream connection per
        // client connection ever open at once, however many requests went through.
        assert!(
            mock.connections_accepted() <= 4 + 2,
            "{} upstream connections for {} requests",
            mock.connections_accepted(),
            mock.request_count()
        );
        assert!(mock.request_count() as u64 >= unary.ok + streams.ok);

        stop.send(()).unwrap();
        serving.join().unwrap().unwrap();
    }
}
