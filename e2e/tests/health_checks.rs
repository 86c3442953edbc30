//! Active health checks of provider keys, in both serving modes: a key whose model list fails
//! cools its models down before any client meets the failure, the group then answers from the
//! backup without calling it, and once the list answers again the models come back. The
//! checks ask the provider's real model-list path with the key's credential.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::gateway::Gateway;
use aisix_e2e::limits::answer;
use aisix_e2e::mock::{MockProvider, Reply as Mock};
use aisix_e2e::prom::sample;
use aisix_e2e::routing::{self, KEY};
use serde_json::json;

fn resources(primary: &str, backup: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p1, provider: openai, api_key: sk-p1-secret, api_base: "{primary}", health_check: {{interval: 200ms, timeout: 1s}}}}
  - {{display_name: p2, provider: openai, api_key: sk-p2-secret, api_base: "{backup}"}}
models:
  - {{display_name: primary, provider: openai, model_name: up-primary, provider_key: p1}}
  - {{display_name: backup, provider: openai, model_name: up-backup, provider_key: p2}}
  - display_name: chat
    routing:
      targets:
        - {{model: primary, priority: 1}}
        - {{model: backup}}
api_keys:
  - {{display_name: team, key_env: ROUTING_KEY, allowed_models: ["*"]}}
"#
    )
}

async fn state(gateway: &Gateway, target: &str) -> f64 {
    let page = aisix_e2e::client::get(gateway.metrics_addr.unwrap(), "/metrics")
        .await
        .text();
    sample(&page, "aisix_target_state", &[("target", target)])
}

async fn until_state(gateway: &Gateway, target: &str, want: f64, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while state(gateway, target).await != want {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

both_modes! {
    async fn a_key_whose_health_check_fails_is_cooled_before_a_client_meets_it(mode: Mode) {
        let (primary, backup) = (MockProvider::start(), MockProvider::start());
        primary.set_default(Mock::openai_error(503, "server_error", "down"));
        backup.set_default(answer(7, 3));
        let gateway = Gateway::start(&routing::config(
            mode,
            resources(&primary.base_url(), &backup.base_url()),
        ));

        until_state(&gateway, "primary", 1.0, "the failing checks never cooled primary").await;
        let checks = primary.requests();
        assert!(checks.len() >= 3, "{}", checks.len());
        for check in &checks {
            assert_eq!((check.method.as_str(), check.path.as_str()), ("GET", "/v1/models"));
            assert_eq!(check.header("authorization"), Some("Bearer sk-p1-secret"));
        }
        assert_eq!(state(&gateway, "backup").await, 0.0, "a key without a check is left alone");

        // The group skips the cooling model: no client request reaches it.
        let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
        let request = aisix_e2e::client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {KEY}"))],
            Some(&body.to_string()),
        );
        let reply = aisix_e2e::client::send(gateway.addr(), request).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("backup"));
        assert!(primary.requests().iter().all(|r| r.method == "GET"), "no chat request reached primary");

        // The model list answers again: the next due check after the cooldown reopens it.
        primary.set_default(Mock::status(200).json(json!({"object": "list", "data": []})));
        until_state(&gateway, "primary", 0.0, "a good check never reopened primary").await;
    }
}
