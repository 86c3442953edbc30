//! The serving core: resolves the serving plan, binds listeners, runs thread-per-core workers
//! (or one shared runtime), terminates TLS, supervises workers and drains on shutdown. It knows
//! nothing about models or tokens: each worker asks a [`ServiceFactory`] for its service.

// The `test-hooks` feature compiles in `/__aisix/test/crash-worker`, which panics a worker so
// the end-to-end tests can prove supervision. No build a user can run may carry it.
#[cfg(all(feature = "test-hooks", not(debug_assertions)))]
compile_error!(
    "the `test-hooks` feature is for debug test builds only; a release build must not contain the worker-crash hook"
);

mod affinity;
mod balance;
mod conn;
mod listen;
mod liveness;
mod plan;
#[cfg(feature = "poll-probe")]
pub mod poll_probe;
mod server;
mod service;
mod shutdown;
mod tls;
mod worker;

/// The proxy listener's TLS configuration, shared by every worker and swapped on reload.
pub use axum_server::tls_rustls::RustlsConfig;
pub use listen::{BindError, BoundListeners, bind};
pub use liveness::Liveness;
pub use plan::{Mode, ServingPlan, WorkersSource};
pub use server::{ServeSettings, Server, StartError, Stopped};
pub use service::{ServiceFactory, WorkerContext};
pub use shutdown::Readiness;
pub use tls::{TlsError, load_tls, pem_certs, pem_key, tls_server_config};
