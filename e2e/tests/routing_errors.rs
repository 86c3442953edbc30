//! `routing.fallback_on_errors`: a refusal whose kind the group lists falls over to the next
//! target, whatever the provider's dialect calls it (OpenAI's `context_length_exceeded`,
//! Anthropic's "prompt is too long"); one it does not list is the client's answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::gateway::Gateway;
use aisix_e2e::mock::{MockProvider, Reply as Mock};
use aisix_e2e::routing::{config, post};
use serde_json::json;

fn served_by(reply: &aisix_e2e::client::Reply) -> &str {
    reply.header("x-aisix-served-by").unwrap_or_default()
}

fn too_long_openai() -> Mock {
    Mock::status(400).json(json!({"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }}))
}

both_modes! {
    async fn a_context_window_refusal_falls_over_to_a_longer_model_in_either_dialect(mode: Mode) {
        let (short_an, short_oa, long) =
            (MockProvider::start_anthropic(), MockProvider::start(), MockProvider::start());
        let resources = format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: an, provider: anthropic, api_key: sk-an-secret, api_base: "{}"}}
  - {{display_name: oa, provider: openai, api_key: sk-oa-secret, api_base: "{}"}}
  - {{display_name: big, provider: openai, api_key: sk-big-secret, api_base: "{}"}}
models:
  - {{display_name: short-an, provider: anthropic, model_name: claude-short, provider_key: an}}
  - {{display_name: short-oa, provider: openai, model_name: gpt-short, provider_key: oa}}
  - {{display_name: long, provider: openai, model_name: gpt-long, provider_key: big}}
  - {{display_name: an-window, routing: {{targets: [{{model: short-an}}, {{model: long}}], fallback_on_errors: [context_length_exceeded]}}}}
  - {{display_name: oa-window, routing: {{targets: [{{model: short-oa}}, {{model: long}}], fallback_on_errors: [context_length_exceeded]}}}}
  - {{display_name: strict, routing: {{targets: [{{model: short-oa}}, {{model: long}}]}}}}
api_keys:
  - {{display_name: team, key_env: ROUTING_KEY, allowed_models: ["*"]}}
"#,
            short_an.origin(),
            short_oa.base_url(),
            long.base_url()
        );
        let gateway = Gateway::start(&config(mode, resources));
        let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "a very long prompt"}]});

        short_an.enqueue(Mock::anthropic_error(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"));
        let reply = post(&gateway, "/v1/chat/completions", "anthropic-too-long", &chat("an-window")).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "long"), "{}", reply.text());

        short_oa.enqueue(too_long_openai());
        let reply = post(&gateway, "/v1/chat/completions", "openai-too-long", &chat("oa-window")).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "long"), "{}", reply.text());
        assert_eq!(long.request_count(), 2);

        // An unlisted kind, and a group that lists none, answer with the refusal.
        short_oa.enqueue(Mock::status(400).json(json!({"error": {"message": "filtered", "type": null, "param": "prompt", "code": "content_filter"}})));
        let reply = post(&gateway, "/v1/chat/completions", "filtered", &chat("oa-window")).await;
        assert_eq!(reply.status, 400);
        short_oa.enqueue(too_long_openai());
        let reply = post(&gateway, "/v1/chat/completions", "strict", &chat("strict")).await;
        assert_eq!(reply.status, 400);
        assert_eq!(reply.json()["error"]["code"], "context_length_exceeded", "{}", reply.text());
        assert_eq!(long.request_count(), 2);
    }
}
