//! The build a user runs: `cargo build --release`, built once here (scripts/test.sh builds it
//! first, so this costs nothing more in CI). It carries no test hook, and it serves as the
//! container runs it: non-root, on a read-only root filesystem, with no shell.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, release_binary};

const CRASH_HOOK_PATH: &str = "/__aisix/test/crash-worker";

#[test]
fn the_release_binary_contains_no_test_hook() {
    let bytes = std::fs::read(release_binary()).unwrap();
    // Every hook (crash-worker, stall-worker) lives under this prefix.
    let needle = b"/__aisix/test/";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the release binary carries a test-only hook"
    );
}

both_modes! {
    async fn the_release_binary_answers_the_crash_hook_path_with_404_and_keeps_serving(mode: Mode) {
        let mut gateway = Gateway::start(&GatewayConfig::new(mode).binary(release_binary()));
        let reply = client::get(gateway.addr(), CRASH_HOOK_PATH).await;
        assert_eq!(reply.status, 404, "{}", reply.text());
        assert!(gateway.try_exit().is_none(), "{}", gateway.logs());
        assert_eq!(client::get(gateway.addr(), "/livez").await.status, 200);
    }
}
