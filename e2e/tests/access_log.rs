//! The access log keeps up with a burst: every request's line reaches stderr (read here by the
//! harness) and `aisix_access_log_dropped_total` stays 0. A count, not a timing: lines are
//! dropped only when a worker's buffer fills before the writer empties it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Connection};
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::{MockProvider, Pacing};
use aisix_e2e::prom::sample;

const KEY: &str = "sk-burst-0123456789";
const CONNECTIONS: usize = 8;
const PER_CONNECTION: usize = 250;

fn resources(upstream: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: up, provider: openai, api_key: sk-up, api_base: "{upstream}"}}
models:
  - {{display_name: m, provider: openai, model_name: up-m, provider_key: up}}
api_keys:
  - {{display_name: burst, key_env: BURST_KEY, allowed_models: ["*"]}}
"#
    )
}

/// Access-log lines in the log so far.
fn access_lines(gateway: &Gateway) -> usize {
    gateway.logs().matches("\"type\":\"access\"").count()
}

both_modes! {
    async fn a_burst_of_requests_logs_every_line_and_drops_none(mode: Mode) {
        // The mock's fast path: precomputed answers, nothing recorded, so the burst costs the
        // test process little.
        let pacing = Pacing { ttft: Duration::ZERO, frames: 1, gap: Duration::ZERO, burst: false };
        let mock = MockProvider::builder().fast(pacing).start().unwrap();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(resources(&mock.base_url()))
                .env("BURST_KEY", KEY)
                .metrics(),
        );
        let addr = gateway.addr();
        let burst: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                tokio::spawn(async move {
                    let auth = format!("Bearer {KEY}");
                    let mut connection = Connection::open(addr).await;
                    for _ in 0..PER_CONNECTION {
                        let request = client::request(
                            "POST",
                            "/v1/chat/completions",
                            &[("authorization", &auth)],
                            Some(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
                        );
                        assert_eq!(connection.send(request).await.status, 200);
                    }
                })
            })
            .collect();
        for task in burst {
            task.await.unwrap();
        }

        let requests = CONNECTIONS * PER_CONNECTION;
        let deadline = Instant::now() + Duration::from_secs(30);
        while access_lines(&gateway) < requests && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(access_lines(&gateway), requests, "one access-log line per request");

        let page = client::get(gateway.metrics_addr.unwrap(), "/metrics").await.text();
        assert!(
            page.lines().any(|l| l == "aisix_access_log_dropped_total 0"),
            "the counter is reported, at 0:\n{page}"
        );
        assert_eq!(sample(&page, "aisix_access_log_dropped_total", &[]), 0.0);
    }
}
