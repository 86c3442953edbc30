#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Translation fidelity end to end, in both serving modes: what real clients (Claude Code, the
//! Agents SDK, `llm`) send and expect of the gateway. The origin probe, system messages inside
//! Anthropic's `messages`, tool ids that survive a round trip, the output-token field an
//! upstream wants, the model list in the client's dialect, reasoning both ways and structured
//! output to an Anthropic provider.

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock, anthropic};
use aisix_e2e::sdk;
use serde_json::{Value, json};

const CLIENT_KEY: &str = "sk-client-fidelity-e2e";
const ANTHROPIC_KEY: &str = "sk-ant-upstream-fidelity";
const OPENAI_KEY: &str = "sk-oai-upstream-fidelity";

/// An Anthropic mock and an OpenAI mock, and the gateway in front of them: `claude-custom`
/// goes to Anthropic, `claude-via-openai` and `o3-mini` to the OpenAI mock.
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
  - {{display_name: claude-custom, provider: anthropic, model_name: claude-upstream, provider_key: ant}}
  - {{display_name: claude-via-openai, provider: openai, model_name: gpt-upstream, provider_key: oai}}
  - {{display_name: o3-mini, provider: openai, model_name: o3-mini, provider_key: oai}}
  - display_name: openai-thinker-first
    first_token_timeout: 1000
    routing: {{targets: [{{model: claude-via-openai, priority: 1}}, {{model: claude-custom}}]}}
  - display_name: anthropic-thinker-first
    first_token_timeout: 1000
    routing: {{targets: [{{model: claude-custom, priority: 1}}, {{model: claude-via-openai}}]}}
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
            .extra("downstream:\n  sse_keepalive_interval_secs: 0\n"),
    );
    Rig {
        anthropic,
        openai,
        gateway,
    }
}

impl Rig {
    async fn messages(&self, path: &str, body: &Value) -> Reply {
        let body = body.to_string();
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                path,
                &[
                    ("x-api-key", CLIENT_KEY),
                    ("anthropic-version", "2023-06-01"),
                ],
                Some(&body),
            ),
        )
        .await
    }

    async fn chat(&self, body: &Value) -> Reply {
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
}

both_modes! {
    async fn the_origin_answers_head_and_get_with_200(mode: Mode) {
        let rig = start(mode);
        let head = client::send(rig.gateway.addr(), request("HEAD", "/", &[], None)).await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty(), "a HEAD answer has no body");
        let get = client::get(rig.gateway.addr(), "/").await;
        assert_eq!(get.status, 200);
        assert_eq!(get.text().lines().count(), 1, "{}", get.text());
        let _ = (&rig.anthropic, &rig.openai);
    }
}

/// A first turn the way Claude Code sends it for a model name it does not know: a `system`
/// turn inside `messages`.
fn claude_code_turn(model: &str) -> Value {
    json!({"model": model, "max_tokens": 32000, "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
            {"role": "system", "content": "Answer in one line."},
            {"role": "user", "content": "go on"}]})
}

both_modes! {
    async fn system_turns_inside_messages_reach_either_provider_where_it_wants_them(mode: Mode) {
        let rig = start(mode);
        let mut count = claude_code_turn("claude-custom");
        count.as_object_mut().unwrap().remove("max_tokens");

        // Anthropic refuses a `system` turn: the relay hoists it into the system prompt.
        let reply = rig.messages("/v1/messages", &claude_code_turn("claude-custom")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["type"], "message");
        let sent = rig.anthropic.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["model"], "claude-upstream");
        assert_eq!(sent["system"], json!([{"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Answer in one line."}]));
        assert_eq!(sent["messages"].as_array().unwrap().len(), 2);
        let counted = rig.messages("/v1/messages/count_tokens", &count).await;
        assert_eq!(counted.status, 200, "{}", counted.text());
        assert!(counted.json()["input_tokens"].as_u64().unwrap() > 0);

        // Chat completions take it in place.
        let reply = rig.messages("/v1/messages", &claude_code_turn("claude-via-openai")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["content"][0]["type"], "text");
        let sent = rig.openai.last_request().unwrap().body_json().unwrap();
        let roles: Vec<&str> = sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "system", "user"]);
        assert_eq!(sent["messages"][2]["content"], "Answer in one line.");
        count["model"] = json!("claude-via-openai");
        let counted = rig.messages("/v1/messages/count_tokens", &count).await;
        assert_eq!(counted.status, 200, "{}", counted.text());
        assert!(counted.json()["input_tokens"].as_u64().unwrap() > 0);
    }
}

both_modes! {
    async fn tool_ids_that_sanitize_alike_stay_paired_through_anthropic(mode: Mode) {
        let rig = start(mode);
        let call = |id: &str, city: &str| json!({"id": id, "type": "function",
            "function": {"name": "weather", "arguments": json!({"city": city}).to_string()}});
        let tools = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let reply = rig.chat(&json!({"model": "claude-custom", "tools": tools, "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [call("call.1", "Paris"), call("call_1", "Rome")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Rome: 20C"},
            {"role": "tool", "tool_call_id": "call.1", "content": "Paris: 18C"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let sent = rig.anthropic.last_request().unwrap().body_json().unwrap();
        let uses = sent["messages"][1]["content"].as_array().unwrap();
        let results = sent["messages"][2]["content"].as_array().unwrap();
        let id_of = |city: &str| uses.iter().find(|u| u["input"]["city"] == city).unwrap()["id"].clone();
        let result_for = |id: &Value| results.iter().find(|r| &r["tool_use_id"] == id).unwrap()["content"].clone();
        assert_ne!(id_of("Paris"), id_of("Rome"));
        assert_eq!(result_for(&id_of("Paris")), "Paris: 18C");
        assert_eq!(result_for(&id_of("Rome")), "Rome: 20C");

        // The other way: an Anthropic client's ids reach an OpenAI upstream as it sent them,
        // and the ids the upstream makes come back to it unchanged.
        let anthropic_tools = json!([{"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        let question = json!({"role": "user", "content": "Weather in Paris?"});
        let first = rig.messages("/v1/messages", &json!({"model": "claude-via-openai", "max_tokens": 100,
            "tools": anthropic_tools, "tool_choice": {"type": "any"}, "messages": [question]})).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let tool_use = first.json()["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap().clone();
        let second = rig.messages("/v1/messages", &json!({"model": "claude-via-openai", "max_tokens": 100,
            "tools": anthropic_tools, "messages": [question, {"role": "assistant", "content": [tool_use.clone()]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "18C"}]}]})).await;
        assert_eq!(second.status, 200, "{}", second.text());
        let sent = rig.openai.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["messages"][1]["tool_calls"][0]["id"], tool_use["id"]);
        assert_eq!(sent["messages"][2]["tool_call_id"], tool_use["id"]);
    }
}

both_modes! {
    async fn a_reasoning_model_gets_its_output_cap_in_max_completion_tokens(mode: Mode) {
        let rig = start(mode);
        // The OpenAI mock refuses `max_tokens` for the o-series, as OpenAI does.
        let mut turn = claude_code_turn("o3-mini");
        turn["thinking"] = json!({"type": "enabled", "budget_tokens": 2000});
        let reply = rig.messages("/v1/messages", &turn).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let sent = rig.openai.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["max_completion_tokens"], 32000);
        assert_eq!(sent.get("max_tokens"), None);
        assert_eq!(sent["reasoning_effort"], "low");
        turn.as_object_mut().unwrap().remove("max_tokens");
        let counted = rig.messages("/v1/messages/count_tokens", &turn).await;
        assert_eq!(counted.status, 200, "{}", counted.text());

        // A model that does not reason keeps `max_tokens`, and no effort.
        let reply = rig.messages("/v1/messages", &claude_code_turn("claude-via-openai")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let sent = rig.openai.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["max_tokens"], 32000);
        assert_eq!(sent.get("reasoning_effort"), None);

        // An OpenAI client's effort reaches Anthropic as a thinking budget.
        let reply = rig.chat(&json!({"model": "claude-custom", "reasoning_effort": "low",
            "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let sent = rig.anthropic.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert!(sent["max_tokens"].as_u64().unwrap() > 2048);
    }
}

both_modes! {
    async fn the_model_list_answers_in_the_clients_dialect_with_the_same_filtering(mode: Mode) {
        let rig = start(mode);
        let get = |path: &str, headers: Vec<(&'static str, String)>| {
            let path = path.to_owned();
            let addr = rig.gateway.addr();
            async move {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                client::send(addr, request("GET", &path, &headers, None)).await
            }
        };
        let anthropic = || vec![("x-api-key", CLIENT_KEY.to_owned()), ("anthropic-version", "2023-06-01".to_owned())];
        let openai = || vec![("authorization", format!("Bearer {CLIENT_KEY}"))];

        let list = get("/v1/models", anthropic()).await;
        assert_eq!(list.status, 200, "{}", list.text());
        let body = list.json();
        let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["claude-custom", "claude-via-openai", "o3-mini", "openai-thinker-first", "anthropic-thinker-first"]);
        assert_eq!(body["data"][0], json!({"type": "model", "id": "claude-custom",
            "display_name": "claude-custom", "created_at": "1970-01-01T00:00:00Z"}));
        assert_eq!((&body["has_more"], &body["first_id"], &body["last_id"]),
            (&json!(false), &json!("claude-custom"), &json!("anthropic-thinker-first")));
        let page = get("/v1/models?limit=1&after_id=claude-custom", anthropic()).await.json();
        assert_eq!((&page["first_id"], &page["has_more"]), (&json!("claude-via-openai"), &json!(true)));
        let one = get("/v1/models/o3-mini", anthropic()).await.json();
        assert_eq!(one["type"], "model");
        assert_eq!(one["display_name"], "o3-mini");
        let missing = get("/v1/models/nothing", anthropic()).await;
        assert_eq!(missing.status, 404);
        assert_eq!(missing.json()["type"], "error");
        assert_eq!(missing.json()["error"]["type"], "not_found_error");

        let list = get("/v1/models", openai()).await.json();
        assert_eq!(list["object"], "list");
        assert_eq!(list["data"][0]["object"], "model");
        assert_eq!(list.get("has_more"), None);
        let missing = get("/v1/models/nothing", openai()).await.json();
        assert_eq!(missing["error"]["code"], "model_not_found");
        let _ = (&rig.anthropic, &rig.openai);
    }
}

const THINKING: &str = "The user greets me.";
const TEXT: &str = "Hello!";

/// An OpenAI-compatible chunk whose only choice carries `delta`.
fn chunk(delta: Value, finish: Value) -> Frame {
    Frame::json(
        json!({"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1,
        "model": "reasoner", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
    )
}

both_modes! {
    async fn both_sdks_read_reasoning_translated_from_the_other_dialect(mode: Mode) {
        let rig = start(mode);
        // The OpenAI-compatible upstream reasons in `reasoning_content`, whole and streamed.
        rig.openai.enqueue(Mock::status(200).json(json!({"id": "chatcmpl-r", "object": "chat.completion",
            "created": 1, "model": "reasoner", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": TEXT, "reasoning_content": THINKING}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14,
                "completion_tokens_details": {"reasoning_tokens": 6}}})));
        rig.openai.enqueue(Mock::sse([
            chunk(json!({"role": "assistant", "content": null, "reasoning_content": ""}), Value::Null),
            chunk(json!({"reasoning_content": "The user "}), Value::Null),
            chunk(json!({"reasoning_content": "greets me."}), Value::Null),
            chunk(json!({"content": TEXT}), Value::Null),
            chunk(json!({}), json!("stop")),
            Frame::done(),
        ]));
        // The Anthropic upstream thinks in signed thinking blocks, whole and streamed.
        let blocks = json!([{"type": "thinking", "thinking": THINKING, "signature": "EqQBsig"},
            {"type": "text", "text": TEXT}]);
        rig.anthropic.enqueue(Mock::status(200).json(anthropic::message_body("msg_t", "claude-upstream",
            blocks, "end_turn", None, json!({"input_tokens": 5, "output_tokens": 9}))));
        let mut frames = vec![anthropic::message_start("msg_t", "claude-upstream", json!({"input_tokens": 5, "output_tokens": 1}))];
        frames.push(Frame::event("content_block_start", json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
        for piece in ["The user ", "greets me."] {
            frames.push(Frame::event("content_block_delta", json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        frames.push(Frame::event("content_block_delta", json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQBsig"}})));
        frames.push(Frame::event("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
        frames.extend(anthropic::text_block(1, &[TEXT]));
        frames.push(anthropic::message_delta("end_turn", None, 9));
        frames.push(anthropic::message_stop());
        rig.anthropic.enqueue(Mock::sse(frames));

        let (status, printed) = sdk::run_python("test_fidelity_sdks.py", vec![
            ("AISIX_FID_BASE_URL", rig.gateway.url("")),
            ("AISIX_FID_API_KEY", CLIENT_KEY.to_owned()),
            ("AISIX_FID_TO_OPENAI_MODEL", "claude-via-openai".to_owned()),
            ("AISIX_FID_TO_ANTHROPIC_MODEL", "claude-custom".to_owned()),
            ("AISIX_FID_THINKING", THINKING.to_owned()),
            ("AISIX_FID_TEXT", TEXT.to_owned()),
        ]).await;
        sdk::assert_passed(status, &printed, || rig.gateway.logs());
        assert!(printed.contains("6 passed, 0 failed"), "{printed}");
        assert!(!printed.contains("EqQBsig"));
        let forced = rig.anthropic.requests().iter().filter(|r| {
            r.body_json().is_ok_and(|b| b["tool_choice"] == json!({"type": "tool", "name": "json_output"}))
        }).count();
        assert_eq!(forced, 2, "structured output reached Anthropic as one forced tool");
    }
}

both_modes! {
    async fn structured_output_to_anthropic_is_the_answers_text_unary_and_streamed(mode: Mode) {
        let rig = start(mode);
        let format = json!({"type": "json_schema", "json_schema": {"name": "City", "strict": true,
            "schema": {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
                "required": ["name", "population"], "additionalProperties": false}}});
        let ask = |stream: bool| json!({"model": "claude-custom", "stream": stream, "response_format": format,
            "messages": [{"role": "user", "content": "A city?"}]});
        let reply = rig.chat(&ask(false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let choice = &reply.json()["choices"][0];
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(choice["message"].get("tool_calls"), None);
        let text: Value = serde_json::from_str(choice["message"]["content"].as_str().unwrap()).unwrap();
        assert_eq!(text, json!({"name": "mock", "population": 1}));
        let sent = rig.anthropic.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["tools"][0]["name"], "json_output");
        assert_eq!(sent["tools"][0]["input_schema"], format["json_schema"]["schema"]);

        let streamed = rig.chat(&ask(true)).await;
        assert_eq!(streamed.status, 200);
        let body = streamed.text();
        let mut text = String::new();
        let mut finish = Vec::new();
        for data in body.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| *d != "[DONE]") {
            let chunk: Value = serde_json::from_str(data).unwrap();
            if let Some(piece) = chunk.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                text.push_str(piece);
            }
            assert_eq!(chunk.pointer("/choices/0/delta/tool_calls"), None, "{data}");
            if let Some(reason) = chunk.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
                finish.push(reason.to_owned());
            }
        }
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"name": "mock", "population": 1}));
        assert_eq!(finish, ["stop"]);
    }
}

/// A chat completion of the OpenAI mock's shape whose text is `content`.
fn completion(content: &str) -> Value {
    json!({"id": "chatcmpl-city", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
            "message": {"role": "assistant", "content": content, "refusal": null}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}})
}

both_modes! {
    async fn the_agents_sdk_and_llm_run_through_both_routes(mode: Mode) {
        let rig = start(mode);
        // The OpenAI-compatible upstream answers the agent's two runs with a City, as a model
        // honouring `response_format` does; then its default text for `llm`.
        let city = r#"{"name":"Paris","population":2100000}"#;
        rig.openai.enqueue(Mock::status(200).json(completion(city)));
        rig.openai.enqueue(Mock::sse([
            Frame::json(json!({"id": "chatcmpl-city", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]})),
            Frame::json(json!({"id": "chatcmpl-city", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
                "choices": [{"index": 0, "delta": {"content": city}, "finish_reason": null}]})),
            Frame::json(json!({"id": "chatcmpl-city", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            Frame::done(),
        ]));
        let workdir = tempfile::tempdir().unwrap();
        let (status, printed) = sdk::run_python("test_real_clients.py", vec![
            ("AISIX_REAL_BASE_URL", rig.gateway.url("")),
            ("AISIX_REAL_API_KEY", CLIENT_KEY.to_owned()),
            ("AISIX_REAL_ANTHROPIC_MODEL", "claude-custom".to_owned()),
            ("AISIX_REAL_OPENAI_MODEL", "claude-via-openai".to_owned()),
            ("AISIX_REAL_LLM_TEXT", aisix_e2e::mock::openai::REPLY_TEXT.to_owned()),
            ("AISIX_REAL_WORKDIR", workdir.path().display().to_string()),
        ]).await;
        sdk::assert_passed(status, &printed, || rig.gateway.logs());
        assert!(printed.contains("8 passed, 0 failed"), "{printed}");

        // What the gateway received and sent: the agent's schema reached the OpenAI upstream as
        // `response_format`, and Anthropic as one forced tool.
        let schemas = rig.openai.requests().iter().filter(|r| {
            r.body_json().is_ok_and(|b| b["response_format"]["type"] == "json_schema")
        }).count();
        assert_eq!(schemas, 2, "both agent runs asked the OpenAI upstream for the schema");
        let forced = rig.anthropic.requests().iter().filter(|r| {
            r.body_json().is_ok_and(|b| b["tool_choice"] == json!({"type": "tool", "name": "json_output"})
                && b["tools"][0]["input_schema"]["properties"]["population"]["type"] == "integer")
        }).count();
        assert_eq!(forced, 2, "both agent runs reached Anthropic as one forced tool");
        let streamed = rig.anthropic.requests().iter().filter(|r| r.body_json().is_ok_and(|b| b["stream"] == true)).count();
        assert!(streamed >= 2, "llm and the streamed agent run streamed from Anthropic");
    }
}

/// Claude Code, pinned and installed by `scripts/setup-node.sh` under target/e2e-node.
fn claude_code() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-node/claude");
    assert!(
        path.exists(),
        "no Claude Code at {}: run `bash scripts/setup-node.sh`",
        path.display()
    );
    path
}

/// Runs `claude -p prompt` against the gateway with `model`, with telemetry, auto-update and
/// every other outside call off, in `home`; returns its exit status and its stdout, with its
/// stderr (warnings, such as the one for a model name it does not know) after a marker.
async fn claude_p(
    gateway: &Gateway,
    model: &str,
    home: &std::path::Path,
    prompt: &str,
    extra: &[&str],
) -> (std::process::ExitStatus, String) {
    let mut command = std::process::Command::new(claude_code());
    command
        .arg("-p")
        .arg(prompt)
        .arg("--model")
        .arg(model)
        .args(extra)
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", gateway.url(""))
        .env("ANTHROPIC_API_KEY", CLIENT_KEY)
        .env("ANTHROPIC_SMALL_FAST_MODEL", model)
        .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", model)
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_BUG_COMMAND", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "1")
        .stdin(std::process::Stdio::null());
    tokio::task::spawn_blocking(move || {
        let out = command.output().expect("run claude");
        (
            out.status,
            format!(
                "{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    })
    .await
    .unwrap()
}

/// The tool call a scripted upstream answers Claude Code's first turn with: `Read` of `path`.
fn read_call(path: &str) -> Value {
    json!({"file_path": path})
}

both_modes! {
    async fn claude_code_runs_with_custom_model_names_on_both_routes(mode: Mode) {
        let rig = start(mode);
        let home = tempfile::tempdir().unwrap();
        let file = home.path().join("hello.txt");
        std::fs::write(&file, "The secret word is aubergine.\n").unwrap();
        let file = file.display().to_string();

        // Plain runs: one turn each, the mocks' default text.
        for model in ["claude-via-openai", "claude-custom"] {
            let (status, printed) = claude_p(&rig.gateway, model, home.path(), "Say hello.", &[]).await;
            assert!(status.success(), "{model}: {printed}\n{}", rig.gateway.logs());
            let stdout = printed.split("\n--- stderr ---\n").next().unwrap();
            assert_eq!(stdout.trim(), aisix_e2e::mock::openai::REPLY_TEXT, "{model}: {printed}");
        }
        assert_eq!(rig.openai.request_count(), 1);
        assert_eq!(rig.anthropic.request_count(), 1);
        // Claude Code puts a `system` turn inside `messages` for a model name it does not
        // know: in place for chat completions, hoisted into the system prompt for Anthropic.
        let roles = |upstream: &MockProvider| -> Vec<String> {
            let body = upstream.last_request().unwrap().body_json().unwrap();
            body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect()
        };
        let chat_roles = roles(&rig.openai);
        assert!(chat_roles.iter().skip(1).any(|r| r == "system"), "{chat_roles:?}");
        let anthropic_roles = roles(&rig.anthropic);
        assert!(anthropic_roles.iter().all(|r| r == "user" || r == "assistant"), "{anthropic_roles:?}");

        // A tool round trip on each route: the upstream calls Read once, then answers text.
        let args = read_call(&file).to_string();
        rig.openai.enqueue(Mock::sse([
            chunk(json!({"role": "assistant", "content": null}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call.read:0", "type": "function",
                "function": {"name": "Read", "arguments": ""}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            Frame::done(),
        ]));
        let mut frames = vec![anthropic::message_start("msg_read", "claude-upstream", json!({"input_tokens": 5, "output_tokens": 1}))];
        frames.extend(anthropic::tool_use_block(0, "toolu_read_1", "Read", &[&args]));
        frames.push(anthropic::message_delta("tool_use", None, 3));
        frames.push(anthropic::message_stop());
        rig.anthropic.enqueue(Mock::sse(frames));
        for (model, upstream) in [("claude-via-openai", &rig.openai), ("claude-custom", &rig.anthropic)] {
            let (status, printed) = claude_p(&rig.gateway, model, home.path(), "What does hello.txt say?",
                &["--allowedTools", "Read"]).await;
            assert!(status.success(), "{model}: {printed}\n{}", rig.gateway.logs());
            let stdout = printed.split("\n--- stderr ---\n").next().unwrap();
            assert_eq!(stdout.trim(), aisix_e2e::mock::openai::REPLY_TEXT, "{model}: {printed}");
            let last = upstream.last_request().unwrap().body_json().unwrap();
            let sent = last["messages"].to_string();
            assert!(sent.contains("aubergine"), "{model}: the file's text did not go back: {sent}");
        }
        // The OpenAI upstream's id, which Anthropic would refuse, came back to it unchanged.
        let back = rig.openai.last_request().unwrap().body_json().unwrap();
        let ids: Vec<&str> = back["messages"].as_array().unwrap().iter()
            .filter_map(|m| m["tool_call_id"].as_str()).collect();
        assert_eq!(ids, ["call.read:0"]);
    }
}

both_modes! {
    async fn a_group_never_cuts_a_model_that_is_thinking(mode: Mode) {
        // Each group gives its first target 1 s to its first output. The thinker reasons at
        // once and answers after 2 s: its reasoning is output, so the group does not fall over.
        let rig = start(mode);
        let late = std::time::Duration::from_secs(2);
        rig.openai.enqueue(Mock::sse([
            chunk(json!({"role": "assistant", "content": null}), Value::Null),
            chunk(json!({"reasoning_content": "Let me think."}), Value::Null),
            chunk(json!({"content": TEXT}), Value::Null).after(late),
            chunk(json!({}), json!("stop")),
            Frame::done(),
        ]));
        let reply = rig.messages("/v1/messages", &json!({"model": "openai-thinker-first", "max_tokens": 100,
            "stream": true, "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("x-aisix-served-by"), Some("claude-via-openai"), "{}", reply.text());
        assert!(reply.text().contains("thinking_delta") && reply.text().contains(TEXT), "{}", reply.text());

        let mut frames = vec![anthropic::message_start("msg_t", "claude-upstream", json!({"input_tokens": 5, "output_tokens": 1}))];
        frames.push(Frame::event("content_block_start", json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
        frames.push(Frame::event("content_block_delta", json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me think."}})));
        frames.push(Frame::event("content_block_stop", json!({"type": "content_block_stop", "index": 0})).after(late));
        frames.extend(anthropic::text_block(1, &[TEXT]));
        frames.push(anthropic::message_delta("end_turn", None, 9));
        frames.push(anthropic::message_stop());
        rig.anthropic.enqueue(Mock::sse(frames));
        let reply = rig.chat(&json!({"model": "anthropic-thinker-first", "stream": true,
            "messages": [{"role": "user", "content": "hi"}]})).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("x-aisix-served-by"), Some("claude-custom"), "{}", reply.text());
        assert!(reply.text().contains("reasoning_content") && reply.text().contains(TEXT), "{}", reply.text());
    }
}
