//! Micro-benchmarks of the request path's pieces: the model-field rewrite, the SSE usage scan,
//! a metrics emit through the handle cache, the API-key lookup and request-id generation.
//! Run with `cargo bench -p aisix-bench --bench hot_path`; compare runs on one machine only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use aisix_config::{Resources, hash_key, parse_resources};
use aisix_gateway::Snapshot;
use aisix_gateway::wire::{openai, sse, usage};
use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::emit::{self, RequestLabels};
use aisix_obs::metrics::labels::{Endpoint, Outcome, StatusClass, Worker};
use aisix_obs::request_id::RequestIds;
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};

const CHAT: &str = r#"{"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about thread-per-core servers and the kernel's SO_REUSEPORT."}],"temperature":0.7,"max_tokens":256,"stream":true}"#;

const CHUNK: &[u8] = br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" thread"},"finish_reason":null}],"usage":null}

"#;

const USAGE_CHUNK: &[u8] = br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":31,"completion_tokens":17,"total_tokens":48}}

"#;

const RESPONSE: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Cores hold their own queues / no lock between the sockets / the kernel deals cards"},"finish_reason":"stop"}],"usage":{"prompt_tokens":31,"completion_tokens":17,"total_tokens":48}}"#;

fn wire(c: &mut Criterion) {
    let body = Bytes::from_static(CHAT.as_bytes());
    let upstream_model = openai::json_string("gpt-4o-2024-08-06");
    c.bench_function("inspect_and_rewrite_chat_body", |b| {
        b.iter(|| {
            let inspected = openai::inspect(black_box(&body)).unwrap();
            black_box(inspected.rewrite(&body, Some(&upstream_model), inspected.stream))
        })
    });
    c.bench_function("sse_classify_content_chunk", |b| {
        b.iter(|| black_box(sse::classify(black_box(CHUNK))))
    });
    c.bench_function("sse_classify_usage_chunk", |b| {
        b.iter(|| black_box(sse::classify(black_box(USAGE_CHUNK))))
    });
    c.bench_function("sse_event_end", |b| {
        b.iter(|| black_box(sse::event_end(black_box(CHUNK))))
    });
    c.bench_function("usage_from_response", |b| {
        b.iter(|| black_box(usage::from_response(black_box(RESPONSE))))
    });
}

fn keys(c: &mut Criterion) {
    let mut yaml = String::from("_format_version: \"1\"\napi_keys:\n");
    for i in 0..1000 {
        let hash = hash_key(&format!("sk-bench-{i}"));
        let hex: String = hash.0.iter().map(|b| format!("{b:02x}")).collect();
        yaml.push_str(&format!(
            "  - display_name: k{i}\n    key_hash: {hex}\n    allowed_models: [\"*\"]\n"
        ));
    }
    let resources: Resources =
        parse_resources(&yaml, std::path::Path::new("bench.yaml"), &|_| None).unwrap();
    let snapshot = Snapshot::from_resources(&resources);
    c.bench_function("api_key_hash_and_lookup_of_1000", |b| {
        b.iter(|| {
            black_box(
                snapshot
                    .api_key(&hash_key(black_box("sk-bench-517")))
                    .is_some(),
            )
        })
    });
}

fn ids(c: &mut Criterion) {
    let ids = RequestIds::new(0);
    c.bench_function("request_id_next", |b| b.iter(|| black_box(ids.next())));
}

fn metrics(c: &mut Criterion) {
    let metrics = Metrics::build().unwrap();
    metrics::with_local_recorder(metrics.recorder(), || {
        metrics.register_worker(Worker::Tpc(0));
        let labels = RequestLabels {
            endpoint: Endpoint::ChatCompletions,
            api_key: "team-a",
            model: "gpt-4o",
            provider: "openai-main",
            status: StatusClass::from_status(200),
            outcome: Outcome::Success,
        };
        let facts = emit::RequestFacts {
            duration: Duration::from_micros(850),
            overhead: Duration::from_micros(20),
            tokens: Some((31, 17)),
            ttft: None,
        };
        c.bench_function("metrics_one_request_as_the_gateway_emits", |b| {
            b.iter(|| {
                let in_flight = emit::request_started(Endpoint::ChatCompletions);
                emit::request(black_box(&labels), black_box(&facts));
                drop(in_flight);
            })
        });
        c.bench_function("metrics_plain_macro_counter", |b| {
            b.iter(|| {
                ::metrics::counter!("aisix_requests_total",
                    "endpoint" => "chat_completions", "model" => black_box("gpt-4o"),
                    "provider" => "openai-main", "status_class" => "2xx", "outcome" => "success")
                .increment(1)
            })
        });
    });
}

fn access_log(c: &mut Criterion) {
    let entry = aisix_obs::access_log::Entry {
        request_id: "9f1c2b7a3d4e5f60000000000000002a",
        method: "POST",
        path: "/v1/chat/completions",
        status: 200,
        model: Some("gpt-4o"),
        provider: Some("openai-main"),
        key: Some("team-a"),
        input_tokens: Some(31),
        output_tokens: Some(17),
        latency: Duration::from_micros(12_345),
        ttft: None,
        upstream_status: Some(200),
        error: None,
        stream: false,
        overhead: Duration::from_micros(21),
        ..Default::default()
    };
    let mut out = Vec::with_capacity(1024);
    c.bench_function("access_log_format_line", |b| {
        b.iter(|| {
            out.clear();
            aisix_obs::access_log::format_line(
                &mut out,
                black_box(&entry),
                std::time::SystemTime::now(),
            );
            black_box(out.len())
        })
    });
}

criterion_group!(benches, wire, keys, ids, metrics, access_log);
criterion_main!(benches);
