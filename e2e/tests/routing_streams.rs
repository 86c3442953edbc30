//! Streams through a model group: held until their first token, so one that fails before it
//! falls over unseen; after it, relayed as they come, and a failure ends the stream with an
//! error event and no `[DONE]`, unless the group continues it on the next target. A stream
//! whose every choice finished is complete without `[DONE]`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::mock::{Frame, Reply as Mock};
use aisix_e2e::prom::sample;
use aisix_e2e::routing::{Rig, streamed, wait};
use serde_json::json;

/// `chat`: `primary`, then `backup`, with these entry-level keys and routing keys.
fn group(entry: &str, routing: &str) -> String {
    format!(
        "  - display_name: chat\n{entry}    routing:\n      targets: [{{model: primary}}, {{model: backup}}]\n{routing}"
    )
}

const UP: &str = "up-primary";

both_modes! {
    async fn a_first_token_that_takes_too_long_falls_over_before_anything_is_sent(mode: Mode) {
        let rig = Rig::start(mode, &group("    first_token_timeout: 800\n", ""), &[]);
        rig.primary.enqueue(Mock::sse([
            Frame::chat_role(UP),
            Frame::chat_delta(UP, "late").after(Duration::from_secs(20)),
        ]));
        let reply = rig.chat("chat", true, "slow-first-token", json!({})).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("x-aisix-served-by"), Some("backup"));
        let stream = streamed(&reply.text());
        assert_eq!(stream.text, "Hello from the mock provider.", "{}", reply.text());
        assert_eq!(stream.models, ["backup"]);
        assert!(stream.done && stream.error.is_none());
        wait(&rig.primary, "the slow stream to be dropped", |m| m.streams_cancelled() == 1);
        let line = rig.gateway.access_line("slow-first-token");
        assert_eq!(line["attempts"][0]["error"], "upstream_timeout");
        assert_eq!(line["model"], "backup");
        assert!(line["ttft_ms"].is_number(), "{line}");
    }
}

both_modes! {
    async fn a_stream_that_breaks_before_its_first_token_falls_over(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[]);
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP)]).disconnect());
        let stream = streamed(&rig.chat("chat", true, "cut-early", json!({})).await.text());
        assert!(stream.done && stream.models == ["backup"], "{stream:?}");

        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), Frame::malformed()]));
        let stream = streamed(&rig.chat("chat", true, "malformed-early", json!({})).await.text());
        assert!(stream.done && stream.models == ["backup"], "{stream:?}");

        rig.primary.enqueue(Mock::sse([Frame::raw("data: {\"error\":{\"message\":\"overloaded\"}}\n\n")]));
        let stream = streamed(&rig.chat("chat", true, "error-early", json!({})).await.text());
        assert!(stream.done && stream.models == ["backup"], "{stream:?}");
        let codes: Vec<String> = ["cut-early", "malformed-early", "error-early"]
            .iter()
            .map(|id| rig.gateway.access_line(id)["attempts"][0]["error"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(codes, ["stream_cut", "upstream_malformed", "upstream_error"]);
    }
}

both_modes! {
    async fn a_stream_cut_or_stalled_mid_answer_ends_with_an_error_event_and_no_done(mode: Mode) {
        let rig = Rig::start(mode, &group("    stream_idle_timeout: 600\n", ""), &[]);
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel")]).disconnect());
        let stream = streamed(&rig.chat("chat", true, "cut", json!({})).await.text());
        assert_eq!(stream.text, "Hel");
        assert_eq!(stream.error.as_deref(), Some("stream_cut"));
        assert!(!stream.done);

        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel")]).hang());
        let stream = streamed(&rig.chat("chat", true, "stalled", json!({})).await.text());
        assert_eq!((stream.text.as_str(), stream.error.as_deref()), ("Hel", Some("stream_timeout")));
        assert!(!stream.done);
        assert_eq!(rig.backup.request_count(), 0, "nothing falls over once the client has content");

        let line = rig.gateway.access_line("stalled");
        assert_eq!((line["status"].as_u64(), line["error"].as_str()), (Some(200), Some("stream_timeout")));
        assert_eq!(line["attempts"][0]["error"], "stream_timeout");
        let page = rig.scrape().await;
        assert_eq!(
            sample(&page, "aisix_requests_total", &[("model", "primary"), ("outcome", "upstream_error")]),
            2.0,
            "{page}"
        );
        assert_eq!(
            sample(&page, "aisix_upstream_attempts_total", &[("model", "chat"), ("target", "primary"), ("result", "upstream_error")]),
            2.0,
            "{page}"
        );
    }
}

both_modes! {
    async fn a_malformed_chunk_mid_answer_ends_the_stream_with_an_error_event(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[]);
        rig.primary.enqueue(Mock::sse([
            Frame::chat_role(UP),
            Frame::chat_delta(UP, "Hel"),
            Frame::malformed(),
            Frame::chat_delta(UP, "lo"),
        ]));
        let stream = streamed(&rig.chat("chat", true, "malformed", json!({})).await.text());
        assert_eq!(stream.text, "Hel", "nothing after the broken event is relayed");
        assert_eq!(stream.error.as_deref(), Some("upstream_malformed"));
        assert!(!stream.done);
    }
}

both_modes! {
    async fn a_stream_that_finishes_without_done_is_complete(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[]);
        for (model, id) in [("chat", "group-no-done"), ("primary", "direct-no-done")] {
            rig.primary.enqueue(
                Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hi"), Frame::chat_finish(UP, "stop")])
                    .without_done(),
            );
            let text = rig.chat(model, true, id, json!({})).await.text();
            let stream = streamed(&text);
            assert!(stream.done && stream.error.is_none(), "{text}");
            assert_eq!(stream.text, "Hi");
            let line = rig.gateway.access_line(id);
            assert_eq!(line["error"], serde_json::Value::Null, "{line}");
        }
        // Without the finish it is cut, group or not.
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hi")]).without_done());
        let stream = streamed(&rig.chat("primary", true, "unfinished", json!({})).await.text());
        assert_eq!(stream.error.as_deref(), Some("stream_cut"));
        assert!(!stream.done);
        let page = rig.scrape().await;
        assert_eq!(sample(&page, "aisix_requests_total", &[("model", "primary"), ("outcome", "success")]), 2.0, "{page}");
    }
}

both_modes! {
    async fn a_cut_stream_is_continued_only_by_a_target_that_truly_continues(mode: Mode) {
        let groups = format!(
            "{}  - display_name: vllm\n    routing:\n      targets: [{{model: primary}}, {{model: backup-vllm}}]\n      continue_on_cut: true\n",
            group("", "      continue_on_cut: true\n")
        );
        let rig = Rig::start(mode, &groups, &[]);
        let cut = || {
            Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hello, "), Frame::chat_delta(UP, "wor")])
                .disconnect()
        };
        // OpenAI's models answer a trailing assistant message with a new turn (as the mock
        // does, unscripted): the backup is never asked, and the client is told of the cut.
        rig.primary.enqueue(cut());
        let text = rig.chat("chat", true, "openai-backup", json!({})).await.text();
        let stream = streamed(&text);
        assert_eq!(stream.text, "Hello, wor", "{text}");
        assert_eq!(stream.error.as_deref(), Some("stream_cut"), "{text}");
        assert!(text.contains("after 2 tokens") && text.contains("no other target"), "{text}");
        assert!(!stream.done);
        assert_eq!(rig.backup.request_count(), 0, "not asked to continue");

        // A vLLM server continues with continue_final_message.
        rig.primary.enqueue(cut());
        rig.backup.enqueue(Mock::chat_stream("up-backup", &["ld", "!"], 11));
        let reply = rig
            .chat("vllm", true, "continued", json!({"stream_options": {"include_usage": true}}))
            .await;
        let stream = streamed(&reply.text());
        assert_eq!(stream.text, "Hello, world!", "{}", reply.text());
        assert!(stream.done && stream.error.is_none(), "{}", reply.text());
        assert_eq!(stream.models, ["primary", "backup-vllm"]);
        let asked = rig.backup.last_request().unwrap().body_json().unwrap();
        assert_eq!(
            asked["messages"],
            json!([
                {"role": "user", "content": "Say hello to the world"},
                {"role": "assistant", "content": "Hello, wor"},
            ])
        );
        assert_eq!((&asked["continue_final_message"], &asked["add_generation_prompt"]), (&json!(true), &json!(false)));
        // Usage summed: the cut stream reported none, so its two chunks are its completion and
        // the continuation's prompt less them is its prompt.
        let usage = stream.usage.unwrap();
        assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(20), Some(4)));
        assert_eq!(reply.text().matches("\"usage\":{").count(), 1, "one usage chunk");
        let line = rig.gateway.access_line("continued");
        assert_eq!((line["input_tokens"].as_u64(), line["output_tokens"].as_u64()), (Some(20), Some(4)));
        assert_eq!(line["attempts"][0]["error"], "stream_cut");
        assert_eq!(line["attempts"][1]["target"], "backup-vllm");
        assert_eq!(line["model"], "backup-vllm");

        // A target that refuses the continuation: the client is told of the cut, not of the
        // refusal, and nothing restarts.
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hel")]).disconnect());
        rig.backup.enqueue(Mock::openai_error(400, "invalid_request_error", "continue_final_message is not supported"));
        let text = rig.chat("vllm", true, "refused", json!({})).await.text();
        let stream = streamed(&text);
        assert_eq!(stream.text, "Hel");
        assert_eq!(stream.error.as_deref(), Some("stream_cut"), "{text}");
        assert!(text.contains("after 1 tokens") && text.contains("refused or failed"), "{text}");
        assert!(!stream.done);
        assert_eq!(rig.primary.request_count(), 3);
    }
}

both_modes! {
    async fn a_stream_cut_inside_a_tool_call_is_never_continued(mode: Mode) {
        let groups = "  - display_name: vllm\n    routing:\n      targets: [{model: primary}, {model: backup-vllm}]\n      continue_on_cut: true\n";
        let rig = Rig::start(mode, groups, &[]);
        let call = |arguments: &str| {
            Frame::json(json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": UP,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments}}]}, "finish_reason": null}],
            }))
        };
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), call(""), call("{\"city\": \"Par")]).disconnect());
        let text = rig.chat("vllm", true, "tool-cut", json!({})).await.text();
        let stream = streamed(&text);
        assert_eq!(stream.error.as_deref(), Some("stream_cut"), "{text}");
        assert!(text.contains("inside a tool call"), "{text}");
        assert!(!stream.done);
        assert_eq!(rig.backup.request_count(), 0, "a tool call is never continued");
    }
}

both_modes! {
    async fn a_hold_past_its_bound_commits_the_stream_instead_of_buffering_on(mode: Mode) {
        let rig = Rig::start(mode, &group("", ""), &[("AISIX_UPSTREAM__MAX_SSE_EVENT_BYTES", "1024")]);
        // Forty role chunks and no token: more than the hold may keep.
        let preamble: Vec<Frame> = (0..40).map(|_| Frame::chat_role(UP)).collect();
        rig.primary.enqueue(Mock::sse(preamble).hang());
        let reply = rig.chat("chat", true, "big-preamble", json!({})).await;
        assert_eq!(reply.header("x-aisix-served-by"), Some("primary"), "committed, not held");
        let stream = streamed(&reply.text());
        assert_eq!(stream.error.as_deref(), Some("upstream_timeout"), "{}", reply.text());
        assert_eq!(rig.backup.request_count(), 0);
    }
}

both_modes! {
    async fn keep_alives_go_out_while_a_continuation_is_sought(mode: Mode) {
        let groups = "  - display_name: vllm\n    routing:\n      targets: [{model: primary}, {model: backup-vllm}]\n      continue_on_cut: true\n";
        let rig = Rig::start(mode, groups, &[("AISIX_DOWNSTREAM__SSE_KEEPALIVE_INTERVAL_SECS", "1")]);
        rig.primary.enqueue(
            Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hello, "), Frame::chat_delta(UP, "wor")])
                .disconnect(),
        );
        // The continuing server takes a while to start.
        rig.backup.enqueue(Mock::chat_stream("up-backup", &["ld", "!"], 11).delay_head(Duration::from_millis(2500)));
        let text = rig.chat("vllm", true, "slow-continuation", json!({})).await.text();
        let stream = streamed(&text);
        assert_eq!(stream.text, "Hello, world!", "{text}");
        assert!(stream.done, "{text}");
        let (before, after) = text.split_once("wor\"").unwrap();
        assert!(!before.contains(": keep-alive"), "{text}");
        assert!(after.split("ld\"").next().unwrap().contains(": keep-alive\n\n"), "{text}");
    }
}

/// Reads an SSE body as a client behind a proxy with a `read_timeout` would: it gives up when
/// nothing arrives for that long.
async fn read_with_timeout(rig: &Rig, id: &str, read_timeout: Duration) -> String {
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "Say hello"}]});
    let request = aisix_e2e::client::chat_request(aisix_e2e::routing::KEY, id, &body.to_string());
    let response = aisix_e2e::client::send_streaming(rig.gateway.addr(), request).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = String::new();
    loop {
        match tokio::time::timeout(read_timeout, http_body_util::BodyExt::frame(&mut body)).await {
            Err(_) => panic!("nothing for {read_timeout:?}: the client gave up after {text:?}"),
            Ok(None) => return text,
            Ok(Some(frame)) => {
                if let Ok(data) = frame.unwrap().into_data() {
                    text.push_str(std::str::from_utf8(&data).unwrap());
                }
            }
        }
    }
}

both_modes! {
    async fn a_client_with_a_short_read_timeout_survives_a_long_held_first_token(mode: Mode) {
        let rig = Rig::start(
            mode,
            &group("", ""),
            &[("AISIX_DOWNSTREAM__SSE_KEEPALIVE_INTERVAL_SECS", "1"), ("AISIX_UPSTREAM__FIRST_TOKEN_TIMEOUT_MS", "10000")],
        );
        // The first token comes after four seconds; the client gives up after two and a half
        // without a byte.
        rig.primary.enqueue(Mock::sse([
            Frame::chat_role(UP),
            Frame::chat_delta(UP, "late").after(Duration::from_secs(4)),
            Frame::chat_finish(UP, "stop"),
        ]));
        let text = read_with_timeout(&rig, "held-long", Duration::from_millis(2500)).await;
        let stream = streamed(&text);
        assert_eq!(stream.text, "late", "{text}");
        assert!(stream.done && text.contains(": keep-alive\n\n"), "{text}");
        assert_eq!(rig.backup.request_count(), 0);
    }
}

both_modes! {
    async fn a_stream_held_past_a_keep_alive_still_falls_over_before_its_first_token(mode: Mode) {
        let rig = Rig::start(
            mode,
            &group("", ""),
            &[("AISIX_DOWNSTREAM__SSE_KEEPALIVE_INTERVAL_SECS", "1"), ("AISIX_UPSTREAM__FIRST_TOKEN_TIMEOUT_MS", "2500")],
        );
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP)]).hang());
        let text = read_with_timeout(&rig, "held-then-fallen-over", Duration::from_secs(2)).await;
        let stream = streamed(&text);
        assert!(text.starts_with(": keep-alive\n\n"), "{text}");
        assert_eq!(stream.text, "Hello from the mock provider.", "{text}");
        assert_eq!(stream.models, ["backup"]);
        assert!(stream.done, "{text}");
        let line = rig.gateway.access_line("held-then-fallen-over");
        assert_eq!(line["attempts"][0]["error"], "upstream_timeout", "{line}");
        assert_eq!(line["model"], "backup");
    }
}
