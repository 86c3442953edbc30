//! A whole chat completion translated to a Responses answer.
#![no_main]

use aisix_gateway::wire::responses::answer;
use aisix_gateway::wire::responses::object::Echo;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let echo = Echo {
        id: "resp_fuzz".into(),
        created_at: 1_700_000_000,
        model: "m".into(),
        request: serde_json::Map::new(),
    };
    let _ = answer::from_chat(data, &echo);
});
