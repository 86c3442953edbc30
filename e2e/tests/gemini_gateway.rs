#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Gemini through the gateway, end to end in both serving modes, against a Gemini stand-in
//! built on Google's own `google-genai` SDK types (every body the gateway sends is validated by
//! them; a refused one is a failed test): OpenAI chat and Anthropic Messages clients, unary and
//! streamed, with tools, images, JSON mode and thinking; embeddings; errors in each client's
//! envelope; and failover in a group mixing `gemini` and `openai`.

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{MockProvider, openai};
use aisix_e2e::prom;
use aisix_e2e::third_party::gemini::GeminiMock;
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-gemini-e2e";
const GEMINI_KEY: &str = "AIza-upstream-gemini-secret-1";
const OPENAI_KEY: &str = "sk-oai-upstream-secret-2";

struct Rig {
    gemini: GeminiMock,
    openai: MockProvider,
    gateway: Gateway,
}

fn start(mode: Mode) -> Rig {
    let gemini = GeminiMock::start(GEMINI_KEY);
    let openai = MockProvider::start();
    let resources = format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: goog
    provider: gemini
    api_key: {GEMINI_KEY}
    api_base: {gemini}
  - display_name: oai
    provider: openai
    api_key: {OPENAI_KEY}
    api_base: {openai}
models:
  - {{display_name: gem, provider: gemini, model_name: gemini-2.5-flash, provider_key: goog}}
  - {{display_name: gem3, provider: gemini, model_name: gemini-3-pro-preview, provider_key: goog}}
  - {{display_name: gem-priced, provider: gemini, model_name: gemini-2.5-flash, provider_key: goog, cost: {{input_per_1k: 0.001, output_per_1k: 0.002}}}}
  - {{display_name: embed, provider: gemini, model_name: text-embedding-004, provider_key: goog}}
  - {{display_name: gpt, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - display_name: gem-first
    routing: {{targets: [{{model: gem, priority: 1}}, {{model: gpt}}]}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        gemini = gemini.base_url(),
        openai = openai.base_url(),
    );
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources)
            .env("CLIENT_KEY", CLIENT_KEY)
            .metrics()
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\n"),
    );
    Rig {
        gemini,
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

    /// The last request the Gemini mock saw, which its SDK types accepted.
    fn sent(&self) -> Value {
        let last = self.gemini.last();
        assert!(
            last.get("invalid").is_none(),
            "the SDK's types refused what the gateway sent: {last}\n{}",
            self.gemini.logs()
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
    async fn openai_chat_reaches_gemini_translated_unary_and_streamed(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "gem", "temperature": 0.3, "max_tokens": 64, "stop": ["zzz"],
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from Gemini.");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 4, "{body}");
        assert_eq!(body["usage"]["completion_tokens"], 3);
        let seen = rig.sent();
        assert_eq!(seen["path"], "/v1beta/models/gemini-2.5-flash:generateContent");
        assert_eq!(seen["headers"]["x-goog-api-key"], GEMINI_KEY);
        assert!(seen["headers"].get("authorization").is_none(), "the client's key went upstream");
        assert_eq!(seen["body"]["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(seen["body"]["generationConfig"], json!({"temperature": 0.3, "maxOutputTokens": 64, "stopSequences": ["zzz"]}));

        let reply = rig.chat(json!({"model": "gem", "stream": true, "stream_options": {"include_usage": true},
            "reasoning_effort": "low", "messages": [{"role": "user", "content": "Hello there [cached]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().1, "[DONE]");
        assert_eq!(events[0].1["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(text_of_chunks(&events), "Hello from Gemini.");
        let reasoning: String = events.iter().filter_map(|(_, c)| c.pointer("/choices/0/delta/reasoning_content").and_then(Value::as_str)).collect();
        assert_eq!(reasoning, "Thinking about it.");
        let usage = &events[events.len() - 2].1["usage"];
        assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 3, "{usage}");
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 2, "{usage}");
        assert_eq!(usage["completion_tokens"], 6, "thoughts are output tokens: {usage}");
        let seen = rig.sent();
        assert_eq!(seen["path"], "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
        assert_eq!(seen["query"], "alt=sse");
        assert_eq!(seen["body"]["generationConfig"]["thinkingConfig"], json!({"includeThoughts": true, "thinkingBudget": 2048}));
    }
}

both_modes! {
    async fn tools_images_and_json_mode_cross_to_gemini_and_back(mode: Mode) {
        let rig = start(mode);
        let tools = json!([{"type": "function", "function": {"name": "weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        let reply = rig.chat(json!({"model": "gem", "tools": tools, "tool_choice": "required",
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let message = &reply.json()["choices"][0];
        assert_eq!(message["finish_reason"], "tool_calls");
        let call = &message["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "weather");
        assert_eq!(serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
        assert_eq!(rig.sent()["body"]["toolConfig"], json!({"functionCallingConfig": {"mode": "ANY"}}));

        // The result goes back as a functionResponse named for the call.
        let id = call["id"].as_str().unwrap();
        let reply = rig.chat(json!({"model": "gem", "tools": tools, "stream": true, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": id, "content": "{\"celsius\": 21}"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let seen = rig.sent();
        assert_eq!(seen["body"]["contents"][2], json!({"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"celsius": 21}}}]}));
        assert_eq!(text_of_chunks(&events), "The tool said: {\"celsius\": 21}");

        let reply = rig.chat(json!({"model": "gem", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG}}]}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"], "I see image/png.");
        assert_eq!(rig.sent()["body"]["contents"][0]["parts"][1]["inlineData"]["mimeType"], "image/png");

        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]});
        let reply = rig.chat(json!({"model": "gem", "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
            "messages": [{"role": "user", "content": "A person"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let content = reply.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
        assert_eq!(serde_json::from_str::<Value>(&content).unwrap(), json!({"name": "Ada", "age": 36}));
        let config = &rig.sent()["body"]["generationConfig"];
        assert_eq!(config["responseMimeType"], "application/json");
        assert_eq!(config["responseJsonSchema"], schema);
    }
}

both_modes! {
    async fn anthropic_messages_reach_gemini_and_come_back_in_anthropic_shape(mode: Mode) {
        let rig = start(mode);
        let reply = rig.messages(json!({"model": "gem", "max_tokens": 100, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG.split(',').nth(1).unwrap()}}]}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["type"], "message");
        assert_eq!(body["content"], json!([{"type": "text", "text": "I see image/png."}]));
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["usage"]["output_tokens"], 3);
        assert_eq!(rig.sent()["body"]["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));

        let tools = json!([{"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        let reply = rig.messages(json!({"model": "gem", "max_tokens": 100, "stream": true, "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let events = events(&reply.text());
        let names: Vec<&str> = events.iter().filter_map(|e| e.0.as_deref()).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
        assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
        let start = events.iter().find(|e| e.0.as_deref() == Some("content_block_start")).unwrap();
        assert_eq!(start.1["content_block"]["type"], "tool_use");
        assert_eq!(start.1["content_block"]["name"], "weather");
        let delta = events.iter().find(|e| e.0.as_deref() == Some("message_delta")).unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");
        assert_eq!(rig.sent()["path"], "/v1beta/models/gemini-2.5-flash:streamGenerateContent");

        // count_tokens counts the whole request (system included) with countTokens.
        let reply = rig.post("/v1/messages/count_tokens", json!({"model": "gem", "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hello there"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json(), json!({"input_tokens": 4}));
        let seen = rig.sent();
        assert_eq!(seen["path"], "/v1beta/models/gemini-2.5-flash:countTokens");
        assert_eq!(seen["body"]["generateContentRequest"]["model"], "models/gemini-2.5-flash");
    }
}

both_modes! {
    async fn embeddings_go_through_batch_embed_contents_as_floats_or_base64(mode: Mode) {
        let rig = start(mode);
        let reply = rig.post("/v1/embeddings", json!({"model": "embed", "input": ["one", "two words"], "dimensions": 3, "encoding_format": "float"})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "list");
        assert_eq!(body["data"][0]["embedding"], json!([0.125, 0.25, 0.375]));
        assert_eq!(body["data"][1]["index"], 1);
        assert_eq!(body["data"][1]["embedding"], json!([0.25, 0.375, 0.5]));
        let seen = rig.sent();
        assert_eq!(seen["path"], "/v1beta/models/text-embedding-004:batchEmbedContents");
        assert_eq!(seen["body"]["requests"][0]["model"], "models/text-embedding-004");

        // The OpenAI SDKs ask for base64 by default: little-endian f32s.
        let reply = rig.post("/v1/embeddings", json!({"model": "embed", "input": "one", "encoding_format": "base64"})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let encoded = reply.json()["data"][0]["embedding"].as_str().unwrap().to_owned();
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
        let floats: Vec<f32> = bytes.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(floats, [0.125, 0.25, 0.375, 0.5]);

        let reply = rig.post("/v1/embeddings", json!({"model": "embed", "input": [[1, 2, 3]]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    }
}

both_modes! {
    async fn gemini_errors_reach_each_client_in_its_own_envelope(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "gem", "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "RESOURCE_EXHAUSTED", "{error}");
        assert_eq!(error["type"], "rate_limit_error");
        assert!(!reply.text().contains(GEMINI_KEY));

        let reply = rig.messages(json!({"model": "gem", "max_tokens": 5, "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());
        assert_eq!(reply.json()["type"], "error");
        assert_eq!(reply.json()["error"]["type"], "rate_limit_error");

        let reply = rig.chat(json!({"model": "gem", "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 502, "{}", reply.text());

        // What Gemini cannot express is refused before anything is sent.
        let before = rig.gemini.requests().len();
        let reply = rig.chat(json!({"model": "gem", "n": 2, "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(reply.json()["error"]["message"].as_str().unwrap().starts_with("n:"));
        assert_eq!(rig.gemini.requests().len(), before);

        // Mid-stream: an error object, or a body that ends before its finish, ends the client's
        // stream with an error event and no [DONE].
        for marker in ["[error]", "[cut]"] {
            let reply = rig.chat(json!({"model": "gem", "stream": true, "messages": [{"role": "user", "content": format!("hi {marker}")}]})).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            let text = reply.text();
            assert!(!text.contains("[DONE]"), "{marker}: {text}");
            let last = events(&text).pop().unwrap();
            assert!(last.1.get("error").is_some(), "{marker}: {text}");
        }
        let reply = rig.messages(json!({"model": "gem", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "hi [error]"}]})).await;
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().0.as_deref(), Some("error"), "{events:?}");
        assert!(!events.iter().any(|e| e.0.as_deref() == Some("message_stop")));
    }
}

both_modes! {
    async fn a_group_mixing_gemini_and_openai_falls_over_on_unavailable_and_exhausted(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat(json!({"model": "gem-first", "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gem"));
        assert_eq!(reply.json()["model"], "gem");

        let reply = rig.chat(json!({"model": "gem-first", "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        assert_eq!(reply.json()["choices"][0]["message"]["content"], openai::REPLY_TEXT);

        let reply = rig.chat(json!({"model": "gem-first", "messages": [{"role": "user", "content": "hi [429]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"), "RESOURCE_EXHAUSTED falls over");

        let reply = rig.messages(json!({"model": "gem-first", "max_tokens": 5, "stream": true,
            "messages": [{"role": "user", "content": "hi [503]"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("gpt"));
        let events = events(&reply.text());
        assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop"));
        assert_eq!(rig.openai.requests().len(), 3);
    }
}

both_modes! {
    async fn a_responses_request_reaches_gemini_through_chat_and_comes_back_as_a_response(mode: Mode) {
        let rig = start(mode);
        let reply = rig.post("/v1/responses", json!({"model": "gem", "input": "Hello there", "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"][0]["content"][0]["text"], "Hello from Gemini.", "{body}");
        assert_eq!(rig.sent()["path"], "/v1beta/models/gemini-2.5-flash:generateContent");

        let reply = rig.post("/v1/responses", json!({"model": "gem", "input": "Hello there", "stream": true, "store": false})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let streamed = events(&reply.text());
        let names: Vec<&str> = streamed.iter().filter_map(|e| e.0.as_deref()).collect();
        assert_eq!(names.first(), Some(&"response.created"), "{names:?}");
        assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
        let text: String = streamed.iter().filter(|e| e.0.as_deref() == Some("response.output_text.delta"))
            .map(|e| e.1["delta"].as_str().unwrap().to_owned()).collect();
        assert_eq!(text, "Hello from Gemini.");
        assert_eq!(rig.sent()["path"], "/v1beta/models/gemini-2.5-flash:streamGenerateContent");

        let reply = rig.post("/v1/responses", json!({"model": "gem", "input": "hi [error]", "stream": true, "store": false})).await;
        let failed = events(&reply.text());
        assert_eq!(failed.last().unwrap().0.as_deref(), Some("response.failed"), "{failed:?}");
    }
}

both_modes! {
    /// A Gemini stream gives its output count only in its last chunk: a stream cut before it is
    /// charged the prompt estimate and one output token per content part sent (README,
    /// "Settlement"), never nothing. `gem-priced` costs 1 µ$ per input and 2 µ$ per output
    /// token; the stand-in sends one text part before the cut.
    async fn a_gemini_stream_cut_before_its_usage_is_charged_the_prompt_and_the_content_sent(mode: Mode) {
        let rig = start(mode);
        let metrics = rig.gateway.metrics_addr.unwrap();
        let chat = json!({"model": "gem-priced", "stream": true, "messages": [{"role": "user", "content": "hi [cut]"}]});
        let reply = rig.chat(chat.clone()).await;
        assert!(!reply.text().contains("[DONE]"), "{}", reply.text());
        let prompt = chat.to_string().len().div_ceil(4) as u64;
        let spent = prom::spent_micros(metrics, "client", "gem-priced", 0).await;
        assert_eq!(spent, prompt + 2, "prompt estimate {prompt} and one output token");
    }
}

both_modes! {
    /// Gemini 3 signs each function call and refuses a later request whose history gives the
    /// call back without its `thoughtSignature` (400). Neither client has a place for it, so it
    /// rides in the call's id: an OpenAI client's tool loop (unary, then streamed) and an
    /// Anthropic client's go on through a second turn; the same history with the id stripped
    /// of its signature is Gemini's 400 in the client's envelope.
    async fn gemini_3_tool_loops_keep_their_thought_signatures_through_both_clients(mode: Mode) {
        let rig = start(mode);
        let tools = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let question = json!({"role": "user", "content": "Weather in Paris?"});
        let reply = rig.chat(json!({"model": "gem3", "tools": tools, "messages": [question]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let call = reply.json()["choices"][0]["message"]["tool_calls"][0].clone();
        let id = call["id"].as_str().unwrap().to_owned();
        assert!(id.contains("__thought__"), "{call}");
        let second = |id: &str| {
            let mut call = call.clone();
            call["id"] = json!(id);
            json!({"model": "gem3", "tools": tools, "stream": true, "messages": [question,
                {"role": "assistant", "content": null, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": id, "content": "{\"celsius\": 21}"}]})
        };
        let reply = rig.chat(second(&id)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(text_of_chunks(&events(&reply.text())), "The tool said: {\"celsius\": 21}");
        let sent = &rig.sent()["body"]["contents"][1]["parts"][0];
        assert!(sent["thoughtSignature"].is_string(), "{sent}");

        let plain = id.split("__thought__").next().unwrap().to_owned();
        let reply = rig.chat(second(&plain)).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(reply.json()["error"]["message"].as_str().unwrap().contains("thought_signature"), "{}", reply.text());

        // An Anthropic client: the tool_use id carries it the same way.
        let anthropic_tools = json!([{"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        let reply = rig.messages(json!({"model": "gem3", "max_tokens": 100, "tools": anthropic_tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let content = reply.json()["content"].clone();
        let tool_use = content.as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap().clone();
        let reply = rig.messages(json!({"model": "gem3", "max_tokens": 100, "tools": anthropic_tools, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "{\"celsius\": 21}"}]}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["content"][0]["text"], "The tool said: {\"celsius\": 21}", "{}", reply.text());
    }
}
