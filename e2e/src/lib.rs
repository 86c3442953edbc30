//! Black-box end-to-end tests for aisix: the real binary against scriptable mock providers.
// A test harness fails loudly: a broken precondition is a failed test, not a handled error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod client;
pub mod gateway;
/// The scriptable mock provider, from the workspace's one mock library.
pub use aisix_testkit::mock;
pub mod limits;
pub mod prom;
pub mod resources;
pub mod routing;
pub mod sdk;
pub mod third_party;
pub mod tinyproxy;
pub mod tls;

/// Declares one end-to-end test per serving mode: `name::thread_per_core` and `name::shared`,
/// so a CI leg can run one mode with `cargo test -p aisix-e2e -- ::shared`. Attributes before
/// `async fn` go on both tests (`#[ignore = "why"]`).
#[macro_export]
macro_rules! both_modes {
    ($(#[$meta:meta])* async fn $name:ident($mode:ident: Mode) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($mode: $crate::gateway::Mode) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn thread_per_core() {
                run($crate::gateway::Mode::ThreadPerCore).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn shared() {
                run($crate::gateway::Mode::Shared).await
            }
        }
    };
}
