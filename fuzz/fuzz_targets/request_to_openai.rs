//! An Anthropic Messages request (and a count_tokens request) translated for an OpenAI provider.
#![no_main]

use aisix_gateway::wire::anthropic::request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = request::to_openai(data, "gpt", request::OutputTokensField::MaxTokens);
    let _ = request::count_tokens_to_openai(
        data,
        "gpt",
        request::OutputTokensField::MaxCompletionTokens,
    );
});
