//! The attempt loop and the stream relay driven through a scripted provider at the `Call`
//! seam ([`crate::provider::scripted`]): which direct models are called, in which order and how
//! often (retries, fallbacks, the retry budget, cooldowns, the hold before the first token), and
//! what the client's stream becomes when it is cut (continued on the next model, or ended with
//! the cut named). No sockets; time is paused, so backoffs cost nothing.

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use aisix_config::UpstreamConfig;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body::Body;
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::limit::memory_budget::MemoryBudget;
use crate::provider::events::{Events, Next, StreamSettings};
use crate::provider::scripted::{self, Reply};
use crate::relay::stream::{SseRelay, Starting};
use crate::request::deadline;
use crate::request::inbound;
use crate::route::Plan;
use crate::route::attempt::{Attempts, Ctx, Served};
use crate::snapshot::Snapshot;
use crate::target::refusal::UpstreamRefusal;
use crate::testing::record;
use crate::upstream::pool::Pool;
use crate::upstream::tls::tls_client_config;
use crate::wire::sse::KEEPALIVE;

/// Direct models `a`, `b`, `c` (`c` continues a cut answer, as vLLM does), and groups of them.
const RESOURCES: &str = r#"
_format_version: "1"
provider_keys: [{display_name: p, provider: openai, api_key: sk-scripted-key}]
models:
  - {display_name: a, provider: openai, model_name: up-a, provider_key: p}
  - {display_name: b, provider: openai, model_name: up-b, provider_key: p}
  - {display_name: c, provider: openai, model_name: up-c, provider_key: p, continuation: continue_final_message}
  - {display_name: budgeted, provider: openai, model_name: up-d, provider_key: p, retries: 10}
  - {display_name: ab, routing: {targets: [{model: a}, {model: b}]}}
  - {display_name: ab_retried, routing: {targets: [{model: a}, {model: b}], retries: 2}}
  - {display_name: budgeted_b, routing: {targets: [{model: budgeted}, {model: b}]}}
  - {display_name: abc_continued, routing: {targets: [{model: a}, {model: b}, {model: c}], continue_on_cut: true, max_fallbacks: 2}}
  - {display_name: ab_continued, routing: {targets: [{model: a}, {model: b}], continue_on_cut: true}}
"#;

fn snapshot() -> Snapshot {
    let resources =
        aisix_config::parse_resources(RESOURCES, std::path::Path::new("r.yaml"), &|_| None)
            .unwrap();
    Snapshot::from_resources(&resources)
}

/// The attempt loop of one chat request (a stream when `stream`) to `model`.
fn attempts(snapshot: &Snapshot, model: &str, stream: bool) -> Attempts {
    let body = format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"Hi"}}]}}"#
    );
    let inbound = inbound::inspect(Endpoint::ChatCompletions, Bytes::from(body)).unwrap();
    let ctx = Ctx {
        pool: Pool::new(&UpstreamConfig::default(), tls_client_config().unwrap()),
        deadlines: deadline::Defaults {
            request_body: Duration::from_secs(60),
            upstream: aisix_config::UpstreamTimeouts::default(),
        },
        stream: StreamSettings {
            keepalive: None,
            max_event_bytes: 1 << 20,
        },
        max_response_bytes: 1 << 20,
        budget: MemoryBudget::new(1 << 24, 1 << 24),
        clock: snapshot.clock,
    };
    let plan = Plan::new(snapshot.model(model).unwrap());
    Attempts::new(
        ctx,
        plan,
        inbound,
        HeaderValue::from_static("req-1"),
        Instant::now(),
    )
}

/// Runs one request to `model` to its answer or error.
async fn run(snapshot: &Snapshot, model: &str, stream: bool) -> Result<Served, GatewayError> {
    attempts(snapshot, model, stream).run(&mut record()).await
}

const WHOLE: &str = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;

fn status(code: u16) -> GatewayError {
    let status = StatusCode::from_u16(code).unwrap();
    let kind = if status.is_server_error() {
        ErrorKind::UpstreamServerError(status)
    } else {
        ErrorKind::UpstreamClientError(status)
    };
    GatewayError::new(kind, format!("upstream {code}"))
}

fn role() -> String {
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
        .to_owned()
}

fn text(piece: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{piece}\"}}}}]}}\n\n")
}

fn finished() -> Vec<String> {
    vec![
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
            .to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ]
}

/// Relays `events` to the end: what the client got, and the failure if it failed.
async fn relayed(mut events: Box<Events>) -> (String, Option<GatewayError>) {
    let mut out = Vec::new();
    loop {
        match poll_fn(|cx| events.poll_relay(cx)).await {
            Next::Data(data) => out.extend_from_slice(&data),
            Next::End => return (String::from_utf8(out).unwrap(), None),
            Next::Failed(error) => {
                out.extend_from_slice(&events.take_out());
                return (String::from_utf8(out).unwrap(), Some(error));
            }
        }
    }
}

/// The whole body the client gets from `relay`.
async fn body(mut relay: SseRelay) -> String {
    let mut out = Vec::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut relay).poll_frame(cx)).await {
        if let Ok(data) = frame.unwrap().into_data() {
            out.extend_from_slice(&data);
        }
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_5xx_is_retried_on_the_same_model_then_falls_over_to_the_next() {
    let snapshot = snapshot();
    scripted::script([
        ("a", Reply::Fail(status(502))),
        ("a", Reply::Fail(status(503))),
        ("a", Reply::Fail(status(500))),
        ("b", Reply::Whole(WHOLE)),
    ]);
    let served = run(&snapshot, "ab_retried", false).await.unwrap();
    assert!(matches!(served, Served::Complete { status, .. } if status == StatusCode::OK));
    assert_eq!(scripted::called(), ["a", "a", "a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn a_direct_model_is_not_retried_without_retries_and_its_5xx_is_the_answer() {
    let snapshot = snapshot();
    scripted::script([("a", Reply::Fail(status(502)))]);
    let error = run(&snapshot, "a", false).await.err().unwrap();
    assert_eq!(error.upstream_status(), Some(502));
    assert_eq!(scripted::called(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn a_4xx_is_the_answer_and_no_other_model_is_tried() {
    let snapshot = snapshot();
    scripted::script([("a", Reply::Fail(status(400)))]);
    let error = run(&snapshot, "ab_retried", false).await.err().unwrap();
    assert_eq!(error.upstream_status(), Some(400));
    assert_eq!(scripted::called(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn a_model_that_never_answered_falls_over_at_once_without_a_retry() {
    let snapshot = snapshot();
    let timeout = GatewayError::new(ErrorKind::UpstreamTimeout, "no answer");
    scripted::script([("a", Reply::Fail(timeout)), ("b", Reply::Whole(WHOLE))]);
    run(&snapshot, "ab_retried", false).await.unwrap();
    assert_eq!(scripted::called(), ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_key_falls_over_at_once_and_its_model_is_skipped_while_it_cools() {
    let snapshot = snapshot();
    let mut refused = status(401);
    refused.refusal = Some(UpstreamRefusal::Credentials);
    scripted::script([
        ("a", Reply::Fail(refused)),
        ("b", Reply::Whole(WHOLE)),
        ("b", Reply::Whole(WHOLE)),
    ]);
    run(&snapshot, "ab_retried", false).await.unwrap();
    assert_eq!(scripted::called(), ["a", "b"], "no retry of a refused key");
    run(&snapshot, "ab_retried", false).await.unwrap();
    assert_eq!(scripted::called(), ["b"], "a cools for the key cooldown");
}

#[tokio::test(start_paused = true)]
async fn retries_stop_when_the_model_s_retry_budget_is_spent() {
    let snapshot = snapshot();
    // `budgeted` may be retried 10 times, but its budget allows 3 retries (the floor) to a
    // model that had one request in the window.
    scripted::script((0..4).map(|_| ("budgeted", Reply::Fail(status(502)))));
    scripted::script([("b", Reply::Whole(WHOLE))]);
    run(&snapshot, "budgeted_b", false).await.unwrap();
    assert_eq!(
        scripted::called(),
        ["budgeted", "budgeted", "budgeted", "budgeted", "b"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_model_that_keeps_failing_cools_down_and_then_every_one_cooling_is_503() {
    let snapshot = snapshot();
    // Three failures in the window start a cooldown (the `upstream` defaults).
    for _ in 0..3 {
        scripted::script([("a", Reply::Fail(status(502))), ("b", Reply::Whole(WHOLE))]);
        run(&snapshot, "ab", false).await.unwrap();
        assert_eq!(scripted::called(), ["a", "b"]);
    }
    scripted::script([("b", Reply::Fail(status(502)))]);
    run(&snapshot, "ab", false).await.err().unwrap();
    assert_eq!(scripted::called(), ["b"], "a is cooling: skipped");
    for _ in 0..2 {
        scripted::script([("b", Reply::Fail(status(502)))]);
        run(&snapshot, "ab", false).await.err().unwrap();
    }
    scripted::calls();
    let error = run(&snapshot, "ab", false).await.err().unwrap();
    assert_eq!(error.kind, ErrorKind::AllCandidatesUnavailable);
    assert!(error.retry_after.is_some(), "{error:?}");
    assert!(scripted::called().is_empty(), "nothing is called");
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_before_its_first_token_is_held_back_and_the_next_model_answers() {
    let snapshot = snapshot();
    let mut answer = vec![role(), text("from b")];
    answer.extend(finished());
    scripted::script([
        ("a", Reply::Stream(vec![role()])),
        ("b", Reply::Stream(answer.clone())),
    ]);
    let Served::Stream(events) = run(&snapshot, "ab", true).await.unwrap() else {
        panic!("not a stream")
    };
    assert_eq!(scripted::called(), ["a", "b"]);
    let (out, failure) = relayed(events).await;
    assert!(failure.is_none(), "{failure:?}");
    assert_eq!(
        out,
        answer.concat(),
        "nothing of a's stream reaches the client"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_nothing_could_replace_is_not_held_and_its_cut_is_the_relay_s() {
    let snapshot = snapshot();
    scripted::script([("a", Reply::Stream(vec![role()]))]);
    let Served::Stream(events) = run(&snapshot, "a", true).await.unwrap() else {
        panic!("not a stream")
    };
    let (out, failure) = relayed(events).await;
    assert_eq!(out, role());
    assert_eq!(failure.map(|e| e.kind), Some(ErrorKind::StreamCut));
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_mid_answer_is_continued_by_the_next_model_that_continues() {
    let snapshot = snapshot();
    let mut rest = vec![role(), text("lo")];
    rest.extend(finished());
    scripted::script([
        ("a", Reply::Stream(vec![role(), text("Hel")])),
        ("c", Reply::Stream(rest)),
    ]);
    let mut attempts = attempts(&snapshot, "abc_continued", true);
    let mut record = record();
    let Served::Stream(events) = attempts.run(&mut record).await.unwrap() else {
        panic!("not a stream")
    };
    assert!(attempts.continues_cut_streams());
    let out = body(SseRelay::new(events, record, Some(Box::new(attempts)))).await;
    let calls = scripted::calls();
    let targets: Vec<&str> = calls.iter().map(|c| c.target.as_str()).collect();
    assert_eq!(
        targets,
        ["a", "c"],
        "b answers a trailing message anew: passed over"
    );
    let asked = String::from_utf8(calls[1].body.to_vec()).unwrap();
    assert!(
        asked.contains("\"continue_final_message\":true") && asked.contains("Hel"),
        "{asked}"
    );
    assert!(out.contains("\"Hel\"") && out.contains("\"lo\""), "{out}");
    assert_eq!(out.matches("\"role\"").count(), 1, "one role chunk: {out}");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
    assert!(!out.contains("event: error"), "{out}");
}

#[tokio::test(start_paused = true)]
async fn a_cut_no_model_can_continue_ends_with_the_cut_named_and_no_done() {
    let snapshot = snapshot();
    scripted::script([("a", Reply::Stream(vec![role(), text("Hel")]))]);
    let mut attempts = attempts(&snapshot, "ab_continued", true);
    let mut record = record();
    let Served::Stream(events) = attempts.run(&mut record).await.unwrap() else {
        panic!("not a stream")
    };
    let out = body(SseRelay::new(events, record, Some(Box::new(attempts)))).await;
    assert_eq!(scripted::called(), ["a"]);
    assert!(out.starts_with(&(role() + &text("Hel"))), "{out}");
    let error = out.rsplit("event: error\ndata: ").next().unwrap();
    assert!(
        error.contains("it was not continued: no other target of the group continues an answer"),
        "{out}"
    );
    assert!(!out.contains("[DONE]"), "{out}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_mid_answer_without_continuation_ends_with_an_error_event_and_no_done() {
    let snapshot = snapshot();
    scripted::script([("a", Reply::Stream(vec![role(), text("Hel")]))]);
    let mut attempts = attempts(&snapshot, "ab", true);
    let mut record = record();
    let Served::Stream(events) = attempts.run(&mut record).await.unwrap() else {
        panic!("not a stream")
    };
    assert!(!attempts.continues_cut_streams());
    let out = body(SseRelay::new(events, record, None)).await;
    assert_eq!(
        scripted::called(),
        ["a"],
        "after its first token a stream is never replaced"
    );
    assert!(out.contains("\"Hel\""), "{out}");
    assert!(out.contains("event: error\ndata: "), "{out}");
    assert!(out.contains("stream_cut"), "{out}");
    assert!(!out.contains("[DONE]"), "{out}");
}

/// The body of a stream whose attempt loop (for `model`) is still running when its head goes
/// out: keep-alive comments every second until the loop answers.
async fn held_body(snapshot: &Snapshot, model: &str) -> String {
    let mut attempts = attempts(snapshot, model, true);
    let starting: Starting = Box::pin(async move {
        let mut record = record();
        let answer = attempts.run(&mut record).await;
        (answer, Box::new(attempts), record)
    });
    body(SseRelay::starting(starting, Duration::from_secs(1))).await
}

/// `out` without the keep-alive comments it starts with, and how many there were.
fn after_keepalives(out: &str) -> (usize, &str) {
    let keepalive = std::str::from_utf8(KEEPALIVE).unwrap();
    let rest = out.trim_start_matches(keepalive);
    ((out.len() - rest.len()) / keepalive.len(), rest)
}

#[tokio::test(start_paused = true)]
async fn a_stream_whose_answer_is_slow_to_start_gets_keepalives_then_the_whole_answer() {
    let snapshot = snapshot();
    let mut answer = vec![role(), text("late")];
    answer.extend(finished());
    let slow = Reply::After(
        Duration::from_millis(2500),
        Box::new(Reply::Stream(answer.clone())),
    );
    scripted::script([("a", slow)]);
    let out = held_body(&snapshot, "ab").await;
    let (keepalives, rest) = after_keepalives(&out);
    assert!(keepalives >= 1, "{out}");
    assert_eq!(rest, answer.concat());
}

#[tokio::test(start_paused = true)]
async fn a_held_stream_whose_every_model_fails_ends_with_one_error_event_after_the_keepalives() {
    let snapshot = snapshot();
    let slow = Reply::After(
        Duration::from_millis(2500),
        Box::new(Reply::Fail(status(502))),
    );
    scripted::script([("a", slow), ("b", Reply::Fail(status(503)))]);
    let out = held_body(&snapshot, "ab").await;
    assert_eq!(scripted::called(), ["a", "b"]);
    let (keepalives, rest) = after_keepalives(&out);
    assert!(keepalives >= 1, "{out}");
    assert!(rest.starts_with("event: error\ndata: {"), "{out}");
    assert_eq!(rest.matches("event: error").count(), 1, "{out}");
    assert!(
        rest.contains("upstream 503"),
        "the last model's error: {out}"
    );
    assert!(!rest.contains("[DONE]"), "{out}");
}
