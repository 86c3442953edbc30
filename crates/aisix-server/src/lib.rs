//! The composition root of `aisix`: command line, configuration, the control thread (signals,
//! drain), and the serving core wired to the gateway.

mod admin;
mod cli;
mod control;
mod etcd;
mod limits;
mod metrics;
mod run;

pub use cli::main;
pub use run::{RunError, serve};
