//! A scripted provider at the [`Call`] seam, for unit tests of the attempt loop and the relay:
//! each call to a direct model takes the next reply scripted for that model (a failure, a whole
//! answer, or an OpenAI stream over an in-memory HTTP/1.1 body) and is logged. No sockets.
//! Installed per test thread; a thread with no script calls the real adapters.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use super::openai::Passthrough;
use super::{Answer, Call, StreamMap};
use crate::error::GatewayError;
use crate::limit::memory_budget::Held;

/// What one call to a direct model gets.
pub(crate) enum Reply {
    Fail(GatewayError),
    /// A whole answer with this JSON body.
    Whole(&'static str),
    /// An OpenAI stream whose body is these chunks, then its end.
    Stream(Vec<String>),
    /// This reply, after the upstream took this long.
    After(Duration, Box<Reply>),
}

/// One call the loop made: the direct model and the request body it sent.
#[derive(Debug, Clone)]
pub(crate) struct Called {
    pub target: String,
    pub body: Bytes,
}

#[derive(Default)]
struct Script {
    replies: Vec<(String, VecDeque<Reply>)>,
    calls: Vec<Called>,
}

thread_local! {
    static SCRIPT: RefCell<Option<Script>> = const { RefCell::new(None) };
}

/// Scripts this thread's calls: each `(direct model, reply)` in order of its calls.
pub(crate) fn script(replies: impl IntoIterator<Item = (&'static str, Reply)>) {
    SCRIPT.with_borrow_mut(|script| {
        let script = script.get_or_insert_with(Script::default);
        for (target, reply) in replies {
            match script.replies.iter_mut().find(|(t, _)| t == target) {
                Some((_, queue)) => queue.push_back(reply),
                None => script
                    .replies
                    .push((target.to_owned(), VecDeque::from([reply]))),
            }
        }
    });
}

/// The calls made since the script was installed (and forgets them).
pub(crate) fn calls() -> Vec<Called> {
    SCRIPT.with_borrow_mut(|script| {
        script
            .as_mut()
            .map(|s| std::mem::take(&mut s.calls))
            .unwrap_or_default()
    })
}

/// The names of the direct models called since the last look, in order.
pub(crate) fn called() -> Vec<String> {
    calls().into_iter().map(|c| c.target).collect()
}

/// The scripted answer of `call`, when this thread has a script.
pub(super) async fn answer(call: &Call<'_>) -> Option<Result<Answer, GatewayError>> {
    let reply = SCRIPT.with_borrow_mut(|script| {
        let script = script.as_mut()?;
        let target = call.route.name.to_string();
        script.calls.push(Called {
            target: target.clone(),
            body: call.inbound.body.clone(),
        });
        let reply = script
            .replies
            .iter_mut()
            .find(|(t, _)| *t == target)
            .and_then(|(_, queue)| queue.pop_front());
        Some(reply.unwrap_or_else(|| panic!("no reply scripted for call to {target}")))
    })?;
    let mut reply = reply;
    while let Reply::After(wait, then) = reply {
        tokio::time::sleep(wait).await;
        reply = *then;
    }
    Some(match reply {
        Reply::After(..) => unreachable!("waited for above"),
        Reply::Fail(error) => Err(error),
        Reply::Whole(body) => Ok(Answer::Complete {
            status: StatusCode::OK,
            content_type: HeaderValue::from_static("application/json"),
            body: Bytes::from_static(body.as_bytes()),
            usage: None,
            model: None,
            held: Held::default(),
            waited: Duration::ZERO,
        }),
        Reply::Stream(chunks) => {
            let chunks: Vec<&[u8]> = chunks.iter().map(String::as_bytes).collect();
            let response =
                crate::testing::raw_response(crate::testing::chunked(&chunks), true).await;
            Ok(Answer::Stream {
                status: StatusCode::OK,
                body: response.into_body(),
                lease: None,
                map: StreamMap::OpenAi(Passthrough::new(true, None, 1)),
            })
        }
    })
}
