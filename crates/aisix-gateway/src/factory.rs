//! Builds each worker's gateway service inside that worker.

use aisix_bootstrap::{ServiceFactory, WorkerContext};

use crate::body::GatewayBody;
use crate::service::Gateway;

/// What every worker's gateway is built from.
#[derive(Debug, Default)]
pub struct GatewayFactory {}

impl GatewayFactory {
    pub fn new() -> Self {
        Self {}
    }
}

impl ServiceFactory for GatewayFactory {
    type Body = GatewayBody;
    type BodyError = std::convert::Infallible;
    type Service = Gateway;

    fn make_service(&self, worker: &WorkerContext) -> Gateway {
        Gateway::new(worker.clone())
    }
}
