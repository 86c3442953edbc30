//! The resources file (`resources.yaml`): provider keys, models (direct and groups) and API keys, read strictly with
//! `${VAR}` interpolation and checked across entries. Serving them is the gateway's job.

mod group;
mod interpolate;
mod key;
mod load;
mod pattern;
mod reader;
mod rfc3339;
mod types;

pub use group::{GroupTarget, ModelGroup, Routing, Strategy, WhenAllUnavailable};
pub use key::{KeyHash, hash_key};
pub use load::{load_resources, parse_resources};
pub use pattern::ModelPattern;
pub use types::{ApiKey, Model, ProviderKey, ProviderKind, Resources, Secret};
