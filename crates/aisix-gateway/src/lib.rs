//! The LLM gateway: OpenAI- and Anthropic-compatible endpoints in front of configured providers,
//! with authentication, routing, per-worker upstream pools, SSE relay and usage accounting.

mod body;
mod error;
mod factory;
mod health;
mod service;

pub use body::GatewayBody;
pub use error::{ErrorKind, GatewayError, Side};
pub use factory::GatewayFactory;
pub use service::Gateway;
