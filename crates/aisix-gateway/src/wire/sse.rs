//! Server-sent events, as OpenAI streams them: split a byte stream into complete events and
//! classify each (the `[DONE]` marker, a chunk carrying usage, the usage-only final chunk)
//! without building a JSON tree per chunk. Only a chunk whose `"usage"` is an object is parsed.
//!
//! Lines end in LF, CRLF or a lone CR, as the SSE specification allows, and an empty line ends
//! an event. The [`Splitter`] carries its line state from one piece of the stream to the next,
//! so every byte is looked at once however the stream is cut (linear time).
//!
//! Also the fields of an event (name and data) for the translators, and the OpenAI in-band
//! error event.

use std::borrow::Cow;

use memchr::memmem;
use serde::Deserialize;

use super::usage::Usage;

/// Finds the ends of events in a stream fed piece by piece.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Splitter {
    state: LineState,
    /// Lines of the event being scanned that have ended so far (2 stands for two or more).
    lines: u8,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum LineState {
    /// At the start of a line: a line ending here is an empty line, which ends the event.
    #[default]
    LineStart,
    /// At the start of a line that follows a CR: an LF here completes that CRLF.
    AfterCr,
    /// Inside a line.
    InLine,
}

impl Splitter {
    /// Whether the last event ended at a CR whose LF has not come yet: an LF next is still
    /// that event's.
    pub fn owes_lf(&self) -> bool {
        self.state == LineState::AfterCr
    }

    /// Scans `bytes`, the stream's next unscanned bytes, up to the end of the first event that
    /// ends in them: returns the offset just past it, or `None` when no event ends in `bytes`
    /// (all of which are then scanned).
    pub fn next_end(&mut self, bytes: &[u8]) -> Option<usize> {
        self.next_event(bytes).map(|(end, _)| end)
    }

    /// [`Splitter::next_end`], and whether the event that ends there is one line (and the
    /// empty line that ends it): what [`only_line`] then reads with no scan of its own.
    pub fn next_event(&mut self, bytes: &[u8]) -> Option<(usize, bool)> {
        let mut at = 0;
        while let Some(&byte) = bytes.get(at) {
            if self.state == LineState::InLine {
                let found = memchr::memchr2(b'\n', b'\r', bytes.get(at..)?)?;
                at = at.saturating_add(found);
                self.lines = self.lines.saturating_add(1).min(2);
                self.state = if bytes.get(at) == Some(&b'\r') {
                    LineState::AfterCr
                } else {
                    LineState::LineStart
                };
                at = at.saturating_add(1);
                continue;
            }
            at = at.saturating_add(1);
            match (self.state, byte) {
                (LineState::AfterCr, b'\n') => self.state = LineState::LineStart,
                (_, b'\n') => {
                    self.state = LineState::LineStart;
                    return Some((at, std::mem::take(&mut self.lines) == 1));
                }
                (_, b'\r') => {
                    // The LF of a CRLF belongs to this event when it is already here; when it
                    // is not, the state remembers to skip it.
                    if bytes.get(at) == Some(&b'\n') {
                        at = at.saturating_add(1);
                        self.state = LineState::LineStart;
                    } else {
                        self.state = LineState::AfterCr;
                    }
                    return Some((at, std::mem::take(&mut self.lines) == 1));
                }
                _ => self.state = LineState::InLine,
            }
        }
        None
    }
}

/// The one line of an event [`Splitter::next_event`] found to have one: the event without the
/// line endings around it (an LF that completed the event before's CRLF may lead it).
pub fn only_line(event: &[u8]) -> &[u8] {
    let ending = |b: &u8| matches!(b, b'\r' | b'\n');
    let start = event.iter().position(|b| !ending(b)).unwrap_or(event.len());
    let end = event
        .iter()
        .rposition(|b| !ending(b))
        .map_or(start, |i| i.saturating_add(1));
    event.get(start..end).unwrap_or_default()
}

/// End of the first complete event in `buf` (the index just past its empty line), scanning from
/// a fresh start.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    Splitter::default().next_end(buf)
}

/// What an event means to the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `data: [DONE]`.
    Done,
    /// A chunk carrying usage; `usage_only` when its `choices` is empty (the chunk OpenAI adds
    /// for `stream_options.include_usage`).
    Usage { usage: Usage, usage_only: bool },
    /// Anything else (content deltas, comments, errors), relayed untouched.
    Other,
}

#[derive(Deserialize)]
struct ChunkProbe {
    usage: Option<Usage>,
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
}

/// Classifies one complete event.
pub fn classify(event: &[u8]) -> Event {
    match data_payload(event) {
        Some(data) => classify_data(data),
        None => Event::Other,
    }
}

/// Classifies an event by its `data` payload.
pub fn classify_data(data: &[u8]) -> Event {
    if data.trim_ascii() == b"[DONE]" {
        return Event::Done;
    }
    if !has_usage_object(data) {
        return Event::Other;
    }
    match serde_json::from_slice::<ChunkProbe>(data) {
        Ok(ChunkProbe {
            usage: Some(usage),
            choices,
        }) => Event::Usage {
            usage,
            usage_only: choices.is_none_or(|c| c.is_empty()),
        },
        _ => Event::Other,
    }
}

/// The payload of the event's `data:` line. OpenAI sends one data line per event; an event
/// with several is not a chunk the gateway needs to read.
pub fn data_payload(event: &[u8]) -> Option<&[u8]> {
    error_or_data(event).1
}

/// Whether the event says `event: error`, as servers do to report a failure mid-stream.
pub fn is_error_event(event: &[u8]) -> bool {
    error_or_data(event).0
}

/// [`is_error_event`] and [`data_payload`] in one pass over the event's lines (a relayed
/// stream asks both of every event).
pub fn error_or_data(event: &[u8]) -> (bool, Option<&[u8]>) {
    let (mut error, mut payload, mut several) = (false, None, false);
    for line in lines(event) {
        let (is_error, data) = line_error_or_data(line);
        error |= is_error;
        if data.is_some() {
            several |= payload.is_some();
            payload = data;
        }
    }
    (error, payload.filter(|_| !several))
}

/// [`error_or_data`] of an event of one `line` ([`only_line`]).
pub fn line_error_or_data(line: &[u8]) -> (bool, Option<&[u8]>) {
    if let Some(rest) = line.strip_prefix(b"data:") {
        (false, Some(rest.strip_prefix(b" ").unwrap_or(rest)))
    } else if let Some(name) = line.strip_prefix(b"event:") {
        (name.trim_ascii() == b"error", None)
    } else {
        (false, None)
    }
}

/// What an upstream said of the error it reported mid-stream: OpenAI's `{"error": {...}}` chunk
/// or Anthropic's `event: error` (`{"type":"error","error":{...}}`) alike.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorReport {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// OpenAI's `code` (a string; a number is left out).
    #[serde(default, deserialize_with = "string_or_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// The error object of an error event or chunk, if it has one.
pub fn reported(event: &[u8]) -> Option<ErrorReport> {
    #[derive(Deserialize)]
    struct Envelope {
        error: ErrorReport,
    }
    let data = fields(event).data?;
    serde_json::from_slice::<Envelope>(&data)
        .ok()
        .map(|e| e.error)
}

fn string_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(value.as_str().map(str::to_owned))
}

/// The lines of an event, without their LF, CRLF or CR endings.
fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = event;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
            return Some(std::mem::take(&mut rest));
        };
        let (line, after) = rest.split_at_checked(end)?;
        let skip = if after.starts_with(b"\r\n") { 2 } else { 1 };
        rest = after.get(skip..).unwrap_or_default();
        Some(line)
    })
}

/// Whether `"usage"` appears followed by `:` and an object (not `null`).
fn has_usage_object(data: &[u8]) -> bool {
    // Built once: `memmem::find_iter` would build a searcher for every event of every stream.
    static FINDER: std::sync::LazyLock<memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memmem::Finder::new(b"\"usage\""));
    super::chunk::some_value_after_key(&FINDER, data, |value| value.first() == Some(&b'{'))
}

/// An SSE comment that keeps proxies from closing a quiet stream.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The fields of one event: its name (the last `event:` line) and its data (every `data:`
/// line, joined by newlines, as the SSE specification says). Comments and other fields are
/// skipped. Linear in the event's length; copies only an event with several data lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields<'a> {
    pub name: Option<&'a [u8]>,
    pub data: Option<Cow<'a, [u8]>>,
}

/// Reads the fields of one complete event.
pub fn fields(event: &[u8]) -> Fields<'_> {
    let mut fields = Fields::default();
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if matches!(line.first(), None | Some(b':')) {
            continue;
        }
        let (field, value) =
            match memchr::memchr(b':', line).and_then(|at| line.split_at_checked(at)) {
                Some((field, colon_value)) => {
                    let value = colon_value.strip_prefix(b":").unwrap_or(colon_value);
                    (field, value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
        match field {
            b"event" => fields.name = Some(value),
            b"data" => {
                fields.data = Some(match fields.data.take() {
                    None => Cow::Borrowed(value),
                    Some(joined) => {
                        let mut joined = joined.into_owned();
                        joined.push(b'\n');
                        joined.extend_from_slice(value);
                        Cow::Owned(joined)
                    }
                });
            }
            _ => {}
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_event_s_type_code_and_message_are_read_in_either_dialect() {
        let openai = reported(b"data: {\"error\":{\"message\":\"slow down\",\"type\":\"server_error\",\"code\":\"overloaded\"}}\n\n");
        assert_eq!(
            openai,
            Some(ErrorReport {
                kind: Some("server_error".into()),
                code: Some("overloaded".into()),
                message: Some("slow down".into()),
            })
        );
        let anthropic = reported(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n").unwrap();
        assert_eq!(
            (anthropic.kind.as_deref(), anthropic.code),
            (Some("overloaded_error"), None)
        );
        let numeric = reported(b"data: {\"error\":{\"code\":500}}\n\n").unwrap();
        assert_eq!(numeric.code, None);
        assert_eq!(reported(b"data: {\"choices\":[]}\n\n"), None);
    }

    /// Every event of `stream` fed in three pieces cut at `cuts`, as the relay scans them (the
    /// new bytes only, each event from its first byte), with what the splitter said of its
    /// lines.
    fn events_of(stream: &[u8], cuts: (usize, usize)) -> Vec<(Vec<u8>, bool)> {
        let mut splitter = Splitter::default();
        let (mut buf, mut start, mut found) = (Vec::new(), 0, Vec::new());
        for piece in [
            &stream[..cuts.0],
            &stream[cuts.0..cuts.1],
            &stream[cuts.1..],
        ] {
            let mut at = buf.len();
            buf.extend_from_slice(piece);
            while let Some((len, one_line)) = splitter.next_event(&buf[at..]) {
                found.push((buf[start..at + len].to_vec(), one_line));
                (start, at) = (at + len, at + len);
            }
        }
        found
    }

    #[test]
    fn an_event_the_splitter_calls_one_line_reads_as_its_lines_read_however_it_is_cut() {
        let events: [&[u8]; 11] = [
            b"data: {\"a\":1}\n\n",
            b"data:{}\r\n\r\n",
            b"data: x\r\r",
            b"event: error\n\n",
            b": ping\n\n",
            b"event: error\ndata: {}\n\n",
            b"data: a\ndata: b\n\n",
            b"id: 1\r\ndata: y\r\n\r\n",
            b"data: z\n\r\n",
            b"\n",
            b"data: [DONE]\r\r",
        ];
        let stream = events.concat();
        let (mut one_line, mut several) = (0, 0);
        for first in 0..=stream.len() {
            for second in first..=stream.len() {
                for (event, one) in events_of(&stream, (first, second)) {
                    let lines = lines(&event).filter(|line| !line.is_empty()).count();
                    assert_eq!(one, lines == 1, "{:?}", String::from_utf8_lossy(&event));
                    if one {
                        one_line += 1;
                        assert_eq!(
                            line_error_or_data(only_line(&event)),
                            error_or_data(&event),
                            "{:?}",
                            String::from_utf8_lossy(&event)
                        );
                    } else {
                        several += 1;
                    }
                }
            }
        }
        assert!(one_line > 0 && several > 0);
    }

    #[test]
    fn events_end_at_an_empty_line_in_every_newline_style() {
        assert_eq!(event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(event_end(b"data: a\r\n\r\nrest"), Some(11));
        assert_eq!(event_end(b"data: a\r\rrest"), Some(9));
        assert_eq!(event_end(b"data: a\r\n\nrest"), Some(10));
        assert_eq!(event_end(b"data: a\n\r\nrest"), Some(10));
        assert_eq!(event_end(b"data: a\n"), None);
        assert_eq!(event_end(b"data: a\r\n"), None);
        assert_eq!(event_end(b"data: a\ndata: b\n"), None);
        assert_eq!(event_end(b"data: a\rdata: b\r"), None);
        assert_eq!(event_end(b""), None);
    }

    /// Every event of `stream` fed in pieces cut at `cuts`, and the incomplete rest. An LF
    /// that completes the CRLF ending an event is moved back to that event: where it lands
    /// depends on whether it had arrived when the CR was scanned, which is all a cut changes.
    fn split_at(stream: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut splitter = Splitter::default();
        let mut events: Vec<Vec<u8>> = Vec::new();
        let mut event = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&stream.len())) {
            let mut piece = &stream[from..to];
            while let Some(end) = splitter.next_end(piece) {
                event.extend_from_slice(&piece[..end]);
                events.push(std::mem::take(&mut event));
                piece = &piece[end..];
            }
            event.extend_from_slice(piece);
            from = to;
        }
        events.push(event);
        for i in 1..events.len() {
            if events[i].first() == Some(&b'\n') && events[i - 1].last() == Some(&b'\r') {
                events[i].remove(0);
                events[i - 1].push(b'\n');
            }
        }
        let rest = events.pop().unwrap_or_default();
        (events, rest)
    }

    /// A small deterministic generator, so a failure names its seed.
    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    #[test]
    fn random_cuts_of_one_stream_give_the_same_events() {
        let endings: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
        for seed in 1..=300u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut stream = Vec::new();
            for i in 0..1 + rng.below(12) {
                for line in 0..1 + rng.below(3) {
                    stream
                        .extend_from_slice(format!("data: {{\"i\":{i},\"l\":{line}}}").as_bytes());
                    stream.extend_from_slice(endings[rng.below(3)]);
                }
                stream.extend_from_slice(endings[rng.below(3)]);
            }
            let whole = split_at(&stream, &[]);
            assert_eq!(
                [whole.0.concat(), whole.1.clone()].concat(),
                stream,
                "seed {seed}"
            );
            let mut cuts: Vec<usize> = (0..rng.below(8))
                .map(|_| rng.below(stream.len() + 1))
                .collect();
            cuts.sort_unstable();
            assert_eq!(
                split_at(&stream, &cuts),
                whole,
                "seed {seed}, cuts {cuts:?}"
            );
            let bytewise: Vec<usize> = (1..stream.len()).collect();
            assert_eq!(
                split_at(&stream, &bytewise),
                whole,
                "seed {seed}, byte by byte"
            );
        }
    }

    #[test]
    fn a_crlf_cut_between_its_cr_and_lf_is_one_line_ending() {
        // "a\r" | "\n\n": the LF completes the CRLF, the next LF is the empty line.
        assert_eq!(
            split_at(b"data: a\r\n\n", &[8]).0,
            [b"data: a\r\n\n".to_vec()]
        );
        // An event ended by an empty CRLF line cut between its CR and LF: the event ends at
        // the CR, and the LF is skipped as the end of that line, not taken for an empty one.
        let mut splitter = Splitter::default();
        assert_eq!(splitter.next_end(b"data: a\r\r"), Some(9));
        assert_eq!(splitter.next_end(b"\ndata: b\n\n"), Some(10));
    }

    #[test]
    fn classify_reads_cr_and_crlf_events() {
        assert_eq!(classify(b"data: [DONE]\r\r"), Event::Done);
        assert_eq!(classify(b"\ndata: [DONE]\n\n"), Event::Done);
        let usage = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\r\r";
        assert!(matches!(
            classify(usage),
            Event::Usage {
                usage_only: true,
                ..
            }
        ));
    }

    #[test]
    fn done_marker_is_recognised() {
        assert_eq!(classify(b"data: [DONE]\n\n"), Event::Done);
        assert_eq!(classify(b"data:[DONE]\r\n\r\n"), Event::Done);
    }

    #[test]
    fn content_chunks_with_null_usage_are_not_parsed_as_usage() {
        let chunk = br#"data: {"choices":[{"delta":{"content":"usage"}}],"usage":null}

"#;
        assert_eq!(classify(chunk), Event::Other);
    }

    #[test]
    fn usage_only_chunk_is_recognised() {
        let chunk = br#"data: {"id":"c","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}

"#;
        assert_eq!(
            classify(chunk),
            Event::Usage {
                usage: Usage {
                    prompt_tokens: 2,
                    completion_tokens: 3,
                    total_tokens: 5
                },
                usage_only: true
            }
        );
    }

    #[test]
    fn usage_on_a_content_chunk_is_kept_as_content() {
        let chunk = br#"data: {"choices":[{"delta":{}}],"usage" : {"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}

"#;
        assert!(matches!(
            classify(chunk),
            Event::Usage {
                usage_only: false,
                ..
            }
        ));
    }

    #[test]
    fn error_events_are_recognised_by_their_type() {
        assert!(is_error_event(b"event: error\ndata: {}\n\n"));
        assert!(is_error_event(b"id: 1\r\nevent:error\r\n\r\n"));
        assert!(!is_error_event(b"data: {\"event\": \"error\"}\n\n"));
    }

    #[test]
    fn one_pass_tells_an_error_event_and_the_one_data_line() {
        assert_eq!(
            error_or_data(b"event: error\ndata: {}\n\n"),
            (true, Some(&b"{}"[..]))
        );
        assert_eq!(
            error_or_data(b"data:{\"a\":1}\r\n\r\n"),
            (false, Some(&b"{\"a\":1}"[..]))
        );
        // Several data lines: not a chunk, though the name is still read after them.
        assert_eq!(
            error_or_data(b"data: a\ndata: b\nevent: error\n\n"),
            (true, None)
        );
        assert_eq!(error_or_data(b": keep-alive\n\n"), (false, None));
    }

    #[test]
    fn fields_are_read_in_either_newline_style_with_data_lines_joined() {
        let plain = fields(b"event: message_start\ndata: {\"a\":1}\n\n");
        assert_eq!(plain.name, Some(&b"message_start"[..]));
        assert_eq!(plain.data.as_deref(), Some(&b"{\"a\":1}"[..]));
        let crlf = fields(b": c\r\nevent:ping\r\ndata: a\r\ndata:b\r\nid: 3\r\n\r\n");
        assert_eq!(crlf.name, Some(&b"ping"[..]));
        assert_eq!(crlf.data.as_deref(), Some(&b"a\nb"[..]));
        assert_eq!(fields(b": only a comment\n\n"), Fields::default());
    }

    #[test]
    fn comments_and_other_events_pass() {
        assert_eq!(classify(b": ping\n\n"), Event::Other);
        assert_eq!(
            classify(b"event: error\ndata: {\"error\":{}}\n\n"),
            Event::Other
        );
    }
}
