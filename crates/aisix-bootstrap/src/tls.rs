//! TLS for the proxy listener: one rustls `ServerConfig`, loaded once before any port is bound
//! and cloned into every worker, so all workers share one session-resumption state. A reload
//! swaps the pair for every worker at once: new connections get it, open ones keep theirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aisix_config::TlsConfig;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("proxy.tls.cert_file {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("proxy.tls.key_file {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("proxy.tls: {0}")]
    Config(String),
}

/// Reads the certificate chain and key and builds the server config (ALPN h2, http/1.1).
pub fn load_tls(config: &TlsConfig) -> Result<RustlsConfig, TlsError> {
    tls_server_config(config).map(RustlsConfig::from_config)
}

/// The server config [`load_tls`] wraps. A reload builds one and hands it to
/// `RustlsConfig::reload_from_config`, which every worker's acceptor reads on each new
/// connection.
pub fn tls_server_config(config: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = read_certs(&config.cert_file)?;
    let key = read_key(&config.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            TlsError::Config(format!(
                "certificate and key do not form a usable pair: {e}"
            ))
        })?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Stateless tickets resume sessions on any worker without a shared cache lookup.
    server.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| TlsError::Config(format!("cannot create session ticketer: {e}")))?;
    Ok(Arc::new(server))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    pem_certs(path).map_err(|reason| TlsError::Cert {
        path: path.to_path_buf(),
        reason,
    })
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    pem_key(path).map_err(|reason| TlsError::Key {
        path: path.to_path_buf(),
        reason,
    })
}

/// The certificates of the PEM file `path` (at least one), or why not: a reason that never
/// quotes the file.
pub fn pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_reason(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_reason(&e))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".to_owned());
    }
    Ok(certs)
}

/// The private key of the PEM file `path`, or why not: a reason that never quotes the file
/// (a key file's content is secret).
pub fn pem_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_reason(&e))
}

fn pem_reason(error: &rustls_pki_types::pem::Error) -> String {
    match error {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".to_owned(),
        // Other variants can quote file content; a key file's content is secret.
        _ => "not valid PEM".to_owned(),
    }
}
