//! The answer on its way to the client: the streamed response body with its continuation
//! (stream), the whole-answer body (unary), and the one body type every route returns (body).
//! Above the attempt loop, which a continuation asks for the next target.

pub(crate) mod body;
/// The golden files and properties of the translations, certified on the path clients get.
#[cfg(test)]
mod golden;
pub(crate) mod stream;
pub(crate) mod unary;
