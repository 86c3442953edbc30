#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Vertex AI through the gateway, end to end in both serving modes, against a Vertex stand-in
//! (e2e/python/vertex_asgi_app.py) whose token endpoint verifies the gateway's RS256
//! service-account assertion with PyJWT against a key pair it generated, and whose publisher
//! endpoints validate bodies with Google's `google-genai` and Anthropic's `anthropic` SDK types:
//! Gemini and Anthropic models for OpenAI chat and Anthropic Messages clients, unary and
//! streamed, with tools; errors in each envelope; failover in a group mixing `vertex` and
//! `openai`; a token renewed before it expires while requests go on; and a failed renewal that
//! serves the old token until it expires, then answers 502 and counts the failure. Embeddings
//! go to a text-embedding model's `:predict` (the body checked against google-genai's own
//! Vertex converter), count_tokens to each publisher's counter, and images and JSON mode reach
//! both publishers from both clients in Vertex's forms.

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, openai};
use aisix_e2e::prom;
use aisix_e2e::third_party::vertex::{TokenSettings, VertexMock};
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-vertex-e2e";
const OPENAI_KEY: &str = "sk-oai-upstream-secret-3";
const PROJECT: &str = "mock-project";
const LOCATION: &str = "us-east5";
const GEMINI_PATH: &str =
    "/v1/projects/mock-project/locations/us-east5/publishers/google/models/gemini-2.5-flash";
const CLAUDE_PATH: &str = "/v1/projects/mock-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
const EMBED_PATH: &str =
    "/v1/projects/mock-project/locations/us-east5/publishers/google/models/text-embedding-005";
const CLAUDE_COUNT_PATH: &str = "/v1/projects/mock-project/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict";
const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const PNG_DATA: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

struct Rig {
    vertex: VertexMock,
    openai: MockProvider,
    gateway: Gateway,
}

fn start(mode: Mode, tokens: TokenSettings) -> Rig {
    let vertex = VertexMock::start(PROJECT, LOCATION, tokens);
    let openai = MockProvider::start();
    let resources = format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: vtx
    provider: vertex
    project: {PROJECT}
    location: {LOCATION}
    api_base: {vertex}
    credentials_file: {file}
  - display_name: oai
    provider: openai
    api_key: {OPENAI_KEY}
    api_base: {openai}
models:
  - {{display_name: vgem, provider: vertex, model_name: gemini-2.5-flash, provider_key: vtx}}
  - {{display_name: vclaude, provider: vertex, model_name: "claude-sonnet-4@20250514", provider_key: vtx}}
  - {{display_name: vembed, provider: vertex, model_name: text-embedding-005, provider_key: vtx}}
  - {{display_name: gpt, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - display_name: gem-first
    routing: {{targets: [{{model: vgem, priority: 1}}, {{model: gpt}}]}}
  - display_name: claude-first
    routing: {{targets: [{{model: vclaude, priority: 1}}, {{model: gpt}}]}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        vertex = vertex.base_url(),
        file = vertex.credentials_file().display(),
        openai = openai.base_url(),
    );
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources)
            .metrics()
            .env("CLIENT_KEY", CLIENT_KEY)
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\n"),
    );
    Rig {
        vertex,
        openai,
        gateway,
    }
}

impl Rig {
    async fn post(&self, path: &str, body: Value) -> Reply {
        let auth = format!("Bearer {CLIENT_KEY}");
        let body = body.to_string();
        let headers: Vec<(&str, &str)> = if path == "/v1/messages" {
            vec![
                ("x-api-key", CLIENT_KEY),
                ("anthropic-version", "2023-06-01"),
            ]
        } else {
            vec![("authorization", &auth)]
        };
        client::send(
            self.gateway.addr(),
            request("POST", path, &headers, Some(&body)),
        )
        .await
    }

    async fn chat(&self, body: Value) -> Reply {
        self.post("/v1/chat/completions", body).await
    }

    async fn messages(&self, body: Value) -> Reply {
        self.post("/v1/messages", body).await
    }

    /// The last publisher call, which the mock's SDK types accepted.
    fn sent(&self) -> Value {
        let last = self.vertex.last("vertex");
        assert!(
            last.get("invalid").is_none(),
            "the mock refused what the gateway sent: {last}\n{}",
            self.vertex.logs()
        );
        if last["status"] == "delegated" {
            let gemini = self.vertex.last("request");
            assert!(
                gemini.get("invalid").is_none(),
                "the google-genai types refused what the gateway sent: {gemini}"
            );
        }
        last
    }

    async fn metrics(&self) -> String {
        let reply = client::get(self.gateway.metrics_addr.unwrap(), "/metrics").await;
        assert_eq!(reply.status, 200);
        reply.text()
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

fn text_of_chunks(events: &[(Option<String>, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, c)| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}

fn anthropic_text(events: &[(Option<String>, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, e)| e.pointer("/delta/text").and_then(Value::as_str))
        .collect()
}

both_modes! {
    async fn gemini_on_vertex_serves_both_clients_with_the_service_account_s_token(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let reply = rig.chat(json!({"model": "vgem", "max_tokens": 64,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from Gemini.");
        let seen = rig.sent();
        assert_eq!(seen["path"], format!("{GEMINI_PATH}:generateContent"));
        assert_eq!(seen["token"], "ya29.mock-token-1");
        assert!(!seen["headers"].to_string().contains(CLIENT_KEY), "the client's key went upstream");
        assert_eq!(rig.vertex.last("request")["body"]["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));

        let reply = rig.chat(json!({"model": "vgem", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        assert_eq!(streamed.last().unwrap().1, "[DONE]");
        assert_eq!(text_of_chunks(&streamed), "Hello from Gemini.");
        let seen = rig.sent();
        assert_eq!(seen["path"], format!("{GEMINI_PATH}:streamGenerateContent"));
        assert_eq!(seen["query"], "alt=sse");

        let tools = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let reply = rig.chat(json!({"model": "vgem", "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "weather");
        rig.sent();

        let reply = rig.messages(json!({"model": "vgem", "max_tokens": 50, "stream": true,
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        assert_eq!(streamed.last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(anthropic_text(&streamed), "Hello from Gemini.");
        rig.sent();

        let reply = rig.post("/v1/responses", json!({"model": "vgem", "input": "Hello there", "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["output"][0]["content"][0]["text"], "Hello from Gemini.");
        rig.sent();

        // One token served every request: fetched once, off the request path.
        let tokens = rig.vertex.events("token");
        assert_eq!(tokens.len(), 1, "{tokens:?}");
        assert_eq!(tokens[0]["ok"], true, "{tokens:?}");
        assert!(rig.vertex.events("vertex").iter().all(|call| call["token"] == "ya29.mock-token-1"));
    }
}

both_modes! {
    async fn claude_on_vertex_goes_to_raw_predict_without_model_and_with_vertex_s_version(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let reply = rig.messages(json!({"model": "vclaude", "max_tokens": 100, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["type"], "message");
        assert_eq!(body["content"], json!([{"type": "text", "text": "Hello from Claude on Vertex."}]));
        assert_eq!(body["usage"]["input_tokens"], 4);
        let seen = rig.sent();
        assert_eq!(seen["path"], format!("{CLAUDE_PATH}:rawPredict"));
        assert_eq!(seen["body"]["anthropic_version"], "vertex-2023-10-16");
        assert!(seen["body"].get("model").is_none());
        assert_eq!(seen["body"]["system"], "Be brief.");
        assert_eq!(seen["token"], "ya29.mock-token-1");

        let reply = rig.messages(json!({"model": "vclaude", "max_tokens": 100, "stream": true,
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        assert_eq!(streamed.first().unwrap().0.as_deref(), Some("message_start"));
        assert_eq!(streamed.last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(anthropic_text(&streamed), "Hello from Claude on Vertex.");
        assert_eq!(rig.sent()["path"], format!("{CLAUDE_PATH}:streamRawPredict"));

        let reply = rig.chat(json!({"model": "vclaude", "max_tokens": 100,
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from Claude on Vertex.");
        let seen = rig.sent();
        assert_eq!(seen["body"]["anthropic_version"], "vertex-2023-10-16");
        assert!(seen["body"].get("model").is_none());

        let tools = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let reply = rig.chat(json!({"model": "vclaude", "stream": true, "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        assert_eq!(streamed.last().unwrap().1, "[DONE]");
        let name = streamed.iter().find_map(|(_, c)| c.pointer("/choices/0/delta/tool_calls/0/function/name").and_then(Value::as_str));
        assert_eq!(name, Some("weather"), "{streamed:?}");
        assert_eq!(rig.sent()["path"], format!("{CLAUDE_PATH}:streamRawPredict"));

        let reply = rig.post("/v1/responses", json!({"model": "vclaude", "input": "Hello there", "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["output"][0]["content"][0]["text"], "Hello from Claude on Vertex.");
        assert_eq!(rig.sent()["path"], format!("{CLAUDE_PATH}:rawPredict"));
    }
}

both_modes! {
    async fn vertex_errors_reach_each_client_and_a_mixed_group_falls_over(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let reply = rig.chat(json!({"model": "vclaude", "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "RESOURCE_EXHAUSTED");
        let reply = rig.messages(json!({"model": "vclaude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
        let reply = rig.messages(json!({"model": "vgem", "max_tokens": 5, "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["type"], "error");

        // Each group's first call is served by its vertex target; the failures that follow cool
        // it down, which a later call would see.
        for (group, marker, served) in [("gem-first", "", "vgem"), ("claude-first", "", "vclaude"),
                                        ("gem-first", "[503]", "gpt"), ("gem-first", "[429]", "gpt"),
                                        ("claude-first", "[529]", "gpt"), ("claude-first", "[429]", "gpt")] {
            let reply = rig.chat(json!({"model": group, "messages": [{"role": "user", "content": format!("hi {marker}")}]})).await;
            assert_eq!(reply.status, 200, "{group} {marker}: {}", reply.text());
            assert_eq!(reply.header("x-aisix-served-by"), Some(served), "{group} {marker}");
        }
        let reply = rig.messages(json!({"model": "claude-first", "max_tokens": 5, "stream": true,
            "messages": [{"role": "user", "content": "hi [529]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        assert_eq!(events(&reply.text()).last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(rig.openai.requests().len(), 5);
        assert_eq!(
            rig.chat(json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]})).await.json()["choices"][0]["message"]["content"],
            openai::REPLY_TEXT
        );
    }
}

both_modes! {
    async fn a_token_near_expiry_is_renewed_before_use_while_requests_keep_succeeding(mode: Mode) {
        // Tokens live 9 s and take 1 s to issue: each is renewed at 6 s, and in use until then.
        let rig = start(mode, TokenSettings { lifetime: Duration::from_secs(9), delay: Duration::from_secs(1) });
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut sent = 0;
        while rig.vertex.events("token").len() < 3 && std::time::Instant::now() < deadline {
            let reply = rig.chat(json!({"model": "vgem", "messages": [{"role": "user", "content": "Hello there"}]})).await;
            assert_eq!(reply.status, 200, "request {sent}: {}\n{}", reply.text(), rig.gateway.logs());
            sent += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let tokens = rig.vertex.events("token");
        assert!(tokens.len() >= 3, "{tokens:?}");
        assert!(tokens.iter().all(|t| t["ok"] == true), "{tokens:?}");
        // Every request carried a token the mock had issued and not yet expired (else 401),
        // the first and the renewed ones in turn.
        let used: std::collections::BTreeSet<String> = rig.vertex.events("vertex").iter()
            .map(|call| call["token"].as_str().unwrap().to_owned()).collect();
        assert!(used.contains("ya29.mock-token-1") && used.contains("ya29.mock-token-2"), "{used:?}");
        assert!(rig.vertex.events("vertex").iter().all(|call| call["status"] == "delegated"));
    }
}

both_modes! {
    async fn a_failed_renewal_keeps_the_old_token_until_it_expires_then_answers_502_and_counts(mode: Mode) {
        let rig = start(mode, TokenSettings { lifetime: Duration::from_secs(4), delay: Duration::ZERO });
        let ask = || rig.chat(json!({"model": "vgem", "messages": [{"role": "user", "content": "Hello there"}]}));
        let reply = ask().await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        rig.vertex.fail_tokens(true);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let refused = loop {
            let reply = ask().await;
            if reply.status != 200 {
                break reply;
            }
            assert!(std::time::Instant::now() < deadline, "the expired token was never refused");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(refused.status, 502, "{}", refused.text());
        let message = refused.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("no valid credential for provider key 'vtx'"), "{message}");
        assert!(!refused.text().contains("PRIVATE KEY") && !refused.text().contains("ya29."), "{message}");
        // The old token served until then: no request reached Vertex with anything else.
        assert!(rig.vertex.events("vertex").iter().all(|call| call["token"] == "ya29.mock-token-1"));
        assert!(rig.vertex.events("token").iter().any(|t| t["ok"] == false));
        let page = rig.metrics().await;
        assert!(prom::sample(&page, "aisix_credential_refresh_failures_total", &[("provider", "vtx")]) >= 1.0, "{page}");
        prom::promtool_check(&page).unwrap();

        // The token endpoint back: a retry fetches a new token and requests succeed again.
        rig.vertex.fail_tokens(false);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let reply = ask().await;
            if reply.status == 200 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no new token after the outage");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(rig.sent()["token"], "ya29.mock-token-2");
    }
}

/// Reloads the gateway's resources with `edit` applied and waits until it has taken them.
async fn reload(rig: &Rig, count: f64, edit: impl Fn(String) -> String) {
    let path = rig.gateway.dir().join("resources.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
    rig.gateway.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while prom::sample(
        &rig.metrics().await,
        "aisix_config_reloads_total",
        &[("result", "success")],
    ) < count
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload\n{}",
            rig.gateway.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

both_modes! {
    async fn a_reload_keeping_the_key_keeps_its_live_token_and_a_new_key_file_gets_a_new_one(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let ask = |model: &'static str| rig.chat(json!({"model": model, "messages": [{"role": "user", "content": "Hello there"}]}));
        assert_eq!(ask("vgem").await.status, 200);
        reload(&rig, 1.0, |text| text.replace(
            "  - {display_name: gpt,",
            "  - {display_name: vgem2, provider: vertex, model_name: gemini-2.5-pro, provider_key: vtx}\n  - {display_name: gpt,",
        )).await;
        let reply = ask("vgem2").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.sent()["token"], "ya29.mock-token-1");
        assert_eq!(rig.vertex.events("token").len(), 1, "the reload fetched a token again");

        // Another key file (the same account, moved): a new credential, fetched anew.
        let moved = rig.gateway.dir().join("moved-sa.json");
        std::fs::copy(rig.vertex.credentials_file(), &moved).unwrap();
        let old = rig.vertex.credentials_file().display().to_string();
        reload(&rig, 2.0, |text| text.replace(&old, &moved.display().to_string())).await;
        let reply = ask("vgem").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(rig.sent()["token"], "ya29.mock-token-2");
    }
}

both_modes! {
    async fn embeddings_on_vertex_go_to_predict_and_count_the_tokens_vertex_reports(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let reply = rig.post("/v1/embeddings", json!({"model": "vembed",
            "input": ["first text here", "second"], "dimensions": 3})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "list");
        assert_eq!(body["model"], "text-embedding-005");
        // The stand-in's vectors: (words + j) / 8; its token counts: words.
        assert_eq!(body["data"][0]["embedding"], json!([0.375, 0.5, 0.625]));
        assert_eq!(body["data"][1]["index"], 1);
        assert_eq!(body["data"][1]["embedding"], json!([0.125, 0.25, 0.375]));
        assert_eq!(body["usage"], json!({"prompt_tokens": 4, "total_tokens": 4}));
        let seen = rig.sent();
        assert_eq!(seen["path"], format!("{EMBED_PATH}:predict"));
        assert_eq!(seen["status"], 200);
        assert_eq!(seen["body"], json!({"instances": [{"content": "first text here"}, {"content": "second"}],
            "parameters": {"outputDimensionality": 3}}));
        assert_eq!(seen["token"], "ya29.mock-token-1");

        let reply = rig.post("/v1/embeddings", json!({"model": "vembed", "input": "one",
            "encoding_format": "base64"})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        // Four little-endian f32s: 0.125, 0.25, 0.375, 0.5.
        assert_eq!(reply.json()["data"][0]["embedding"], "AAAAPgAAgD4AAMA+AAAAPw==");
        assert_eq!(rig.sent()["body"], json!({"instances": [{"content": "one"}]}));

        let calls = rig.vertex.events("vertex").len();
        let reply = rig.post("/v1/embeddings", json!({"model": "vembed", "input": [[1, 2, 3]]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        let message = reply.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.starts_with("input: must be a string or an array of strings"), "{message}");
        let reply = rig.post("/v1/embeddings", json!({"model": "vclaude", "input": "hi"})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(reply.json()["error"]["message"].as_str().unwrap().contains("has no /embeddings endpoint"), "{}", reply.text());
        assert_eq!(rig.vertex.events("vertex").len(), calls, "a refused request reached Vertex");
    }
}

both_modes! {
    async fn count_tokens_on_vertex_reaches_each_publisher_s_counter(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let tools = json!([{"name": "weather", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string"}}}}]);
        let reply = rig.post("/v1/messages/count_tokens", json!({"model": "vgem", "system": "Be brief.",
            "tools": tools, "messages": [{"role": "user", "content": "How many tokens here?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json(), json!({"input_tokens": 6}));
        let seen = rig.sent();
        assert_eq!(seen["path"], format!("{GEMINI_PATH}:countTokens"));
        assert_eq!(seen["body"]["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(seen["body"]["tools"][0]["functionDeclarations"][0]["name"], "weather");
        assert!(seen["body"].get("generateContentRequest").is_none(), "{seen}");

        let reply = rig.post("/v1/messages/count_tokens", json!({"model": "vclaude", "system": "Be brief.",
            "messages": [{"role": "user", "content": "How many tokens here?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json(), json!({"input_tokens": 6}));
        let seen = rig.sent();
        assert_eq!(seen["path"], CLAUDE_COUNT_PATH);
        assert_eq!(seen["body"]["model"], "claude-sonnet-4@20250514");
        assert_eq!(seen["body"]["anthropic_version"], "vertex-2023-10-16");
        assert_eq!(seen["token"], "ya29.mock-token-1");
    }
}

both_modes! {
    async fn images_and_json_mode_reach_both_vertex_publishers_from_both_clients(mode: Mode) {
        let rig = start(mode, TokenSettings::default());
        let picture = json!([{"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": PNG}}]);
        let reply = rig.chat(json!({"model": "vgem", "messages": [{"role": "user", "content": picture}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"], "I see image/png.");
        rig.sent();
        assert_eq!(rig.vertex.last("request")["body"]["contents"][0]["parts"][1],
            json!({"inlineData": {"mimeType": "image/png", "data": PNG_DATA}}));
        let reply = rig.chat(json!({"model": "vclaude", "messages": [{"role": "user", "content": picture}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"], "I see image/png.");
        assert_eq!(rig.sent()["body"]["messages"][0]["content"][1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_DATA}}));

        let block = json!([{"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_DATA}}]);
        for model in ["vgem", "vclaude"] {
            let reply = rig.messages(json!({"model": model, "max_tokens": 50,
                "messages": [{"role": "user", "content": block}]})).await;
            assert_eq!(reply.status, 200, "{model}: {}", reply.text());
            assert_eq!(reply.json()["content"][0]["text"], "I see image/png.", "{model}");
            rig.sent();
        }
        assert_eq!(rig.vertex.last("vertex")["body"]["messages"][0]["content"][1], block[1]);

        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"]});
        let format = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema}});
        let reply = rig.chat(json!({"model": "vgem", "response_format": format,
            "messages": [{"role": "user", "content": "Who?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let said: Value = serde_json::from_str(reply.json()["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        assert_eq!(said, json!({"name": "Ada", "age": 36}));
        rig.sent();
        let config = &rig.vertex.last("request")["body"]["generationConfig"];
        assert_eq!(config["responseMimeType"], "application/json");
        assert_eq!(config["responseJsonSchema"], schema);
        let reply = rig.chat(json!({"model": "vclaude", "response_format": format,
            "messages": [{"role": "user", "content": "Who?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let said: Value = serde_json::from_str(reply.json()["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        assert_eq!(said, json!({"name": "Ada", "age": 36}));
        let seen = rig.sent();
        assert_eq!(seen["body"]["tool_choice"], json!({"type": "tool", "name": "json_output"}));
        assert_eq!(seen["body"]["tools"][0]["input_schema"], schema);

        // An Anthropic client asks for JSON with a forced tool.
        let tools = json!([{"name": "record_person", "input_schema": schema}]);
        for model in ["vgem", "vclaude"] {
            let reply = rig.messages(json!({"model": model, "max_tokens": 50, "tools": tools,
                "tool_choice": {"type": "tool", "name": "record_person"},
                "messages": [{"role": "user", "content": "Who?"}]})).await;
            assert_eq!(reply.status, 200, "{model}: {}", reply.text());
            let body = reply.json();
            assert_eq!(body["stop_reason"], "tool_use", "{model}: {body}");
            assert_eq!(body["content"][0]["name"], "record_person", "{model}: {body}");
            rig.sent();
        }
        assert_eq!(rig.vertex.last("vertex")["body"]["tool_choice"], json!({"type": "tool", "name": "record_person"}));
        assert_eq!(rig.vertex.last("vertex")["body"]["tools"], tools);
        let calling = &rig.vertex.last("request")["body"]["toolConfig"]["functionCallingConfig"];
        assert_eq!(calling["mode"], "ANY", "{calling}");
        assert_eq!(calling["allowedFunctionNames"], json!(["record_person"]));
    }
}
