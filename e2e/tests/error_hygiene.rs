//! Errors echo nothing unbounded and leak nothing, in both serving modes: a client's value is
//! cut to 256 bytes and marked as cut, a 405 lists what is allowed, a model the key may not use
//! is answered exactly like one that does not exist (chat, `/v1/models/{id}`, and Anthropic's
//! `/v1/messages` and `count_tokens`), and a type error in `stream_options` names the field and
//! the type it must have. What the gateway adds upstream (the provider key and each static
//! `headers` value) never comes back to the client or into the log, though the provider
//! echoes it. A key that may call a group but not its direct models never sees their names:
//! the answers (whole or streamed, either dialect) and `x-aisix-served-by` name the group.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::resources;
use serde_json::json;

const KEY: &str = "sk-hygiene-open-1";
const NARROW_KEY: &str = "sk-hygiene-narrow-2";
const CUT: &str = "… (cut)";

fn config(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(
            resources::openai(
                &mock.base_url(),
                &[("gpt-x", "up-x"), ("gpt-secret", "up-s")],
                "HYGIENE_KEY",
            ) + &resources::api_key("narrow", "HYGIENE_NARROW_KEY", &["gpt-x"]),
        )
        .env("HYGIENE_KEY", KEY)
        .env("HYGIENE_NARROW_KEY", NARROW_KEY)
}

async fn chat(gateway: &Gateway, key: &str, body: &str) -> Reply {
    let request = client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {key}"))],
        Some(body),
    );
    client::send(gateway.addr(), request).await
}

fn message(reply: &Reply) -> String {
    reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

both_modes! {
    async fn echoed_values_are_cut_to_256_bytes_and_marked(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));

        let model = "m".repeat(1024 * 1024);
        let body = json!({"model": model, "messages": []}).to_string();
        let reply = chat(&gateway, KEY, &body).await;
        assert_eq!(reply.status, 404);
        let text = message(&reply);
        assert!(text.contains(&format!("{}{CUT}", "m".repeat(256))), "{text}");
        assert!(text.len() < 512, "{} bytes", text.len());

        let method = "X".repeat(10 * 1024);
        let request = client::request(&method, "/v1/chat/completions", &[], None);
        let reply = client::send(gateway.addr(), request).await;
        assert_eq!(reply.status, 405);
        let text = message(&reply);
        assert!(text.contains(CUT) && text.len() < 512, "{text}");

        let id = "i".repeat(4096);
        let request = client::request(
            "GET",
            &format!("/v1/models/{id}"),
            &[("authorization", &format!("Bearer {KEY}"))],
            None,
        );
        let reply = client::send(gateway.addr(), request).await;
        assert_eq!(reply.status, 404);
        let text = message(&reply);
        assert!(text.contains(CUT) && text.len() < 512, "{text}");
        assert_eq!(mock.request_count(), 0);
    }
}

both_modes! {
    async fn a_405_carries_allow(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        for (method, path, allow) in [
            ("GET", "/v1/chat/completions", "POST"),
            ("PUT", "/v1/embeddings", "POST"),
            ("POST", "/v1/models", "GET, HEAD"),
            ("DELETE", "/livez", "GET, HEAD"),
        ] {
            let reply = client::send(gateway.addr(), client::request(method, path, &[], None)).await;
            assert_eq!(reply.status, 405, "{method} {path}");
            assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
        }
    }
}

both_modes! {
    async fn a_model_the_key_may_not_use_is_answered_as_an_unknown_model(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let refused_as = |reply: &Reply, name: &str| {
            (reply.status, reply.header("content-type").map(str::to_owned), reply.text().replace(name, "NAME"))
        };

        // Chat: the same status, headers and body, the name aside.
        let refused = chat(&gateway, NARROW_KEY, &json!({"model": "gpt-secret", "messages": []}).to_string()).await;
        let unknown = chat(&gateway, NARROW_KEY, &json!({"model": "gpt-nothing", "messages": []}).to_string()).await;
        assert_eq!(refused.status, 404, "{}", refused.text());
        assert_eq!(refused_as(&refused, "gpt-secret"), refused_as(&unknown, "gpt-nothing"));

        // `/v1/models/{id}`.
        let get = |id: &str| {
            client::request(
                "GET",
                &format!("/v1/models/{id}"),
                &[("authorization", &format!("Bearer {NARROW_KEY}"))],
                None,
            )
        };
        let refused = client::send(gateway.addr(), get("gpt-secret")).await;
        let unknown = client::send(gateway.addr(), get("gpt-nothing")).await;
        assert_eq!(refused.status, 404);
        assert_eq!(refused_as(&refused, "gpt-secret"), refused_as(&unknown, "gpt-nothing"));

        // Anthropic's `/v1/messages` and its `count_tokens`, in Anthropic's envelope.
        for path in ["/v1/messages", "/v1/messages/count_tokens"] {
            let ask = |model: &str| {
                let body = json!({"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
                client::request("POST", path, &[("x-api-key", NARROW_KEY), ("anthropic-version", "2023-06-01")],
                    Some(&body.to_string()))
            };
            let refused = client::send(gateway.addr(), ask("gpt-secret")).await;
            let unknown = client::send(gateway.addr(), ask("gpt-nothing")).await;
            assert_eq!(refused.status, 404, "{path}: {}", refused.text());
            assert_eq!(refused.json()["type"], "error", "{path}");
            assert_eq!(refused.json()["error"]["type"], "not_found_error", "{path}");
            assert_eq!(refused_as(&refused, "gpt-secret"), refused_as(&unknown, "gpt-nothing"), "{path}");
        }
        assert_eq!(mock.request_count(), 0);
    }
}

both_modes! {
    async fn a_type_error_in_stream_options_names_the_field_and_type(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(mode, &mock));
        let body = json!({"model": "gpt-x", "stream": true, "messages": [], "stream_options": {"include_usage": "yes"}});
        let reply = chat(&gateway, KEY, &body.to_string()).await;
        assert_eq!(reply.status, 400);
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "invalid_request");
        assert_eq!(error["param"], "stream_options.include_usage");
        let text = error["message"].as_str().unwrap();
        assert!(text.contains("'stream_options.include_usage'") && text.contains("a boolean"), "{text}");

        let body = json!({"model": "gpt-x", "messages": [], "stream_options": 3});
        let reply = chat(&gateway, KEY, &body.to_string()).await;
        assert_eq!(reply.status, 400);
        assert!(message(&reply).contains("'stream_options' must be an object"));
    }
}

const PROVIDER_KEY: &str = "sk-hygiene-provider-key-3";
const FRONT_SECRET: &str = "fronting-gateway-secret-77";

/// A provider key that carries a second credential (for a gateway in front of the provider)
/// in its static `headers`.
fn fronted(mode: Mode, mock: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(format!(
            r#"_format_version: "1"
provider_keys:
  - display_name: up
    provider: openai
    api_base: {}
    api_key: {PROVIDER_KEY}
    headers: {{x-front-auth: "Bearer {FRONT_SECRET}"}}
models:
  - {{display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}}
api_keys:
  - {{display_name: k, key_env: HYGIENE_KEY, allowed_models: ["*"]}}
"#,
            mock.base_url()
        ))
        .env("HYGIENE_KEY", KEY)
}

both_modes! {
    async fn values_the_gateway_adds_upstream_never_reach_the_client_or_the_log(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&fronted(mode, &mock));
        // A fronting gateway that names the credentials it refused, as many do.
        let echo = format!("x-front-auth 'Bearer {FRONT_SECRET}' is not valid for key {PROVIDER_KEY}");
        let leaks = |text: &str| text.contains(FRONT_SECRET) || text.contains(PROVIDER_KEY);

        mock.enqueue(Mock::openai_error(400, "invalid_request_error", &echo));
        let reply = chat(&gateway, KEY, &json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}).to_string()).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(!leaks(&reply.text()), "{}", reply.text());
        assert_eq!(message(&reply), "x-front-auth '***' is not valid for key ***");
        assert_eq!(mock.last_request().unwrap().header("x-front-auth"), Some(&*format!("Bearer {FRONT_SECRET}")));

        // Translated for an Anthropic client.
        mock.enqueue(Mock::openai_error(400, "invalid_request_error", &echo));
        let body = json!({"model": "gpt-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let request = client::request("POST", "/v1/messages", &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], Some(&body));
        let reply = client::send(gateway.addr(), request).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(reply.json()["type"], "error");
        assert!(!leaks(&reply.text()), "{}", reply.text());

        // Reported inside a stream.
        mock.enqueue(Mock::sse([
            Frame::chat_role("up-x"),
            Frame::json(json!({"error": {"message": echo, "type": "invalid_request_error"}})),
        ]));
        let body = json!({"model": "gpt-x", "stream": true, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let reply = chat(&gateway, KEY, &body).await;
        assert_eq!(reply.status, 200);
        assert!(reply.text().contains("event: error"), "{}", reply.text());
        assert!(!leaks(&reply.text()), "{}", reply.text());

        assert_eq!(mock.request_count(), 3);
        assert!(!leaks(&gateway.logs()), "{}", gateway.logs());
    }
}

const GROUP_KEY: &str = "sk-hygiene-group-4";

/// Two groups, each over one direct model (OpenAI's and Anthropic's); `group-only` may call
/// the groups but not the direct models, `k` may call everything.
fn grouped(mode: Mode, gpt: &MockProvider, claude: &MockProvider) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: oai, provider: openai, api_key: sk-oai-hygiene, api_base: "{}"}}
  - {{display_name: ant, provider: anthropic, api_key: sk-ant-hygiene, api_base: "{}"}}
models:
  - {{display_name: gpt-hidden, provider: openai, model_name: up-g, provider_key: oai}}
  - {{display_name: claude-hidden, provider: anthropic, model_name: up-c, provider_key: ant}}
  - display_name: chat
    routing: {{targets: [{{model: gpt-hidden}}]}}
  - display_name: claude-chat
    routing: {{targets: [{{model: claude-hidden}}]}}
api_keys:
  - {{display_name: k, key_env: HYGIENE_KEY, allowed_models: ["*"]}}
  - {{display_name: group-only, key_env: HYGIENE_GROUP_KEY, allowed_models: ["chat", "claude-chat"]}}
"#,
            gpt.base_url(),
            claude.origin()
        ))
        .env("HYGIENE_KEY", KEY)
        .env("HYGIENE_GROUP_KEY", GROUP_KEY)
}

/// Every `"model"` value in `text` (a JSON answer or the data lines of a stream).
fn models_named(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut collect = |value: &serde_json::Value| {
        if let Some(model) = value["model"]
            .as_str()
            .or(value["message"]["model"].as_str())
        {
            names.push(model.to_owned());
        }
    };
    match serde_json::from_str(text) {
        Ok(value) => collect(&value),
        Err(_) => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str(data).ok())
            .for_each(|value| collect(&value)),
    }
    names
}

both_modes! {
    async fn a_key_that_may_not_call_a_group_s_models_sees_only_the_group_s_name(mode: Mode) {
        let gpt = MockProvider::start();
        let claude = MockProvider::start_anthropic();
        let gateway = Gateway::start(&grouped(mode, &gpt, &claude));
        let ask = |key: &str, group: &str, anthropic: bool, stream: bool| {
            let body = json!({"model": group, "max_tokens": 5, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]}).to_string();
            if anthropic {
                client::request("POST", "/v1/messages", &[("x-api-key", key), ("anthropic-version", "2023-06-01")], Some(&body))
            } else {
                client::request("POST", "/v1/chat/completions", &[("authorization", &format!("Bearer {key}"))], Some(&body))
            }
        };
        for (group, direct) in [("chat", "gpt-hidden"), ("claude-chat", "claude-hidden")] {
            for anthropic in [false, true] {
                for stream in [false, true] {
                    let case = format!("{group} anthropic={anthropic} stream={stream}");
                    let reply = client::send(gateway.addr(), ask(GROUP_KEY, group, anthropic, stream)).await;
                    assert_eq!(reply.status, 200, "{case}: {}", reply.text());
                    assert_eq!(reply.header("x-aisix-served-by"), Some(group), "{case}");
                    let named = models_named(&reply.text());
                    assert!(!named.is_empty() && named.iter().all(|m| m == group), "{case}: {named:?}");
                    assert!(!reply.text().contains(direct), "{case}: {}", reply.text());

                    // A key that may call the direct model is told which one answered.
                    let reply = client::send(gateway.addr(), ask(KEY, group, anthropic, stream)).await;
                    assert_eq!(reply.status, 200, "{case}: {}", reply.text());
                    assert_eq!(reply.header("x-aisix-served-by"), Some(direct), "{case}");
                    assert!(models_named(&reply.text()).iter().all(|m| m == direct), "{case}");
                }
            }
        }

        // The Anthropic provider's refusal of an endpoint it lacks names the group too.
        let body = json!({"model": "claude-chat", "input": "hi"}).to_string();
        let request = client::request("POST", "/v1/embeddings", &[("authorization", &format!("Bearer {GROUP_KEY}"))], Some(&body));
        let reply = client::send(gateway.addr(), request).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert!(message(&reply).contains("'claude-chat'"), "{}", reply.text());
        assert!(!reply.text().contains("claude-hidden"), "{}", reply.text());
    }
}
