#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Anthropic through the gateway, end to end in both serving modes: OpenAI chat completions to
//! an `anthropic` provider translated both ways, `/v1/messages` relayed byte for byte to an
//! `anthropic` provider and translated to an `openai` one, Anthropic's error envelope, the
//! mid-stream cut, count_tokens, and the official `anthropic` SDK against both provider kinds.

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock, anthropic, openai};
use aisix_e2e::{prom, sdk};
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-anthropic-e2e";
const ANTHROPIC_KEY: &str = "sk-ant-upstream-secret-1";
const OPENAI_KEY: &str = "sk-oai-upstream-secret-2";

/// Both upstreams and the gateway in front of them: `claude` goes to the Anthropic mock as
/// `claude-upstream`, `gpt` to the OpenAI mock as `gpt-upstream`; the groups `claude-first`
/// and `gpt-first` mix the two. Whole translated answers are held up to 4 KiB.
struct Rig {
    anthropic: MockProvider,
    openai: MockProvider,
    gateway: Gateway,
}

fn resources(anthropic: &MockProvider, openai: &MockProvider) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: ant
    provider: anthropic
    api_key: {ANTHROPIC_KEY}
    api_base: {anthropic}
  - display_name: oai
    provider: openai
    api_key: {OPENAI_KEY}
    api_base: {openai}
models:
  - {{display_name: claude, provider: anthropic, model_name: claude-upstream, provider_key: ant}}
  - {{display_name: gpt, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - display_name: claude-first
    routing: {{targets: [{{model: claude, priority: 1}}, {{model: gpt}}]}}
  - display_name: gpt-first
    routing: {{targets: [{{model: gpt, priority: 1}}, {{model: claude}}]}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        anthropic = anthropic.origin(),
        openai = openai.base_url(),
    )
}

fn start(mode: Mode) -> Rig {
    let anthropic = MockProvider::start_anthropic();
    let openai = MockProvider::start();
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources(&anthropic, &openai))
            .env("CLIENT_KEY", CLIENT_KEY)
            .metrics()
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\nupstream:\n  max_response_bytes: 4096\n"),
    );
    Rig {
        anthropic,
        openai,
        gateway,
    }
}

impl Rig {
    async fn chat(&self, body: Value) -> Reply {
        let auth = format!("Bearer {CLIENT_KEY}");
        let body = body.to_string();
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                "/v1/chat/completions",
                &[("authorization", &auth)],
                Some(&body),
            ),
        )
        .await
    }

    async fn messages(&self, path: &str, key: &str, body: &str) -> Reply {
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                path,
                &[("x-api-key", key), ("anthropic-version", "2023-06-01")],
                Some(body),
            ),
        )
        .await
    }

    async fn metrics(&self) -> String {
        client::get(self.gateway.metrics_addr.unwrap(), "/metrics")
            .await
            .text()
    }
}

/// The events of an SSE body: (name, data parsed as JSON, or the raw data).
fn events(body: &str) -> Vec<(Option<String>, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
        .map(|event| {
            let name = event
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .map(str::to_owned);
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or_default();
            let data =
                serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()));
            (name, data)
        })
        .collect()
}

fn names(events: &[(Option<String>, Value)]) -> Vec<&str> {
    events.iter().filter_map(|e| e.0.as_deref()).collect()
}

/// The text and the tool calls (id, name, arguments) an OpenAI stream accumulates to.
fn openai_stream(events: &[(Option<String>, Value)]) -> (String, Vec<(String, String, String)>) {
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for (_, chunk) in events {
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            continue;
        };
        text.push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            if let Some(id) = call["id"].as_str() {
                calls.push((
                    id.to_owned(),
                    call["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            let index = call["index"].as_u64().unwrap() as usize;
            calls[index]
                .2
                .push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    (text, calls)
}

both_modes! {
    async fn openai_chat_to_an_anthropic_provider_is_translated_both_ways(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "claude", "temperature": 0.5, "top_p": 0.9, "stop": ["zzz"],
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], openai::REPLY_TEXT);
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 4);
        assert_eq!(body["usage"]["completion_tokens"], openai::REPLY_PIECES.len());

        let seen = rig.anthropic.last_request().unwrap();
        assert_eq!(seen.path, "/v1/messages");
        assert_eq!(seen.header("x-api-key"), Some(ANTHROPIC_KEY));
        assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(seen.header("authorization"), None, "the client's key went upstream");
        let sent = seen.body_json().unwrap();
        assert_eq!(sent["model"], "claude-upstream");
        assert_eq!(sent["system"], "Be brief.");
        assert_eq!(sent["max_tokens"], 4096, "the documented default");
        assert_eq!(sent["temperature"], 0.5);
        assert_eq!(sent["top_p"], 0.9);
        assert_eq!(sent["stop_sequences"], json!(["zzz"]));
        assert_eq!(sent["messages"], json!([{"role": "user", "content": "Hello there"}]));
    }
}

both_modes! {
    async fn a_streamed_chat_from_an_anthropic_provider_arrives_as_openai_chunks(mode: Mode) {
        let rig = start(mode);
        let prompt = json!([{"role": "user", "content": "Hello there"}]);
        for include_usage in [true, false] {
            let reply = rig.chat(json!({"model": "claude", "stream": true, "messages": prompt,
                "stream_options": {"include_usage": include_usage}})).await;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.header("content-type"), Some("text/event-stream"));
            let events = events(&reply.text());
            assert_eq!(events.last().unwrap().1, "[DONE]");
            assert_eq!(events[0].1["choices"][0]["delta"]["role"], "assistant");
            assert_eq!(openai_stream(&events).0, openai::REPLY_TEXT);
            let finish: Vec<&Value> = events.iter().filter_map(|e| e.1.pointer("/choices/0/finish_reason")).filter(|f| !f.is_null()).collect();
            assert_eq!(finish, [&json!("stop")]);
            let usage: Vec<&Value> = events.iter().filter_map(|e| e.1.get("usage")).filter(|u| !u.is_null()).collect();
            if include_usage {
                assert_eq!(usage.len(), 1);
                assert_eq!(usage[0]["prompt_tokens"], 2);
                assert_eq!(usage[0]["completion_tokens"], openai::REPLY_PIECES.len());
            } else {
                assert!(usage.is_empty(), "usage chunk sent unasked");
            }
        }
        assert_eq!(rig.anthropic.last_request().unwrap().body_json().unwrap()["stream"], true);
    }
}

both_modes! {
    async fn tool_calls_round_trip_through_an_anthropic_provider_unary_and_streamed(mode: Mode) {
        let rig = start(mode);
        let tools = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let question = json!({"role": "user", "content": "Weather in Paris?"});
        let reply = rig.chat(json!({"model": "claude", "tools": tools, "tool_choice": "required",
            "messages": [question]})).await.json();
        let choice = &reply["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(), json!({"city": "mock"}));
        assert_eq!(rig.anthropic.last_request().unwrap().body_json().unwrap()["tool_choice"], json!({"type": "any"}));

        // The result goes back; the Anthropic mock refuses a tool_result that answers no call.
        let answer = rig.chat(json!({"model": "claude", "tools": tools, "messages": [
            question, choice["message"].clone(),
            {"role": "tool", "tool_call_id": call["id"], "content": "18C"}]})).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.json()["choices"][0]["message"]["content"], openai::REPLY_TEXT);

        let streamed = rig.chat(json!({"model": "claude", "stream": true, "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "messages": [question]})).await;
        let (_, calls) = openai_stream(&events(&streamed.text()));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, "get_weather");
        assert_eq!(serde_json::from_str::<Value>(&calls[0].2).unwrap(), json!({"city": "mock"}));
    }
}

both_modes! {
    async fn images_and_limits_reach_anthropic_in_its_shape(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "claude", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]})).await.json();
        assert_eq!(reply["choices"][0]["finish_reason"], "length");
        assert_eq!(reply["choices"][0]["message"]["content"], "Hello from");
        let sent = rig.anthropic.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["max_tokens"], 2);
        assert_eq!(sent["messages"][0]["content"], json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]));

        let stopped = rig.chat(json!({"model": "claude", "stop": " the", "messages": [{"role": "user", "content": "hi"}]})).await.json();
        assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
        assert_eq!(stopped["choices"][0]["message"]["content"], "Hello from");
    }
}

both_modes! {
    async fn cache_reads_and_writes_reach_openai_usage_and_the_token_metrics(mode: Mode) {
        let rig = start(mode);
        rig.anthropic.enqueue(Mock::status(200).json(anthropic::message_body("msg_c", "claude-upstream",
            json!([{"type": "text", "text": "cached"}]), "end_turn", None,
            json!({"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 5}))));
        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]})).await.json();
        let usage = &reply["usage"];
        assert_eq!(usage["prompt_tokens"], 60);
        assert_eq!(usage["completion_tokens"], 5);
        assert_eq!(usage["total_tokens"], 65);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 30);
        assert_eq!(usage["cache_creation_input_tokens"], 20);
        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "input")]), 60.0);
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "output")]), 5.0);
    }
}

both_modes! {
    async fn anthropic_errors_reach_openai_clients_in_the_openai_envelope(mode: Mode) {
        let rig = start(mode);
        rig.anthropic.enqueue(Mock::anthropic_error(400, "invalid_request_error", "messages: roles must alternate"));
        rig.anthropic.enqueue(Mock::anthropic_error(429, "rate_limit_error", "slow down").header("retry-after", "7"));
        rig.anthropic.enqueue(Mock::anthropic_error(529, "overloaded_error", "Overloaded"));
        let prompt = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]});

        let bad = rig.chat(prompt.clone()).await;
        assert_eq!(bad.status, 400);
        assert_eq!(bad.json(), json!({"error": {"message": "messages: roles must alternate",
            "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}));
        let limited = rig.chat(prompt.clone()).await;
        assert_eq!(limited.status, 429);
        assert_eq!(limited.header("retry-after"), Some("7"));
        assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
        let overloaded = rig.chat(prompt).await;
        assert_eq!(overloaded.status, 502);
        assert_eq!(overloaded.json()["error"]["code"], "upstream_error");
    }
}

both_modes! {
    async fn a_cut_anthropic_stream_ends_the_openai_stream_with_an_error_event(mode: Mode) {
        let rig = start(mode);
        let mut frames = vec![anthropic::message_start("msg_cut", "claude-upstream", json!({"input_tokens": 2, "output_tokens": 1}))];
        frames.extend(anthropic::text_block(0, &["Half", " an"]).into_iter().take(3));
        rig.anthropic.enqueue(Mock::sse(frames).disconnect());
        let reply = rig.chat(json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "hi"}]})).await;
        let events = events(&reply.text());
        assert_eq!(openai_stream(&events).0, "Half an");
        assert_eq!(events.last().unwrap().0.as_deref(), Some("error"));
        assert!(events.iter().all(|e| e.1 != "[DONE]"), "a cut stream was passed off as complete");
    }
}

both_modes! {
    async fn messages_to_an_anthropic_provider_are_relayed_byte_for_byte(mode: Mode) {
        let rig = start(mode);
        let answer = "{ \"id\":\"msg_1\", \"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-upstream\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1},\"x_future\":[1, 2] }";
        rig.anthropic.enqueue(Mock::status(200).header("content-type", "application/json").body(answer));
        let sent = r#"{"max_tokens": 10,  "model" : "claude", "messages":[{"role":"user","content":"hi"}], "x_future": {"a": 1.50}}"#;
        let reply = rig.messages("/v1/messages", CLIENT_KEY, sent).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), answer, "the answer was not relayed byte for byte");

        let seen = rig.anthropic.last_request().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&seen.body),
            sent.replace("\"claude\"", "\"claude-upstream\""),
            "only the model may change on the way up"
        );
        assert_eq!(seen.header("x-api-key"), Some(ANTHROPIC_KEY));
        assert!(!format!("{:?}", seen.headers).contains(CLIENT_KEY), "the client's key went upstream");

        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_requests_total", &[("endpoint", "messages"), ("model", "claude"), ("outcome", "success")]), 1.0);
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "input")]), 3.0);
    }
}

both_modes! {
    async fn a_streamed_message_to_an_anthropic_provider_passes_through_unchanged(mode: Mode) {
        let rig = start(mode);
        let mut frames = vec![anthropic::message_start("msg_s", "claude-upstream",
            json!({"input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 1})), anthropic::ping()];
        frames.push(Frame::raw("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n"));
        frames.push(Frame::raw("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"));
        frames.extend(anthropic::text_block(1, &["Hel", "lo"]));
        frames.push(anthropic::message_delta("end_turn", None, 2));
        let expected: Vec<u8> = frames.iter().chain([&anthropic::message_stop()])
            .flat_map(|f| f.as_bytes().to_vec()).collect();
        rig.anthropic.enqueue(Mock::sse(frames));
        let reply = rig.messages("/v1/messages", CLIENT_KEY,
            r#"{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#).await;
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        assert_eq!(reply.body.to_vec(), expected, "the stream was not relayed unchanged");
        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "input")]), 10.0);
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "output")]), 2.0);
    }
}

both_modes! {
    async fn messages_to_an_openai_provider_are_translated_in_anthropic_event_order(mode: Mode) {
        let rig = start(mode);
        let body = json!({"model": "gpt", "max_tokens": 50, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hello there"}]});
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &body.to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let message = reply.json();
        assert_eq!(message["type"], "message");
        assert_eq!(message["content"], json!([{"type": "text", "text": openai::REPLY_TEXT}]));
        assert_eq!(message["stop_reason"], "end_turn");
        assert_eq!(message["usage"]["input_tokens"], 4);
        let sent = rig.openai.last_request().unwrap();
        assert_eq!(sent.path, "/v1/chat/completions");
        assert_eq!(sent.header("authorization"), Some(format!("Bearer {OPENAI_KEY}").as_str()));
        let sent = sent.body_json().unwrap();
        assert_eq!(sent["model"], "gpt-upstream");
        assert_eq!(sent["messages"][0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(sent["max_tokens"], 50);

        let mut streamed = body;
        streamed["stream"] = json!(true);
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &streamed.to_string()).await;
        let events = events(&reply.text());
        let mut expected = vec!["message_start", "ping", "content_block_start"];
        expected.extend(openai::REPLY_PIECES.iter().map(|_| "content_block_delta"));
        expected.extend(["content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(names(&events), expected);
        let delta = &events[events.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(delta["usage"]["input_tokens"], 4);
        assert_eq!(delta["usage"]["output_tokens"], openai::REPLY_PIECES.len());
    }
}

both_modes! {
    async fn tool_use_through_an_openai_provider_streams_as_input_json_deltas(mode: Mode) {
        let rig = start(mode);
        let chunk = |delta: Value, finish: Value| Frame::json(json!({"id": "c1", "object": "chat.completion.chunk",
            "created": 1, "model": "gpt-upstream", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}));
        rig.openai.enqueue(Mock::sse([
            chunk(json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": ""}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            Frame::json(json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
                "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}})),
        ]));
        let body = json!({"model": "gpt", "max_tokens": 50, "stream": true,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "Weather in Paris?"}]});
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &body.to_string()).await;
        let events = events(&reply.text());
        assert_eq!(names(&events), ["message_start", "ping", "content_block_start", "content_block_delta",
            "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(events[2].1["content_block"], json!({"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}));
        let json: String = events.iter().filter_map(|e| e.1.pointer("/delta/partial_json")).map(|p| p.as_str().unwrap()).collect();
        assert_eq!(json, "{\"city\":\"Paris\"}");
        assert_eq!(events[6].1["delta"]["stop_reason"], "tool_use");

        let sent = rig.openai.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["tool_choice"], "required");
        assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(sent["stream_options"]["include_usage"], true);
    }
}

both_modes! {
    async fn messages_errors_use_anthropic_envelope_with_its_type_names(mode: Mode) {
        let rig = start(mode);
        let ok = r#"{"model":"gpt","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let envelope = |reply: &Reply, status: u16, kind: &str| {
            assert_eq!(reply.status, status, "{}", reply.text());
            let body = reply.json();
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], kind, "{body}");
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        };
        envelope(&rig.messages("/v1/messages", "sk-wrong", ok).await, 401, "authentication_error");
        envelope(&rig.messages("/v1/messages", CLIENT_KEY, r#"{"model":"nope","max_tokens":5,"messages":[]}"#).await, 404, "not_found_error");
        envelope(&rig.messages("/v1/messages", CLIENT_KEY, "{not json").await, 400, "invalid_request_error");
        envelope(&rig.messages("/v1/messages", CLIENT_KEY, r#"{"model":"gpt","messages":[{"role":"user","content":"hi"}]}"#).await, 400, "invalid_request_error");
        rig.openai.enqueue(Mock::openai_error(429, "requests", "slow down").header("retry-after", "3"));
        let limited = rig.messages("/v1/messages", CLIENT_KEY, ok).await;
        envelope(&limited, 429, "rate_limit_error");
        assert_eq!(limited.header("retry-after"), Some("3"));
        assert_eq!(limited.json()["error"]["message"], "slow down");
        // An upstream Anthropic error reaches an Anthropic client as it was.
        rig.anthropic.enqueue(Mock::anthropic_error(400, "invalid_request_error", "bad block"));
        let relayed = rig.messages("/v1/messages", CLIENT_KEY, &ok.replace("gpt", "claude")).await;
        envelope(&relayed, 400, "invalid_request_error");
        assert_eq!(relayed.json()["error"]["message"], "bad block");
    }
}

both_modes! {
    async fn a_cut_stream_on_messages_ends_with_an_error_event_and_no_message_stop(mode: Mode) {
        let rig = start(mode);
        let mut frames = vec![anthropic::message_start("msg_cut", "claude-upstream", json!({"input_tokens": 2, "output_tokens": 1}))];
        frames.extend(anthropic::text_block(0, &["Half"]).into_iter().take(2));
        rig.anthropic.enqueue(Mock::sse(frames).disconnect());
        rig.openai.enqueue(Mock::sse([Frame::chat_delta("gpt-upstream", "Half")]).disconnect());
        for model in ["claude", "gpt"] {
            let body = format!(r#"{{"model":"{model}","max_tokens":5,"stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#);
            let reply = rig.messages("/v1/messages", CLIENT_KEY, &body).await;
            let events = events(&reply.text());
            let names = names(&events);
            assert_eq!(names.last(), Some(&"error"), "{model}: {names:?}");
            assert!(!names.contains(&"message_stop"), "{model}: a cut stream was passed off as complete");
            assert_eq!(events.last().unwrap().1["type"], "error");
        }
    }
}

both_modes! {
    async fn count_tokens_answers_for_both_provider_kinds_with_either_auth_header(mode: Mode) {
        let rig = start(mode);
        let body = |model: &str| format!(r#"{{"model":"{model}","system":"Be brief.","messages":[{{"role":"user","content":"Hello there"}}]}}"#);
        let relayed = rig.messages("/v1/messages/count_tokens", CLIENT_KEY, &body("claude")).await;
        assert_eq!(relayed.status, 200, "{}", relayed.text());
        assert_eq!(relayed.json(), json!({"input_tokens": 4}));
        assert_eq!(rig.anthropic.last_request().unwrap().path, "/v1/messages/count_tokens");

        let auth = format!("Bearer {CLIENT_KEY}");
        let translated = client::send(rig.gateway.addr(), request("POST", "/v1/messages/count_tokens",
            &[("authorization", &auth)], Some(&body("gpt")))).await;
        assert_eq!(translated.status, 200, "{}", translated.text());
        assert_eq!(translated.json(), json!({"input_tokens": 4}));
        assert_eq!(rig.openai.last_request().unwrap().body_json().unwrap()["max_tokens"], 1);
    }
}

both_modes! {
    async fn the_official_anthropic_sdk_works_through_the_gateway(mode: Mode) {
        let rig = start(mode);
        for (model, auth) in [("claude", "sdk"), ("claude", "x-api-key"), ("gpt", "sdk")] {
            let (status, printed) = sdk::run_python("test_anthropic_sdk.py", vec![
                ("AISIX_ANTHROPIC_BASE_URL", rig.gateway.url("")),
                ("AISIX_ANTHROPIC_API_KEY", CLIENT_KEY.to_owned()),
                ("AISIX_ANTHROPIC_AUTH", auth.to_owned()),
                ("AISIX_ANTHROPIC_MODEL", model.to_owned()),
                ("AISIX_ANTHROPIC_EXPECT_TEXT", openai::REPLY_TEXT.to_owned()),
                ("AISIX_ANTHROPIC_UNKNOWN_MODEL", "no-such-model".to_owned()),
                ("AISIX_ANTHROPIC_WRONG_KEY", "sk-wrong-key".to_owned()),
            ]).await;
            sdk::assert_passed(status, &printed, || rig.gateway.logs());
            assert!(printed.contains("8 passed, 0 failed"), "{model}: {printed}");
        }
        // The tool checks reached the OpenAI provider as forced tool calls.
        let forced = rig.openai.requests().iter().filter(|r| {
            r.body_json().is_ok_and(|b| b["tool_choice"] == "required" || b["tool_choice"]["type"] == "function")
        }).count();
        assert!(forced >= 2, "the SDK's tool use never reached the OpenAI provider");
    }
}

both_modes! {
    async fn the_official_openai_sdk_drives_chat_completions_against_an_anthropic_provider(mode: Mode) {
        let rig = start(mode);
        let (status, printed) = sdk::run_python("test_openai_sdk_anthropic.py", vec![
            ("AISIX_SDK_BASE_URL", rig.gateway.url("/v1")),
            ("AISIX_SDK_API_KEY", CLIENT_KEY.to_owned()),
            ("AISIX_SDK_CHAT_MODEL", "claude".to_owned()),
            ("AISIX_SDK_EXPECT_TEXT", openai::REPLY_TEXT.to_owned()),
        ]).await;
        sdk::assert_passed(status, &printed, || rig.gateway.logs());
        assert!(printed.contains("4 passed, 0 failed"), "{printed}");
        let seen = rig.anthropic.requests();
        assert!(seen.iter().all(|r| r.path == "/v1/messages"), "{:?}", seen.iter().map(|r| &r.path).collect::<Vec<_>>());
        assert!(seen.iter().any(|r| r.body_json().unwrap()["stream"] == true), "no streamed request reached the provider");
    }
}

both_modes! {
    async fn a_mixed_group_falls_over_across_dialects_in_both_directions(mode: Mode) {
        let rig = start(mode);
        // An OpenAI client: the Anthropic target is overloaded, the OpenAI one answers.
        rig.anthropic.enqueue(Mock::anthropic_error(529, "overloaded_error", "Overloaded"));
        let reply = rig.chat(json!({"model": "claude-first", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        assert_eq!(reply.json()["choices"][0]["message"]["content"], openai::REPLY_TEXT);
        assert_eq!(rig.openai.last_request().unwrap().body_json().unwrap()["model"], "gpt-upstream");

        // An Anthropic client: the OpenAI target fails, the Anthropic one gets the request as sent.
        rig.openai.enqueue(Mock::openai_error(500, "server_error", "boom"));
        let sent = r#"{"model":"gpt-first","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let reply = rig.messages("/v1/messages", CLIENT_KEY, sent).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("claude"));
        assert_eq!(reply.json()["type"], "message");
        let seen = rig.anthropic.last_request().unwrap();
        assert_eq!(String::from_utf8_lossy(&seen.body), sent.replace("gpt-first", "claude-upstream"));

        // A stream: the Anthropic target fails before its first event, the OpenAI one is
        // translated into Anthropic's event order.
        rig.anthropic.enqueue(Mock::anthropic_error(500, "api_error", "boom"));
        let streamed = r#"{"model":"claude-first","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let reply = rig.messages("/v1/messages", CLIENT_KEY, streamed).await;
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        let events = events(&reply.text());
        let names = names(&events);
        assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
        assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");

        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_requests_total", &[("endpoint", "messages"), ("model", "claude"), ("outcome", "success")]), 1.0);
        assert_eq!(prom::sample(&page, "aisix_requests_total", &[("endpoint", "messages"), ("model", "gpt"), ("outcome", "success")]), 1.0);
    }
}

both_modes! {
    async fn a_translated_answer_over_max_response_bytes_is_refused_in_the_clients_envelope(mode: Mode) {
        let rig = start(mode);
        let big = "x".repeat(8 * 1024);
        rig.anthropic.enqueue(Mock::status(200).json(anthropic::message_body("msg_big", "claude-upstream",
            json!([{"type": "text", "text": big}]), "end_turn", None, json!({"input_tokens": 1, "output_tokens": 1}))));
        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "upstream_response_too_large");

        rig.openai.enqueue(Mock::status(200).json(json!({"id": "c", "object": "chat.completion", "created": 1,
            "model": "gpt-upstream", "choices": [{"index": 0, "message": {"role": "assistant", "content": big},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})));
        let body = r#"{"model":"gpt","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let reply = rig.messages("/v1/messages", CLIENT_KEY, body).await;
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert_eq!(reply.json()["type"], "error");
        assert_eq!(reply.json()["error"]["type"], "api_error");

        // A relayed answer is not held to translate: the limit does not apply.
        rig.anthropic.enqueue(Mock::status(200).json(anthropic::message_body("msg_big", "claude-upstream",
            json!([{"type": "text", "text": big}]), "end_turn", None, json!({"input_tokens": 1, "output_tokens": 1}))));
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &body.replace("gpt", "claude")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_upstream_errors_total", &[("provider", "ant"), ("kind", "response_too_large")]), 1.0);
    }
}

both_modes! {
    async fn a_relayed_message_far_past_max_response_bytes_arrives_whole_with_its_usage_counted(mode: Mode) {
        let rig = start(mode);
        // 3 MiB, far past the 4 KiB the rig holds to translate: relayed as it arrives.
        let big = "y".repeat(3 * 1024 * 1024);
        let answer = anthropic::message_body("msg_huge", "claude-upstream", json!([{"type": "text", "text": big}]),
            "end_turn", None, json!({"input_tokens": 7, "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 2, "output_tokens": 11})).to_string();
        let enqueue = || rig.anthropic.enqueue(Mock::status(200).header("content-type", "application/json").body(answer.clone()));
        enqueue();
        let body = r#"{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let reply = rig.messages("/v1/messages", CLIENT_KEY, body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.body == answer.as_bytes(), "the answer was not relayed whole ({} of {} bytes)", reply.body.len(), answer.len());

        // Through a group, the answer names the direct model, the rest intact.
        enqueue();
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &body.replace("claude", "claude-first")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let got = reply.json();
        assert_eq!(got["model"], "claude");
        assert_eq!(got["content"][0]["text"].as_str().map(str::len), Some(big.len()));

        let page = rig.metrics().await;
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "input")]), 28.0);
        assert_eq!(prom::sample(&page, "aisix_tokens_total", &[("model", "claude"), ("kind", "output")]), 22.0);
        assert!(!prom::has_series(&page, "aisix_upstream_errors_total", &[("provider", "ant"), ("kind", "response_too_large")]));
    }
}

both_modes! {
    async fn the_clients_anthropic_headers_go_upstream_on_the_relay_and_the_keys_version_otherwise(mode: Mode) {
        let rig = start(mode);
        let body = r#"{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let reply = client::send(rig.gateway.addr(), request("POST", "/v1/messages",
            &[("x-api-key", CLIENT_KEY), ("anthropic-version", "2023-01-01"), ("anthropic-beta", "tools-2024-04-04")],
            Some(body))).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let seen = rig.anthropic.last_request().unwrap();
        assert_eq!(seen.header("anthropic-version"), Some("2023-01-01"));
        assert_eq!(seen.header("anthropic-beta"), Some("tools-2024-04-04"));
        assert_eq!(seen.header("x-api-key"), Some(ANTHROPIC_KEY));

        // Without the client's version, the provider key's (here the default).
        let reply = client::send(rig.gateway.addr(), request("POST", "/v1/messages",
            &[("authorization", &format!("Bearer {CLIENT_KEY}"))], Some(body))).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.anthropic.last_request().unwrap().header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(rig.anthropic.last_request().unwrap().header("anthropic-beta"), None);
    }
}

both_modes! {
    async fn a_groups_answers_name_the_direct_model_in_both_dialects_streamed_or_not(mode: Mode) {
        let rig = start(mode);
        let chat = |model: &str, stream: bool| json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
        let message = |model: &str, stream: bool| json!({"model": model, "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let chunk_models = |reply: &Reply| -> Vec<String> {
            events(&reply.text()).iter()
                .filter_map(|(_, data)| data.get("model").and_then(Value::as_str).map(str::to_owned))
                .collect()
        };
        let start_model = |reply: &Reply| -> Option<String> {
            events(&reply.text()).iter()
                .find(|(name, _)| name.as_deref() == Some("message_start"))
                .and_then(|(_, data)| data.pointer("/message/model").and_then(Value::as_str).map(str::to_owned))
        };

        // OpenAI to an OpenAI client, the way the others follow: every chunk names `gpt`.
        let reply = rig.chat(chat("gpt-first", true)).await;
        let models = chunk_models(&reply);
        assert!(!models.is_empty() && models.iter().all(|m| m == "gpt"), "{models:?}");
        assert_eq!(rig.chat(chat("gpt-first", false)).await.json()["model"], "gpt");

        // Anthropic to an OpenAI client.
        let reply = rig.chat(chat("claude-first", true)).await;
        let models = chunk_models(&reply);
        assert!(!models.is_empty() && models.iter().all(|m| m == "claude"), "{models:?}");
        assert_eq!(rig.chat(chat("claude-first", false)).await.json()["model"], "claude");

        // Anthropic relayed to an Anthropic client.
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &message("claude-first", true)).await;
        assert_eq!(start_model(&reply).as_deref(), Some("claude"), "{}", reply.text());
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &message("claude-first", false)).await;
        assert_eq!(reply.json()["model"], "claude");

        // OpenAI to an Anthropic client.
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &message("gpt-first", true)).await;
        assert_eq!(start_model(&reply).as_deref(), Some("gpt"), "{}", reply.text());
        let reply = rig.messages("/v1/messages", CLIENT_KEY, &message("gpt-first", false)).await;
        assert_eq!(reply.json()["model"], "gpt");

        // A direct model's answers name what the upstream said.
        assert_eq!(start_model(&rig.messages("/v1/messages", CLIENT_KEY, &message("claude", true)).await).as_deref(), Some("claude-upstream"));
    }
}
