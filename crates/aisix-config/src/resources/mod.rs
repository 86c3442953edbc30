//! The resources file (`resources.yaml`): provider keys, models (direct models and groups) and
//! API keys (with their limits, prices and budgets), read strictly with `${VAR}` interpolation
//! and checked across entries. Serving them is the gateway's job.

mod cooldown;
mod diff;
mod documents;
mod group;
mod interpolate;
mod key;
mod limits;
mod load;
mod pattern;
mod reader;
mod rfc3339;
mod types;
mod vertex;

pub use diff::{CollectionDiff, ResourcesDiff};
pub use documents::{COLLECTIONS, document_key, document_place, parse_documents};
pub use group::{FallbackError, GroupTarget, ModelGroup, Routing, Strategy, WhenAllUnavailable};
pub use key::{KeyHash, hash_key};
pub use limits::{BudgetPeriod, Cost, RateLimit, SpendBudget, SpendingPolicy, Usd};
pub use load::{LoadedResources, load_resources, load_resources_file, parse_resources, sha256_hex};
pub use pattern::ModelPattern;
pub use types::{
    ApiKey, Continuation, DEFAULT_ANTHROPIC_VERSION, HealthCheck, Model, OutputTokensField,
    ProviderKey, ProviderKind, Resources, Secret,
};
pub use vertex::{CREDENTIALS_ENV, ServiceAccount, VertexKey, default_api_base as vertex_api_base};
