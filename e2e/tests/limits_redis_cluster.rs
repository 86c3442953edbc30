//! Limits shared through a real three-node Redis Cluster (`redis-server --cluster-enabled yes`,
//! joined by `redis-cli --cluster create`), in both serving modes: two aisix processes with
//! `ratelimit.redis.mode: cluster` enforce one request window and one concurrency cap, every
//! slot comes back once its requests end, and the budget in the cluster holds exactly what
//! both processes' `aisix_spend_usd_total` rose by. Every reservation touches two subjects (the
//! key and the model), whose keys lie in different slots: one script per subject.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::limits::{align, answer, code};
use aisix_e2e::mock::{MockProvider, Reply as Mock};
use aisix_e2e::third_party::redis::{RedisCluster, number};
use serde_json::json;

const KEY: &str = "sk-cluster-test-1";
/// `chat`'s requests per minute, across both processes.
const RPM: usize = 3;
/// `slow`'s requests in flight at once, across both processes.
const CONCURRENCY: usize = 2;

/// `chat` answers at once; `slow` (on its own mock) never answers. The key has a budget and a
/// request window far above what the test uses, so every reservation touches its keys too.
fn resources(fast: &str, slow: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: fast, provider: openai, api_key: sk-fast-secret, api_base: "{fast}"}}
  - {{display_name: slow, provider: openai, api_key: sk-slow-secret, api_base: "{slow}"}}
models:
  - {{display_name: chat, provider: openai, model_name: up-chat, provider_key: fast, rate_limit: {{rpm: {RPM}}}, cost: {{input_per_1k: 0.01, output_per_1k: 0.02}}}}
  - {{display_name: slow, provider: openai, model_name: up-slow, provider_key: slow, rate_limit: {{concurrency: {CONCURRENCY}}}, cost: {{input_per_1k: 0.01, output_per_1k: 0.02}}}}
api_keys:
  - {{display_name: team, key_env: CLUSTER_KEY, allowed_models: ["*"], rate_limit: {{rpm: 1000}}, budget: {{usd: 100, period: day}}}}
"#
    )
}

fn gateway(
    mode: Mode,
    cluster: &RedisCluster,
    fast: &MockProvider,
    slow: &MockProvider,
) -> Gateway {
    Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources(&fast.base_url(), &slow.base_url()))
            .env("CLUSTER_KEY", KEY)
            .metrics()
            .extra(&format!(
                "ratelimit:\n  backend: redis\n  redis:\n    mode: cluster\n    url: \"{}\"\n    timeout_ms: 1000\n",
                cluster.urls()
            )),
    )
}

fn body(model: &str) -> String {
    json!({
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say hello to the world"}],
    })
    .to_string()
}

fn request(model: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(&body(model)),
    )
}

/// Sends `n` requests to `model` on each gateway at once.
fn spawn_burst(
    gateways: &[&Gateway],
    model: &str,
    n: usize,
) -> tokio::task::JoinSet<client::Reply> {
    let mut set = tokio::task::JoinSet::new();
    for gateway in gateways {
        for _ in 0..n {
            let (addr, request) = (gateway.addr(), request(model));
            set.spawn(async move { client::send(addr, request).await });
        }
    }
    set
}

/// What `aisix_spend_usd_total` holds for the key `team`, over every model, in micro-dollars.
async fn spend_metric_micros(gateway: &Gateway) -> u64 {
    let addr = gateway.metrics_addr.expect("metrics enabled");
    let page = client::get(addr, "/metrics").await.text();
    let usd: f64 = page
        .lines()
        .filter(|line| {
            line.starts_with("aisix_spend_usd_total{") && line.contains("api_key=\"team\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    (usd * 1e6).round() as u64
}

/// The key's budget counters in the cluster, in micro-dollars.
fn budget_in_cluster(cluster: &RedisCluster) -> u64 {
    cluster
        .keys("aisix:rl:{api_key:team}:budget:*")
        .iter()
        .map(|(node, key)| number(&node.command(&["GET", key])))
        .sum()
}

/// The leases held in `slow`'s concurrency set, on whichever node holds it.
fn slow_leases(cluster: &RedisCluster) -> u64 {
    cluster
        .keys("aisix:rl:{model:slow}:concurrency")
        .iter()
        .map(|(node, key)| number(&node.command(&["ZCARD", key])))
        .sum()
}

/// Polls `check` every 50 ms until it holds; panics with `what` after 15 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_modes! {
    async fn two_processes_share_limits_and_a_budget_through_a_redis_cluster(mode: Mode) {
        let cluster = RedisCluster::start();
        // The key's and the models' keys lie in different slots: one script touching two of
        // them would be refused with CROSSSLOT.
        let key_slot = cluster.slot("aisix:rl:{api_key:team}:rpm:1");
        assert_ne!(key_slot, cluster.slot("aisix:rl:{model:chat}:rpm:1"));
        assert_ne!(key_slot, cluster.slot("aisix:rl:{model:slow}:concurrency"));
        let fast = MockProvider::start();
        let slow = MockProvider::start();
        fast.set_default(answer(10, 20));
        slow.set_default(Mock::silence());
        let a = gateway(mode, &cluster, &fast, &slow);
        let b = gateway(mode, &cluster, &fast, &slow);
        align(&[&a, &b], 0, 60_000, 1_000).await;

        // One request window for both: 5 + 5 at once, exactly RPM admitted.
        let mut burst = spawn_burst(&[&a, &b], "chat", 5);
        let mut admitted = 0;
        while let Some(reply) = burst.join_next().await {
            let reply = reply.unwrap();
            match reply.status.as_u16() {
                200 => admitted += 1,
                429 => assert_eq!(code(&reply), "rate_limit_exceeded", "{}", reply.text()),
                other => panic!("unexpected {other}: {}", reply.text()),
            }
        }
        assert_eq!(admitted, RPM, "one limit across both processes");
        assert_eq!(fast.request_count(), RPM);

        // One concurrency cap for both: of 4 + 4 requests held upstream, CONCURRENCY reach it
        // and the rest are refused while those are in flight.
        let mut burst = spawn_burst(&[&a, &b], "slow", 4);
        let mut refused = 0;
        while refused < 8 - CONCURRENCY {
            let reply = burst.join_next().await.expect("a refusal").unwrap();
            assert_eq!(reply.status, 429, "{}", reply.text());
            assert_eq!(code(&reply), "rate_limit_exceeded");
            refused += 1;
        }
        assert!(slow.wait_for_requests(CONCURRENCY, Duration::from_secs(10)));
        assert_eq!(slow.request_count(), CONCURRENCY, "never more than the cap upstream");
        assert_eq!(slow_leases(&cluster), CONCURRENCY as u64);
        // The clients leave: their slots come back.
        burst.abort_all();
        eventually("the concurrency slots never came back", || slow_leases(&cluster) == 0).await;

        // What both processes counted as spend is what the cluster's budget holds.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let metric = spend_metric_micros(&a).await + spend_metric_micros(&b).await;
            let budget = budget_in_cluster(&cluster);
            if metric == budget && metric > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "spend metric {metric} and budget {budget} differ"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
