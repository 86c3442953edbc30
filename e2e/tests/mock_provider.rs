#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The mock provider itself: default answers, scripting, recording, and the connection-level
//! behaviour the gateway tests rely on.

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use aisix_e2e::mock::{Frame, MockProvider, Reply, openai};
use bytes::Bytes;
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(5);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send(
    client: &HttpClient,
    mock: &MockProvider,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> http::Response<Incoming> {
    let body = body.map_or_else(Bytes::new, |body| Bytes::from(body.to_string()));
    let req = Request::builder()
        .method(method)
        .uri(format!("{}{path}", mock.base_url()))
        .header("content-type", "application/json")
        .header("Authorization", "Bearer sk-upstream")
        .body(Full::new(body))
        .unwrap();
    client.request(req).await.unwrap()
}

async fn post(
    client: &HttpClient,
    mock: &MockProvider,
    path: &str,
    body: Value,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let response = send(client, mock, "POST", path, Some(body)).await;
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(body: &[u8]) -> Vec<String> {
    std::str::from_utf8(body)
        .unwrap()
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| event.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn default_chat_completion_is_openai_shaped_and_echoes_model() {
    let mock = MockProvider::start();
    let (status, headers, body) = post(
        &client(),
        &mock,
        "/chat/completions",
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "say hello please"}]}),
    )
    .await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    let body = json_of(&body);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["created"], openai::CREATED);
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], openai::REPLY_TEXT);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8})
    );

    let recorded = mock.last_request().unwrap();
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/v1/chat/completions");
    assert_eq!(recorded.header("authorization"), Some("Bearer sk-upstream"));
    assert_eq!(recorded.headers["authorization"], "Bearer sk-upstream");
    assert_eq!(recorded.body_json().unwrap()["model"], "gpt-4o-mini");
}

#[test]
fn mock_serves_a_plain_test_without_a_runtime() {
    let mock = MockProvider::start();
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = TcpStream::connect(mock.addr()).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();

    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    assert_eq!(json_of(body.as_bytes())["model"], "gpt-4o");
}

#[tokio::test]
async fn chat_stream_sends_role_content_finish_then_done_without_usage() {
    let mock = MockProvider::start();
    let (status, headers, body) = post(
        &client(),
        &mock,
        "/chat/completions",
        json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    let frames = sse_data(&body);
    assert_eq!(frames.len(), 1 + openai::REPLY_PIECES.len() + 1 + 1);
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| json_of(f.as_bytes()))
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-4o")
    );
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks[1..=openai::REPLY_PIECES.len()]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, openai::REPLY_TEXT);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["choices"][0]["delta"], json!({}));
}

#[tokio::test]
async fn chat_stream_with_include_usage_sends_usage_chunk_before_done() {
    let mock = MockProvider::start();
    let (_, _, body) = post(
        &client(),
        &mock,
        "/chat/completions",
        json!({
            "model": "gpt-4o",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "one two"}]}],
        }),
    )
    .await;

    let frames = sse_data(&body);
    assert_eq!(frames.len(), 1 + openai::REPLY_PIECES.len() + 1 + 1 + 1);
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let usage_chunk = json_of(frames[frames.len() - 2].as_bytes());
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7})
    );
    let finish = json_of(frames[frames.len() - 3].as_bytes());
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["usage"], Value::Null);
}

#[tokio::test]
async fn legacy_completions_stream_and_json_follow_the_same_usage_rule() {
    let mock = MockProvider::start();
    let client = client();
    let (_, _, body) = post(
        &client,
        &mock,
        "/completions",
        json!({"model": "gpt-3.5-turbo-instruct", "prompt": "a b c"}),
    )
    .await;
    let body = json_of(&body);
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], openai::REPLY_TEXT);
    assert_eq!(body["usage"]["prompt_tokens"], 3);

    let (_, _, body) = post(
        &client,
        &mock,
        "/completions",
        json!({"model": "m", "prompt": "a", "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    let frames = sse_data(&body);
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let usage_chunk = json_of(frames[frames.len() - 2].as_bytes());
    assert_eq!(usage_chunk["object"], "text_completion");
    assert_eq!(usage_chunk["usage"]["total_tokens"], 6);
    let first = json_of(frames[0].as_bytes());
    assert_eq!(first["choices"][0]["text"], openai::REPLY_PIECES[0]);
}

#[tokio::test]
async fn embeddings_return_one_deterministic_vector_per_input() {
    let mock = MockProvider::start();
    let client = client();
    let (status, _, body) = post(
        &client,
        &mock,
        "/embeddings",
        json!({"model": "text-embedding-3-small", "input": ["first text", "second"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let batch = json_of(&body);
    assert_eq!(batch["object"], "list");
    assert_eq!(batch["model"], "text-embedding-3-small");
    assert_eq!(
        batch["usage"],
        json!({"prompt_tokens": 3, "total_tokens": 3})
    );
    let data = batch["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["object"], "embedding");
    assert_eq!(data[1]["index"], 1);
    assert_eq!(
        data[0]["embedding"].as_array().unwrap().len(),
        openai::EMBEDDING_DIM
    );
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);

    let (_, _, body) = post(
        &client,
        &mock,
        "/embeddings",
        json!({"model": "e", "input": "first text"}),
    )
    .await;
    let single = json_of(&body);
    assert_eq!(single["data"].as_array().unwrap().len(), 1);
    assert_eq!(single["data"][0]["embedding"], data[0]["embedding"]);
}

#[tokio::test]
async fn models_are_listed_and_unknown_paths_are_404_in_openai_error_shape() {
    let mock = MockProvider::start();
    let client = client();
    let models = send(&client, &mock, "GET", "/models", None).await;
    assert_eq!(models.status(), StatusCode::OK);
    let models = json_of(&models.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(
        models["data"].as_array().unwrap().len(),
        openai::MODELS.len()
    );

    let missing = send(&client, &mock, "POST", "/nope", Some(json!({}))).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let error = json_of(&missing.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/nope")
    );

    let (status, _, body) =
        post(&client, &mock, "/chat/completions", json!({"messages": []})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json_of(&body)["error"]["message"].is_string());
}

#[tokio::test]
async fn enqueued_replies_are_used_in_order_then_the_standing_reply_then_the_default() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::status(500).json(json!({"error": {"message": "boom"}})));
    mock.enqueue(
        Reply::openai_error(429, "rate_limit_exceeded", "slow down").header("Retry-After", "2"),
    );
    mock.enqueue(
        Reply::status(400)
            .body("plain")
            .header("content-type", "text/plain"),
    );
    assert_eq!(mock.queued(), 3);
    let client = client();
    let chat = json!({"model": "gpt-4o", "messages": []});

    let (status, _, body) = post(&client, &mock, "/chat/completions", chat.clone()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(json_of(&body)["error"]["message"], "boom");

    let (status, headers, body) = post(&client, &mock, "/chat/completions", chat.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(json_of(&body)["error"]["type"], "rate_limit_exceeded");

    let (status, headers, body) = post(&client, &mock, "/chat/completions", chat.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(headers["content-type"], "text/plain");
    assert_eq!(&body[..], b"plain");

    mock.set_default(Reply::status(503));
    for _ in 0..2 {
        let (status, headers, body) = post(&client, &mock, "/chat/completions", chat.clone()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["content-length"], "0");
        assert!(body.is_empty());
    }
    mock.enqueue(Reply::status(502));
    let (status, _, _) = post(&client, &mock, "/chat/completions", chat.clone()).await;
    assert_eq!(
        status,
        StatusCode::BAD_GATEWAY,
        "the queue goes before the standing reply"
    );

    mock.clear_default();
    let (status, _, _) = post(&client, &mock, "/chat/completions", chat).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mock.queued(), 0);
    assert_eq!(mock.request_count(), 7);
}

#[tokio::test]
async fn disconnect_after_frames_delivers_the_frames_then_an_incomplete_body() {
    let mock = MockProvider::start();
    mock.enqueue(
        Reply::sse([
            Frame::chat_delta("gpt-4o", "Hel"),
            Frame::chat_delta("gpt-4o", "lo").after(Duration::from_millis(20)),
        ])
        .disconnect(),
    );
    let response = send(
        &client(),
        &mock,
        "POST",
        "/chat/completions",
        Some(json!({"model": "gpt-4o", "stream": true})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);

    let mut body = response.into_body();
    let mut received = Vec::new();
    let error = loop {
        match body.frame().await {
            Some(Ok(frame)) => received.extend_from_slice(&frame.into_data().unwrap()),
            Some(Err(error)) => break error,
            None => panic!("the body ended normally after {received:?}"),
        }
    };
    let cause = error
        .source()
        .and_then(|e| e.downcast_ref::<std::io::Error>());
    assert_eq!(
        cause.map(std::io::Error::kind),
        Some(std::io::ErrorKind::UnexpectedEof),
        "the chunked body stops without its terminating chunk: {error:?}"
    );
    let frames = sse_data(&received);
    assert_eq!(frames.len(), 2, "both frames arrive before the disconnect");
    assert!(frames.iter().all(|f| f != "[DONE]"));
    assert!(mock.wait_for_connections_closed(1, WAIT));
    assert_eq!(
        mock.streams_cancelled(),
        0,
        "a scripted disconnect is not a cancellation"
    );
}

#[tokio::test]
async fn keep_alive_serves_sequential_requests_on_one_connection() {
    let mock = MockProvider::start();
    let client = client();
    for _ in 0..3 {
        let (status, _, _) = post(
            &client,
            &mock,
            "/chat/completions",
            json!({"model": "gpt-4o", "stream": true}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(mock.connections_accepted(), 1);
    assert!(mock.requests().iter().all(|r| r.connection == 1));
    assert_eq!(mock.connections_closed(), 0);

    drop(client);
    assert!(
        mock.wait_until_async(WAIT, |m| m.connections_closed() == 1)
            .await
    );
}

#[tokio::test]
async fn dropping_a_hanging_stream_is_seen_as_cancelled() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::openai().hang());
    let response = send(
        &client(),
        &mock,
        "POST",
        "/chat/completions",
        Some(json!({"model": "gpt-4o", "stream": true})),
    )
    .await;
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: {"));
    assert_eq!(mock.streams_cancelled(), 0);

    drop(body);
    assert!(
        mock.wait_until_async(WAIT, |m| m.streams_cancelled() == 1)
            .await
    );
    assert!(
        mock.wait_until_async(WAIT, |m| m.connections_closed() == 1)
            .await
    );
}

#[test]
fn a_client_leaving_during_the_head_delay_is_counted_as_abandoned() {
    let mock = MockProvider::start();
    mock.set_default(Reply::openai().delay_head(Duration::from_secs(60)));
    let mut stream = TcpStream::connect(mock.addr()).unwrap();
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: mock\r\n\r\n")
        .unwrap();
    assert!(mock.wait_for_requests(1, WAIT));
    assert_eq!(mock.requests_abandoned(), 0);

    drop(stream);
    assert!(mock.wait_until(WAIT, |m| m.requests_abandoned() == 1));
    assert!(mock.wait_for_connections_closed(1, WAIT));
    assert_eq!(mock.streams_cancelled(), 0);
}

#[tokio::test]
async fn close_reply_ends_the_connection_without_a_response() {
    let mock = MockProvider::start();
    mock.enqueue(Reply::close());
    let req = Request::post(format!("{}/chat/completions", mock.base_url()))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let error = client().request(req).await.unwrap_err();
    let cause = error
        .source()
        .and_then(|e| e.downcast_ref::<hyper::Error>());
    assert!(
        cause.is_some_and(hyper::Error::is_incomplete_message),
        "{error:?}"
    );
    assert_eq!(mock.request_count(), 1);
    assert!(mock.wait_for_connections_closed(1, WAIT));
}

#[tokio::test]
async fn http2_prior_knowledge_is_served() {
    let mock = MockProvider::start();
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let (status, _, body) = post(
        &client,
        &mock,
        "/chat/completions",
        json!({"model": "gpt-4o", "messages": []}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&body)["model"], "gpt-4o");
    assert_eq!(mock.last_request().unwrap().version, Version::HTTP_2);
}

#[test]
fn default_stream_with_frame_delay_and_without_done_ends_cleanly() {
    let mock = MockProvider::start();
    mock.enqueue(
        Reply::openai()
            .frame_delay(Duration::from_millis(1))
            .without_done(),
    );
    let body = r#"{"model":"gpt-4o","stream":true}"#;
    let mut stream = TcpStream::connect(mock.addr()).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.contains("transfer-encoding: chunked"),
        "{response}"
    );
    assert!(
        response.ends_with("0\r\n\r\n"),
        "the chunked body is terminated: {response}"
    );
    assert!(response.contains("\"finish_reason\":\"stop\""));
    assert!(!response.contains("[DONE]"));
}
