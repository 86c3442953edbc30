//! URL building: each endpoint's upstream URI from a provider's `api_base`, Azure's deployment
//! paths and `api-version` included, with every spliced value percent-encoded.

use http::Uri;

use crate::endpoint::{Endpoint, Proxied};

/// The upstream URI of each proxied endpoint.
#[derive(Debug, Default)]
pub struct EndpointUris {
    chat_completions: Option<Uri>,
    completions: Option<Uri>,
    embeddings: Option<Uri>,
    /// Anthropic's `/v1/messages` (an `anthropic` provider's only endpoint but one).
    messages: Option<Uri>,
    count_tokens: Option<Uri>,
    /// OpenAI's `/responses`; Azure's is the resource's `/openai/v1/responses`.
    responses: Option<Uri>,
    /// Where a provider that names streams in its URL streams chat (Gemini's
    /// `:streamGenerateContent?alt=sse`); `None` for the others.
    stream: Option<Uri>,
}

impl EndpointUris {
    /// `{api_base}{path}` for each endpoint, with `api_base`'s query string (if any) and
    /// `extra_query` (if any) after the path.
    pub(super) fn new(api_base: &str, prefix: &str, extra_query: Option<&str>) -> Self {
        let (base, query) = match api_base.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (api_base, None),
        };
        let query = match (query, extra_query) {
            (Some(a), Some(b)) => format!("?{a}&{b}"),
            (Some(q), None) | (None, Some(q)) => format!("?{q}"),
            (None, None) => String::new(),
        };
        let uri = |endpoint: Endpoint| {
            format!("{base}{prefix}{}{query}", endpoint.upstream_path())
                .parse()
                .ok()
        };
        Self {
            chat_completions: uri(Endpoint::ChatCompletions),
            completions: uri(Endpoint::Completions),
            embeddings: uri(Endpoint::Embeddings),
            messages: uri(Endpoint::Messages),
            count_tokens: uri(Endpoint::CountTokens),
            responses: uri(Endpoint::Responses),
            stream: None,
        }
    }

    /// A Gemini model's URIs: chat completions (either client dialect) at
    /// `{api_base}/models/{model}:generateContent` and, streamed,
    /// `:streamGenerateContent?alt=sse`; embeddings at `:batchEmbedContents`, Anthropic's
    /// count_tokens at `:countTokens`. The model is
    /// percent-encoded (a leading `models/` is the resource name's and is dropped).
    pub(super) fn gemini(api_base: &str, model: &str) -> Self {
        let (base, query) = match api_base.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (api_base, None),
        };
        let model = percent_encoded(model.strip_prefix("models/").unwrap_or(model));
        let uri = |method: &str, extra: Option<&str>| {
            let query = match (query, extra) {
                (Some(a), Some(b)) => format!("?{a}&{b}"),
                (Some(q), None) | (None, Some(q)) => format!("?{q}"),
                (None, None) => String::new(),
            };
            format!("{base}/models/{model}:{method}{query}")
                .parse()
                .ok()
        };
        Self {
            chat_completions: uri("generateContent", None),
            embeddings: uri("batchEmbedContents", None),
            count_tokens: uri("countTokens", None),
            stream: uri("streamGenerateContent", Some("alt=sse")),
            ..Self::default()
        }
    }

    /// A Vertex AI model's URIs, under
    /// `{api_base}/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}`
    /// (each spliced value percent-encoded): a Gemini model's chat at `:generateContent` and,
    /// streamed, `:streamGenerateContent?alt=sse`, embeddings at `:predict`, count_tokens at
    /// `:countTokens`; an Anthropic model's Messages at `:rawPredict` and, streamed,
    /// `:streamRawPredict`, count_tokens at `…/publishers/anthropic/models/count-tokens:rawPredict`
    /// ([`Publisher::of`] tells which).
    pub(super) fn vertex(key: &aisix_config::ProviderKey, model: &str) -> Self {
        let Some(vertex) = &key.vertex else {
            return Self::default();
        };
        let (base, query) = match key.api_base.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (key.api_base.as_str(), None),
        };
        let publisher = Publisher::of(model);
        let models = format!(
            "{base}/v1/projects/{}/locations/{}/publishers/{}/models",
            percent_encoded(&vertex.project),
            percent_encoded(&vertex.location),
            publisher.as_str(),
        );
        let model = percent_encoded(model);
        let uri = |model: &str, method: &str, extra: Option<&str>| {
            let query = match (query, extra) {
                (Some(a), Some(b)) => format!("?{a}&{b}"),
                (Some(q), None) | (None, Some(q)) => format!("?{q}"),
                (None, None) => String::new(),
            };
            format!("{models}/{model}:{method}{query}").parse().ok()
        };
        match publisher {
            Publisher::Google => Self {
                chat_completions: uri(&model, "generateContent", None),
                stream: uri(&model, "streamGenerateContent", Some("alt=sse")),
                embeddings: uri(&model, "predict", None),
                count_tokens: uri(&model, "countTokens", None),
                ..Self::default()
            },
            Publisher::Anthropic => Self {
                messages: uri(&model, "rawPredict", None),
                stream: uri(&model, "streamRawPredict", None),
                // Anthropic's token counter is one model of its own; the body names the model.
                count_tokens: uri("count-tokens", "rawPredict", None),
                ..Self::default()
            },
        }
    }

    /// A Bedrock model's URIs: chat completions and Messages (either client dialect) at
    /// `{api_base}/model/{model}/converse` and, streamed, `/converse-stream`; embeddings at
    /// `/invoke`. The model id (an ARN's `:` and `/` included) is one percent-encoded segment.
    pub(super) fn bedrock(api_base: &str, model: &str) -> Self {
        let (base, query) = match api_base.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (api_base, String::new()),
        };
        let model = percent_encoded(model);
        let uri = |action: &str| format!("{base}/model/{model}/{action}{query}").parse().ok();
        Self {
            chat_completions: uri("converse"),
            embeddings: uri("invoke"),
            stream: uri("converse-stream"),
            ..Self::default()
        }
    }

    /// The streaming URI of chat, where the provider names streams in its URL (Gemini).
    pub fn stream(&self) -> Option<&Uri> {
        self.stream.as_ref()
    }

    /// An Azure OpenAI deployment's URIs:
    /// `{api_base}/openai/deployments/{deployment}/{endpoint}?api-version={version}`, the
    /// deployment and the version percent-encoded (the loader takes only names that need no
    /// encoding; resources built otherwise still cannot splice a `/`, `?` or `#` in).
    /// Its Responses API is the resource's v1 surface, `{api_base}/openai/v1/responses`, which
    /// takes the deployment in the body's `model` and no `api-version`.
    pub(super) fn azure(api_base: &str, deployment: &str, api_version: &str) -> Self {
        let mut uris = Self::new(
            api_base,
            &format!("/openai/deployments/{}", percent_encoded(deployment)),
            Some(&format!("api-version={}", percent_encoded(api_version))),
        );
        uris.responses = Self::new(api_base, "/openai/v1", None).responses;
        uris
    }

    /// The URI for `endpoint`; `None` for endpoints that are never proxied or a base that is
    /// not a valid URI (a `mock` provider's empty base). Which endpoints a provider speaks is
    /// its adapter's to say.
    pub fn get(&self, endpoint: Endpoint) -> Option<&Uri> {
        match endpoint {
            Endpoint::ChatCompletions => self.chat_completions.as_ref(),
            Endpoint::Completions => self.completions.as_ref(),
            Endpoint::Embeddings => self.embeddings.as_ref(),
            Endpoint::Messages => self.messages.as_ref(),
            Endpoint::CountTokens => self.count_tokens.as_ref(),
            Endpoint::Responses => self.responses.as_ref(),
            _ => None,
        }
    }
}

/// Whose model a Vertex AI model is, which decides its URL and its dialect: Anthropic's Claude
/// models (a `model_name` starting `claude`), else Google's (Gemini).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publisher {
    Google,
    Anthropic,
}

impl Publisher {
    pub(crate) fn of(model: &str) -> Self {
        if model.starts_with("claude") {
            Publisher::Anthropic
        } else {
            Publisher::Google
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Publisher::Google => "google",
            Publisher::Anthropic => "anthropic",
        }
    }
}

/// `value` with every byte but RFC 3986's unreserved ones (letters, digits, `-`, `.`, `_`,
/// `~`) percent-encoded: safe as one path segment or one query value. `.` and `..` (which
/// name other paths once resolved) are encoded whole.
pub(super) fn percent_encoded(value: &str) -> String {
    use std::fmt::Write;
    let dots = matches!(value, "." | "..");
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if !dots && (byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)) {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}
