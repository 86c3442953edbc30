//! What the translation tests share: a stand-in for the relay that splits upstream bytes into
//! complete SSE events as they arrive, feeds a translator, and ends the stream the way the
//! relay does (completed, or failed with an in-band error).

#![allow(dead_code)]

use aisix_gateway::wire::anthropic::stream::{Fault, Step, Translator, UsageScan};
use aisix_gateway::wire::anthropic::types::TokenUsage;
use aisix_gateway::wire::sse;
use bytes::BytesMut;

/// The message of the error event a cut stream ends with.
pub const CUT_MESSAGE: &str = "The upstream stream ended before it was complete.";
pub const MALFORMED_MESSAGE: &str = "The upstream stream could not be translated.";

/// What a translated stream came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    pub out: Vec<u8>,
    pub complete: bool,
    pub usage: Option<TokenUsage>,
}

/// Splits `chunks` into complete events as they arrive and hands each to `event` until it
/// returns anything but [`Step::Continue`]; returns that last step.
fn feed<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    mut event: impl FnMut(&[u8]) -> Step,
) -> Step {
    let mut pending: Vec<u8> = Vec::new();
    for chunk in chunks {
        pending.extend_from_slice(chunk);
        let mut at = 0;
        while let Some(len) = sse::event_end(&pending[at..]) {
            let step = event(&pending[at..at + len]);
            at += len;
            if step != Step::Continue {
                return step;
            }
        }
        pending.drain(..at);
    }
    Step::Continue
}

/// Feeds `chunks` (the upstream body, however it was split) through `translator`.
pub fn translate<'a>(
    translator: &mut dyn Translator,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Streamed {
    let mut out = BytesMut::new();
    let complete = match feed(chunks, |event| translator.event(event, &mut out)) {
        Step::Continue => {
            let complete = translator.end(&mut out);
            if !complete {
                translator.fail(Fault::Cut, CUT_MESSAGE, &mut out);
            }
            complete
        }
        Step::Malformed => {
            translator.fail(Fault::Malformed, MALFORMED_MESSAGE, &mut out);
            false
        }
        step => step == Step::Complete,
    };
    Streamed {
        out: out.to_vec(),
        complete,
        usage: translator.usage(),
    }
}

/// Feeds `chunks` through the passthrough scan; `out` is the relayed events plus what the
/// scan added at the end.
pub fn scan<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Streamed {
    let mut scan = UsageScan::new();
    let mut out = BytesMut::new();
    let step = feed(chunks, |event| {
        out.extend_from_slice(event);
        scan.event(event)
    });
    let complete = match step {
        Step::Continue => {
            let complete = scan.end(&mut out);
            if !complete {
                scan.fail(Fault::Cut, CUT_MESSAGE, &mut out);
            }
            complete
        }
        step => step == Step::Complete,
    };
    Streamed {
        out: out.to_vec(),
        complete,
        usage: scan.usage(),
    }
}
