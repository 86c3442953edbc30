//! Model groups in the resources file: the routing block as AISIX writes it loads with its
//! defaults, and every mistake (unknown or nested targets, cycles, empty groups, bad values) is
//! reported with its path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::path::Path;
use std::time::Duration;

use aisix_config::{
    ConfigErrors, Continuation, FallbackError, Resources, Strategy, WhenAllUnavailable,
    parse_resources,
};

fn parse(yaml: &str) -> Result<Resources, ConfigErrors> {
    parse_resources(yaml, Path::new("resources.yaml"), &|_| None)
}

/// Each error as `path: message`.
fn errors(models: &str) -> Vec<String> {
    let errors = parse(&with_models(models)).expect_err("expected errors");
    errors
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect()
}

fn with_models(models: &str) -> String {
    format!(
        r#"_format_version: "1"
provider_keys:
  - {{display_name: p, provider: openai}}
models:
  - {{display_name: primary, provider: openai, model_name: m1, provider_key: p}}
  - {{display_name: backup, provider: openai, model_name: m2, provider_key: p}}
{models}"#
    )
}

#[test]
fn a_group_in_aisix_shape_loads_with_every_field() {
    let resources = parse(&with_models(
        r#"  - display_name: chat
    timeout: 30000
    first_token_timeout: 10000
    routing:
      strategy: round_robin
      targets:
        - { model: primary, priority: 1 }
        - { model: backup, priority: 0, weight: 3 }
      retries: 2
      max_fallbacks: 1
      retry_on_429: true
      fallback_on_statuses: [400, 413]
      when_all_unavailable: try_anyway
      continue_on_cut: true
"#,
    ))
    .unwrap();
    assert_eq!(resources.models.len(), 2, "groups are not direct models");
    let group = &resources.groups[0];
    assert_eq!(group.display_name, "chat");
    assert_eq!(group.timeouts.total, Some(Duration::from_secs(30)));
    assert_eq!(group.timeouts.first_token, Some(Duration::from_secs(10)));
    let routing = &group.routing;
    assert_eq!(routing.strategy, Strategy::RoundRobin);
    assert_eq!(routing.targets.len(), 2);
    assert_eq!(routing.targets[0].model, "primary");
    assert_eq!(routing.targets[0].priority, 1);
    assert_eq!(routing.targets[0].weight, 1);
    assert_eq!(routing.targets[1].model_index, 1);
    assert_eq!(routing.targets[1].weight, 3);
    assert_eq!(routing.retries, 2);
    assert_eq!(routing.max_fallbacks, Some(1));
    assert!(routing.retry_on_429 && routing.continue_on_cut);
    assert_eq!(routing.fallback_on_statuses, [400, 413]);
    assert_eq!(routing.when_all_unavailable, WhenAllUnavailable::TryAnyway);
}

#[test]
fn a_group_without_options_gets_the_defaults() {
    let resources = parse(&with_models(
        "  - {display_name: chat, routing: {targets: [{model: backup}]}}\n",
    ))
    .unwrap();
    let routing = &resources.groups[0].routing;
    assert_eq!(routing.strategy, Strategy::Failover);
    assert_eq!(routing.retries, 0);
    assert_eq!(routing.max_fallbacks, None);
    assert!(!routing.retry_on_429 && !routing.continue_on_cut);
    assert!(routing.fallback_on_statuses.is_empty());
    assert_eq!(routing.when_all_unavailable, WhenAllUnavailable::Fail);
    assert_eq!(routing.targets[0].model_index, 1);
}

#[test]
fn unknown_targets_nested_groups_and_cycles_are_refused_with_their_paths() {
    assert_eq!(
        errors(
            r#"  - {display_name: a, routing: {targets: [{model: primary}, {model: nope}]}}
  - {display_name: b, routing: {targets: [{model: a}]}}
  - {display_name: c, routing: {targets: [{model: c}]}}
  - {display_name: d, routing: {targets: [{model: primary}, {model: primary}]}}
"#
        ),
        [
            "models[2].routing.targets[1].model: no model named \"nope\"",
            "models[3].routing.targets[0].model: names the group \"a\": targets are direct models (groups do not nest, so they cannot form a cycle)",
            "models[4].routing.targets[0].model: names this group itself: targets are direct models",
            "models[5].routing.targets[1].model: \"primary\" is already a target of this group (at models[5].routing.targets[0])",
        ]
    );
}

#[test]
fn empty_groups_and_bad_values_are_each_reported() {
    assert_eq!(
        errors(
            r#"  - {display_name: empty, routing: {targets: []}}
  - {display_name: none, routing: {}}
  - display_name: bad
    first_token_timeout: 0
    provider: openai
    routing:
      strategy: random
      retries: 11
      max_fallbacks: -1
      retry_on_429: sometimes
      fallback_on_statuses: [200, 503]
      when_all_unavailable: wait
      targets: [{model: primary, weight: 0, priority: high, share: 2}]
"#
        ),
        [
            "models[2].routing.targets: must list at least one target",
            "models[3].routing.targets: is required",
            "models[4].first_token_timeout: must be at least 1ms",
            "models[4].routing.strategy: unknown value \"random\" (expected one of: failover, round_robin, least_busy, least_latency)",
            "models[4].routing.targets[0].priority: expected an integer from -1000 to 1000",
            "models[4].routing.targets[0].weight: expected an integer from 1 to 1000",
            "models[4].routing.targets[0].share: unknown field (expected one of: model, priority, weight)",
            "models[4].routing.retries: expected an integer from 0 to 10",
            "models[4].routing.max_fallbacks: expected an integer from 0 to 1000",
            "models[4].routing.retry_on_429: expected true or false",
            "models[4].routing.fallback_on_statuses[0]: expected an integer from 400 to 599",
            "models[4].routing.when_all_unavailable: unknown value \"wait\" (expected one of: fail, try_anyway)",
            "models[4].provider: unknown field (expected one of: display_name, disabled, timeout, connect_timeout, first_token_timeout, stream_idle_timeout, stream_timeout, rate_limit, routing)",
        ]
    );
}

#[test]
fn groups_and_direct_models_share_one_namespace() {
    assert_eq!(
        errors("  - {display_name: primary, routing: {targets: [{model: backup}]}}\n"),
        ["models[2].display_name: duplicate name \"primary\" (first at models[0])"]
    );
}

#[test]
fn fallback_on_errors_names_error_kinds_and_refuses_unknown_ones() {
    let resources = parse(&with_models(
        "  - {display_name: chat, routing: {targets: [{model: backup}], fallback_on_errors: [context_length_exceeded, content_filter]}}\n",
    ))
    .unwrap();
    assert_eq!(
        resources.groups[0].routing.fallback_on_errors,
        [
            FallbackError::ContextLengthExceeded,
            FallbackError::ContentFilter
        ]
    );
    let defaults = parse(&with_models(
        "  - {display_name: chat, routing: {targets: [{model: backup}]}}\n",
    ))
    .unwrap();
    assert!(defaults.groups[0].routing.fallback_on_errors.is_empty());
    assert_eq!(
        errors(
            "  - {display_name: chat, routing: {targets: [{model: backup}], fallback_on_errors: [too_long]}}\n"
        ),
        [
            "models[2].routing.fallback_on_errors[0]: unknown value \"too_long\" (expected one of: context_length_exceeded, content_filter)"
        ]
    );
}

#[test]
fn continuation_defaults_by_provider_kind_and_refuses_unknown_methods() {
    let yaml = r#"_format_version: "1"
provider_keys:
  - {display_name: oa, provider: openai, api_base: "http://a.example/v1"}
  - {display_name: an, provider: anthropic, api_base: "http://b.example"}
models:
  - {display_name: gpt, provider: openai, model_name: g, provider_key: oa}
  - {display_name: claude, provider: anthropic, model_name: c, provider_key: an}
  - {display_name: vllm, provider: openai, model_name: v, provider_key: oa, continuation: continue_final_message}
  - {display_name: deepseek, provider: openai, model_name: d, provider_key: oa, continuation: prefix}
"#;
    let resources = parse(yaml).unwrap();
    let methods: Vec<Continuation> = resources.models.iter().map(|m| m.continuation).collect();
    assert_eq!(
        methods,
        [
            Continuation::None,
            Continuation::Prefill,
            Continuation::ContinueFinalMessage,
            Continuation::Prefix
        ]
    );
    let bad = yaml.replace("continuation: prefix", "continuation: resume");
    let errors: Vec<String> = parse(&bad)
        .unwrap_err()
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    assert_eq!(
        errors,
        [
            "models[3].continuation: unknown value \"resume\" (expected one of: prefill, continue_final_message, prefix, none)"
        ]
    );
}
