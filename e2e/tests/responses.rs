//! OpenAI's Responses API (`/v1/responses`) through the real gateway, in both serving modes:
//! relayed to a provider key that serves it (the mock's Responses answers, OpenAI's shapes),
//! whole and streamed, with `model` the only change to the request, usage in the access log and
//! metrics under `endpoint="responses"`, Azure's v1 path, a group's rename, errors in OpenAI's
//! envelope, and a stream that breaks after it started ending with `response.failed`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::prom;
use aisix_e2e::sdk;
use serde_json::{Value, json};

const KEY: &str = "sk-responses-test-1";
const OTHER_KEY: &str = "sk-responses-test-2";

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: native, provider: openai, api_key: sk-upstream-secret-1, api_base: "{base}", responses: true}}
  - {{display_name: chat-only, provider: openai, api_base: "{base}"}}
  - {{display_name: az, provider: azure_openai, api_base: "http://{addr}", api_version: "2024-10-21", api_key: azure-secret-key}}
models:
  - {{display_name: resp, provider: openai, model_name: gpt-up, provider_key: native}}
  - {{display_name: chat, provider: openai, model_name: gpt-chat, provider_key: chat-only}}
  - {{display_name: azure, provider: azure_openai, model_name: gpt-deploy, provider_key: az}}
  - {{display_name: pool, routing: {{targets: [{{model: resp}}]}}}}
api_keys:
  - {{display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}}
  - {{display_name: other, key_env: RESPONSES_OTHER_KEY, allowed_models: ["*"]}}
"#,
            base = mock.base_url(),
            addr = mock.addr(),
        ))
        .env("RESPONSES_KEY", KEY)
        .env("RESPONSES_OTHER_KEY", OTHER_KEY)
        .metrics()
}

async fn post(gateway: &Gateway, id: &str, body: &str) -> client::Reply {
    client::send(
        gateway.addr(),
        client::request(
            "POST",
            "/v1/responses",
            &[
                ("authorization", &format!("Bearer {KEY}")),
                ("x-request-id", id),
            ],
            Some(body),
        ),
    )
    .await
}

async fn call(gateway: &Gateway, method: &str, path: &str, key: &str) -> client::Reply {
    client::send(
        gateway.addr(),
        client::request(
            method,
            path,
            &[("authorization", &format!("Bearer {key}"))],
            None,
        ),
    )
    .await
}

/// The `(event name, data)` of each event of an SSE body.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|event| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in event.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
                }
            }
            (name, data)
        })
        .collect()
}

both_modes! {
    async fn a_native_response_is_relayed_with_only_model_rewritten_and_its_usage_counted(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let body = r#"{"model": "resp", "input": "Say hello to the gateway", "instructions": "Be brief", "store": true, "include": ["reasoning.encrypted_content"], "unknown_field": [1, 2.50]}"#;
        let reply = post(&gateway, "native-1", body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["object"], "response");
        assert_eq!(answer["status"], "completed");
        assert_eq!(answer["model"], "gpt-up", "a direct model's answer is relayed as it is");
        assert_eq!(answer["output"][0]["content"][0]["text"], "Hello from the mock provider.");

        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/v1/responses");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-upstream-secret-1"));
        assert_eq!(
            String::from_utf8(seen.body.to_vec()).unwrap(),
            body.replace(r#""model": "resp""#, r#""model": "gpt-up""#),
            "the request goes byte for byte but for its model"
        );

        let line = gateway.access_line("native-1");
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["input_tokens"], 7, "{line}");
        assert_eq!(line["output_tokens"], 5, "{line}");

        let stream = post(&gateway, "native-2", r#"{"model":"resp","input":"Hi there","stream":true}"#).await;
        assert_eq!(stream.status, 200);
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        let text = stream.text();
        assert!(!text.contains("[DONE]"), "a Responses stream has no [DONE]: {text}");
        let got = events(&text);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"response.created"));
        assert_eq!(names.last(), Some(&"response.completed"));
        for (i, (_, data)) in got.iter().enumerate() {
            assert_eq!(data["sequence_number"], i, "{text}");
        }
        let line = gateway.access_line("native-2");
        assert_eq!(line["stream"], true, "{line}");
        assert_eq!(line["input_tokens"], 2, "{line}");
        assert_eq!(line["output_tokens"], 5, "{line}");

        let page = client::get(gateway.metrics_addr.unwrap(), "/metrics").await.text();
        let labels = [("endpoint", "responses"), ("model", "resp"), ("status_class", "2xx")];
        assert!(prom::has_series(&page, "aisix_requests_total", &labels), "{page}");
        assert_eq!(prom::sample(&page, "aisix_requests_total", &labels), 2.0, "{page}");
        prom::promtool_check(&page).unwrap();
    }
}

both_modes! {
    async fn azure_serves_responses_at_its_v1_path_with_the_deployment_as_model(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        mock.enqueue(Mock::status(200).json(json!({
            "id": "resp_az", "object": "response", "created_at": 1, "status": "completed", "model": "gpt-deploy",
            "output": [], "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
        })));
        let reply = post(&gateway, "azure-1", r#"{"model":"azure","input":"Hi"}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/openai/v1/responses");
        assert_eq!(seen.header("api-key"), Some("azure-secret-key"));
        assert_eq!(seen.body_json().unwrap()["model"], "gpt-deploy");
        assert_eq!(seen.query, None, "the v1 surface takes no api-version");
        assert_eq!(gateway.access_line("azure-1")["output_tokens"], 2);
    }
}

both_modes! {
    async fn a_group_names_its_direct_model_in_the_answer_and_the_stream(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let reply = post(&gateway, "group-1", r#"{"model":"pool","input":"Hi"}"#).await;
        assert_eq!(reply.json()["model"], "resp", "{}", reply.text());
        let stream = post(&gateway, "group-2", r#"{"model":"pool","input":"Hi","stream":true}"#).await;
        let got = events(&stream.text());
        assert_eq!(got[0].1["response"]["model"], "resp");
        assert_eq!(got.last().unwrap().1["response"]["model"], "resp");
    }
}

both_modes! {
    async fn errors_come_in_openai_s_envelope_and_an_upstream_4xx_passes_with_its_key_masked(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let unknown = post(&gateway, "err-1", r#"{"model":"nope","input":"Hi"}"#).await;
        assert_eq!(unknown.status, 404);
        assert!(unknown.json()["error"]["message"].is_string(), "{}", unknown.text());
        let bad = post(&gateway, "err-2", "{not json").await;
        assert_eq!(bad.status, 400);
        assert!(bad.json()["error"]["type"].is_string());
        let unauthorized = client::send(
            gateway.addr(),
            client::request("POST", "/v1/responses", &[], Some(r#"{"model":"resp","input":"x"}"#)),
        )
        .await;
        assert_eq!(unauthorized.status, 401);

        mock.enqueue(Mock::openai_error(400, "invalid_request_error", "Previous response with id 'resp_x' not found (key sk-upstream-secret-1)."));
        let upstream = post(&gateway, "err-3", r#"{"model":"resp","input":"Hi","previous_response_id":"resp_x"}"#).await;
        assert_eq!(upstream.status, 400);
        let text = upstream.text();
        assert!(text.contains("Previous response with id 'resp_x' not found"), "{text}");
        assert!(!text.contains("sk-upstream-secret-1"), "{text}");

        let missing = post(&gateway, "err-4", r#"{"model":"resp"}"#).await;
        assert_eq!(missing.status, 400, "the upstream judges the request: {}", missing.text());
        assert_eq!(missing.json()["error"]["param"], "input");
    }
}

both_modes! {
    async fn a_stream_that_breaks_after_it_started_ends_with_response_failed(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let created = json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_cut", "object": "response", "created_at": 1, "status": "in_progress", "model": "gpt-up", "output": []}});
        let delta = json!({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hel"});
        mock.enqueue(
            Mock::sse([
                Frame::event("response.created", created),
                Frame::event("response.output_text.delta", delta),
            ])
            .disconnect(),
        );
        let reply = post(&gateway, "cut-1", r#"{"model":"resp","input":"Hi","stream":true}"#).await;
        assert_eq!(reply.status, 200);
        let got = events(&reply.text());
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["response.created", "response.output_text.delta", "response.failed"]);
        let failed = &got[2].1;
        assert_eq!(failed["sequence_number"], 2);
        assert_eq!(failed["response"]["id"], "resp_cut");
        assert_eq!(failed["response"]["status"], "failed");
        assert!(failed["response"]["error"]["message"].is_string(), "{failed}");
        assert_eq!(gateway.access_line("cut-1")["error"], "stream_cut");
    }
}

both_modes! {
    async fn a_chat_only_key_gets_the_request_translated_and_the_answer_back(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let reply = post(&gateway, "tr-1", r#"{"model":"chat","instructions":"Be brief","input":"Say hello","max_output_tokens":50,"store":false}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["object"], "response");
        assert_eq!(answer["status"], "completed");
        assert!(answer["id"].as_str().unwrap().starts_with("resp_"));
        assert_eq!(answer["output"][0]["type"], "message");
        assert_eq!(answer["output"][0]["content"][0]["text"], "Hello from the mock provider.");
        assert_eq!(answer["instructions"], "Be brief");
        assert_eq!(answer["usage"]["output_tokens"], 5);
        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/v1/chat/completions");
        let chat = seen.body_json().unwrap();
        assert_eq!(chat["model"], "gpt-chat");
        assert_eq!(chat["messages"], json!([{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Say hello"}]));
        assert_eq!(chat["max_tokens"], 50);
        let line = gateway.access_line("tr-1");
        assert_eq!(line["input_tokens"], 4, "{line}");
        assert_eq!(line["output_tokens"], 5, "{line}");

        let stream = post(&gateway, "tr-2", r#"{"model":"chat","input":"Say hello","stream":true}"#).await;
        assert_eq!(stream.status, 200);
        let got = events(&stream.text());
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..4], ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
        assert_eq!(&names[names.len() - 4..], ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
        for (i, (_, data)) in got.iter().enumerate() {
            assert_eq!(data["sequence_number"], i);
        }
        let text: String = got
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .map(|(_, d)| d["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Hello from the mock provider.");
        let completed = &got.last().unwrap().1["response"];
        assert_eq!(completed["usage"]["output_tokens"], 5);
        assert_eq!(mock.last_request().unwrap().body_json().unwrap()["stream_options"]["include_usage"], true);
        assert_eq!(gateway.access_line("tr-2")["output_tokens"], 5);
    }
}

both_modes! {
    async fn a_function_tool_round_trip_is_translated_both_ways(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
        let first = json!({"model": "chat", "input": "Weather in Paris?", "tools": tools, "tool_choice": "required"});
        let reply = post(&gateway, "tool-1", &first.to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let call = reply.json()["output"][0].clone();
        assert_eq!(call["type"], "function_call", "{call}");
        assert_eq!(call["name"], "get_weather");
        let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(arguments["city"].is_string());

        let second = json!({"model": "chat", "tools": tools, "input": [
            {"role": "user", "content": "Weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "18C and sunny"},
        ]});
        let reply = post(&gateway, "tool-2", &second.to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let chat = mock.last_request().unwrap().body_json().unwrap();
        let messages = chat["messages"].as_array().unwrap();
        assert_eq!(messages[1]["tool_calls"][0]["id"], call["call_id"]);
        assert_eq!(messages[2], json!({"role": "tool", "tool_call_id": call["call_id"], "content": "18C and sunny"}));
    }
}

both_modes! {
    async fn a_tool_only_openai_runs_is_left_out_when_offered_and_refused_when_forced_on_a_translated_path(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let offered = r#"{"model":"chat","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search","external_web_access":false},{"type":"custom","name":"apply_patch"}]}"#;
        let reply = post(&gateway, "bi-1", offered).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-dropped-tools"), Some("web_search,custom"));
        let chat = mock.last_request().unwrap().body_json().unwrap();
        let sent: Vec<&str> = chat["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        assert_eq!(sent, ["f"], "only the function went upstream");
        assert_eq!(gateway.access_line("bi-1")["dropped_tools"], "web_search,custom");

        let streamed = post(&gateway, "bi-s", &offered.replace(r#""input":"x""#, r#""input":"x","stream":true"#)).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        assert_eq!(streamed.header("x-aisix-dropped-tools"), Some("web_search,custom"));

        let before = mock.request_count();
        let forced = post(&gateway, "bi-2", r#"{"model":"chat","input":"x","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}"#).await;
        assert_eq!(forced.status, 400, "{}", forced.text());
        let error = &forced.json()["error"];
        assert_eq!(error["param"], "tool_choice", "{error}");
        assert!(error["message"].as_str().unwrap().contains("web_search"), "{error}");
        let required = post(&gateway, "bi-3", r#"{"model":"chat","input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"}"#).await;
        assert_eq!(required.status, 400, "{}", required.text());
        assert_eq!(required.json()["error"]["param"], "tool_choice");
        assert_eq!(mock.request_count(), before, "nothing was sent upstream");

        let native = post(&gateway, "bi-4", r#"{"model":"resp","input":"x","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}"#).await;
        assert_eq!(native.status, 200, "a native target runs its own tools: {}", native.text());
        assert_eq!(native.header("x-aisix-dropped-tools"), None);
        assert_eq!(mock.last_request().unwrap().body_json().unwrap()["tools"][0]["type"], "web_search");
        assert!(gateway.access_line("bi-4").get("dropped_tools").is_none());
    }
}

both_modes! {
    async fn a_translated_conversation_is_kept_and_chained_by_previous_response_id(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let first = post(&gateway, "st-1", r#"{"model":"chat","instructions":"Be brief","input":"My name is Ada"}"#).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let first_id = first.json()["id"].as_str().unwrap().to_owned();
        let second = post(&gateway, "st-2", &json!({"model": "chat", "input": "What is my name?", "previous_response_id": first_id, "stream": true}).to_string()).await;
        assert_eq!(second.status, 200, "{}", second.text());
        let got = events(&second.text());
        let completed = &got.last().unwrap().1["response"];
        assert_eq!(completed["previous_response_id"], first_id.as_str());
        let second_id = completed["id"].as_str().unwrap().to_owned();
        let third = post(&gateway, "st-3", &json!({"model": "chat", "input": [{"role": "user", "content": "And again?"}], "previous_response_id": second_id}).to_string()).await;
        assert_eq!(third.status, 200, "{}", third.text());
        let third_id = third.json()["id"].as_str().unwrap().to_owned();

        let chat = mock.last_request().unwrap().body_json().unwrap();
        let roles: Vec<&str> = chat["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"], "the whole conversation, without the first turn's instructions: {chat}");
        assert_eq!(chat["messages"][0]["content"][0]["text"], "My name is Ada");
        assert_eq!(chat["messages"][1]["content"], "Hello from the mock provider.");
        assert_eq!(chat["messages"][4]["content"], "And again?");

        let stored = call(&gateway, "GET", &format!("/v1/responses/{third_id}"), KEY).await;
        assert_eq!(stored.status, 200);
        assert_eq!(stored.json(), third.json(), "GET answers the response as it was");
        let items = call(&gateway, "GET", &format!("/v1/responses/{third_id}/input_items?order=asc"), KEY).await;
        assert_eq!(items.status, 200, "{}", items.text());
        let items = items.json();
        assert_eq!(items["object"], "list");
        assert_eq!(items["data"].as_array().unwrap().len(), 5, "{items}");
        assert!(items["data"].as_array().unwrap().iter().all(|i| i["id"].is_string()));
        assert_eq!(items["first_id"], items["data"][0]["id"]);

        let stranger = call(&gateway, "GET", &format!("/v1/responses/{third_id}"), OTHER_KEY).await;
        assert_eq!(stranger.status, 404, "another key's response is not found");
        let deleted = call(&gateway, "DELETE", &format!("/v1/responses/{third_id}"), KEY).await;
        assert_eq!(deleted.json(), json!({"id": third_id, "object": "response", "deleted": true}));
        assert_eq!(call(&gateway, "GET", &format!("/v1/responses/{third_id}"), KEY).await.status, 404);
        assert_eq!(call(&gateway, "DELETE", &format!("/v1/responses/{third_id}"), KEY).await.status, 404);
    }
}

both_modes! {
    async fn an_unknown_id_is_404_with_the_id_echoed_cut_and_store_false_keeps_nothing(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let long = format!("resp_{}", "x".repeat(1000));
        let missing = call(&gateway, "GET", &format!("/v1/responses/{long}"), KEY).await;
        assert_eq!(missing.status, 404);
        let message = missing.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.starts_with("Response with id 'resp_xxx"), "{message}");
        assert!(message.len() < 320, "the id is cut to 256 bytes: {message}");

        let chained = post(&gateway, "nf-1", r#"{"model":"chat","input":"Hi","previous_response_id":"resp_gone"}"#).await;
        assert_eq!(chained.status, 404, "{}", chained.text());
        let error = &chained.json()["error"];
        assert_eq!(error["message"], "Previous response with id 'resp_gone' not found.");
        assert_eq!(error["param"], "previous_response_id");
        assert_eq!(mock.request_count(), 0);

        let unstored = post(&gateway, "nf-2", r#"{"model":"chat","input":"Hi","store":false}"#).await;
        let id = unstored.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(call(&gateway, "GET", &format!("/v1/responses/{id}"), KEY).await.status, 404);
        let wrong = call(&gateway, "POST", &format!("/v1/responses/{id}"), KEY).await;
        assert_eq!(wrong.status, 405);
        assert_eq!(wrong.header("allow"), Some("GET, DELETE"));
        assert_eq!(call(&gateway, "GET", &format!("/v1/responses/{id}"), "sk-wrong").await.status, 401);
    }
}

both_modes! {
    async fn an_anthropic_target_answers_responses_through_chat_and_messages(mode: Mode) {
        let anthropic = MockProvider::start_anthropic();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(format!(
                    r#"_format_version: "1"
provider_keys:
  - {{display_name: ant, provider: anthropic, api_key: sk-ant-secret-1, api_base: "{}"}}
models:
  - {{display_name: claude, provider: anthropic, model_name: claude-upstream, provider_key: ant}}
api_keys:
  - {{display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}}
"#,
                    anthropic.origin()
                ))
                .env("RESPONSES_KEY", KEY),
        );
        let reply = post(&gateway, "an-1", r#"{"model":"claude","instructions":"Be brief","input":"Say hello","max_output_tokens":100}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["status"], "completed");
        assert_eq!(answer["output"][0]["content"][0]["text"], "Hello from the mock provider.");
        let seen = anthropic.last_request().unwrap();
        assert_eq!(seen.path, "/v1/messages");
        let messages = seen.body_json().unwrap();
        assert_eq!(messages["system"], "Be brief", "{messages}");
        assert_eq!(messages["max_tokens"], 100);
        assert_eq!(gateway.access_line("an-1")["output_tokens"], 5);

        let stream = post(&gateway, "an-2", &json!({"model": "claude", "input": "And again", "stream": true, "previous_response_id": answer["id"]}).to_string()).await;
        assert_eq!(stream.status, 200);
        let got = events(&stream.text());
        assert_eq!(got.first().unwrap().0, "response.created");
        assert_eq!(got.last().unwrap().0, "response.completed", "{}", stream.text());
        let text: String = got.iter().filter(|(n, _)| n == "response.output_text.delta").map(|(_, d)| d["delta"].as_str().unwrap()).collect();
        assert_eq!(text, "Hello from the mock provider.");
        let sent = anthropic.last_request().unwrap().body_json().unwrap();
        assert_eq!(sent["messages"].as_array().unwrap().len(), 3, "the chained conversation: {sent}");

        let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        let call = post(&gateway, "an-3", &json!({"model": "claude", "input": "Weather?", "tools": tools, "tool_choice": "required", "store": false}).to_string()).await;
        assert_eq!(call.status, 200, "{}", call.text());
        assert_eq!(call.json()["output"][0]["type"], "function_call", "{}", call.text());
    }
}

/// Runs `e2e/python/test_openai_responses.py` against `model`.
async fn sdk_script(gateway: &Gateway, model: &str, translated: bool) {
    let env = vec![
        ("AISIX_SDK_BASE_URL", gateway.url("/v1")),
        ("AISIX_SDK_API_KEY", KEY.to_owned()),
        ("AISIX_SDK_MODEL", model.to_owned()),
        (
            "AISIX_SDK_TRANSLATED",
            if translated { "1" } else { "0" }.to_owned(),
        ),
        ("AISIX_SDK_TIMEOUT", "30".to_owned()),
    ];
    let (status, printed) = sdk::run_python("test_openai_responses.py", env).await;
    sdk::assert_passed(status, &printed, || {
        format!("--- gateway log ---\n{}", gateway.logs())
    });
}

both_modes! {
    async fn the_openai_sdk_drives_responses_on_the_native_and_the_translated_path(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        sdk_script(&gateway, "resp", false).await;
        let native = mock.requests().iter().filter(|r| r.path == "/v1/responses").count();
        assert!(native >= 10, "the native path reached the upstream's Responses API ({native})");
        let chained: Vec<_> = mock
            .requests()
            .iter()
            .filter_map(|r| r.body_json().ok()?.get("previous_response_id")?.as_str().map(str::to_owned))
            .collect();
        assert_eq!(chained.len(), 2, "the native chain passes previous_response_id through");
        sdk_script(&gateway, "chat", true).await;
    }
}

both_modes! {
    async fn previous_response_id_reaches_the_native_key_that_created_the_response(mode: Mode) {
        let (a, b) = (MockProvider::start(), MockProvider::start());
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(format!(
                    r#"_format_version: "1"
provider_keys:
  - {{display_name: key-a, provider: openai, api_base: "{}", responses: true}}
  - {{display_name: key-b, provider: openai, api_base: "{}", responses: true}}
models:
  - {{display_name: on-a, provider: openai, model_name: gpt-a, provider_key: key-a}}
  - {{display_name: on-b, provider: openai, model_name: gpt-b, provider_key: key-b}}
  - {{display_name: duo, routing: {{strategy: round_robin, targets: [{{model: on-a}}, {{model: on-b}}]}}}}
api_keys:
  - {{display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}}
"#,
                    a.base_url(),
                    b.base_url()
                ))
                .env("RESPONSES_KEY", KEY),
        );
        let first = post(&gateway, "pin-1", r#"{"model":"duo","input":"Hi"}"#).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let (creator, other) = if a.request_count() == 1 { (&a, &b) } else { (&b, &a) };
        assert_eq!(creator.request_count(), 1);
        let id = first.json()["id"].as_str().unwrap().to_owned();
        let second = post(&gateway, "pin-2", &json!({"model": "duo", "input": "Again", "previous_response_id": id, "stream": true}).to_string()).await;
        assert_eq!(second.status, 200);
        let got = events(&second.text());
        let second_id = got[0].1["response"]["id"].as_str().unwrap().to_owned();
        let third = post(&gateway, "pin-3", &json!({"model": "duo", "input": "Once more", "previous_response_id": second_id}).to_string()).await;
        assert_eq!(third.status, 200);
        assert_eq!(creator.request_count(), 3, "every turn of the chain reached the key that created it");
        assert_eq!(other.request_count(), 0);
        let free = post(&gateway, "pin-4", r#"{"model":"duo","input":"Hi"}"#).await;
        assert_eq!(free.status, 200);
        assert_eq!(a.request_count() + b.request_count(), 4);
    }
}

both_modes! {
    async fn the_built_in_mock_provider_answers_responses_whole_streamed_and_chained(mode: Mode) {
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(
                    r#"_format_version: "1"
provider_keys:
  - {display_name: local, provider: mock}
models:
  - {display_name: demo, provider: mock, model_name: mock-chat, provider_key: local}
api_keys:
  - {display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}
"#,
                )
                .env("RESPONSES_KEY", KEY),
        );
        let first = post(&gateway, "mock-1", r#"{"model":"demo","input":"Hi"}"#).await;
        assert_eq!(first.status, 200, "{}", first.text());
        let answer = first.json();
        assert_eq!(answer["object"], "response");
        assert!(answer["output"][0]["content"][0]["text"].as_str().unwrap().contains("mock provider"));
        let stream = post(&gateway, "mock-2", &json!({"model": "demo", "input": "Again", "stream": true, "previous_response_id": answer["id"]}).to_string()).await;
        assert_eq!(stream.status, 200);
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        let got = events(&stream.text());
        assert_eq!(got.last().unwrap().0, "response.completed");
        let id = got.last().unwrap().1["response"]["id"].as_str().unwrap().to_owned();
        let stored = call(&gateway, "GET", &format!("/v1/responses/{id}/input_items"), KEY).await;
        assert_eq!(stored.json()["data"].as_array().unwrap().len(), 3, "{}", stored.text());
        assert_eq!(gateway.access_line("mock-2")["output_tokens"].as_u64().map(|n| n > 0), Some(true));
    }
}

both_modes! {
    async fn a_group_falls_over_from_a_native_target_to_a_translated_one_before_the_first_output(mode: Mode) {
        let (native, chat) = (MockProvider::start(), MockProvider::start());
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(format!(
                    r#"_format_version: "1"
provider_keys:
  - {{display_name: native, provider: openai, api_base: "{}", responses: true}}
  - {{display_name: chat-only, provider: openai, api_base: "{}"}}
models:
  - {{display_name: resp, provider: openai, model_name: gpt-up, provider_key: native}}
  - {{display_name: chat, provider: openai, model_name: gpt-chat, provider_key: chat-only}}
  - {{display_name: mixed, routing: {{targets: [{{model: resp, priority: 1}}, {{model: chat}}]}}}}
api_keys:
  - {{display_name: k, key_env: RESPONSES_KEY, allowed_models: ["*"]}}
"#,
                    native.base_url(),
                    chat.base_url()
                ))
                .env("RESPONSES_KEY", KEY),
        );
        native.enqueue(Mock::openai_error(503, "server_error", "overloaded"));
        let reply = post(&gateway, "mix-1", r#"{"model":"mixed","input":"Hi"}"#).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-aisix-served-by"), Some("chat"));
        assert_eq!(reply.json()["model"], "chat", "a group's answer names the direct model");
        assert_eq!(chat.last_request().unwrap().path, "/v1/chat/completions");

        native.enqueue(Mock::openai_error(503, "server_error", "overloaded"));
        let stream = post(&gateway, "mix-2", r#"{"model":"mixed","input":"Hi","stream":true}"#).await;
        let got = events(&stream.text());
        assert_eq!(got.last().unwrap().0, "response.completed", "{}", stream.text());
        assert_eq!(native.request_count(), 2);
        assert_eq!(chat.request_count(), 2);
    }
}

both_modes! {
    async fn a_native_response_is_read_listed_and_deleted_at_the_key_that_created_it(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let created = post(&gateway, "ns-1", r#"{"model":"resp","input":"Remember me"}"#).await;
        assert_eq!(created.status, 200, "{}", created.text());
        let id = created.json()["id"].as_str().unwrap().to_owned();

        let path = format!("/v1/responses/{id}");
        let got = client::send(
            gateway.addr(),
            client::request("GET", &path, &[("authorization", &format!("Bearer {KEY}")), ("x-request-id", "ns-get")], None),
        )
        .await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.json()["id"], id.as_str());
        assert_eq!(got.json()["output"], created.json()["output"]);
        let last = mock.last_request().unwrap();
        assert_eq!((last.method.as_str(), last.path.as_str()), ("GET", format!("/v1/responses/{id}").as_str()));
        assert_eq!(last.header("authorization"), Some("Bearer sk-upstream-secret-1"), "the key's own credential");

        let items = call(&gateway, "GET", &format!("/v1/responses/{id}/input_items?limit=5&order=asc"), KEY).await;
        assert_eq!(items.status, 200, "{}", items.text());
        assert_eq!(items.json()["object"], "list");
        assert_eq!(items.json()["data"][0]["content"][0]["text"], "Remember me");
        assert_eq!(mock.last_request().unwrap().query.as_deref(), Some("limit=5&order=asc"), "the client's query travels");

        let before = mock.request_count();
        let stranger = call(&gateway, "GET", &format!("/v1/responses/{id}"), OTHER_KEY).await;
        assert_eq!(stranger.status, 404, "another API key's response: {}", stranger.text());
        assert_eq!(stranger.json()["error"]["type"], "invalid_request_error");
        let unknown = call(&gateway, "GET", "/v1/responses/resp_never_made", KEY).await;
        assert_eq!(unknown.status, 404);
        assert!(unknown.json()["error"]["message"].as_str().unwrap().contains("resp_never_made"));
        assert_eq!(mock.request_count(), before, "neither reached the provider");

        let deleted = call(&gateway, "DELETE", &format!("/v1/responses/{id}"), KEY).await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        assert_eq!(deleted.json(), json!({"id": id, "object": "response", "deleted": true}));
        assert_eq!(mock.last_request().unwrap().method.as_str(), "DELETE");
        let after = call(&gateway, "GET", &format!("/v1/responses/{id}"), KEY).await;
        assert_eq!(after.status, 404, "{}", after.text());
        let access = gateway.access_line("ns-get");
        assert_eq!((access["status"].as_u64(), access["provider"].as_str()), (Some(200), Some("native")), "{access}");
        assert!(!gateway.logs().contains("sk-upstream-secret-1"));
    }
}

both_modes! {
    async fn a_native_response_the_provider_no_longer_has_is_its_404_in_openai_s_envelope(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let created = post(&gateway, "gone-1", r#"{"model":"resp","input":"Hi"}"#).await;
        assert_eq!(created.status, 200, "{}", created.text());
        let id = created.json()["id"].as_str().unwrap().to_owned();
        // The provider forgets it behind the gateway's back (deleted there by someone else).
        let forgotten = client::send(
            mock.addr(),
            client::request("DELETE", &format!("/v1/responses/{id}"), &[], None),
        )
        .await;
        assert_eq!(forgotten.status, 200, "{}", forgotten.text());
        let got = call(&gateway, "GET", &format!("/v1/responses/{id}"), KEY).await;
        assert_eq!(got.status, 404, "the provider kept nothing: {}", got.text());
        let error = &got.json()["error"];
        assert_eq!(error["message"], format!("Response with id '{id}' not found."), "{error}");
        assert_eq!(mock.last_request().unwrap().method.as_str(), "GET", "asked of the key that made it");
    }
}

both_modes! {
    async fn a_native_response_made_with_store_false_is_not_pinned_so_its_get_never_leaves_the_gateway(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let created = post(&gateway, "unkept-1", r#"{"model":"resp","input":"Hi","store":false}"#).await;
        assert_eq!(created.status, 200, "{}", created.text());
        let id = created.json()["id"].as_str().unwrap().to_owned();
        let before = mock.request_count();
        let got = call(&gateway, "GET", &format!("/v1/responses/{id}"), KEY).await;
        assert_eq!(got.status, 404, "nothing was kept: {}", got.text());
        assert_eq!(got.json()["error"]["message"], format!("Response with id '{id}' not found."));
        assert_eq!(mock.request_count(), before, "no pin, so nothing is asked upstream");
    }
}
