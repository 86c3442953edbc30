//! The resources as the request path reads them: models and groups by name, API keys by hash,
//! providers with their credentials ready to send, and the shared state (cooldown, load,
//! rotation) of each. Built once per load; swapped whole on reload. This file owns the lookup
//! tables; [`provider`] a provider key's credentials and headers, [`uris`] URL building,
//! [`group`] group tiering, [`cache`] the per-worker reload cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use aisix_config::{
    Continuation, Cost, KeyHash, ModelPattern, OutputTokensField, ProviderKind, Resilience,
    Resources, SpendingPolicy, Strategy, TimeoutOverrides,
};
use bytes::Bytes;
use http::HeaderValue;

use aisix_obs::metrics::labels::RateLimitScope;

use crate::limit::memory_budget::Share;
use crate::limit::{Limiter, Subject, SystemClock};
use crate::target::state::{StateClock, TargetState};
use crate::upstream::egress::Egress;
use crate::wire::openai::json_string;

mod cache;
pub(crate) mod credential;
mod google;
mod group;
mod provider;
pub(crate) mod status;
mod uris;
mod web_identity;

pub(crate) use cache::{Loaded, SnapshotCache};
pub use group::{GroupRoute, Policy};
pub use provider::Provider;
pub use uris::EndpointUris;
pub(crate) use uris::Publisher;

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
    pub(crate) clock: StateClock,
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
        let egress = Egress::direct();
        let loaded = Loaded::new(resources.clone(), None, Resilience::default(), &egress);
        let limiter = Limiter::in_memory(Arc::new(SystemClock));
        Self::build(&loaded, &egress, &limiter)
    }

    /// Builds the lookup tables of `loaded`, whose shared state each entry takes (and each
    /// provider key its refreshed credential); `egress` gives each provider's route (direct or
    /// a proxy), `limiter` the counters of each entry's limits (the same ones every worker and
    /// every reload gets for an entry of the same name).
    pub(crate) fn build(loaded: &Loaded, egress: &Egress, limiter: &Limiter) -> Self {
        let (resources, states) = (&loaded.resources, &loaded.states);
        let providers: Vec<Arc<Provider>> = resources
            .provider_keys
            .iter()
            .map(|key| {
                let credential = loaded.credentials.header(&key.display_name);
                let signer = loaded.credentials.signer(&key.display_name);
                Arc::new(Provider::new(key, egress, credential, signer))
            })
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
            // A disabled model is left out of every table: clients are told it does not exist,
            // and the groups that name it go on without it.
            let Some(provider) = providers
                .get(model.provider_key_index)
                .filter(|_| !model.disabled)
            else {
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
                    (ProviderKind::Bedrock, Some(key)) => (
                        Arc::new(EndpointUris::bedrock(&key.api_base, &model.model_name)),
                        None,
                    ),
                    (ProviderKind::Gemini, Some(key)) => (
                        Arc::new(EndpointUris::gemini(&key.api_base, &model.model_name)),
                        None,
                    ),
                    (ProviderKind::Vertex, Some(key)) => {
                        (Arc::new(EndpointUris::vertex(key, &model.model_name)), None)
                    }
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
        for group in resources.groups.iter().filter(|g| !g.disabled) {
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
}

#[cfg(test)]
mod tests {
    use super::uris::percent_encoded;
    use super::*;
    use crate::endpoint::Endpoint;

    pub(super) fn parse(yaml: &str) -> Resources {
        aisix_config::parse_resources(yaml, std::path::Path::new("r.yaml"), &|_| None).unwrap()
    }

    /// A service-account key file in `dir` that parses (its key signs nothing: no test here
    /// fetches a token with it).
    pub(super) fn service_account_file(dir: &std::path::Path) -> std::path::PathBuf {
        let file = dir.join("sa.json");
        std::fs::write(
            &file,
            serde_json::json!({"type": "service_account", "client_email": "a@b.c",
                "private_key": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
                "token_uri": "http://127.0.0.1:1/token"})
            .to_string(),
        )
        .unwrap();
        file
    }

    /// The direct model `name` of `snapshot`.
    fn direct(snapshot: &Snapshot, name: &str) -> Arc<DirectRoute> {
        match snapshot.model(name) {
            Some(Named::Direct(route)) => route.clone(),
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn a_disabled_model_or_group_is_absent_and_groups_go_on_without_a_disabled_target() {
        let yaml = r#"_format_version: "1"
provider_keys: [{display_name: p, provider: mock}]
models:
  - {display_name: on, provider: mock, model_name: m, provider_key: p}
  - {display_name: off, provider: mock, model_name: m, provider_key: p, disabled: true}
  - {display_name: mixed, routing: {targets: [{model: off}, {model: on}]}}
  - {display_name: dark, routing: {targets: [{model: off}]}}
  - {display_name: closed, routing: {targets: [{model: on}]}, disabled: true}
"#;
        let snapshot = Snapshot::from_resources(&parse(yaml));
        for absent in ["off", "dark", "closed"] {
            assert!(snapshot.model(absent).is_none(), "{absent}");
        }
        let Some(Named::Group(mixed)) = snapshot.model("mixed") else {
            panic!("mixed is a group");
        };
        let targets: Vec<_> = mixed.members.iter().map(|m| m.name.to_string()).collect();
        assert_eq!(targets, ["on"]);
        let listed: Vec<_> = snapshot.models().map(|m| m.name().to_string()).collect();
        assert_eq!(listed, ["on", "mixed"]);
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
    fn vertex_models_get_their_publisher_s_paths_for_chat_embeddings_and_count_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let file = service_account_file(dir.path());
        let yaml = format!(
            r#"_format_version: "1"
provider_keys:
  - {{display_name: v, provider: vertex, project: p1, location: us-east5, api_base: "http://127.0.0.1:9", credentials_file: {}}}
models:
  - {{display_name: embed, provider: vertex, model_name: text-embedding-005, provider_key: v}}
  - {{display_name: claude, provider: vertex, model_name: "claude-sonnet-4@20250514", provider_key: v}}
"#,
            file.display()
        );
        let snapshot = Snapshot::from_resources(&parse(&yaml));
        let base = "http://127.0.0.1:9/v1/projects/p1/locations/us-east5/publishers";
        let embed = direct(&snapshot, "embed");
        let uri = |endpoint| embed.uris.get(endpoint).unwrap().to_string();
        assert_eq!(
            uri(Endpoint::Embeddings),
            format!("{base}/google/models/text-embedding-005:predict")
        );
        assert_eq!(
            uri(Endpoint::CountTokens),
            format!("{base}/google/models/text-embedding-005:countTokens")
        );
        assert!(embed.uris.get(Endpoint::Messages).is_none());
        let claude = direct(&snapshot, "claude");
        assert_eq!(
            claude.uris.get(Endpoint::Messages).unwrap().to_string(),
            format!("{base}/anthropic/models/claude-sonnet-4%4020250514:rawPredict")
        );
        assert_eq!(
            claude.uris.get(Endpoint::CountTokens).unwrap().to_string(),
            format!("{base}/anthropic/models/count-tokens:rawPredict")
        );
        assert!(claude.uris.get(Endpoint::Embeddings).is_none());
    }

    #[test]
    fn bedrock_models_get_converse_paths_a_signer_and_no_credential_header() {
        let yaml = r#"_format_version: "1"
provider_keys:
  - display_name: b
    provider: bedrock
    region: us-west-2
    access_key_id: AKIDEXAMPLE
    secret_access_key: wJalrXUtnFEMI-secret
models:
  - {display_name: claude, provider: bedrock, model_name: "anthropic.claude-3-5-sonnet-20240620-v1:0", provider_key: b}
"#;
        let resources = parse(yaml);
        let snapshot = Snapshot::from_resources(&resources);
        let claude = direct(&snapshot, "claude");
        let base = "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0";
        assert_eq!(
            claude
                .uris
                .get(Endpoint::ChatCompletions)
                .unwrap()
                .to_string(),
            format!("{base}/converse")
        );
        assert_eq!(
            claude.uris.stream().unwrap().to_string(),
            format!("{base}/converse-stream")
        );
        assert_eq!(
            claude.uris.get(Endpoint::Embeddings).unwrap().to_string(),
            format!("{base}/invoke")
        );
        assert!(claude.uris.get(Endpoint::Messages).is_none());
        assert!(claude.provider.headers().is_empty());
        assert!(claude.provider.signer.is_some());
        assert_eq!(claude.provider.error_secret(), Some("wJalrXUtnFEMI-secret"));
        assert!(claude.provider.health_check.is_none());
    }

    #[test]
    fn gemini_models_get_method_paths_and_the_goog_api_key_header() {
        let yaml = r#"_format_version: "1"
provider_keys:
  - display_name: g
    provider: gemini
    api_key: AIza-secret
  - display_name: g2
    provider: gemini
    api_base: http://127.0.0.1:9/v1beta?tenant=t1
models:
  - {display_name: flash, provider: gemini, model_name: gemini-2.5-flash, provider_key: g}
  - {display_name: named, provider: gemini, model_name: models/text-embedding-004, provider_key: g2}
"#;
        let resources = parse(yaml);
        let snapshot = Snapshot::from_resources(&resources);
        let flash = direct(&snapshot, "flash");
        let base = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash";
        assert_eq!(
            flash
                .uris
                .get(Endpoint::ChatCompletions)
                .unwrap()
                .to_string(),
            format!("{base}:generateContent")
        );
        assert_eq!(
            flash.uris.stream().unwrap().to_string(),
            format!("{base}:streamGenerateContent?alt=sse")
        );
        assert_eq!(
            flash.uris.get(Endpoint::Embeddings).unwrap().to_string(),
            format!("{base}:batchEmbedContents")
        );
        assert_eq!(
            flash.uris.get(Endpoint::CountTokens).unwrap().to_string(),
            format!("{base}:countTokens")
        );
        assert!(flash.uris.get(Endpoint::Messages).is_none());
        assert_eq!(flash.provider.headers()["x-goog-api-key"], "AIza-secret");
        assert!(flash.provider.headers()["x-goog-api-key"].is_sensitive());
        assert!(!flash.provider.headers().contains_key("authorization"));
        let named = direct(&snapshot, "named");
        assert_eq!(
            named.uris.stream().unwrap().to_string(),
            "http://127.0.0.1:9/v1beta/models/text-embedding-004:streamGenerateContent?tenant=t1&alt=sse"
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
        let headers = &azure.provider.headers();
        assert_eq!(headers["api-key"], "azure-secret");
        assert!(headers["api-key"].is_sensitive());
        assert!(!headers.contains_key("authorization"));
        assert_eq!(headers["openai-organization"], "org-1");

        let openai = direct(&snapshot, "o");
        assert_eq!(
            openai.uris.get(Endpoint::Completions).unwrap().to_string(),
            "http://gw.local/v1/completions?tenant=t1"
        );
        assert_eq!(openai.provider.headers()["authorization"], "Bearer sk-x");
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
}
