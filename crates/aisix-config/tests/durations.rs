//! Every duration key, bootstrap and resources, takes a humantime string (`30s`, `250ms`) as well
//! as the bare number it always took, which keeps its unit (seconds for `_secs` keys,
//! milliseconds for `_ms` and the unit-less resource keys).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use aisix_config::{Bootstrap, ConfigErrors, RateLimitBackend, load_bootstrap, parse_resources};

fn load(yaml: &str, vars: &[(&str, &str)]) -> Result<Bootstrap, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let env = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    load_bootstrap(Some(&path), env)
}

type Read = fn(&Bootstrap) -> Duration;

/// Each bootstrap duration key, the unit of its bare numbers, and where its value lands.
const KEYS: &[(&str, &str, Read)] = &[
    ("downstream.header_read_timeout_secs", "s", |b| {
        b.downstream.header_read_timeout
    }),
    ("downstream.request_body_timeout_secs", "s", |b| {
        b.downstream.request_body_timeout
    }),
    ("downstream.idle_timeout_secs", "s", |b| {
        b.downstream.idle_timeout.unwrap()
    }),
    ("downstream.sse_keepalive_interval_secs", "s", |b| {
        b.downstream.sse_keepalive_interval.unwrap()
    }),
    ("downstream.max_connection_age_secs", "s", |b| {
        b.downstream.max_connection_age.unwrap()
    }),
    ("upstream.connect_timeout_ms", "ms", |b| {
        b.upstream.timeouts.connect
    }),
    ("upstream.first_token_timeout_ms", "ms", |b| {
        b.upstream.timeouts.first_token
    }),
    ("upstream.stream_idle_timeout_ms", "ms", |b| {
        b.upstream.timeouts.stream_idle
    }),
    ("upstream.timeout_ms", "ms", |b| b.upstream.timeouts.total),
    ("upstream.pool_idle_timeout_secs", "s", |b| {
        b.upstream.pool_idle_timeout
    }),
    ("upstream.cooldown_window_ms", "ms", |b| {
        b.upstream.resilience.cooldown_window
    }),
    ("upstream.cooldown_ms", "ms", |b| {
        b.upstream.resilience.cooldown
    }),
    ("upstream.key_cooldown_ms", "ms", |b| {
        b.upstream.resilience.key_cooldown
    }),
    ("upstream.retry_after_max_ms", "ms", |b| {
        b.upstream.resilience.retry_after_max
    }),
    ("shutdown.readiness_grace_secs", "s", |b| {
        b.shutdown.readiness_grace
    }),
    ("shutdown.drain_timeout_secs", "s", |b| {
        b.shutdown.drain_timeout
    }),
    ("ratelimit.concurrency_ttl_secs", "s", |b| {
        b.ratelimit.concurrency_ttl
    }),
    ("responses_store.ttl_secs", "s", |b| b.responses_store.ttl),
];

/// `a.b.c: value` as nested YAML.
fn yaml_at(key: &str, value: &str) -> String {
    let mut yaml = String::new();
    let parts: Vec<&str> = key.split('.').collect();
    for (depth, part) in parts.iter().enumerate() {
        yaml.push_str(&"  ".repeat(depth));
        yaml.push_str(part);
        yaml.push(':');
        if depth + 1 == parts.len() {
            yaml.push_str(&format!(" {value}"));
        }
        yaml.push('\n');
    }
    yaml
}

fn env_var(key: &str) -> String {
    format!("AISIX_{}", key.to_uppercase().replace('.', "__"))
}

#[test]
fn the_table_above_lists_every_bootstrap_duration_key() {
    for key in aisix_config::bootstrap_keys() {
        // Keys that need their section's other keys to load are checked where those are
        // (limits and etcd_load tests).
        let needs_context = key == "ratelimit.redis.timeout_ms" || key == "etcd.dial_timeout_ms";
        if (key.ends_with("_secs") || key.ends_with("_ms")) && !needs_context {
            assert!(
                KEYS.iter().any(|(k, _, _)| *k == key),
                "{key} is not in KEYS"
            );
        }
    }
}

#[test]
fn every_bootstrap_duration_key_takes_a_humantime_string_in_the_file_and_the_environment() {
    for (key, _, read) in KEYS {
        let config =
            load(&yaml_at(key, "\"1m 30s\""), &[]).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(read(&config), Duration::from_secs(90), "{key} in the file");
        let config = load("", &[(&env_var(key), "90s")]).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            read(&config),
            Duration::from_secs(90),
            "{key} from {}",
            env_var(key)
        );
    }
}

#[test]
fn a_bare_number_keeps_the_unit_its_key_names() {
    for (key, unit, read) in KEYS {
        let config = load(&yaml_at(key, "7"), &[]).unwrap_or_else(|e| panic!("{key}: {e}"));
        let expected = match *unit {
            "s" => Duration::from_secs(7),
            _ => Duration::from_millis(7),
        };
        assert_eq!(read(&config), expected, "{key}");
        let config = load("", &[(&env_var(key), "7")]).unwrap();
        assert_eq!(read(&config), expected, "{key} from the environment");
    }
}

#[test]
fn the_redis_timeout_takes_a_humantime_string() {
    let config = load(
        "ratelimit:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1\n    timeout_ms: 1s\n",
        &[],
    )
    .unwrap();
    let RateLimitBackend::Redis(redis) = config.ratelimit.backend else {
        panic!("expected the redis backend");
    };
    assert_eq!(redis.timeout, Duration::from_secs(1));
    let errors = load(
        "ratelimit:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1\n    timeout_ms: 2m\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(
        errors.0[0].to_string().split(" (").next(),
        Some("ratelimit.redis.timeout_ms: must be at most 1m")
    );
}

#[test]
fn a_zero_string_turns_off_what_a_zero_number_turns_off() {
    let config = load(
        "downstream:\n  idle_timeout_secs: 0s\n  sse_keepalive_interval_secs: 0\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.downstream.idle_timeout, None);
    assert_eq!(config.downstream.sse_keepalive_interval, None);
}

#[test]
fn a_bad_duration_is_refused_with_its_path_and_without_its_value() {
    let errors = load(
        "upstream:\n  timeout_ms: soon\n  connect_timeout_ms: 500us\nshutdown:\n  drain_timeout_secs: -3\n",
        &[("AISIX_DOWNSTREAM__HEADER_READ_TIMEOUT_SECS", "250ms")],
    )
    .unwrap_err();
    let messages: Vec<(String, String)> = errors
        .iter()
        .map(|e| (e.path.clone(), e.message.clone()))
        .collect();
    let expect = |path: &str, message: &str| (path.to_owned(), message.to_owned());
    assert_eq!(
        messages,
        [
            expect("downstream.header_read_timeout_secs", "must be at least 1s"),
            expect("upstream.connect_timeout_ms", "must be at least 1ms"),
            expect(
                "upstream.timeout_ms",
                "expected a duration such as 30s or 250ms, or a whole number of milliseconds"
            ),
            expect(
                "shutdown.drain_timeout_secs",
                "expected a duration such as 30s or 250ms, or a whole number of seconds"
            ),
        ]
    );
    assert!(!errors.to_string().contains("soon"), "{errors}");
}

fn resources(yaml: &str, vars: &[(&str, &str)]) -> Result<aisix_config::Resources, ConfigErrors> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    parse_resources(yaml, Path::new("/etc/aisix/resources.yaml"), &env)
}

#[test]
fn model_and_group_timeouts_take_humantime_strings_and_bare_milliseconds() {
    let loaded = resources(
        r#"
_format_version: "1"
provider_keys:
  - {display_name: k, provider: openai}
models:
  - display_name: m
    provider: openai
    model_name: m
    provider_key: k
    timeout: 2m
    connect_timeout: 1500
    first_token_timeout: "10s"
    stream_idle_timeout: ${IDLE}
  - display_name: g
    timeout: 90s
    first_token_timeout: 250ms
    routing: {targets: [{model: m}]}
"#,
        &[("IDLE", "30s")],
    )
    .unwrap();
    let t = loaded.models[0].timeouts;
    assert_eq!(t.total, Some(Duration::from_secs(120)));
    assert_eq!(t.connect, Some(Duration::from_millis(1500)));
    assert_eq!(t.first_token, Some(Duration::from_secs(10)));
    assert_eq!(t.stream_idle, Some(Duration::from_secs(30)));
    let g = loaded.groups[0].timeouts;
    assert_eq!(g.total, Some(Duration::from_secs(90)));
    assert_eq!(g.first_token, Some(Duration::from_millis(250)));
}
