//! The upstream deadlines of a request, one per phase. `upstream.<phase>_ms` in the bootstrap
//! config sets the defaults; a model's entry-level keys of the same names (without `_ms`)
//! override them one to one. The gateway resolves them once per request.

use std::time::Duration;

/// The deadline of each upstream phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    /// `connect_timeout`: TCP connect, the proxy's CONNECT and the TLS handshake of a new
    /// upstream connection.
    pub connect: Duration,
    /// `first_token_timeout`: from sending the request until the first byte of the answer (the
    /// response head of a whole answer; the first event of a stream).
    pub first_token: Duration,
    /// `stream_idle_timeout`: the longest silence between two reads of a stream.
    pub stream_idle: Duration,
    /// `timeout`: the whole request, from its head's arrival to the last byte of the answer.
    pub total: Duration,
}

/// A model's own deadlines; `None` keeps the bootstrap default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutOverrides {
    pub connect: Option<Duration>,
    pub first_token: Option<Duration>,
    pub stream_idle: Option<Duration>,
    pub total: Option<Duration>,
}

impl TimeoutOverrides {
    /// These overrides, with `under`'s for the phases these leave unset (a group's own
    /// deadlines over those of the direct model answering it).
    pub fn over(self, under: &TimeoutOverrides) -> Self {
        Self {
            connect: self.connect.or(under.connect),
            first_token: self.first_token.or(under.first_token),
            stream_idle: self.stream_idle.or(under.stream_idle),
            total: self.total.or(under.total),
        }
    }
}

impl UpstreamTimeouts {
    /// These defaults with `overrides` applied.
    pub fn with(self, overrides: &TimeoutOverrides) -> Self {
        Self {
            connect: overrides.connect.unwrap_or(self.connect),
            first_token: overrides.first_token.unwrap_or(self.first_token),
            stream_idle: overrides.stream_idle.unwrap_or(self.stream_idle),
            total: overrides.total.unwrap_or(self.total),
        }
    }
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_millis(5_000),
            first_token: Duration::from_millis(300_000),
            stream_idle: Duration::from_millis(120_000),
            total: Duration::from_millis(600_000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_override_replaces_only_its_own_phase() {
        let defaults = UpstreamTimeouts::default();
        let overrides = TimeoutOverrides {
            first_token: Some(Duration::from_millis(10)),
            total: Some(Duration::from_millis(20)),
            ..TimeoutOverrides::default()
        };
        let resolved = defaults.with(&overrides);
        assert_eq!(resolved.connect, defaults.connect);
        assert_eq!(resolved.first_token, Duration::from_millis(10));
        assert_eq!(resolved.stream_idle, defaults.stream_idle);
        assert_eq!(resolved.total, Duration::from_millis(20));
        assert_eq!(defaults.with(&TimeoutOverrides::default()), defaults);
    }

    #[test]
    fn a_groups_overrides_win_over_its_targets_phase_by_phase() {
        let group = TimeoutOverrides {
            first_token: Some(Duration::from_millis(1)),
            ..TimeoutOverrides::default()
        };
        let target = TimeoutOverrides {
            first_token: Some(Duration::from_millis(2)),
            total: Some(Duration::from_millis(3)),
            ..TimeoutOverrides::default()
        };
        let resolved = group.over(&target);
        assert_eq!(resolved.first_token, Some(Duration::from_millis(1)));
        assert_eq!(resolved.total, Some(Duration::from_millis(3)));
        assert_eq!(resolved.connect, None);
    }
}
