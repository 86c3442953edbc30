#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The official `openai` Python SDK against the real gateway: `e2e/python/test_openai_sdk.py`
//! run with the venv's interpreter, once on the built-in `mock` provider and once through the
//! HTTP and SSE relay to a scriptable OpenAI-like upstream, in both serving modes.

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, GatewayConfig};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::sdk::{self, CLIENT_KEY, CLIENT_KEY_ENV};

const BUILTIN_RESOURCES: &str = r#"_format_version: "1"
provider_keys:
  - display_name: local-mock
    provider: mock
models:
  - {display_name: chat-model, provider: mock, model_name: mock-chat, provider_key: local-mock}
  - {display_name: embed-model, provider: mock, model_name: mock-embed, provider_key: local-mock}
  - {display_name: hidden-model, provider: mock, model_name: mock-hidden, provider_key: local-mock}
api_keys:
  - display_name: sdk
    key_env: SDK_TEST_KEY
    allowed_models: ["chat-model", "embed-model"]
"#;

fn gateway_log(gateway: &Gateway) -> String {
    format!("--- gateway log ---\n{}", gateway.logs())
}

both_modes! {
    async fn openai_sdk_works_against_the_builtin_mock_provider(mode: Mode) {
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(BUILTIN_RESOURCES)
                .env(CLIENT_KEY_ENV, CLIENT_KEY),
        );
        // The SDK's default embedding request asks for base64, which the built-in mock serves.
        let env = sdk::env(&gateway, "chat-model", "embed-model", "hidden-model", "sdk");
        let (status, printed) = sdk::run_script(env).await;
        sdk::assert_passed(status, &printed, || gateway_log(&gateway));
    }
}

both_modes! {
    async fn openai_sdk_works_through_the_http_and_sse_relay(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(sdk::relay_resources(&mock.base_url()))
                .env(CLIENT_KEY_ENV, CLIENT_KEY),
        );
        // The scripted upstream answers embeddings as floats whatever `encoding_format` asks.
        let env = sdk::env(&gateway, "relay-chat", "relay-embed", "relay-hidden", "float");
        let (status, printed) = sdk::run_script(env).await;
        sdk::assert_passed(status, &printed, || gateway_log(&gateway));

        let relayed: Vec<sdk::Relayed> = mock.requests().iter().map(sdk::Relayed::from).collect();
        sdk::assert_relayed(&relayed);
    }
}
