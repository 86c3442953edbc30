//! A misbehaving upstream, in both serving modes: a huge answer (chunked and with a length) is
//! relayed whole as it arrives, never held, so ten at once leave the gateway's memory where it
//! was; endless headers, bad chunking, one endless SSE event and garbage each end with their
//! documented status or in-band error; and the gateway keeps serving after every one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode, rss_bytes};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::mock::hostile::{Abuse, HUGE_USAGE, HostileUpstream};
use http_body_util::BodyExt;

const KEY: &str = "sk-hostile-test-1";

/// The memory the gateway may grow by while ten huge answers run at once: connection buffers
/// and allocator slack, nowhere near one answer (README, "Limits under hostile input").
const RSS_OVERHEAD: u64 = 64 * 1024 * 1024;

/// A gateway with `gpt-x` on a well-behaved mock and one model per abuse, named `abuse-N`.
fn config(mode: Mode, mock: &MockProvider, abusers: &[&HostileUpstream]) -> GatewayConfig {
    let mut keys = format!(
        "  - {{display_name: up, provider: openai, api_key: sk-up, api_base: \"{}\"}}\n",
        mock.base_url()
    );
    let mut models =
        "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n"
            .to_owned();
    for (i, abuser) in abusers.iter().enumerate() {
        keys.push_str(&format!(
            "  - {{display_name: bad-{i}, provider: openai, api_key: sk-bad, api_base: \"{}\"}}\n",
            abuser.base_url()
        ));
        models.push_str(&format!(
            "  - {{display_name: abuse-{i}, provider: openai, model_name: up-x, provider_key: bad-{i}}}\n"
        ));
    }
    GatewayConfig::new(mode)
        .workers(Some(1))
        .resources(format!(
            "_format_version: \"1\"\nprovider_keys:\n{keys}models:\n{models}api_keys:\n  - {{display_name: k, key_env: HOSTILE_KEY, allowed_models: [\"*\"]}}\n"
        ))
        .env("HOSTILE_KEY", KEY)
        .extra("downstream:\n  sse_keepalive_interval_secs: 0\nupstream:\n  timeout_ms: 120000\n")
}

fn request(
    model: &str,
    stream: bool,
    id: &str,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let body = serde_json::json!({"model": model, "stream": stream, "messages": []}).to_string();
    client::chat_request(KEY, id, &body)
}

/// What a client got: the status, the body's length, its last bytes, whether it ended whole.
struct Received {
    status: u16,
    content_length: Option<usize>,
    len: usize,
    tail: Vec<u8>,
    whole: bool,
}

/// Sends `request` and reads the answer piece by piece, keeping only its length and tail.
async fn receive(
    addr: std::net::SocketAddr,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> Received {
    let response = client::send_streaming(addr, request).await;
    let status = response.status().as_u16();
    let content_length = response
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let mut body = response.into_body();
    let (mut len, mut tail) = (0, Vec::new());
    let whole = loop {
        match body.frame().await {
            None => break true,
            Some(Err(_)) => break false,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    len += data.len();
                    tail.extend_from_slice(&data);
                    let keep = tail.len().saturating_sub(4096);
                    tail.drain(..keep);
                }
            }
        }
    };
    Received {
        status,
        content_length,
        len,
        tail,
        whole,
    }
}

/// A normal request still gets its normal answer.
async fn still_serves(gateway: &Gateway) {
    let reply = client::send(gateway.addr(), request("gpt-x", false, "after")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

both_modes! {
    async fn a_huge_answer_is_relayed_whole_chunked_and_with_its_length(mode: Mode) {
        const SIZE: usize = 100 * 1000 * 1000;
        let mock = MockProvider::start();
        let chunked = HostileUpstream::start(Abuse::HugeChunked(SIZE));
        let with_length = HostileUpstream::start(Abuse::HugeWithLength(SIZE));
        let gateway = Gateway::start(&config(mode, &mock, &[&chunked, &with_length]).metrics());
        let expected = Abuse::huge_len(SIZE);
        for (model, id) in [("abuse-0", "huge-chunked"), ("abuse-1", "huge-length")] {
            let got = receive(gateway.addr(), request(model, false, id)).await;
            assert_eq!(got.status, 200, "{id}");
            assert!(got.whole, "{id}: the answer ended early");
            assert_eq!(got.len, expected, "{id}");
            assert!(got.tail.ends_with(b"\"total_tokens\":18}}"), "{id}");
            let line = gateway.access_line(id);
            assert_eq!(line["status"], 200, "{line}");
            assert_eq!(line["input_tokens"], HUGE_USAGE.0, "{line}");
            assert_eq!(line["output_tokens"], HUGE_USAGE.1, "{line}");
        }
        // A length the upstream declared reaches the client: a cut answer cannot pass for a
        // whole one.
        let got = receive(gateway.addr(), request("abuse-1", false, "length-again")).await;
        assert_eq!(got.content_length, Some(expected));
        still_serves(&gateway).await;
    }
}

both_modes! {
    async fn ten_huge_answers_at_once_leave_memory_where_it_was(mode: Mode) {
        const SIZE: usize = 32 * 1024 * 1024;
        let mock = MockProvider::start();
        let huge = HostileUpstream::start(Abuse::HugeChunked(SIZE));
        let gateway = Gateway::start(&config(mode, &mock, &[&huge]));
        still_serves(&gateway).await;
        let pid = gateway.pid();
        let idle = rss_bytes(pid);
        let answers: Vec<_> = (0..10)
            .map(|i| tokio::spawn(receive(gateway.addr(), request("abuse-0", false, &format!("ten-{i}")))))
            .collect();
        let mut peak = idle;
        while !answers.iter().all(|a| a.is_finished()) {
            peak = peak.max(rss_bytes(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for answer in answers {
            let got = answer.await.unwrap();
            assert_eq!((got.status, got.whole, got.len), (200, true, Abuse::huge_len(SIZE)));
        }
        assert!(
            peak < idle + RSS_OVERHEAD,
            "RSS went from {idle} to {peak} bytes while ten {SIZE}-byte answers ran"
        );
        still_serves(&gateway).await;
        // Memory comes back once the load is over: jemalloc's background thread purges freed
        // pages (README, "Memory"); RSS is back within twice its idle figure within a minute.
        assert!(
            gateway.thread_names().iter().any(|t| t == "jemalloc_bg_thd"),
            "{:?}",
            gateway.thread_names()
        );
        let by = std::time::Instant::now() + Duration::from_secs(60);
        while rss_bytes(pid) > 2 * idle && std::time::Instant::now() < by {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(rss_bytes(pid) <= 2 * idle, "RSS stayed at {} (idle {idle})", rss_bytes(pid));
    }
}

both_modes! {
    async fn a_broken_upstream_ends_with_its_documented_error_and_the_gateway_keeps_serving(mode: Mode) {
        let mock = MockProvider::start();
        let endless_headers = HostileUpstream::start(Abuse::EndlessHeaders);
        let bad_chunking = HostileUpstream::start(Abuse::BadChunking);
        let long_event = HostileUpstream::start(Abuse::LongEvent(50 * 1024 * 1024));
        let garbage = HostileUpstream::start(Abuse::Garbage);
        let gateway = Gateway::start(&config(
            mode,
            &mock,
            &[&endless_headers, &bad_chunking, &long_event, &garbage],
        ));
        let addr = gateway.addr();

        // Endless headers and garbage never make a response head: 502 before anything is sent.
        for (model, id) in [("abuse-0", "endless-headers"), ("abuse-3", "garbage")] {
            let reply = client::send(addr, request(model, false, id)).await;
            assert_eq!(reply.status, 502, "{id}: {}", reply.text());
            assert_eq!(reply.json()["error"]["code"], "upstream_unavailable", "{id}");
            still_serves(&gateway).await;
        }

        // Bad chunking after the head: the answer is cut, never ended as if it were whole.
        let got = receive(addr, request("abuse-1", false, "bad-chunking")).await;
        assert_eq!(got.status, 200);
        assert!(!got.whole, "a cut answer must not end cleanly");
        let line = gateway.access_line("bad-chunking");
        assert_eq!(line["error"], "stream_cut", "{line}");
        still_serves(&gateway).await;

        // One 50 MiB event: the stream ends with an error event once the event passes
        // `upstream.max_sse_event_bytes`, without reading the rest of it.
        let reply = client::send(addr, request("abuse-2", true, "long-event")).await;
        assert_eq!(reply.status, 200);
        let text = reply.text();
        assert!(text.contains("event: error"), "{text}");
        assert!(text.contains("\"code\":\"stream_event_too_large\""), "{text}");
        assert!(!text.contains("[DONE]"), "{text}");
        still_serves(&gateway).await;
    }
}
