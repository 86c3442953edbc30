//! The upstream HTTP client: one per worker (built on the worker's thread, so its pool, timers
//! and connections live there), one for the shared runtime. Keep-alive with an idle bound high
//! enough for the concurrency a worker serves, reaped by the pool's timer, so connections are
//! reused rather than churned into TIME_WAIT.

use std::sync::Arc;
use std::time::Duration;

use aisix_config::UpstreamConfig;
use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub(crate) type UpstreamClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// TLS settings for every upstream: webpki roots plus the system's trust store, ALPN h2 and
/// http/1.1. Built once at startup and shared read-only by all workers.
pub fn tls_client_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(native_roots = added, "loaded system trust store");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A client for one worker. Call it on the worker's thread.
pub(crate) fn client(config: &UpstreamConfig, tls: Arc<rustls::ClientConfig>) -> UpstreamClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(60)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.pool_max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(https)
}
