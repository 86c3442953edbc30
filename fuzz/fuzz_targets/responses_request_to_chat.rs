//! A Responses API request translated to chat completions (with a stored conversation before
//! it, itself from the fuzzer's bytes when they parse as an array).
#![no_main]

use aisix_gateway::wire::responses::request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = request::to_chat(data, "gpt", &[], true);
    let history: Vec<serde_json::Value> = serde_json::from_slice(data).unwrap_or_default();
    let _ = request::to_chat(br#"{"model":"m","input":"x"}"#, "gpt", &history, false);
});
