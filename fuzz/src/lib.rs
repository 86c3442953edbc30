//! What the stream targets share: the upstream bytes split into events as the relay splits
//! them, fed in order, and the stream ended (the error event that ends a failed one is the
//! relay's, not the translator's).

use aisix_gateway::wire::anthropic::stream::{Step, Translator};
use aisix_gateway::wire::sse;
use bytes::BytesMut;

/// Feeds every complete event of `data` to `event` until it returns anything but
/// [`Step::Continue`]; returns that step.
pub fn feed(data: &[u8], mut event: impl FnMut(&[u8]) -> Step) -> Step {
    let mut rest = data;
    while let Some(len) = sse::event_end(rest) {
        let step = event(&rest[..len]);
        rest = &rest[len..];
        if step != Step::Continue {
            return step;
        }
    }
    Step::Continue
}

/// Runs `translator` over `data` and ends the stream.
pub fn translate(translator: &mut dyn Translator, data: &[u8]) {
    let mut out = BytesMut::new();
    if feed(data, |event| translator.event(event, &mut out)) == Step::Continue {
        translator.end(&mut out);
    }
    let _ = translator.usage();
}
