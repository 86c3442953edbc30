//! Metrics and logs seen from outside: `/metrics` after real traffic (asserted as deltas between
//! scrapes, and accepted by promtool), the JSON access log, and the knobs that turn them off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::prom::{has_series, promtool_check, sample};
use serde_json::Value;

const KEY: &str = "sk-observed-123456";
const PROVIDER_KEY: &str = "sk-provider-hidden-999";

fn resources(upstream: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: up
    provider: openai
    api_key: {PROVIDER_KEY}
    api_base: {upstream}
models:
  - display_name: gpt-x
    provider: openai
    model_name: upstream-x
    provider_key: up
api_keys:
  - display_name: observer
    key_env: OBSERVED_KEY
    allowed_models: ["*"]
"#
    )
}

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(resources(&mock.base_url()))
        .env("OBSERVED_KEY", KEY)
        .proxy("  request_body_limit_bytes: 2048\n")
}

async fn scrape(gateway: &Gateway) -> String {
    let reply = client::get(gateway.metrics_addr.unwrap(), "/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    reply.text()
}

async fn chat(gateway: &Gateway, key: Option<&str>, body: &str) -> client::Reply {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    client::send(
        gateway.addr(),
        client::request("POST", "/v1/chat/completions", &headers, Some(body)),
    )
    .await
}

both_modes! {
    async fn metrics_count_real_traffic_and_pass_promtool(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock).metrics());
        let before = scrape(&gateway).await;
        let delta = |after: &str, name: &str, labels: &[(&str, &str)]| {
            sample(after, name, labels) - sample(&before, name, labels)
        };

        let ok = r#"{"model":"gpt-x","messages":[{"role":"user","content":"one two three"}]}"#;
        for _ in 0..3 {
            assert_eq!(chat(&gateway, Some(KEY), ok).await.status, 200);
        }
        let stream = chat(&gateway, Some(KEY), r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"x"}]}"#).await;
        assert!(stream.text().ends_with("data: [DONE]\n\n"));
        assert_eq!(chat(&gateway, None, ok).await.status, 401);
        assert_eq!(chat(&gateway, Some(KEY), r#"{"model":"nope","messages":[]}"#).await.status, 404);
        mock.enqueue(Mock::status(500).body("boom"));
        assert_eq!(chat(&gateway, Some(KEY), ok).await.status, 502);
        let big = format!(r#"{{"model":"gpt-x","messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(3000));
        assert_eq!(chat(&gateway, Some(KEY), &big).await.status, 413);
        mock.enqueue(Mock::sse([Frame::chat_delta("upstream-x", "cut")]).disconnect());
        let cut = chat(&gateway, Some(KEY), r#"{"model":"gpt-x","stream":true,"messages":[]}"#).await;
        assert!(cut.text().contains("event: error"));

        let after = scrape(&gateway).await;
        let success = [("endpoint", "chat_completions"), ("model", "gpt-x"), ("provider", "up"), ("status_class", "2xx"), ("outcome", "success")];
        assert_eq!(delta(&after, "aisix_requests_total", &success), 4.0, "{after}");
        let unrouted = [("endpoint", "chat_completions"), ("model", "none"), ("provider", "none"), ("status_class", "4xx"), ("outcome", "client_error")];
        assert_eq!(delta(&after, "aisix_requests_total", &unrouted), 3.0, "401, 404 and 413 happen before routing");
        let failed = [("model", "gpt-x"), ("status_class", "5xx"), ("outcome", "upstream_error")];
        assert_eq!(delta(&after, "aisix_requests_total", &failed), 1.0);
        let cut_labels = [("model", "gpt-x"), ("status_class", "2xx"), ("outcome", "upstream_error")];
        assert_eq!(delta(&after, "aisix_requests_total", &cut_labels), 1.0, "a cut stream is an upstream error");

        // The mock reports 3 prompt tokens for "one two three" and 5 completion tokens.
        let input = delta(&after, "aisix_tokens_total", &[("model", "gpt-x"), ("provider", "up"), ("kind", "input")]);
        let output = delta(&after, "aisix_tokens_total", &[("model", "gpt-x"), ("provider", "up"), ("kind", "output")]);
        assert_eq!(output, 4.0 * 5.0, "{after}");
        assert!(input >= 3.0 * 3.0 + 1.0, "{input}");

        assert_eq!(delta(&after, "aisix_auth_failures_total", &[("reason", "missing")]), 1.0);
        assert_eq!(delta(&after, "aisix_upstream_errors_total", &[("provider", "up"), ("kind", "status")]), 1.0);
        assert_eq!(delta(&after, "aisix_upstream_errors_total", &[("provider", "up"), ("kind", "stream_cut")]), 1.0);
        assert_eq!(delta(&after, "aisix_request_body_rejections_total", &[("endpoint", "chat_completions")]), 1.0);
        assert_eq!(delta(&after, "aisix_upstream_ttft_seconds_count", &[("model", "gpt-x"), ("provider", "up")]), 2.0);
        assert_eq!(delta(&after, "aisix_request_duration_seconds_count", &[("endpoint", "chat_completions"), ("outcome", "success")]), 4.0);
        assert_eq!(delta(&after, "aisix_gateway_overhead_seconds_count", &[("endpoint", "chat_completions")]), 9.0);
        assert_eq!(delta(&after, "aisix_worker_requests_total", &[]), 9.0);
        assert_eq!(sample(&after, "aisix_requests_in_flight", &[]), 0.0);
        let mode_label = if mode.is_thread_per_core() { "thread_per_core" } else { "shared" };
        assert!(has_series(&after, "aisix_build_info", &[("mode", mode_label), ("workers", "2")]), "{after}");
        if mode.is_thread_per_core() {
            for worker in ["tpc-0", "tpc-1"] {
                assert!(has_series(&after, "aisix_worker_requests_total", &[("worker", worker)]), "{after}");
                assert!(has_series(&after, "aisix_worker_connections_open", &[("worker", worker)]), "{after}");
            }
        } else {
            assert!(has_series(&after, "aisix_worker_requests_total", &[("worker", "shared")]), "{after}");
        }
        // Only configured names and fixed enums become label values.
        assert!(!after.contains("model=\"nope\""), "{after}");
        assert!(!after.contains(KEY) && !after.contains(PROVIDER_KEY));
        promtool_check(&after).unwrap_or_else(|e| panic!("promtool rejected /metrics: {e}\n{after}"));
    }
}

both_modes! {
    async fn access_log_lines_are_json_with_every_field_and_no_key_material(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let ok = r#"{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(chat(&gateway, Some(KEY), ok).await.status, 200);
        assert_eq!(chat(&gateway, Some(KEY), r#"{"model":"gpt-x","stream":true,"messages":[]}"#).await.status, 200);
        assert_eq!(chat(&gateway, Some("sk-wrong-key-555"), ok).await.status, 401);
        assert_eq!(client::get(gateway.addr(), "/v1/unknown").await.status, 404);
        assert!(gateway.wait_for_log("\"path\":\"/v1/unknown\"", Duration::from_secs(5)), "{}", gateway.logs());

        let logs = gateway.logs();
        let lines: Vec<Value> = logs
            .lines()
            .filter(|l| l.contains("\"type\":\"access\""))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        assert_eq!(lines.len(), 4, "{logs}");
        for line in &lines {
            for field in [
                "ts", "request_id", "worker", "method", "path", "status", "model", "provider", "api_key",
                "input_tokens", "output_tokens", "latency_ms", "ttft_ms", "upstream_status", "error", "stream",
                "overhead_us",
            ] {
                assert!(line.get(field).is_some(), "{field} missing: {line}");
            }
        }
        // Workers buffer their own lines, so lines from different threads may come out of order.
        let find = |pred: &dyn Fn(&Value) -> bool| lines.iter().find(|l| pred(l)).unwrap_or_else(|| panic!("{logs}"));
        let ok = find(&|l| l["status"] == 200 && l["stream"] == false);
        assert_eq!(ok["model"], "gpt-x");
        assert_eq!(ok["provider"], "up");
        assert_eq!(ok["api_key"], "observer");
        assert_eq!(ok["upstream_status"], 200);
        assert!(ok["input_tokens"].as_u64().unwrap() > 0 && ok["output_tokens"].as_u64().unwrap() > 0);
        assert!(ok["worker"].as_str().unwrap().starts_with(if mode.is_thread_per_core() { "tpc-" } else { "shared" }));
        let stream = find(&|l| l["stream"] == true);
        assert_eq!(stream["status"], 200);
        assert!(stream["ttft_ms"].as_f64().is_some(), "{stream}");
        let rejected = find(&|l| l["status"] == 401);
        assert_eq!(rejected["error"], "invalid_api_key");
        assert_eq!(rejected["api_key"], Value::Null);
        let unknown = find(&|l| l["status"] == 404);
        assert_eq!(unknown["path"], "/v1/unknown");
        for secret in [KEY, PROVIDER_KEY, "sk-wrong-key-555"] {
            assert!(!logs.contains(secret), "{secret} in logs:\n{logs}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_and_metrics_can_be_turned_off() {
    let mock = MockProvider::start();
    let mut gateway = Gateway::start(
        &config(Mode::ThreadPerCore, &mock)
            .extra("")
            .env("AISIX_OBSERVABILITY__ACCESS_LOG", "false")
            .env("AISIX_OBSERVABILITY__METRICS__PROMETHEUS__ENABLED", "false"),
    );
    let reply = chat(&gateway, Some(KEY), r#"{"model":"gpt-x","messages":[]}"#).await;
    assert_eq!(reply.status, 200);
    // A clean exit writes whatever an access log would have buffered: no waiting on its timer.
    gateway.signal(libc::SIGTERM);
    assert_eq!(
        gateway
            .wait_exit(Duration::from_secs(15))
            .and_then(|s| s.code()),
        Some(0)
    );
    let logs = gateway.logs();
    assert!(!logs.contains("\"type\":\"access\""), "{logs}");
    assert!(!logs.contains("metrics listening"), "{logs}");
}

#[test]
fn a_taken_metrics_port_is_a_startup_failure() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let mut gateway = Gateway::spawn(
        &GatewayConfig::new(Mode::ThreadPerCore)
            .metrics()
            .env("AISIX_OBSERVABILITY__METRICS__PROMETHEUS__ADDR", &taken),
    );
    let status = gateway.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(!status.success());
    let logs = gateway.logs();
    assert!(
        logs.contains(&taken) && logs.contains("already in use"),
        "{logs}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Nobody reads the gateway's stderr here: once the pipe is full, access-log lines are dropped
/// and counted, requests keep being served, and SIGTERM still ends the process promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stderr_drops_access_log_lines_but_never_stalls_serving() {
    let mock = MockProvider::start();
    let dir = tempfile::tempdir().unwrap();
    let (proxy_port, metrics_port) = (free_port(), free_port());
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "proxy:\n  addr: 127.0.0.1:{proxy_port}\n  workers: 2\nobservability:\n  metrics:\n    prometheus:\n      addr: 127.0.0.1:{metrics_port}\nresources_file: resources.yaml\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("resources.yaml"),
        resources(&mock.base_url()),
    )
    .unwrap();
    let child = std::process::Command::new(aisix_e2e::gateway::binary())
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .env("OBSERVED_KEY", KEY)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Killed on drop, so a failed assertion leaves no gateway behind.
    let mut child = KillOnDrop(child);
    let proxy: std::net::SocketAddr = format!("127.0.0.1:{proxy_port}").parse().unwrap();
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client::blocking_get_status(proxy, "/readyz") != Some(200) {
        assert!(std::time::Instant::now() < deadline, "gateway not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Each access-log line is ~450 bytes: 12000 lines overflow the pipe, the line being written
    // and both workers' 1 MiB buffers.
    let body = r#"{"model":"gpt-x","messages":[]}"#;
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            tokio::spawn(async move {
                let auth = format!("Bearer {KEY}");
                for _ in 0..1000 {
                    let request = client::request(
                        "POST",
                        "/v1/chat/completions",
                        &[("authorization", &auth)],
                        Some(body),
                    );
                    assert_eq!(client::send(proxy, request).await.status, 200);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // Lines are counted as the requests are accounted, which may trail their responses a little.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = client::get(metrics, "/metrics").await.text();
        if sample(&page, "aisix_access_log_dropped_total", &[]) > 0.0
            || std::time::Instant::now() > deadline
        {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        sample(&page, "aisix_access_log_dropped_total", &[]) > 0.0,
        "{page}"
    );

    let pid = i32::try_from(child.0.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGTERM did not end the process with stderr stuck"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0));
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
