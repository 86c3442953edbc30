//! What the Bedrock golden files and properties share: a stream described as JSON lines made
//! event-stream bytes, and those bytes read as the relay reads them (split into messages,
//! each translated to Anthropic's events).
#![allow(dead_code, reason = "each test binary uses its own part")]

use aisix_gateway::wire::anthropic::stream::Step;
use aisix_gateway::wire::bedrock::frames::{self, FrameSplitter};
use aisix_gateway::wire::bedrock::stream::ToAnthropic;
use bytes::BytesMut;
use serde_json::Value;

pub const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// The event-stream bytes of a `.in.jsonl` stream description.
pub fn framed(input: &[u8]) -> Vec<u8> {
    frames::from_json_lines(input)
}

/// What a stream came to: the Anthropic events, the step that ended it, its usage.
pub struct Streamed {
    pub events: Vec<u8>,
    pub last: Step,
    pub usage: Option<Value>,
}

/// Feeds `pieces` through a [`FrameSplitter`] and a [`ToAnthropic`] as the relay does.
pub fn stream<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Streamed {
    let mut to_anthropic = ToAnthropic::new("msg_req-1", MODEL);
    let mut splitter = FrameSplitter::default();
    let (mut pending, mut events) = (Vec::new(), BytesMut::new());
    let mut last = Step::Continue;
    'read: for piece in pieces {
        let scanned = pending.len();
        pending.extend_from_slice(piece);
        let (mut start, mut at) = (0, scanned);
        while let Some(len) = splitter.next_end(&pending[at..]) {
            let end = at + len;
            last = to_anthropic.event(&pending[start..end], &mut events);
            start = end;
            at = end;
            if last != Step::Continue {
                break 'read;
            }
        }
        pending.drain(..start);
    }
    if last == Step::Continue && to_anthropic.finish(&mut events) {
        last = Step::Complete;
    }
    Streamed {
        events: events.to_vec(),
        last,
        usage: to_anthropic
            .usage()
            .map(|u| serde_json::to_value(u.to_usage()).unwrap()),
    }
}
