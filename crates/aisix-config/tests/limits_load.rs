//! Limits, prices and budgets in the resources file, and the `ratelimit` section of the
//! bootstrap config: what loads, and every mistake reported at its path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::path::Path;
use std::time::Duration;

use aisix_config::{
    Bootstrap, BudgetPeriod, ConfigErrors, Cost, OnRedisError, Origin, RateLimit, RateLimitBackend,
    RedisMode, RedisUrl, Resources, SpendBudget, SpendingPolicy, Usd, load_bootstrap,
    parse_resources,
};

/// A provider key and a model `m`; `model_extra` and `key_extra` are indented fields appended
/// to the model and to the one API key `k`.
fn resources(
    model_extra: &str,
    key_extra: &str,
    vars: &[(&str, &str)],
) -> Result<Resources, ConfigErrors> {
    let yaml = format!(
        "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: p, provider: mock}}\n\
         models:\n  - display_name: m\n    provider: mock\n    model_name: echo\n    provider_key: p\n{model_extra}\
         api_keys:\n  - display_name: k\n    key_env: K\n    allowed_models: [\"*\"]\n{key_extra}"
    );
    let mut env: Vec<(String, String)> = vec![("K".into(), "secret".into())];
    env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    parse_resources(&yaml, Path::new("/r.yaml"), &move |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

/// Each error of a resources file as `path: message`.
fn resource_errors(model_extra: &str, key_extra: &str) -> Vec<String> {
    resources(model_extra, key_extra, &[])
        .expect_err("expected errors")
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect()
}

fn bootstrap(yaml: &str, vars: &[(&str, &str)]) -> Result<Bootstrap, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    load_bootstrap(Some(&path), vars)
}

// ---- resources ----

#[test]
fn rate_limits_cost_and_budget_load_on_models_and_keys() {
    let loaded = resources(
        "    rate_limit: {rps: 1, rpm: 2, rph: 3, rpd: 4, tpm: 5, tpd: 6, concurrency: 7}\n\
         \x20   cost: {input_per_1k: 0.0025, output_per_1k: 10}\n",
        "    rate_limit: {tpm: 1000}\n    budget: {usd: 12.5, period: week}\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        loaded.models[0].rate_limit,
        RateLimit {
            rps: Some(1),
            rpm: Some(2),
            rph: Some(3),
            rpd: Some(4),
            tpm: Some(5),
            tpd: Some(6),
            concurrency: Some(7),
        }
    );
    assert_eq!(
        loaded.models[0].cost,
        Some(Cost {
            input_per_1k: Usd::from_nanos(2_500_000),
            output_per_1k: Usd::from_nanos(10_000_000_000),
        })
    );
    assert_eq!(
        loaded.api_keys[0].rate_limit,
        RateLimit {
            tpm: Some(1000),
            ..RateLimit::default()
        }
    );
    assert_eq!(
        loaded.api_keys[0].budget,
        Some(SpendBudget {
            usd: Usd::from_nanos(12_500_000_000),
            period: BudgetPeriod::Week,
        })
    );
}

#[test]
fn absent_or_empty_rate_limit_limits_nothing_and_absent_cost_counts_nothing() {
    let plain = resources("", "", &[]).unwrap();
    assert!(plain.models[0].rate_limit.is_empty());
    assert_eq!(plain.models[0].cost, None);
    assert!(plain.api_keys[0].rate_limit.is_empty());
    assert_eq!(plain.api_keys[0].budget, None);
    let empty = resources("    rate_limit: {}\n", "    rate_limit: {}\n", &[]).unwrap();
    assert!(empty.models[0].rate_limit.is_empty());
    assert!(empty.api_keys[0].rate_limit.is_empty());
}

#[test]
fn one_price_given_leaves_the_other_at_zero() {
    let loaded = resources("    cost: {input_per_1k: 0.0001}\n", "", &[]).unwrap();
    assert_eq!(
        loaded.models[0].cost,
        Some(Cost {
            input_per_1k: Usd::from_nanos(100_000),
            output_per_1k: Usd::ZERO,
        })
    );
}

#[test]
fn limits_prices_and_budgets_come_from_variables_too() {
    let loaded = resources(
        "    rate_limit: {tpm: \"${TPM}\"}\n    cost: {output_per_1k: \"${PRICE}\"}\n",
        "    budget: {usd: \"${BUDGET}\", period: \"${PERIOD}\"}\n",
        &[
            ("TPM", "5000"),
            ("PRICE", "0.015"),
            ("BUDGET", "100"),
            ("PERIOD", "month"),
        ],
    )
    .unwrap();
    assert_eq!(loaded.models[0].rate_limit.tpm, Some(5000));
    assert_eq!(
        loaded.models[0].cost.map(|c| c.output_per_1k),
        Some(Usd::from_nanos(15_000_000))
    );
    assert_eq!(
        loaded.api_keys[0].budget,
        Some(SpendBudget {
            usd: Usd::from_nanos(100_000_000_000),
            period: BudgetPeriod::Month,
        })
    );
}

#[test]
fn bad_rate_limits_are_each_named_by_path() {
    let errors = resource_errors(
        "    rate_limit: {rps: 0, tpm: -5, concurrency: many, rpx: 3}\n",
        "    rate_limit: 100\n",
    );
    assert_eq!(
        errors,
        [
            "models[0].rate_limit.rps: expected a positive integer (requests per second)",
            "models[0].rate_limit.tpm: expected a positive integer (tokens per minute)",
            "models[0].rate_limit.concurrency: expected a positive integer (requests in flight)",
            "models[0].rate_limit.rpx: unknown field (did you mean rpd?)",
            "api_keys[0].rate_limit: expected a mapping",
        ]
    );
}

#[test]
fn bad_prices_are_each_named_by_path() {
    let errors = resource_errors("    cost: {input_per_1k: -1, output_per_1k: free}\n", "");
    assert_eq!(
        errors,
        [
            "models[0].cost.input_per_1k: expected a non-negative amount of US dollars (such as 0.0025)",
            "models[0].cost.output_per_1k: expected a non-negative amount of US dollars (such as 0.0025)",
        ]
    );
    let errors = resource_errors("    cost: {input: 1}\n", "");
    assert_eq!(
        errors,
        [
            "models[0].cost.input: unknown field (expected one of: input_per_1k, output_per_1k)",
            "models[0].cost: give input_per_1k, output_per_1k or both (USD per 1000 tokens)",
        ]
    );
}

#[test]
fn bad_budgets_are_each_named_by_path() {
    assert_eq!(
        resource_errors("", "    budget: {period: year}\n"),
        [
            "api_keys[0].budget.usd: is required",
            "api_keys[0].budget.period: expected day, week or month, got \"year\"",
        ]
    );
    assert_eq!(
        resource_errors("", "    budget: {usd: 0, period: day}\n"),
        ["api_keys[0].budget.usd: must be above 0 (use disabled: true to stop a key)"]
    );
    assert_eq!(
        resource_errors("", "    budget: {usd: 5}\n"),
        ["api_keys[0].budget.period: is required"]
    );
}

#[test]
fn a_spending_policy_loads_on_a_key_and_defaults_to_none() {
    let loaded = resources(
        "",
        "    spending: {max_n: 2, service_tiers: [default], anthropic_betas: [prompt-caching-2024-07-31]}\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        loaded.api_keys[0].spending,
        SpendingPolicy {
            max_n: Some(2),
            service_tiers: Some(vec!["default".into()]),
            anthropic_betas: Some(vec!["prompt-caching-2024-07-31".into()]),
        }
    );
    let policy = &loaded.api_keys[0].spending;
    assert!(policy.allows_n(2) && !policy.allows_n(3));
    assert!(policy.allows_service_tier("default") && !policy.allows_service_tier("priority"));
    let open = resources("", "", &[]).unwrap();
    assert_eq!(open.api_keys[0].spending, SpendingPolicy::default());
    assert!(open.api_keys[0].spending.allows_n(100));
}

#[test]
fn bad_spending_policies_are_each_named_by_path() {
    assert_eq!(
        resource_errors(
            "",
            "    spending: {max_n: 0, service_tiers: [\"\"], colour: red}\n"
        ),
        [
            "api_keys[0].spending.max_n: expected a positive integer (choices)",
            "api_keys[0].spending.service_tiers[0]: must not be empty",
            "api_keys[0].spending.colour: unknown field (expected one of: max_n, service_tiers, anthropic_betas)",
        ]
    );
}

#[test]
fn budget_belongs_to_keys_and_cost_to_models() {
    let errors = resource_errors(
        "    budget: {usd: 1, period: day}\n",
        "    cost: {input_per_1k: 1}\n",
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("models[0].budget: unknown field"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("api_keys[0].cost: unknown field"),
        "{errors:?}"
    );
}

// ---- bootstrap ----

#[test]
fn rate_limit_counters_are_in_memory_by_default() {
    let config = bootstrap("", &[]).unwrap();
    assert_eq!(config.ratelimit.backend, RateLimitBackend::Memory);
    assert_eq!(config.ratelimit.concurrency_ttl, Duration::from_secs(300));
}

#[test]
fn redis_backend_reads_its_settings() {
    let config = bootstrap(
        "ratelimit:\n  backend: redis\n  concurrency_ttl_secs: 60\n  redis:\n    \
         url: redis://127.0.0.1:6390/2\n    on_error: deny\n    timeout_ms: 50\n",
        &[],
    )
    .unwrap();
    let RateLimitBackend::Redis(redis) = config.ratelimit.backend else {
        panic!("expected the redis backend");
    };
    assert_eq!(redis.url.expose(), "redis://127.0.0.1:6390/2");
    assert_eq!(redis.on_error, OnRedisError::Deny);
    assert_eq!(redis.timeout, Duration::from_millis(50));
    assert_eq!(config.ratelimit.concurrency_ttl, Duration::from_secs(60));
}

#[test]
fn redis_cluster_mode_takes_every_node_given() {
    let config = bootstrap(
        "ratelimit:\n  backend: redis\n  redis:\n    mode: cluster\n    \
         url: redis://app:hunter2@10.0.0.5:7000, redis://10.0.0.6:7000/0\n",
        &[],
    )
    .unwrap();
    let RateLimitBackend::Redis(redis) = config.ratelimit.backend else {
        panic!("expected the redis backend");
    };
    let RedisMode::Cluster(nodes) = &redis.mode else {
        panic!("expected cluster mode, got {:?}", redis.mode);
    };
    let nodes: Vec<&str> = nodes.iter().map(RedisUrl::expose).collect();
    assert_eq!(
        nodes,
        [
            "redis://app:hunter2@10.0.0.5:7000",
            "redis://10.0.0.6:7000/0"
        ]
    );
    assert_eq!(redis.url.expose(), nodes[0]);
    let printed = format!("{:?}", redis);
    assert!(!printed.contains("hunter2"), "{printed}");
}

#[test]
fn redis_is_one_server_unless_told_otherwise() {
    let config = bootstrap(
        "",
        &[
            ("AISIX_RATELIMIT__BACKEND", "redis"),
            ("AISIX_RATELIMIT__REDIS__URL", "redis://redis.internal"),
        ],
    )
    .unwrap();
    let RateLimitBackend::Redis(redis) = config.ratelimit.backend else {
        panic!("expected the redis backend");
    };
    assert_eq!(redis.mode, RedisMode::Single);
}

#[test]
fn redis_backend_defaults_to_allow_and_a_short_timeout() {
    let config = bootstrap(
        "",
        &[
            ("AISIX_RATELIMIT__BACKEND", "redis"),
            ("AISIX_RATELIMIT__REDIS__URL", "redis://redis.internal"),
        ],
    )
    .unwrap();
    let RateLimitBackend::Redis(redis) = config.ratelimit.backend else {
        panic!("expected the redis backend");
    };
    assert_eq!(redis.on_error, OnRedisError::Allow);
    assert_eq!(redis.timeout, Duration::from_millis(200));
}

#[test]
fn redis_password_never_prints() {
    let config = bootstrap(
        "ratelimit:\n  backend: redis\n  redis:\n    url: redis://app:hunter2@10.0.0.5:6379/0\n",
        &[],
    )
    .unwrap();
    let printed = format!("{config:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("redis://app:***@10.0.0.5:6379/0"),
        "{printed}"
    );
}

#[test]
fn redis_settings_errors_name_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "backend: redis\n",
            "ratelimit.redis.url",
            "is required when ratelimit.backend is redis",
        ),
        (
            "backend: redis\n  redis:\n    url: http://x\n",
            "ratelimit.redis.url",
            "must start with redis://",
        ),
        (
            "backend: redis\n  redis:\n    url: rediss://x\n",
            "ratelimit.redis.url",
            "TLS (rediss://) is not supported; use redis://",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://:6379\n",
            "ratelimit.redis.url",
            "must name a host (redis://127.0.0.1:6379)",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://h:99999\n",
            "ratelimit.redis.url",
            "has an invalid port",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://h/db\n",
            "ratelimit.redis.url",
            "the database after the host must be a number (redis://host:6379/0)",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://h\n    on_error: retry\n",
            "ratelimit.redis.on_error",
            "expected allow or deny, got \"retry\"",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://h\n    timeout_ms: 0\n",
            "ratelimit.redis.timeout_ms",
            "must be at least 1ms",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://h\n    mode: sentinel\n",
            "ratelimit.redis.mode",
            "expected single or cluster, got \"sentinel\"",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://a:7000,redis://b:7000\n",
            "ratelimit.redis.url",
            "names several servers; set ratelimit.redis.mode: cluster to use a Redis Cluster",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://a:7000,http://b\n    mode: cluster\n",
            "ratelimit.redis.url",
            "node 2: must start with redis://",
        ),
        (
            "backend: redis\n  redis:\n    url: redis://a:7000/3\n    mode: cluster\n",
            "ratelimit.redis.url",
            "a Redis Cluster has only database 0; drop the /db after the host",
        ),
        (
            "backend: etcd\n",
            "ratelimit.backend",
            "expected memory or redis, got \"etcd\"",
        ),
        (
            "redis:\n    url: redis://h\n",
            "ratelimit.redis",
            "is set but ratelimit.backend is memory (set backend: redis to use it)",
        ),
        (
            "concurrency_ttl_secs: 0\n",
            "ratelimit.concurrency_ttl_secs",
            "must be at least 1s",
        ),
    ];
    for (section, path, message) in cases {
        let errors = bootstrap(&format!("ratelimit:\n  {section}"), &[]).unwrap_err();
        let found: Vec<(String, String)> = errors
            .iter()
            .map(|e| (e.path.clone(), e.message.clone()))
            .collect();
        assert_eq!(
            found,
            [((*path).to_owned(), (*message).to_owned())],
            "{section}"
        );
        assert!(matches!(errors.0[0].origin, Origin::File(_)));
    }
}

#[test]
fn unknown_ratelimit_key_suggests_the_known_one() {
    let errors = bootstrap(
        "ratelimit:\n  redis:\n    urll: redis://h\n  backend: redis\n",
        &[],
    )
    .unwrap_err();
    let text = errors.to_string();
    assert!(
        text.contains("ratelimit.redis.urll: unknown key (did you mean ratelimit.redis.url?)"),
        "{text}"
    );
}
