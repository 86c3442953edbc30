//! `etcd`: resources read from an etcd cluster instead of a file, under AISIX's key layout
//! (`{prefix}/{collection}/{id}`), and `admin`: the admin API's listener and keys.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::resources::KeyHash;

/// `etcd`: where the resources live when they are not in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `etcd.endpoints`: `http://host:port` (or `https://` with `tls`), at least one.
    pub endpoints: Vec<String>,
    /// `etcd.prefix`: the key prefix every resource lives under, without a trailing `/`.
    pub prefix: String,
    /// `etcd.user`: etcd's own authentication, with the password from `password_env`.
    pub user: Option<String>,
    /// `etcd.password_env`: the variable holding the user's password (never the password).
    pub password_env: Option<String>,
    pub tls: Option<EtcdTls>,
    /// `etcd.dial_timeout_ms`: the longest one connection attempt may take.
    pub dial_timeout: Duration,
}

impl EtcdConfig {
    pub const DEFAULT_PREFIX: &'static str = "/aisix";
    pub const DEFAULT_DIAL_TIMEOUT: Duration = Duration::from_secs(5);
}

/// `etcd.tls`: the CA that signed etcd's certificate, and a client pair for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca_cert_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    /// `etcd.tls.domain_name`: the name to check etcd's certificate against, when the
    /// endpoints are addresses.
    pub domain_name: Option<String>,
}

/// `admin`: the admin API, on its own listener; absent means off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `admin.addr`: must differ from `proxy.addr` and the metrics listener.
    pub addr: SocketAddr,
    /// `admin.admin_keys`: the SHA-256 of each key an operator may present; the plaintext is
    /// hashed at load and kept nowhere.
    pub admin_keys: Vec<KeyHash>,
}
