//! OpenAI's Responses API at the byte level: its usage object and the events of its streams,
//! the `response.failed` the gateway writes when a stream breaks after it started, and the
//! translation of Responses requests, answers and streams to and from chat completions, for
//! targets that speak only chat.

pub mod answer;
pub mod event;
pub mod ids;
pub mod object;
pub mod request;
pub mod stream;
pub mod usage;

pub use event::{Ending, Identity, Kind, failed_event};
pub use usage::ResponsesUsage;
