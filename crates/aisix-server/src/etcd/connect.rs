//! Connecting to etcd as `etcd:` says: endpoints, user and password (from `password_env`),
//! TLS, and the dial timeout. Shared by the watch and the `export`/`import` commands.

use aisix_config::EtcdConfig;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

/// How often the connection is pinged while idle, so a dead etcd is noticed by the watch.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// A client for `config`. The password is read from its variable here, each time, and kept
/// nowhere else.
pub(crate) async fn connect(config: &EtcdConfig) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(config.dial_timeout)
        .with_keep_alive(KEEP_ALIVE, config.dial_timeout)
        .with_keep_alive_while_idle(true);
    if let (Some(user), Some(var)) = (&config.user, &config.password_env) {
        let password = std::env::var(var)
            .map_err(|_| format!("etcd.password_env: environment variable {var} is not set"))?;
        options = options.with_user(user.clone(), password);
    }
    if let Some(tls) = &config.tls {
        let mut tls_options = TlsOptions::new();
        if let Some(ca) = &tls.ca_cert_file {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("etcd.tls.ca_cert_file {}: {e}", ca.display()))?;
            tls_options = tls_options.ca_certificate(Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&tls.client_cert_file, &tls.client_key_file) {
            let cert = std::fs::read(cert)
                .map_err(|e| format!("etcd.tls.client_cert_file {}: {e}", cert.display()))?;
            let key = std::fs::read(key)
                .map_err(|e| format!("etcd.tls.client_key_file {}: {e}", key.display()))?;
            tls_options = tls_options.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &tls.domain_name {
            tls_options = tls_options.domain_name(name.clone());
        }
        options = options.with_tls(tls_options);
    }
    tokio::time::timeout(
        config.dial_timeout,
        Client::connect(&config.endpoints, Some(options)),
    )
    .await
    .map_err(|_| "timed out connecting to etcd".to_owned())?
    .map_err(|e| format!("cannot connect to etcd: {e}"))
}
