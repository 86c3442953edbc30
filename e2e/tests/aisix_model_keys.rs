//! AISIX's per-model `retries` and `cooldown` drive the gateway as they drive AISIX: a direct
//! model with `retries` is retried on a retryable failure, and one with `cooldown.enabled: false`
//! stays in rotation however often it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::mock::Reply as Mock;
use aisix_e2e::routing::Rig;
use serde_json::json;

/// Direct models on the primary mock with AISIX's per-model keys, and a group over the one
/// whose cooldown is off (a group that finds its only target cooling answers 503).
const MODELS: &str = "  - {display_name: retrying, provider: openai, model_name: up-primary, provider_key: p1, retries: 1}
  - {display_name: uncooled, provider: openai, model_name: up-primary, provider_key: p1, cooldown: {enabled: false}}
  - {display_name: through-uncooled, routing: {targets: [{model: uncooled}]}}
";

both_modes! {
    async fn a_direct_model_with_retries_is_retried_after_a_500(mode: Mode) {
        let rig = Rig::start(mode, MODELS, &[]);
        rig.primary.enqueue(Mock::openai_error(500, "server_error", "boom"));
        let reply = rig.chat("retrying", false, "retried", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.primary.request_count(), 2);
        let line = rig.gateway.access_line("retried");
        assert_eq!(line["attempts"][0]["status"], 500);
        assert_eq!(line["attempts"][1]["status"], 200);
    }
}

both_modes! {
    async fn a_model_with_cooldown_disabled_stays_in_rotation_after_failures(mode: Mode) {
        let rig = Rig::start(mode, MODELS, &[]);
        // Three failures within the window cool a model down (upstream.cooldown_failures).
        for i in 0..3 {
            rig.primary.enqueue(Mock::openai_error(500, "server_error", "boom"));
            let reply = rig.chat("through-uncooled", false, &format!("fail-{i}"), json!({})).await;
            assert_eq!(reply.status, 502, "{}", reply.text());
        }
        let reply = rig.chat("through-uncooled", false, "after", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.primary.request_count(), 4);
    }
}
