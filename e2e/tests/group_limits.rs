//! A direct model's own `rate_limit` holds inside a group too, in both serving modes: the
//! operator's provider quota on `primary` is never passed because clients name the group. A
//! target its limits refuse is passed over like a cooling one, and the group answers from the
//! next; when every target refuses, the client gets the 429.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::gateway::Gateway;
use aisix_e2e::limits::{align, answer};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::routing::{self, KEY};
use serde_json::json;

fn resources(primary: &str, backup: &str, backup_limit: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p1, provider: openai, api_key: sk-p1-secret, api_base: "{primary}"}}
  - {{display_name: p2, provider: openai, api_key: sk-p2-secret, api_base: "{backup}"}}
models:
  - {{display_name: primary, provider: openai, model_name: up-primary, provider_key: p1, rate_limit: {{rpm: 2}}}}
  - {{display_name: backup, provider: openai, model_name: up-backup, provider_key: p2{backup_limit}}}
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

async fn chat(gateway: &Gateway) -> aisix_e2e::client::Reply {
    let body =
        json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let request = aisix_e2e::client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(&body.to_string()),
    );
    aisix_e2e::client::send(gateway.addr(), request).await
}

both_modes! {
    async fn a_target_its_own_rate_limit_refuses_is_passed_over(mode: Mode) {
        let (primary, backup) = (MockProvider::start(), MockProvider::start());
        primary.set_default(answer(7, 3));
        backup.set_default(answer(7, 3));
        let gateway = Gateway::start(&routing::config(
            mode,
            resources(&primary.base_url(), &backup.base_url(), ""),
        ));
        align(&[&gateway], 0, 60_000, 1_000).await;

        for _ in 0..2 {
            let reply = chat(&gateway).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.header("x-aisix-served-by"), Some("primary"));
        }
        // primary's rpm is spent: the group answers from backup, and primary is not called.
        let reply = chat(&gateway).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("backup"));
        assert_eq!(primary.request_count(), 2);
        assert_eq!(backup.request_count(), 1);
    }
}

both_modes! {
    async fn a_group_whose_every_target_is_refused_by_its_limits_answers_429(mode: Mode) {
        let (primary, backup) = (MockProvider::start(), MockProvider::start());
        primary.set_default(answer(7, 3));
        backup.set_default(answer(7, 3));
        let gateway = Gateway::start(&routing::config(
            mode,
            resources(&primary.base_url(), &backup.base_url(), ", rate_limit: {rpm: 1}"),
        ));
        align(&[&gateway], 0, 60_000, 1_000).await;

        for served_by in ["primary", "primary", "backup"] {
            let reply = chat(&gateway).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.header("x-aisix-served-by"), Some(served_by));
        }
        let reply = chat(&gateway).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
        assert_eq!(primary.request_count() + backup.request_count(), 3);
    }
}
