//! The worker's memory budget (`proxy.max_buffered_bytes_per_worker`), in both serving modes: a
//! request whose body would take the worker past it waits for room within its own body
//! deadline, then gets 503 `gateway_overloaded` with `Retry-After`; once the room is given back
//! the next request is served.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, Reply as Mock};

const KEY: &str = "sk-budget-test-1";

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .workers(Some(1))
        .resources(format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: up, provider: openai, api_key: sk-up, api_base: "{}"}}
models:
  - {{display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}}
api_keys:
  - {{display_name: k, key_env: BUDGET_KEY, allowed_models: ["*"]}}
"#,
            mock.base_url()
        ))
        .env("BUDGET_KEY", KEY)
        .proxy("  max_buffered_bytes_per_worker: 1048576\n  request_body_limit_bytes: 1048576\n")
        .extra("downstream:\n  request_body_timeout_secs: 1\n")
}

/// A chat request whose body is about `size` bytes.
fn request(size: usize, id: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let body = serde_json::json!({
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "x".repeat(size)}],
    })
    .to_string();
    client::chat_request(KEY, id, &body)
}

both_modes! {
    async fn a_request_past_the_worker_budget_waits_then_gets_503_with_retry_after(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let addr = gateway.addr();

        // The first request holds 700 KiB of the 1 MiB budget while its answer takes 4 s.
        mock.enqueue(Mock::openai().delay_head(Duration::from_secs(4)));
        let first = tokio::spawn(client::send(addr, request(700 * 1024, "holder")));
        assert!(mock.wait_until_async(Duration::from_secs(10), |m| m.request_count() == 1).await);

        let refused = client::send(addr, request(700 * 1024, "refused")).await;
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert_eq!(refused.json()["error"]["code"], "gateway_overloaded");
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(mock.request_count(), 1, "the refused request never went upstream");

        assert_eq!(first.await.unwrap().status, 200);
        let after = client::send(addr, request(700 * 1024, "after")).await;
        assert_eq!(after.status, 200, "{}", after.text());
    }
}
