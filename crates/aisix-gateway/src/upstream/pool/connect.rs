//! Connecting: a new connection to an upstream host opened along its route (directly, through
//! a CONNECT tunnel, or to a forwarding proxy), TLS with ALPN when `https`, and its task
//! started, holding the host's slot for as long as it lives.

use std::time::Duration;

use http::Uri;
use hyper::client::conn::{http1, http2};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::{Checkout, ConnectError, Inner, Io, READ_BUFFER_MAX, Slot};
use crate::upstream::egress::Route;
use crate::upstream::tls::https_connector;

impl Inner {
    /// Opens a connection along `route` (TCP, a proxy's CONNECT, TLS with ALPN when `https`)
    /// and starts its task, which holds `slot` for as long as the connection lives. On failure
    /// the slot comes back, so the caller decides when its place is freed.
    pub(super) async fn connect(
        &self,
        uri: &Uri,
        route: &Route,
        timeout: Duration,
        mut slot: Slot,
    ) -> Result<Checkout, (ConnectError, Slot)> {
        let io = match tokio::time::timeout(timeout, self.open_io(uri, route)).await {
            Ok(Ok(io)) => io,
            Ok(Err(error)) => return Err((error, slot)),
            Err(_) => return Err((ConnectError::TimedOut, slot)),
        };
        // Made: the end of this connection no longer concerns anyone waiting for the probe.
        slot.probing = false;
        if io.connected().is_negotiated_h2() {
            let handshake = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Duration::from_secs(30))
                .handshake(io)
                .await;
            let (sender, conn) = match handshake {
                Ok(made) => made,
                Err(error) => return Err((ConnectError::failed(error), slot)),
            };
            tokio::spawn(async move {
                let _slot = slot;
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "upstream h2 connection ended");
                }
            });
            Ok(Checkout::Http2(sender))
        } else {
            let handshake = http1::Builder::new()
                .max_buf_size(READ_BUFFER_MAX)
                .handshake(io)
                .await;
            let (sender, conn) = match handshake {
                Ok(made) => made,
                Err(error) => return Err((ConnectError::failed(error), slot)),
            };
            tokio::spawn(async move {
                let _slot = slot;
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "upstream connection ended");
                }
            });
            Ok(Checkout::Http1(sender))
        }
    }

    async fn open_io(&self, uri: &Uri, route: &Route) -> Result<Io, ConnectError> {
        use tower_service::Service;
        match route {
            Route::Direct => self
                .connector
                .clone()
                .call(uri.clone())
                .await
                .map_err(ConnectError::failed),
            Route::Tunnel(proxy) => {
                let mut tunnel = Tunnel::new(proxy.uri.clone(), self.http.clone());
                if let Some(authorization) = &proxy.authorization {
                    tunnel = tunnel.with_auth(authorization.clone());
                }
                https_connector(&self.tls, tunnel)
                    .call(uri.clone())
                    .await
                    .map_err(|e| ConnectError::failed(format!("through the proxy: {e}")))
            }
            Route::Forward(proxy) => self
                .http
                .clone()
                .call(proxy.uri.clone())
                .await
                .map(MaybeHttpsStream::Http)
                .map_err(|e| ConnectError::failed(format!("to the proxy: {e}"))),
        }
    }
}
