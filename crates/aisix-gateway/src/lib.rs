//! The LLM gateway: OpenAI-compatible endpoints in front of configured providers, with
//! authentication, model groups (retries, fallback, cooldown), per-worker upstream pools, SSE
//! relay and usage accounting.

mod account;
mod attempt;
mod auth;
mod body;
mod deadline;
mod egress;
mod endpoint;
mod error;
mod factory;
mod health;
mod inbound;
pub mod limit;
mod models;
mod provider;
mod relay;
mod route;
mod service;
mod snapshot;
mod stream;
mod upstream;
pub mod wire;

pub use body::GatewayBody;
pub use endpoint::Endpoint;
pub use error::{AuthFailure, ErrorKind, GatewayError, Side};
pub use factory::{GatewayFactory, GatewayInitError};
pub use service::Gateway;
pub use snapshot::Snapshot;
