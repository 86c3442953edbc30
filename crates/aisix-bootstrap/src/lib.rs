//! The serving core: resolves the serving plan, binds listeners, runs thread-per-core workers
//! (or one shared runtime), terminates TLS, supervises workers and drains on shutdown. It knows
//! nothing about models or tokens: each worker asks a [`ServiceFactory`] for its service.

mod conn;
mod listen;
mod plan;
mod server;
mod service;
mod shutdown;
mod tls;
mod worker;

pub use listen::{BindError, BoundListeners, bind};
pub use plan::{Mode, ServingPlan, WorkersSource};
pub use server::{ServeSettings, Server, StartError, Stopped};
pub use service::{ServiceFactory, WorkerContext};
pub use shutdown::Readiness;
pub use tls::{TlsError, load_tls};
