//! The resource types the gateway serves from: provider keys, models and API keys, as loaded and
//! validated. Reading them from YAML is `load`'s job; matching names is `pattern`'s.

use std::fmt;
use std::time::SystemTime;

use super::group::ModelGroup;
use super::key::KeyHash;
use super::limits::{Cost, RateLimit, SpendBudget, SpendingPolicy};
use super::pattern::ModelPattern;
use crate::bootstrap::CooldownOverrides;
use crate::timeouts::TimeoutOverrides;

/// Everything one resources file defines, validated: names are unique within each collection
/// and every reference resolves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resources {
    pub provider_keys: Vec<ProviderKey>,
    /// The direct models of `models[]`, in file order.
    pub models: Vec<Model>,
    /// The groups of `models[]` (entries with `routing`), in file order; their names and the
    /// direct models' share one namespace.
    pub groups: Vec<ModelGroup>,
    pub api_keys: Vec<ApiKey>,
}

/// The upstream protocol a provider key and its models speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI, or any server speaking its HTTP API.
    OpenAi,
    /// Azure OpenAI: the deployment in the path, `api-version` in the query, `api-key` header.
    AzureOpenAi,
    /// Anthropic's Messages API: `x-api-key` and `anthropic-version` headers.
    Anthropic,
    /// Google's Gemini API (AI Studio): `x-goog-api-key`, `models/{model}:generateContent`.
    Gemini,
    /// Google Cloud's Vertex AI: a service account's OAuth2 token, Gemini and Anthropic models
    /// under `projects/{project}/locations/{location}/publishers/…`.
    Vertex,
    /// The scriptable mock provider used in tests and benchmarks.
    Mock,
}

impl ProviderKind {
    /// Every kind, in the order error messages list them.
    pub const ALL: [ProviderKind; 6] = [
        ProviderKind::OpenAi,
        ProviderKind::AzureOpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Vertex,
        ProviderKind::Mock,
    ];

    /// The name the resources file uses (`openai`, `azure_openai`, `anthropic`, `gemini`, `mock`); also a bounded
    /// metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::AzureOpenAi => "azure_openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Vertex => "vertex",
            ProviderKind::Mock => "mock",
        }
    }

    /// The kind named `name` in a resources file, if this gateway supports it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The `api_base` used when a provider key gives none; empty when the kind needs none,
    /// `None` when every key must give its own.
    pub fn default_api_base(&self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::AzureOpenAi => None,
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            // Its location's host ([`super::vertex::default_api_base`]).
            ProviderKind::Vertex => None,
            ProviderKind::Mock => Some(""),
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `anthropic-version` sent to an `anthropic` provider whose key sets none.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// `provider_keys[]`: credentials and endpoint for one upstream account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderKey {
    pub display_name: String,
    pub provider: ProviderKind,
    /// Sent upstream as the provider credential; `None` for servers that need none.
    pub api_key: Option<Secret>,
    /// Base URL without a trailing `/` (`https://api.openai.com/v1`); the provider's default
    /// when the file gives none (empty for `mock`). May carry a query string
    /// (`https://host/v1?key=value`), which every endpoint keeps.
    pub api_base: String,
    /// `azure_openai` only (and required there): the `api-version` query value.
    pub api_version: Option<String>,
    /// `anthropic` only: the `anthropic-version` header sent when the client sent none
    /// ([`DEFAULT_ANTHROPIC_VERSION`] when not set).
    pub anthropic_version: Option<String>,
    /// Static headers sent with every request to this provider (`OpenAI-Organization`, ...);
    /// names are valid and neither hop-by-hop nor the gateway's own. Values print as `***`.
    pub headers: Vec<(String, Secret)>,
    /// Whether streams ask for `stream_options.include_usage`; `false` for servers that refuse
    /// unknown fields.
    pub stream_usage: bool,
    /// `bill_prompt_on_error`: whether the provider bills the prompt of a request it answers
    /// with an error status, so the gateway charges that request its prompt (default: no).
    pub bill_prompt_on_error: bool,
    /// Whether the provider serves OpenAI's Responses API (`/v1/responses`): such requests are
    /// relayed to it as they are; otherwise they are translated to chat completions. Default:
    /// `openai` with OpenAI's own `api_base` and `azure_openai` yes; an `openai` key with any
    /// other `api_base` (vLLM, Ollama, most compatible servers) no; `anthropic` and `mock` never.
    pub responses: bool,
    /// `health_check`: an active check of this key, off when not given.
    pub health_check: Option<HealthCheck>,
    /// `vertex` only (and required there): `project`, `location` and the service account.
    pub vertex: Option<super::vertex::VertexKey>,
}

/// `provider_keys[].health_check`: a cheap request (the provider's model list) every
/// `interval`, on the control side; a failure counts against every model on the key as a
/// failed call would, a success ends their cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    /// `interval`: how often (default 30 s, at least 100 ms).
    pub interval: std::time::Duration,
    /// `timeout`: how long one check may take (default 5 s).
    pub timeout: std::time::Duration,
}

impl HealthCheck {
    pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
    pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
}

/// `models[]`: a name clients send, and where requests for it go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// The name clients send in `model`.
    pub display_name: String,
    /// Always the same as the provider key's `provider`.
    pub provider: ProviderKind,
    /// The upstream's name for the model, sent in place of `display_name`.
    pub model_name: String,
    /// The provider key's `display_name`.
    pub provider_key: String,
    /// Index of that provider key in [`Resources::provider_keys`].
    pub provider_key_index: usize,
    /// `connect_timeout`, `first_token_timeout`, `stream_idle_timeout` and `timeout` (ms):
    /// override the `upstream.*_ms` defaults of the same names for this model.
    pub timeouts: TimeoutOverrides,
    /// `rate_limit`: limits on every request for this entry, whatever the key.
    pub rate_limit: RateLimit,
    /// `cost`: prices of this entry's tokens; `None` counts no spend.
    pub cost: Option<Cost>,
    /// `retries`: same-model retries of a retryable failure, for a request to this model and
    /// in a group (where it wins over `routing.retries`); `None` keeps the caller's (0 direct).
    pub retries: Option<u32>,
    /// `cooldown`: this model's own cooldown settings over the `upstream.*` ones.
    pub cooldown: CooldownOverrides,
    /// `continuation`: how it goes on from an answer another model's stream was cut in; the
    /// provider kind's default when not given.
    pub continuation: Continuation,
    /// `output_tokens_field`: the chat completions field a translated request puts its output
    /// cap in; `None` takes the default of the model name's family
    /// ([`OutputTokensField::for_model`]).
    pub output_tokens_field: Option<OutputTokensField>,
    /// `disabled`: loaded (a group may still name it, and skips it), but answered as an
    /// unknown model.
    pub disabled: bool,
}

/// `models[].continuation`: how a direct model continues a partial assistant answer, if it
/// truly does (a group's `continue_on_cut` uses it; models that cannot are skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Continuation {
    /// A trailing assistant message is continued (Anthropic's prefill); `anthropic`'s default.
    Prefill,
    /// vLLM's `continue_final_message: true` with `add_generation_prompt: false`.
    ContinueFinalMessage,
    /// DeepSeek's `prefix: true` on the trailing assistant message.
    Prefix,
    /// It answers a trailing assistant message with a new turn (OpenAI, Azure OpenAI): it is
    /// never asked to continue; `openai`'s and `azure_openai`'s default.
    None,
}

impl Continuation {
    pub const ALL: [Continuation; 4] = [
        Continuation::Prefill,
        Continuation::ContinueFinalMessage,
        Continuation::Prefix,
        Continuation::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Continuation::Prefill => "prefill",
            Continuation::ContinueFinalMessage => "continue_final_message",
            Continuation::Prefix => "prefix",
            Continuation::None => "none",
        }
    }

    /// What a model of `kind` does when its entry does not say.
    pub fn default_for(kind: ProviderKind) -> Self {
        match kind {
            ProviderKind::Anthropic => Continuation::Prefill,
            ProviderKind::OpenAi
            | ProviderKind::AzureOpenAi
            | ProviderKind::Gemini
            | ProviderKind::Vertex
            | ProviderKind::Mock => Continuation::None,
        }
    }
}

impl Model {
    /// The field the upstream wants the output cap in: the configured one, else the family's.
    pub fn output_tokens_field(&self) -> OutputTokensField {
        self.output_tokens_field
            .unwrap_or_else(|| OutputTokensField::for_model(&self.model_name))
    }
}

/// Where a chat completions request carries its output cap. OpenAI's reasoning models (o1,
/// o3, o4, gpt-5) refuse `max_tokens` and want `max_completion_tokens`; most other servers
/// speaking OpenAI's API know only `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputTokensField {
    MaxTokens,
    MaxCompletionTokens,
}

impl OutputTokensField {
    pub const ALL: [OutputTokensField; 2] = [
        OutputTokensField::MaxTokens,
        OutputTokensField::MaxCompletionTokens,
    ];

    /// The default for an upstream model name: `max_completion_tokens` for the reasoning
    /// families `o1*`, `o3*`, `o4*` and `gpt-5*` (after any `vendor/` prefix), `max_tokens`
    /// for every other.
    pub fn for_model(model_name: &str) -> OutputTokensField {
        let name = model_name.rsplit('/').next().unwrap_or(model_name);
        let name = name.to_ascii_lowercase();
        if ["o1", "o3", "o4", "gpt-5"]
            .iter()
            .any(|f| name.starts_with(f))
        {
            OutputTokensField::MaxCompletionTokens
        } else {
            OutputTokensField::MaxTokens
        }
    }

    /// Whether the family reasons (and takes `reasoning_effort`).
    pub fn reasons(self) -> bool {
        self == OutputTokensField::MaxCompletionTokens
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OutputTokensField::MaxTokens => "max_tokens",
            OutputTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }

    pub fn from_name(name: &str) -> Option<OutputTokensField> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// `api_keys[]`: a client credential (kept only as its SHA-256) and what it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub display_name: String,
    pub key_hash: KeyHash,
    /// Models this key may call; empty allows none.
    pub allowed_models: Vec<ModelPattern>,
    pub disabled: bool,
    pub expires_at: Option<SystemTime>,
    /// `rate_limit`: limits on this key's requests, whatever the model.
    pub rate_limit: RateLimit,
    /// `budget`: how much this key may spend per period.
    pub budget: Option<SpendBudget>,
    /// `spending`: what it may buy beyond its tokens (`n`, service tiers, Anthropic betas).
    pub spending: SpendingPolicy,
}

impl ApiKey {
    /// Whether some pattern in `allowed_models` matches `model` (a model's `display_name`).
    /// Says nothing about `disabled` or expiry.
    pub fn allows(&self, model: &str) -> bool {
        self.allowed_models
            .iter()
            .any(|pattern| pattern.matches(model))
    }

    /// Whether the key has expired at `now`; the expiry instant itself is already expired.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|expires_at| now >= expires_at)
    }
}

/// A value that must never be printed: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The plaintext, for the one place that sends it (an upstream request header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(patterns: &[&str], expires_at: Option<SystemTime>) -> ApiKey {
        ApiKey {
            display_name: "k".to_owned(),
            key_hash: crate::hash_key("k"),
            allowed_models: patterns.iter().map(|p| ModelPattern::new(p)).collect(),
            disabled: false,
            expires_at,
            rate_limit: RateLimit::default(),
            budget: None,
            spending: SpendingPolicy::default(),
        }
    }

    #[test]
    fn secret_prints_stars_in_debug_and_display() {
        let secret = Secret::new("sk-live-123");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(secret.to_string(), "***");
        assert_eq!(secret.expose(), "sk-live-123");
    }

    #[test]
    fn provider_kind_names_round_trip() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(ProviderKind::from_name("OpenAI"), None);
    }

    #[test]
    fn empty_allowed_models_allows_nothing() {
        assert!(!key(&[], None).allows("gpt-4o"));
    }

    #[test]
    fn allows_checks_every_pattern() {
        let key = key(&["gpt-4o", "claude-*"], None);
        assert!(key.allows("gpt-4o"));
        assert!(key.allows("claude-3-opus"));
        assert!(!key.allows("gpt-4o-mini"));
    }

    #[test]
    fn key_is_expired_from_its_expiry_instant_on() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let key = key(&["*"], Some(at));
        assert!(!key.is_expired(at - Duration::from_nanos(1)));
        assert!(key.is_expired(at));
        assert!(key.is_expired(at + Duration::from_secs(1)));
    }

    #[test]
    fn key_without_expiry_never_expires() {
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40);
        assert!(!key(&["*"], None).is_expired(far));
    }
}
