//! The gateway's life around requests: draining in-flight work on SIGTERM, the drain deadline,
//! timeouts that must not cut running requests, SIGHUP reloads, and the shipped example config.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use http_body_util::BodyExt;

const KEY: &str = "sk-lifecycle-1";

fn resources(upstream: &str, extra_model: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: up
    provider: openai
    api_base: {upstream}
models:
  - display_name: gpt-x
    provider: openai
    model_name: upstream-x
    provider_key: up
{extra_model}api_keys:
  - display_name: k
    key_env: LIFECYCLE_KEY
    allowed_models: ["*"]
"#
    )
}

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(resources(&mock.base_url(), ""))
        .env("LIFECYCLE_KEY", KEY)
}

fn chat_request(model: &str, stream: bool) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let auth = format!("Bearer {KEY}");
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        Some(&format!(
            r#"{{"model":"{model}","stream":{stream},"messages":[]}}"#
        )),
    )
}

both_modes! {
    async fn sigterm_lets_a_slow_request_finish_then_exits_zero(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(mode, &mock).extra("shutdown:\n  drain_timeout_secs: 20\n"));
        mock.enqueue(Mock::openai().delay_head(Duration::from_millis(1500)));
        let addr = gateway.addr();
        let in_flight = tokio::spawn(async move { client::send(addr, chat_request("gpt-x", false)).await });
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);
        gateway.signal(libc::SIGTERM);
        let reply = in_flight.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["object"], "chat.completion");
        let status = gateway.wait_exit(Duration::from_secs(15)).expect("exits after the drain");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
    }
}

both_modes! {
    async fn sigterm_lets_a_running_stream_finish_with_done(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(mode, &mock).extra("shutdown:\n  drain_timeout_secs: 20\n"));
        let frames = (0..6).map(|i| Frame::chat_delta("upstream-x", &format!("p{i} ")).after(Duration::from_millis(250)));
        mock.enqueue(Mock::sse(frames));
        let response = client::send_streaming(gateway.addr(), chat_request("gpt-x", true)).await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("p0"));
        gateway.signal(libc::SIGTERM);
        assert!(gateway.wait_for_log("draining", Duration::from_secs(5)));
        let rest = body.collect().await.unwrap().to_bytes();
        let rest = String::from_utf8_lossy(&rest);
        assert!(rest.contains("p5") && rest.ends_with("data: [DONE]\n\n"), "{rest}");
        let status = gateway.wait_exit(Duration::from_secs(15)).expect("exits after the stream");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
    }
}

both_modes! {
    async fn the_drain_deadline_cuts_what_is_still_running_and_exits_zero(mode: Mode) {
        let mock = MockProvider::start();
        let mut gateway = Gateway::start(&config(mode, &mock).extra("shutdown:\n  drain_timeout_secs: 1\n"));
        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "forever")]).hang());
        let response = client::send_streaming(gateway.addr(), chat_request("gpt-x", true)).await;
        let mut body = response.into_body();
        body.frame().await.unwrap().unwrap();
        gateway.signal(libc::SIGTERM);
        let status = gateway.wait_exit(Duration::from_secs(10)).expect("exits at the drain deadline");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
        assert!(gateway.logs().contains("drain deadline reached"), "{}", gateway.logs());
        // The client's stream ends without [DONE].
        let rest = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"));
    }
}

both_modes! {
    async fn timeouts_do_not_cut_a_slow_request_in_flight(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &config(mode, &mock).extra("downstream:\n  header_read_timeout_secs: 1\n  idle_timeout_secs: 1\n"),
        );
        mock.enqueue(Mock::openai().delay_head(Duration::from_millis(3000)));
        let reply = client::send(gateway.addr(), chat_request("gpt-x", false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

both_modes! {
    async fn sighup_reloads_resources_and_a_broken_file_is_refused(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let resources_path = gateway.dir().join("resources.yaml");
        let reply = client::send(gateway.addr(), chat_request("gpt-new", false)).await;
        assert_eq!(reply.status, 404);

        let new_model = "  - display_name: gpt-new\n    provider: openai\n    model_name: upstream-new\n    provider_key: up\n";
        std::fs::write(&resources_path, resources(&mock.base_url(), new_model)).unwrap();
        gateway.signal(libc::SIGHUP);
        assert!(gateway.wait_for_log("resources reloaded", Duration::from_secs(5)), "{}", gateway.logs());
        // Every worker picks the new resources up; several requests land on several workers.
        for _ in 0..6 {
            let reply = client::send(gateway.addr(), chat_request("gpt-new", false)).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
        assert_eq!(mock.last_request().unwrap().body_json().unwrap()["model"], "upstream-new");

        std::fs::write(&resources_path, "_format_version: \"1\"\nmodels: [{display_name: broken}]\n").unwrap();
        gateway.signal(libc::SIGHUP);
        assert!(gateway.wait_for_log("keeping the running resources", Duration::from_secs(5)), "{}", gateway.logs());
        assert!(gateway.logs().contains("models[0].model_name"), "{}", gateway.logs());
        let reply = client::send(gateway.addr(), chat_request("gpt-new", false)).await;
        assert_eq!(reply.status, 200);
    }
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The README's run command serves the shipped example config: a chat completion for `demo`
/// with the demo key, offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_answers_a_demo_chat_completion() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AISIX_PROXY__ADDR".to_owned(), "127.0.0.1:0".to_owned()),
        (
            "AISIX_OBSERVABILITY__METRICS__PROMETHEUS__ADDR".to_owned(),
            "127.0.0.1:0".to_owned(),
        ),
    ];
    let mut gateway =
        Gateway::spawn_with(&workspace().join("config.example.yaml"), &env, None, dir);
    assert!(
        gateway.wait_for_log("listening addr=", Duration::from_secs(30)),
        "{}",
        gateway.logs()
    );
    let logs = gateway.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("listening addr="))
        .unwrap();
    let addr: std::net::SocketAddr = line
        .split("addr=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let reply = client::send(
        addr,
        client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-aisix-demo")],
            Some(r#"{"model":"demo","messages":[{"role":"user","content":"Hello"}]}"#),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        !reply.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    gateway.signal(libc::SIGTERM);
    assert_eq!(
        gateway.wait_exit(Duration::from_secs(10)).unwrap().code(),
        Some(0)
    );
}

#[test]
fn validate_accepts_the_example_and_reports_every_error_with_its_path() {
    let bin = aisix_e2e::gateway::binary();
    let ok = std::process::Command::new(bin)
        .args(["validate", "--config"])
        .arg(workspace().join("config.example.yaml"))
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "proxy:\n  workers: 0\n  bogus: 1\nresources_file: r.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("r.yaml"),
        "_format_version: \"1\"\nmodels:\n  - display_name: m\n    provider: openai\n    model_name: x\n    provider_key: nope\n",
    )
    .unwrap();
    let bad = std::process::Command::new(bin)
        .args(["validate", "-c"])
        .arg(dir.path().join("config.yaml"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    // The bootstrap file is checked first; once it loads, the resources file is checked too.
    assert!(
        stderr.contains("proxy.workers") && stderr.contains("proxy.bogus"),
        "{stderr}"
    );

    std::fs::write(dir.path().join("config.yaml"), "resources_file: r.yaml\n").unwrap();
    let bad = std::process::Command::new(bin)
        .args(["validate", "-c"])
        .arg(dir.path().join("config.yaml"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("models[0].provider_key"), "{stderr}");
}

#[test]
fn version_flag_prints_the_version() {
    let out = std::process::Command::new(aisix_e2e::gateway::binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("aisix {}", env!("CARGO_PKG_VERSION"))
    );
}
