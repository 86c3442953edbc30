//! The `etcd:` and `admin:` sections: defaults, the environment overlay, and strict errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_config::{Bootstrap, ConfigErrors, EtcdConfig, hash_key, load_bootstrap};

fn load(yaml: &str, vars: &[(&str, &str)]) -> Result<Bootstrap, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    let env = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    load_bootstrap(Some(&path), env)
}

fn messages(result: Result<Bootstrap, ConfigErrors>) -> String {
    result
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn etcd_takes_its_defaults_and_trims_the_prefix() {
    let config = load(
        "etcd:\n  endpoints: [\"http://127.0.0.1:2379\"]\n  prefix: /fleet/\n",
        &[],
    )
    .unwrap();
    let etcd = config.etcd.unwrap();
    assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(etcd.prefix, "/fleet");
    assert_eq!(etcd.dial_timeout, EtcdConfig::DEFAULT_DIAL_TIMEOUT);
    assert!(config.admin.is_none(), "the admin API is off by default");
}

#[test]
fn endpoints_come_comma_separated_from_a_variable() {
    let config = load(
        "",
        &[
            ("AISIX_ETCD__ENDPOINTS", "http://a:2379, http://b:2379"),
            ("AISIX_ETCD__DIAL_TIMEOUT_MS", "250"),
        ],
    )
    .unwrap();
    let etcd = config.etcd.unwrap();
    assert_eq!(etcd.endpoints, ["http://a:2379", "http://b:2379"]);
    assert_eq!(etcd.prefix, "/aisix");
    assert_eq!(etcd.dial_timeout, Duration::from_millis(250));
    // A duration like every other: humantime in the file too.
    let config = load(
        "etcd:\n  endpoints: [\"http://a:2379\"]\n  dial_timeout_ms: \"1m 30s\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.etcd.unwrap().dial_timeout, Duration::from_secs(90));
}

#[test]
fn etcd_and_resources_file_are_never_both_set() {
    let errors = messages(load(
        "resources_file: r.yaml\netcd:\n  endpoints: [\"http://127.0.0.1:2379\"]\n",
        &[],
    ));
    assert!(
        errors.contains("etcd: cannot be set together with resources_file"),
        "{errors}"
    );
}

#[test]
fn etcd_errors_name_their_keys() {
    let errors = messages(load(
        "etcd:\n  endpoints: [\"127.0.0.1:2379\"]\n  prefix: aisix\n  user: u\n  tls:\n    client_cert_file: c.pem\n",
        &[],
    ));
    assert!(
        errors.contains("etcd.endpoints: expected http://host:port"),
        "{errors}"
    );
    assert!(
        errors.contains("etcd.prefix: must start with '/'"),
        "{errors}"
    );
    assert!(
        errors.contains("etcd.user: etcd.user and etcd.password_env go together"),
        "{errors}"
    );
    assert!(
        errors.contains(
            "etcd.tls.client_cert_file: client_cert_file and client_key_file go together"
        ),
        "{errors}"
    );
    let errors = messages(load("etcd:\n  prefix: /aisix\n  endpoint: x\n", &[]));
    assert!(
        errors.contains("etcd.endpoints: needs at least one endpoint"),
        "{errors}"
    );
    assert!(errors.contains("etcd.endpoint: unknown key"), "{errors}");
}

#[test]
fn etcd_tls_with_a_plain_http_endpoint_is_refused_by_name() {
    let errors = messages(load(
        "etcd:\n  endpoints: [\"https://a:2379\", \"http://b:2379\"]\n  tls:\n    ca_cert_file: ca.pem\n",
        &[],
    ));
    assert!(
        errors.contains(
            "etcd.endpoints: \"http://b:2379\" is plain http, but etcd.tls is set: use https://"
        ),
        "{errors}"
    );
}

#[test]
fn admin_keys_are_kept_only_as_hashes() {
    let digest: String = hash_key("another-admin-key-0123")
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let config = load(
        &format!("admin:\n  addr: 127.0.0.1:3001\n  admin_keys: [\"first-admin-key-0123\", \"sha256:{digest}\"]\n"),
        &[],
    )
    .unwrap();
    let admin = config.admin.unwrap();
    assert_eq!(
        admin.admin_keys,
        [
            hash_key("first-admin-key-0123"),
            hash_key("another-admin-key-0123")
        ]
    );
    assert!(!format!("{admin:?}").contains("first-admin-key-0123"));
}

#[test]
fn the_admin_api_never_runs_open_or_on_a_taken_address() {
    let errors = messages(load("admin:\n  addr: 127.0.0.1:3001\n", &[]));
    assert!(
        errors.contains("admin.admin_keys: needs at least one key"),
        "{errors}"
    );
    let errors = messages(load(
        "admin:\n  addr: 127.0.0.1:3001\n  admin_keys: [short]\n",
        &[],
    ));
    assert!(errors.contains("at least 16 characters"), "{errors}");
    assert!(
        !errors.contains("short"),
        "an admin key is never echoed: {errors}"
    );
    let errors = messages(load(
        "proxy:\n  addr: 127.0.0.1:3000\nadmin:\n  addr: 127.0.0.1:3000\n  admin_keys: [\"first-admin-key-0123\"]\n",
        &[],
    ));
    assert!(
        errors.contains("admin.addr: must differ from proxy.addr"),
        "{errors}"
    );
    let errors = messages(load(
        "admin:\n  admin_keys: [\"first-admin-key-0123\"]\n",
        &[],
    ));
    assert!(errors.contains("admin.addr: is required"), "{errors}");
}
