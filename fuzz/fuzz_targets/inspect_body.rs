//! The request body inspector: any bytes, no panic; an accepted body names the model serde reads.
#![no_main]

use aisix_gateway::wire::openai;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(inspected) = openai::inspect(data) {
        let value: serde_json::Value =
            serde_json::from_slice(data).expect("an accepted body is JSON");
        assert_eq!(value["model"].as_str(), Some(inspected.model.as_str()));
    }
});
