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

/// A certificate authority made for one test: a self-signed CA certificate (`{name}-ca.pem`)
/// that issues certificates for `localhost` and `127.0.0.1`, each a PEM pair in the same folder.
pub struct Authority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    dir: PathBuf,
    /// The CA certificate's file, what a peer that trusts this authority is given.
    pub cert: PathBuf,
}

impl Authority {
    /// A new CA named `name`, its certificate written into `dir`.
    pub fn new(dir: &Path, name: &str) -> Authority {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&path, cert.pem()).expect("write the CA certificate");
        Authority {
            issuer: rcgen::Issuer::new(params, key),
            dir: dir.to_owned(),
            cert: path,
        }
    }

    /// Issues a certificate for `localhost` and `127.0.0.1`, good for a server and a client;
    /// writes `{name}.pem` and `{name}-key.pem` and returns their paths.
    pub fn issue(&self, name: &str) -> (PathBuf, PathBuf) {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("certificate key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign the certificate");
        let cert_path = self.dir.join(format!("{name}.pem"));
        let key_path = self.dir.join(format!("{name}-key.pem"));
        std::fs::write(&cert_path, cert.pem()).expect("write the certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write the key");
        (cert_path, key_path)
    }
}
