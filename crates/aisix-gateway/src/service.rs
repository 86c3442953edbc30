//! The per-worker gateway service: routes a request to its endpoint.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aisix_bootstrap::WorkerContext;
use http::{Method, Request, Response};
use hyper::body::Incoming;

use crate::body::GatewayBody;
use crate::error::{ErrorKind, GatewayError};
use crate::health;

/// One worker's gateway; cloned per connection (one reference-count increment).
#[derive(Clone)]
pub struct Gateway {
    worker: Arc<Worker>,
}

struct Worker {
    ctx: WorkerContext,
}

impl Gateway {
    pub(crate) fn new(ctx: WorkerContext) -> Self {
        Self {
            worker: Arc::new(Worker { ctx }),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Gateway {
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let worker = self.worker.clone();
        Box::pin(async move { Ok(worker.handle(request).await) })
    }
}

impl Worker {
    async fn handle(&self, request: Request<Incoming>) -> Response<GatewayBody> {
        let path = request.uri().path();
        match (request.method(), path) {
            (&Method::GET | &Method::HEAD, "/livez") => health::livez(),
            (&Method::GET | &Method::HEAD, "/readyz") => {
                health::readyz(self.ctx.readiness.is_ready())
            }
            (_, "/livez" | "/readyz") => {
                GatewayError::new(ErrorKind::MethodNotAllowed, "use GET").to_response()
            }
            _ => {
                GatewayError::new(ErrorKind::NotFound, format!("no route for {path}")).to_response()
            }
        }
    }
}
