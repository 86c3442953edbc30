//! An upstream that reports absurd token counts (`u64::MAX`) cannot overflow the gateway's
//! sums: the debug build these tests run panics on an overflow, which would end the worker and
//! the process. Whole answers, streams, and a cut stream continued on another target (whose
//! usages are added) are each answered, accounted at the largest count, and the gateway serves
//! on, with limits and prices in play.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::mock::{Frame, Reply as Mock};
use aisix_e2e::routing::Rig;
use serde_json::{Value, json};

const MAX: u64 = u64::MAX;

/// A priced, token-limited direct model on the primary mock, and a group that continues a
/// stream the primary cuts on the backup's vLLM-style model (`continue_final_message`; the
/// rig's `primary` and `backup-vllm` have no limits).
const MODELS: &str = "  - {display_name: priced, provider: openai, model_name: up-primary, provider_key: p1, cost: {input_per_1k: 0.01, output_per_1k: 0.03}, rate_limit: {tpm: 1000000}}
  - display_name: chat
    routing:
      targets: [{model: primary}, {model: backup-vllm}]
      continue_on_cut: true
";

fn huge_usage() -> Value {
    json!({"prompt_tokens": MAX, "completion_tokens": MAX, "total_tokens": MAX})
}

fn huge_usage_chunk(model: &str) -> Frame {
    Frame::json(json!({
        "id": "chatcmpl-huge",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [],
        "usage": huge_usage(),
    }))
}

both_modes! {
    async fn huge_upstream_token_counts_saturate_and_the_gateway_serves_on(mode: Mode) {
        let rig = Rig::start(mode, MODELS, &[]);

        rig.primary.enqueue(Mock::openai().json(json!({
            "id": "chatcmpl-huge",
            "object": "chat.completion",
            "created": 1,
            "model": "up-primary",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": huge_usage(),
        })));
        let reply = rig.chat("priced", false, "huge-whole", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let line = rig.gateway.access_line("huge-whole");
        assert_eq!((line["input_tokens"].as_u64(), line["output_tokens"].as_u64()), (Some(MAX), Some(MAX)), "{line}");
        // Reconciled at the largest count, the answer used up the model's minute of tokens.
        let reply = rig.chat("priced", false, "spent", json!({})).await;
        assert_eq!(reply.status, 429, "{}", reply.text());

        rig.primary.enqueue(Mock::sse([
            Frame::chat_delta("up-primary", "hi"),
            Frame::chat_finish("up-primary", "stop"),
            huge_usage_chunk("up-primary"),
        ]));
        let stream = json!({"stream_options": {"include_usage": true}});
        let reply = rig.chat("primary", true, "huge-stream", stream.clone()).await;
        assert_eq!(reply.status, 200);
        assert!(reply.text().contains("data: [DONE]"), "{}", reply.text());

        // The cut stream's share (its two content events) and the continuation's huge usage
        // are added.
        rig.primary.enqueue(
            Mock::sse([
                Frame::chat_role("up-primary"),
                Frame::chat_delta("up-primary", "Hello, "),
                Frame::chat_delta("up-primary", "wor"),
            ])
            .disconnect(),
        );
        rig.backup.enqueue(Mock::sse([
            Frame::chat_delta("up-backup", "ld"),
            Frame::chat_finish("up-backup", "stop"),
            huge_usage_chunk("up-backup"),
        ]));
        let reply = rig.chat("chat", true, "huge-continued", stream).await;
        assert_eq!(reply.status, 200);
        assert!(reply.text().contains("data: [DONE]"), "{}", reply.text());
        let line = rig.gateway.access_line("huge-continued");
        assert_eq!(line["attempts"].as_array().map(Vec::len), Some(2), "{line}");
        assert_eq!((line["input_tokens"].as_u64(), line["output_tokens"].as_u64()), (Some(MAX), Some(MAX)), "{line}");

        let reply = rig.chat("primary", false, "after", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}
