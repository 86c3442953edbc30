//! Deadlines while a group moves among its targets: an error status's body is read by the
//! first-byte deadline, not the whole request's, so a slow one still leaves time to fall over;
//! and nothing is called after the request's own deadline, on the `fallback_on_statuses` path
//! too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::mock::Reply as Mock;
use aisix_e2e::routing::Rig;
use serde_json::json;

fn served_by(reply: &aisix_e2e::client::Reply) -> &str {
    reply.header("x-aisix-served-by").unwrap_or_default()
}

both_modes! {
    async fn an_error_status_whose_body_dawdles_still_falls_over(mode: Mode) {
        let groups = "  - display_name: chat\n    routing:\n      targets: [{model: primary}, {model: backup}]\n";
        let rig = Rig::start(mode, groups, &[]);
        // The head at once, its body after longer than the whole request may take (20 s).
        rig.primary.enqueue(
            Mock::openai_error(500, "server_error", "boom").frame_delay(Duration::from_secs(60)),
        );
        let reply = rig.chat("chat", false, "dawdling-error", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"), "{}", reply.text());
        let line = rig.gateway.access_line("dawdling-error");
        assert_eq!(line["attempts"][0]["status"], 500, "{line}");
    }
}

both_modes! {
    async fn a_listed_status_after_the_request_deadline_is_not_followed_by_another_call(mode: Mode) {
        let groups = "  - display_name: lenient\n    timeout: 2000\n    routing:\n      targets: [{model: primary}, {model: backup}]\n      fallback_on_statuses: [400]\n";
        let rig = Rig::start(mode, groups, &[]);
        // A 400 whose head comes before the deadline and whose body would come long after it.
        rig.primary.enqueue(
            Mock::openai_error(400, "invalid_request_error", "no")
                .delay_head(Duration::from_millis(1500))
                .frame_delay(Duration::from_secs(60)),
        );
        let reply = rig.chat("lenient", false, "expired", json!({})).await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        assert_eq!(rig.backup.request_count(), 0, "nothing is called after the deadline");
        // Within the deadline, the listed status falls over as before.
        rig.primary.enqueue(Mock::openai_error(400, "invalid_request_error", "no"));
        let reply = rig.chat("lenient", false, "in-time", json!({})).await;
        assert_eq!((reply.status.as_u16(), served_by(&reply)), (200, "backup"));
    }
}
