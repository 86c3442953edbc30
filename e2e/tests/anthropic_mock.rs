#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The mock provider's Anthropic dialect: the official `anthropic` SDK accepts what it answers
//! (plain, streamed, tools, count_tokens), it is as strict as Anthropic about what it accepts,
//! and scripted Anthropic streams end, or are cut, as scripted.

use aisix_e2e::client::{self, request};
use aisix_e2e::mock::{Dialect, MockProvider, Reply, anthropic, openai};
use aisix_e2e::sdk;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{Value, json};

const KEY: &str = "sk-ant-mock-test";

/// POSTs `body` to `path` with Anthropic's headers.
async fn post(mock: &MockProvider, path: &str, body: Value) -> client::Reply {
    let body = body.to_string();
    client::send(
        mock.addr(),
        request(
            "POST",
            path,
            &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
            Some(&body),
        ),
    )
    .await
}

fn message(extra: Value) -> Value {
    let mut body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hello there"}],
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

/// The names of an SSE body's events, in order.
fn event_names(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect()
}

#[tokio::test]
async fn the_official_anthropic_sdk_reads_every_answer_of_the_anthropic_mock() {
    let mock = MockProvider::start_anthropic();
    let (status, printed) = sdk::run_python(
        "test_anthropic_sdk.py",
        vec![
            ("AISIX_ANTHROPIC_BASE_URL", mock.origin()),
            ("AISIX_ANTHROPIC_API_KEY", KEY.to_owned()),
            ("AISIX_ANTHROPIC_MODEL", "claude-e2e".to_owned()),
            ("AISIX_ANTHROPIC_EXPECT_TEXT", openai::REPLY_TEXT.to_owned()),
        ],
    )
    .await;
    sdk::assert_passed(status, &printed, String::new);
    assert!(printed.contains("6 passed, 0 failed"), "{printed}");

    let requests = mock.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/v1/messages/count_tokens")
    );
    let bearer = format!("Bearer {KEY}");
    for request in &requests {
        // anthropic 2.x sends its key as a bearer token; x-api-key is the older way.
        let key = request
            .header("x-api-key")
            .or(request.header("authorization"));
        assert!(
            key == Some(KEY) || key == Some(bearer.as_str()),
            "{}: {key:?}",
            request.path
        );
        // The SDK sends the API version it was written for.
        assert!(
            request
                .header("anthropic-version")
                .is_some_and(|v| !v.is_empty())
        );
    }
}

#[tokio::test]
async fn every_request_needs_an_api_key_and_a_version_header() {
    let mock = MockProvider::start_anthropic();
    let body = message(json!({})).to_string();
    let no_key = client::send(
        mock.addr(),
        request(
            "POST",
            "/v1/messages",
            &[("anthropic-version", "2023-06-01")],
            Some(&body),
        ),
    )
    .await;
    assert_eq!(no_key.status, StatusCode::UNAUTHORIZED);
    assert_eq!(no_key.json()["error"]["type"], "authentication_error");
    assert_eq!(no_key.json()["type"], "error");

    let no_version = client::send(
        mock.addr(),
        request("POST", "/v1/messages", &[("x-api-key", KEY)], Some(&body)),
    )
    .await;
    assert_eq!(no_version.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_version.json()["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn a_messages_request_is_refused_where_anthropic_refuses_it() {
    let mock = MockProvider::start_anthropic();
    let call = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]});
    let cases = [
        (json!({"max_tokens": null}), "max_tokens"),
        (
            json!({"messages": [{"role": "system", "content": "x"}]}),
            "messages.0.role",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}),
            "messages.0.content.0.text",
        ),
        (
            json!({"messages": [{"role": "user", "content": "q"}, call, {"role": "user", "content": "no result"}]}),
            "messages.2",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "r"}]}]}),
            "messages.0.content.0",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a.b", "name": "f", "input": {}}]}]}),
            "messages.0.content.0.id",
        ),
        (json!({"temperature": 1.5}), "temperature"),
        (json!({"tools": [{"name": "f"}]}), "tools.0.input_schema"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
            "messages.0.content.0.type",
        ),
    ];
    for (extra, path) in cases {
        let mut body = message(extra.clone());
        if body["max_tokens"].is_null() {
            body.as_object_mut().unwrap().remove("max_tokens");
        }
        let reply = post(&mock, "/v1/messages", body).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{extra}: {}",
            reply.text()
        );
        let error = reply.json();
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let text = error["error"]["message"].as_str().unwrap();
        assert!(text.starts_with(path), "{extra}: {text}");
    }

    // A tool result that answers the call right before it is fine.
    let answered = message(json!({"messages": [
        {"role": "user", "content": "q"}, call,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]},
    ]}));
    assert_eq!(
        post(&mock, "/v1/messages", answered).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_default_stream_follows_anthropic_event_order_and_ends_with_message_stop() {
    let mock = MockProvider::start_anthropic();
    let reply = post(&mock, "/v1/messages", message(json!({"stream": true}))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let body = reply.text();
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(openai::REPLY_PIECES.iter().map(|_| "content_block_delta"));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(event_names(&body), expected);
    assert!(
        body.contains(r#""usage":{"input_tokens":2,"output_tokens":1}"#),
        "{body}"
    );
    assert!(body.contains(r#""usage":{"output_tokens":5}"#), "{body}");
}

#[tokio::test]
async fn stop_sequences_and_max_tokens_cut_the_default_answer() {
    let mock = MockProvider::start_anthropic();
    let stopped = post(
        &mock,
        "/v1/messages",
        message(json!({"stop_sequences": [" the", "zzz"]})),
    )
    .await
    .json();
    assert_eq!(stopped["content"][0]["text"], "Hello from");
    assert_eq!(stopped["stop_reason"], "stop_sequence");
    assert_eq!(stopped["stop_sequence"], " the");

    let short = post(&mock, "/v1/messages", message(json!({"max_tokens": 2})))
        .await
        .json();
    assert_eq!(short["content"][0]["text"], "Hello from");
    assert_eq!(short["stop_reason"], "max_tokens");
    assert_eq!(short["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn a_forced_tool_choice_calls_the_tool_with_input_from_its_schema() {
    let mock = MockProvider::start_anthropic();
    let tools = json!([
        {"name": "other", "input_schema": {"type": "object"}},
        {"name": "get_weather", "input_schema": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}}},
    ]);
    let answer = post(
        &mock,
        "/v1/messages",
        message(json!({
        "tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}})),
    )
    .await
    .json();
    assert_eq!(answer["stop_reason"], "tool_use");
    let call = &answer["content"][0];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["input"], json!({"city": "mock", "days": 1}));

    let streamed = post(
        &mock,
        "/v1/messages",
        message(json!({
        "tools": tools, "tool_choice": {"type": "any"}, "stream": true})),
    )
    .await
    .text();
    assert!(streamed.contains(r#""name":"other""#), "{streamed}");
    assert!(streamed.contains("input_json_delta"), "{streamed}");
    assert!(
        streamed.contains(r#""stop_reason":"tool_use""#),
        "{streamed}"
    );
}

#[tokio::test]
async fn cached_blocks_count_as_cache_writes_and_count_tokens_counts_every_word() {
    let mock = MockProvider::start_anthropic();
    let body = message(json!({
        "system": [{"type": "text", "text": "four words of system", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "two words"}]}],
    }));
    let answer = post(&mock, "/v1/messages", body.clone()).await.json();
    assert_eq!(answer["usage"]["input_tokens"], 2);
    assert_eq!(answer["usage"]["cache_creation_input_tokens"], 4);
    assert_eq!(answer["usage"]["cache_read_input_tokens"], 0);

    let counted = post(&mock, "/v1/messages/count_tokens", body).await;
    assert_eq!(counted.status, StatusCode::OK);
    assert_eq!(counted.json(), json!({"input_tokens": 6}));
}

#[tokio::test]
async fn a_scripted_anthropic_stream_ends_with_message_stop_unless_scripted_otherwise() {
    let mock = MockProvider::start_anthropic();
    let frames = || {
        let mut frames = vec![anthropic::message_start(
            "msg_1",
            "claude",
            json!({"input_tokens": 3, "output_tokens": 1}),
        )];
        frames.extend(anthropic::text_block(0, &["Hi"]));
        frames.push(anthropic::message_delta("end_turn", None, 1));
        frames
    };
    mock.enqueue(Reply::sse(frames()));
    mock.enqueue(Reply::sse(frames()).without_done());
    mock.enqueue(
        Reply::sse(vec![anthropic::error_event(
            "overloaded_error",
            "Overloaded",
        )])
        .without_done(),
    );

    let complete = post(&mock, "/v1/messages", message(json!({"stream": true})))
        .await
        .text();
    assert_eq!(event_names(&complete).last(), Some(&"message_stop"));
    let unfinished = post(&mock, "/v1/messages", message(json!({"stream": true})))
        .await
        .text();
    assert_eq!(event_names(&unfinished).last(), Some(&"message_delta"));
    let overloaded = post(&mock, "/v1/messages", message(json!({"stream": true})))
        .await
        .text();
    assert_eq!(event_names(&overloaded), ["error"]);

    // Cut: the body breaks after the scripted frames, with no message_stop.
    mock.enqueue(Reply::sse(frames()).disconnect());
    let body = message(json!({"stream": true})).to_string();
    let response = client::send_streaming(
        mock.addr(),
        request(
            "POST",
            "/v1/messages",
            &[("x-api-key", KEY), ("anthropic-version", "v")],
            Some(&body),
        ),
    )
    .await;
    let mut body = response.into_body();
    let mut received = Vec::new();
    let broke = loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                received.extend_from_slice(frame.data_ref().map_or(&[][..], |d| &d[..]))
            }
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(broke, "the body ended cleanly");
    let received = String::from_utf8(received).unwrap();
    assert_eq!(event_names(&received).last(), Some(&"message_delta"));
}

#[tokio::test]
async fn models_and_unknown_paths_answer_in_anthropic_shape() {
    let mock = MockProvider::builder()
        .dialect(Dialect::Anthropic)
        .start()
        .unwrap();
    let models = client::send(
        mock.addr(),
        request(
            "GET",
            "/v1/models",
            &[("x-api-key", KEY), ("anthropic-version", "v")],
            None,
        ),
    )
    .await
    .json();
    assert_eq!(models["data"][0]["type"], "model");
    assert_eq!(models["data"][0]["id"], anthropic::MODELS[0]);

    let unknown = post(&mock, "/v1/chat/completions", json!({})).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.json()["error"]["type"], "not_found_error");

    // The OpenAI default stays one reply away on the same mock.
    mock.enqueue(Reply::openai());
    let chat = post(
        &mock,
        "/v1/chat/completions",
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(chat.json()["object"], "chat.completion");
}
