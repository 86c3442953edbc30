//! The per-event half of the adapters whose streams cross or carry Anthropic's dialect: an
//! Anthropic stream relayed unchanged to an Anthropic client (only its usage read), and the
//! translators of `wire::anthropic::stream` (Anthropic events to OpenAI chunks, OpenAI chunks
//! to Anthropic's event order) run inside the gateway's stream reader. A relayed event is kept
//! as it came (no copy); a translated one is replaced by what the translator wrote for it.
//!
//! For `continue_on_cut` they keep the text sent (and, for an Anthropic client, where its
//! blocks stand), and a continuation's events are spliced into the client's stream: for an
//! OpenAI client its role chunk is dropped, for an Anthropic client its events are rewritten by
//! [`Splice`]; its usage is added to the cut stream's.

use bytes::{Bytes, BytesMut};
use http::StatusCode;

use super::{Carried, Edit, Mapped};
use crate::error::ErrorKind;
use crate::wire::anthropic::stream::{
    self, Blocks, Splice, ToAnthropic, ToOpenAi, Translator, UsageScan, delta_text,
};
use crate::wire::usage::{self, Usage};
use crate::wire::{Dialect, chunk, sse};

/// One stream's events, relayed with a usage scan or translated.
#[derive(Debug)]
pub(crate) struct TranslatedStream {
    way: Way,
    /// The translator's output for the event at hand.
    out: BytesMut,
    /// The usage reported so far, with what a continued stream consumed added.
    usage: Option<Usage>,
    /// For a relay: the name (a JSON string literal) `message_start` is to give as `model`,
    /// until that event has passed.
    rename: Option<Bytes>,
    /// The text sent so far, kept when the stream may have to be continued.
    text: Option<String>,
    /// A tool call has begun since the text was kept.
    tool_call: bool,
    /// Content events read: the output of a stream cut before it reported its own.
    pieces: u64,
    /// Where an Anthropic client's stream stands, followed while the text is kept.
    blocks: Blocks,
    /// This stream continues another: what that one consumed.
    before: Option<Carried>,
    /// This stream continues another for an Anthropic client: its events rewritten to go on
    /// from the client's.
    splice: Option<Splice>,
}

#[derive(Debug)]
enum Way {
    /// Anthropic to an Anthropic client, unchanged.
    Passthrough(UsageScan),
    /// Anthropic to an OpenAI client.
    ToOpenAi(ToOpenAi),
    /// OpenAI to an Anthropic client.
    ToAnthropic(ToAnthropic),
}

impl TranslatedStream {
    /// An Anthropic stream for an Anthropic client; `rename` (a JSON string literal) is the
    /// model its `message_start` names (a group's direct model).
    pub(crate) fn passthrough(rename: Option<Bytes>) -> Self {
        let mut map = Self::new(Way::Passthrough(UsageScan::new()));
        map.rename = rename;
        map
    }

    /// An Anthropic stream for an OpenAI client; `include_usage` sends the usage-only chunk,
    /// `created` is the Unix time its chunks report, `rename` the model they name.
    /// `structured`: the request asked for structured output, which comes as a tool call.
    pub(crate) fn to_openai(
        include_usage: bool,
        created: u64,
        rename: Option<&str>,
        structured: bool,
    ) -> Self {
        let mut translator = ToOpenAi::new(include_usage, created);
        if structured {
            translator = translator.structured();
        }
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
            text: None,
            tool_call: false,
            pieces: 0,
            blocks: Blocks::default(),
            before: None,
            splice: None,
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

    pub(super) fn event(&mut self, event: &[u8]) -> Mapped {
        let (step, translated) = match &mut self.way {
            Way::Passthrough(scan) => (scan.event(event), false),
            Way::ToOpenAi(t) => (t.event(event, &mut self.out), true),
            Way::ToAnthropic(t) => (t.event(event, &mut self.out), true),
        };
        self.read_content(event);
        let mut out = Mapped::default();
        let usage = self.token_usage().map(|u| u.to_usage());
        let usage = match (usage, self.before) {
            (Some(usage), Some(before)) => Some(before.plus(usage)),
            (usage, _) => usage,
        };
        if usage.is_some() && usage != self.usage {
            self.usage = usage;
            out.usage = usage;
        }
        if let Some(renamed) = self.renamed(event) {
            out.edit = Edit::Replace(renamed);
        }
        if translated {
            out.edit = if self.out.is_empty() {
                Edit::Drop
            } else {
                let sent = self.out.split().freeze();
                let message_start =
                    self.before.is_some() && sse::fields(event).name == Some(b"message_start");
                Edit::Replace(self.spliced(sent, message_start))
            };
        } else if self.splice.is_some() {
            let sent = Bytes::copy_from_slice(event);
            out.edit = Edit::Replace(self.spliced(sent, false));
        } else if self.text.is_some() {
            self.blocks.observe(event);
        }
        if let Edit::Replace(sent) = &out.edit
            && sent.is_empty()
        {
            out.edit = Edit::Drop;
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

    /// Counts the content an upstream event carries and keeps its text, when asked to.
    fn read_content(&mut self, event: &[u8]) {
        if self.text.is_some() && super::carries_tool_call(event) {
            self.tool_call = true;
        }
        match self.way {
            Way::Passthrough(_) | Way::ToOpenAi(_) => {
                if sse::fields(event).name != Some(b"content_block_delta") {
                    return;
                }
                self.pieces = self.pieces.saturating_add(1);
                if let Some(text) = self.text.as_mut()
                    && let Some(more) = delta_text(event)
                {
                    text.push_str(&more);
                }
            }
            Way::ToAnthropic(_) => {
                if self.text.is_none() {
                    self.pieces = self.pieces.saturating_add(u64::from(self.started()));
                    return;
                }
                let Some(facts) = sse::data_payload(event).and_then(|data| chunk::read(data, true))
                else {
                    return;
                };
                self.pieces = self.pieces.saturating_add(u64::from(facts.content));
                if let (Some(text), Some(more)) = (self.text.as_mut(), facts.text) {
                    text.push_str(&more);
                }
            }
        }
    }

    /// What the client gets of `sent` (this stream's events in the client's dialect): as it is
    /// unless this stream continues another. Then an OpenAI client does not get its role chunk
    /// (what `message_start` became) and gets the summed usage; an Anthropic client gets the
    /// events spliced into its open stream. Otherwise, while the text is kept, an Anthropic
    /// client's blocks are followed.
    fn spliced(&mut self, sent: Bytes, message_start: bool) -> Bytes {
        if self.splice.is_some() {
            // An upstream that reports no usage is charged as the cut stream was.
            let usage = self.usage.or_else(|| self.carried().usage);
            let mut out = BytesMut::new();
            let mut rest = &sent[..];
            while let (Some(end), Some(splice)) = (sse::event_end(rest), self.splice.as_mut()) {
                splice.event(&rest[..end], usage, &mut out);
                rest = &rest[end..];
            }
            return out.freeze();
        }
        if self.before.is_some() && matches!(self.way, Way::ToOpenAi(_)) {
            if message_start {
                return Bytes::new();
            }
            if let Some(total) = self.usage
                && let Some(summed) = usage::with_usage(&sent, total)
            {
                return Bytes::from(summed);
            }
            return sent;
        }
        if self.text.is_some() && matches!(self.way, Way::ToAnthropic(_)) {
            let mut rest = &sent[..];
            while let Some(end) = sse::event_end(rest) {
                self.blocks.observe(&rest[..end]);
                rest = &rest[end..];
            }
        }
        sent
    }

    /// The usage the upstream reported, in Anthropic's terms (cache reads and writes apart).
    pub(crate) fn token_usage(&self) -> Option<crate::wire::anthropic::types::TokenUsage> {
        match &self.way {
            Way::Passthrough(scan) => scan.usage(),
            Way::ToOpenAi(t) => t.usage(),
            Way::ToAnthropic(t) => t.usage(),
        }
    }

    /// The dialect the client gets: OpenAI's only from an Anthropic stream translated for it.
    pub(super) fn dialect(&self) -> Dialect {
        match self.way {
            Way::ToOpenAi(_) => Dialect::OpenAi,
            Way::Passthrough(_) | Way::ToAnthropic(_) => Dialect::Anthropic,
        }
    }

    pub(super) fn started(&self) -> bool {
        match &self.way {
            Way::Passthrough(scan) => scan.content_seen(),
            Way::ToOpenAi(t) => t.content_seen(),
            Way::ToAnthropic(t) => t.content_seen(),
        }
    }

    /// The upstream body ended: what completes the client's stream, if it is complete (a
    /// stream that gave its stop reason but lacked its final event is completed here).
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        let mut out = BytesMut::new();
        let complete = match &mut self.way {
            Way::Passthrough(scan) => scan.end(&mut out),
            Way::ToOpenAi(t) => t.end(&mut out),
            Way::ToAnthropic(t) => t.end(&mut out),
        };
        complete.then(|| self.spliced(out.freeze(), false))
    }

    /// Keeps the text sent from here on, after `so_far`.
    pub(super) fn keep_text(&mut self, so_far: &str) {
        self.text = Some(so_far.to_owned());
    }

    pub(super) fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    pub(super) fn in_tool_call(&self) -> bool {
        self.tool_call
    }

    /// Content events read so far.
    pub(super) fn pieces(&self) -> u64 {
        self.pieces
    }

    /// Where an Anthropic client's stream stands.
    pub(super) fn blocks(&self) -> Blocks {
        self.splice.as_ref().map_or(self.blocks, Splice::blocks)
    }

    /// What this stream consumed so far (with what it continued, if anything). An Anthropic
    /// stream reports its output only at its end, so a cut one is charged its content events
    /// when they are more.
    pub(super) fn carried(&self) -> Carried {
        let own = self.token_usage().map(|u| match self.way {
            Way::ToAnthropic(_) => u.to_usage(),
            _ => u.to_usage().with_output_at_least(self.pieces),
        });
        let total = match (own, self.before) {
            (Some(own), Some(before)) => Some(before.plus(own)),
            (own, _) => own,
        };
        Carried::after(self.before, total, self.pieces)
    }

    /// This stream continues another, which left an Anthropic client's stream at `at`.
    pub(super) fn continuing(&mut self, before: Carried, at: Blocks) {
        self.before = Some(before);
        if !matches!(self.way, Way::ToOpenAi(_)) {
            self.splice = Some(Splice::new(at));
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
        let mut map = TranslatedStream::passthrough(None);
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
        let mut map = TranslatedStream::to_openai(false, 1, None, false);
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
        let mut relay = TranslatedStream::passthrough(Some(Bytes::from_static(b"\"primary\"")));
        let Edit::Replace(start) = relay.event(START).edit else {
            panic!("message_start was not renamed")
        };
        assert_eq!(
            start,
            chunk::with_model(START, b"\"primary\"").unwrap(),
            "only the model changes"
        );
        assert!(matches!(relay.event(BLOCK).edit, Edit::Keep));

        let mut translated = TranslatedStream::to_openai(true, 1, Some("primary"), false);
        for event in [START, BLOCK, TEXT, STOP] {
            if let Edit::Replace(out) = translated.event(event).edit {
                let out = std::str::from_utf8(&out).unwrap();
                assert!(!out.contains("\"model\":\"c\""), "{out}");
                assert!(out.contains("\"model\":\"primary\""), "{out}");
            }
        }

        let mut back = TranslatedStream::to_anthropic(Some("primary"));
        let first = b"data: {\"id\":\"c\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
        let Edit::Replace(out) = back.event(first).edit else {
            panic!("the chunk was not translated")
        };
        let out = std::str::from_utf8(&out).unwrap();
        assert!(out.contains("\"model\":\"primary\""), "{out}");
    }

    const DELTA: &[u8] = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n";

    fn sent(step: Mapped) -> String {
        match step.edit {
            Edit::Replace(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
            Edit::Drop => String::new(),
            Edit::Keep => panic!("a continuation's event went out unchanged"),
        }
    }

    fn chat(content: &str) -> Vec<u8> {
        format!("data: {{\"id\":\"c\",\"model\":\"up\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":null}}]}}\n\n").into_bytes()
    }

    #[test]
    fn a_relayed_anthropic_stream_continued_goes_on_in_the_client_s_open_block() {
        let mut cut = TranslatedStream::passthrough(None);
        cut.keep_text("");
        for event in [START, BLOCK, TEXT] {
            assert!(
                matches!(cut.event(event).edit, Edit::Keep),
                "relayed until the cut"
            );
        }
        assert_eq!(cut.text(), Some("Hi"));
        assert_eq!(
            cut.blocks(),
            Blocks {
                next: 1,
                open: Some((0, true))
            }
        );
        let carried = cut.carried();
        assert_eq!(
            carried
                .usage
                .map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((3, 1))
        );

        let mut next = TranslatedStream::passthrough(None);
        next.keep_text("Hi");
        next.continuing(carried, cut.blocks());
        assert_eq!(
            sent(next.event(START)),
            "",
            "one message_start per client stream"
        );
        assert_eq!(sent(next.event(BLOCK)), "", "the open block goes on");
        assert!(sent(next.event(TEXT)).contains("\"index\":0"));
        assert_eq!(next.text(), Some("HiHi"));
        let delta = sent(next.event(DELTA));
        assert!(delta.starts_with("event: content_block_stop\n"), "{delta}");
        assert!(
            delta.contains("\"input_tokens\":6") && delta.contains("\"output_tokens\":3"),
            "{delta}"
        );
        assert!(next.event(STOP).done);
    }

    #[test]
    fn an_openai_stream_continued_for_an_anthropic_client_sends_no_second_message_start() {
        let mut cut = TranslatedStream::to_anthropic(None);
        cut.keep_text("");
        let first = sent(cut.event(&chat("Hel")));
        assert!(first.starts_with("event: message_start"), "{first}");
        assert_eq!(cut.text(), Some("Hel"));
        assert_eq!(
            cut.blocks(),
            Blocks {
                next: 1,
                open: Some((0, true))
            }
        );

        let mut next = TranslatedStream::to_anthropic(None);
        next.continuing(cut.carried(), cut.blocks());
        let more = sent(next.event(&chat("lo")));
        assert!(more.starts_with("event: content_block_delta\n"), "{more}");
        assert!(
            more.contains("\"index\":0") && !more.contains("message_start"),
            "{more}"
        );
        let end = sent(next.event(b"data: [DONE]\n\n"));
        let kinds: Vec<&str> = end
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            kinds,
            ["content_block_stop", "message_delta", "message_stop"]
        );
    }

    #[test]
    fn an_anthropic_stream_continued_for_an_openai_client_drops_its_role_chunk() {
        let mut cut = TranslatedStream::to_openai(true, 1, None, false);
        cut.keep_text("");
        for event in [START, BLOCK, TEXT] {
            cut.event(event);
        }
        assert_eq!(cut.text(), Some("Hi"));

        let mut next = TranslatedStream::to_openai(true, 1, None, false);
        next.continuing(cut.carried(), cut.blocks());
        assert_eq!(
            sent(next.event(START)),
            "",
            "the client has had its role chunk"
        );
        next.event(BLOCK);
        assert!(sent(next.event(TEXT)).contains("\"content\":\"Hi\""));
        next.event(DELTA);
        let end = sent(next.event(STOP));
        assert!(
            end.contains("\"prompt_tokens\":6,\"completion_tokens\":3"),
            "{end}"
        );
        assert!(end.ends_with("data: [DONE]\n\n"));
    }
}
