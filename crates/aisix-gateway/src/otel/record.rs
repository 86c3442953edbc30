//! The adapter between a request's record and its trace: the record's [`Facts`] when the
//! request ends (moved out of it by `Record::take_facts` as it drops, the one place that reads
//! its fields for a trace), kept in the trace, which goes whole to the worker's queue. The
//! request id and path are copied into the trace rather than moved, so what the worker allocated
//! for them is freed on the worker, not by the exporter on another thread.

use std::sync::Arc;
use std::time::Duration;

use aisix_config::Usd;
use aisix_obs::access_log::Attempt;
use aisix_obs::metrics::labels::Outcome;
use http::Method;

use super::{Trace, queue};

use crate::endpoint::Endpoint;

/// What a trace reads of a request's record when it ends: the record's own values, moved (it
/// is dropping), but for its id and path, copied ([`Id`], [`Path`]).
#[derive(Debug)]
pub(crate) struct Facts {
    pub request_id: Id,
    pub endpoint: Endpoint,
    pub method: Method,
    pub path: Path,
    pub key_name: Option<Arc<str>>,
    /// The direct model that answered (or was tried last).
    pub model: Option<Arc<str>>,
    pub group: Option<Arc<str>>,
    /// Its provider key's configured name.
    pub provider: Option<Arc<str>>,
    pub stream: bool,
    pub status: u16,
    pub ttft: Option<Duration>,
    pub usage: Option<(u64, u64)>,
    pub attempts: Attempts,
    pub outcome: Outcome,
    pub error: Option<&'static str>,
}

/// A request's attempts as its record ended with them: the only one in place (most requests
/// make one), so the list the record allocated is freed on the worker and not by the exporter
/// on another thread, which costs jemalloc more; two or more as the record's list.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    only: Option<Attempt>,
    all: Vec<Attempt>,
}

impl Attempts {
    pub(crate) fn of(mut list: Vec<Attempt>) -> Self {
        match list.len() {
            1 => Self {
                only: list.pop(),
                all: Vec::new(),
            },
            _ => Self {
                only: None,
                all: list,
            },
        }
    }

    /// Attempt `i` (from 0, in the order they were made).
    pub(crate) fn get(&self, i: usize) -> Option<&Attempt> {
        match &self.only {
            Some(only) => (i == 0).then_some(only),
            None => self.all.get(i),
        }
    }
}

/// A request id, in place: ids are at most 128 visible ASCII bytes (a client's longer one is
/// replaced by the gateway's own), so the trace holds it with no allocation of its own. Its bytes
/// are ASCII (any other byte is kept as `?`), so the exporter writes them as a string with no
/// check of its own.
#[derive(Clone, Copy)]
pub(crate) struct Id {
    len: u8,
    bytes: [u8; MAX_ID],
}

/// The longest request id ([`aisix_obs::request_id::MAX_CLIENT_ID_LEN`]).
const MAX_ID: usize = aisix_obs::request_id::MAX_CLIENT_ID_LEN;

impl Id {
    /// `id`, cut at 128 bytes (longer is never minted nor accepted).
    pub(crate) fn new(id: &[u8]) -> Self {
        let len = id.len().min(MAX_ID);
        let mut bytes = [0u8; MAX_ID];
        bytes[..len].copy_from_slice(&id[..len]);
        if !bytes[..len].is_ascii() {
            for byte in &mut bytes[..len] {
                if !byte.is_ascii() {
                    *byte = b'?';
                }
            }
        }
        Self {
            len: len as u8,
            bytes,
        }
    }

    /// The id's bytes: ASCII text.
    pub(crate) fn ascii(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The id as text.
    pub(crate) fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.ascii()).ok()
    }
}

impl std::fmt::Debug for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Id").field(&self.as_str()).finish()
    }
}

/// A request's path: one of the gateway's own, named without a copy, or another (a stored
/// response's, a model's) copied.
#[derive(Debug, Clone, Eq)]
pub(crate) enum Path {
    Known(&'static str),
    Other(Box<str>),
}

impl PartialEq for Path {
    /// Two of the gateway's own paths are the same one of its list, known by address with no
    /// read of the text.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Path::Known(a), Path::Known(b)) => std::ptr::eq(*a, *b) || a == b,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Path {
    pub(crate) fn of(path: &str) -> Self {
        const KNOWN: [&str; 10] = [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/responses",
            "/v1/embeddings",
            "/v1/completions",
            "/v1/messages/count_tokens",
            "/v1/models",
            "/",
            "/livez",
            "/readyz",
        ];
        match KNOWN.iter().find(|known| **known == path) {
            Some(known) => Path::Known(known),
            None => Path::Other(path.into()),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            Path::Known(path) => path,
            Path::Other(path) => path,
        }
    }
}

/// How a traced request ended.
#[derive(Debug)]
pub(super) struct Ended {
    pub facts: Facts,
    /// From its receipt to its end: its end is put on the wall clock by its start's reading
    /// and this, with no reading of its own.
    pub latency: Duration,
    pub spend: Option<Usd>,
}

/// The request `facts` tell of ended `latency` after it was received, spending `spend`: its
/// trace goes to this worker's queue (unless neither its spans nor its usage event are
/// exported).
pub(crate) fn finish(mut trace: Box<Trace>, facts: Facts, latency: Duration, spend: Option<Usd>) {
    if !trace.sampled && !trace.tracing.logs {
        return;
    }
    trace.ended = Some(Ended {
        facts,
        latency,
        spend,
    });
    queue::push(trace);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_kept_whole_up_to_128_bytes_and_reads_back_as_text() {
        let minted = "01JD2ZP8K3Q4R5S6T7V8W9X0YZ";
        assert_eq!(Id::new(minted.as_bytes()).as_str(), Some(minted));
        let longest = "x".repeat(128);
        assert_eq!(Id::new(longest.as_bytes()).as_str(), Some(longest.as_str()));
        assert_eq!(Id::new(b"").as_str(), Some(""));
        assert_eq!(
            Id::new("y".repeat(200).as_bytes()).as_str().map(str::len),
            Some(128)
        );
        assert_eq!(Id::new(minted.as_bytes()).ascii(), minted.as_bytes());
    }

    fn attempt(target: &str) -> Attempt {
        Attempt {
            target: target.into(),
            provider: "p".into(),
            status: Some(200),
            duration: Duration::from_millis(5),
            error: None,
            result: Outcome::Success,
            failure: None,
        }
    }

    #[test]
    fn a_record_s_only_attempt_is_kept_in_place_and_more_in_their_order() {
        let none = Attempts::of(Vec::new());
        assert!(none.get(0).is_none());
        let one = Attempts::of(vec![attempt("a")]);
        assert!(one.all.capacity() == 0, "the record's list is not kept");
        assert_eq!(one.get(0).map(|a| &*a.target), Some("a"));
        assert!(one.get(1).is_none());
        let three = Attempts::of(vec![attempt("a"), attempt("b"), attempt("c")]);
        let order: Vec<&str> = (0..4)
            .filter_map(|i| three.get(i))
            .map(|a| &*a.target)
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    fn an_id_s_bytes_are_ascii_whatever_it_was_given() {
        let id = Id::new("a\u{e9}b".as_bytes());
        assert_eq!(id.ascii(), b"a??b");
        assert_eq!(id.as_str(), Some("a??b"));
    }

    #[test]
    fn the_gateway_s_own_paths_are_named_without_a_copy_and_others_are_copied() {
        for known in [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/responses",
            "/readyz",
        ] {
            let path = Path::of(known);
            assert!(matches!(path, Path::Known(_)), "{known}");
            assert_eq!(path.as_str(), known);
        }
        let stored = Path::of("/v1/responses/resp_123");
        assert_eq!(stored, Path::Other("/v1/responses/resp_123".into()));
        assert_eq!(stored.as_str(), "/v1/responses/resp_123");
        assert_ne!(Path::of("/v1/responses"), stored);
    }
}
