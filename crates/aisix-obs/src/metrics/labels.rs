//! The fixed label values: every enum a metric label may take, each with its `as_str()`.
//! Values that come from configuration (model and provider names) are passed as `&str` instead.

use std::fmt;

/// Label value for `model` and `provider` when a request ended before routing chose one
/// (missing key, unknown model, body too large). Never put a raw request string in a label.
pub const UNROUTED: &str = "none";

macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $value:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)+];

            /// The label value as it appears in `/metrics`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// The API surface a request arrived on (`endpoint` label).
    Endpoint {
        ChatCompletions => "chat_completions",
        Completions => "completions",
        Embeddings => "embeddings",
        Models => "models",
        /// Anthropic `POST /v1/messages`.
        Messages => "messages",
        /// Anthropic `POST /v1/messages/count_tokens`.
        CountTokens => "count_tokens",
        /// OpenAI's Responses API: `POST /v1/responses` and its stored responses.
        Responses => "responses",
        /// `/livez` and `/readyz`.
        Health => "health",
        /// Anything else (answered 404); keeps raw paths out of labels.
        Other => "other",
    }
}

label_enum! {
    /// The class of the status sent to the client (`status_class` label).
    StatusClass {
        Informational => "1xx",
        Success => "2xx",
        Redirection => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
    }
}

impl StatusClass {
    /// The class of an HTTP status code. Codes outside 100..=599 never leave the gateway
    /// (hyper rejects them); they fold into the nearest class rather than a new label value.
    pub const fn from_status(status: u16) -> Self {
        match status {
            0..=199 => Self::Informational,
            200..=299 => Self::Success,
            300..=399 => Self::Redirection,
            400..=499 => Self::ClientError,
            _ => Self::ServerError,
        }
    }
}

label_enum! {
    /// How a request ended, from the operator's point of view (`outcome` label).
    Outcome {
        Success => "success",
        /// The client's request was refused: bad key, bad body, unknown model, body too large.
        ClientError => "client_error",
        /// The upstream failed: transport error, timeout, 5xx, or a stream cut short.
        UpstreamError => "upstream_error",
        RateLimited => "rate_limited",
        /// The client went away before the response was complete.
        ClientClosed => "client_closed",
    }
}

label_enum! {
    /// Which side of a completion a token count is for (`kind` label of `aisix_tokens_total`).
    TokenKind {
        Input => "input",
        Output => "output",
    }
}

label_enum! {
    /// Why a call to a provider failed (`kind` label of `aisix_upstream_errors_total`).
    UpstreamErrorKind {
        Connect => "connect",
        Timeout => "timeout",
        /// The provider answered with an error status.
        Status => "status",
        /// A stream ended without its final event.
        StreamCut => "stream_cut",
        /// A stream event was larger than `upstream.max_sse_event_bytes`.
        EventTooLarge => "event_too_large",
        /// A whole answer was larger than `upstream.max_response_bytes`.
        ResponseTooLarge => "response_too_large",
        /// A stream event was not what the provider's dialect sends.
        Malformed => "malformed",
    }
}

label_enum! {
    /// Why authentication refused a request (`reason` label of `aisix_auth_failures_total`).
    AuthFailure {
        Missing => "missing",
        Unknown => "unknown",
        Disabled => "disabled",
        Expired => "expired",
        ModelNotAllowed => "model_not_allowed",
    }
}

label_enum! {
    /// Whose limit refused a request (`scope` label of `aisix_ratelimit_rejections_total`).
    RateLimitScope {
        ApiKey => "api_key",
        Model => "model",
    }
}

label_enum! {
    /// Which limit refused a request (`kind` label of `aisix_ratelimit_rejections_total`): a
    /// request or token window, the concurrency cap, or the spending budget.
    RateLimitKind {
        Rps => "rps",
        Rpm => "rpm",
        Rph => "rph",
        Rpd => "rpd",
        Tpm => "tpm",
        Tpd => "tpd",
        Concurrency => "concurrency",
        Budget => "budget",
    }
}

label_enum! {
    /// How requests are served: the one serving-mode type of the workspace (the serving plan,
    /// the tests and the bench harness use it), and the `mode` label of `aisix_build_info`.
    Mode {
        /// N threads `tpc-0..N-1`, each with its own current-thread runtime and listener.
        ThreadPerCore => "thread_per_core",
        /// One multi-thread runtime with N threads and one listener.
        Shared => "shared",
    }
}

impl Mode {
    /// The mode `proxy.thread_per_core` selects.
    pub const fn from_thread_per_core(thread_per_core: bool) -> Self {
        if thread_per_core {
            Self::ThreadPerCore
        } else {
            Self::Shared
        }
    }

    pub const fn is_thread_per_core(self) -> bool {
        matches!(self, Self::ThreadPerCore)
    }

    /// The worker label of worker `id` in this mode: `tpc-<id>`, or `shared` for any thread of
    /// the shared runtime.
    pub const fn worker(self, id: usize) -> Worker {
        match self {
            Self::ThreadPerCore => Worker::Tpc(id),
            Self::Shared => Worker::Shared,
        }
    }
}

label_enum! {
    /// How a reload of the resources file ended (`result` label of
    /// `aisix_config_reloads_total`).
    ReloadResult {
        Success => "success",
        /// The file had errors and was refused whole; the running resources stay.
        Failure => "failure",
    }
}

/// The `worker` label value of a thread that never called
/// [`Metrics::register_worker`](super::Metrics::register_worker).
pub const UNREGISTERED_WORKER: &str = "unregistered";

/// A serving thread, as named by the `worker` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Worker {
    /// Thread-per-core worker `tpc-N`.
    Tpc(usize),
    /// Any thread of the shared multi-thread runtime.
    Shared,
}

impl Worker {
    /// The label value (`"tpc-3"`, `"shared"`), formatted on the stack.
    pub fn label(self) -> WorkerLabel {
        let mut label = WorkerLabel {
            buf: [0; WorkerLabel::CAPACITY],
            len: 0,
        };
        match self {
            Self::Tpc(index) => {
                label.push(b"tpc-");
                let mut digits = [0u8; 20];
                let mut at = digits.len();
                let mut rest = index;
                loop {
                    at -= 1;
                    // `rest % 10` is below 10, so the cast cannot truncate.
                    digits[at] = b'0' + (rest % 10) as u8;
                    rest /= 10;
                    if rest == 0 {
                        break;
                    }
                }
                label.push(&digits[at..]);
            }
            Self::Shared => label.push(b"shared"),
        }
        label
    }
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label().as_str())
    }
}

/// A worker label held on the stack, so naming the worker on every emit allocates nothing.
#[derive(Clone, Copy)]
pub struct WorkerLabel {
    buf: [u8; Self::CAPACITY],
    len: usize,
}

impl WorkerLabel {
    /// `"tpc-"` and the 20 digits of `usize::MAX`.
    const CAPACITY: usize = 24;

    fn push(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    /// The label value.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever pushed, so this never falls back.
        self.buf
            .get(..self.len)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .unwrap_or(UNREGISTERED_WORKER)
    }
}

impl fmt::Debug for WorkerLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes_cover_every_code() {
        assert_eq!(StatusClass::from_status(101).as_str(), "1xx");
        assert_eq!(StatusClass::from_status(200).as_str(), "2xx");
        assert_eq!(StatusClass::from_status(299).as_str(), "2xx");
        assert_eq!(StatusClass::from_status(304).as_str(), "3xx");
        assert_eq!(StatusClass::from_status(429).as_str(), "4xx");
        assert_eq!(StatusClass::from_status(502).as_str(), "5xx");
        assert_eq!(StatusClass::from_status(999).as_str(), "5xx");
    }

    #[test]
    fn worker_labels_name_the_thread() {
        assert_eq!(Worker::Tpc(0).label().as_str(), "tpc-0");
        assert_eq!(Worker::Tpc(3).label().as_str(), "tpc-3");
        assert_eq!(Worker::Tpc(1024).label().as_str(), "tpc-1024");
        assert_eq!(
            Worker::Tpc(usize::MAX).label().as_str(),
            format!("tpc-{}", usize::MAX)
        );
        assert_eq!(Worker::Shared.label().as_str(), "shared");
    }

    #[test]
    fn label_values_are_snake_case_ascii() {
        let all: Vec<&str> = Endpoint::ALL
            .iter()
            .map(|v| v.as_str())
            .chain(Outcome::ALL.iter().map(|v| v.as_str()))
            .chain(TokenKind::ALL.iter().map(|v| v.as_str()))
            .chain(UpstreamErrorKind::ALL.iter().map(|v| v.as_str()))
            .chain(AuthFailure::ALL.iter().map(|v| v.as_str()))
            .chain(Mode::ALL.iter().map(|v| v.as_str()))
            .chain(RateLimitScope::ALL.iter().map(|v| v.as_str()))
            .chain(RateLimitKind::ALL.iter().map(|v| v.as_str()))
            .chain(ReloadResult::ALL.iter().map(|v| v.as_str()))
            .collect();
        for value in all {
            assert!(
                value.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{value}"
            );
        }
    }
}
