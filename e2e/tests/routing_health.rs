//! A direct model's health from the whole outcome of every call: a failure after the answer's
//! head (a stream cut, stalled, broken or reporting an error; a whole answer cut off) cools it
//! down like one before; a probe that is refused gives its place back; calls already under way
//! when a cooldown started do not start it again; a group's own shorter deadline does not count
//! against the model; and `least_latency` learns from failures and starts new targets at a
//! prior rather than at zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::mock::{Frame, Reply as Mock};
use aisix_e2e::prom::{promtool_check, sample};
use aisix_e2e::routing::{KEY, Rig, streamed};
use http_body_util::BodyExt;
use serde_json::json;

/// `chat`: `primary`, then `backup`, with these entry-level keys and routing keys.
fn group(entry: &str, routing: &str) -> String {
    format!(
        "  - display_name: chat\n{entry}    routing:\n      targets: [{{model: primary}}, {{model: backup}}]\n{routing}"
    )
}

const UP: &str = "up-primary";

fn served_by(reply: &aisix_e2e::client::Reply) -> &str {
    reply.header("x-aisix-served-by").unwrap_or_default()
}

async fn cooldowns(rig: &Rig) -> f64 {
    sample(
        &rig.scrape().await,
        "aisix_cooldowns_total",
        &[("target", "primary")],
    )
}

/// Waits past the rig's one-second cooldown.
async fn cooldown_over() {
    tokio::time::sleep(Duration::from_millis(1300)).await;
}

both_modes! {
    async fn failures_after_the_head_cool_the_target_down(mode: Mode) {
        let rig = Rig::start(
            mode,
            &group("", ""),
            &[("AISIX_UPSTREAM__COOLDOWN_FAILURES", "1"), ("AISIX_UPSTREAM__STREAM_IDLE_TIMEOUT_MS", "600")],
        );
        let faults: [(&str, bool, Mock); 5] = [
            ("cut", true, Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel")]).disconnect()),
            ("stalled", true, Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel")]).hang()),
            ("malformed", true, Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel"), Frame::malformed()])),
            (
                "error-event",
                true,
                Mock::sse([
                    Frame::chat_role(UP),
                    Frame::chat_delta(UP, "Hel"),
                    Frame::raw("data: {\"error\":{\"message\":\"overloaded\"}}\n\n"),
                ]),
            ),
            (
                "cut-body",
                false,
                Mock::openai().body("{\"id\":\"chatcmpl-1\",\"choices\":[").disconnect(),
            ),
        ];
        for (i, (fault, stream, reply)) in faults.into_iter().enumerate() {
            let before = rig.primary.request_count();
            rig.primary.enqueue(reply);
            if stream {
                let failed = rig.chat("chat", stream, fault, json!({})).await;
                assert_eq!(served_by(&failed), "primary", "{fault}");
                let text = failed.text();
                assert!(streamed(&text).error.is_some(), "{fault}: {text}");
            } else {
                let body = json!({"model": "chat", "messages": [{"role": "user", "content": "Hi"}]});
                let request = client::chat_request(KEY, fault, &body.to_string());
                let response = client::send_streaming(rig.gateway.addr(), request).await;
                assert_eq!(response.headers()["x-aisix-served-by"], "primary");
                assert!(response.into_body().collect().await.is_err(), "the client sees the cut");
            }
            // The failure cooled the target: the next request goes to the backup unasked.
            let next = rig.chat("chat", stream, &format!("{fault}-next"), json!({})).await;
            assert_eq!((next.status.as_u16(), served_by(&next)), (200, "backup"), "{fault}");
            assert_eq!(rig.primary.request_count(), before + 1, "{fault}: a cooling target is skipped");
            assert_eq!(cooldowns(&rig).await, (i + 1) as f64, "{fault}");
            let page = rig.scrape().await;
            assert_eq!(sample(&page, "aisix_target_state", &[("target", "primary")]), 1.0, "{page}");
            assert_eq!(sample(&page, "aisix_target_state", &[("target", "backup")]), 0.0, "{page}");
            cooldown_over().await;
        }
        // After its last cooldown, the probe answers and the target is back.
        let reply = rig.chat("chat", true, "recovered", json!({})).await;
        assert_eq!(served_by(&reply), "primary");
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_targets_cooling", &[]), 0.0);
        assert_eq!(sample(&page, "aisix_target_state", &[("target", "primary")]), 0.0, "{page}");
        assert!(page.contains("aisix_target_state{target=\"backup-vllm\"} 0"), "every model from the start: {page}");
        promtool_check(&page).unwrap();
    }
}

both_modes! {
    async fn a_probe_that_is_refused_gives_the_target_back_at_once(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[("AISIX_UPSTREAM__COOLDOWN_FAILURES", "1")]);
        rig.primary.enqueue(Mock::openai_error(500, "server_error", "boom"));
        let reply = rig.chat("chat", false, "trip", json!({})).await;
        assert_eq!(served_by(&reply), "backup");
        cooldown_over().await;
        // The probe: the target answers, with a 400 that is the client's own.
        rig.primary.enqueue(Mock::openai_error(400, "invalid_request_error", "bad"));
        let probe = rig.chat("chat", false, "probe", json!({})).await;
        assert_eq!(probe.status, 400, "{}", probe.text());
        let reply = rig.chat("chat", false, "after-probe", json!({})).await;
        assert_eq!(served_by(&reply), "primary", "the target answered its probe");
        assert_eq!(cooldowns(&rig).await, 1.0);
    }
}

both_modes! {
    async fn calls_under_way_when_a_cooldown_starts_do_not_start_it_again(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[("AISIX_UPSTREAM__COOLDOWN_FAILURES", "1")]);
        // Three calls reach the target together; each fails after a while.
        for _ in 0..3 {
            rig.primary.enqueue(
                Mock::openai_error(500, "server_error", "boom").delay_head(Duration::from_millis(300)),
            );
        }
        let (a, b, c) = tokio::join!(
            rig.chat("chat", false, "straggler-1", json!({})),
            rig.chat("chat", false, "straggler-2", json!({})),
            rig.chat("chat", false, "straggler-3", json!({})),
        );
        for reply in [&a, &b, &c] {
            assert_eq!(served_by(reply), "backup", "{}", reply.text());
        }
        assert_eq!(rig.primary.request_count(), 3);
        assert_eq!(cooldowns(&rig).await, 1.0, "one trip, counted once");
        // The cooldown runs from the first failure, not the last: one second after it the
        // probe goes through.
        cooldown_over().await;
        let reply = rig.chat("chat", false, "probe", json!({})).await;
        assert_eq!(served_by(&reply), "primary");
    }
}

both_modes! {
    async fn a_group_s_short_first_token_timeout_does_not_cool_the_model_for_others(mode: Mode) {
        let groups = format!(
            "{}  - display_name: patient\n    routing:\n      targets: [{{model: primary}}, {{model: backup}}]\n",
            group("    first_token_timeout: 300\n", "")
        );
        let rig = Rig::start(mode, &groups, &[]);
        // Slower than the group allows, well within the model's own 3 s.
        for i in 0..4 {
            rig.primary.enqueue(Mock::openai().delay_head(Duration::from_millis(1000)));
            let reply = rig.chat("chat", false, &format!("impatient-{i}"), json!({})).await;
            assert_eq!(served_by(&reply), "backup");
        }
        assert_eq!(rig.primary.request_count(), 4, "never skipped");
        assert_eq!(cooldowns(&rig).await, 0.0);
        // Another group, with the model's own deadline, still gets it.
        let reply = rig.chat("patient", false, "patient", json!({})).await;
        assert_eq!(served_by(&reply), "primary");
    }
}

both_modes! {
    async fn least_latency_starts_new_targets_at_a_prior_and_learns_from_timeouts(mode: Mode) {
        let groups = "  - display_name: fast\n    routing:\n      strategy: least_latency\n      targets: [{model: primary}, {model: backup}]\n";
        let rig = Rig::start(mode, groups, &[("AISIX_UPSTREAM__FIRST_TOKEN_TIMEOUT_MS", "1000")]);
        // Measured fast, the primary stays ahead of a backup never measured.
        for i in 0..3 {
            let reply = rig.chat("fast", false, &format!("measured-{i}"), json!({})).await;
            assert_eq!(served_by(&reply), "primary", "request {i}");
        }
        // The primary times out; the backup answers, slower than the primary used to.
        rig.primary.enqueue(Mock::openai().delay_head(Duration::from_secs(5)));
        rig.backup.set_default(Mock::openai().delay_head(Duration::from_millis(100)));
        let reply = rig.chat("fast", false, "timed-out", json!({})).await;
        assert_eq!(served_by(&reply), "backup");
        // The timeout weighs more than the backup's slowness.
        let reply = rig.chat("fast", false, "after-timeout", json!({})).await;
        assert_eq!(served_by(&reply), "backup");
        assert_eq!(rig.primary.request_count(), 4);
    }
}

both_modes! {
    async fn a_refused_provider_key_falls_over_and_cools_its_models_naming_the_key(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[("AISIX_UPSTREAM__KEY_COOLDOWN_MS", "1000")]);
        let refusals = [
            (
                "revoked",
                Mock::status(401).json(json!({"error": {"message": "Incorrect API key provided: sk-p1-***", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})),
                "credentials",
            ),
            (
                "forbidden",
                Mock::status(403).json(json!({"error": {"message": "You are not allowed to use this model", "type": "invalid_request_error", "param": null, "code": "model_not_allowed"}})),
                "credentials",
            ),
            (
                "no-quota",
                Mock::status(429).json(json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}})),
                "quota",
            ),
        ];
        for (i, (id, reply, reason)) in refusals.into_iter().enumerate() {
            rig.primary.enqueue(reply);
            let reply = rig.chat("chat", false, id, json!({})).await;
            assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"), "{id}: {}", reply.text());
            // Not retried on the same key, and cooling: the next request skips it.
            assert_eq!(rig.primary.request_count(), i + 1, "{id}");
            let next = rig.chat("chat", false, &format!("{id}-next"), json!({})).await;
            assert_eq!(served_by(&next), "backup", "{id}");
            assert_eq!(rig.primary.request_count(), i + 1, "{id}");
            let page = rig.scrape().await;
            assert_eq!(
                sample(&page, "aisix_provider_key_refusals_total", &[("provider", "p1"), ("reason", reason)]),
                if reason == "quota" { 1.0 } else { i as f64 + 1.0 },
                "{page}"
            );
            assert_eq!(cooldowns(&rig).await, (i + 1) as f64, "{id}");
            cooldown_over().await;
        }
        let logs = rig.gateway.logs();
        assert!(logs.contains("refused the provider key") && logs.contains("p1"), "{logs}");
        assert!(!logs.contains("sk-p1-secret"), "the key's value is never logged");
        // A direct request to the model gets the refusal itself.
        rig.primary.enqueue(Mock::status(401).json(json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})));
        let reply = rig.chat("primary", false, "direct", json!({})).await;
        assert_eq!(reply.status, 401);
    }
}
