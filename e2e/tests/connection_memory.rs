//! Memory per connection, in both serving modes: keep-alive connections left idle after traffic,
//! and the upstream connections their requests opened, hold small buffers, not 8 KiB ones from
//! each connection's start, and a connection that carried a large body gives that body's buffer
//! back when it goes idle (vendor/hyper/PATCHES.md). RSS is read from `/proc/<pid>/status`;
//! nothing is timed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Connection};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode, rss_bytes};
use aisix_e2e::mock::{MockProvider, Reply as Mock};

const KEY: &str = "sk-conn-memory-1";

/// Client connections opened, each with one request in flight at once, so the worker opens as
/// many upstream connections.
const CONNECTIONS: usize = 200;

/// What one idle client connection and its upstream connection may hold together. With hyper
/// 1.12 as published (four 8 KiB buffers and a 15 KB request queue per pair) such a pair took
/// 47–48 KB here; with the patched one (2 KiB read buffers, head-sized write buffers, a 1 KB
/// queue) 23–24 KB, in a debug build and a release build alike.
const PER_PAIR: u64 = 32 * 1024;

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .workers(Some(1))
        .openai(&mock.base_url(), &[("gpt-x", "up-x")], KEY)
}

/// Waits (up to 30 s) for the RSS of `pid` to fall to `bound` or below, as jemalloc's background
/// thread purges freed pages (README, "Memory"), and returns the last reading.
async fn settled_rss(pid: u32, bound: u64) -> u64 {
    let by = Instant::now() + Duration::from_secs(30);
    while rss_bytes(pid) > bound && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rss_bytes(pid)
}

/// A one-worker gateway in front of `mock` that has answered one request, and its RSS then: the
/// first request's one-time costs (tables, the first connection, thread caches) go into the
/// baseline.
async fn warmed(mode: Mode, mock: &MockProvider) -> (Gateway, u64) {
    let gateway = Gateway::start(&config(mode, mock));
    let first = client::send(gateway.addr(), chat("warm")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let baseline = rss_bytes(gateway.pid());
    (gateway, baseline)
}

/// Asserts that the RSS of `pid` settles at `baseline` plus `count × per` or below, for `count`
/// idle connections (`what`) each allowed `per` bytes.
async fn assert_rss_settles(pid: u32, baseline: u64, (count, per): (usize, u64), what: &str) {
    let bound = baseline + count as u64 * per;
    let held = settled_rss(pid, bound).await;
    let each = held.saturating_sub(baseline) / count as u64;
    eprintln!("{each} bytes per connection: {what}");
    assert!(
        held <= bound,
        "{what} took RSS from {baseline} to {held} bytes, {each} each (bound {per})"
    );
}

fn chat(id: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::chat_request(
        KEY,
        id,
        r#"{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}"#,
    )
}

both_modes! {
    async fn idle_keep_alive_connections_and_their_upstream_connections_hold_under_32_kib_a_pair(mode: Mode) {
        let mock = MockProvider::start();
        let (gateway, baseline) = warmed(mode, &mock).await;
        let (addr, pid) = (gateway.addr(), gateway.pid());

        // Every answer waits, so each request holds an upstream connection of its own.
        mock.set_default(Mock::openai().delay_head(Duration::from_secs(2)));
        let mut opened = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            opened.push(Connection::open(addr).await);
        }
        let requests: Vec<_> = opened
            .into_iter()
            .enumerate()
            .map(|(i, mut connection)| {
                tokio::spawn(async move {
                    let reply = connection.send(chat(&format!("idle-{i}"))).await;
                    (connection, reply)
                })
            })
            .collect();
        let mut idle = Vec::with_capacity(CONNECTIONS);
        for request in requests {
            let (connection, reply) = request.await.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.text());
            idle.push(connection);
        }
        let upstream = mock.connections_accepted();
        assert!(
            upstream > CONNECTIONS / 2,
            "the requests overlapped: {upstream} upstream connections"
        );

        // Freed per-request memory goes back to the system; what stays is what the idle
        // connections hold.
        let what = format!("{CONNECTIONS} idle client connections and {upstream} upstream connections");
        assert_rss_settles(pid, baseline, (CONNECTIONS, PER_PAIR), &what).await;

        // The idle connections still serve.
        mock.clear_default();
        for (i, connection) in idle.iter_mut().take(3).enumerate() {
            let reply = connection.send(chat(&format!("again-{i}"))).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
    }
}

/// Connections that each carry one large upload, then stay open.
const UPLOADS: usize = 40;

/// What one of them may hold once idle. hyper 1.12 as published keeps the read buffer the body
/// grew (up to `max_buf_size`, 408 KiB by default) for the connection's life: 430–460 KB each
/// here; the patched one gives it back (13–14 KB each).
const PER_IDLE_UPLOADER: u64 = 64 * 1024;

both_modes! {
    async fn keep_alive_connections_that_carried_a_1_mib_body_hold_under_64_kib_each_once_idle(mode: Mode) {
        let mock = MockProvider::start();
        let (gateway, baseline) = warmed(mode, &mock).await;
        let (addr, pid) = (gateway.addr(), gateway.pid());

        let body = format!(
            r#"{{"model":"gpt-x","messages":[{{"role":"user","content":"{}"}}]}}"#,
            "x".repeat(1024 * 1024)
        );
        let mut idle = Vec::with_capacity(UPLOADS);
        for i in 0..UPLOADS {
            let mut connection = Connection::open(addr).await;
            let reply = connection
                .send(client::chat_request(KEY, &format!("upload-{i}"), &body))
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            idle.push(connection);
        }

        let what = format!("{UPLOADS} idle connections that each carried a 1 MiB body");
        assert_rss_settles(pid, baseline, (UPLOADS, PER_IDLE_UPLOADER), &what).await;

        // A small request on one of them still goes through.
        let reply = idle[0].send(chat("small-after-large")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}
