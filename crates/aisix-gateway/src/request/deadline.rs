//! Every deadline a request meets, in one table (the README's deadline table mirrors it):
//!
//! | phase | measured | key | on expiry |
//! |---|---|---|---|
//! | request head | accept or last response → head read | `downstream.header_read_timeout_secs` | connection closed (bootstrap) |
//! | request body | head read → body read | `downstream.request_body_timeout_secs` | 408, HTTP/1.1 connection closed |
//! | connect | each new upstream connection | `upstream.connect_timeout_ms` / `connect_timeout` | 502 |
//! | first byte | request sent → response head (whole answers) or first event (streams) | `upstream.first_token_timeout_ms` / `first_token_timeout` | 504, or an error event |
//! | stream idle | between two reads of a stream | `upstream.stream_idle_timeout_ms` / `stream_idle_timeout` | error event |
//! | whole request | head read → last byte of the answer | `upstream.timeout_ms` / `timeout` | 504, or an error event |
//!
//! A request's upstream deadlines are resolved once, after routing: the model's own value, else
//! the bootstrap default. Cost: a few additions of durations to instants, no clock read beyond
//! the one the request path takes anyway, and no timer until a phase actually waits.

use std::time::Duration;

use aisix_config::{TimeoutOverrides, UpstreamTimeouts};
use tokio::time::Instant;

/// The bootstrap defaults, read by every request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Defaults {
    pub request_body: Duration,
    pub upstream: UpstreamTimeouts,
}

impl Defaults {
    /// When the body of a request whose head arrived at `received` must be in.
    pub(crate) fn body(&self, received: Instant) -> Instant {
        received + self.request_body
    }

    /// The upstream deadlines of a request whose head arrived at `received`, sent upstream at
    /// `sent`, for a model with `overrides`.
    pub(crate) fn upstream(
        &self,
        overrides: &TimeoutOverrides,
        received: Instant,
        sent: Instant,
    ) -> Deadlines {
        let timeouts = self.upstream.with(overrides);
        let end = received + timeouts.total;
        Deadlines {
            connect: timeouts.connect,
            first_byte: (sent + timeouts.first_token).min(end),
            stream_idle: timeouts.stream_idle,
            end,
        }
    }
}

/// One request's upstream deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadlines {
    /// The longest a new upstream connection may take to be ready.
    pub connect: Duration,
    /// The first byte of the answer is due by then (never after `end`).
    pub first_byte: Instant,
    /// The longest silence between two reads of a stream.
    pub stream_idle: Duration,
    /// The whole answer is due by then.
    pub end: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_byte_is_never_due_after_the_whole_request() {
        let defaults = Defaults {
            request_body: Duration::from_secs(30),
            upstream: UpstreamTimeouts {
                connect: Duration::from_millis(1),
                first_token: Duration::from_secs(60),
                stream_idle: Duration::from_secs(5),
                total: Duration::from_secs(10),
            },
        };
        let received = Instant::now();
        let sent = received + Duration::from_secs(2);
        let d = defaults.upstream(&TimeoutOverrides::default(), received, sent);
        assert_eq!(d.end, received + Duration::from_secs(10));
        assert_eq!(d.first_byte, d.end);
        let overrides = TimeoutOverrides {
            first_token: Some(Duration::from_secs(1)),
            ..TimeoutOverrides::default()
        };
        let d = defaults.upstream(&overrides, received, sent);
        assert_eq!(d.first_byte, sent + Duration::from_secs(1));
        assert_eq!(defaults.body(received), received + Duration::from_secs(30));
    }
}
