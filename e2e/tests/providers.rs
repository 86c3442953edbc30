//! Providers as they are deployed: Azure OpenAI's deployment paths, `api-version` and `api-key`
//! (a deployment name that would splice another path or a query in is refused at start);
//! static headers, an `api_base` query string and `stream_usage: false` on any provider key;
//! and egress through a real forward proxy (tinyproxy) named by `HTTP_PROXY`, with `NO_PROXY`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock};
use aisix_e2e::tinyproxy::Tinyproxy;
use serde_json::json;

const KEY: &str = "sk-providers-test-1";

fn config(mode: Mode, provider_keys: &str, models: &str) -> GatewayConfig {
    GatewayConfig::new(mode)
        .resources(format!(
            "_format_version: \"1\"\nprovider_keys:\n{provider_keys}models:\n{models}api_keys:\n  - {{display_name: k, key_env: PROVIDERS_KEY, allowed_models: [\"*\"]}}\n"
        ))
        .env("PROVIDERS_KEY", KEY)
}

async fn post(gateway: &Gateway, path: &str, body: serde_json::Value) -> client::Reply {
    client::send(
        gateway.addr(),
        client::request(
            "POST",
            path,
            &[("authorization", &format!("Bearer {KEY}"))],
            Some(&body.to_string()),
        ),
    )
    .await
}

both_modes! {
    async fn an_azure_deployment_that_would_change_the_url_is_refused_at_start(mode: Mode) {
        for deployment in ["dep/../other", "dep?x=1", ".."] {
            let mut gateway = Gateway::spawn(&config(
                mode,
                "  - {display_name: az, provider: azure_openai, api_base: \"http://127.0.0.1:1\", api_version: \"2024-10-21\", api_key: k}\n",
                &format!("  - {{display_name: chat, provider: azure_openai, model_name: \"{deployment}\", provider_key: az}}\n"),
            ));
            let status = gateway.wait_exit(std::time::Duration::from_secs(10)).expect("refused at start");
            assert!(!status.success(), "{deployment}");
            assert!(gateway.logs().contains("models[0].model_name"), "{deployment}: {}", gateway.logs());
        }
    }
}

fn chat_completion() -> Mock {
    Mock::status(200).json(json!({
        "id": "chatcmpl-az", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "from azure"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    }))
}

both_modes! {
    async fn azure_deployments_get_their_path_api_version_and_api_key(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(
            mode,
            &format!(
                "  - {{display_name: az, provider: azure_openai, api_base: \"http://{}\", api_version: \"2024-10-21\", api_key: azure-secret-key, headers: {{OpenAI-Organization: org-7}}}}\n",
                mock.addr()
            ),
            "  - {display_name: chat, provider: azure_openai, model_name: gpt4o-prod, provider_key: az}\n",
        ));
        mock.enqueue(chat_completion());
        let reply = post(&gateway, "/v1/chat/completions", json!({"model": "chat", "messages": []})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["choices"][0]["message"]["content"], "from azure");
        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/openai/deployments/gpt4o-prod/chat/completions");
        assert_eq!(seen.query.as_deref(), Some("api-version=2024-10-21"));
        assert_eq!(seen.header("api-key"), Some("azure-secret-key"));
        assert_eq!(seen.header("authorization"), None);
        assert_eq!(seen.header("openai-organization"), Some("org-7"));
        assert_eq!(seen.body_json().unwrap()["model"], "chat", "Azure reads the deployment from the path");

        mock.enqueue(Mock::sse([Frame::chat_delta("gpt-4o", "hi")]));
        let reply = post(&gateway, "/v1/chat/completions", json!({"model": "chat", "stream": true, "messages": []})).await;
        assert!(reply.text().ends_with("data: [DONE]\n\n"), "{}", reply.text());
        assert_eq!(mock.last_request().unwrap().body_json().unwrap()["stream_options"]["include_usage"], true);

        mock.enqueue(Mock::status(200).json(json!({"object": "list", "data": [], "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1}})));
        assert_eq!(post(&gateway, "/v1/embeddings", json!({"model": "chat", "input": "x"})).await.status, 200);
        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/openai/deployments/gpt4o-prod/embeddings");
        assert_eq!(seen.query.as_deref(), Some("api-version=2024-10-21"));
        assert!(!gateway.logs().contains("azure-secret-key"));
    }
}

both_modes! {
    async fn a_provider_key_keeps_its_query_its_static_headers_and_can_leave_stream_options_alone(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(&config(
            mode,
            &format!(
                "  - display_name: up\n    provider: openai\n    api_key: sk-up\n    api_base: \"{}?tenant=t1\"\n    stream_usage: false\n    headers:\n      OpenAI-Organization: org-9\n      X-Team: blue\n",
                mock.base_url()
            ),
            "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n",
        ));
        let reply = post(&gateway, "/v1/chat/completions", json!({"model": "gpt-x", "stream": true, "messages": []})).await;
        assert!(reply.text().ends_with("data: [DONE]\n\n"), "{}", reply.text());
        let seen = mock.last_request().unwrap();
        assert_eq!(seen.path, "/v1/chat/completions");
        assert_eq!(seen.query.as_deref(), Some("tenant=t1"));
        assert_eq!(seen.header("openai-organization"), Some("org-9"));
        assert_eq!(seen.header("x-team"), Some("blue"));
        assert_eq!(seen.header("authorization"), Some("Bearer sk-up"));
        let body = seen.body_json().unwrap();
        assert!(body.get("stream_options").is_none(), "stream_usage: false injects nothing: {body}");

        assert_eq!(post(&gateway, "/v1/embeddings", json!({"model": "gpt-x", "input": "x"})).await.status, 200);
        let seen = mock.last_request().unwrap();
        assert_eq!((seen.path.as_str(), seen.query.as_deref()), ("/v1/embeddings", Some("tenant=t1")));
    }
}

both_modes! {
    async fn an_http_provider_is_reached_through_the_proxy_in_http_proxy(mode: Mode) {
        let mock = MockProvider::start();
        let proxy = Tinyproxy::start(&[]);
        let gateway = Gateway::start(
            &config(
                mode,
                &format!("  - {{display_name: up, provider: openai, api_key: sk-up, api_base: \"{}\"}}\n", mock.base_url()),
                "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n",
            )
            .env("HTTP_PROXY", &proxy.url()),
        );
        let reply = post(&gateway, "/v1/chat/completions", json!({"model": "gpt-x", "messages": []})).await;
        assert_eq!(reply.status, 200, "{}\n{}", reply.text(), proxy.log());
        let text = post(&gateway, "/v1/chat/completions", json!({"model": "gpt-x", "stream": true, "messages": []})).await.text();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        for seen in mock.requests() {
            assert!(seen.header("via").is_some_and(|v| v.contains("tinyproxy")), "{:?}", seen.headers);
            assert_eq!(seen.header("authorization"), Some("Bearer sk-up"));
        }
        let request_line = format!("POST {}/chat/completions", mock.base_url());
        assert_eq!(proxy.log().matches(&request_line).count(), 2, "absolute-form requests:\n{}", proxy.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_proxy_hosts_are_reached_directly() {
    let mock = MockProvider::start();
    let gateway = Gateway::start(
        &config(
            Mode::ThreadPerCore,
            &format!(
                "  - {{display_name: up, provider: openai, api_base: \"{}\"}}\n",
                mock.base_url()
            ),
            "  - {display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}\n",
        )
        // A proxy that is not there: only the NO_PROXY exception lets requests through.
        .env("http_proxy", "http://127.0.0.1:1")
        .env("no_proxy", "localhost,127.0.0.1"),
    );
    let reply = post(
        &gateway,
        "/v1/chat/completions",
        json!({"model": "gpt-x", "messages": []}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(mock.last_request().unwrap().header("via").is_none());
}
