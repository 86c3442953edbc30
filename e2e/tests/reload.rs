//! Reloading under load leaves no worker behind: after a storm of SIGHUPs alternating two
//! resources files, every worker serves the last one, and a key it removed is refused at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::MockProvider;
use serde_json::Value;

const KEY_A: &str = "sk-reload-key-a";
const KEY_B: &str = "sk-reload-key-b";

/// Resources that accept only `key` (named `name`).
fn resources(upstream: &str, name: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: up, provider: openai, api_base: "{upstream}"}}
models:
  - {{display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}}
api_keys:
  - {{display_name: {name}, key_env: RELOAD_{name}, allowed_models: ["*"]}}
"#
    )
}

fn request(key: &str, id: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {key}")),
            ("x-request-id", id),
        ],
        Some(r#"{"model":"gpt-x","messages":[]}"#),
    )
}

fn reload_count(gateway: &Gateway) -> usize {
    gateway.logs().matches("resources reloaded").count()
}

both_modes! {
    async fn a_storm_of_reloads_leaves_every_worker_on_the_last_file(mode: Mode) {
        let mock = MockProvider::start();
        let (file_a, file_b) = (resources(&mock.base_url(), "A"), resources(&mock.base_url(), "B"));
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .workers(Some(2))
                .resources(file_a.clone())
                .env("RELOAD_A", KEY_A)
                .env("RELOAD_B", KEY_B),
        );
        let addr = gateway.addr();
        let path = gateway.dir().join("resources.yaml");

        // Load on every worker while the files flip: each answer is 200 or 401, never worse.
        let stop = Arc::new(AtomicBool::new(false));
        let load: Vec<_> = (0..4)
            .map(|i| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let key = if (i + n) % 2 == 0 { KEY_A } else { KEY_B };
                        let status = client::send(addr, request(key, "load")).await.status;
                        assert!(status == 200 || status == 401, "{status}");
                        n += 1;
                    }
                })
            })
            .collect();
        for round in 0..20 {
            std::fs::write(&path, if round % 2 == 1 { &file_b } else { &file_a }).unwrap();
            gateway.signal(libc::SIGHUP);
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        // The last write was file B. Signals may coalesce, but one reload starts after the last
        // signal: wait until reloads stop coming.
        let mut seen = reload_count(&gateway);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = reload_count(&gateway);
            if now == seen {
                break;
            }
            seen = now;
        }
        assert!(seen >= 1, "{}", gateway.logs());
        stop.store(true, Ordering::Relaxed);
        for task in load {
            task.await.unwrap();
        }

        // Fresh connections spread over the workers; each request is the first or a later one on
        // its worker since the reload, and each must see file B.
        for i in 0..24 {
            let removed = client::send(addr, request(KEY_A, &format!("after-a-{i}"))).await;
            assert_eq!(removed.status, 401, "key A was removed by the last reload: {}", removed.text());
            let kept = client::send(addr, request(KEY_B, &format!("after-b-{i}"))).await;
            assert_eq!(kept.status, 200, "{}", kept.text());
        }
        assert!(gateway.wait_for_log("\"request_id\":\"after-b-23\"", Duration::from_secs(5)));
        let workers: BTreeSet<String> = gateway
            .logs()
            .lines()
            .filter(|l| l.contains("\"request_id\":\"after-a-"))
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["worker"].as_str().unwrap().to_owned())
            .collect();
        let expected: BTreeSet<String> = if mode.is_thread_per_core() {
            ["tpc-0", "tpc-1"].map(String::from).into()
        } else {
            ["shared"].map(String::from).into()
        };
        assert_eq!(workers, expected, "the removed key must be refused on every worker");
    }
}

both_modes! {
    async fn a_sighup_sent_as_soon_as_the_gateway_is_ready_reloads_it_and_does_not_end_it(mode: Mode) {
        let mock = MockProvider::start();
        let (file_a, file_b) = (resources(&mock.base_url(), "A"), resources(&mock.base_url(), "B"));
        // The control thread is held for a second after the listeners start (a test hook), so
        // the signal surely comes before the control runtime's tasks run: SIGHUP's default
        // action would end the process unless its handler was installed before then.
        let mut gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(file_a)
                .env("RELOAD_A", KEY_A)
                .env("RELOAD_B", KEY_B)
                .env("TEST_HOOK_AISIX_CONTROL_DELAY_MS", "1000"),
        );
        std::fs::write(gateway.dir().join("resources.yaml"), &file_b).unwrap();
        gateway.signal(libc::SIGHUP);
        assert!(
            gateway.wait_for_log("resources reloaded", Duration::from_secs(10)),
            "the reload never came: {}",
            gateway.logs()
        );
        assert_eq!(gateway.try_exit(), None, "SIGHUP ended the gateway: {}", gateway.logs());
        let kept = client::send(gateway.addr(), request(KEY_B, "after-reload")).await;
        assert_eq!(kept.status, 200, "{}", kept.text());
        let removed = client::send(gateway.addr(), request(KEY_A, "removed")).await;
        assert_eq!(removed.status, 401, "{}", removed.text());
    }
}
