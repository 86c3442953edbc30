//! Test and benchmark support for aisix: the one mock provider that the end-to-end tests
//! (`e2e/`) script and the saturation harness (`benches/`) drives. Never a dependency of the
//! product crates; the gateway's offline `mock` provider is a product feature and lives there.

pub mod mock;
