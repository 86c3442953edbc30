//! TLS for tests: a self-signed certificate for `localhost`, and a client that trusts exactly one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Writes a new self-signed certificate for `localhost` and its key into `dir` as `cert.pem`
/// and `key.pem` (replacing any there); returns the certificate's PEM and both paths.
pub fn self_signed(dir: &Path) -> (String, PathBuf, PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("generate a certificate");
    let cert_pem = certified.cert.pem();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, &cert_pem).expect("write cert.pem");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key.pem");
    (cert_pem, cert, key)
}

/// A TLS client that trusts only `cert_pem` and offers `alpn`.
pub fn client(cert_pem: &str, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(cert_pem.as_bytes()).expect("certificate PEM"))
        .expect("add root");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}
