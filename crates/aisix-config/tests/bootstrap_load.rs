//! Loading the bootstrap config: defaults, file, environment overlay, and strict errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::io::Write;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use aisix_config::{Balance, Bootstrap, ConfigErrors, Origin, load_bootstrap};

fn write_config(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    (dir, path)
}

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn load(yaml: &str, vars: &[(&str, &str)]) -> Result<Bootstrap, ConfigErrors> {
    let (_dir, path) = write_config(yaml);
    load_bootstrap(Some(&path), env(vars))
}

fn messages(errors: &ConfigErrors) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn empty_file_yields_production_defaults() {
    let config = load("", &[]).unwrap();
    let defaults = Bootstrap::default();
    assert_eq!(config.proxy, defaults.proxy);
    assert_eq!(config.downstream, defaults.downstream);
    assert_eq!(config.upstream, defaults.upstream);
    assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(30));
    assert_eq!(config.proxy.request_body_limit_bytes, 32 * 1024 * 1024);
    assert_eq!(config.proxy.thread_per_core, cfg!(target_os = "linux"));
    assert_eq!(config.proxy.workers, None);
}

#[test]
fn file_values_are_read() {
    let config = load(
        "proxy:\n  addr: 127.0.0.1:8080\n  workers: 3\n  thread_per_core: false\n  backlog: 128\n\
         downstream:\n  header_read_timeout_secs: 5\n  idle_timeout_secs: 0\n\
         shutdown:\n  drain_timeout_secs: 7\n\
         observability:\n  log_level: debug\n  metrics:\n    prometheus:\n      addr: 127.0.0.1:9999\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.proxy.addr.to_string(), "127.0.0.1:8080");
    assert_eq!(config.proxy.workers, NonZeroUsize::new(3));
    assert!(!config.proxy.thread_per_core);
    assert_eq!(config.proxy.backlog, 128);
    assert_eq!(
        config.downstream.header_read_timeout,
        Duration::from_secs(5)
    );
    assert_eq!(config.downstream.idle_timeout, None);
    assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(7));
    assert_eq!(config.observability.log_level, "debug");
    assert_eq!(
        config.observability.metrics.prometheus.addr.to_string(),
        "127.0.0.1:9999"
    );
}

#[test]
fn environment_overrides_file() {
    let config = load(
        "proxy:\n  workers: 2\n  thread_per_core: true\n",
        &[
            ("AISIX_PROXY__WORKERS", "4"),
            ("AISIX_PROXY__THREAD_PER_CORE", "false"),
            ("AISIX_SHUTDOWN__DRAIN_TIMEOUT_SECS", "3"),
            ("UNRELATED", "1"),
        ],
    )
    .unwrap();
    assert_eq!(config.proxy.workers, NonZeroUsize::new(4));
    assert!(!config.proxy.thread_per_core);
    assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(3));
}

#[test]
fn environment_alone_configures_without_a_file() {
    let config = load_bootstrap(None, env(&[("AISIX_PROXY__ADDR", "127.0.0.1:4000")])).unwrap();
    assert_eq!(config.proxy.addr.to_string(), "127.0.0.1:4000");
    assert_eq!(config.config_file, None);
}

#[test]
fn config_path_variable_is_not_a_config_key() {
    let config = load("", &[("AISIX_CONFIG", "/etc/aisix/config.yaml")]).unwrap();
    assert_eq!(config.proxy, Bootstrap::default().proxy);
}

#[test]
fn zero_workers_is_refused_naming_proxy_workers() {
    let errors = load("proxy:\n  workers: 0\n", &[]).unwrap_err();
    assert_eq!(errors.len(), 1);
    let error = &errors.0[0];
    assert_eq!(error.path, "proxy.workers");
    assert!(error.message.contains("at least 1"), "{error}");
    assert!(matches!(error.origin, Origin::File(_)));
}

#[test]
fn zero_workers_from_environment_names_the_variable() {
    let errors = load("", &[("AISIX_PROXY__WORKERS", "0")]).unwrap_err();
    let text = errors.to_string();
    assert!(text.contains("proxy.workers"), "{text}");
    assert!(text.contains("AISIX_PROXY__WORKERS"), "{text}");
}

#[test]
fn unknown_file_key_is_refused_with_its_path_and_a_suggestion() {
    let errors = load("proxy:\n  wrokers: 2\n", &[]).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].path, "proxy.wrokers");
    assert!(
        errors.0[0].message.contains("did you mean proxy.workers"),
        "{}",
        errors.0[0]
    );
}

#[test]
fn unknown_section_is_refused() {
    let errors = load("proxxy:\n  addr: 1.2.3.4:5\n", &[]).unwrap_err();
    assert_eq!(messages(&errors).len(), 1);
    assert_eq!(errors.0[0].path, "proxxy");
}

#[test]
fn unknown_environment_key_names_the_variable() {
    let errors = load("", &[("AISIX_PROXY__NOPE", "1")]).unwrap_err();
    assert_eq!(errors.0[0].path, "proxy.nope");
    assert_eq!(
        errors.0[0].origin,
        Origin::Env("AISIX_PROXY__NOPE".to_owned())
    );
    assert!(errors.to_string().contains("from AISIX_PROXY__NOPE"));
}

#[test]
fn every_error_in_a_file_is_reported_at_once() {
    let errors = load(
        "proxy:\n  workers: 0\n  addr: nowhere\n  backlog: -1\n  bogus: 1\n\
         downstream:\n  header_read_timeout_secs: 0\nobservability:\n  access_log: maybe\n",
        &[],
    )
    .unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    for expected in [
        "proxy.workers",
        "proxy.addr",
        "proxy.backlog",
        "proxy.bogus",
        "downstream.header_read_timeout_secs",
        "observability.access_log",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
}

#[test]
fn malformed_yaml_is_one_clear_error() {
    let errors = load("proxy: [unclosed\n", &[]).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors.to_string().contains("not valid YAML"), "{errors}");
}

#[test]
fn missing_file_is_an_error() {
    let errors = load_bootstrap(
        Some(std::path::Path::new("/nonexistent/aisix.yaml")),
        env(&[]),
    )
    .unwrap_err();
    assert!(errors.to_string().contains("not found"), "{errors}");
}

#[test]
fn relative_paths_resolve_against_the_config_folder() {
    let (dir, path) = write_config(
        "resources_file: resources.yaml\nproxy:\n  tls:\n    cert_file: tls/cert.pem\n    key_file: /abs/key.pem\n",
    );
    let config = load_bootstrap(Some(&path), env(&[])).unwrap();
    assert_eq!(
        config.resources_file,
        Some(dir.path().join("resources.yaml"))
    );
    let tls = config.proxy.tls.unwrap();
    assert_eq!(tls.cert_file, dir.path().join("tls/cert.pem"));
    assert_eq!(tls.key_file, PathBuf::from("/abs/key.pem"));
}

#[test]
fn tls_needs_both_files() {
    let errors = load("proxy:\n  tls:\n    cert_file: c.pem\n", &[]).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].path, "proxy.tls.key_file");
    assert!(errors.0[0].message.contains("required"));
}

#[test]
fn metrics_listener_must_not_share_the_proxy_address() {
    let errors = load(
        "proxy:\n  addr: 127.0.0.1:3000\nobservability:\n  metrics:\n    prometheus:\n      addr: 127.0.0.1:3000\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(errors.0[0].path, "observability.metrics.prometheus.addr");
}

#[test]
fn readiness_grace_defaults_to_zero_and_is_read_from_file_and_environment() {
    assert_eq!(
        load("", &[]).unwrap().shutdown.readiness_grace,
        Duration::ZERO
    );
    let config = load("shutdown:\n  readiness_grace_secs: 5\n", &[]).unwrap();
    assert_eq!(config.shutdown.readiness_grace, Duration::from_secs(5));
    let config = load("", &[("AISIX_SHUTDOWN__READINESS_GRACE_SECS", "7")]).unwrap();
    assert_eq!(config.shutdown.readiness_grace, Duration::from_secs(7));
}

#[test]
fn a_drain_timeout_too_large_to_schedule_is_refused_by_name() {
    let errors = load("shutdown:\n  drain_timeout_secs: 99999999999\n", &[]).unwrap_err();
    assert!(
        messages(&errors)[0].starts_with("shutdown.drain_timeout_secs: must be at most"),
        "{errors}"
    );
}

#[test]
fn resources_watch_needs_a_resources_file() {
    let errors = load("resources_watch: true\n", &[]).unwrap_err();
    assert!(
        messages(&errors)[0].starts_with("resources_watch: needs resources_file"),
        "{errors}"
    );
    let config = load("resources_file: r.yaml\nresources_watch: true\n", &[]).unwrap();
    assert!(config.resources_watch);
    assert!(!load("", &[]).unwrap().resources_watch);
    let config = load(
        "resources_file: r.yaml\n",
        &[("AISIX_RESOURCES_WATCH", "true")],
    )
    .unwrap();
    assert!(config.resources_watch);
}

#[test]
fn bootstrap_keys_lists_every_leaf_key_and_its_environment_form() {
    let keys = aisix_config::bootstrap_keys();
    for key in [
        "proxy.addr",
        "proxy.tls.cert_file",
        "shutdown.readiness_grace_secs",
        "resources_watch",
        "observability.metrics.prometheus.path",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    assert!(!keys.contains(&"proxy.tls"), "tables are not leaf keys");
    assert_eq!(
        aisix_config::env_var_for("proxy.thread_per_core"),
        "AISIX_PROXY__THREAD_PER_CORE"
    );
}

#[test]
fn upstream_phase_deadlines_and_pool_limits_are_read_from_file_and_environment() {
    let config = load(
        "downstream:\n  request_body_timeout_secs: 4\n\
         upstream:\n  connect_timeout_ms: 100\n  first_token_timeout_ms: 200\n  stream_idle_timeout_ms: 300\n  timeout_ms: 400\n  max_sse_event_bytes: 4096\n  max_response_bytes: 8192\n",
        &[("AISIX_UPSTREAM__POOL_MAX_CONNECTIONS_PER_HOST", "8")],
    )
    .unwrap();
    assert_eq!(
        config.downstream.request_body_timeout,
        Duration::from_secs(4)
    );
    let t = config.upstream.timeouts;
    assert_eq!(
        [t.connect, t.first_token, t.stream_idle, t.total],
        [100, 200, 300, 400].map(Duration::from_millis)
    );
    assert_eq!(config.upstream.max_sse_event_bytes, 4096);
    assert_eq!(config.upstream.max_response_bytes, 8192);
    assert_eq!(config.upstream.pool_max_connections_per_host, 8);
    let defaults = Bootstrap::default();
    assert_eq!(
        defaults.upstream.pool_max_connections_per_host, 0,
        "unlimited"
    );
    assert_eq!(defaults.upstream.max_sse_event_bytes, 1024 * 1024);
    assert_eq!(defaults.upstream.max_response_bytes, 16 * 1024 * 1024);
    assert_eq!(
        defaults.downstream.request_body_timeout,
        Duration::from_secs(30)
    );
}

#[test]
fn out_of_range_phase_deadlines_name_their_key() {
    let errors = load(
        "downstream:\n  request_body_timeout_secs: 0\nupstream:\n  first_token_timeout_ms: 0\n  max_sse_event_bytes: 10\n  max_response_bytes: 10\n",
        &[],
    )
    .unwrap_err();
    let messages = messages(&errors);
    for key in [
        "downstream.request_body_timeout_secs",
        "upstream.first_token_timeout_ms",
        "upstream.max_sse_event_bytes",
        "upstream.max_response_bytes",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(key)),
            "{key}: {messages:?}"
        );
    }
}

#[test]
fn serving_core_knobs_default_to_todays_behaviour() {
    let config = load("", &[]).unwrap();
    assert!(!config.proxy.pin_workers);
    assert_eq!(config.proxy.balance, Balance::ReusePort);
    assert_eq!(config.downstream.max_requests_per_connection, None);
    assert_eq!(config.downstream.max_connection_age, None);
    // 64 KiB, not hyper's 408 KiB: a write to a client is at most about that plus one frame.
    assert_eq!(config.downstream.http1_max_buf_size, 64 * 1024);
}

#[test]
fn serving_core_knobs_are_read_from_file_and_environment() {
    let config = load(
        "proxy:\n  pin_workers: true\n  balance: handoff\n\
         downstream:\n  max_requests_per_connection: 100\n  max_connection_age_secs: 0\n",
        &[
            ("AISIX_DOWNSTREAM__MAX_CONNECTION_AGE_SECS", "600"),
            ("AISIX_DOWNSTREAM__HTTP1_MAX_BUF_SIZE_BYTES", "131072"),
        ],
    )
    .unwrap();
    assert!(config.proxy.pin_workers);
    assert_eq!(config.proxy.balance, Balance::Handoff);
    assert_eq!(
        config.downstream.max_requests_per_connection,
        NonZeroU64::new(100)
    );
    assert_eq!(
        config.downstream.max_connection_age,
        Some(Duration::from_secs(600))
    );
    assert_eq!(config.downstream.http1_max_buf_size, 131072);

    let unlimited = load(
        "downstream:\n  max_requests_per_connection: 0\n  max_connection_age_secs: 0\n",
        &[("AISIX_PROXY__BALANCE", "reuseport")],
    )
    .unwrap();
    assert_eq!(unlimited.downstream.max_requests_per_connection, None);
    assert_eq!(unlimited.downstream.max_connection_age, None);
    assert_eq!(unlimited.proxy.balance, Balance::ReusePort);
}

#[test]
fn bad_serving_core_knobs_are_refused_naming_their_key() {
    let errors = load(
        "proxy:\n  balance: round_robin\n  pin_workers: sometimes\n\
         downstream:\n  http1_max_buf_size_bytes: 4096\n  max_requests_per_connection: -1\n",
        &[],
    )
    .unwrap_err();
    let messages = messages(&errors);
    for (key, why) in [
        ("proxy.balance", "expected reuseport or handoff"),
        ("proxy.pin_workers", "expected true or false"),
        ("downstream.http1_max_buf_size_bytes", "at least 8192"),
        ("downstream.max_requests_per_connection", "non-negative"),
    ] {
        assert!(
            messages.iter().any(|m| m.contains(key) && m.contains(why)),
            "{key}: {messages:?}"
        );
    }
}

#[test]
fn cooldown_and_retry_budget_are_read_from_file_and_environment_and_checked() {
    let config = load(
        "upstream:\n  cooldown_failures: 5\n  cooldown_window_ms: 2000\n  cooldown_ms: 1500\n",
        &[
            ("AISIX_UPSTREAM__RETRY_AFTER_MAX_MS", "60000"),
            ("AISIX_UPSTREAM__RETRY_BUDGET_PERCENT", "0"),
        ],
    )
    .unwrap();
    let r = config.upstream.resilience;
    assert_eq!(r.cooldown_failures, 5);
    assert_eq!(r.cooldown_window, Duration::from_secs(2));
    assert_eq!(r.cooldown, Duration::from_millis(1500));
    assert_eq!(r.retry_after_max, Duration::from_secs(60));
    assert_eq!(r.retry_budget_percent, 0, "0 turns retries off");
    let d = Bootstrap::default().upstream.resilience;
    assert_eq!(
        (
            d.cooldown_failures,
            d.cooldown_window,
            d.cooldown,
            d.retry_after_max
        ),
        (
            3,
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(600)
        )
    );
    assert_eq!(d.retry_budget_percent, 20);

    let errors = load(
        "upstream:\n  cooldown_failures: 0\n  cooldown_ms: 0\n",
        &[("AISIX_UPSTREAM__RETRY_BUDGET_PERCENT", "101")],
    )
    .unwrap_err();
    let messages = messages(&errors);
    for key in [
        "upstream.cooldown_failures",
        "upstream.cooldown_ms",
        "AISIX_UPSTREAM__RETRY_BUDGET_PERCENT",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(key)),
            "{key}: {messages:?}"
        );
    }
}

#[test]
fn the_held_answer_limit_is_read_from_file_and_environment_and_bounded() {
    let defaults = Bootstrap::default();
    assert_eq!(defaults.upstream.max_response_bytes, 16 * 1024 * 1024);
    let config = load("upstream:\n  max_response_bytes: 65536\n", &[]).unwrap();
    assert_eq!(config.upstream.max_response_bytes, 65536);
    let config = load("", &[("AISIX_UPSTREAM__MAX_RESPONSE_BYTES", "2048")]).unwrap();
    assert_eq!(config.upstream.max_response_bytes, 2048);
    let errors = load("upstream:\n  max_response_bytes: 10\n", &[]).unwrap_err();
    let messages = messages(&errors);
    assert!(
        messages
            .iter()
            .any(|m| m.contains("upstream.max_response_bytes")),
        "{messages:?}"
    );
}

#[test]
fn the_worker_memory_budget_has_a_default_and_is_at_least_the_body_limit() {
    let defaults = Bootstrap::default();
    assert_eq!(
        defaults.proxy.max_buffered_bytes_per_worker,
        256 * 1024 * 1024
    );
    let config = load("proxy:\n  max_buffered_bytes_per_worker: 67108864\n", &[]).unwrap();
    assert_eq!(config.proxy.max_buffered_bytes_per_worker, 64 * 1024 * 1024);
    let config = load(
        "",
        &[("AISIX_PROXY__MAX_BUFFERED_BYTES_PER_WORKER", "33554432")],
    )
    .unwrap();
    assert_eq!(config.proxy.max_buffered_bytes_per_worker, 32 * 1024 * 1024);
    for yaml in [
        "proxy:\n  max_buffered_bytes_per_worker: 1048575\n",
        "proxy:\n  max_buffered_bytes_per_worker: 2097152\n  request_body_limit_bytes: 4194304\n",
    ] {
        let errors = load(yaml, &[]).unwrap_err();
        let messages = messages(&errors);
        assert!(
            messages
                .iter()
                .any(|m| m.contains("proxy.max_buffered_bytes_per_worker")),
            "{messages:?}"
        );
    }
}

#[test]
fn a_key_s_share_of_the_budget_is_a_percentage_from_1_to_100_defaulting_to_25() {
    assert_eq!(Bootstrap::default().proxy.max_buffered_percent_per_key, 25);
    let config = load("proxy:\n  max_buffered_percent_per_key: 50\n", &[]).unwrap();
    assert_eq!(config.proxy.max_buffered_percent_per_key, 50);
    let config = load("", &[("AISIX_PROXY__MAX_BUFFERED_PERCENT_PER_KEY", "100")]).unwrap();
    assert_eq!(config.proxy.max_buffered_percent_per_key, 100);
    for yaml in [
        "proxy:\n  max_buffered_percent_per_key: 0\n",
        "proxy:\n  max_buffered_percent_per_key: 101\n",
    ] {
        let errors = load(yaml, &[]).unwrap_err();
        let messages = messages(&errors);
        assert!(
            messages
                .iter()
                .any(|m| m.contains("proxy.max_buffered_percent_per_key")),
            "{messages:?}"
        );
    }
}
