//! Dialects: the wire formats whose default answers a mock gives to requests nobody scripted,
//! and whose marker ends a complete stream. Each dialect is a module that plans an [`Answer`]
//! for a recorded request: [`openai`] and [`anthropic`].

use bytes::Bytes;
use http::StatusCode;

use super::record::RecordedRequest;
use super::reply::Frame;
use super::{anthropic, openai};

/// A wire format the mock answers in by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI's API: chat and legacy completions, embeddings, the model list.
    #[default]
    OpenAi,
    /// Anthropic's Messages API: messages (JSON or SSE), count_tokens, the model list.
    Anthropic,
}

impl Dialect {
    /// The default answer to `request`; `seq` (the request's ordinal) makes response ids unique.
    pub(crate) fn answer(
        self,
        request: &RecordedRequest,
        seq: usize,
        kept: &super::responses::Kept,
    ) -> Answer {
        match self {
            Dialect::OpenAi => openai::answer(request, seq, kept),
            Dialect::Anthropic => anthropic::answer(request, seq),
        }
    }

    /// The last frame of a complete stream: `data: [DONE]`, or Anthropic's `message_stop`.
    pub fn terminator(self) -> Frame {
        match self {
            Dialect::OpenAi => Frame::done(),
            Dialect::Anthropic => anthropic::message_stop(),
        }
    }
}

/// A planned default answer: status, content type and body chunks. An SSE answer leaves out
/// its dialect's [terminator](Dialect::terminator); the reply's ending decides whether it is
/// sent.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub chunks: Vec<Bytes>,
    pub sse: bool,
    /// A stream is followed by its dialect's terminator (a Responses stream is not: its
    /// `response.completed` ends it).
    pub terminated: bool,
}
