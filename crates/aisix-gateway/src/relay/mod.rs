//! The answer on its way to the client: one upstream stream read event by event into the
//! client's dialect (events), the streamed response body with its continuation (stream), the
//! whole-answer body (unary), and the one body type every route returns (body).

pub(crate) mod body;
pub(crate) mod stream;
pub(crate) mod unary;
