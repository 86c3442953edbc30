//! Limits shared through a real Redis (Debian's `redis-server`), in both serving modes: two
//! aisix processes enforce one rate limit and one budget; with Redis stopped, `on_error: allow`
//! keeps answering on local counters and `on_error: deny` refuses with 503, each within one
//! request deadline; with Redis back, both use it again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, Mode};
use aisix_e2e::limits::{Limits, Rig, align, answer, burst, chat, chat_body, code};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::prom::sample;
use aisix_e2e::third_party::redis::Redis;

/// The bootstrap section that puts the counters in `redis`.
fn backend(redis: &Redis, on_error: &str) -> String {
    format!(
        "ratelimit:\n  backend: redis\n  redis:\n    url: \"{}\"\n    on_error: {on_error}\n    timeout_ms: 200\n",
        redis.url()
    )
}

/// A second gateway in front of the same mock, with the same resources.
fn second(mode: Mode, mock: &MockProvider, limits: &Limits, extra: &str) -> Gateway {
    Gateway::start(&Rig::config(mode, mock, limits, extra))
}

/// The limiter's keys in Redis.
fn keys(redis: &Redis) -> String {
    redis.command(&["KEYS", "aisix:rl:*"])
}

/// A request answered within one deadline (the client's patience, well above
/// `ratelimit.redis.timeout_ms`).
async fn within_deadline(gateway: &Gateway, body: &str) -> aisix_e2e::client::Reply {
    tokio::time::timeout(Duration::from_secs(5), chat(gateway, body))
        .await
        .expect("answered within one request deadline")
}

both_modes! {
    async fn two_processes_share_one_rate_limit(mode: Mode) {
        let redis = Redis::start();
        let limits = Limits { model: "rate_limit: {rpm: 3}".into(), ..Limits::default() };
        let rig = Rig::start(mode, &limits, &backend(&redis, "allow"));
        let other = second(mode, &rig.mock, &limits, &backend(&redis, "allow"));
        align(&[&rig.gateway, &other], 0, 60_000, 1_000).await;
        let body = chat_body(16, false);

        let (a, b) = tokio::join!(burst(&rig.gateway, &body, 5), burst(&other, &body, 5));
        let admitted = a.iter().chain(&b).filter(|r| r.status == 200).count();
        assert_eq!(admitted, 3, "one limit for both processes");
        assert_eq!(rig.mock.request_count(), 3);
        for refused in a.iter().chain(&b).filter(|r| r.status != 200) {
            assert_eq!((refused.status.as_u16(), code(refused)), (429, "rate_limit_exceeded".into()));
        }
        assert!(keys(&redis).contains("aisix:rl:{model:chat}"), "{}", keys(&redis));
    }
}

both_modes! {
    async fn two_processes_share_one_budget(mode: Mode) {
        let redis = Redis::start();
        // A request reserves its estimate ($0.01/1k input tokens, $0.02/1k output, in
        // micro-dollars: 10 per input token, 20 per output token); a budget of one and a half
        // reservations holds one, never two, whenever the first settles.
        let body = chat_body(1, false);
        let reserved = (body.len() as u64).div_ceil(4) * 10 + 20;
        let budget = reserved * 3 / 2;
        let limits = Limits {
            model: "cost: {input_per_1k: 0.01, output_per_1k: 0.02}".into(),
            key: format!("budget: {{usd: \"0.{budget:06}\", period: day}}"),
        };
        let rig = Rig::start(mode, &limits, &backend(&redis, "allow"));
        let other = second(mode, &rig.mock, &limits, &backend(&redis, "allow"));
        align(&[&rig.gateway, &other], 0, 86_400_000, 3_600_000).await;
        rig.mock.set_default(answer(10, 20));

        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let reply = chat(&other, &body).await;
        assert_eq!(reply.status, 429, "the other process sees the spend: {}", reply.text());
        assert_eq!(code(&reply), "budget_exceeded");
        assert_eq!(rig.mock.request_count(), 1);
    }
}

both_modes! {
    async fn redis_away_allows_or_denies_as_configured_and_is_used_again_when_back(mode: Mode) {
        let mut redis = Redis::start();
        let limits = Limits { key: "rate_limit: {rpm: 1000}".into(), ..Limits::default() };
        let allow = Rig::start(mode, &limits, &backend(&redis, "allow"));
        let deny = second(mode, &allow.mock, &limits, &backend(&redis, "deny"));
        let body = chat_body(16, false);
        for gateway in [&allow.gateway, &deny] {
            assert_eq!(within_deadline(gateway, &body).await.status, 200);
        }
        assert!(keys(&redis).contains("aisix:rl:{api_key:team}"), "{}", keys(&redis));

        redis.stop();
        for _ in 0..3 {
            let reply = within_deadline(&allow.gateway, &body).await;
            assert_eq!(reply.status, 200, "allow: counted locally: {}", reply.text());
            let reply = within_deadline(&deny, &body).await;
            assert_eq!(reply.status, 503, "deny: {}", reply.text());
            assert_eq!(code(&reply), "rate_limiter_unavailable");
            assert_eq!(reply.header("retry-after"), Some("1"));
        }
        let page = allow.scrape().await;
        assert!(sample(&page, "aisix_ratelimit_backend_errors_total", &[]) >= 1.0, "{page}");

        // Back (empty): deny answers again only through Redis; allow writes its counters there.
        redis.restart();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while within_deadline(&deny, &body).await.status != 200 {
            assert!(tokio::time::Instant::now() < deadline, "deny never used Redis again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        loop {
            redis.command(&["FLUSHALL"]);
            assert_eq!(within_deadline(&allow.gateway, &body).await.status, 200);
            if keys(&redis).contains("aisix:rl:{api_key:team}") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "allow never used Redis again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The budget bootstrap: Redis with `on_error: allow` and the given `budget_on_error`.
fn budget_backend(redis: &Redis, budget_on_error: &str) -> String {
    format!(
        "{}    budget_on_error: {budget_on_error}\n",
        backend(redis, "allow")
    )
}

/// The key's budget counter for today in Redis, in micro-dollars (0 when absent).
fn budget_in_redis(redis: &Redis) -> u64 {
    // RESP: `*N`, then `$len` and the key for each; a GET's reply is `$len` and the value.
    let keys = redis.command(&["KEYS", "aisix:rl:{api_key:team}:budget:*"]);
    keys.lines()
        .filter(|line| line.starts_with("aisix:"))
        .map(|key| {
            let reply = redis.command(&["GET", key]);
            reply
                .lines()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

both_modes! {
    async fn spend_during_a_redis_outage_is_written_back_when_redis_returns(mode: Mode) {
        let mut redis = Redis::start();
        // $0.01/1k input, $0.02/1k output: an answer of 10 + 20 tokens spends 500 micro-dollars.
        let limits = Limits {
            model: "cost: {input_per_1k: 0.01, output_per_1k: 0.02}".into(),
            key: "budget: {usd: 100, period: day}".into(),
        };
        let rig = Rig::start(mode, &limits, &budget_backend(&redis, "allow"));
        let deny = second(mode, &rig.mock, &limits, &budget_backend(&redis, "deny"));
        align(&[&rig.gateway, &deny], 0, 86_400_000, 3_600_000).await;
        rig.mock.set_default(answer(10, 20));
        let body = chat_body(1, false);

        assert_eq!(within_deadline(&rig.gateway, &body).await.status, 200);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while budget_in_redis(&redis) != 500 {
            assert!(tokio::time::Instant::now() < deadline, "settled in Redis: {}", budget_in_redis(&redis));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        redis.stop();
        for _ in 0..3 {
            let reply = within_deadline(&rig.gateway, &body).await;
            assert_eq!(reply.status, 200, "budget_on_error: allow counts here: {}", reply.text());
            let reply = within_deadline(&deny, &body).await;
            assert_eq!(reply.status, 503, "budget_on_error: deny: {}", reply.text());
            assert_eq!(code(&reply), "rate_limiter_unavailable");
        }

        // Back, and empty (no persistence): the outage's three answers reach it all the same.
        redis.restart();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while budget_in_redis(&redis) != 3 * 500 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the outage's spend never reached Redis: {}",
                budget_in_redis(&redis)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

both_modes! {
    async fn a_long_stream_keeps_its_redis_concurrency_slot_past_the_lease_ttl(mode: Mode) {
        let redis = Redis::start();
        let limits = Limits { key: "rate_limit: {concurrency: 1}".into(), ..Limits::default() };
        let extra = format!("{}  concurrency_ttl_secs: 1\n", backend(&redis, "deny"));
        let rig = Rig::start(mode, &limits, &extra);
        let mut frames = vec![aisix_e2e::mock::Frame::chat_role("up-chat")];
        frames.push(aisix_e2e::mock::Frame::chat_delta("up-chat", "x0"));
        rig.mock.enqueue(aisix_e2e::mock::Reply::sse(frames).hang());

        let mut stream = aisix_e2e::client::send_streaming(
            rig.gateway.addr(),
            aisix_e2e::limits::chat_request(&chat_body(16, true)),
        )
        .await;
        assert_eq!(stream.status(), 200);
        // Three lease lifetimes while the stream runs: the slot is renewed, never lapses.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            let reply = within_deadline(&rig.gateway, &chat_body(16, false)).await;
            assert_eq!(reply.status, 429, "the stream's slot lapsed: {}", reply.text());
        }
        let _ = http_body_util::BodyExt::frame(stream.body_mut()).await;
        drop(stream);

        rig.mock.set_default(answer(7, 3));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while within_deadline(&rig.gateway, &chat_body(16, false)).await.status != 200 {
            assert!(tokio::time::Instant::now() < deadline, "the slot never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The leases in the key's concurrency set in Redis.
fn leases_in_redis(redis: &Redis) -> u64 {
    aisix_e2e::third_party::redis::number(
        &redis.command(&["ZCARD", "aisix:rl:{api_key:team}:concurrency"]),
    )
}

both_modes! {
    async fn a_redis_frozen_during_reservations_leaks_no_slot_once_it_resumes(mode: Mode) {
        let redis = Redis::start();
        let limits = Limits { key: "rate_limit: {concurrency: 2}".into(), ..Limits::default() };
        let rig = Rig::start(mode, &limits, &backend(&redis, "allow"));
        rig.mock.set_default(answer(7, 3));
        let body = chat_body(16, false);
        assert_eq!(within_deadline(&rig.gateway, &body).await.status, 200);

        // Frozen (SIGSTOP): the scripts wait in its socket while the requests give up on them
        // and go on counting here; they run, and take their slots, when it resumes.
        redis.pause();
        let replies = tokio::time::timeout(Duration::from_secs(5), burst(&rig.gateway, &body, 4))
            .await
            .expect("answered within one request deadline");
        for reply in &replies {
            assert!(matches!(reply.status.as_u16(), 200 | 429), "{}", reply.text());
        }
        assert!(replies.iter().any(|r| r.status == 200), "allow: counted locally");
        redis.resume();

        // Every slot those scripts took is given back once the gateway reaches Redis again,
        // long before the leases' own 300 s lifetime.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while leases_in_redis(&redis) != 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "leaked slots: {}",
                leases_in_redis(&redis)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (a, b) = tokio::join!(chat(&rig.gateway, &body), chat(&rig.gateway, &body));
        assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200), "both slots are free: {} {}", a.text(), b.text());
    }
}
