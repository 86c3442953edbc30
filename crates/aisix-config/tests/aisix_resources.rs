//! A resources file written for the AISIX gateway drives aisix: its per-model keys
//! (`stream_timeout`, `retries`, `cooldown`) are read and mapped to aisix's own settings, and
//! the ones aisix does not implement are refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::path::{Path, PathBuf};
use std::time::Duration;

use aisix_config::{
    ConfigErrors, CooldownOverrides, Resilience, Resources, load_resources, parse_resources,
};

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-openai".to_owned()),
        "UPSTREAM_HOST" => Some("api.openai.com".to_owned()),
        "E2E_CI_BOT_KEY" => Some("sk-ci-bot".to_owned()),
        _ => None,
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aisix-resources.yaml")
}

fn model<'r>(resources: &'r Resources, name: &str) -> &'r aisix_config::Model {
    resources
        .models
        .iter()
        .find(|m| m.display_name == name)
        .unwrap_or_else(|| panic!("no model {name}"))
}

#[test]
fn an_aisix_resources_file_loads_with_its_per_model_keys_mapped() {
    let resources = load_resources(&fixture(), &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resources.models.len(), 3);
    assert_eq!(resources.groups.len(), 1);
    assert_eq!(resources.api_keys.len(), 2);

    let gpt4o = model(&resources, "gpt-4o");
    assert_eq!(gpt4o.timeouts.total, Some(Duration::from_secs(60)));
    // AISIX's stream_timeout is the longest gap between stream chunks: stream_idle_timeout.
    assert_eq!(gpt4o.timeouts.stream_idle, Some(Duration::from_secs(10)));
    assert_eq!(gpt4o.retries, Some(2));
    assert_eq!(
        gpt4o.cooldown,
        CooldownOverrides {
            enabled: Some(true),
            cooldown: Some(Duration::from_secs(30)),
            retry_after_max: Some(Duration::from_secs(300)),
        }
    );

    let mini = model(&resources, "gpt-4o-mini");
    assert_eq!(mini.timeouts.stream_idle, Some(Duration::from_millis(300)));
    assert_eq!(mini.retries, None);
    assert!(!Resilience::default().with(&mini.cooldown).enabled);

    // stream_timeout: 0 falls back to the default, as in AISIX; honor_retry_after: false caps
    // what a Retry-After can add at nothing.
    let b = model(&resources, "gpt-4o-mini-b");
    assert_eq!(b.timeouts.stream_idle, None);
    let settings = Resilience::default().with(&b.cooldown);
    assert_eq!(settings.cooldown, Duration::from_secs(1));
    assert_eq!(settings.retry_after_max, Duration::ZERO);
    assert_eq!(
        settings.cooldown_failures,
        Resilience::default().cooldown_failures
    );

    assert_eq!(resources.groups[0].routing.retries, 1);
}

fn errors(models: &str) -> Vec<String> {
    let yaml = format!(
        "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: k, provider: openai}}\nmodels:\n{models}"
    );
    let result: Result<Resources, ConfigErrors> =
        parse_resources(&yaml, Path::new("/r.yaml"), &|_| None);
    result
        .expect_err("expected errors")
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect()
}

#[test]
fn aisix_model_fields_aisix_does_not_implement_are_refused_by_name() {
    assert_eq!(
        errors(
            "  - display_name: m\n    provider: openai\n    model_name: m\n    provider_key: k\n    allowed_cidrs: [10.0.0.0/8]\n    background_model_check: {enabled: true}\n    cooldown:\n      trigger_statuses: [429]\n      trigger_on_timeout: false\n"
        ),
        [
            "models[0].allowed_cidrs: is AISIX's client IP allowlist, which aisix does not implement",
            "models[0].background_model_check: is AISIX's background health check, which aisix does not implement",
            "models[0].cooldown.trigger_on_timeout: aisix always counts this failure toward a cooldown; only true is accepted",
            "models[0].cooldown.trigger_statuses: aisix counts 429 and 5xx answers toward a cooldown; a list per model is not supported",
        ]
    );
}

#[test]
fn stream_timeout_and_stream_idle_timeout_together_are_refused() {
    assert_eq!(
        errors(
            "  - {display_name: m, provider: openai, model_name: m, provider_key: k, stream_timeout: 5s, stream_idle_timeout: 5000}\n"
        ),
        [
            "models[0].stream_timeout: is AISIX's name for stream_idle_timeout: give one of them, not both"
        ]
    );
}

#[test]
fn retries_and_cooldown_values_are_checked_with_their_path() {
    assert_eq!(
        errors(
            "  - display_name: m\n    provider: openai\n    model_name: m\n    provider_key: k\n    retries: 11\n    cooldown: {enabled: maybe, default_seconds: soon, max_seconds: 0, colour: red}\n"
        ),
        [
            "models[0].retries: expected an integer from 0 to 10",
            "models[0].cooldown.enabled: expected true or false",
            "models[0].cooldown.default_seconds: expected a duration such as 30s or 250ms, or a whole number of seconds",
            "models[0].cooldown.max_seconds: must be at least 1s",
            "models[0].cooldown.colour: unknown field (expected one of: enabled, honor_retry_after, trigger_on_timeout, trigger_on_transport, default_seconds, max_seconds)",
        ]
    );
}
