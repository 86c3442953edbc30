//! Limits that hold under concurrency, in both serving modes: bursts of concurrent requests
//! against `rpm`, `tpm` and `concurrency` never get more admitted than the limit allows,
//! windows reset, a reservation is reconciled with the usage (the unused part returned, a
//! disconnected stream charged what it produced), and a budget stops a key until its period
//! rolls over. Time moves through the test build's clock hook, never by sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::limits::{
    Limits, Rig, advance, align, answer, burst, chat, chat_body, chat_request, code, estimate,
    number, read_deltas, tokens_counted,
};
use aisix_e2e::mock::{Frame, Reply as Mock};
use aisix_e2e::prom::sample;
use http_body_util::BodyExt;

const MINUTE: u64 = 60_000;
const DAY: u64 = 86_400_000;

both_modes! {
    async fn rpm_admits_exactly_its_limit_of_a_burst_and_resets_with_the_window(mode: Mode) {
        let limits = Limits { key: "rate_limit: {rpm: 5}".into(), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        align(&[&rig.gateway], 0, MINUTE, 1_000).await;
        let body = chat_body(16, false);

        let replies = burst(&rig.gateway, &body, 20).await;
        let (admitted, refused): (Vec<_>, Vec<_>) = replies.iter().partition(|r| r.status == 200);
        assert_eq!(admitted.len(), 5, "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
        assert_eq!(rig.mock.request_count(), 5);
        let mut remaining: Vec<u64> =
            admitted.iter().map(|r| number(r, "x-ratelimit-remaining-requests")).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, [0, 1, 2, 3, 4], "each admission saw the ones before it");
        for reply in &refused {
            assert_eq!(reply.status, 429, "{}", reply.text());
            assert_eq!(code(reply), "rate_limit_exceeded");
            assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
            assert_eq!(number(reply, "x-ratelimit-limit-requests"), 5);
            assert_eq!(number(reply, "x-ratelimit-remaining-requests"), 0);
            let retry_after = number(reply, "retry-after");
            assert!((1..=60).contains(&retry_after), "{retry_after}");
        }

        advance(&rig.gateway, Duration::from_millis(MINUTE)).await;
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "the next window admits again: {}", reply.text());
        assert_eq!(number(&reply, "x-ratelimit-remaining-requests"), 4);

        let page = rig.scrape().await;
        assert_eq!(
            sample(&page, "aisix_ratelimit_rejections_total", &[("scope", "api_key"), ("kind", "rpm")]),
            15.0,
            "{page}"
        );
        assert_eq!(
            sample(&page, "aisix_requests_total", &[("outcome", "rate_limited")]),
            15.0,
            "{page}"
        );
    }
}

both_modes! {
    async fn tpm_admits_what_fits_of_a_burst_and_resets_with_the_window(mode: Mode) {
        let body = chat_body(100, false);
        let each = estimate(&body, 100);
        let tpm = each * 7 + each / 2;
        let limits = Limits { model: format!("rate_limit: {{tpm: {tpm}}}"), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        // Each answer uses exactly its estimate: nothing is returned, whatever the order.
        rig.mock.set_default(answer((body.len() as u64).div_ceil(4), 100));
        align(&[&rig.gateway], 0, MINUTE, 1_000).await;

        let replies = burst(&rig.gateway, &body, 20).await;
        let admitted: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
        assert_eq!(admitted.len(), 7, "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
        assert_eq!(rig.mock.request_count(), 7);
        for reply in replies.iter().filter(|r| r.status != 200) {
            assert_eq!((reply.status.as_u16(), code(reply)), (429, "rate_limit_exceeded".into()));
            assert_eq!(number(reply, "x-ratelimit-limit-tokens"), tpm);
            assert!(reply.header("retry-after").is_some());
        }
        assert_eq!(tokens_counted(&rig.gateway, tpm).await, each * 7);

        advance(&rig.gateway, Duration::from_millis(MINUTE)).await;
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(number(&reply, "x-ratelimit-remaining-tokens"), tpm - each);
    }
}

both_modes! {
    async fn reconciliation_returns_the_unused_part_and_charges_usage_beyond_the_estimate(mode: Mode) {
        let tpm = 100_000;
        let limits = Limits { model: format!("rate_limit: {{tpm: {tpm}}}"), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        align(&[&rig.gateway], 0, MINUTE, 1_000).await;
        let body = chat_body(2_000, false);
        let reserved = estimate(&body, 2_000);

        rig.mock.enqueue(answer(7, 3));
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(number(&reply, "x-ratelimit-remaining-tokens"), tpm - reserved, "reserved up front");
        assert_eq!(tokens_counted(&rig.gateway, tpm).await, 10, "settled at the usage");

        rig.mock.enqueue(answer(1_500, 3_000));
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(tokens_counted(&rig.gateway, tpm).await, 10 + 4_500, "usage beyond the estimate is charged");
    }
}

/// A stream that sends its role and `pieces` content deltas, then nothing, open forever.
fn stalled_stream(pieces: usize) -> Mock {
    let mut frames = vec![Frame::chat_role("up-chat")];
    frames.extend((0..pieces).map(|i| Frame::chat_delta("up-chat", &format!("x{i}"))));
    Mock::sse(frames).hang()
}

/// Polls `counted` until it is `expected`, for at most ten seconds.
async fn until_counted(rig: &Rig, tpm: u64, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut counted = tokens_counted(&rig.gateway, tpm).await;
    while counted != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        counted = tokens_counted(&rig.gateway, tpm).await;
    }
    assert_eq!(counted, expected);
}

both_modes! {
    async fn a_disconnected_stream_is_charged_the_output_it_produced(mode: Mode) {
        let tpm = 100_000;
        let limits = Limits { model: format!("rate_limit: {{tpm: {tpm}}}"), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        align(&[&rig.gateway], 0, MINUTE, 1_000).await;
        let body = chat_body(5_000, true);
        rig.mock.enqueue(stalled_stream(3));

        let mut response = client::send_streaming(rig.gateway.addr(), chat_request(&body)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["x-ratelimit-remaining-tokens"].to_str().unwrap().parse::<u64>().unwrap(),
            tpm - estimate(&body, 5_000)
        );
        read_deltas(&mut response, 3).await;
        drop(response);

        // The prompt as estimated, and one token per content delta relayed.
        until_counted(&rig, tpm, (body.len() as u64).div_ceil(4) + 3).await;
    }
}

both_modes! {
    async fn concurrency_admits_its_limit_of_a_burst_and_frees_a_slot_when_a_stream_ends(mode: Mode) {
        let limits = Limits { key: "rate_limit: {concurrency: 3}".into(), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        rig.mock.set_default(stalled_stream(1));
        let body = chat_body(16, true);

        let mut set = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let (addr, request) = (rig.gateway.addr(), chat_request(&body));
            set.spawn(async move { client::send_streaming(addr, request).await });
        }
        let mut held = Vec::new();
        let mut refused = 0;
        while let Some(response) = set.join_next().await {
            let response = response.unwrap();
            if response.status() == 200 {
                held.push(response);
                continue;
            }
            refused += 1;
            assert_eq!(response.status(), 429);
            assert!(response.headers().get("retry-after").is_none(), "a concurrency refusal has no Retry-After");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(error["error"]["code"], "rate_limit_exceeded");
            assert!(error["error"]["message"].as_str().unwrap().contains("3 requests in flight"), "{error}");
        }
        assert_eq!((held.len(), refused), (3, 7));

        // A client that leaves gives its slot back.
        drop(held.pop());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let response = client::send_streaming(rig.gateway.addr(), chat_request(&body)).await;
            if response.status() == 200 {
                held.push(response);
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the slot was never freed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(held.len(), 3);
        let page = rig.scrape().await;
        assert!(
            sample(&page, "aisix_ratelimit_rejections_total", &[("scope", "api_key"), ("kind", "concurrency")]) >= 7.0,
            "{page}"
        );
    }
}

both_modes! {
    async fn a_budget_stops_the_key_until_its_period_rolls_over(mode: Mode) {
        // $0.0005 per answer (10 input tokens at $0.01/1k, 20 output at $0.02/1k); a request
        // reserves less than that, so the second answer spends the budget exactly.
        let limits = Limits {
            model: "cost: {input_per_1k: 0.01, output_per_1k: 0.02}".into(),
            key: "budget: {usd: 0.001, period: day}".into(),
        };
        let rig = Rig::start(mode, &limits, "");
        rig.mock.set_default(answer(10, 20));
        align(&[&rig.gateway], 0, DAY, 3_600_000).await;
        let body = chat_body(1, false);

        for _ in 0..2 {
            let reply = chat(&rig.gateway, &body).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "billing_error");
        assert_eq!(code(&reply), "budget_exceeded");
        assert_eq!(reply.header("x-should-retry"), Some("false"));
        let message = reply.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("$0.001 spent of $0.001 today"), "{message}");
        assert!(!message.contains(aisix_e2e::limits::KEY), "no key in the message");
        let retry_after = number(&reply, "retry-after");
        assert!((1..=DAY / 1000).contains(&retry_after), "{retry_after}");
        assert_eq!(rig.mock.request_count(), 2);

        let page = rig.scrape().await;
        let spent = sample(&page, "aisix_spend_usd_total", &[("api_key", "team"), ("model", "chat")]);
        assert!((spent - 0.001).abs() < 1e-9, "{page}");
        // Tokens and requests by key (its display name, never the key).
        assert_eq!(sample(&page, "aisix_tokens_total", &[("api_key", "team"), ("kind", "input")]), 20.0, "{page}");
        assert_eq!(sample(&page, "aisix_tokens_total", &[("api_key", "team"), ("kind", "output")]), 40.0, "{page}");
        assert_eq!(
            sample(&page, "aisix_requests_total", &[("api_key", "team"), ("outcome", "rate_limited")]),
            1.0,
            "{page}"
        );
        assert!(!page.contains(aisix_e2e::limits::KEY), "no key on the metrics page");
        assert_eq!(
            sample(&page, "aisix_ratelimit_rejections_total", &[("scope", "api_key"), ("kind", "budget")]),
            1.0,
            "{page}"
        );

        advance(&rig.gateway, Duration::from_millis(DAY)).await;
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "a new day, a new budget: {}", reply.text());
    }
}

/// Scrapes until `aisix_config_reloads_total{result="success"}` reaches `count`.
async fn wait_reloaded(rig: &Rig, count: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sample(
        &rig.scrape().await,
        "aisix_config_reloads_total",
        &[("result", "success")],
    ) < count
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reloaded: {}",
            rig.gateway.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

both_modes! {
    async fn a_reload_keeps_the_counters_of_entries_still_there(mode: Mode) {
        let limits = Limits { key: "rate_limit: {rpm: 3}".into(), ..Limits::default() };
        let rig = Rig::start(mode, &limits, "");
        align(&[&rig.gateway], 0, MINUTE, 1_000).await;
        let body = chat_body(16, false);
        for _ in 0..3 {
            assert_eq!(chat(&rig.gateway, &body).await.status, 200);
        }
        assert_eq!(chat(&rig.gateway, &body).await.status, 429);

        // The key's limit goes up by one and the model gets a limit of its own: the key's
        // count so far still holds, so one more request is admitted, not four.
        let changed = Limits { key: "rate_limit: {rpm: 4}".into(), model: "rate_limit: {rpd: 100}".into() };
        let resources = aisix_e2e::limits::resources(&rig.mock.base_url(), &changed);
        std::fs::write(rig.gateway.dir().join("resources.yaml"), resources).unwrap();
        rig.gateway.signal(libc::SIGHUP);
        wait_reloaded(&rig, 1.0).await;

        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(number(&reply, "x-ratelimit-limit-requests"), 4);
        let reply = chat(&rig.gateway, &body).await;
        assert_eq!(reply.status, 429, "the count survived the reload: {}", reply.text());
        assert_eq!(number(&reply, "x-ratelimit-remaining-requests"), 0);
    }
}
