//! Continuation proven on what a client rebuilds: the official `openai` SDK's stream
//! accumulator (`e2e/python/test_continuation_sdk.py`) gets one whole answer from a stream cut
//! and continued on a vLLM-style target, and an error naming the cut, never a corrupted tool
//! call, from a stream cut inside a tool call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::mock::{Frame, Reply as Mock};
use aisix_e2e::routing::{KEY, Rig};
use aisix_e2e::sdk;
use serde_json::json;

const UP: &str = "up-primary";

async fn accumulate(rig: &Rig, case: &str) {
    let env = vec![
        (
            "AISIX_SDK_BASE_URL",
            format!("http://{}/v1", rig.gateway.addr()),
        ),
        ("AISIX_SDK_API_KEY", KEY.to_owned()),
        ("AISIX_SDK_MODEL", "vllm".to_owned()),
        ("AISIX_SDK_CASE", case.to_owned()),
        ("AISIX_SDK_TEXT", "Hello, world!".to_owned()),
    ];
    let (status, printed) = sdk::run_python("test_continuation_sdk.py", env).await;
    sdk::assert_passed(status, &printed, || rig.gateway.logs());
}

both_modes! {
    async fn the_openai_sdk_rebuilds_a_continued_stream_and_is_told_of_a_tool_call_cut(mode: Mode) {
        let groups = "  - display_name: vllm\n    routing:\n      targets: [{model: primary}, {model: backup-vllm}]\n      continue_on_cut: true\n";
        let rig = Rig::start(mode, groups, &[]);
        rig.primary.enqueue(
            Mock::sse([Frame::chat_role(UP), Frame::chat_delta(UP, "Hello, "), Frame::chat_delta(UP, "wor")])
                .disconnect(),
        );
        rig.backup.enqueue(Mock::chat_stream("up-backup", &["ld", "!"], 11));
        accumulate(&rig, "continued").await;

        let call = |arguments: &str| {
            Frame::json(json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": UP,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments}}]}, "finish_reason": null}],
            }))
        };
        rig.primary.enqueue(Mock::sse([Frame::chat_role(UP), call(""), call("{\"city\": \"Par")]).disconnect());
        accumulate(&rig, "tool-cut").await;
        assert_eq!(rig.backup.request_count(), 1, "only the text was continued");
    }
}
