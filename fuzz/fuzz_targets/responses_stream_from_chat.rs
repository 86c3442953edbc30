//! A chat completions stream translated to Responses events, event by event, ended as the
//! relay ends it; and the native relay's reading of Responses events.
#![no_main]

use aisix_gateway::wire::responses::event;
use aisix_gateway::wire::responses::object::Echo;
use aisix_gateway::wire::responses::stream::{FromChat, Outcome};
use aisix_gateway::wire::sse;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let echo = Echo {
        id: "resp_fuzz".into(),
        created_at: 1_700_000_000,
        model: "m".into(),
        request: serde_json::Map::new(),
    };
    let mut from = FromChat::new(echo);
    let mut out = BytesMut::new();
    let mut rest = data;
    let mut ended = false;
    while let Some(len) = sse::event_end(rest) {
        let piece = &rest[..len];
        rest = &rest[len..];
        let fields = sse::fields(piece);
        if let Some(name) = event::event_type(&fields) {
            let _ = event::kind_of(name);
        }
        if let Some(data) = fields.data.as_deref() {
            let _ = event::identity(data);
            let _ = event::response_usage(data);
            let _ = event::reported(data);
        }
        if from.event(piece, &mut out) != Outcome::Continue {
            ended = true;
            break;
        }
    }
    if !ended && !from.finish(&mut out) {
        let _ = from.failed("server_error", "cut");
    }
    let _ = from.response();
});
