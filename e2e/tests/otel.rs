//! OpenTelemetry export seen from outside, in both serving modes: what a receiver built on
//! OpenTelemetry's own protobuf definitions decodes (spans with their links and GenAI
//! attributes, usage events), the trace context the client sent continued to the provider,
//! the thread that sends, and requests untouched by a receiver that stalls, stops or refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, Mode};
use aisix_e2e::mock::Reply as Mock;
use aisix_e2e::prom::sample;
use aisix_e2e::routing::{KEY, Rig};
use aisix_e2e::sdk;
use aisix_e2e::third_party::otlp::Receiver;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
/// The W3C specification's example trace, as a client would send it.
const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// `chat`: `primary` first, then `backup`.
const FAILOVER: &str = "  - display_name: chat\n    routing:\n      targets:\n        - {model: primary, priority: 1}\n        - {model: backup}\n";

/// `priced`: `primary`'s upstream at a price (USD per 1 000 tokens).
const PRICED: &str = "  - {display_name: priced, provider: openai, model_name: up-primary, provider_key: p1, cost: {input_per_1k: 0.01, output_per_1k: 0.03}}\n";

/// The model OpenAI names in its answers for a request to an alias: its dated version.
const ANSWERED_BY: &str = "up-primary-2024-08-06";

/// The variables that turn export on towards `receiver`: the gateway's own key for the
/// switch, the standard ones for the rest.
fn otlp_env(
    receiver: &Receiver,
    extra: &[(&'static str, &'static str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("AISIX_OBSERVABILITY__OTLP__ENABLED", "true".to_owned()),
        ("AISIX_OBSERVABILITY__OTLP__INTERVAL", "100ms".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_SERVICE_NAME", "aisix-e2e".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn start(mode: Mode, receiver: &Receiver, extra: &[(&'static str, &'static str)]) -> Rig {
    let env = otlp_env(receiver, extra);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Rig::start(mode, FAILOVER, &env)
}

async fn traced_chat(rig: &Rig, model: &str, id: &str, traceparent: Option<&str>) -> client::Reply {
    chat_at(rig.gateway.addr(), model, id, traceparent).await
}

async fn chat_at(
    addr: std::net::SocketAddr,
    model: &str,
    id: &str,
    traceparent: Option<&str>,
) -> client::Reply {
    let auth = format!("Bearer {KEY}");
    let mut headers = vec![("authorization", auth.as_str()), ("x-request-id", id)];
    if let Some(traceparent) = traceparent {
        headers.push(("traceparent", traceparent));
        headers.push(("tracestate", "vendor=opaque"));
    }
    let body = json!({
        "model": model,
        "max_tokens": 7,
        "messages": [{"role": "user", "content": "a prompt that stays private"}],
    });
    client::send(
        addr,
        client::request(
            "POST",
            "/v1/chat/completions",
            &headers,
            Some(&body.to_string()),
        ),
    )
    .await
}

fn attr<'a>(record: &'a Value, key: &str) -> &'a Value {
    &record["attributes"][key]
}

/// The server span of the request tagged `id`, once its trace holds `spans` spans.
fn trace_of(receiver: &Receiver, id: &str, spans: usize) -> (Value, Vec<Value>) {
    let all = receiver.wait_for("traces", WAIT, |all| {
        all.iter()
            .find(|s| attr(s, "aisix.request_id") == id)
            .is_some_and(|server| {
                all.iter()
                    .filter(|s| s["trace_id"] == server["trace_id"])
                    .count()
                    >= spans
            })
    });
    let server = all
        .iter()
        .find(|s| attr(s, "aisix.request_id") == id)
        .unwrap()
        .clone();
    let mut attempts: Vec<Value> = all
        .iter()
        .filter(|s| s["parent_span_id"] == server["span_id"])
        .cloned()
        .collect();
    attempts.sort_by_key(|s| attr(s, "aisix.attempt").as_i64());
    (server, attempts)
}

/// Sends requests tagged `<prefix>-<n>` until one of them reaches `receiver` (export resumed),
/// each answered 200; panics after [`WAIT`].
async fn until_exported(rig: &Rig, receiver: &Receiver, prefix: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    for n in 0.. {
        let id = format!("{prefix}-{n}");
        assert_eq!(traced_chat(rig, "primary", &id, None).await.status, 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
        if receiver
            .records("traces")
            .iter()
            .any(|s| attr(s, "aisix.request_id") == id.as_str())
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{prefix}: export did not resume"
        );
    }
}

async fn dropped(rig: &Rig, signal: &str) -> f64 {
    sample(
        &rig.scrape().await,
        "aisix_otel_dropped_total",
        &[("signal", signal)],
    )
}

both_modes! {
    async fn spans_and_usage_events_carry_links_genai_attributes_and_the_client_s_trace(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[]);
        let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
        let reply = traced_chat(&rig, "primary", "otel-traced", Some(&traceparent)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let usage = reply.json()["usage"].clone();

        // The provider was called in the client's trace, as the attempt's child.
        let upstream = rig.primary.last_request().unwrap();
        let sent = upstream.header("traceparent").expect("the upstream request's traceparent");
        assert!(sent.starts_with(&format!("00-{CLIENT_TRACE}-")) && sent.ends_with("-01"), "{sent}");
        assert_eq!(upstream.header("tracestate"), Some("vendor=opaque"));
        let attempt_id = &sent[36..52];

        let (server, attempts) = trace_of(&receiver, "otel-traced", 2);
        assert_eq!(server["trace_id"], CLIENT_TRACE);
        assert_eq!(server["parent_span_id"], CLIENT_SPAN);
        assert_eq!(server["kind"], 2, "SPAN_KIND_SERVER");
        assert_eq!(server["trace_state"], "vendor=opaque");
        assert_eq!(server["name"], "chat primary");
        for (key, value) in [
            ("gen_ai.operation.name", json!("chat")),
            ("gen_ai.provider.name", json!("openai")),
            ("gen_ai.request.model", json!("primary")),
            ("gen_ai.response.model", json!("up-primary")),
            ("gen_ai.request.max_tokens", json!(7)),
            ("gen_ai.usage.input_tokens", usage["prompt_tokens"].clone()),
            ("gen_ai.usage.output_tokens", usage["completion_tokens"].clone()),
            ("server.address", json!("127.0.0.1")),
            ("http.response.status_code", json!(200)),
            ("aisix.api_key.name", json!("team")),
            ("aisix.ending", json!("success")),
        ] {
            assert_eq!(attr(&server, key), &value, "{key} in {server:#}");
        }
        assert!(server["end"].as_u64() >= server["start"].as_u64());

        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        let attempt = &attempts[0];
        assert_eq!(attempt["span_id"], attempt_id);
        assert_eq!(attempt["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(attr(attempt, "aisix.model"), "primary");
        assert_eq!(attr(attempt, "http.response.status_code"), 200);
        assert_eq!(attr(attempt, "server.port"), rig.primary.addr().port());

        // The usage event, in the same trace.
        let logs = receiver.wait_for("logs", WAIT, |logs| {
            logs.iter().any(|l| attr(l, "aisix.request_id") == "otel-traced")
        });
        let event = logs.iter().find(|l| attr(l, "aisix.request_id") == "otel-traced").unwrap();
        assert_eq!(event["event_name"], "aisix.usage");
        assert_eq!(event["trace_id"], CLIENT_TRACE);
        assert_eq!(event["span_id"], server["span_id"]);
        assert_eq!(attr(event, "aisix.api_key.name"), "team");
        assert_eq!(attr(event, "aisix.model"), "primary");
        assert_eq!(attr(event, "gen_ai.usage.input_tokens"), &usage["prompt_tokens"]);
        assert_eq!(attr(event, "gen_ai.usage.output_tokens"), &usage["completion_tokens"]);
        assert_eq!(attr(event, "aisix.ending"), "success");

        // The resource names the service and the sending thread; the export was protobuf,
        // uncompressed (OTLP's default); no key and no content anywhere.
        assert_eq!(server["resource"]["service.name"], "aisix-e2e");
        assert_eq!(server["content_type"], "application/x-protobuf");
        assert!(server["encoding"].is_null(), "{}", server["encoding"]);
        // The control runtime runs on the process's main thread.
        let thread = server["resource"]["aisix.exporter.thread"].as_str().unwrap();
        assert_eq!(thread, "main");
        let everything = format!("{:?}{:?}", receiver.records("traces"), receiver.records("logs"));
        for secret in [KEY, "sk-p1-secret", "a prompt that stays private"] {
            assert!(!everything.contains(secret), "{secret} was exported");
        }
        assert!(attr(&server, "gen_ai.input.messages").is_null());
    }
}

both_modes! {
    async fn retries_and_fallbacks_are_sibling_attempt_spans(mode: Mode) {
        let receiver = Receiver::start();
        // Compressed as a collector across a slow link is sent to: the receiver gunzips it.
        let rig = start(mode, &receiver, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]);
        rig.primary.enqueue(Mock::openai_error(503, "overloaded", "down"));
        let reply = traced_chat(&rig, "chat", "otel-fallback", None).await;
        assert_eq!(reply.status, 200, "{}", reply.text());

        let (server, attempts) = trace_of(&receiver, "otel-fallback", 3);
        assert_eq!(server["encoding"], "gzip", "{server:#}");
        assert_eq!(server["parent_span_id"], "", "a root span");
        assert_eq!(attr(&server, "gen_ai.request.model"), "chat");
        assert_eq!(attr(&server, "gen_ai.response.model"), "up-backup");
        assert_eq!(attempts.len(), 2, "{attempts:#?}");
        let (first, second) = (&attempts[0], &attempts[1]);
        assert_eq!(attr(first, "aisix.model"), "primary");
        assert_eq!(attr(first, "http.response.status_code"), 503);
        assert!(attr(first, "error.type").is_string(), "{first:#}");
        assert_eq!(first["status_code"], 2, "STATUS_CODE_ERROR");
        assert_eq!(attr(second, "aisix.model"), "backup");
        assert_eq!(attr(second, "http.response.status_code"), 200);
        assert_eq!(second["status_code"], 0);
        assert!(second["start"].as_u64() >= first["end"].as_u64());
        // Each provider saw its own attempt's context.
        for (mock, attempt) in [(&rig.primary, first), (&rig.backup, second)] {
            let sent = mock.last_request().unwrap();
            let sent = sent.header("traceparent").unwrap();
            assert_eq!(&sent[3..35], server["trace_id"].as_str().unwrap());
            assert_eq!(&sent[36..52], attempt["span_id"].as_str().unwrap());
        }
    }
}

both_modes! {
    async fn no_trace_header_goes_upstream_when_export_is_off(mode: Mode) {
        let rig = Rig::start(mode, FAILOVER, &[]);
        let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
        let reply = traced_chat(&rig, "primary", "otel-off", Some(&traceparent)).await;
        assert_eq!(reply.status, 200);
        let upstream = rig.primary.last_request().unwrap();
        assert_eq!(upstream.header("traceparent"), None);
        assert_eq!(upstream.header("tracestate"), None);
    }
}

/// Bytes each thread of `gateway` has written so far, by thread id, with its name.
fn writes(gateway: &Gateway) -> HashMap<String, (String, u64)> {
    let mut threads = HashMap::new();
    let tasks = format!("/proc/{}/task", gateway.pid());
    for entry in std::fs::read_dir(tasks).unwrap().flatten() {
        let (Ok(comm), Ok(io)) = (
            std::fs::read_to_string(entry.path().join("comm")),
            std::fs::read_to_string(entry.path().join("io")),
        ) else {
            continue;
        };
        let written = io
            .lines()
            .find_map(|l| l.strip_prefix("wchar:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        threads.insert(
            entry.file_name().to_string_lossy().into_owned(),
            (comm.trim().to_owned(), written),
        );
    }
    threads
}

both_modes! {
    async fn the_export_is_written_by_a_thread_that_is_not_a_worker(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[("AISIX_OBSERVABILITY__OTLP__INTERVAL", "1s")]);
        let worker = |name: &str| name.starts_with("tpc-") || name == "tokio-rt-worker";
        // A request is answered (the workers' writes are done) well before the next collection:
        // what a thread writes between the answer and the receiver's record of it is the
        // export. When a collection happens to fall inside the request, try again. A worker may
        // still wake another thread in that window (an eventfd write of 8 bytes, counted by
        // `wchar` like any write): only a thread that wrote at least an export's size counts.
        const EXPORT_BYTES: u64 = 256;
        for round in 0..10 {
            let id = format!("otel-thread-{round}");
            let reply = traced_chat(&rig, "primary", &id, None).await;
            assert_eq!(reply.status, 200);
            let before = writes(&rig.gateway);
            trace_of(&receiver, &id, 2);
            let after = writes(&rig.gateway);
            let senders: Vec<(&str, &str)> = after
                .iter()
                .filter(|(tid, (_, written))| {
                    before
                        .get(*tid)
                        .is_some_and(|(_, was)| written.saturating_sub(*was) >= EXPORT_BYTES)
                })
                .map(|(tid, (name, _))| (tid.as_str(), name.as_str()))
                .collect();
            if senders.is_empty() {
                continue;
            }
            assert!(!senders.iter().any(|(_, name)| worker(name)), "a worker wrote the export: {senders:?}");
            // The control runtime runs on the process's main thread (its id is the pid).
            let main = rig.gateway.pid().to_string();
            assert!(senders.iter().any(|(tid, _)| *tid == main), "{senders:?}");
            return;
        }
        panic!("no export was seen being written in 10 rounds");
    }
}

both_modes! {
    async fn a_stalled_stopped_or_refusing_receiver_changes_nothing_for_requests(mode: Mode) {
        let mut receiver = Receiver::start();
        let rig = start(mode, &receiver, &[
            ("AISIX_OBSERVABILITY__OTLP__QUEUE_SIZE", "4"),
            ("AISIX_OBSERVABILITY__OTLP__TIMEOUT", "300ms"),
        ]);
        assert_eq!(traced_chat(&rig, "primary", "otel-before", None).await.status, 200);
        trace_of(&receiver, "otel-before", 2);
        assert_eq!(dropped(&rig, "traces").await, 0.0);
        // What the receiver accepted is counted once its answer is in.
        let deadline = std::time::Instant::now() + WAIT;
        while sample(&rig.scrape().await, "aisix_otel_exported_total", &[("signal", "traces")]) < 1.0 {
            assert!(std::time::Instant::now() < deadline, "no export counted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Each fault: every request still answered as before; records lost are counted; once
        // the receiver is back, a new request's spans arrive.
        for fault in ["stalled", "stopped", "refusing"] {
            let lost = dropped(&rig, "logs").await;
            match fault {
                "stalled" => receiver.stall(),
                "stopped" => receiver.stop(),
                _ => receiver.refuse(true),
            }
            for n in 0..20 {
                let reply = traced_chat(&rig, "primary", &format!("otel-{fault}-{n}"), None).await;
                assert_eq!(reply.status, 200, "{fault}: {}", reply.text());
            }
            let deadline = std::time::Instant::now() + WAIT;
            while dropped(&rig, "logs").await <= lost {
                assert!(std::time::Instant::now() < deadline, "{fault}: no drop counted");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            match fault {
                "stalled" => receiver.resume(),
                "stopped" => receiver.restart(),
                _ => receiver.refuse(false),
            }
            // Records queued while the receiver was away may fill the queues until the exporter
            // has worked through them (a stalled try waits out its timeout first).
            until_exported(&rig, &receiver, &format!("otel-after-{fault}")).await;
        }
    }
}

both_modes! {
    async fn a_client_traced_by_the_opentelemetry_sdk_sees_one_trace_to_the_provider(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[]);
        let (status, printed) = sdk::run_python(
            "otel_sdk_client.py",
            vec![
                ("OTEL_CLIENT_GATEWAY", rig.gateway.url("")),
                ("OTEL_CLIENT_KEY", KEY.to_owned()),
                ("OTEL_CLIENT_MODEL", "chat".to_owned()),
                ("OTEL_CLIENT_RECEIVER", receiver.endpoint()),
            ],
        )
        .await;
        assert!(status.success(), "{printed}");
        let ids: Value = printed
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no ids printed:\n{printed}"));
        let trace = ids["trace_id"].as_str().unwrap();
        let spans = receiver.wait_for("traces", WAIT, |all| {
            all.iter().filter(|s| s["trace_id"] == trace).count() >= 3
        });
        let in_trace: Vec<&Value> = spans.iter().filter(|s| s["trace_id"] == trace).collect();
        let client_span = in_trace
            .iter()
            .find(|s| s["resource"]["service.name"] == "sdk-client")
            .expect("the SDK's own span");
        assert_eq!(client_span["span_id"], ids["span_id"]);
        let server = in_trace.iter().find(|s| s["kind"] == 2).expect("the gateway's server span");
        assert_eq!(server["parent_span_id"], ids["span_id"]);
        assert_eq!(server["resource"]["service.name"], "aisix-e2e");
        let attempt = in_trace.iter().find(|s| s["kind"] == 3).expect("the attempt's span");
        assert_eq!(attempt["parent_span_id"], server["span_id"]);
        let upstream = rig.primary.last_request().unwrap();
        let sent = upstream.header("traceparent").unwrap();
        assert_eq!(sent, format!("00-{trace}-{}-01", attempt["span_id"].as_str().unwrap()));
    }
}

both_modes! {
    async fn the_prompt_is_exported_only_with_capture_content(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[("AISIX_OBSERVABILITY__OTLP__CAPTURE_CONTENT", "true")]);
        let reply = traced_chat(&rig, "primary", "otel-content", None).await;
        assert_eq!(reply.status, 200);
        let (server, _) = trace_of(&receiver, "otel-content", 2);
        let prompt = attr(&server, "gen_ai.input.messages").as_str().unwrap();
        assert!(prompt.contains("a prompt that stays private"), "{prompt}");
    }
}

/// `n` chat requests to `primary`, `concurrency` at a time, tagged `<prefix>-<i>`: each is
/// answered 200.
async fn burst(rig: &Rig, prefix: &str, n: usize, concurrency: usize) {
    let addr = rig.gateway.addr();
    let mut sent = 0;
    while sent < n {
        let mut wave = tokio::task::JoinSet::new();
        for i in sent..n.min(sent + concurrency) {
            let id = format!("{prefix}-{i}");
            wave.spawn(async move { chat_at(addr, "primary", &id, None).await });
        }
        sent = n.min(sent + concurrency);
        while let Some(reply) = wave.join_next().await {
            let reply = reply.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
    }
}

/// How many of `records` belong to requests tagged `<prefix>-…`, each counted once.
fn tagged(records: &[Value], prefix: &str) -> usize {
    let ids: std::collections::HashSet<&str> = records
        .iter()
        .filter_map(|r| attr(r, "aisix.request_id").as_str())
        .filter(|id| id.starts_with(prefix))
        .collect();
    ids.len()
}

both_modes! {
    async fn a_burst_far_beyond_max_batch_is_exported_whole_with_nothing_dropped(mode: Mode) {
        let receiver = Receiver::start();
        // Queues of 64 collected once a second would drop most of the burst: the workers wake
        // the exporter once per batch of 16, and it drains the queues as they fill.
        let rig = start(mode, &receiver, &[
            ("AISIX_OBSERVABILITY__OTLP__INTERVAL", "1s"),
            ("AISIX_OBSERVABILITY__OTLP__MAX_BATCH", "16"),
            ("AISIX_OBSERVABILITY__OTLP__QUEUE_SIZE", "64"),
        ]);
        const N: usize = 320;
        burst(&rig, "otel-burst", N, 32).await;
        receiver.wait_for("logs", WAIT, |logs| tagged(logs, "otel-burst") == N);
        receiver.wait_for("traces", WAIT, |spans| tagged(spans, "otel-burst") == N);
        assert_eq!(dropped(&rig, "traces").await, 0.0);
        assert_eq!(dropped(&rig, "logs").await, 0.0);
    }
}

both_modes! {
    async fn what_is_queued_at_sigterm_is_sent_before_exit(mode: Mode) {
        let receiver = Receiver::start();
        // Neither the interval nor a full batch comes before the signal: only the shutdown
        // flush sends these.
        let mut rig = start(mode, &receiver, &[("AISIX_OBSERVABILITY__OTLP__INTERVAL", "60s")]);
        const N: usize = 40;
        burst(&rig, "otel-flush", N, 8).await;
        rig.gateway.signal(libc::SIGTERM);
        let status = rig.gateway.wait_exit(WAIT).expect("exits after the drain");
        assert_eq!(status.code(), Some(0), "{}", rig.gateway.logs());
        let spans = receiver.records("traces");
        let servers: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 2).collect();
        assert_eq!(tagged(&spans, "otel-flush"), N, "{}", rig.gateway.logs());
        assert_eq!(servers.len(), N);
        assert_eq!(tagged(&receiver.records("logs"), "otel-flush"), N);
    }
}

both_modes! {
    async fn the_response_model_is_the_one_the_answer_names_and_a_priced_request_carries_its_cost(mode: Mode) {
        let receiver = Receiver::start();
        let env = otlp_env(&receiver, &[]);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let rig = Rig::start(mode, &format!("{FAILOVER}{PRICED}"), &env);

        // A whole answer, relayed as it is.
        rig.primary.enqueue(Mock::status(200).json(json!({
            "id": "chatcmpl-dated",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": ANSWERED_BY,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 2000, "total_tokens": 3000},
        })));
        let reply = traced_chat(&rig, "priced", "otel-priced", None).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        // A stream, relayed event by event.
        rig.primary.enqueue(Mock::chat_stream(ANSWERED_BY, &["Hel", "lo"], 9));
        let reply = rig.chat("primary", true, "otel-dated-stream", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());

        // 1 000 input tokens at $0.01 and 2 000 output tokens at $0.03 per 1 000.
        let cost = 0.01 + 2.0 * 0.03;
        let (server, attempts) = trace_of(&receiver, "otel-priced", 2);
        assert_eq!(attr(&server, "gen_ai.request.model"), "priced");
        assert_eq!(attr(&server, "gen_ai.response.model"), ANSWERED_BY);
        assert_eq!(attr(&attempts[0], "gen_ai.request.model"), "up-primary");
        let spent = attr(&server, "aisix.cost_usd").as_f64().unwrap();
        assert!((spent - cost).abs() < 1e-9, "{server:#}");
        let logs = receiver.wait_for("logs", WAIT, |logs| {
            logs.iter().any(|l| attr(l, "aisix.request_id") == "otel-priced")
        });
        let event = logs.iter().find(|l| attr(l, "aisix.request_id") == "otel-priced").unwrap();
        assert_eq!(attr(event, "gen_ai.response.model"), ANSWERED_BY);
        assert_eq!(attr(event, "gen_ai.usage.input_tokens"), 1000);
        assert_eq!(attr(event, "gen_ai.usage.output_tokens"), 2000);
        let spent = attr(event, "aisix.cost_usd").as_f64().unwrap();
        assert!((spent - cost).abs() < 1e-9, "{event:#}");

        let (streamed, _) = trace_of(&receiver, "otel-dated-stream", 2);
        assert_eq!(attr(&streamed, "gen_ai.request.model"), "primary");
        assert_eq!(attr(&streamed, "gen_ai.response.model"), ANSWERED_BY);
        assert_eq!(attr(&streamed, "aisix.stream"), true);
        // An unpriced model's request carries no cost.
        assert!(attr(&streamed, "aisix.cost_usd").is_null(), "{streamed:#}");
    }
}

both_modes! {
    async fn an_otlp_grpc_collector_receives_the_spans_and_usage_events_compressed_or_not(mode: Mode) {
        // A collector that speaks only OTLP/gRPC: grpcio serving OpenTelemetry's own
        // TraceService and LogsService. Gzip in this rig (grpcio decompresses before the
        // servicer sees it; the frame's flag is pinned by a unit test, `Body::of`'s); the one
        // after sends uncompressed.
        let receiver = Receiver::start_grpc();
        let rig = start(mode, &receiver, &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ]);
        let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
        let reply = traced_chat(&rig, "primary", "otel-grpc", Some(&traceparent)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let (server, attempts) = trace_of(&receiver, "otel-grpc", 2);
        assert_eq!(server["protocol"], "grpc");
        assert_eq!(server["user_agent"], format!("aisix/{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(server["trace_id"], CLIENT_TRACE);
        assert_eq!(server["parent_span_id"], CLIENT_SPAN);
        assert_eq!(attr(&server, "gen_ai.request.model"), "primary");
        assert_eq!(attr(&server, "http.response.status_code"), 200);
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        assert_eq!(attr(&attempts[0], "aisix.model"), "primary");
        let logs = receiver.wait_for("logs", WAIT, |logs| {
            logs.iter().any(|l| attr(l, "aisix.request_id") == "otel-grpc")
        });
        let event = logs.iter().find(|l| attr(l, "aisix.request_id") == "otel-grpc").unwrap();
        assert_eq!(event["span_id"], server["span_id"]);
        assert_eq!(event["event_name"], "aisix.usage");
        drop(rig);

        // Uncompressed; the collector answering UNAVAILABLE (a retryable status) loses
        // records, counted, and none of the requests; once it accepts again, export resumes.
        let rig = start(mode, &receiver, &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("AISIX_OBSERVABILITY__OTLP__TIMEOUT", "500ms"),
        ]);
        assert_eq!(traced_chat(&rig, "primary", "otel-grpc-plain", None).await.status, 200);
        trace_of(&receiver, "otel-grpc-plain", 2);
        receiver.refuse(true);
        for n in 0..5 {
            let reply = traced_chat(&rig, "primary", &format!("otel-grpc-refused-{n}"), None).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
        let deadline = std::time::Instant::now() + WAIT;
        while dropped(&rig, "traces").await < 1.0 {
            assert!(std::time::Instant::now() < deadline, "no drop counted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        receiver.refuse(false);
        until_exported(&rig, &receiver, "otel-grpc-after").await;
        let refused = receiver.records("traces");
        assert!(
            !refused.iter().any(|s| attr(s, "aisix.request_id").as_str().is_some_and(|id| id.starts_with("otel-grpc-refused-"))),
            "a refused export was recorded"
        );
    }
}

both_modes! {
    async fn an_otlp_grpc_collector_over_tls_is_reached_by_alpn_h2_with_its_certificate_verified(mode: Mode) {
        // grpcio over TLS with a certificate for localhost, which the gateway trusts through
        // SSL_CERT_FILE (the system store honours it): the exporter's client offers `h2` by
        // ALPN and verifies the certificate against the name it dialled.
        let receiver = Receiver::start_grpc_tls();
        let endpoint = format!("https://localhost:{}", receiver.addr.port());
        let cert = receiver.certificate();
        let rig = Rig::start(mode, FAILOVER, &[
            ("AISIX_OBSERVABILITY__OTLP__ENABLED", "true"),
            ("AISIX_OBSERVABILITY__OTLP__INTERVAL", "100ms"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("SSL_CERT_FILE", cert.to_str().unwrap()),
        ]);
        assert_eq!(traced_chat(&rig, "primary", "otel-grpc-tls", None).await.status, 200);
        let (server, attempts) = trace_of(&receiver, "otel-grpc-tls", 2);
        assert_eq!(server["protocol"], "grpc");
        assert_eq!(server["transport_security"], "ssl");
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        receiver.wait_for("logs", WAIT, |logs| {
            logs.iter().any(|l| attr(l, "aisix.request_id") == "otel-grpc-tls")
        });
        assert_eq!(dropped(&rig, "traces").await, 0.0);
        drop(rig);

        // Without the certificate trusted, nothing is sent: the records are dropped and
        // counted, and the request is answered as ever.
        let untrusting = Rig::start(mode, FAILOVER, &[
            ("AISIX_OBSERVABILITY__OTLP__ENABLED", "true"),
            ("AISIX_OBSERVABILITY__OTLP__INTERVAL", "100ms"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ]);
        assert_eq!(traced_chat(&untrusting, "primary", "otel-grpc-untrusted", None).await.status, 200);
        let deadline = std::time::Instant::now() + WAIT;
        while dropped(&untrusting, "traces").await < 1.0 {
            assert!(std::time::Instant::now() < deadline, "an untrusted collector was sent to");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !receiver.records("traces").iter().any(|s| attr(s, "aisix.request_id") == "otel-grpc-untrusted")
        );
    }
}

async fn exported(rig: &Rig, signal: &str) -> f64 {
    sample(
        &rig.scrape().await,
        "aisix_otel_exported_total",
        &[("signal", signal)],
    )
}

/// `signal`'s records counted exported and dropped, once together they come to `n`.
async fn settled(rig: &Rig, signal: &str, n: f64) -> (f64, f64) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let counted = (exported(rig, signal).await, dropped(rig, signal).await);
        if counted.0 + counted.1 >= n {
            return counted;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{signal}: {counted:?} exported and dropped, not {n} in all"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tries of `kind` after the one at `from` in `tries`.
fn later_tries<'a>(tries: &'a [Value], from: usize, kind: &Value) -> Vec<&'a Value> {
    tries[from + 1..]
        .iter()
        .filter(|t| t["kind"] == *kind)
        .collect()
}

/// What a collector may ask of the exporter beyond its status, the same over both protocols:
/// a partial success (its rejected records dropped and counted, nothing sent again), a
/// throttling refusal's wait (the next try no sooner), and a wait longer than a batch is held
/// (the batch dropped at once). `rig` exports to `receiver`, which has had nothing yet.
async fn a_collector_s_partial_success_and_throttling_are_honoured(rig: &Rig, receiver: &Receiver) {
    // One request: two spans (the server's and its attempt's) and one usage event, of which
    // the collector rejects one of each export's records.
    receiver.accept_in_part(Some((1, "1 span had an invalid attribute")));
    assert_eq!(
        traced_chat(rig, "primary", "otel-partial", None)
            .await
            .status,
        200
    );
    assert_eq!(settled(rig, "traces", 2.0).await, (1.0, 1.0));
    assert_eq!(settled(rig, "logs", 1.0).await, (0.0, 1.0));
    // Counted once every try is over: an accepted export is not sent again.
    let tries = receiver.tries();
    for kind in ["traces", "logs"] {
        assert_eq!(
            tries.iter().filter(|t| t["kind"] == kind).count(),
            1,
            "{tries:#?}"
        );
    }
    let logs = rig.gateway.logs();
    assert!(logs.contains("1 span had an invalid attribute"), "{logs}");
    receiver.accept_in_part(None);

    // Throttled, asking for 2 s: the export is sent again, no sooner, and nothing is lost.
    receiver.throttle_next(2);
    assert_eq!(
        traced_chat(rig, "primary", "otel-throttled", None)
            .await
            .status,
        200
    );
    assert_eq!(settled(rig, "traces", 4.0).await, (3.0, 1.0));
    assert_eq!(settled(rig, "logs", 2.0).await, (1.0, 1.0));
    trace_of(receiver, "otel-throttled", 2);
    let tries = receiver.tries();
    let at = tries
        .iter()
        .position(|t| t["answered"] == "throttled")
        .expect("a throttled try");
    let again = later_tries(&tries, at, &tries[at]["kind"]);
    assert_eq!(again.len(), 1, "{tries:#?}");
    assert_eq!(again[0]["answered"], "accepted");
    let waited = again[0]["at"].as_f64().unwrap() - tries[at]["at"].as_f64().unwrap();
    assert!(
        waited >= 1.9,
        "tried again {waited} s after a throttle asking for 2 s"
    );

    // Asking for 120 s, longer than a batch is held: that export is dropped at once and
    // counted, and not sent again; the other signal's goes as ever.
    let before = receiver.tries().len();
    receiver.throttle_next(120);
    assert_eq!(
        traced_chat(rig, "primary", "otel-throttled-long", None)
            .await
            .status,
        200
    );
    let traces = settled(rig, "traces", 6.0).await;
    let logs = settled(rig, "logs", 3.0).await;
    let tries = receiver.tries();
    let at = before
        + tries[before..]
            .iter()
            .position(|t| t["answered"] == "throttled")
            .expect("a throttled try");
    let kind = tries[at]["kind"].clone();
    assert!(later_tries(&tries, at, &kind).is_empty(), "{tries:#?}");
    if kind == "traces" {
        assert_eq!((traces, logs), ((3.0, 3.0), (2.0, 1.0)));
    } else {
        assert_eq!((traces, logs), ((5.0, 1.0), (1.0, 2.0)));
    }
    let logs = rig.gateway.logs();
    assert!(
        logs.contains("longer than the 30s a batch is held"),
        "{logs}"
    );
}

both_modes! {
    async fn an_otlp_http_collector_s_partial_success_and_retry_after_are_honoured(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[]);
        a_collector_s_partial_success_and_throttling_are_honoured(&rig, &receiver).await;
    }
}

both_modes! {
    async fn an_otlp_grpc_collector_s_partial_success_retry_info_and_resource_exhausted_are_honoured(mode: Mode) {
        let receiver = Receiver::start_grpc();
        let rig = start(mode, &receiver, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        a_collector_s_partial_success_and_throttling_are_honoured(&rig, &receiver).await;

        // RESOURCE_EXHAUSTED with no RetryInfo: the collector says nothing of recovering, so
        // the records are dropped after one try, as OTLP's specification says.
        let traces = settled(&rig, "traces", 6.0).await;
        let logs = settled(&rig, "logs", 3.0).await;
        receiver.exhaust(true);
        let before = receiver.tries().len();
        assert_eq!(traced_chat(&rig, "primary", "otel-exhausted", None).await.status, 200);
        assert_eq!(settled(&rig, "traces", 8.0).await, (traces.0, traces.1 + 2.0));
        assert_eq!(settled(&rig, "logs", 4.0).await, (logs.0, logs.1 + 1.0));
        let tries = receiver.tries();
        let exhausted: Vec<&Value> =
            tries[before..].iter().filter(|t| t["answered"] == "exhausted").collect();
        assert_eq!(exhausted.len(), 2, "one try of each signal: {tries:#?}");
    }
}

both_modes! {
    async fn a_collector_s_reply_past_64_kib_is_not_read_and_its_status_decides(mode: Mode) {
        let receiver = Receiver::start();
        receiver.long_replies(true);
        let rig = start(mode, &receiver, &[("AISIX_OBSERVABILITY__OTLP__TIMEOUT", "2s")]);
        // Accepted with 100 KiB after its message: delivered, once.
        assert_eq!(traced_chat(&rig, "primary", "otel-long-reply", None).await.status, 200);
        assert_eq!(settled(&rig, "traces", 2.0).await, (2.0, 0.0));
        assert_eq!(settled(&rig, "logs", 1.0).await, (1.0, 0.0));
        assert_eq!(receiver.tries().len(), 2, "{:#?}", receiver.tries());
        // A 503 with 100 KiB of body: tried again, as any 503, and dropped after the third.
        receiver.refuse(true);
        assert_eq!(traced_chat(&rig, "primary", "otel-long-refusal", None).await.status, 200);
        assert_eq!(settled(&rig, "traces", 4.0).await, (2.0, 2.0));
        assert_eq!(settled(&rig, "logs", 2.0).await, (1.0, 1.0));
        let refused = receiver.tries().iter().filter(|t| t["answered"] == "refused").count();
        assert_eq!(refused, 6, "three tries of each signal: {:#?}", receiver.tries());
    }
}

both_modes! {
    async fn a_collector_s_private_ca_and_a_client_certificate_are_used_over_mutual_tls(mode: Mode) {
        // grpcio asking every client for a certificate its CA signed. The gateway trusts that
        // CA alone (OTEL_EXPORTER_OTLP_CERTIFICATE, not the system's store) and offers the
        // client certificate the collector's CA issued.
        let receiver = Receiver::start_grpc_mtls();
        let endpoint = format!("https://localhost:{}", receiver.addr.port());
        let ca = receiver.authority();
        let (cert, key) = receiver.client_identity();
        let tls = [
            ("AISIX_OBSERVABILITY__OTLP__ENABLED", "true"),
            ("AISIX_OBSERVABILITY__OTLP__INTERVAL", "100ms"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_str().unwrap()),
        ];
        let mut identified = tls.to_vec();
        identified.push(("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert.to_str().unwrap()));
        identified.push(("OTEL_EXPORTER_OTLP_CLIENT_KEY", key.to_str().unwrap()));
        let rig = Rig::start(mode, FAILOVER, &identified);
        assert_eq!(traced_chat(&rig, "primary", "otel-mtls", None).await.status, 200);
        let (server, attempts) = trace_of(&receiver, "otel-mtls", 2);
        assert_eq!(server["transport_security"], "ssl");
        assert_eq!(server["client_name"], "aisix-exporter");
        assert_eq!(attempts.len(), 1, "{attempts:#?}");
        assert_eq!(dropped(&rig, "traces").await, 0.0);
        drop(rig);

        // With no client certificate, the collector refuses the handshake: the records are
        // dropped and counted, and the request is answered as ever.
        let anonymous = Rig::start(mode, FAILOVER, &tls);
        assert_eq!(traced_chat(&anonymous, "primary", "otel-mtls-anonymous", None).await.status, 200);
        let deadline = std::time::Instant::now() + WAIT;
        while dropped(&anonymous, "traces").await < 1.0 {
            assert!(std::time::Instant::now() < deadline, "no drop counted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !receiver.records("traces").iter().any(|s| attr(s, "aisix.request_id") == "otel-mtls-anonymous")
        );
        drop(anonymous);

        // A CA file that is not there: the gateway does not start, and says which file.
        let config = aisix_e2e::gateway::GatewayConfig::new(mode)
            .env("AISIX_OBSERVABILITY__OTLP__ENABLED", "true")
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/collector-ca.pem");
        let mut gateway = Gateway::spawn(&config);
        let status = gateway.wait_exit(WAIT).expect("exits at startup");
        assert!(!status.success());
        let logs = gateway.logs();
        assert!(
            logs.contains("tls.ca_cert_file /nonexistent/collector-ca.pem"),
            "{logs}"
        );
    }
}

both_modes! {
    async fn an_otlp_variable_aisix_does_not_read_is_named_in_a_warning_without_its_value(mode: Mode) {
        let receiver = Receiver::start();
        let rig = start(mode, &receiver, &[
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=an-unread-secret"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ]);
        assert_eq!(traced_chat(&rig, "primary", "otel-unread", None).await.status, 200);
        trace_of(&receiver, "otel-unread", 2);
        let logs = rig.gateway.logs();
        assert!(logs.contains("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), "{logs}");
        assert!(!logs.contains("an-unread-secret"), "{logs}");
        // OTEL_LOGS_EXPORTER=none: no usage event is sent.
        assert_eq!(exported(&rig, "logs").await, 0.0);
        assert!(receiver.records("logs").is_empty());
    }
}
