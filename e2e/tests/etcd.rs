//! Resources from a real etcd (Debian's `etcd-server`, started here on loopback ports, written
//! with `etcdctl`), in both serving modes: two gateways on one etcd apply every change within a
//! second; readiness waits for the first snapshot; a bad document is refused, named by its key,
//! while the last good snapshot serves; etcd stopped and restarted, or compacted past the
//! watch, loses no change; etcd's own authentication takes its password from a variable and
//! never logs it; TLS to etcd (a CA the test makes, with and without a client certificate)
//! serves, and a CA that did not sign etcd's certificate keeps the gateway unready with an error
//! that says so. `aisix export`/`import` round-trip the example resources.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode, binary};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::prom::sample;
use aisix_e2e::third_party::etcd::{Etcd, EtcdTls};
use aisix_e2e::tls::Authority;
use sha2::{Digest, Sha256};

/// How soon every replica must apply a change (the issue's bound), as a polling deadline.
const AGREE_WITHIN: Duration = Duration::from_secs(1);

fn hash(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A provider key on `mock`, a model `gpt-x` on it, and the API key `sk-etcd-first`.
fn seed(etcd: &Etcd, mock: &MockProvider) {
    etcd.put(
        "/aisix/provider_keys/up",
        &format!(
            r#"{{"display_name":"up","provider":"openai","api_base":"{}"}}"#,
            mock.base_url()
        ),
    );
    etcd.put(
        "/aisix/models/gpt-x",
        r#"{"display_name":"gpt-x","provider":"openai","model_name":"up-x","provider_key":"up"}"#,
    );
    put_key(etcd, "first", "sk-etcd-first", false);
}

fn put_key(etcd: &Etcd, name: &str, key: &str, disabled: bool) {
    etcd.put(
        &format!("/aisix/api_keys/{name}"),
        &format!(
            r#"{{"display_name":"{name}","key_hash":"{}","allowed_models":["*"],"disabled":{disabled}}}"#,
            hash(key)
        ),
    );
}

fn config(mode: Mode, etcd: &Etcd) -> GatewayConfig {
    config_with(mode, etcd, "")
}

/// [`config`] with more keys under `etcd:` (indented two spaces).
fn config_with(mode: Mode, etcd: &Etcd, more: &str) -> GatewayConfig {
    GatewayConfig::new(mode).metrics().extra(&format!(
        "etcd:\n  endpoints: [\"{}\"]\n  prefix: /aisix\n  dial_timeout_ms: 1000\n{more}",
        etcd.url()
    ))
}

async fn status(gateway: &Gateway, key: &str, model: &str) -> u16 {
    client::chat(gateway.addr(), key, model)
        .await
        .status
        .as_u16()
}

/// Polls until every gateway answers `key` on `model` with `want`, or `within` passes.
async fn agree(gateways: &[&Gateway], key: &str, model: &str, want: u16, within: Duration) {
    let deadline = Instant::now() + within;
    let mut last = Vec::new();
    loop {
        last.clear();
        for gateway in gateways {
            last.push(status(gateway, key, model).await);
        }
        if last.iter().all(|s| *s == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every gateway answered {want} within {within:?} (last: {last:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn scrape(gateway: &Gateway) -> String {
    client::get(gateway.metrics_addr.expect("metrics"), "/metrics")
        .await
        .text()
}

both_modes! {
    async fn two_gateways_on_one_etcd_apply_every_change_within_a_second(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        let a = Gateway::start(&config(mode, &etcd));
        let b = Gateway::start(&config(mode, &etcd));
        agree(&[&a, &b], "sk-etcd-first", "gpt-x", 200, AGREE_WITHIN).await;
        agree(&[&a, &b], "sk-etcd-second", "gpt-x", 401, AGREE_WITHIN).await;

        // Created, disabled, enabled again, deleted: each seen at both within the bound.
        put_key(&etcd, "second", "sk-etcd-second", false);
        agree(&[&a, &b], "sk-etcd-second", "gpt-x", 200, AGREE_WITHIN).await;
        put_key(&etcd, "second", "sk-etcd-second", true);
        agree(&[&a, &b], "sk-etcd-second", "gpt-x", 401, AGREE_WITHIN).await;
        put_key(&etcd, "second", "sk-etcd-second", false);
        agree(&[&a, &b], "sk-etcd-second", "gpt-x", 200, AGREE_WITHIN).await;
        etcd.delete("/aisix/api_keys/second");
        agree(&[&a, &b], "sk-etcd-second", "gpt-x", 401, AGREE_WITHIN).await;

        // A model added, then removed.
        etcd.put(
            "/aisix/models/gpt-y",
            r#"{"display_name":"gpt-y","provider":"openai","model_name":"up-y","provider_key":"up"}"#,
        );
        agree(&[&a, &b], "sk-etcd-first", "gpt-y", 200, AGREE_WITHIN).await;
        etcd.delete("/aisix/models/gpt-y");
        agree(&[&a, &b], "sk-etcd-first", "gpt-y", 404, AGREE_WITHIN).await;

        let page = scrape(&a).await;
        assert_eq!(sample(&page, "aisix_etcd_watch_up", &[]), 1.0, "{page}");
        assert_eq!(
            sample(&page, "aisix_etcd_revision_applied", &[]) as i64,
            etcd.revision(),
            "{page}"
        );
    }
}

both_modes! {
    async fn readiness_waits_for_the_first_snapshot(mode: Mode) {
        let mock = MockProvider::start();
        let mut etcd = Etcd::start();
        seed(&etcd, &mock);
        etcd.stop();
        let gateway = Gateway::start_listening(&config(mode, &etcd));
        assert_eq!(client::get(gateway.addr(), "/readyz").await.status, 503);
        assert_eq!(client::get(gateway.addr(), "/livez").await.status, 200);
        etcd.restart();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client::get(gateway.addr(), "/readyz").await.status != 200 {
            assert!(Instant::now() < deadline, "{}", gateway.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
    }
}

both_modes! {
    async fn a_bad_document_is_refused_by_its_key_and_the_last_good_snapshot_serves(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        let gateway = Gateway::start(&config(mode, &etcd));

        // The model now names a provider key that does not exist; then a document that is not
        // JSON at all.
        etcd.put(
            "/aisix/models/gpt-x",
            r#"{"display_name":"gpt-x","provider":"openai","model_name":"up-x","provider_key":"nope"}"#,
        );
        assert!(
            gateway.wait_for_log("in etcd key /aisix/models/gpt-x", Duration::from_secs(10)),
            "{}",
            gateway.logs()
        );
        etcd.put("/aisix/api_keys/broken", "{not json");
        assert!(
            gateway.wait_for_log("in etcd key /aisix/api_keys/broken", Duration::from_secs(10)),
            "{}",
            gateway.logs()
        );
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
        let page = scrape(&gateway).await;
        assert!(sample(&page, "aisix_etcd_documents_refused_total", &[]) >= 2.0, "{page}");

        // A good change still applies beside the refused documents.
        put_key(&etcd, "third", "sk-etcd-third", false);
        agree(&[&gateway], "sk-etcd-third", "gpt-x", 200, AGREE_WITHIN).await;
    }
}

both_modes! {
    async fn etcd_stopped_and_restarted_loses_no_change(mode: Mode) {
        let mock = MockProvider::start();
        let mut etcd = Etcd::start();
        seed(&etcd, &mock);
        let gateway = Gateway::start(&config(mode, &etcd));
        etcd.stop();
        // The last snapshot keeps serving while etcd is away.
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
        assert!(gateway.wait_for_log("connection lost", Duration::from_secs(10)), "{}", gateway.logs());

        // Changes made while the gateway cannot watch (frozen, so it cannot reconnect first)
        // arrive through the resumed watch.
        gateway.signal(libc::SIGSTOP);
        etcd.restart();
        put_key(&etcd, "late", "sk-etcd-late", false);
        etcd.delete("/aisix/api_keys/first");
        gateway.signal(libc::SIGCONT);
        agree(&[&gateway], "sk-etcd-late", "gpt-x", 200, Duration::from_secs(20)).await;
        agree(&[&gateway], "sk-etcd-first", "gpt-x", 401, AGREE_WITHIN).await;
        assert_eq!(gateway.logs().matches("etcd full load: resources applied").count(), 1, "{}", gateway.logs());
    }
}

both_modes! {
    async fn compaction_past_the_watch_revision_reloads_everything(mode: Mode) {
        let mock = MockProvider::start();
        let mut etcd = Etcd::start();
        seed(&etcd, &mock);
        let gateway = Gateway::start(&config(mode, &etcd));
        gateway.signal(libc::SIGSTOP);
        etcd.restart();
        put_key(&etcd, "after", "sk-etcd-after", false);
        etcd.delete("/aisix/api_keys/first");
        put_key(&etcd, "filler", "sk-etcd-filler", false);
        etcd.compact();
        gateway.signal(libc::SIGCONT);
        agree(&[&gateway], "sk-etcd-after", "gpt-x", 200, Duration::from_secs(20)).await;
        agree(&[&gateway], "sk-etcd-first", "gpt-x", 401, AGREE_WITHIN).await;
        assert!(gateway.wait_for_log("compacted past the watch's revision", Duration::from_secs(10)), "{}", gateway.logs());
    }
}

/// A config file naming `etcd` under `prefix`, in `dir`.
fn etcd_config_file(dir: &std::path::Path, etcd: &Etcd, prefix: &str) -> std::path::PathBuf {
    let path = dir.join(format!("config{}.yaml", prefix.replace('/', "-")));
    std::fs::write(
        &path,
        format!(
            "etcd:\n  endpoints: [\"{}\"]\n  prefix: {prefix}\n",
            etcd.url()
        ),
    )
    .unwrap();
    path
}

fn aisix(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("run aisix")
}

#[test]
fn export_and_import_round_trip_the_example_resources() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let example =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../resources.example.yaml");
    let first = etcd_config_file(dir.path(), &etcd, "/one");
    let second = etcd_config_file(dir.path(), &etcd, "/two");

    let imported = aisix(&first, &["import", example.to_str().unwrap()]);
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    assert!(
        etcd.keys("/one/")
            .contains(&"/one/api_keys/demo".to_owned()),
        "{:?}",
        etcd.keys("/one/")
    );

    let exported = aisix(&first, &["export"]);
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );
    let exported_path = dir.path().join("exported.yaml");
    std::fs::write(&exported_path, &exported.stdout).unwrap();

    // The export is a valid resources file that imports to the same documents.
    let again = aisix(&second, &["import", exported_path.to_str().unwrap()]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let one: Vec<_> = etcd
        .keys("/one/")
        .iter()
        .map(|k| k.trim_start_matches("/one").to_owned())
        .collect();
    let two: Vec<_> = etcd
        .keys("/two/")
        .iter()
        .map(|k| k.trim_start_matches("/two").to_owned())
        .collect();
    assert_eq!(one, two);
    for key in &one {
        let a: serde_json::Value =
            serde_json::from_str(&etcd.get(&format!("/one{key}")).unwrap()).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(&etcd.get(&format!("/two{key}")).unwrap()).unwrap();
        assert_eq!(a, b, "{key}");
    }
    let twice = aisix(&second, &["export"]);
    assert_eq!(
        String::from_utf8_lossy(&twice.stdout),
        String::from_utf8_lossy(&exported.stdout)
    );
}

#[test]
fn an_invalid_file_is_refused_whole_and_nothing_is_written() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let config = etcd_config_file(dir.path(), &etcd, "/aisix");
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "_format_version: \"1\"\nprovider_keys:\n  - {display_name: up, provider: openai}\nmodels:\n  - {display_name: m, provider: openai, model_name: x, provider_key: nope}\n",
    )
    .unwrap();
    let output = aisix(&config, &["import", file.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("models[0].provider_key"), "{stderr}");
    assert!(
        etcd.keys("/aisix/").is_empty(),
        "{:?}",
        etcd.keys("/aisix/")
    );
}

both_modes! {
    async fn etcd_authentication_takes_the_password_from_a_variable_and_never_logs_it(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        etcd.ctl(&["role", "add", "root"]);
        etcd.ctl(&["user", "add", "root:etcd-root-password-123"]);
        etcd.ctl(&["user", "grant-role", "root", "root"]);
        etcd.ctl(&["auth", "enable"]);
        let auth = "  user: root\n  password_env: ETCD_PASSWORD\n";
        let good = config_with(mode, &etcd, auth).env("ETCD_PASSWORD", "etcd-root-password-123");
        let gateway = Gateway::start(&good);
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
        etcd.ctl(&[
            "--user", "root:etcd-root-password-123", "put", "/aisix/api_keys/first",
            &format!(r#"{{"display_name":"first","key_hash":"{}","allowed_models":["*"],"disabled":true}}"#, hash("sk-etcd-first")),
        ]);
        agree(&[&gateway], "sk-etcd-first", "gpt-x", 401, AGREE_WITHIN).await;

        // A wrong password: never ready, and the log says why without the password.
        let bad = config_with(mode, &etcd, auth).env("ETCD_PASSWORD", "not-the-etcd-password");
        let refused = Gateway::start_listening(&bad);
        assert!(refused.wait_for_log("connection lost", Duration::from_secs(10)), "{}", refused.logs());
        assert_eq!(client::get(refused.addr(), "/readyz").await.status, 503);
        for gateway in [&gateway, &refused] {
            let logs = gateway.logs();
            assert!(!logs.contains("etcd-root-password-123") && !logs.contains("not-the-etcd-password"), "{logs}");
        }
    }
}

/// `etcd.tls` for the gateway, indented under `etcd:`.
fn tls_yaml(
    ca: &std::path::Path,
    client: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> String {
    let mut yaml = format!("  tls:\n    ca_cert_file: {}\n", ca.display());
    if let Some((cert, key)) = client {
        yaml += &format!(
            "    client_cert_file: {}\n    client_key_file: {}\n    domain_name: localhost\n",
            cert.display(),
            key.display()
        );
    }
    yaml
}

both_modes! {
    async fn etcd_over_tls_serves_with_the_ca_and_a_client_certificate(mode: Mode) {
        let dir = tempfile::tempdir().unwrap();
        let authority = Authority::new(dir.path(), "etcd");
        let (cert, key) = authority.issue("etcd-server");
        let client = authority.issue("gateway");
        let mock = MockProvider::start();

        // Server TLS: the gateway checks etcd's certificate against the CA.
        let etcd = Etcd::start_tls(EtcdTls { ca: authority.cert.clone(), cert: cert.clone(), key: key.clone(), client: None });
        assert!(etcd.url().starts_with("https://"), "{}", etcd.url());
        seed(&etcd, &mock);
        let gateway = Gateway::start(&config_with(mode, &etcd, &tls_yaml(&authority.cert, None)));
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
        put_key(&etcd, "second", "sk-etcd-second", false);
        agree(&[&gateway], "sk-etcd-second", "gpt-x", 200, AGREE_WITHIN).await;

        // Mutual TLS: etcd demands a client certificate signed by the CA.
        let mutual = Etcd::start_tls(EtcdTls { ca: authority.cert.clone(), cert, key, client: Some(client.clone()) });
        seed(&mutual, &mock);
        let gateway = Gateway::start(&config_with(mode, &mutual, &tls_yaml(&authority.cert, Some(&client))));
        assert_eq!(status(&gateway, "sk-etcd-first", "gpt-x").await, 200);
        put_key(&mutual, "first", "sk-etcd-first", true);
        agree(&[&gateway], "sk-etcd-first", "gpt-x", 401, AGREE_WITHIN).await;

        // Without its client certificate the gateway is refused by etcd: never ready.
        let anonymous = Gateway::start_listening(&config_with(mode, &mutual, &tls_yaml(&authority.cert, None)));
        assert!(anonymous.wait_for_log("connection lost", Duration::from_secs(10)), "{}", anonymous.logs());
        assert_eq!(client::get(anonymous.addr(), "/readyz").await.status, 503);
    }
}

both_modes! {
    async fn etcd_certificate_from_another_ca_is_refused_with_a_clear_error_and_never_ready(mode: Mode) {
        let dir = tempfile::tempdir().unwrap();
        let authority = Authority::new(dir.path(), "etcd");
        let stranger = Authority::new(dir.path(), "stranger");
        let (cert, key) = authority.issue("etcd-server");
        let mock = MockProvider::start();
        let etcd = Etcd::start_tls(EtcdTls { ca: authority.cert.clone(), cert, key, client: None });
        seed(&etcd, &mock);

        let gateway = Gateway::start_listening(&config_with(mode, &etcd, &tls_yaml(&stranger.cert, None)));
        assert!(gateway.wait_for_log("connection lost", Duration::from_secs(10)), "{}", gateway.logs());
        assert_eq!(client::get(gateway.addr(), "/readyz").await.status, 503);
        let logs = gateway.logs();
        assert!(
            logs.contains("invalid peer certificate: UnknownIssuer"),
            "the error does not say etcd's certificate is at fault: {logs}"
        );
        let page = scrape(&gateway).await;
        assert_eq!(sample(&page, "aisix_etcd_watch_up", &[]), 0.0, "{page}");
    }
}
