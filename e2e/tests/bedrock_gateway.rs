#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bedrock through the gateway, end to end in both serving modes, against a Bedrock stand-in
//! checked by AWS's own botocore: every request's SigV4 signature is recomputed with botocore's
//! signer (a mismatch is AWS's 403), every body is checked against botocore's bedrock-runtime
//! service model, and every ConverseStream message is decoded by botocore before it is sent.
//! OpenAI chat and Anthropic Messages clients, unary and streamed, with tools, images, JSON
//! mode and thinking; Titan and Cohere embeddings; credentials from the resources and from the
//! environment; errors in each client's envelope, in-band exceptions and bad CRCs; failover in
//! a group mixing `bedrock` and `openai`.

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, openai};
use aisix_e2e::prom;
use aisix_e2e::third_party::bedrock::{AwsCredentials, BedrockMock};
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-bedrock-e2e";
const ACCESS_KEY_ID: &str = "AKIAMOCKBEDROCK1";
const SECRET_KEY: &str = "wJalrXUtnFEMI-bedrock-secret-1";
const SESSION_TOKEN: &str = "session-token-bedrock-1";
const OPENAI_KEY: &str = "sk-oai-upstream-secret-2";
const CLAUDE: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";
/// A model Bedrock serves with prompt caching (the one above has none).
const CLAUDE_4: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

struct Rig {
    bedrock: BedrockMock,
    openai: MockProvider,
    gateway: Gateway,
}

fn start(mode: Mode) -> Rig {
    let bedrock = BedrockMock::start(AwsCredentials {
        access_key_id: ACCESS_KEY_ID,
        secret_access_key: SECRET_KEY,
        session_token: Some(SESSION_TOKEN),
        region: "us-west-2",
    });
    let openai = MockProvider::start();
    let resources = format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: aws
    provider: bedrock
    region: us-west-2
    api_base: {bedrock}
    access_key_id: {ACCESS_KEY_ID}
    secret_access_key: {SECRET_KEY}
    session_token: {SESSION_TOKEN}
  - display_name: aws-env
    provider: bedrock
    region: us-west-2
    api_base: {bedrock}
  - display_name: aws-wrong
    provider: bedrock
    region: us-west-2
    api_base: {bedrock}
    access_key_id: {ACCESS_KEY_ID}
    secret_access_key: not-the-secret-key
    session_token: {SESSION_TOKEN}
  - display_name: oai
    provider: openai
    api_key: {OPENAI_KEY}
    api_base: {openai}
models:
  - {{display_name: claude, provider: bedrock, model_name: "{CLAUDE}", provider_key: aws}}
  - {{display_name: claude-cache, provider: bedrock, model_name: "{CLAUDE_4}", provider_key: aws}}
  - {{display_name: claude-priced, provider: bedrock, model_name: "{CLAUDE}", provider_key: aws, cost: {{input_per_1k: 0.001, output_per_1k: 0.002}}}}
  - {{display_name: nova, provider: bedrock, model_name: amazon.nova-lite-v1:0, provider_key: aws}}
  - {{display_name: from-env, provider: bedrock, model_name: "{CLAUDE}", provider_key: aws-env}}
  - {{display_name: wrong, provider: bedrock, model_name: "{CLAUDE}", provider_key: aws-wrong}}
  - {{display_name: titan, provider: bedrock, model_name: "amazon.titan-embed-text-v2:0", provider_key: aws}}
  - {{display_name: cohere, provider: bedrock, model_name: cohere.embed-english-v3, provider_key: aws}}
  - {{display_name: gpt, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - display_name: claude-first
    routing: {{targets: [{{model: claude, priority: 1}}, {{model: gpt}}]}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        bedrock = bedrock.base_url(),
        openai = openai.base_url(),
    );
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources)
            .env("CLIENT_KEY", CLIENT_KEY)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
            .metrics()
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\n"),
    );
    Rig {
        bedrock,
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

    /// The last request the mock saw, whose signature botocore recomputed and whose body
    /// botocore's service model accepted.
    fn sent(&self) -> Value {
        let last = self.bedrock.last();
        assert!(
            last.get("invalid").is_none() && last.get("error").is_none(),
            "botocore refused what the gateway sent: {last}\n{}",
            self.bedrock.logs()
        );
        last
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

const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

both_modes! {
    async fn openai_chat_reaches_bedrock_signed_and_translated_unary_and_streamed(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "claude", "temperature": 0.3, "max_tokens": 64, "stop": ["zzz"],
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from Bedrock.");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 4, "{body}");
        assert_eq!(body["usage"]["completion_tokens"], 3);
        let seen = rig.sent();
        // The model id's `:` is percent-encoded in the path, and signed that way.
        assert_eq!(seen["raw_path"], "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse");
        assert!(seen["headers"]["authorization"].as_str().unwrap().starts_with("AWS4-HMAC-SHA256 Credential=AKIAMOCKBEDROCK1/"));
        assert_eq!(seen["headers"]["x-amz-security-token"], SESSION_TOKEN);
        assert!(!seen["headers"].to_string().contains(CLIENT_KEY), "the client's key went upstream");
        assert_eq!(seen["body"]["system"], json!([{"text": "Be brief."}]));
        assert_eq!(seen["body"]["inferenceConfig"], json!({"maxTokens": 64, "temperature": 0.3, "stopSequences": ["zzz"]}));

        let reply = rig.chat(json!({"model": "claude", "stream": true, "stream_options": {"include_usage": true},
            "reasoning_effort": "low", "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().1, "[DONE]", "{events:?}");
        assert_eq!(text_of_chunks(&events), "Hello from Bedrock.");
        let reasoning: String = events.iter().filter_map(|(_, c)| c.pointer("/choices/0/delta/reasoning_content").and_then(Value::as_str)).collect();
        assert_eq!(reasoning, "Thinking about it.");
        let usage = &events[events.len() - 2].1["usage"];
        assert_eq!(usage["completion_tokens"], 6, "{usage}");
        let seen = rig.sent();
        assert_eq!(seen["raw_path"], "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");
        assert_eq!(seen["body"]["additionalModelRequestFields"]["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));

        // Credentials from the environment sign as well as those in the resources.
        let reply = rig.chat(json!({"model": "from-env", "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        rig.sent();
    }
}

both_modes! {
    async fn tools_images_and_json_mode_cross_to_bedrock_and_back(mode: Mode) {
        let rig = start(mode);
        let tools = json!([{"type": "function", "function": {"name": "weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        let reply = rig.chat(json!({"model": "claude", "tools": tools, "tool_choice": "required",
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let message = &reply.json()["choices"][0];
        assert_eq!(message["finish_reason"], "tool_calls");
        let call = &message["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "weather");
        assert_eq!(serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
        let seen = rig.sent();
        assert_eq!(seen["body"]["toolConfig"]["toolChoice"], json!({"any": {}}));
        assert_eq!(seen["body"]["toolConfig"]["tools"][0]["toolSpec"]["name"], "weather");

        // The result goes back as a toolResult of the same call, streamed.
        let id = call["id"].as_str().unwrap();
        let reply = rig.chat(json!({"model": "claude", "tools": tools, "stream": true, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": id, "content": "{\"celsius\": 21}"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let seen = rig.sent();
        let result = &seen["body"]["messages"][2]["content"][0]["toolResult"];
        assert_eq!(result["toolUseId"], seen["body"]["messages"][1]["content"][0]["toolUse"]["toolUseId"]);
        assert_eq!(text_of_chunks(&events), "The tool said: \"{\\\"celsius\\\": 21}\"");

        // A streamed tool call comes back as OpenAI's tool_calls deltas.
        let reply = rig.chat(json!({"model": "claude", "tools": tools, "stream": true,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        let streamed = self::events(&reply.text());
        let arguments: String = streamed.iter().filter_map(|(_, c)| c.pointer("/choices/0/delta/tool_calls/0/function/arguments").and_then(Value::as_str)).collect();
        assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"city": "Paris"}), "{streamed:?}");

        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG}}]}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"], "I see image/png.");
        assert_eq!(rig.sent()["body"]["messages"][0]["content"][1]["image"]["format"], "png");

        // An image by URL cannot reach Bedrock (bytes only): refused before anything is sent.
        let before = rig.bedrock.requests().len();
        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(reply.json()["error"]["message"].as_str().unwrap().contains("base64"), "{}", reply.text());
        assert_eq!(rig.bedrock.requests().len(), before);

        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]});
        let reply = rig.chat(json!({"model": "claude", "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
            "messages": [{"role": "user", "content": "A person"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let choice = &reply.json()["choices"][0];
        assert_eq!(choice["finish_reason"], "stop");
        let content = choice["message"]["content"].as_str().unwrap().to_owned();
        assert_eq!(serde_json::from_str::<Value>(&content).unwrap(), json!({"name": "Ada", "age": 36}));
        let config = &rig.sent()["body"]["toolConfig"];
        assert_eq!(config["toolChoice"], json!({"tool": {"name": "json_output"}}));
        assert_eq!(config["tools"][0]["toolSpec"]["inputSchema"]["json"], schema);
    }
}

both_modes! {
    async fn anthropic_messages_reach_bedrock_and_come_back_in_anthropic_shape(mode: Mode) {
        let rig = start(mode);
        let reply = rig.messages(json!({"model": "claude", "max_tokens": 100, "system": "Be brief.",
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG.split(',').nth(1).unwrap()}}]}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["type"], "message");
        assert_eq!(body["content"], json!([
            {"type": "thinking", "thinking": "Thinking about it.", "signature": "sig-1"},
            {"type": "text", "text": "I see image/png."}]));
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["usage"]["output_tokens"], 6);
        let seen = rig.sent();
        assert_eq!(seen["body"]["system"], json!([{"text": "Be brief."}]));
        assert_eq!(seen["body"]["additionalModelRequestFields"], json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}));

        let tools = json!([{"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        let reply = rig.messages(json!({"model": "claude", "max_tokens": 100, "stream": true, "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let events = events(&reply.text());
        let names: Vec<&str> = events.iter().filter_map(|e| e.0.as_deref()).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
        assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
        let start = events.iter().find(|e| e.0.as_deref() == Some("content_block_start")).unwrap();
        assert_eq!(start.1["content_block"]["type"], "tool_use");
        assert_eq!(start.1["content_block"]["name"], "weather");
        let input: String = events.iter().filter_map(|e| e.1.pointer("/delta/partial_json").and_then(Value::as_str)).collect();
        assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"city": "Paris"}));
        let delta = events.iter().find(|e| e.0.as_deref() == Some("message_delta")).unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta.1["usage"]["input_tokens"], 3, "{:?}", delta.1);
        assert_eq!(rig.sent()["raw_path"], "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");

        // Thinking is Anthropic's to take: a Nova model's request carries none.
        let reply = rig.messages(json!({"model": "nova", "max_tokens": 100, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["content"], json!([{"type": "text", "text": "Hello from Bedrock."}]));
        assert!(rig.sent()["body"].get("additionalModelRequestFields").is_none());
    }
}

both_modes! {
    async fn embeddings_go_through_invoke_model_with_titan_and_cohere_bodies(mode: Mode) {
        let rig = start(mode);
        let reply = rig.post("/v1/embeddings", json!({"model": "titan", "input": "two words", "dimensions": 3, "encoding_format": "float"})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "list");
        assert_eq!(body["data"][0]["embedding"], json!([0.25, 0.375, 0.5]));
        assert_eq!(body["usage"]["prompt_tokens"], 2);
        let seen = rig.sent();
        assert_eq!(seen["raw_path"], "/model/amazon.titan-embed-text-v2%3A0/invoke");
        assert_eq!(seen["body"], json!({"inputText": "two words", "dimensions": 3}));

        let reply = rig.post("/v1/embeddings", json!({"model": "cohere", "input": ["one", "two words"], "encoding_format": "base64"})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD.decode(body["data"][1]["embedding"].as_str().unwrap()).unwrap();
        let floats: Vec<f32> = bytes.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(floats, [0.25, 0.375, 0.5, 0.625]);
        assert_eq!(rig.sent()["body"], json!({"texts": ["one", "two words"], "input_type": "search_document"}));

        // Titan embeds one text per call: a list is refused before anything is sent.
        let reply = rig.post("/v1/embeddings", json!({"model": "titan", "input": ["a", "b"]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    }
}

both_modes! {
    async fn bedrock_errors_reach_each_client_in_its_own_envelope(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
        assert!(!reply.text().contains(SECRET_KEY));

        let reply = rig.messages(json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["type"], "error");
        assert_eq!(reply.json()["error"]["type"], "rate_limit_error");

        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 502, "{}", reply.text());

        let reply = rig.chat(json!({"model": "claude", "messages": [{"role": "user", "content": "hi [long]"}]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "context_length_exceeded", "{}", reply.text());

        // A wrong secret key: botocore's signature differs, and AWS's 403 is the gateway's
        // credentials refused, never the secret in the answer.
        let reply = rig.chat(json!({"model": "wrong", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 403, "{}", reply.text());
        assert_eq!(rig.bedrock.last()["error"], "InvalidSignatureException");
        assert!(!reply.text().contains("not-the-secret-key"));

        // Mid-stream: an exception message, a body cut short, or a message whose CRC is wrong
        // ends the client's stream with an error event and no [DONE].
        for marker in ["[exception]", "[cut]", "[badcrc]"] {
            let reply = rig.chat(json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": format!("hi {marker}")}]})).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            let text = reply.text();
            assert!(!text.contains("[DONE]"), "{marker}: {text}");
            let last = events(&text).pop().unwrap();
            assert!(last.1.get("error").is_some(), "{marker}: {text}");
            if marker == "[exception]" {
                assert!(text.contains("Too many tokens"), "{text}");
            }
        }
        let reply = rig.messages(json!({"model": "claude", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "hi [exception]"}]})).await;
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().0.as_deref(), Some("error"), "{events:?}");
        assert!(!events.iter().any(|e| e.0.as_deref() == Some("message_stop")));
    }
}

both_modes! {
    async fn a_group_mixing_bedrock_and_openai_falls_over_on_throttling_and_unavailable(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "claude-first", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("claude"));
        assert_eq!(reply.json()["model"], "claude");

        let reply = rig.chat(json!({"model": "claude-first", "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        assert_eq!(reply.json()["choices"][0]["message"]["content"], openai::REPLY_TEXT);

        let reply = rig.chat(json!({"model": "claude-first", "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"), "ThrottlingException falls over");

        let reply = rig.messages(json!({"model": "claude-first", "max_tokens": 5, "stream": true,
            "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(rig.openai.requests().len(), 3);
    }
}

both_modes! {
    async fn a_responses_request_reaches_bedrock_through_chat_and_comes_back_as_a_response(mode: Mode) {
        let rig = start(mode);
        let reply = rig.post("/v1/responses", json!({"model": "claude", "input": "Hello there", "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"][0]["content"][0]["text"], "Hello from Bedrock.", "{body}");
        assert_eq!(rig.sent()["raw_path"], "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse");

        let reply = rig.post("/v1/responses", json!({"model": "claude", "input": "Hello there", "stream": true, "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        let names: Vec<&str> = streamed.iter().filter_map(|e| e.0.as_deref()).collect();
        assert_eq!(names.first(), Some(&"response.created"), "{names:?}");
        assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
        let text: String = streamed.iter().filter(|e| e.0.as_deref() == Some("response.output_text.delta"))
            .map(|e| e.1["delta"].as_str().unwrap().to_owned()).collect();
        assert_eq!(text, "Hello from Bedrock.");
        assert_eq!(rig.sent()["raw_path"], "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream");

        let reply = rig.post("/v1/responses", json!({"model": "claude", "input": "hi [exception]", "stream": true, "store": false})).await;
        let failed = events(&reply.text());
        assert_eq!(failed.last().unwrap().0.as_deref(), Some("response.failed"), "{failed:?}");
    }
}

both_modes! {
    /// A ConverseStream reports usage only in its last message: a stream cut before it is
    /// charged the prompt estimate and one output token per content event sent (README,
    /// "Settlement"), never nothing. `claude-priced` costs 1 µ$ per input and 2 µ$ per output
    /// token; the stand-in sends one text delta before the cut or the exception.
    async fn a_bedrock_stream_cut_before_its_usage_is_charged_the_prompt_and_the_content_sent(mode: Mode) {
        let rig = start(mode);
        let metrics = rig.gateway.metrics_addr.unwrap();
        let chat = json!({"model": "claude-priced", "stream": true, "messages": [{"role": "user", "content": "hi [cut]"}]});
        let reply = rig.chat(chat.clone()).await;
        assert!(!reply.text().contains("[DONE]"), "{}", reply.text());
        let prompt = chat.to_string().len().div_ceil(4) as u64;
        let after_chat = prom::spent_micros(metrics, "client", "claude-priced", 0).await;
        assert_eq!(after_chat, prompt + 2, "prompt estimate {prompt} and one output token");

        let messages = json!({"model": "claude-priced", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "hi [exception]"}]});
        rig.messages(messages.clone()).await;
        let prompt = messages.to_string().len().div_ceil(4) as u64;
        let total = prom::spent_micros(metrics, "client", "claude-priced", after_chat).await;
        assert_eq!(total - after_chat, prompt + 2, "prompt estimate {prompt} and one output token");
    }
}

both_modes! {
    /// Claude Code marks its system prompt, tools and last turn with `cache_control`: on a
    /// Bedrock model with prompt caching each mark becomes a `cachePoint` after the block it
    /// closes (botocore's service model checks the body), and the stand-in, caching as Bedrock
    /// does only at cache points, writes the prefix the first time and reads it the second,
    /// which the client sees as Anthropic's cache usage. On a model without prompt caching the
    /// marks are dropped, as Anthropic drops a breakpoint it cannot use.
    async fn cache_control_becomes_cache_points_and_the_second_call_reads_the_cache(mode: Mode) {
        let rig = start(mode);
        let body = |model: &str| json!({"model": model, "max_tokens": 64,
            "system": [{"type": "text", "text": "You are a careful coding agent working in a large repository.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "read_file", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Read the guide first."}]}]});
        let first = rig.messages(body("claude-cache")).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let sent = rig.sent();
        assert_eq!(sent["body"]["system"][1], json!({"cachePoint": {"type": "default"}}), "{sent}");
        assert_eq!(sent["body"]["toolConfig"]["tools"][1], json!({"cachePoint": {"type": "default"}}), "{sent}");
        let written = first.json()["usage"]["cache_creation_input_tokens"].as_u64().unwrap();
        assert!(written > 0, "{}", first.text());
        assert_eq!(first.json()["usage"]["cache_read_input_tokens"], 0, "{}", first.text());

        let second = rig.messages(body("claude-cache")).await;
        assert_eq!(second.status, 200, "{}", second.text());
        assert_eq!(second.json()["usage"]["cache_read_input_tokens"], written, "{}", second.text());
        assert_eq!(second.json()["usage"]["cache_creation_input_tokens"], 0, "{}", second.text());

        let older = rig.messages(body("claude")).await;
        assert_eq!(older.status, 200, "{}", older.text());
        assert!(!rig.sent()["body"].to_string().contains("cachePoint"));
    }
}
