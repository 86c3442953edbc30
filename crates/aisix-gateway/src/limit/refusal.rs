//! What a client is told about its limits: the `x-ratelimit-*` headers of every limited
//! response, and the parts of a refusal (status, error type and code, message, headers) that
//! the error renderer puts in the client's envelope. Messages name the limit, never a key.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use aisix_config::{BudgetPeriod, Usd};
use aisix_obs::metrics::labels::{RateLimitKind, RateLimitScope};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use super::window::Unit;

static LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
static REMAINING_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-requests");
static RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
static LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
static REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
static RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");
/// Tells the official SDKs not to retry a refusal that waiting a few seconds cannot cure.
static SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// Where one dimension (requests or tokens) of the tightest limit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub limit: u64,
    pub remaining: u64,
    /// Until the window that counts it starts again.
    pub reset_in: Duration,
}

/// The tightest request limit and the tightest token limit a request met: what the
/// `x-ratelimit-*` headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headroom {
    pub requests: Option<Standing>,
    pub tokens: Option<Standing>,
}

impl Headroom {
    /// Keeps `standing` for `unit` if it is tighter than what is held: fewer remaining, or as
    /// few and a later reset (the limit that binds longer).
    pub(super) fn note(&mut self, unit: Unit, standing: Standing) {
        let held = match unit {
            Unit::Requests => &mut self.requests,
            Unit::Tokens => &mut self.tokens,
        };
        let tighter = held.is_none_or(|h| {
            (standing.remaining, std::cmp::Reverse(standing.reset_in))
                < (h.remaining, std::cmp::Reverse(h.reset_in))
        });
        if tighter {
            *held = Some(standing);
        }
    }

    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the dimensions that have a
    /// limit. Resets are written as OpenAI writes them: `250ms`, `12s`, `6m0s`, `1h0m0s`.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        let dimensions = [
            (
                self.requests,
                [&LIMIT_REQUESTS, &REMAINING_REQUESTS, &RESET_REQUESTS],
            ),
            (
                self.tokens,
                [&LIMIT_TOKENS, &REMAINING_TOKENS, &RESET_TOKENS],
            ),
        ];
        for (standing, [limit, remaining, reset]) in dimensions {
            let Some(standing) = standing else { continue };
            headers.insert(limit.clone(), HeaderValue::from(standing.limit));
            headers.insert(remaining.clone(), HeaderValue::from(standing.remaining));
            if let Ok(value) = HeaderValue::try_from(reset_text(standing.reset_in)) {
                headers.insert(reset.clone(), value);
            }
        }
    }
}

/// A limit that refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub scope: RateLimitScope,
    /// The configured name of the key or model entry whose limit it is.
    pub name: Arc<str>,
    pub kind: RateLimitKind,
    /// Requests, tokens, requests in flight, or micro-dollars (budget).
    pub limit: u64,
    /// What was already counted against the limit when it refused.
    pub used: u64,
    /// The budget's period, for [`RateLimitKind::Budget`].
    pub period: Option<BudgetPeriod>,
    /// When the refusing window or period ends; `None` for concurrency, which ends when a
    /// request in flight does.
    pub retry_after: Option<Duration>,
    pub headroom: Headroom,
}

/// Why the limiter did not admit a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Limit(Refusal),
    /// The shared backend could not be reached and `on_error: deny` is set.
    Unavailable,
}

impl Refused {
    pub fn status(&self) -> StatusCode {
        match self {
            Refused::Limit(_) => StatusCode::TOO_MANY_REQUESTS,
            Refused::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The OpenAI `error.type`; Anthropic's envelope uses the same names.
    pub fn error_type(&self) -> &'static str {
        match self {
            Refused::Limit(r) if r.kind == RateLimitKind::Budget => "billing_error",
            Refused::Limit(_) => "rate_limit_error",
            Refused::Unavailable => "api_error",
        }
    }

    /// The OpenAI `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Limit(r) if r.kind == RateLimitKind::Budget => "budget_exceeded",
            Refused::Limit(_) => "rate_limit_exceeded",
            Refused::Unavailable => "rate_limiter_unavailable",
        }
    }

    /// What the client reads: which limit, whose, and when to come back.
    pub fn message(&self) -> String {
        let Refused::Limit(r) = self else {
            return "The rate limiter is unavailable; try again shortly.".to_owned();
        };
        let whose = match r.scope {
            RateLimitScope::ApiKey => "this API key".to_owned(),
            RateLimitScope::Model => format!("the model '{}'", r.name),
        };
        let mut message = match r.kind {
            RateLimitKind::Concurrency => format!(
                "Concurrency limit reached for {whose}: {} requests in flight at once.",
                r.limit
            ),
            RateLimitKind::Budget => format!(
                "Budget exceeded for {whose}: {} spent of {} {}.",
                micros_usd(r.used),
                micros_usd(r.limit),
                match r.period {
                    Some(BudgetPeriod::Day) => "today",
                    Some(BudgetPeriod::Week) => "this week",
                    Some(BudgetPeriod::Month) | None => "this month",
                }
            ),
            kind => format!(
                "Rate limit reached for {whose}: {} {} (used {}).",
                r.limit,
                per(kind),
                r.used
            ),
        };
        if let Some(after) = r.retry_after {
            let _ = write!(message, " Try again in {}.", reset_text(after));
        }
        message
    }

    /// `Retry-After` in whole seconds, at least 1, where waiting helps: not for concurrency.
    pub fn retry_after(&self) -> Option<HeaderValue> {
        match self {
            Refused::Limit(r) => r.retry_after.map(|after| {
                let seconds = after.as_millis().div_ceil(1000).max(1);
                HeaderValue::from(u64::try_from(seconds).unwrap_or(u64::MAX))
            }),
            Refused::Unavailable => Some(HeaderValue::from(1u64)),
        }
    }

    /// Where the limits stood when it refused, for the `x-ratelimit-*` headers.
    pub fn headroom(&self) -> Option<Headroom> {
        match self {
            Refused::Limit(r) => Some(r.headroom),
            Refused::Unavailable => None,
        }
    }

    /// `Retry-After` where waiting helps, `x-should-retry: false` where an SDK's quick retries
    /// cannot (a spent budget), and the `x-ratelimit-*` headers.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if let Some(after) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, after);
        }
        if let Refused::Limit(r) = self {
            if r.kind == RateLimitKind::Budget {
                headers.insert(SHOULD_RETRY.clone(), HeaderValue::from_static("false"));
            }
            r.headroom.write_headers(headers);
        }
    }
}

fn per(kind: RateLimitKind) -> &'static str {
    match kind {
        RateLimitKind::Rps => "requests per second",
        RateLimitKind::Rpm => "requests per minute",
        RateLimitKind::Rph => "requests per hour",
        RateLimitKind::Rpd => "requests per day",
        RateLimitKind::Tpm => "tokens per minute",
        RateLimitKind::Tpd => "tokens per day",
        RateLimitKind::Concurrency => "requests in flight",
        RateLimitKind::Budget => "micro-dollars",
    }
}

fn micros_usd(micros: u64) -> Usd {
    Usd::from_nanos(micros.saturating_mul(1000))
}

/// `250ms` below a second; whole seconds rounded up above: `12s`, `6m0s`, `1h0m0s`.
fn reset_text(after: Duration) -> String {
    let millis = after.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let seconds = millis.div_ceil(1000);
    let (hours, minutes, seconds) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: RateLimitKind, retry_after: Option<Duration>) -> Refusal {
        Refusal {
            scope: RateLimitScope::Model,
            name: "gpt-4o".into(),
            kind,
            limit: 100,
            used: 97,
            period: None,
            retry_after,
            headroom: Headroom {
                requests: Some(Standing {
                    limit: 100,
                    remaining: 3,
                    reset_in: Duration::from_millis(41_200),
                }),
                tokens: None,
            },
        }
    }

    #[test]
    fn resets_read_like_openais() {
        assert_eq!(reset_text(Duration::from_millis(17)), "17ms");
        assert_eq!(reset_text(Duration::from_millis(1000)), "1s");
        assert_eq!(reset_text(Duration::from_millis(1001)), "2s");
        assert_eq!(reset_text(Duration::from_secs(360)), "6m0s");
        assert_eq!(reset_text(Duration::from_secs(3_725)), "1h2m5s");
    }

    #[test]
    fn a_window_refusal_is_429_rate_limit_exceeded_with_retry_after_and_headers() {
        let refused = Refused::Limit(refusal(
            RateLimitKind::Rpm,
            Some(Duration::from_millis(41_200)),
        ));
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.error_type(), "rate_limit_error");
        assert_eq!(refused.code(), "rate_limit_exceeded");
        assert_eq!(
            refused.message(),
            "Rate limit reached for the model 'gpt-4o': 100 requests per minute (used 97). \
             Try again in 42s."
        );
        let mut headers = HeaderMap::new();
        refused.write_headers(&mut headers);
        assert_eq!(headers[header::RETRY_AFTER], "42");
        assert_eq!(headers["x-ratelimit-limit-requests"], "100");
        assert_eq!(headers["x-ratelimit-remaining-requests"], "3");
        assert_eq!(headers["x-ratelimit-reset-requests"], "42s");
        assert!(!headers.contains_key("x-ratelimit-limit-tokens"));
        assert!(!headers.contains_key("x-should-retry"));
    }

    #[test]
    fn a_concurrency_refusal_has_no_retry_after() {
        let refused = Refused::Limit(refusal(RateLimitKind::Concurrency, None));
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.code(), "rate_limit_exceeded");
        let mut headers = HeaderMap::new();
        refused.write_headers(&mut headers);
        assert!(!headers.contains_key(header::RETRY_AFTER));
        assert!(
            refused.message().contains("100 requests in flight at once"),
            "{}",
            refused.message()
        );
    }

    #[test]
    fn a_budget_refusal_is_a_billing_error_that_sdks_should_not_retry() {
        let mut budget = refusal(RateLimitKind::Budget, Some(Duration::from_secs(3_600)));
        budget.scope = RateLimitScope::ApiKey;
        budget.limit = 50_000_000;
        budget.used = 50_000_125;
        budget.period = Some(BudgetPeriod::Month);
        let refused = Refused::Limit(budget);
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.error_type(), "billing_error");
        assert_eq!(refused.code(), "budget_exceeded");
        assert_eq!(
            refused.message(),
            "Budget exceeded for this API key: $50.000125 spent of $50 this month. Try again in \
             1h0m0s."
        );
        let mut headers = HeaderMap::new();
        refused.write_headers(&mut headers);
        assert_eq!(headers["x-should-retry"], "false");
        assert_eq!(headers[header::RETRY_AFTER], "3600");
    }

    #[test]
    fn an_unavailable_limiter_is_503_with_a_short_retry_after() {
        let refused = Refused::Unavailable;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.code(), "rate_limiter_unavailable");
        let mut headers = HeaderMap::new();
        refused.write_headers(&mut headers);
        assert_eq!(headers[header::RETRY_AFTER], "1");
    }

    #[test]
    fn headroom_keeps_the_tightest_limit_of_each_dimension() {
        let standing = |remaining, reset_secs| Standing {
            limit: 100,
            remaining,
            reset_in: Duration::from_secs(reset_secs),
        };
        let mut headroom = Headroom::default();
        headroom.note(Unit::Requests, standing(50, 10));
        headroom.note(Unit::Requests, standing(20, 30));
        headroom.note(Unit::Requests, standing(40, 1));
        headroom.note(Unit::Requests, standing(20, 60));
        headroom.note(Unit::Tokens, standing(7, 5));
        assert_eq!(headroom.requests, Some(standing(20, 60)));
        assert_eq!(headroom.tokens, Some(standing(7, 5)));
        let mut headers = HeaderMap::new();
        headroom.write_headers(&mut headers);
        assert_eq!(headers["x-ratelimit-remaining-requests"], "20");
        assert_eq!(headers["x-ratelimit-reset-requests"], "1m0s");
        assert_eq!(headers["x-ratelimit-remaining-tokens"], "7");
    }
}
