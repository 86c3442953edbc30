//! The resources as the request path reads them: models by name, API keys by hash, upstream
//! targets with their credentials ready to send. Built once per load; swapped whole on reload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use aisix_config::{KeyHash, ModelPattern, ProviderKey, ProviderKind, Resources, TimeoutOverrides};
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use crate::egress::{Egress, Route};
use crate::endpoint::Endpoint;

use crate::wire::openai::json_string;

/// One loaded configuration. Workers read it through an `ArcSwap` without locking.
#[derive(Debug, Default)]
pub struct Snapshot {
    // Configured names only: a fixed-key fast hash is safe, nothing a client sends is inserted.
    models: HashMap<String, Arc<ModelRoute>, foldhash::fast::FixedState>,
    /// Models in file order, for `/v1/models`.
    model_order: Vec<Arc<ModelRoute>>,
    // SHA-256 digests of configured keys: a fixed-key fast hash is safe here too.
    keys: HashMap<KeyHash, ApiKeyEntry, foldhash::fast::FixedState>,
}

/// Where a model's requests go.
#[derive(Debug)]
pub struct ModelRoute {
    /// The name clients send.
    pub name: Arc<str>,
    /// The upstream's name for it.
    pub upstream_model: String,
    /// `upstream_model` as a JSON string literal, ready to splice into a body; `None` when the
    /// body's `model` is left as the client sent it (Azure reads the deployment from the path).
    pub upstream_model_json: Option<Bytes>,
    /// The model's own deadlines.
    pub timeouts: TimeoutOverrides,
    /// The upstream URI of each endpoint: the provider key's, or the model's own (Azure).
    pub uris: Arc<EndpointUris>,
    pub target: Arc<Target>,
}

/// An upstream endpoint with its credential.
#[derive(Debug)]
pub struct Target {
    /// The provider key's display name (a metric label; never the key).
    pub name: Arc<str>,
    pub provider: ProviderKind,
    /// The provider key's `api_base` joined with each endpoint's path, parsed once.
    pub uris: Arc<EndpointUris>,
    /// Headers every request to this provider carries: its credential (`Authorization: Bearer`,
    /// or `api-key` for Azure) and its static `headers`, all marked sensitive so hyper never
    /// logs them.
    pub headers: HeaderMap,
    /// The provider key itself, to scrub it from the error bodies the provider sends back.
    pub secret: Option<Box<str>>,
    /// Whether streams ask for `stream_options.include_usage`.
    pub stream_usage: bool,
    /// Directly, or through the proxy the environment names.
    pub(crate) route: Route,
}

/// The upstream URI of each proxied endpoint.
#[derive(Debug, Default)]
pub struct EndpointUris {
    chat_completions: Option<Uri>,
    completions: Option<Uri>,
    embeddings: Option<Uri>,
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
        }
    }

    /// An Azure OpenAI deployment's URIs:
    /// `{api_base}/openai/deployments/{deployment}/{endpoint}?api-version={version}`.
    fn azure(api_base: &str, deployment: &str, api_version: &str) -> Self {
        Self::new(
            api_base,
            &format!("/openai/deployments/{deployment}"),
            Some(&format!("api-version={api_version}")),
        )
    }

    /// The URI for `endpoint`; `None` for endpoints that are never proxied or a base that is
    /// not a valid URI (a `mock` provider's empty base).
    pub fn get(&self, endpoint: Endpoint) -> Option<&Uri> {
        match endpoint {
            Endpoint::ChatCompletions => self.chat_completions.as_ref(),
            Endpoint::Completions => self.completions.as_ref(),
            Endpoint::Embeddings => self.embeddings.as_ref(),
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
}

impl ApiKeyEntry {
    pub fn allows(&self, model: &str) -> bool {
        self.allowed.iter().any(|p| p.matches(model))
    }
}

impl Snapshot {
    /// Builds the lookup tables with every provider reached directly.
    pub fn from_resources(resources: &Resources) -> Self {
        Self::build(resources, &Egress::direct())
    }

    /// Builds the lookup tables; `egress` gives each provider's route (direct or a proxy).
    pub(crate) fn build(resources: &Resources, egress: &Egress) -> Self {
        let targets: Vec<Arc<Target>> = resources
            .provider_keys
            .iter()
            .map(|key| Arc::new(Target::new(key, egress)))
            .collect();

        let mut models = HashMap::with_capacity_and_hasher(
            resources.models.len(),
            foldhash::fast::FixedState::default(),
        );
        let mut model_order = Vec::with_capacity(resources.models.len());
        let key_of = |index: usize| resources.provider_keys.get(index);
        for model in &resources.models {
            let Some(target) = targets.get(model.provider_key_index) else {
                continue;
            };
            let (uris, upstream_model_json) =
                match (target.provider, &key_of(model.provider_key_index)) {
                    (ProviderKind::AzureOpenAi, Some(key)) => (
                        Arc::new(EndpointUris::azure(
                            &key.api_base,
                            &model.model_name,
                            key.api_version.as_deref().unwrap_or_default(),
                        )),
                        None,
                    ),
                    _ => (target.uris.clone(), Some(json_string(&model.model_name))),
                };
            let route = Arc::new(ModelRoute {
                name: model.display_name.as_str().into(),
                upstream_model: model.model_name.clone(),
                upstream_model_json,
                timeouts: model.timeouts,
                uris,
                target: target.clone(),
            });
            models.insert(model.display_name.clone(), route.clone());
            model_order.push(route);
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
                    },
                )
            })
            .collect();

        Self {
            models,
            model_order,
            keys,
        }
    }

    pub fn model(&self, name: &str) -> Option<&Arc<ModelRoute>> {
        self.models.get(name)
    }

    pub fn models(&self) -> impl Iterator<Item = &Arc<ModelRoute>> {
        self.model_order.iter()
    }

    pub fn api_key(&self, hash: &KeyHash) -> Option<&ApiKeyEntry> {
        self.keys.get(hash)
    }
}

impl Target {
    fn new(key: &ProviderKey, egress: &Egress) -> Self {
        let (uris, auth_header, auth_value) = match key.provider {
            ProviderKind::AzureOpenAi => (
                EndpointUris::default(),
                HeaderName::from_static("api-key"),
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
        // The route depends only on the scheme and host, the same for every endpoint.
        let route = key
            .api_base
            .parse::<Uri>()
            .map_or(Route::Direct, |uri| egress.route(&uri));
        Self {
            name: key.display_name.as_str().into(),
            provider: key.provider,
            uris: Arc::new(uris),
            headers,
            secret: key.api_key.as_ref().map(|k| k.expose().into()),
            stream_usage: key.stream_usage,
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
}

struct Built {
    source: Arc<Resources>,
    snapshot: Arc<Snapshot>,
}

impl SnapshotCache {
    pub(crate) fn new(published: &ArcSwap<Resources>, egress: &Egress) -> Self {
        let source = published.load_full();
        let snapshot = Arc::new(Snapshot::build(&source, egress));
        Self {
            current: ArcSwap::from_pointee(Built { source, snapshot }),
        }
    }

    /// The snapshot of the resources published now, built here if this worker has not yet.
    pub(crate) fn get(&self, published: &ArcSwap<Resources>, egress: &Egress) -> Arc<Snapshot> {
        let source = published.load();
        let cached = self.current.load();
        if Arc::ptr_eq(&cached.source, &source) {
            return cached.snapshot.clone();
        }
        let snapshot = Arc::new(Snapshot::build(&source, egress));
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

    fn resources(model: &str) -> Resources {
        let yaml = format!(
            "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: mock}}]\nmodels: [{{display_name: {model}, provider: mock, model_name: m, provider_key: p}}]\n"
        );
        aisix_config::parse_resources(&yaml, std::path::Path::new("r.yaml"), &|_| None)
            .unwrap_or_default()
    }

    #[test]
    fn a_stale_rebuild_finishing_last_is_replaced_by_the_next_request() {
        let egress = Egress::direct();
        let published = ArcSwap::from_pointee(resources("old"));
        let cache = SnapshotCache::new(&published, &egress);
        let old_source = published.load_full();
        assert!(cache.get(&published, &egress).model("old").is_some());

        published.store(Arc::new(resources("new")));
        assert!(cache.get(&published, &egress).model("new").is_some());
        // A request that loaded the old resources before the reload stores its rebuild last.
        cache.current.store(Arc::new(Built {
            snapshot: Arc::new(Snapshot::build(&old_source, &egress)),
            source: old_source,
        }));
        let snapshot = cache.get(&published, &egress);
        assert!(snapshot.model("new").is_some() && snapshot.model("old").is_none());
        assert!(Arc::ptr_eq(
            &cache.get(&published, &egress),
            &cache.get(&published, &egress)
        ));
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
        let resources =
            aisix_config::parse_resources(yaml, std::path::Path::new("r.yaml"), &|_| None).unwrap();
        let snapshot = Snapshot::from_resources(&resources);
        let azure = snapshot.model("a").unwrap();
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
        assert!(
            azure.upstream_model_json.is_none(),
            "Azure takes the deployment from the path"
        );
        let headers = &azure.target.headers;
        assert_eq!(headers["api-key"], "azure-secret");
        assert!(headers["api-key"].is_sensitive());
        assert!(!headers.contains_key("authorization"));
        assert_eq!(headers["openai-organization"], "org-1");

        let openai = snapshot.model("o").unwrap();
        assert_eq!(
            openai.uris.get(Endpoint::Completions).unwrap().to_string(),
            "http://gw.local/v1/completions?tenant=t1"
        );
        assert_eq!(openai.target.headers["authorization"], "Bearer sk-x");
    }
}
