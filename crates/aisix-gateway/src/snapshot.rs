//! The resources as the request path reads them: models and groups by name, API keys by hash,
//! providers with their credentials ready to send, and the shared state (cooldown, load,
//! rotation) of each. Built once per load; swapped whole on reload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use aisix_config::{
    Continuation, Cost, DEFAULT_ANTHROPIC_VERSION, FallbackError, HealthCheck, KeyHash, ModelGroup,
    ModelPattern, OutputTokensField, ProviderKey, ProviderKind, Resilience, Resources,
    SpendingPolicy, Strategy, TimeoutOverrides, WhenAllUnavailable,
};
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use aisix_obs::metrics::labels::RateLimitScope;

use crate::budget::{Budget, Share};
use crate::egress::{Egress, Route};
use crate::endpoint::{Endpoint, Proxied};
use crate::limit::{Limiter, Subject, SystemClock};
use crate::mask::Masks;
use crate::provider::refusal::Refusal;
use crate::route::state::{Clock, GroupState, States, TargetState};
use crate::route::strategy::Tier;
use crate::wire::openai::json_string;

/// One loaded configuration. Workers read it through an `ArcSwap` without locking.
#[derive(Debug, Default)]
pub struct Snapshot {
    // Configured names only: a fixed-key fast hash is safe, nothing a client sends is inserted.
    models: HashMap<String, Named, foldhash::fast::FixedState>,
    /// Direct models in file order, then groups in file order, for `/v1/models`.
    model_order: Vec<Named>,
    // SHA-256 digests of configured keys: a fixed-key fast hash is safe here too.
    keys: HashMap<KeyHash, ApiKeyEntry, foldhash::fast::FixedState>,
    /// The clock of the shared state's times.
    pub(crate) clock: Clock,
}

/// What a model name clients send stands for.
#[derive(Debug, Clone)]
pub enum Named {
    Direct(Arc<DirectRoute>),
    Group(Arc<GroupRoute>),
}

impl Named {
    /// The name clients send.
    pub fn name(&self) -> &Arc<str> {
        match self {
            Named::Direct(direct) => &direct.name,
            Named::Group(group) => &group.name,
        }
    }
}

/// Where a direct model's requests go.
#[derive(Debug)]
pub struct DirectRoute {
    /// The name clients send.
    pub name: Arc<str>,
    /// `name` as a JSON string literal, for the `model` of answers a group relays.
    pub name_json: Bytes,
    /// `name` for the `x-aisix-served-by` header.
    pub served_by: HeaderValue,
    /// The upstream's name for it.
    pub upstream_model: String,
    /// `upstream_model` as a JSON string literal, ready to splice into a body; `None` when the
    /// body's `model` is left as the client sent it (Azure reads the deployment from the path).
    pub upstream_model_json: Option<Bytes>,
    /// The model's own deadlines.
    pub timeouts: TimeoutOverrides,
    /// Its prices, for the spend its answers settle.
    pub cost: Option<Cost>,
    /// Its own `retries`, over the policy's (0 for a request naming it, the group's in a group).
    pub retries: Option<u32>,
    /// How it continues an answer cut short on another model, if it truly does.
    pub continuation: Continuation,
    /// Where a request translated to chat completions puts its output cap.
    pub output_tokens_field: OutputTokensField,
    /// Its `rate_limit`, when it sets one: reserved when clients name it directly.
    pub limits: Option<Arc<Subject>>,
    /// The upstream URI of each endpoint: the provider key's, or the model's own (Azure).
    pub uris: Arc<EndpointUris>,
    pub provider: Arc<Provider>,
    /// Cooldown, retry budget and load, shared by every worker.
    pub(crate) state: Arc<TargetState>,
    /// Some group picks among its targets by load: in-flight counts and first-byte times of
    /// this model are kept.
    pub(crate) track_load: bool,
}

/// A group: a name clients send, answered by one of its direct models.
#[derive(Debug)]
pub struct GroupRoute {
    pub name: Arc<str>,
    /// `name` as a JSON string literal, for the `model` of answers to a key that may not
    /// call the direct model that answered.
    pub name_json: Bytes,
    /// `name` for the `x-aisix-served-by` header, on the same answers.
    pub served_by: HeaderValue,
    /// The group's own deadlines, over those of the direct model answering.
    pub timeouts: TimeoutOverrides,
    pub strategy: Strategy,
    pub policy: Policy,
    /// The targets, highest priority first (listed order within a priority).
    pub(crate) members: Vec<Arc<DirectRoute>>,
    pub(crate) tiers: Vec<Tier>,
    pub(crate) state: Arc<GroupState>,
    /// The group's own `rate_limit`, when it sets one.
    pub limits: Option<Arc<Subject>>,
    /// The highest input and the highest output price among its targets: what a request's
    /// spend is reserved at before it is known which target answers.
    pub cost: Option<Cost>,
}

/// How a request moves among its direct models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Same-target retries of retryable failures.
    pub retries: u32,
    /// Other direct models tried after the first.
    pub max_fallbacks: u32,
    pub retry_on_429: bool,
    /// Upstream statuses that move on to the next direct model instead of being returned.
    pub fallback_on_statuses: Vec<u16>,
    /// Kinds of upstream refusal that move on to the next direct model.
    pub fallback_on_errors: Vec<Refusal>,
    pub when_all_unavailable: WhenAllUnavailable,
    pub continue_on_cut: bool,
    /// Cooling direct models are skipped (groups); a direct model is always called.
    pub skip_cooling: bool,
}

impl Policy {
    /// A direct model's requests: one call, answered or failed as it is.
    pub const DIRECT: Policy = Policy {
        retries: 0,
        max_fallbacks: 0,
        retry_on_429: false,
        fallback_on_statuses: Vec::new(),
        fallback_on_errors: Vec::new(),
        when_all_unavailable: WhenAllUnavailable::TryAnyway,
        continue_on_cut: false,
        skip_cooling: false,
    };
}

/// A provider key as the request path uses it: where to send, with which credential.
#[derive(Debug)]
pub struct Provider {
    /// The provider key's display name (a metric label; never the key).
    pub name: Arc<str>,
    pub kind: ProviderKind,
    /// The provider key's `api_base` joined with each endpoint's path, parsed once.
    pub uris: Arc<EndpointUris>,
    /// Headers every request to this provider carries: its credential (`Authorization: Bearer`,
    /// or `api-key` for Azure) and its static `headers`, all marked sensitive so hyper never
    /// logs them.
    pub headers: HeaderMap,
    /// The provider key itself, to scrub it from the error bodies the provider sends back.
    pub secret: Option<Box<str>>,
    /// Every value the gateway adds (the key and each `headers` value), masked in whatever
    /// the provider sends back that reaches a client or a log.
    pub(crate) masks: Masks,
    /// Whether streams ask for `stream_options.include_usage`.
    pub stream_usage: bool,
    /// Whether it serves the Responses API itself (else `/v1/responses` is translated).
    pub responses: bool,
    /// `anthropic` only: the `anthropic-version` sent when the client sent none.
    pub anthropic_version: HeaderValue,
    /// Directly, or through the proxy the environment names.
    pub(crate) route: Route,
    /// Its active health check, if the key has one, and the model list it requests
    /// (`None` for a base that is no URI: the `mock` provider's).
    pub(crate) health_check: Option<(HealthCheck, Uri)>,
}

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
}

impl EndpointUris {
    /// `{api_base}{path}` for each endpoint, with `api_base`'s query string (if any) and
    /// `extra_query` (if any) after the path.
    fn new(api_base: &str, prefix: &str, extra_query: Option<&str>) -> Self {
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
        }
    }

    /// An Azure OpenAI deployment's URIs:
    /// `{api_base}/openai/deployments/{deployment}/{endpoint}?api-version={version}`, the
    /// deployment and the version percent-encoded (the loader takes only names that need no
    /// encoding; resources built otherwise still cannot splice a `/`, `?` or `#` in).
    /// Its Responses API is the resource's v1 surface, `{api_base}/openai/v1/responses`, which
    /// takes the deployment in the body's `model` and no `api-version`.
    fn azure(api_base: &str, deployment: &str, api_version: &str) -> Self {
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

#[derive(Debug)]
pub struct ApiKeyEntry {
    pub name: Arc<str>,
    pub allowed: Vec<ModelPattern>,
    pub disabled: bool,
    pub expires_at: Option<SystemTime>,
    /// Its `rate_limit` and `budget`, when it sets either.
    pub limits: Option<Arc<Subject>>,
    /// Its share of the worker's memory budget (`None` in tables built without one).
    pub(crate) share: Option<Share>,
    /// Its `spending` policy, when it restricts anything.
    pub spending: Option<Arc<SpendingPolicy>>,
}

impl ApiKeyEntry {
    pub fn allows(&self, model: &str) -> bool {
        self.allowed.iter().any(|p| p.matches(model))
    }
}

impl Snapshot {
    /// A direct model on the provider key named `provider` that serves the Responses API: where
    /// a native response's state is asked for. A walk of the models, on that path only.
    pub(crate) fn responses_route(&self, provider: &[u8]) -> Option<&Arc<DirectRoute>> {
        self.model_order.iter().find_map(|named| match named {
            Named::Direct(route)
                if route.provider.responses && route.provider.name.as_bytes() == provider =>
            {
                Some(route)
            }
            _ => None,
        })
    }

    /// Builds the lookup tables with every provider reached directly and fresh shared state.
    pub fn from_resources(resources: &Resources) -> Self {
        let states = States::carry_over(None, resources, Resilience::default());
        let limiter = Limiter::in_memory(Arc::new(SystemClock));
        Self::build(resources, &states, &Egress::direct(), &limiter)
    }

    /// Builds the lookup tables; `states` holds the shared state of each entry, `egress` gives
    /// each provider's route (direct or a proxy), `limiter` the counters of each entry's limits
    /// (the same ones every worker and every reload gets for an entry of the same name).
    pub(crate) fn build(
        resources: &Resources,
        states: &States,
        egress: &Egress,
        limiter: &Limiter,
    ) -> Self {
        let providers: Vec<Arc<Provider>> = resources
            .provider_keys
            .iter()
            .map(|key| Arc::new(Provider::new(key, egress)))
            .collect();
        // Direct models some group orders by load.
        let tracked: std::collections::HashSet<usize> = resources
            .groups
            .iter()
            .filter(|g| {
                matches!(
                    g.routing.strategy,
                    Strategy::LeastBusy | Strategy::LeastLatency
                )
            })
            .flat_map(|g| g.routing.targets.iter().map(|t| t.model_index))
            .collect();

        let entries = resources.models.len() + resources.groups.len();
        let mut models =
            HashMap::with_capacity_and_hasher(entries, foldhash::fast::FixedState::default());
        let mut model_order = Vec::with_capacity(entries);
        let mut direct = Vec::with_capacity(resources.models.len());
        let key_of = |index: usize| resources.provider_keys.get(index);
        for (index, model) in resources.models.iter().enumerate() {
            let Some(provider) = providers.get(model.provider_key_index) else {
                direct.push(None);
                continue;
            };
            let (uris, upstream_model_json) =
                match (provider.kind, &key_of(model.provider_key_index)) {
                    (ProviderKind::AzureOpenAi, Some(key)) => (
                        Arc::new(EndpointUris::azure(
                            &key.api_base,
                            &model.model_name,
                            key.api_version.as_deref().unwrap_or_default(),
                        )),
                        None,
                    ),
                    _ => (provider.uris.clone(), Some(json_string(&model.model_name))),
                };
            let state = states
                .target(&model.display_name)
                .cloned()
                .unwrap_or_else(|| {
                    let settings = Resilience::default().with(&model.cooldown);
                    Arc::new(TargetState::new(&model.display_name, settings))
                });
            let route = Arc::new(DirectRoute {
                name: model.display_name.as_str().into(),
                name_json: json_string(&model.display_name),
                // Validated display names are visible ASCII or UTF-8; a name that is not a
                // valid header value is sent as "-" rather than refused.
                served_by: HeaderValue::from_str(&model.display_name)
                    .unwrap_or_else(|_| HeaderValue::from_static("-")),
                upstream_model: model.model_name.clone(),
                upstream_model_json,
                timeouts: model.timeouts,
                cost: model.cost,
                retries: model.retries,
                continuation: model.continuation,
                output_tokens_field: model.output_tokens_field(),
                limits: limiter.subject(
                    RateLimitScope::Model,
                    &model.display_name,
                    &model.rate_limit,
                    None,
                ),
                uris,
                provider: provider.clone(),
                state,
                track_load: tracked.contains(&index),
            });
            models.insert(model.display_name.clone(), Named::Direct(route.clone()));
            model_order.push(Named::Direct(route.clone()));
            direct.push(Some(route));
        }
        for group in &resources.groups {
            let limits = limiter.subject(
                RateLimitScope::Model,
                &group.display_name,
                &group.rate_limit,
                None,
            );
            let Some(route) = GroupRoute::new(group, &direct, states, limits) else {
                continue;
            };
            let named = Named::Group(Arc::new(route));
            models.insert(group.display_name.clone(), named.clone());
            model_order.push(named);
        }

        let keys = resources
            .api_keys
            .iter()
            .map(|key| {
                (
                    key.key_hash,
                    ApiKeyEntry {
                        name: key.display_name.as_str().into(),
                        allowed: key.allowed_models.clone(),
                        disabled: key.disabled,
                        expires_at: key.expires_at,
                        limits: limiter.subject(
                            RateLimitScope::ApiKey,
                            &key.display_name,
                            &key.rate_limit,
                            key.budget,
                        ),
                        share: None,
                        spending: (key.spending != SpendingPolicy::default())
                            .then(|| Arc::new(key.spending.clone())),
                    },
                )
            })
            .collect();

        Self {
            models,
            model_order,
            keys,
            clock: states.clock,
        }
    }

    pub fn model(&self, name: &str) -> Option<&Named> {
        self.models.get(name)
    }

    pub fn models(&self) -> impl Iterator<Item = &Named> {
        self.model_order.iter()
    }

    pub fn api_key(&self, hash: &KeyHash) -> Option<&ApiKeyEntry> {
        self.keys.get(hash)
    }

    /// Gives each key its share of `budget`: the one it had in `previous` (a reload keeps what
    /// its requests in flight hold), else a new one.
    fn shared(mut self, budget: &Budget, previous: Option<&Snapshot>) -> Self {
        for (hash, entry) in &mut self.keys {
            let kept = previous
                .and_then(|p| p.keys.get(hash))
                .and_then(|e| e.share.clone());
            entry.share = Some(kept.unwrap_or_else(|| budget.share()));
        }
        self
    }
}

impl GroupRoute {
    /// The group of `group`, its targets taken from `direct` (the direct models by index).
    fn new(
        group: &ModelGroup,
        direct: &[Option<Arc<DirectRoute>>],
        states: &States,
        limits: Option<Arc<Subject>>,
    ) -> Option<Self> {
        let routing = &group.routing;
        let mut targets: Vec<(i32, u32, Arc<DirectRoute>)> = routing
            .targets
            .iter()
            .filter_map(|t| {
                let route = direct.get(t.model_index)?.clone()?;
                Some((t.priority, t.weight, route))
            })
            .collect();
        if targets.is_empty() {
            return None;
        }
        // Stable: listed order within one priority.
        targets.sort_by_key(|(priority, _, _)| std::cmp::Reverse(*priority));
        let mut tiers = Vec::new();
        let mut start = 0;
        while start < targets.len() {
            let priority = targets[start].0;
            let end = start
                + targets[start..]
                    .iter()
                    .take_while(|t| t.0 == priority)
                    .count();
            let weights: Vec<u32> = targets[start..end].iter().map(|t| t.1).collect();
            tiers.push(Tier::new(start..end, &weights));
            start = end;
        }
        let cost = highest_prices(targets.iter().map(|(_, _, route)| route.cost));
        Some(Self {
            name: group.display_name.as_str().into(),
            name_json: json_string(&group.display_name),
            served_by: HeaderValue::from_str(&group.display_name)
                .unwrap_or_else(|_| HeaderValue::from_static("-")),
            timeouts: group.timeouts,
            strategy: routing.strategy,
            policy: Policy {
                retries: routing.retries,
                max_fallbacks: routing.max_fallbacks.unwrap_or(u32::MAX),
                retry_on_429: routing.retry_on_429,
                fallback_on_statuses: routing.fallback_on_statuses.clone(),
                fallback_on_errors: routing
                    .fallback_on_errors
                    .iter()
                    .map(|kind| match kind {
                        FallbackError::ContextLengthExceeded => Refusal::ContextLengthExceeded,
                        FallbackError::ContentFilter => Refusal::ContentFilter,
                    })
                    .collect(),
                when_all_unavailable: routing.when_all_unavailable,
                continue_on_cut: routing.continue_on_cut,
                skip_cooling: true,
            },
            members: targets.into_iter().map(|(_, _, route)| route).collect(),
            tiers,
            state: states
                .group(&group.display_name)
                .cloned()
                .unwrap_or_default(),
            limits,
            cost,
        })
    }
}

/// `value` with every byte but RFC 3986's unreserved ones (letters, digits, `-`, `.`, `_`,
/// `~`) percent-encoded: safe as one path segment or one query value. `.` and `..` (which
/// name other paths once resolved) are encoded whole.
fn percent_encoded(value: &str) -> String {
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

/// The highest input and the highest output price among `costs`; `None` when none is priced.
fn highest_prices(costs: impl Iterator<Item = Option<Cost>>) -> Option<Cost> {
    costs.flatten().reduce(|a, b| Cost {
        input_per_1k: a.input_per_1k.max(b.input_per_1k),
        output_per_1k: a.output_per_1k.max(b.output_per_1k),
    })
}

/// The cheapest request that proves a key works: the provider's model list.
/// `{api_base}/models` (OpenAI and compatible servers), `{api_base}/v1/models` (Anthropic),
/// `{api_base}/openai/models?api-version=…` (Azure), with `api_base`'s query string kept.
fn health_uri(key: &ProviderKey) -> Option<Uri> {
    let (base, query) = match key.api_base.split_once('?') {
        Some((base, query)) => (base, Some(query.to_owned())),
        None => (key.api_base.as_str(), None),
    };
    let (path, extra) = match key.provider {
        ProviderKind::OpenAi | ProviderKind::Mock => ("/models", None),
        ProviderKind::Anthropic => ("/v1/models", None),
        ProviderKind::AzureOpenAi => (
            "/openai/models",
            key.api_version
                .as_deref()
                .map(|v| format!("api-version={}", percent_encoded(v))),
        ),
    };
    let query = match (query, extra) {
        (Some(a), Some(b)) => format!("?{a}&{b}"),
        (Some(q), None) | (None, Some(q)) => format!("?{q}"),
        (None, None) => String::new(),
    };
    format!("{base}{path}{query}").parse().ok()
}

impl Provider {
    /// The key to scrub from an error the provider sends back, whole or mid-stream (keys
    /// shorter than 8 characters are not looked for: they would match ordinary text).
    pub(crate) fn error_secret(&self) -> Option<&str> {
        self.secret.as_deref().filter(|k| k.len() >= 8)
    }

    fn new(key: &ProviderKey, egress: &Egress) -> Self {
        let (uris, auth_header, auth_value) = match key.provider {
            ProviderKind::AzureOpenAi => (
                EndpointUris::default(),
                HeaderName::from_static("api-key"),
                key.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            ProviderKind::Anthropic => (
                EndpointUris::new(&key.api_base, "", None),
                HeaderName::from_static("x-api-key"),
                key.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            ProviderKind::OpenAi | ProviderKind::Mock => (
                EndpointUris::new(&key.api_base, "", None),
                http::header::AUTHORIZATION,
                key.api_key
                    .as_ref()
                    .map(|k| format!("Bearer {}", k.expose())),
            ),
        };
        let mut headers = HeaderMap::new();
        let sensitive = |value: &str| {
            let mut value = HeaderValue::try_from(value).ok()?;
            value.set_sensitive(true);
            Some(value)
        };
        for (name, value) in &key.headers {
            // Validated at load; a header that still does not parse is left out.
            if let (Ok(name), Some(value)) = (
                HeaderName::try_from(name.as_str()),
                sensitive(value.expose()),
            ) {
                headers.append(name, value);
            }
        }
        if let Some(value) = auth_value.as_deref().and_then(sensitive) {
            headers.insert(auth_header, value);
        }
        let health_check = key.health_check.zip(health_uri(key));
        // The route depends only on the scheme and host, the same for every endpoint.
        let route = key
            .api_base
            .parse::<Uri>()
            .map_or(Route::Direct, |uri| egress.route(&uri));
        Self {
            name: key.display_name.as_str().into(),
            kind: key.provider,
            uris: Arc::new(uris),
            headers,
            secret: key.api_key.as_ref().map(|k| k.expose().into()),
            masks: Masks::new(
                key.api_key
                    .iter()
                    .chain(key.headers.iter().map(|(_, value)| value))
                    .map(|secret| secret.expose()),
            ),
            stream_usage: key.stream_usage,
            responses: key.responses,
            health_check,
            anthropic_version: key
                .anthropic_version
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok())
                .unwrap_or_else(|| HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION)),
            route,
        }
    }
}

/// A worker's snapshot, tagged with the resources it was built from. A request compares that
/// identity with the resources published now and rebuilds on a mismatch. The pair is swapped as
/// one value, so a slow rebuild from older resources can never leave an old snapshot under a
/// newer tag: at worst the next request rebuilds again.
///
/// Cost per request: two `ArcSwap` loads, a pointer comparison and one reference count.
pub(crate) struct SnapshotCache {
    current: ArcSwap<Built>,
    /// The worker's memory budget, which each key's share is of.
    budget: Budget,
}

/// Resources as published to every worker, with the shared state of their entries.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub resources: Resources,
    pub states: States,
}

impl Loaded {
    /// `resources` with the state of `previous`'s unchanged entries carried over.
    pub(crate) fn new(
        resources: Resources,
        previous: Option<&Loaded>,
        settings: Resilience,
    ) -> Self {
        let states = States::carry_over(previous.map(|p| &p.states), &resources, settings);
        Self { resources, states }
    }
}

struct Built {
    source: Arc<Loaded>,
    snapshot: Arc<Snapshot>,
}

impl SnapshotCache {
    pub(crate) fn new(
        published: &ArcSwap<Loaded>,
        egress: &Egress,
        limiter: &Limiter,
        budget: &Budget,
    ) -> Self {
        let source = published.load_full();
        let snapshot = Arc::new(
            Snapshot::build(&source.resources, &source.states, egress, limiter)
                .shared(budget, None),
        );
        Self {
            current: ArcSwap::from_pointee(Built { source, snapshot }),
            budget: budget.clone(),
        }
    }

    /// The snapshot of the resources published now, built here if this worker has not yet.
    pub(crate) fn get(
        &self,
        published: &ArcSwap<Loaded>,
        egress: &Egress,
        limiter: &Limiter,
    ) -> Arc<Snapshot> {
        let source = published.load();
        let cached = self.current.load();
        if Arc::ptr_eq(&cached.source, &source) {
            return cached.snapshot.clone();
        }
        let snapshot = Arc::new(
            Snapshot::build(&source.resources, &source.states, egress, limiter)
                .shared(&self.budget, Some(&cached.snapshot)),
        );
        self.current.store(Arc::new(Built {
            source: Arc::clone(&source),
            snapshot: snapshot.clone(),
        }));
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(model: &str) -> Loaded {
        let yaml = format!(
            "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: mock}}]\nmodels: [{{display_name: {model}, provider: mock, model_name: m, provider_key: p}}]\n"
        );
        Loaded::new(parse(&yaml), None, Resilience::default())
    }

    fn parse(yaml: &str) -> Resources {
        aisix_config::parse_resources(yaml, std::path::Path::new("r.yaml"), &|_| None).unwrap()
    }

    /// The direct model `name` of `snapshot`.
    fn direct(snapshot: &Snapshot, name: &str) -> Arc<DirectRoute> {
        match snapshot.model(name) {
            Some(Named::Direct(route)) => route.clone(),
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn a_stale_rebuild_finishing_last_is_replaced_by_the_next_request() {
        let egress = Egress::direct();
        let limiter = Limiter::in_memory(Arc::new(SystemClock));
        let published = ArcSwap::from_pointee(resources("old"));
        let budget = Budget::new(1 << 20, 1 << 18);
        let cache = SnapshotCache::new(&published, &egress, &limiter, &budget);
        let old_source = published.load_full();
        assert!(
            cache
                .get(&published, &egress, &limiter)
                .model("old")
                .is_some()
        );

        published.store(Arc::new(resources("new")));
        assert!(
            cache
                .get(&published, &egress, &limiter)
                .model("new")
                .is_some()
        );
        // A request that loaded the old resources before the reload stores its rebuild last.
        cache.current.store(Arc::new(Built {
            snapshot: Arc::new(Snapshot::build(
                &old_source.resources,
                &old_source.states,
                &egress,
                &limiter,
            )),
            source: old_source,
        }));
        let snapshot = cache.get(&published, &egress, &limiter);
        assert!(snapshot.model("new").is_some() && snapshot.model("old").is_none());
        assert!(Arc::ptr_eq(
            &cache.get(&published, &egress, &limiter),
            &cache.get(&published, &egress, &limiter)
        ));
    }

    #[test]
    fn limits_are_built_per_entry_and_a_group_is_priced_at_its_targets_highest_prices() {
        let yaml = r#"_format_version: "1"
provider_keys: [{display_name: p, provider: mock}]
models:
  - {display_name: cheap, provider: mock, model_name: m, provider_key: p, cost: {input_per_1k: 0.001, output_per_1k: 0.02}}
  - {display_name: dear, provider: mock, model_name: m, provider_key: p, rate_limit: {rpm: 5}, cost: {input_per_1k: 0.005, output_per_1k: 0.01}}
  - {display_name: free, provider: mock, model_name: m, provider_key: p}
  - display_name: chat
    routing: {targets: [{model: cheap}, {model: dear}, {model: free}]}
    rate_limit: {tpm: 1000}
api_keys:
  - {display_name: limited, key_hash: fdee306ee20284546953efcaf060f0b555c52d4941bfa7c55d95b87acba3d26b, allowed_models: ["*"], budget: {usd: 5, period: day}}
"#;
        let resources = parse(yaml);
        let snapshot = Snapshot::from_resources(&resources);
        assert!(
            direct(&snapshot, "cheap").limits.is_none(),
            "no rate_limit, no subject"
        );
        assert!(direct(&snapshot, "dear").limits.is_some());
        let Some(Named::Group(group)) = snapshot.model("chat") else {
            panic!("chat is a group");
        };
        assert!(group.limits.is_some());
        let usd = |s| aisix_config::Usd::parse(s).unwrap();
        assert_eq!(
            group.cost,
            Some(Cost {
                input_per_1k: usd("0.005"),
                output_per_1k: usd("0.02"),
            })
        );
        let key = resources.api_keys[0].key_hash;
        assert!(
            snapshot.api_key(&key).unwrap().limits.is_some(),
            "a budget alone"
        );
    }

    #[test]
    fn azure_models_get_deployment_paths_and_the_api_key_header() {
        let yaml = r#"_format_version: "1"
provider_keys:
  - display_name: az
    provider: azure_openai
    api_base: https://res.openai.azure.com/
    api_version: "2024-10-21"
    api_key: azure-secret
    headers: {OpenAI-Organization: org-1}
  - display_name: oai
    provider: openai
    api_base: http://gw.local/v1?tenant=t1
    api_key: sk-x
models:
  - {display_name: a, provider: azure_openai, model_name: gpt4o-prod, provider_key: az}
  - {display_name: o, provider: openai, model_name: gpt-4o, provider_key: oai}
"#;
        let resources = parse(yaml);
        let snapshot = Snapshot::from_resources(&resources);
        let azure = direct(&snapshot, "a");
        assert_eq!(
            azure
                .uris
                .get(Endpoint::ChatCompletions)
                .unwrap()
                .to_string(),
            "https://res.openai.azure.com/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            azure.uris.get(Endpoint::Embeddings).unwrap().to_string(),
            "https://res.openai.azure.com/openai/deployments/gpt4o-prod/embeddings?api-version=2024-10-21"
        );
        assert_eq!(
            azure.uris.get(Endpoint::Responses).unwrap().to_string(),
            "https://res.openai.azure.com/openai/v1/responses"
        );
        assert!(
            azure.upstream_model_json.is_none(),
            "Azure takes the deployment from the path"
        );
        let headers = &azure.provider.headers;
        assert_eq!(headers["api-key"], "azure-secret");
        assert!(headers["api-key"].is_sensitive());
        assert!(!headers.contains_key("authorization"));
        assert_eq!(headers["openai-organization"], "org-1");

        let openai = direct(&snapshot, "o");
        assert_eq!(
            openai.uris.get(Endpoint::Completions).unwrap().to_string(),
            "http://gw.local/v1/completions?tenant=t1"
        );
        assert_eq!(openai.provider.headers["authorization"], "Bearer sk-x");
        assert_eq!(
            openai.uris.get(Endpoint::Responses).unwrap().to_string(),
            "http://gw.local/v1/responses?tenant=t1"
        );
        assert!(azure.provider.responses && !openai.provider.responses);
    }

    #[test]
    fn azure_deployments_and_versions_are_percent_encoded_where_they_are_spliced() {
        let uris = EndpointUris::azure("https://res.openai.azure.com", "dep/x?y#z", "2024 10&a=b");
        assert_eq!(
            uris.get(Endpoint::ChatCompletions).unwrap().to_string(),
            "https://res.openai.azure.com/openai/deployments/dep%2Fx%3Fy%23z/chat/completions?api-version=2024%2010%26a%3Db"
        );
        let uris = EndpointUris::azure("https://res.openai.azure.com", "..", "v");
        assert_eq!(
            uris.get(Endpoint::Embeddings).unwrap().to_string(),
            "https://res.openai.azure.com/openai/deployments/%2E%2E/embeddings?api-version=v"
        );
        assert_eq!(percent_encoded("gpt-4o_prod.v1~a"), "gpt-4o_prod.v1~a");
    }

    #[test]
    fn a_key_keeps_its_share_of_the_budget_across_a_reload() {
        let yaml = |model: &str| {
            format!(
                "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: mock}}]\nmodels: [{{display_name: {model}, provider: mock, model_name: m, provider_key: p}}]\napi_keys: [{{display_name: k, key_hash: fdee306ee20284546953efcaf060f0b555c52d4941bfa7c55d95b87acba3d26b, allowed_models: [\"*\"]}}]\n"
            )
        };
        let loaded = |model: &str| Loaded::new(parse(&yaml(model)), None, Resilience::default());
        let (egress, limiter) = (Egress::direct(), Limiter::in_memory(Arc::new(SystemClock)));
        let published = ArcSwap::from_pointee(loaded("old"));
        let budget = Budget::new(1 << 20, 1 << 18);
        let cache = SnapshotCache::new(&published, &egress, &limiter, &budget);
        let hash = published.load().resources.api_keys[0].key_hash;
        let share = |snapshot: &Snapshot| snapshot.api_key(&hash).unwrap().share.clone().unwrap();
        let before = share(&cache.get(&published, &egress, &limiter));

        published.store(Arc::new(loaded("new")));
        let snapshot = cache.get(&published, &egress, &limiter);
        assert!(snapshot.model("new").is_some());
        assert!(
            share(&snapshot).is(&before),
            "what its requests hold stays counted"
        );
    }
}
