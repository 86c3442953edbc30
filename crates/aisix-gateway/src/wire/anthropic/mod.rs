//! Anthropic's Messages API at the byte level: its types ([`types`]), request and answer bodies
//! translated to and from OpenAI chat completions ([`request`], [`response`]), streams
//! translated event by event or scanned for usage when relayed unchanged ([`stream`]), turns
//! Anthropic refuses hoisted for a relay ([`roles`]), tool ids mapped per request
//! ([`tool_ids`]), and error envelopes ([`error`]).
//! Pure functions and state machines: no I/O, no clocks.

pub mod error;
pub mod mapping;
pub mod request;
pub mod response;
pub mod roles;
pub mod stream;
pub mod tool_ids;
pub mod types;
