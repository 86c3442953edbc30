//! What the load generator needs of HTTP/1.1 responses: the head (parsed by `httparse`), a
//! chunked-body decoder and an SSE event splitter. Pure functions over byte slices; the I/O
//! lives in `loadgen`.

use std::fmt;

use memchr::memmem;

/// How the body after a response head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    /// No length and not chunked: the body runs until the server closes the connection.
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// Bytes of the head, the blank line included.
    pub len: usize,
    pub framing: Framing,
    /// The server will close the connection after this response.
    pub close: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub &'static str);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ParseError {}

const MAX_HEAD: usize = 64 * 1024;
const MAX_CHUNK_LINE: usize = 1024;

/// Headers a response head may carry; more is an error.
const MAX_HEADERS: usize = 64;

/// Parses a response head at the start of `buf` (`httparse`); `None` while it is incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, ParseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(ParseError("response head too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError("too many headers")),
        Err(httparse::Error::Status) => return Err(ParseError("malformed status code")),
        Err(_) => return Err(ParseError("malformed response head")),
    };
    let status = response.code.ok_or(ParseError("malformed status code"))?;
    let mut close = response.version == Some(0);
    let mut length = None;
    let mut chunked = false;
    for header in response.headers.iter() {
        let value = header.value.trim_ascii();
        if header.name.eq_ignore_ascii_case("content-length") {
            length = Some(parse_decimal(value).ok_or(ParseError("malformed content-length"))?);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().ends_with(b"chunked");
        } else if header.name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                close = false;
            }
        }
    }
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(length) = length {
        Framing::Length(length)
    } else if status / 100 == 1 || status == 204 || status == 304 {
        Framing::Length(0)
    } else {
        Framing::UntilClose
    };
    Ok(Some(Head {
        status,
        len,
        framing,
        close,
    }))
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')))
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(usize),
    DataEnd,
    Trailer,
    Done,
}

/// Decodes a `Transfer-Encoding: chunked` body fed in arbitrary pieces.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes what it can of `input`, handing body bytes to `sink`, and returns how many bytes
    /// of `input` it consumed; the rest must be offered again with more bytes behind it. Stops
    /// after the last chunk's trailer, leaving any following bytes unconsumed.
    pub fn decode(
        &mut self,
        input: &[u8],
        mut sink: impl FnMut(&[u8]),
    ) -> Result<usize, ParseError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ChunkState::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        pos += used;
                        self.state = match usize::try_from(size) {
                            Ok(0) => ChunkState::Trailer,
                            Ok(size) => ChunkState::Data(size),
                            Err(_) => return Err(ParseError("chunk too large")),
                        };
                    }
                    Ok(httparse::Status::Partial) if rest.len() > MAX_CHUNK_LINE => {
                        return Err(ParseError("chunk size line too long"));
                    }
                    Ok(httparse::Status::Partial) => return Ok(pos),
                    Err(_) => return Err(ParseError("malformed chunk size")),
                },
                ChunkState::Trailer => {
                    let Some(nl) = memchr::memchr(b'\n', rest) else {
                        if rest.len() > MAX_CHUNK_LINE {
                            return Err(ParseError("trailer line too long"));
                        }
                        return Ok(pos);
                    };
                    pos += nl + 1;
                    if trim_cr(&rest[..nl]).is_empty() {
                        self.state = ChunkState::Done;
                    }
                }
                ChunkState::Data(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let n = left.min(rest.len());
                    sink(&rest[..n]);
                    pos += n;
                    self.state = if n == left {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - n)
                    };
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ParseError("chunk data not followed by CRLF"));
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Done => return Ok(pos),
            }
        }
    }
}

/// What one server-sent event was, as far as the load generator cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseEvent {
    /// A frame carrying the mock's content marker.
    Content,
    /// `data: [DONE]`.
    Done,
    /// Anything else: a usage-only chunk, a finish chunk, a keep-alive comment.
    Other,
}

/// Splits a decoded SSE body into events (each ended by a blank line) fed in arbitrary pieces.
#[derive(Debug, Default)]
pub struct SseSplitter {
    pending: Vec<u8>,
}

impl SseSplitter {
    pub fn reset(&mut self) {
        self.pending.clear();
    }

    /// Feeds body bytes and reports each completed event; `marker` identifies content frames.
    pub fn feed(&mut self, bytes: &[u8], marker: &[u8], mut on_event: impl FnMut(SseEvent)) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        let mut i = 0;
        while let Some(nl) = memchr::memchr(b'\n', &self.pending[i..]) {
            let at = i + nl;
            // A blank line: "\n\n" or "\n\r\n".
            let blank_end = match self.pending.get(at + 1) {
                Some(b'\n') => Some(at + 2),
                Some(b'\r') if self.pending.get(at + 2) == Some(&b'\n') => Some(at + 3),
                Some(_) => None,
                None => break,
            };
            match blank_end {
                Some(end) => {
                    let event = &self.pending[start..at];
                    on_event(classify(event, marker));
                    start = end;
                    i = end;
                }
                None => i = at + 1,
            }
        }
        self.pending.drain(..start);
    }
}

fn classify(event: &[u8], marker: &[u8]) -> SseEvent {
    if memmem::find(event, b"[DONE]").is_some() {
        SseEvent::Done
    } else if memmem::find(event, marker).is_some() {
        SseEvent::Content
    } else {
        SseEvent::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_is_none_until_the_blank_line_arrives() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n";
        assert_eq!(parse_head(head), Ok(None));
    }

    #[test]
    fn content_length_head_gives_status_length_and_keep_alive() {
        let buf = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
        let head = parse_head(buf).unwrap().unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.framing, Framing::Length(11));
        assert!(!head.close);
        assert_eq!(&buf[head.len..], b"{\"ok\":true}");
    }

    #[test]
    fn chunked_and_connection_close_are_recognised_case_insensitively() {
        let buf =
            b"HTTP/1.1 502 Bad Gateway\r\nTRANSFER-ENCODING: Chunked\r\nConnection: Close\r\n\r\n";
        let head = parse_head(buf).unwrap().unwrap();
        assert_eq!(head.status, 502);
        assert_eq!(head.framing, Framing::Chunked);
        assert!(head.close);
    }

    #[test]
    fn http10_without_length_reads_until_close() {
        let head = parse_head(b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, Framing::UntilClose);
        assert!(head.close);
    }

    #[test]
    fn garbage_status_line_is_an_error() {
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 2x0 OK\r\n\r\n").is_err());
    }

    fn decode_in_pieces(wire: &[u8], piece: usize) -> (Vec<u8>, usize) {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        let mut buffered = Vec::new();
        let mut fed = 0;
        while !decoder.is_done() {
            let next = (fed + piece).min(wire.len());
            buffered.extend_from_slice(&wire[fed..next]);
            fed = next;
            let used = decoder
                .decode(&buffered, |d| body.extend_from_slice(d))
                .unwrap();
            buffered.drain(..used);
            assert!(fed < wire.len() || decoder.is_done(), "ran out of input");
        }
        (body, buffered.len() + (wire.len() - fed))
    }

    #[test]
    fn chunked_body_decodes_the_same_whatever_the_read_boundaries() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\nHTTP/1.1 next";
        for piece in [1, 2, 3, 7, wire.len()] {
            let (body, left) = decode_in_pieces(wire, piece);
            assert_eq!(body, b"hello, world", "piece size {piece}");
            assert_eq!(left, b"HTTP/1.1 next".len(), "piece size {piece}");
        }
    }

    #[test]
    fn chunked_trailers_are_skipped() {
        let (body, left) = decode_in_pieces(b"3\r\nabc\r\n0\r\nx-trailer: 1\r\n\r\n", 4);
        assert_eq!(body, b"abc");
        assert_eq!(left, 0);
    }

    #[test]
    fn malformed_chunk_size_is_an_error() {
        let mut decoder = ChunkedDecoder::default();
        assert!(decoder.decode(b"zz\r\n", |_| {}).is_err());
    }

    #[test]
    fn sse_events_are_split_across_pieces_and_classified() {
        let body = b"data: {\"c\":\"tok\"}\n\n: keep-alive\r\n\r\ndata: {\"c\":\"tok\"}\n\ndata: {\"usage\":{}}\n\ndata: [DONE]\n\n";
        for piece in [1, 5, body.len()] {
            let mut splitter = SseSplitter::default();
            let mut events = Vec::new();
            for part in body.chunks(piece) {
                splitter.feed(part, b"tok", |e| events.push(e));
            }
            assert_eq!(
                events,
                [
                    SseEvent::Content,
                    SseEvent::Other,
                    SseEvent::Content,
                    SseEvent::Other,
                    SseEvent::Done
                ],
                "piece size {piece}"
            );
        }
    }
}
