//! Dialects: the wire formats whose default answers a mock gives to requests nobody scripted.
//! Each dialect is a module that plans an [`Answer`] for a recorded request; today there is
//! [`openai`](super::openai). A dialect added later (Anthropic's) is one variant and one module.

use bytes::Bytes;
use http::StatusCode;

use super::openai;
use super::record::RecordedRequest;

/// A wire format the mock answers in by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI's API: chat and legacy completions, embeddings, the model list.
    #[default]
    OpenAi,
}

impl Dialect {
    /// The default answer to `request`; `seq` (the request's ordinal) makes response ids unique.
    pub(crate) fn answer(self, request: &RecordedRequest, seq: usize) -> Answer {
        match self {
            Dialect::OpenAi => openai::answer(request, seq),
        }
    }
}

/// A planned default answer: status, content type and body chunks. An SSE answer leaves out
/// its terminator (`data: [DONE]`); the reply's ending decides whether it is sent.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub chunks: Vec<Bytes>,
    pub sse: bool,
}
