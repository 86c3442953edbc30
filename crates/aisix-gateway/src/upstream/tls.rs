//! TLS toward upstreams: the one client configuration every worker shares, and the connector
//! that speaks it (ALPN h2 and http/1.1) over a plain or tunnelled TCP connection.

use std::sync::Arc;

use hyper_rustls::HttpsConnector;

/// TLS settings for every upstream: webpki roots plus the system's trust store (the connector
/// adds ALPN h2 and http/1.1). Built once at startup and shared read-only by all workers.
pub fn tls_client_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let config = client_builder(trust_store())?.with_no_client_auth();
    Ok(Arc::new(config))
}

/// The CAs a server's certificate is checked against: webpki's roots and the system's trust
/// store (which `SSL_CERT_FILE` and `SSL_CERT_DIR` replace).
pub(crate) fn trust_store() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(native_roots = added, "loaded system trust store");
    roots
}

/// A client configuration trusting `roots`, with ring and the safe protocol versions, before
/// its client authentication is chosen.
pub(crate) fn client_builder(
    roots: rustls::RootCertStore,
) -> Result<
    rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    rustls::Error,
> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots))
}

pub(super) fn https_connector<C>(tls: &rustls::ClientConfig, inner: C) -> HttpsConnector<C> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls.clone())
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(inner)
}
