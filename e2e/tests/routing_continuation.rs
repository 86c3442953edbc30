//! `routing.continue_on_cut` across dialects: a stream cut mid-answer by an OpenAI or an
//! Anthropic target is continued by the next target of either kind, for an OpenAI client and
//! for an Anthropic client, into one well-formed stream in the client's dialect with the text
//! concatenated and the usage summed. (OpenAI to OpenAI for an OpenAI client is in
//! `routing_streams.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock, anthropic};
use aisix_e2e::routing::{config, post, streamed};
use serde_json::{Value, json};

/// An OpenAI and an Anthropic mock for the first target, the same for the next; the group
/// `{first}-{next}` (`oa` or `an`) continues a cut stream of the first on the next.
struct Rig {
    oa1: MockProvider,
    an1: MockProvider,
    oa2: MockProvider,
    an2: MockProvider,
    gateway: Gateway,
}

const KINDS: [&str; 2] = ["oa", "an"];

fn start(mode: Mode) -> Rig {
    let (oa1, an1) = (MockProvider::start(), MockProvider::start_anthropic());
    let (oa2, an2) = (MockProvider::start(), MockProvider::start_anthropic());
    let mut resources = String::from("_format_version: \"1\"\nprovider_keys:\n");
    for (name, mock) in [("oa1", &oa1), ("an1", &an1), ("oa2", &oa2), ("an2", &an2)] {
        let (kind, base) = if name.starts_with("oa") {
            ("openai", mock.base_url())
        } else {
            ("anthropic", mock.origin())
        };
        resources += &format!(
            "  - {{display_name: {name}, provider: {kind}, api_key: sk-{name}-secret, api_base: \"{base}\"}}\n"
        );
    }
    resources += "models:\n";
    for name in ["oa1", "an1", "oa2", "an2"] {
        let kind = if name.starts_with("oa") {
            "openai"
        } else {
            "anthropic"
        };
        // oa2 stands for an OpenAI-dialect server that continues a trailing assistant
        // message, declared so (OpenAI's own models answer it with a new turn).
        let continuation = if name == "oa2" {
            ", continuation: prefill"
        } else {
            ""
        };
        resources += &format!(
            "  - {{display_name: {name}, provider: {kind}, model_name: up-{name}, provider_key: {name}{continuation}}}\n"
        );
    }
    for first in KINDS {
        for next in KINDS {
            resources += &format!(
                "  - display_name: {first}-{next}\n    routing:\n      targets: [{{model: {first}1}}, {{model: {next}2}}]\n      continue_on_cut: true\n"
            );
        }
    }
    resources +=
        "api_keys:\n  - {display_name: team, key_env: ROUTING_KEY, allowed_models: [\"*\"]}\n";
    let gateway = Gateway::start(&config(mode, resources));
    Rig {
        oa1,
        an1,
        oa2,
        an2,
        gateway,
    }
}

impl Rig {
    /// Scripts the group's first target to send "Hello, " and "wor" and break off, and its
    /// next to answer "ld" and "!" with a prompt of 12 tokens.
    fn script(&self, first: &str, next: &str) {
        if first == "oa" {
            self.oa1.enqueue(
                Mock::sse([
                    Frame::chat_role("up-oa1"),
                    Frame::chat_delta("up-oa1", "Hello, "),
                    Frame::chat_delta("up-oa1", "wor"),
                ])
                .disconnect(),
            );
        } else {
            let mut frames = vec![anthropic::message_start(
                "msg_cut",
                "up-an1",
                json!({"input_tokens": 10, "output_tokens": 1}),
            )];
            frames.extend(
                anthropic::text_block(0, &["Hello, ", "wor"])
                    .into_iter()
                    .take(3),
            );
            self.an1.enqueue(Mock::sse(frames).disconnect());
        }
        if next == "oa" {
            self.oa2
                .enqueue(Mock::chat_stream("up-oa2", &["ld", "!"], 12));
        } else {
            let mut frames = vec![
                anthropic::message_start(
                    "msg_next",
                    "up-an2",
                    json!({"input_tokens": 12, "output_tokens": 1}),
                ),
                anthropic::ping(),
            ];
            frames.extend(anthropic::text_block(0, &["ld", "!"]));
            frames.push(anthropic::message_delta("end_turn", None, 2));
            self.an2.enqueue(Mock::sse(frames));
        }
    }

    /// The text of the assistant message the next target was last asked to go on from (the
    /// last message of the request, in its dialect).
    fn prefill(&self, next: &str) -> String {
        let mock = if next == "oa" { &self.oa2 } else { &self.an2 };
        let asked = mock.last_request().unwrap().body_json().unwrap();
        let last = asked["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["role"], "assistant", "{asked}");
        match &last["content"] {
            Value::String(text) => text.clone(),
            blocks => blocks[0]["text"].as_str().unwrap().to_owned(),
        }
    }

    /// The access line of `id`: two attempts (the cut one, then the continuation) and the
    /// summed usage: each stream's prompt and output, the cut one's output counted by its
    /// content events (2) and its prompt, when it reported none, as the continuation's less
    /// those.
    fn assert_accounted(&self, id: &str, first: &str, next: &str) {
        let line = self.gateway.access_line(id);
        let attempts = line["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{line}");
        assert_eq!(attempts[0]["target"], format!("{first}1"));
        assert_eq!(attempts[1]["target"], format!("{next}2"));
        assert_eq!(
            (
                line["input_tokens"].as_u64(),
                line["output_tokens"].as_u64()
            ),
            (Some(22), Some(4)),
            "{line}"
        );
    }
}

/// The events of an Anthropic SSE body: (name, data).
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|event| {
            let name = event.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_owned(), serde_json::from_str(data).unwrap()))
        })
        .collect()
}

both_modes! {
    async fn an_openai_client_s_stream_cut_on_either_target_kind_is_continued_on_either(mode: Mode) {
        let rig = start(mode);
        for (first, next) in [("an", "an"), ("an", "oa"), ("oa", "an")] {
            rig.script(first, next);
            let id = format!("chat-{first}-{next}");
            let body = json!({
                "model": format!("{first}-{next}"),
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "Say hello to the world"}],
            });
            let reply = post(&rig.gateway, "/v1/chat/completions", &id, &body).await;
            let text = reply.text();
            let stream = streamed(&text);
            assert_eq!(stream.text, "Hello, world!", "{first}-{next}: {text}");
            assert!(stream.done && stream.error.is_none(), "{first}-{next}: {text}");
            assert_eq!(text.matches("\"role\":\"assistant\"").count(), 1, "one role chunk: {text}");
            assert_eq!(text.matches("\"usage\":{").count(), 1, "one usage chunk: {text}");
            let usage = stream.usage.unwrap();
            assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(22), Some(4)));
            assert_eq!(rig.prefill(next), "Hello, wor", "{first}-{next}");
            rig.assert_accounted(&id, first, next);
        }
    }
}

both_modes! {
    async fn an_anthropic_client_s_stream_cut_on_either_target_kind_is_one_message_continued(mode: Mode) {
        let rig = start(mode);
        for first in KINDS {
            for next in KINDS {
                rig.script(first, next);
                let id = format!("messages-{first}-{next}");
                let body = json!({
                    "model": format!("{first}-{next}"),
                    "stream": true,
                    "max_tokens": 50,
                    "messages": [{"role": "user", "content": "Say hello to the world"}],
                });
                let reply = post(&rig.gateway, "/v1/messages", &id, &body).await;
                let body = reply.text();
                let events = events(&body);
                let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).filter(|n| *n != "ping").collect();
                assert_eq!(
                    names,
                    [
                        "message_start",
                        "content_block_start",
                        "content_block_delta",
                        "content_block_delta",
                        "content_block_delta",
                        "content_block_delta",
                        "content_block_stop",
                        "message_delta",
                        "message_stop",
                    ],
                    "{first}-{next}: {body}"
                );
                let text: String = events
                    .iter()
                    .filter(|e| e.0 == "content_block_delta")
                    .map(|e| {
                        assert_eq!(e.1["index"], 0, "the text goes on in the open block");
                        e.1["delta"]["text"].as_str().unwrap()
                    })
                    .collect();
                assert_eq!(text, "Hello, world!", "{first}-{next}");
                let delta = &events.iter().find(|e| e.0 == "message_delta").unwrap().1;
                assert_eq!(
                    (delta["usage"]["input_tokens"].as_u64(), delta["usage"]["output_tokens"].as_u64()),
                    (Some(22), Some(4)),
                    "{first}-{next}: {body}"
                );
                assert_eq!(rig.prefill(next), "Hello, wor", "{first}-{next}");
                rig.assert_accounted(&id, first, next);
            }
        }
    }
}

/// Runs `e2e/python/test_continuation_anthropic_sdk.py`'s `case` against the group `model`.
async fn anthropic_sdk(rig: &Rig, model: &str, case: &str) {
    let env = vec![
        (
            "AISIX_SDK_BASE_URL",
            format!("http://{}", rig.gateway.addr()),
        ),
        ("AISIX_SDK_API_KEY", aisix_e2e::routing::KEY.to_owned()),
        ("AISIX_SDK_MODEL", model.to_owned()),
        ("AISIX_SDK_CASE", case.to_owned()),
        ("AISIX_SDK_TEXT", "Hello, world!".to_owned()),
    ];
    let (status, printed) =
        aisix_e2e::sdk::run_python("test_continuation_anthropic_sdk.py", env).await;
    aisix_e2e::sdk::assert_passed(status, &printed, || rig.gateway.logs());
}

both_modes! {
    async fn the_anthropic_sdk_rebuilds_a_continued_stream_and_is_told_of_a_tool_call_cut(mode: Mode) {
        let rig = start(mode);
        rig.script("an", "an");
        anthropic_sdk(&rig, "an-an", "continued").await;

        // Cut inside a tool_use block's input: never continued, the cut is the answer.
        let mut frames = vec![anthropic::message_start(
            "msg_tool",
            "up-an1",
            json!({"input_tokens": 10, "output_tokens": 1}),
        )];
        frames.extend(
            anthropic::tool_use_block(0, "toolu_1", "get_weather", &["{\"city\": ", "\"Par"])
                .into_iter()
                .take(3),
        );
        rig.an1.enqueue(Mock::sse(frames).disconnect());
        let before = rig.an2.request_count();
        anthropic_sdk(&rig, "an-an", "tool-cut").await;
        assert_eq!(rig.an2.request_count(), before, "a tool call is never continued");
    }
}
