//! An error an upstream reports mid-stream (OpenAI's `data: {"error": ...}` chunk, Anthropic's
//! `event: error`) reaches the client in its own dialect's error event with the upstream's
//! type, code and message, the message cut to 256 bytes and marked, for every pair of client
//! and upstream dialect; the provider's key, should the provider echo it, is masked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::gateway::{Gateway, Mode};
use aisix_e2e::mock::{Frame, MockProvider, Reply as Mock, anthropic};
use aisix_e2e::routing::{config, post};
use serde_json::{Value, json};

struct Rig {
    openai: MockProvider,
    anthropic: MockProvider,
    gateway: Gateway,
}

fn start(mode: Mode) -> Rig {
    let openai = MockProvider::start();
    let anthropic = MockProvider::start_anthropic();
    let resources = format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: oa, provider: openai, api_key: sk-oa-secret, api_base: "{}"}}
  - {{display_name: an, provider: anthropic, api_key: sk-an-secret, api_base: "{}"}}
models:
  - {{display_name: oa, provider: openai, model_name: up-oa, provider_key: oa}}
  - {{display_name: an, provider: anthropic, model_name: up-an, provider_key: an}}
api_keys:
  - {{display_name: team, key_env: ROUTING_KEY, allowed_models: ["*"]}}
"#,
        openai.base_url(),
        anthropic.origin()
    );
    let gateway = Gateway::start(&config(mode, resources));
    Rig {
        openai,
        anthropic,
        gateway,
    }
}

impl Rig {
    /// Scripts `upstream` (`oa` or `an`) to send "Hi" and then report `message` as an error.
    fn script(&self, upstream: &str, message: &str) {
        if upstream == "oa" {
            self.openai.enqueue(Mock::sse([
                Frame::chat_role("up-oa"),
                Frame::chat_delta("up-oa", "Hi"),
                Frame::json(json!({"error": {"message": message, "type": "server_error", "code": "overloaded"}})),
            ]));
        } else {
            let mut frames = vec![anthropic::message_start(
                "msg",
                "up-an",
                json!({"input_tokens": 2, "output_tokens": 1}),
            )];
            frames.extend(anthropic::text_block(0, &["Hi"]).into_iter().take(2));
            frames.push(anthropic::error_event("overloaded_error", message));
            self.anthropic.enqueue(Mock::sse(frames));
        }
    }

    /// The error event a streamed request to `model` from a client of `path` ends with.
    async fn last_error(&self, path: &str, model: &str) -> Value {
        let body = json!({
            "model": model,
            "stream": true,
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "hi"}],
        });
        let reply = post(&self.gateway, path, "stream-error", &body).await;
        let text = reply.text();
        let last = text.trim_end().rsplit("\n\n").next().unwrap().to_owned();
        assert!(last.starts_with("event: error\n"), "{text}");
        serde_json::from_str(last.lines().find_map(|l| l.strip_prefix("data: ")).unwrap()).unwrap()
    }
}

both_modes! {
    async fn an_upstream_s_mid_stream_error_reaches_the_client_in_its_own_words(mode: Mode) {
        let rig = start(mode);
        for upstream in ["oa", "an"] {
            // Anthropic's errors have only a type, which is their code too.
            let (kind, code) = if upstream == "oa" {
                ("server_error", "overloaded")
            } else {
                ("overloaded_error", "overloaded_error")
            };
            rig.script(upstream, "The engine is overloaded, try again");
            let openai = rig.last_error("/v1/chat/completions", upstream).await;
            assert_eq!(openai["error"]["message"], "The engine is overloaded, try again", "{upstream}: {openai}");
            assert_eq!(openai["error"]["type"], kind, "{upstream}: {openai}");
            assert_eq!(openai["error"]["code"], code, "{upstream}: {openai}");

            rig.script(upstream, "The engine is overloaded, try again");
            let anthropic = rig.last_error("/v1/messages", upstream).await;
            assert_eq!(anthropic["type"], "error");
            assert_eq!(anthropic["error"]["message"], "The engine is overloaded, try again", "{upstream}: {anthropic}");
            assert_eq!(anthropic["error"]["type"], kind, "{upstream}: {anthropic}");

            // A long message is cut to 256 bytes and marked as cut.
            rig.script(upstream, &"x".repeat(1000));
            let cut = rig.last_error("/v1/chat/completions", upstream).await;
            let message = cut["error"]["message"].as_str().unwrap();
            let kept = message.strip_suffix("… (cut)").unwrap_or_else(|| panic!("{upstream}: not marked: {message}"));
            assert!(kept.len() <= 256 && kept.bytes().all(|b| b == b'x'), "{upstream}: {message}");

            // The provider's key, echoed back by the provider, is masked as in whole answers.
            let secret = format!("sk-{upstream}-secret");
            for path in ["/v1/chat/completions", "/v1/messages"] {
                rig.script(upstream, &format!("Key {secret} is over its quota"));
                let event = rig.last_error(path, upstream).await;
                assert_eq!(event["error"]["message"], "Key *** is over its quota", "{upstream} {path}: {event}");
                assert!(!event.to_string().contains(&secret), "{upstream} {path}: {event}");
            }
        }
    }
}
