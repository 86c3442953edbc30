//! Gateway errors: typed where they happen, interpreted once and rendered once into the
//! client's envelope (a response, or an in-band event of a stream already under way): OpenAI's
//! `{"error":{...}}`, or Anthropic's `{"type":"error","error":{"type","message"}}` with its type
//! names by status. The dialect switch is here and nowhere else. The
//! message a client sees never carries a secret or an upstream host; details for operators go
//! to the log.

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

pub use aisix_obs::metrics::labels::AuthFailure;
use aisix_obs::metrics::labels::{Outcome, RateLimitKind, UpstreamErrorKind};

use crate::limit::Refused;
use crate::relay::body::GatewayBody;
use crate::target::refusal::UpstreamRefusal;
use crate::wire::Dialect;
use crate::wire::anthropic::error as anthropic;

/// Which side of the gateway a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

/// Every way a request can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No route for the path.
    NotFound,
    /// The path exists, with other methods (the `Allow` header lists them).
    MethodNotAllowed(Allow),
    /// No key, unknown key, disabled key, expired key.
    Unauthorized(AuthFailure),
    ModelNotAllowed,
    ModelNotFound,
    /// A stored Responses answer that is unknown, expired, or another key's.
    ResponseNotFound,
    /// The key's spending policy does not allow what the request asks for.
    NotPermitted,
    InvalidJson,
    /// A required or known field is missing or has the wrong type.
    InvalidRequest,
    BodyTooLarge,
    /// The request body did not arrive in full within `downstream.request_body_timeout_secs`.
    RequestTimeout,
    /// Could not connect to, or talk to, the upstream (a reset before the response head
    /// included).
    UpstreamUnavailable,
    /// The upstream did not answer (or finish) in time.
    UpstreamTimeout,
    /// The upstream answered 5xx (or reported an error inside a stream, as 502).
    UpstreamServerError(StatusCode),
    /// The upstream answered 4xx; its status is passed through.
    UpstreamClientError(StatusCode),
    /// A stream (or a whole answer being relayed) ended before it was complete.
    StreamCut,
    /// A stream went silent for longer than its idle deadline.
    StreamTimeout,
    /// A stream event was larger than `upstream.max_sse_event_bytes`.
    StreamEventTooLarge,
    /// A whole answer was larger than `upstream.max_response_bytes` (its connection closed).
    UpstreamResponseTooLarge,
    /// A stream event that is not what the upstream's dialect sends (not JSON, or an error
    /// object where a chunk belongs).
    UpstreamMalformed,
    /// Every direct model of the group is cooling down.
    AllCandidatesUnavailable,
    /// A `rate_limit` of the key or the model refused the request.
    RateLimited,
    /// The key's `budget` for the period is spent.
    BudgetExceeded,
    /// Redis cannot be reached and `ratelimit.redis.on_error` is `deny`.
    LimiterUnavailable,
    /// The worker's memory budget (`proxy.max_buffered_bytes_per_worker`) had no room for the
    /// request within its deadline.
    Overloaded,
    Internal,
}

/// The methods a path allows, as a 405's `Allow` header lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allow {
    GetHead,
    Post,
    GetDelete,
}

impl Allow {
    pub const fn as_str(self) -> &'static str {
        match self {
            Allow::GetHead => "GET, HEAD",
            Allow::Post => "POST",
            Allow::GetDelete => "GET, DELETE",
        }
    }
}

/// What an error kind means, in one place: what the client gets, how metrics count it, and
/// whether another try may help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meaning {
    pub status: StatusCode,
    /// The OpenAI `error.type`.
    pub error_type: &'static str,
    /// The OpenAI `error.code`, also the access log's `error` and the attempt's.
    pub code: &'static str,
    /// The request's `outcome` label.
    pub outcome: Outcome,
    pub side: Side,
    /// Trying again (here or on another target) may succeed.
    pub retryable: bool,
    /// The `kind` label of `aisix_upstream_errors_total`, for failures of a provider.
    pub upstream_error: Option<UpstreamErrorKind>,
    /// The `reason` label of `aisix_auth_failures_total`, for refusals by authentication.
    pub auth_failure: Option<AuthFailure>,
}

impl ErrorKind {
    /// The one interpretation of this kind.
    pub const fn meaning(self) -> Meaning {
        const fn client(status: StatusCode, code: &'static str) -> Meaning {
            Meaning {
                status,
                error_type: "invalid_request_error",
                code,
                outcome: Outcome::ClientError,
                side: Side::Client,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            }
        }
        const fn upstream(
            status: StatusCode,
            code: &'static str,
            kind: UpstreamErrorKind,
            retryable: bool,
        ) -> Meaning {
            Meaning {
                status,
                error_type: "upstream_error",
                code,
                outcome: Outcome::UpstreamError,
                side: Side::Upstream,
                retryable,
                upstream_error: Some(kind),
                auth_failure: None,
            }
        }
        match self {
            ErrorKind::NotFound => client(StatusCode::NOT_FOUND, "unknown_url"),
            ErrorKind::MethodNotAllowed(_) => {
                client(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
            }
            ErrorKind::Unauthorized(reason) => Meaning {
                auth_failure: Some(reason),
                ..client(StatusCode::UNAUTHORIZED, "invalid_api_key")
            },
            // Answered exactly as an unknown model, so a key cannot learn which models exist;
            // the operator still sees the refusal in `aisix_auth_failures_total`.
            ErrorKind::ModelNotAllowed => Meaning {
                auth_failure: Some(AuthFailure::ModelNotAllowed),
                ..client(StatusCode::NOT_FOUND, "model_not_found")
            },
            ErrorKind::ModelNotFound => client(StatusCode::NOT_FOUND, "model_not_found"),
            ErrorKind::ResponseNotFound => client(StatusCode::NOT_FOUND, "response_not_found"),
            ErrorKind::NotPermitted => Meaning {
                error_type: "permission_error",
                ..client(StatusCode::FORBIDDEN, "not_permitted_by_key")
            },
            ErrorKind::InvalidJson => client(StatusCode::BAD_REQUEST, "invalid_json"),
            ErrorKind::InvalidRequest => client(StatusCode::BAD_REQUEST, "invalid_request"),
            ErrorKind::BodyTooLarge => client(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
            ErrorKind::RequestTimeout => client(StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            ErrorKind::UpstreamUnavailable => upstream(
                StatusCode::BAD_GATEWAY,
                "upstream_unavailable",
                UpstreamErrorKind::Connect,
                true,
            ),
            ErrorKind::UpstreamTimeout => upstream(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                UpstreamErrorKind::Timeout,
                true,
            ),
            ErrorKind::UpstreamServerError(_) => upstream(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                UpstreamErrorKind::Status,
                true,
            ),
            ErrorKind::UpstreamClientError(status) => {
                let rate_limited = status.as_u16() == 429;
                // 401 and 403 are about the gateway's own provider key: the operator's problem.
                let credentials = matches!(status.as_u16(), 401 | 403);
                Meaning {
                    status,
                    error_type: if rate_limited {
                        "rate_limit_error"
                    } else {
                        "invalid_request_error"
                    },
                    code: "upstream_rejected",
                    outcome: if rate_limited {
                        Outcome::RateLimited
                    } else if credentials {
                        Outcome::UpstreamError
                    } else {
                        Outcome::ClientError
                    },
                    side: Side::Upstream,
                    retryable: rate_limited || status.as_u16() == 408,
                    upstream_error: Some(UpstreamErrorKind::Status),
                    auth_failure: None,
                }
            }
            ErrorKind::StreamCut => upstream(
                StatusCode::BAD_GATEWAY,
                "stream_cut",
                UpstreamErrorKind::StreamCut,
                true,
            ),
            ErrorKind::StreamTimeout => upstream(
                StatusCode::GATEWAY_TIMEOUT,
                "stream_timeout",
                UpstreamErrorKind::Timeout,
                true,
            ),
            ErrorKind::StreamEventTooLarge => upstream(
                StatusCode::BAD_GATEWAY,
                "stream_event_too_large",
                UpstreamErrorKind::EventTooLarge,
                true,
            ),
            ErrorKind::UpstreamResponseTooLarge => upstream(
                StatusCode::BAD_GATEWAY,
                "upstream_response_too_large",
                UpstreamErrorKind::ResponseTooLarge,
                false,
            ),
            ErrorKind::UpstreamMalformed => upstream(
                StatusCode::BAD_GATEWAY,
                "upstream_malformed",
                UpstreamErrorKind::Malformed,
                true,
            ),
            ErrorKind::Overloaded => Meaning {
                status: StatusCode::SERVICE_UNAVAILABLE,
                error_type: "server_error",
                code: "gateway_overloaded",
                // Load shed, to retry later: counted with the limits' refusals.
                outcome: Outcome::RateLimited,
                side: Side::Internal,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            },
            ErrorKind::AllCandidatesUnavailable => Meaning {
                status: StatusCode::SERVICE_UNAVAILABLE,
                error_type: "upstream_error",
                code: "all_candidates_unavailable",
                outcome: Outcome::UpstreamError,
                side: Side::Upstream,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            },
            ErrorKind::RateLimited | ErrorKind::BudgetExceeded => Meaning {
                status: StatusCode::TOO_MANY_REQUESTS,
                error_type: if matches!(self, ErrorKind::BudgetExceeded) {
                    "billing_error"
                } else {
                    "rate_limit_error"
                },
                code: if matches!(self, ErrorKind::BudgetExceeded) {
                    "budget_exceeded"
                } else {
                    "rate_limit_exceeded"
                },
                outcome: Outcome::RateLimited,
                side: Side::Client,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            },
            ErrorKind::LimiterUnavailable => Meaning {
                status: StatusCode::SERVICE_UNAVAILABLE,
                error_type: "api_error",
                code: "rate_limiter_unavailable",
                outcome: Outcome::UpstreamError,
                side: Side::Internal,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            },
            ErrorKind::Internal => Meaning {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                error_type: "server_error",
                code: "internal_error",
                outcome: Outcome::UpstreamError,
                side: Side::Internal,
                retryable: false,
                upstream_error: None,
                auth_failure: None,
            },
        }
    }
}

/// The most bytes of a client's value (a model name, a path, a method) an error message echoes.
pub const MAX_ECHO: usize = 256;

/// A client's value as an error message may echo it: cut to [`MAX_ECHO`] bytes and marked as
/// cut (`… (cut)`) when longer. Every message that quotes client input goes through here.
pub fn echo(value: &str) -> Cow<'_, str> {
    crate::wire::json::cut(value, MAX_ECHO)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub kind: ErrorKind,
    /// Safe to show the client.
    pub message: String,
    /// The request field at fault, if any (`param` in the envelope).
    pub param: Option<&'static str>,
    /// Forwarded from an upstream 429/503, or the nearest end of a cooldown.
    pub retry_after: Option<HeaderValue>,
    /// An upstream 4xx error object to pass through instead of our own (already scrubbed), or
    /// the envelope of an error an upstream reported mid-stream ([`GatewayError::reported`]).
    pub upstream_body: Option<Bytes>,
    /// What an upstream's refusal was about, when routing recognises it.
    pub refusal: Option<UpstreamRefusal>,
}

impl GatewayError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
            upstream_body: None,
            refusal: None,
        }
    }

    /// An error an upstream reported mid-stream, as `kind`: the client's envelope in `dialect`
    /// carries the upstream's `message` (cut to [`MAX_ECHO`] bytes), its type, and for OpenAI
    /// its code, else its type (Anthropic's errors have only a type), else ours.
    pub fn reported(
        kind: ErrorKind,
        message: &str,
        error_type: Option<&str>,
        code: Option<&str>,
        dialect: Dialect,
    ) -> Self {
        let mut error = GatewayError::new(kind, echo(message));
        let envelope = match dialect {
            Dialect::OpenAi | Dialect::Responses => {
                let mut object = error.openai_error_object();
                if let Some(error_type) = error_type {
                    object["type"] = error_type.into();
                }
                if let Some(code) = code.or(error_type) {
                    object["code"] = code.into();
                }
                serde_json::json!({ "error": object })
            }
            Dialect::Anthropic => serde_json::json!({
                "type": "error",
                "error": {
                    "type": error_type
                        .unwrap_or_else(|| anthropic::error_type(error.status().as_u16())),
                    "message": error.message,
                },
            }),
        };
        error.upstream_body = Some(Bytes::from(envelope.to_string()));
        error
    }

    pub fn with_param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    pub fn meaning(&self) -> Meaning {
        self.kind.meaning()
    }

    pub fn side(&self) -> Side {
        self.meaning().side
    }

    /// Whether trying again (here or on another target) may succeed.
    pub fn retryable(&self) -> bool {
        self.meaning().retryable
    }

    pub fn status(&self) -> StatusCode {
        self.meaning().status
    }

    /// The OpenAI `error.code`.
    pub fn code(&self) -> &'static str {
        self.meaning().code
    }

    /// The upstream's status, when the error is one it answered with.
    pub fn upstream_status(&self) -> Option<u16> {
        match self.kind {
            ErrorKind::UpstreamClientError(status) | ErrorKind::UpstreamServerError(status) => {
                Some(status.as_u16())
            }
            _ => None,
        }
    }

    /// The OpenAI error object.
    pub fn openai_error_object(&self) -> serde_json::Value {
        let meaning = self.meaning();
        serde_json::json!({
            "message": self.message,
            "type": meaning.error_type,
            "param": self.param,
            "code": meaning.code,
        })
    }

    /// The error envelope of `dialect` (OpenAI's `{"error":{"message","type","param","code"}}`
    /// or Anthropic's), with the status and headers that go with it. The one place errors
    /// become responses. An upstream's error object, when kept, is already in `dialect`.
    pub fn to_response(&self, dialect: Dialect) -> Response<GatewayBody> {
        let bytes = match (&self.upstream_body, dialect) {
            (Some(body), _) => body.clone(),
            (None, Dialect::OpenAi | Dialect::Responses) => {
                Bytes::from(serde_json::json!({ "error": self.openai_error_object() }).to_string())
            }
            (None, Dialect::Anthropic) => {
                anthropic::envelope(self.status().as_u16(), &self.message)
            }
        };
        let mut response = Response::new(GatewayBody::full(bytes));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(retry_after) = &self.retry_after {
            headers.insert(header::RETRY_AFTER, retry_after.clone());
        }
        if self.kind == ErrorKind::BudgetExceeded {
            // Quick retries by an SDK cannot cure a spent budget.
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if let ErrorKind::MethodNotAllowed(allow) = self.kind {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow.as_str()));
        }
        if matches!(self.kind, ErrorKind::Unauthorized(_)) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }

    /// The error as the last event of a stream already under way: `event: error` with the
    /// envelope of `dialect` as its data. The one place errors become events.
    pub fn to_event(&self, dialect: Dialect) -> Bytes {
        // Only an error an upstream reported mid-stream keeps its envelope in an event: a 4xx
        // body is a response's, and in a stream the gateway's own code names the failure.
        if let (ErrorKind::UpstreamServerError(_), Some(body)) = (self.kind, &self.upstream_body) {
            return Bytes::from([&b"event: error\ndata: "[..], body, b"\n\n"].concat());
        }
        match dialect {
            Dialect::OpenAi => {
                let envelope = serde_json::json!({ "error": self.openai_error_object() });
                Bytes::from(format!("event: error\ndata: {envelope}\n\n"))
            }
            Dialect::Anthropic => anthropic::stream_event(
                anthropic::error_type(self.status().as_u16()),
                &self.message,
            ),
            // A Responses stream's own failure is its `response.failed`, written by the stream
            // that knows the response; this is the API's bare `error` event.
            Dialect::Responses => {
                let event = serde_json::json!({
                    "type": "error",
                    "code": self.code(),
                    "message": self.message,
                    "param": self.param,
                    "sequence_number": 0,
                });
                Bytes::from(format!("event: error\ndata: {event}\n\n"))
            }
        }
    }
}

impl From<Refused> for GatewayError {
    /// The refusal in the envelope: its kind, its message and its `Retry-After` (the
    /// `x-ratelimit-*` headers are the response head's, from the record).
    fn from(refused: Refused) -> Self {
        let kind = match &refused {
            Refused::Limit(r) if r.kind == RateLimitKind::Budget => ErrorKind::BudgetExceeded,
            Refused::Limit(_) => ErrorKind::RateLimited,
            Refused::Unavailable => ErrorKind::LimiterUnavailable,
        };
        let mut error = GatewayError::new(kind, refused.message());
        error.retry_after = refused.retry_after();
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_renders_the_openai_envelope_with_its_status() {
        let cases = [
            (ErrorKind::NotFound, 404),
            (ErrorKind::MethodNotAllowed(Allow::Post), 405),
            (ErrorKind::Unauthorized(AuthFailure::Missing), 401),
            (ErrorKind::ModelNotAllowed, 404),
            (ErrorKind::ModelNotFound, 404),
            (ErrorKind::InvalidJson, 400),
            (ErrorKind::BodyTooLarge, 413),
            (ErrorKind::RequestTimeout, 408),
            (ErrorKind::UpstreamUnavailable, 502),
            (ErrorKind::UpstreamTimeout, 504),
            (
                ErrorKind::UpstreamServerError(StatusCode::SERVICE_UNAVAILABLE),
                502,
            ),
            (
                ErrorKind::UpstreamClientError(StatusCode::UNPROCESSABLE_ENTITY),
                422,
            ),
            (ErrorKind::StreamCut, 502),
            (ErrorKind::UpstreamMalformed, 502),
            (ErrorKind::AllCandidatesUnavailable, 503),
            (ErrorKind::UpstreamResponseTooLarge, 502),
            (ErrorKind::Overloaded, 503),
        ];
        for (kind, status) in cases {
            let response = GatewayError::new(kind, "m").to_response(Dialect::OpenAi);
            assert_eq!(response.status().as_u16(), status, "{kind:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        }
    }

    #[test]
    fn upstream_failures_are_retryable_and_client_failures_are_not() {
        assert!(GatewayError::new(ErrorKind::UpstreamTimeout, "").retryable());
        assert!(GatewayError::new(ErrorKind::StreamCut, "").retryable());
        assert!(!GatewayError::new(ErrorKind::ModelNotFound, "").retryable());
        let rejected = |code| ErrorKind::UpstreamClientError(StatusCode::from_u16(code).unwrap());
        assert!(rejected(429).meaning().retryable);
        assert!(rejected(408).meaning().retryable);
        assert!(!rejected(400).meaning().retryable);
        assert_eq!(
            GatewayError::new(ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY), "").side(),
            Side::Upstream
        );
    }

    #[test]
    fn upstream_rejections_count_by_whose_problem_they_are() {
        let outcome = |code| {
            ErrorKind::UpstreamClientError(StatusCode::from_u16(code).unwrap())
                .meaning()
                .outcome
        };
        assert_eq!(outcome(429), Outcome::RateLimited);
        assert_eq!(outcome(401), Outcome::UpstreamError);
        assert_eq!(outcome(400), Outcome::ClientError);
        assert_eq!(
            ErrorKind::Unauthorized(AuthFailure::Expired)
                .meaning()
                .auth_failure,
            Some(AuthFailure::Expired)
        );
    }

    #[test]
    fn a_refusal_renders_with_its_own_status_type_code_and_headers() {
        use crate::limit::{Headroom, Refusal};
        use aisix_obs::metrics::labels::RateLimitScope;
        let refusal = |kind, retry_after| {
            Refused::Limit(Refusal {
                scope: RateLimitScope::ApiKey,
                name: "team".into(),
                kind,
                limit: 5,
                used: 5,
                period: None,
                retry_after,
                headroom: Headroom::default(),
            })
        };
        let cases = [
            refusal(RateLimitKind::Rpm, Some(std::time::Duration::from_secs(3))),
            refusal(RateLimitKind::Concurrency, None),
            refusal(
                RateLimitKind::Budget,
                Some(std::time::Duration::from_secs(60)),
            ),
            Refused::Unavailable,
        ];
        for refused in cases {
            let error = GatewayError::from(refused.clone());
            let meaning = error.meaning();
            assert_eq!(
                (meaning.status, meaning.error_type, meaning.code),
                (refused.status(), refused.error_type(), refused.code())
            );
            assert_eq!(error.message, refused.message());
            let response = error.to_response(Dialect::OpenAi);
            let mut expected = http::HeaderMap::new();
            refused.write_headers(&mut expected);
            for name in [header::RETRY_AFTER.as_str(), "x-should-retry"] {
                assert_eq!(response.headers().get(name), expected.get(name), "{name}");
            }
        }
    }

    #[test]
    fn an_upstream_s_mid_stream_error_keeps_its_words_in_the_client_s_event() {
        let kind = ErrorKind::UpstreamServerError(StatusCode::BAD_GATEWAY);
        let openai = GatewayError::reported(
            kind,
            "Overloaded",
            Some("overloaded_error"),
            None,
            Dialect::OpenAi,
        );
        let event = String::from_utf8(openai.to_event(Dialect::OpenAi).to_vec()).unwrap();
        let data: serde_json::Value = serde_json::from_str(
            event
                .strip_prefix("event: error\ndata: ")
                .unwrap()
                .trim_end(),
        )
        .unwrap();
        assert_eq!(
            (
                &data["error"]["message"],
                &data["error"]["type"],
                &data["error"]["code"]
            ),
            (
                &"Overloaded".into(),
                &"overloaded_error".into(),
                &"overloaded_error".into()
            )
        );
        assert_eq!(
            openai.code(),
            "upstream_error",
            "logged and counted as before"
        );
        let anthropic = GatewayError::reported(
            kind,
            &"x".repeat(999),
            Some("server_error"),
            Some("c"),
            Dialect::Anthropic,
        );
        let event = String::from_utf8(anthropic.to_event(Dialect::Anthropic).to_vec()).unwrap();
        assert!(
            event.contains("\"type\":\"server_error\"") && event.contains("… (cut)"),
            "{event}"
        );
    }

    #[test]
    fn echoed_values_are_cut_to_256_bytes_and_marked() {
        assert_eq!(echo("gpt-4o"), "gpt-4o");
        let long = "é".repeat(1000);
        let echoed = echo(&long);
        assert!(echoed.ends_with("… (cut)"), "{echoed}");
        assert!(echoed.len() <= MAX_ECHO + "… (cut)".len());
        assert!(long.starts_with(echoed.trim_end_matches("… (cut)")));
        assert_eq!(
            echo(&"a".repeat(MAX_ECHO)).len(),
            MAX_ECHO,
            "a value at the limit is whole"
        );
    }

    #[test]
    fn a_405_lists_the_allowed_methods() {
        let error = GatewayError::new(ErrorKind::MethodNotAllowed(Allow::Post), "m");
        assert_eq!(
            error.to_response(Dialect::OpenAi).headers()[header::ALLOW],
            "POST"
        );
    }

    #[test]
    fn a_model_the_key_may_not_use_renders_as_an_unknown_one() {
        let refused = ErrorKind::ModelNotAllowed.meaning();
        let unknown = ErrorKind::ModelNotFound.meaning();
        assert_eq!(
            (refused.status, refused.code, refused.error_type),
            (unknown.status, unknown.code, unknown.error_type)
        );
        assert_eq!(refused.auth_failure, Some(AuthFailure::ModelNotAllowed));
    }

    #[test]
    fn a_stream_error_event_carries_the_envelope() {
        let event = GatewayError::new(ErrorKind::StreamCut, "cut").to_event(Dialect::OpenAi);
        let text = std::str::from_utf8(&event).unwrap();
        assert!(text.starts_with("event: error\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n"), "{text}");
        assert!(text.contains("\"code\":\"stream_cut\""), "{text}");
    }

    #[test]
    fn anthropic_clients_get_anthropic_envelopes_named_by_status() {
        let cases = [
            (
                ErrorKind::Unauthorized(AuthFailure::Unknown),
                "authentication_error",
            ),
            // Answered as an unknown model, in this envelope too.
            (ErrorKind::ModelNotAllowed, "not_found_error"),
            (ErrorKind::ModelNotFound, "not_found_error"),
            (ErrorKind::InvalidJson, "invalid_request_error"),
            (ErrorKind::BodyTooLarge, "request_too_large"),
            (ErrorKind::AllCandidatesUnavailable, "overloaded_error"),
            (ErrorKind::UpstreamTimeout, "timeout_error"),
            (ErrorKind::UpstreamResponseTooLarge, "api_error"),
        ];
        for (kind, name) in cases {
            let error = GatewayError::new(kind, "m");
            let response = error.to_response(Dialect::Anthropic);
            let body = match response.into_body() {
                GatewayBody::Full(body) => body.unwrap_or_default(),
                other => panic!("{other:?}"),
            };
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["type"], "error", "{kind:?}");
            assert_eq!(body["error"]["type"], name, "{kind:?}");
            assert_eq!(body["error"]["message"], "m");
            let event = error.to_event(Dialect::Anthropic);
            let event = std::str::from_utf8(&event).unwrap();
            assert!(event.starts_with("event: error\ndata: {"), "{event}");
            assert!(event.contains(name), "{event}");
        }
    }
}
