//! The per-event half of the adapters whose streams cross or carry Anthropic's dialect: an
//! Anthropic stream relayed unchanged to an Anthropic client (only its usage read), and the
//! translators of `wire::anthropic::stream` (Anthropic events to OpenAI chunks, OpenAI chunks
//! to Anthropic's event order) run inside the gateway's stream reader. A relayed event is kept
//! as it came (no copy); a translated one is replaced by what the translator wrote for it.
//!
//! Continuing a cut stream on another target (`continue_on_cut`) is OpenAI-to-OpenAI only:
//! these maps keep no text, so a cut here ends the stream with an error event.

use bytes::{Bytes, BytesMut};
use http::StatusCode;

use super::{Carried, Edit, Step};
use crate::error::ErrorKind;
use crate::wire::anthropic::stream::{self, ToAnthropic, ToOpenAi, Translator, UsageScan};
use crate::wire::chunk;
use crate::wire::usage::Usage;

/// One stream's events, relayed with a usage scan or translated.
#[derive(Debug)]
pub(crate) struct Translated {
    way: Way,
    /// The translator's output for the event at hand.
    out: BytesMut,
    usage: Option<Usage>,
    /// For a relay: the name (a JSON string literal) `message_start` is to give as `model`,
    /// until that event has passed.
    rename: Option<Bytes>,
}

#[derive(Debug)]
enum Way {
    /// Anthropic to an Anthropic client, unchanged.
    Relay(UsageScan),
    /// Anthropic to an OpenAI client.
    ToOpenAi(ToOpenAi),
    /// OpenAI to an Anthropic client.
    ToAnthropic(ToAnthropic),
}

impl Translated {
    /// An Anthropic stream for an Anthropic client; `rename` (a JSON string literal) is the
    /// model its `message_start` names (a group's direct model).
    pub(crate) fn relay(rename: Option<Bytes>) -> Self {
        let mut map = Self::new(Way::Relay(UsageScan::new()));
        map.rename = rename;
        map
    }

    /// An Anthropic stream for an OpenAI client; `include_usage` sends the usage-only chunk,
    /// `created` is the Unix time its chunks report, `rename` the model they name.
    pub(crate) fn to_openai(include_usage: bool, created: u64, rename: Option<&str>) -> Self {
        let translator = ToOpenAi::new(include_usage, created);
        Self::new(Way::ToOpenAi(match rename {
            Some(model) => translator.naming(model),
            None => translator,
        }))
    }

    /// An OpenAI stream for an Anthropic client; `rename` is the model its `message_start`
    /// names.
    pub(crate) fn to_anthropic(rename: Option<&str>) -> Self {
        let translator = ToAnthropic::new();
        Self::new(Way::ToAnthropic(match rename {
            Some(model) => translator.naming(model),
            None => translator,
        }))
    }

    fn new(way: Way) -> Self {
        Self {
            way,
            out: BytesMut::new(),
            usage: None,
            rename: None,
        }
    }

    /// A relayed `message_start` with the model renamed; the events after it pass as they are.
    fn renamed(&mut self, event: &[u8]) -> Option<Bytes> {
        let name = self.rename.as_ref()?;
        memchr::memmem::find(event, b"message_start")?;
        let renamed = chunk::with_model(event, name);
        self.rename = None;
        renamed.map(Bytes::from)
    }

    pub(super) fn event(&mut self, event: &[u8]) -> Step {
        let (step, translated) = match &mut self.way {
            Way::Relay(scan) => (scan.event(event), false),
            Way::ToOpenAi(t) => (t.event(event, &mut self.out), true),
            Way::ToAnthropic(t) => (t.event(event, &mut self.out), true),
        };
        let mut out = Step::default();
        if let Some(renamed) = self.renamed(event) {
            out.edit = Edit::Replace(renamed);
        }
        if translated {
            out.edit = if self.out.is_empty() {
                Edit::Drop
            } else {
                Edit::Replace(self.out.split().freeze())
            };
        }
        let usage = self.token_usage().map(|u| u.to_usage());
        if usage.is_some() && usage != self.usage {
            self.usage = usage;
            out.usage = usage;
        }
        match step {
            stream::Step::Continue => {}
            stream::Step::Complete => out.done = true,
            stream::Step::UpstreamError => {
                out.failure = Some(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY));
            }
            stream::Step::Malformed => out.failure = Some(ErrorKind::UpstreamMalformed),
        }
        out
    }

    fn token_usage(&self) -> Option<crate::wire::anthropic::types::TokenUsage> {
        match &self.way {
            Way::Relay(scan) => scan.usage(),
            Way::ToOpenAi(t) => t.usage(),
            Way::ToAnthropic(t) => t.usage(),
        }
    }

    pub(super) fn started(&self) -> bool {
        match &self.way {
            Way::Relay(scan) => scan.content_seen(),
            Way::ToOpenAi(t) => t.content_seen(),
            Way::ToAnthropic(t) => t.content_seen(),
        }
    }

    /// The upstream body ended: what completes the client's stream, if it is complete (a
    /// stream that gave its stop reason but lacked its final event is completed here).
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        let mut out = BytesMut::new();
        let complete = match &mut self.way {
            Way::Relay(scan) => scan.end(&mut out),
            Way::ToOpenAi(t) => t.end(&mut out),
            Way::ToAnthropic(t) => t.end(&mut out),
        };
        complete.then(|| out.freeze())
    }

    pub(super) fn carried(&self) -> Carried {
        Carried {
            usage: self.usage,
            pieces: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n";
    const BLOCK: &[u8] = b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    const TEXT: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    const STOP: &[u8] = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn a_relayed_stream_is_kept_and_its_usage_read() {
        let mut map = Translated::relay(None);
        let step = map.event(START);
        assert!(matches!(step.edit, Edit::Keep));
        assert_eq!(step.usage.map(|u| u.prompt_tokens), Some(3));
        assert!(!map.started());
        map.event(BLOCK);
        assert!(map.started());
        assert!(map.event(STOP).done);
    }

    #[test]
    fn a_translated_stream_replaces_each_event_and_fails_on_garbage() {
        let mut map = Translated::to_openai(false, 1, None);
        let Edit::Replace(first) = map.event(START).edit else {
            panic!("message_start was not translated")
        };
        assert!(first.starts_with(b"data: {"), "{first:?}");
        map.event(BLOCK);
        let Edit::Replace(text) = map.event(TEXT).edit else {
            panic!("the text was not translated")
        };
        assert!(
            std::str::from_utf8(&text).unwrap().contains("\"Hi\""),
            "{text:?}"
        );
        assert!(map.finish().is_none(), "a stream without its stop is cut");
        let broken = map.event(b"event: content_block_delta\ndata: {nope\n\n");
        assert!(broken.failure.is_some());
    }

    #[test]
    fn a_group_s_stream_names_the_direct_model_in_either_dialect() {
        let mut relay = Translated::relay(Some(Bytes::from_static(b"\"primary\"")));
        let Edit::Replace(start) = relay.event(START).edit else {
            panic!("message_start was not renamed")
        };
        assert_eq!(
            start,
            chunk::with_model(START, b"\"primary\"").unwrap(),
            "only the model changes"
        );
        assert!(matches!(relay.event(BLOCK).edit, Edit::Keep));

        let mut translated = Translated::to_openai(true, 1, Some("primary"));
        for event in [START, BLOCK, TEXT, STOP] {
            if let Edit::Replace(out) = translated.event(event).edit {
                let out = std::str::from_utf8(&out).unwrap();
                assert!(!out.contains("\"model\":\"c\""), "{out}");
                assert!(out.contains("\"model\":\"primary\""), "{out}");
            }
        }

        let mut back = Translated::to_anthropic(Some("primary"));
        let first = b"data: {\"id\":\"c\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
        let Edit::Replace(out) = back.event(first).edit else {
            panic!("the chunk was not translated")
        };
        let out = std::str::from_utf8(&out).unwrap();
        assert!(out.contains("\"model\":\"primary\""), "{out}");
    }
}
