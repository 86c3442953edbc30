//! The resources as the request path reads them: models by name, API keys by hash, upstream
//! targets with their credentials ready to send. Built once per load; swapped whole on reload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aisix_config::{KeyHash, ModelPattern, ProviderKind, Resources};
use bytes::Bytes;
use http::{HeaderValue, Uri};

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
    /// `upstream_model` as a JSON string literal, ready to splice into a body.
    pub upstream_model_json: Bytes,
    pub timeout: Option<Duration>,
    pub target: Arc<Target>,
}

/// An upstream endpoint with its credential.
#[derive(Debug)]
pub struct Target {
    /// The provider key's display name (a metric label; never the key).
    pub name: Arc<str>,
    pub provider: ProviderKind,
    /// The provider key's `api_base` joined with each endpoint's path, parsed once.
    pub uris: EndpointUris,
    /// `Bearer <key>`, marked sensitive so it is never logged by hyper.
    pub authorization: Option<HeaderValue>,
}

/// The upstream URI of each proxied endpoint for one `api_base`.
#[derive(Debug)]
pub struct EndpointUris {
    chat_completions: Option<Uri>,
    completions: Option<Uri>,
    embeddings: Option<Uri>,
}

impl EndpointUris {
    fn new(api_base: &str) -> Self {
        let uri = |endpoint: Endpoint| {
            format!("{api_base}{}", endpoint.upstream_path())
                .parse()
                .ok()
        };
        Self {
            chat_completions: uri(Endpoint::ChatCompletions),
            completions: uri(Endpoint::Completions),
            embeddings: uri(Endpoint::Embeddings),
        }
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
    pub fn from_resources(resources: &Resources) -> Self {
        let targets: Vec<Arc<Target>> = resources
            .provider_keys
            .iter()
            .map(|key| {
                let authorization = key.api_key.as_ref().and_then(|secret| {
                    let mut value =
                        HeaderValue::try_from(format!("Bearer {}", secret.expose())).ok()?;
                    value.set_sensitive(true);
                    Some(value)
                });
                Arc::new(Target {
                    name: key.display_name.as_str().into(),
                    provider: key.provider,
                    uris: EndpointUris::new(&key.api_base),
                    authorization,
                })
            })
            .collect();

        let mut models = HashMap::with_capacity_and_hasher(
            resources.models.len(),
            foldhash::fast::FixedState::default(),
        );
        let mut model_order = Vec::with_capacity(resources.models.len());
        for model in &resources.models {
            let Some(target) = targets.get(model.provider_key_index) else {
                continue;
            };
            let route = Arc::new(ModelRoute {
                name: model.display_name.as_str().into(),
                upstream_model: model.model_name.clone(),
                upstream_model_json: json_string(&model.model_name),
                timeout: model.timeout,
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
