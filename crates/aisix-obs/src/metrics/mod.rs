//! Metrics: one catalog of families ([`catalog`]), typed emits ([`emit`]) that go through a
//! thread-local handle cache, and the recorder that renders `/metrics` ([`Metrics`]).
//! Serving the page and the upkeep timer belong to the server.
//!
//! Wiring:
//!
//! ```
//! use std::time::Duration;
//! use aisix_obs::metrics::{Metrics, emit, labels::*};
//!
//! # fn main() -> Result<(), aisix_obs::metrics::MetricsError> {
//! // Startup (control thread): install once, publish the build.
//! let metrics = Metrics::install()?;
//! metrics.set_build_info("0.1.0", Mode::ThreadPerCore, 2);
//!
//! // First thing in each worker thread.
//! metrics.register_worker(Worker::Tpc(0));
//!
//! // Per connection and per request, on the worker.
//! let _conn = emit::worker_connection();
//! let in_flight = emit::request_started(Endpoint::ChatCompletions);
//! emit::request(
//!     &emit::RequestLabels {
//!         endpoint: Endpoint::ChatCompletions,
//!         api_key: "team-a",
//!         model: "gpt-4o",
//!         provider: "openai",
//!         status: StatusClass::from_status(200),
//!         outcome: Outcome::Success,
//!     },
//!     &emit::RequestFacts {
//!         duration: Duration::from_millis(850),
//!         overhead: Duration::from_micros(40),
//!         tokens: Some((12, 40)),
//!         ttft: None,
//!     },
//! );
//! drop(in_flight);
//!
//! // Scrape (metrics listener) and upkeep timer (control thread).
//! let page = metrics.render();
//! assert!(page.contains("aisix_requests_total{endpoint=\"chat_completions\""));
//! metrics.run_upkeep();
//! # Ok(())
//! # }
//! ```

pub mod cache;
pub mod catalog;
pub mod emit;
mod float_counter;
mod histogram;
mod in_flight;
pub mod labels;
mod recorder;
pub(crate) mod worker;

pub use recorder::{Metrics, MetricsError, MetricsRecorder};
pub use worker::set_current as set_current_worker;
