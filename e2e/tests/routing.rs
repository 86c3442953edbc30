//! Model groups in front of failing providers, one test per fault: what can be rescued is
//! answered by a direct model that could answer (named in `model` and `x-aisix-served-by`,
//! with its usage), what cannot ends with a clean error, and the providers' request logs show
//! no retry of a 400 or of a silent target and no retry storm during an outage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::mock::Reply as Mock;
use aisix_e2e::prom::{promtool_check, sample};
use aisix_e2e::routing::{Rig, wait};
use serde_json::{Value, json};

/// `chat`: `primary` first, `backup` after; `extra` adds routing keys (indented six spaces).
fn failover(extra: &str) -> String {
    format!(
        "  - display_name: chat\n    routing:\n      targets:\n        - {{model: primary, priority: 1}}\n        - {{model: backup}}\n{extra}"
    )
}

/// `solo`: `primary` alone.
const SOLO: &str = "  - {display_name: solo, routing: {targets: [{model: primary}]}}\n";

fn served_by(reply: &aisix_e2e::client::Reply) -> &str {
    reply.header("x-aisix-served-by").unwrap_or_default()
}

both_modes! {
    async fn a_429_is_retried_after_its_retry_after_or_falls_over(mode: Mode) {
        let groups = format!(
            "{}  - display_name: patient\n    routing:\n      targets: [{{model: primary}}, {{model: backup}}]\n      retries: 1\n      retry_on_429: true\n",
            failover("")
        );
        let rig = Rig::start(mode, &groups, &[]);

        // With retry_on_429, the same target again once its Retry-After has passed.
        rig.primary.enqueue(Mock::openai_error(429, "rate_limit_error", "slow down").header("retry-after", "1"));
        let reply = rig.chat("patient", false, "after-1s", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(served_by(&reply), "primary");
        let seen = rig.primary.requests();
        assert_eq!(seen.len(), 2);
        assert!(
            seen[1].received_at.duration_since(seen[0].received_at) >= Duration::from_millis(900),
            "the retry came before the Retry-After"
        );
        assert_eq!(rig.backup.request_count(), 0);

        // Without Retry-After, after the backoff.
        rig.primary.enqueue(Mock::openai_error(429, "rate_limit_error", "slow down"));
        let reply = rig.chat("patient", false, "backoff", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "primary"));
        assert_eq!(rig.primary.request_count(), 4);

        // Without retry_on_429, on to the next target at once.
        rig.primary.enqueue(Mock::openai_error(429, "rate_limit_error", "slow down").header("retry-after", "1"));
        let reply = rig.chat("chat", false, "falls-over", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"));
        assert_eq!(reply.json()["model"], "backup", "the answer names the direct model");
        assert_eq!(rig.primary.request_count(), 5);
        let line = rig.gateway.access_line("falls-over");
        assert_eq!(line["group"], "chat");
        assert_eq!(line["model"], "backup");
        assert_eq!(line["provider"], "p2");
        let attempts: Vec<(Value, Value)> = line["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["target"].clone(), a["status"].clone()))
            .collect();
        assert_eq!(attempts, [(json!("primary"), json!(429)), (json!("backup"), json!(200))]);
    }
}

both_modes! {
    async fn a_429_that_persists_cools_the_target_and_ends_as_429_then_503(mode: Mode) {
        let groups = format!("{}{SOLO}", failover(""));
        let rig = Rig::start(mode, &groups, &[("AISIX_UPSTREAM__COOLDOWN_MS", "30000")]);
        rig.primary.set_default(Mock::openai_error(429, "rate_limit_error", "quota").header("retry-after", "2"));

        // Alone, the target's 429 is the answer, Retry-After and all.
        let reply = rig.chat("solo", false, "solo-1", json!({})).await;
        assert_eq!(reply.status, 429);
        assert_eq!(reply.header("retry-after"), Some("2"));
        assert_eq!(reply.json()["error"]["message"], "quota");
        // In a group, the backup answers; the third failure in the window cools primary down.
        for i in 0..2 {
            let reply = rig.chat("chat", false, &format!("group-{i}"), json!({})).await;
            assert_eq!(served_by(&reply), "backup");
        }
        assert_eq!(rig.primary.request_count(), 3);
        for i in 0..3 {
            let reply = rig.chat("chat", false, &format!("cooling-{i}"), json!({})).await;
            assert_eq!(served_by(&reply), "backup");
        }
        assert_eq!(rig.primary.request_count(), 3, "a cooling target is skipped");

        // Every target of `solo` is cooling: 503 without calling it, retry when it ends.
        let reply = rig.chat("solo", false, "all-cooling", json!({})).await;
        assert_eq!(reply.status, 503, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "all_candidates_unavailable");
        let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=30).contains(&retry_after), "{retry_after}");
        assert_eq!(rig.primary.request_count(), 3);

        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_cooldowns_total", &[("target", "primary")]), 1.0, "{page}");
        assert_eq!(sample(&page, "aisix_targets_cooling", &[]), 1.0, "{page}");
        assert_eq!(
            sample(&page, "aisix_upstream_attempts_total", &[("model", "chat"), ("target", "primary"), ("result", "rate_limited")]),
            2.0,
            "{page}"
        );
        assert_eq!(
            sample(&page, "aisix_fallbacks_total", &[("model", "chat"), ("from", "primary"), ("to", "backup")]),
            2.0,
            "{page}"
        );
        assert_eq!(
            sample(&page, "aisix_requests_total", &[("model", "solo"), ("status_class", "5xx")]),
            1.0,
            "the refused request is counted against the group: {page}"
        );
        promtool_check(&page).unwrap();
    }
}

both_modes! {
    async fn a_500_once_is_retried_on_the_same_target(mode: Mode) {
        let rig = Rig::start(mode, &failover("      retries: 1\n"), &[]);
        rig.primary.enqueue(Mock::openai_error(500, "server_error", "boom"));
        let reply = rig.chat("chat", false, "once", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(served_by(&reply), "primary");
        assert_eq!(reply.json()["model"], "primary");
        assert_eq!(reply.json()["usage"]["completion_tokens"], 5);
        assert_eq!((rig.primary.request_count(), rig.backup.request_count()), (2, 0));
        let line = rig.gateway.access_line("once");
        assert_eq!(line["attempts"][0]["status"], 500);
        assert_eq!(line["attempts"][0]["error"], "upstream_error");
        assert_eq!(line["attempts"][1]["status"], 200);
        assert_eq!(line["output_tokens"], 5);
    }
}

both_modes! {
    async fn a_503_for_a_minute_is_ridden_out_without_a_retry_storm_and_the_primary_comes_back(mode: Mode) {
        // Scaled down: a three-second outage against a one-second cooldown.
        let rig = Rig::start(mode, &failover("      retries: 2\n"), &[]);
        rig.primary.set_default(Mock::openai_error(503, "overloaded", "down"));
        let outage_started = std::time::Instant::now();
        let mut sent = 0;
        while outage_started.elapsed() < Duration::from_secs(3) {
            let reply = rig.chat("chat", false, &format!("outage-{sent}"), json!({})).await;
            assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"), "{}", reply.text());
            sent += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let during = rig.primary.request_count();
        assert!(sent >= 20, "only {sent} requests in the outage");
        // Three to trip the cooldown (retries included), then one probe per cooldown second.
        assert!(during <= 3 + 6, "{during} calls to a target that was down, for {sent} requests");

        rig.primary.clear_default();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let reply = rig.chat("chat", false, "recovered", json!({})).await;
        assert_eq!(served_by(&reply), "primary", "the probe after the cooldown found it healthy");
        let reply = rig.chat("chat", false, "recovered-2", json!({})).await;
        assert_eq!(served_by(&reply), "primary");
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_targets_cooling", &[]), 0.0, "{page}");
    }
}

both_modes! {
    async fn a_primary_that_flaps_is_rescued_every_time(mode: Mode) {
        let rig = Rig::start(mode, &failover(""), &[("AISIX_UPSTREAM__COOLDOWN_FAILURES", "100")]);
        for n in 1..=10 {
            if n % 2 == 1 {
                rig.primary.reply_at(n, Mock::openai_error(503, "overloaded", "flap"));
            }
        }
        for i in 0..10 {
            let reply = rig.chat("chat", false, &format!("flap-{i}"), json!({})).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            let expected = if i % 2 == 0 { "backup" } else { "primary" };
            assert_eq!(served_by(&reply), expected, "request {i}");
            assert_eq!(reply.json()["model"], expected);
        }
        assert_eq!((rig.primary.request_count(), rig.backup.request_count()), (10, 5));
    }
}

both_modes! {
    async fn a_reset_before_the_head_is_retried(mode: Mode) {
        let rig = Rig::start(mode, &failover("      retries: 1\n"), &[]);
        rig.primary.enqueue(Mock::reset());
        let reply = rig.chat("chat", false, "reset", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "primary"), "{}", reply.text());
        assert_eq!(rig.primary.request_count(), 2);
        let line = rig.gateway.access_line("reset");
        assert_eq!(line["attempts"][0]["error"], "upstream_unavailable");
        assert_eq!(line["attempts"][0]["status"], Value::Null);

        // Alone and reset every time: a clean 502 once its retry is spent.
        rig.primary.set_default(Mock::reset());
        let reply = rig.chat("primary", false, "reset-direct", json!({})).await;
        assert_eq!(reply.status, 502);
        assert_eq!(reply.json()["error"]["code"], "upstream_unavailable");
    }
}

both_modes! {
    async fn a_silent_target_is_not_retried_and_the_request_falls_over_at_once(mode: Mode) {
        let groups = failover("      retries: 2\n").replace("    routing:", "    first_token_timeout: 500\n    routing:");
        let rig = Rig::start(mode, &groups, &[]);
        rig.primary.set_default(Mock::silence());
        let reply = rig.chat("chat", false, "silent", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"), "{}", reply.text());
        assert_eq!(rig.primary.request_count(), 1, "a target that never answered is not retried");
        let line = rig.gateway.access_line("silent");
        assert_eq!(line["attempts"][0]["error"], "upstream_timeout");
        wait(&rig.primary, "the silent request to be abandoned", |m| m.requests_abandoned() == 1);
    }
}

both_modes! {
    async fn context_length_and_content_filter_400s_are_returned_or_fall_over_when_listed(mode: Mode) {
        let groups = format!(
            "{}  - display_name: lenient\n    routing:\n      targets: [{{model: primary}}, {{model: backup}}]\n      retries: 2\n      fallback_on_statuses: [400]\n",
            failover("      retries: 2\n")
        );
        let rig = Rig::start(mode, &groups, &[]);
        let context_length = || {
            Mock::status(400).json(json!({"error": {
                "message": "This model's maximum context length is 8192 tokens.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
            }}))
        };
        rig.primary.enqueue(context_length());
        let reply = rig.chat("chat", false, "too-long", json!({})).await;
        assert_eq!(reply.status, 400);
        assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");
        assert_eq!((rig.primary.request_count(), rig.backup.request_count()), (1, 0), "a 400 is never retried");

        rig.primary.enqueue(Mock::status(400).json(json!({"error": {
            "message": "The response was filtered.", "type": "invalid_request_error", "param": "prompt", "code": "content_filter",
        }})));
        let reply = rig.chat("lenient", false, "filtered", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"));
        assert_eq!((rig.primary.request_count(), rig.backup.request_count()), (2, 1));

        // A 400 is about the request, not the target: no cooldown however many.
        for i in 0..4 {
            rig.primary.enqueue(context_length());
            assert_eq!(rig.chat("chat", false, &format!("again-{i}"), json!({})).await.status, 400);
        }
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_cooldowns_total", &[]), 0.0, "{page}");
    }
}

both_modes! {
    async fn when_every_target_cools_try_anyway_still_calls_them(mode: Mode) {
        let groups = "  - display_name: stubborn\n    routing:\n      targets: [{model: primary}]\n      when_all_unavailable: try_anyway\n";
        let rig = Rig::start(mode, groups, &[("AISIX_UPSTREAM__COOLDOWN_MS", "30000")]);
        rig.primary.set_default(Mock::openai_error(502, "bad_gateway", "down"));
        for i in 0..3 {
            assert_eq!(rig.chat("stubborn", false, &format!("trip-{i}"), json!({})).await.status, 502);
        }
        rig.primary.clear_default();
        let reply = rig.chat("stubborn", false, "anyway", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.primary.request_count(), 4);
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_targets_cooling", &[]), 0.0, "a success ends the cooldown: {page}");
    }
}

both_modes! {
    async fn groups_are_listed_allowed_by_name_and_round_robin_by_weight(mode: Mode) {
        let groups = "  - display_name: spread\n    routing:\n      strategy: round_robin\n      targets: [{model: primary, weight: 3}, {model: backup, weight: 1}]\n";
        let rig = Rig::start(mode, groups, &[]);
        let models = aisix_e2e::client::send(
            rig.gateway.addr(),
            aisix_e2e::client::request("GET", "/v1/models", &[("authorization", &format!("Bearer {}", aisix_e2e::routing::KEY))], None),
        )
        .await
        .json();
        let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["primary", "backup", "backup-vllm", "spread"]);
        for i in 0..8 {
            assert_eq!(rig.chat("spread", false, &format!("rr-{i}"), json!({})).await.status, 200);
        }
        assert_eq!((rig.primary.request_count(), rig.backup.request_count()), (6, 2));
    }
}

both_modes! {
    async fn a_reload_keeps_the_cooldown_of_targets_whose_config_did_not_change(mode: Mode) {
        let rig = Rig::start(mode, &failover(""), &[("AISIX_UPSTREAM__COOLDOWN_MS", "30000")]);
        rig.primary.set_default(Mock::openai_error(503, "overloaded", "down"));
        for i in 0..4 {
            assert_eq!(served_by(&rig.chat("chat", false, &format!("trip-{i}"), json!({})).await), "backup");
        }
        assert_eq!(rig.primary.request_count(), 3);
        rig.primary.clear_default();

        // An unrelated change: primary is still cooling on every worker.
        let resources = aisix_e2e::routing::resources(&rig.primary.base_url(), &rig.backup.base_url(), &failover(""));
        let write = |yaml: &str| std::fs::write(rig.gateway.dir().join("resources.yaml"), yaml).unwrap();
        write(&resources.replace("allowed_models: [\"*\"]", "allowed_models: [\"*\", \"x\"]"));
        rig.gateway.signal(libc::SIGHUP);
        assert!(rig.gateway.wait_for_log("resources reloaded", Duration::from_secs(10)), "{}", rig.gateway.logs());
        for i in 0..4 {
            assert_eq!(served_by(&rig.chat("chat", false, &format!("kept-{i}"), json!({})).await), "backup");
        }
        assert_eq!(rig.primary.request_count(), 3);

        // primary's own config changed: its state starts afresh.
        write(&resources.replace("model_name: up-primary", "model_name: up-primary-2"));
        rig.gateway.signal(libc::SIGHUP);
        let reloaded = || rig.gateway.logs().matches("resources reloaded").count() >= 2;
        for _ in 0..500 {
            if reloaded() { break; }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(reloaded(), "{}", rig.gateway.logs());
        let reply = rig.chat("chat", false, "fresh", json!({})).await;
        assert_eq!(served_by(&reply), "primary");
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_targets_cooling", &[]), 0.0, "the replaced state left the gauge: {page}");
    }
}

both_modes! {
    async fn nginx_502_for_a_dead_upstream_falls_over_to_the_backup(mode: Mode) {
        use aisix_e2e::third_party::nginx::Nginx;
        // nginx in front of a port nothing listens on answers 502 itself.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let nginx = Nginx::start(dead_addr);
        let backup = aisix_e2e::mock::MockProvider::start();
        let unused = aisix_e2e::mock::MockProvider::start();
        let mut config = Rig::config(mode, &unused, &backup, &failover("      retries: 1\n"), &[]);
        config.resources = Some(aisix_e2e::routing::resources(&nginx.base_url(), &backup.base_url(), &failover("      retries: 1\n")));
        let gateway = aisix_e2e::gateway::Gateway::start(&config);
        let rig = Rig { primary: unused, backup, gateway };

        let reply = rig.chat("chat", false, "via-nginx", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"), "{}", reply.text());
        let text = rig.chat("chat", true, "via-nginx-stream", json!({})).await.text();
        let streamed = aisix_e2e::routing::streamed(&text);
        assert!(streamed.done && streamed.text == "Hello from the mock provider.", "{text}");
        let log = nginx.access_log();
        let statuses: Vec<&str> = log.iter().map(|l| l["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["502", "502", "502", "502"], "one retry each, both answered 502 by nginx: {}", nginx.logs());
        let line = rig.gateway.access_line("via-nginx");
        assert_eq!(line["attempts"][0]["status"], 502);
        assert_eq!(line["attempts"][2]["target"], "backup");
    }
}
