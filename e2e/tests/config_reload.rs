//! Reloads seen from outside: by SIGHUP and by the resources watch (a Kubernetes ConfigMap's
//! symlink swap), counted in `/metrics` with the hash of the file in force; a broken file
//! refused whole with every error's path; requests finishing on the snapshot they started with;
//! and the proxy's TLS pair re-read on SIGHUP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::prom::{has_series, promtool_check, sample};
use sha2::{Digest, Sha256};

const KEY: &str = "sk-reload-1";

fn resources(upstream: &str, model: &str) -> String {
    aisix_e2e::resources::openai(
        upstream,
        &[(model, &format!("upstream-{model}"))],
        "RELOAD_KEY",
    )
}

/// Two errors at once, each with its own path.
const BROKEN: &str = "_format_version: \"1\"\nmodels:\n  - display_name: broken\n    provider: openai\n    provider_key: nowhere\n";

fn short_hash(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn chat(model: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(&format!(r#"{{"model":"{model}","messages":[]}}"#)),
    )
}

async fn scrape(gateway: &Gateway) -> String {
    client::get(gateway.metrics_addr.unwrap(), "/metrics")
        .await
        .text()
}

/// Scrapes until `reloads_total{result}` reaches `count`; returns that page.
async fn wait_reloads(gateway: &Gateway, result: &str, count: f64) -> String {
    for _ in 0..500 {
        let page = scrape(gateway).await;
        if sample(&page, "aisix_config_reloads_total", &[("result", result)]) >= count {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "reloads_total{{result={result}}} never reached {count}:\n{}",
        gateway.logs()
    );
}

fn config_hash(page: &str) -> String {
    let lines: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("aisix_config_info{"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one aisix_config_info series: {lines:?}"
    );
    let start = lines[0].find("hash=\"").unwrap() + 6;
    lines[0][start..start + 16].to_owned()
}

both_modes! {
    async fn a_sighup_reload_is_counted_with_the_new_hash_and_a_broken_file_with_every_error_path(mode: Mode) {
        let mock = MockProvider::start();
        let first = resources(&mock.base_url(), "gpt-a");
        let gateway = Gateway::start(
            &GatewayConfig::new(mode).resources(first.clone()).env("RELOAD_KEY", KEY).metrics(),
        );
        let page = scrape(&gateway).await;
        assert_eq!(sample(&page, "aisix_config_reloads_total", &[("result", "success")]), 0.0);
        assert!(has_series(&page, "aisix_config_reloads_total", &[("result", "failure")]), "{page}");
        assert_eq!(config_hash(&page), short_hash(&first));
        let loaded_at = sample(&page, "aisix_config_last_reload_success_timestamp_seconds", &[]);
        assert!(loaded_at > 1.0e9, "{page}");

        let second = resources(&mock.base_url(), "gpt-b");
        std::fs::write(gateway.dir().join("resources.yaml"), &second).unwrap();
        gateway.signal(libc::SIGHUP);
        let page = wait_reloads(&gateway, "success", 1.0).await;
        assert_eq!(config_hash(&page), short_hash(&second));
        assert!(sample(&page, "aisix_config_last_reload_success_timestamp_seconds", &[]) >= loaded_at);
        assert_eq!(client::send(gateway.addr(), chat("gpt-b")).await.status, 200);
        assert_eq!(client::send(gateway.addr(), chat("gpt-a")).await.status, 404);
        assert!(gateway.wait_for_log("models=+1 ~0 -1", Duration::from_secs(10)), "{}", gateway.logs());

        std::fs::write(gateway.dir().join("resources.yaml"), BROKEN).unwrap();
        gateway.signal(libc::SIGHUP);
        let page = wait_reloads(&gateway, "failure", 1.0).await;
        assert_eq!(sample(&page, "aisix_config_reloads_total", &[("result", "success")]), 1.0);
        assert_eq!(config_hash(&page), short_hash(&second), "a refused file is not in force");
        // The log reaches the test through a pipe after the counter is already visible.
        assert!(
            gateway.wait_for_log("keeping the running resources", Duration::from_secs(10)),
            "{}",
            gateway.logs()
        );
        let logs = gateway.logs();
        assert!(logs.contains("models[0].model_name") && logs.contains("models[0].provider_key"), "{logs}");
        assert_eq!(client::send(gateway.addr(), chat("gpt-b")).await.status, 200);
        promtool_check(&page).unwrap();
    }
}

/// The layout kubelet gives a mounted ConfigMap: `resources.yaml -> ..data/resources.yaml`,
/// `..data -> ..<timestamp>/`. Returns the path of the file the gateway is pointed at.
fn configmap_volume(dir: &Path, content: &str) -> std::path::PathBuf {
    let version = dir.join("..2026_01_01_00_00_00.1");
    std::fs::create_dir(&version).unwrap();
    std::fs::write(version.join("resources.yaml"), content).unwrap();
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/resources.yaml", dir.join("resources.yaml")).unwrap();
    dir.join("resources.yaml")
}

/// What kubelet does on a ConfigMap update: a new timestamped folder, a new `..data_tmp` link
/// renamed over `..data` (one atomic swap), the old folder removed.
fn configmap_update(dir: &Path, serial: u32, content: &str) {
    let old = std::fs::read_link(dir.join("..data")).unwrap();
    let name = format!("..2026_01_01_00_00_00.{serial}");
    std::fs::create_dir(dir.join(&name)).unwrap();
    std::fs::write(dir.join(&name).join("resources.yaml"), content).unwrap();
    std::os::unix::fs::symlink(&name, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join(old)).unwrap();
}

both_modes! {
    async fn the_resources_watch_reloads_on_a_configmap_symlink_swap(mode: Mode) {
        let mock = MockProvider::start();
        let volume = tempfile::tempdir().unwrap();
        let file = configmap_volume(volume.path(), &resources(&mock.base_url(), "gpt-a"));
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .extra(&format!("resources_file: {}\nresources_watch: true\n", file.display()))
                .env("RELOAD_KEY", KEY)
                .metrics(),
        );
        assert_eq!(client::send(gateway.addr(), chat("gpt-a")).await.status, 200);

        let second = resources(&mock.base_url(), "gpt-b");
        configmap_update(volume.path(), 2, &second);
        let page = wait_reloads(&gateway, "success", 1.0).await;
        assert_eq!(config_hash(&page), short_hash(&second));
        assert_eq!(client::send(gateway.addr(), chat("gpt-b")).await.status, 200);
        // The log line is written beside the metric, not before it: wait for it to arrive.
        assert!(
            gateway.wait_for_log("file watch: resources reloaded", std::time::Duration::from_secs(10)),
            "{}",
            gateway.logs()
        );

        configmap_update(volume.path(), 3, BROKEN);
        let page = wait_reloads(&gateway, "failure", 1.0).await;
        assert_eq!(config_hash(&page), short_hash(&second));
        assert_eq!(client::send(gateway.addr(), chat("gpt-b")).await.status, 200);

        // Events that leave the file's content as it is reload nothing: a stray file in the
        // folder, then a swap to the content already in force, then one real change.
        std::fs::write(volume.path().join("unrelated"), "x").unwrap();
        configmap_update(volume.path(), 4, &second);
        let third = resources(&mock.base_url(), "gpt-c");
        configmap_update(volume.path(), 5, &third);
        let page = wait_reloads(&gateway, "success", 2.0).await;
        assert_eq!(config_hash(&page), short_hash(&third));
        assert_eq!(sample(&page, "aisix_config_reloads_total", &[("result", "success")]), 2.0, "{}", gateway.logs());
        assert_eq!(sample(&page, "aisix_config_reloads_total", &[("result", "failure")]), 1.0);
    }
}

both_modes! {
    async fn a_request_whose_head_arrived_before_a_reload_finishes_on_the_old_snapshot(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(resources(&mock.base_url(), "gpt-a"))
                .env("RELOAD_KEY", KEY)
                .metrics(),
        );
        // The head arrives now; the body only after the reload that removes the model.
        let body = r#"{"model":"gpt-a","messages":[]}"#;
        let mut stream = std::net::TcpStream::connect(gateway.addr()).unwrap();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        // The request is being read once the gateway counts it in flight.
        let mut in_flight = false;
        for _ in 0..250 {
            let page = scrape(&gateway).await;
            if sample(&page, "aisix_requests_in_flight", &[("endpoint", "chat_completions")]) >= 1.0 {
                in_flight = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(in_flight, "{}", gateway.logs());

        std::fs::write(gateway.dir().join("resources.yaml"), resources(&mock.base_url(), "gpt-b")).unwrap();
        gateway.signal(libc::SIGHUP);
        wait_reloads(&gateway, "success", 1.0).await;
        assert_eq!(client::send(gateway.addr(), chat("gpt-a")).await.status, 404);

        stream.write_all(body.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert_eq!(mock.last_request().unwrap().body_json().unwrap()["model"], "upstream-gpt-a");
    }
}

both_modes! {
    async fn sighup_rereads_the_tls_pair_for_new_connections(mode: Mode) {
        use aisix_e2e::tls::{client as tls_client, self_signed};
        let certs = tempfile::tempdir().unwrap();
        let (old_pem, cert, key) = self_signed(certs.path());
        let config = GatewayConfig::new(mode).proxy(&format!(
            "  tls:\n    cert_file: {}\n    key_file: {}\n",
            cert.display(),
            key.display()
        ));
        let mut gateway = Gateway::start_listening(&config);
        let addr = gateway.addr();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let handshake = |pem: String| {
            let name = name.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tls_client(&pem, &[b"http/1.1"]).connect(name, tcp).await
            }
        };
        let before = handshake(old_pem.clone()).await.expect("the first pair is served");

        let (new_pem, _, _) = self_signed(certs.path());
        gateway.signal(libc::SIGHUP);
        assert!(gateway.wait_for_log("SIGHUP: reloaded", Duration::from_secs(10)), "{}", gateway.logs());
        handshake(new_pem).await.expect("new connections get the new pair");
        assert!(handshake(old_pem).await.is_err(), "the old pair is no longer served");

        // A connection made before the reload keeps working.
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(before)).await.unwrap();
        tokio::spawn(conn);
        let response = sender.send_request(client::request("GET", "/livez", &[("host", "localhost")], None)).await.unwrap();
        assert_eq!(response.status(), 200);

        // A broken pair is refused and the running one stays.
        std::fs::write(&key, "not a key").unwrap();
        gateway.signal(libc::SIGHUP);
        assert!(gateway.wait_for_log("proxy.tls", Duration::from_secs(10)), "{}", gateway.logs());
        assert!(gateway.try_exit().is_none());
    }
}
