//! The LLM gateway: OpenAI-compatible endpoints in front of configured providers, with
//! authentication, model groups (retries, fallback, cooldown), per-worker upstream pools, SSE
//! relay and usage accounting. Folders follow a request's life and are layered, arrows running
//! one way: relay → route → provider → request → snapshot → target, limit, upstream, wire
//! (`docs/architecture.md`).

// The `test-hooks` feature compiles in `/__aisix/test/advance-clock`, which moves the
// limiter's clock. No build a user can run may carry it.
#[cfg(all(feature = "test-hooks", not(debug_assertions)))]
compile_error!(
    "the `test-hooks` feature is for debug test builds only; a release build must not contain the clock hook"
);

mod account;
#[cfg(test)]
mod attempt_tests;
mod endpoint;
mod error;
mod factory;
mod health;
pub mod limit;
mod mask;
mod models;
pub mod otel;
mod pieces;
mod pool_api;
mod provider;
mod relay;
mod request;
mod route;
mod service;
mod snapshot;
mod stored;
mod stored_shared;
mod target;
#[cfg(feature = "test-hooks")]
mod test_hooks;
#[cfg(test)]
mod testing;
mod upstream;
pub mod wire;

pub use endpoint::Endpoint;
pub use error::{Allow, AuthFailure, ErrorKind, GatewayError, Side};
pub use factory::{GatewayFactory, GatewayInitError};
pub use pool_api::{UpstreamError, UpstreamLease, UpstreamPool};
pub use relay::body::GatewayBody;
pub use service::Gateway;
pub use snapshot::Snapshot;
pub use target::status::{Health, ModelStatus};
