//! The per-worker upstream pool as a public API, for a program built on the same stack with
//! none of the gateway's logic: the bench harness's floor proxy (`benches/src/floor.rs`), which
//! prices the stack itself. The gateway uses the pool directly.

use std::time::Duration;

use aisix_config::UpstreamConfig;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::upstream::egress::Route;
use crate::upstream::pool::{Lease, Pool, SendError};

/// One worker's upstream connections (build it on the worker's thread).
#[derive(Clone)]
pub struct UpstreamPool {
    pool: Pool,
}

/// A response's connection: [`UpstreamLease::release`] once its body has been read to the end;
/// dropped instead, it closes the connection.
pub struct UpstreamLease(Lease);

/// Why an exchange failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UpstreamError(SendError);

impl UpstreamPool {
    /// The pool with the gateway's TLS roots; starts its idle reaper on the current runtime.
    pub fn new(config: &UpstreamConfig) -> Result<Self, rustls::Error> {
        let tls = crate::upstream::tls::tls_client_config()?;
        Ok(Self {
            pool: Pool::new(config, tls),
        })
    }

    /// Sends `request` (an absolute URI) directly, on an idle connection or a new one.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        connect_timeout: Duration,
    ) -> Result<(Response<Incoming>, Option<UpstreamLease>), UpstreamError> {
        let (response, lease) = self
            .pool
            .send(request, &Route::Direct, connect_timeout)
            .await
            .map_err(UpstreamError)?;
        Ok((response, lease.map(UpstreamLease)))
    }
}

impl UpstreamLease {
    /// The body was read to the end: the connection may serve the next request.
    pub fn release(self) {
        self.0.release();
    }
}
