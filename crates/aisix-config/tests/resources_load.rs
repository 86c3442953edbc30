//! Loading the resources file: interpolation, strict fields, cross-entry checks, and every error
//! reported at once without a secret in it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aisix_config::{
    ConfigErrors, ModelPattern, Origin, ProviderKind, Resources, TimeoutOverrides, hash_key,
    load_resources, parse_resources,
};

const ORIGIN: &str = "/etc/aisix/resources.yaml";
/// SHA-256 of the key `test`.
const TEST_HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
/// 2027-01-01T00:00:00Z as seconds since the Unix epoch.
const NEW_YEAR_2027: u64 = 1_798_761_600;

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn parse(yaml: &str, vars: &[(&str, &str)]) -> Result<Resources, ConfigErrors> {
    parse_resources(yaml, Path::new(ORIGIN), &lookup(vars))
}

fn load(yaml: &str, vars: &[(&str, &str)]) -> Resources {
    match parse(yaml, vars) {
        Ok(resources) => resources,
        Err(errors) => panic!("expected the file to load, got:\n{errors}"),
    }
}

/// Each error as `path: message`, after checking that it names the file.
fn errors(yaml: &str, vars: &[(&str, &str)]) -> Vec<String> {
    let errors = parse(yaml, vars).expect_err("expected errors");
    errors
        .iter()
        .map(|e| {
            assert_eq!(e.origin, Origin::File(PathBuf::from(ORIGIN)), "{e}");
            if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect()
}

const FULL_EXAMPLE: &str = r#"
_format_version: "1"
provider_keys:
  - display_name: openai-main
    provider: openai
    api_key: "${OPENAI_API_KEY}"
    api_base: https://api.openai.com/v1
  - display_name: local
    provider: openai
    api_base: http://127.0.0.1:8000/v1/
  - display_name: mock
    provider: mock
models:
  - display_name: gpt-4o
    provider: openai
    model_name: gpt-4o-2024-08-06
    provider_key: openai-main
    timeout: 30000
    first_token_timeout: 5000
  - display_name: llama
    provider: openai
    model_name: meta-llama/Llama-3-8B
    provider_key: local
  - display_name: mock-model
    provider: mock
    model_name: echo
    provider_key: mock
api_keys:
  - display_name: team-a
    key_env: TEAM_A_KEY
    allowed_models: ["gpt-4o", "claude-*"]
    disabled: false
    expires_at: "2027-01-01T00:00:00Z"
  - display_name: team-b
    key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    allowed_models: []
    disabled: true
"#;

const FULL_ENV: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-openai-secret"),
    ("TEAM_A_KEY", "team-a-plaintext"),
];

// ---- loading what is valid ----

#[test]
fn full_example_loads_every_collection() {
    let resources = load(FULL_EXAMPLE, FULL_ENV);

    let keys = &resources.provider_keys;
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0].display_name, "openai-main");
    assert_eq!(keys[0].provider, ProviderKind::OpenAi);
    assert_eq!(
        keys[0].api_key.as_ref().map(|s| s.expose()),
        Some("sk-openai-secret")
    );
    assert_eq!(keys[0].api_base, "https://api.openai.com/v1");
    assert_eq!(keys[1].api_key, None);
    assert_eq!(keys[1].api_base, "http://127.0.0.1:8000/v1");
    assert_eq!(keys[2].provider, ProviderKind::Mock);

    let models = &resources.models;
    assert_eq!(models.len(), 3);
    assert_eq!(models[0].display_name, "gpt-4o");
    assert_eq!(models[0].provider, ProviderKind::OpenAi);
    assert_eq!(models[0].model_name, "gpt-4o-2024-08-06");
    assert_eq!(models[0].provider_key, "openai-main");
    assert_eq!(
        models[0].timeouts,
        TimeoutOverrides {
            total: Some(Duration::from_millis(30_000)),
            first_token: Some(Duration::from_millis(5_000)),
            ..TimeoutOverrides::default()
        }
    );
    assert_eq!(models[1].timeouts, TimeoutOverrides::default());

    let api_keys = &resources.api_keys;
    assert_eq!(api_keys.len(), 2);
    assert_eq!(api_keys[0].display_name, "team-a");
    assert_eq!(api_keys[0].key_hash, hash_key("team-a-plaintext"));
    assert_eq!(
        api_keys[0].allowed_models,
        [
            ModelPattern::Exact("gpt-4o".to_owned()),
            ModelPattern::Glob("claude-*".to_owned()),
        ]
    );
    assert!(!api_keys[0].disabled);
    assert_eq!(
        api_keys[0].expires_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(NEW_YEAR_2027))
    );
    assert_eq!(api_keys[1].key_hash, hash_key("test"));
    assert!(api_keys[1].allowed_models.is_empty());
    assert!(api_keys[1].disabled);
    assert_eq!(api_keys[1].expires_at, None);
}

#[test]
fn provider_key_index_points_into_provider_keys() {
    let resources = load(FULL_EXAMPLE, FULL_ENV);
    let indexes: Vec<_> = resources
        .models
        .iter()
        .map(|m| m.provider_key_index)
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    for model in &resources.models {
        let key = &resources.provider_keys[model.provider_key_index];
        assert_eq!(key.display_name, model.provider_key);
        assert_eq!(key.provider, model.provider);
    }
}

#[test]
fn loaded_resources_never_print_secrets_or_hashes() {
    let printed = format!("{:?}", load(FULL_EXAMPLE, FULL_ENV));
    assert!(!printed.contains("sk-openai-secret"), "{printed}");
    assert!(!printed.contains("team-a-plaintext"), "{printed}");
    assert!(!printed.contains("9f86d0"), "{printed}");
    assert!(printed.contains("KeyHash(***)"), "{printed}");
}

#[test]
fn format_version_alone_loads_empty_resources() {
    assert_eq!(load("_format_version: \"1\"\n", &[]), Resources::default());
}

#[test]
fn null_and_empty_collections_are_empty() {
    let yaml = r#"
_format_version: "1"
provider_keys:
models: []
api_keys: ~
"#;
    assert_eq!(load(yaml, &[]), Resources::default());
}

#[test]
fn load_resources_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resources.yaml");
    std::fs::write(&path, FULL_EXAMPLE).unwrap();
    let resources = load_resources(&path, &lookup(FULL_ENV)).unwrap();
    assert_eq!(resources, load(FULL_EXAMPLE, FULL_ENV));
}

#[test]
fn load_resources_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resources.yaml");
    std::fs::write(&path, "_format_version: \"1\"\nextra: 1\n").unwrap();
    let errors = load_resources(&path, &lookup(&[])).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].origin, Origin::File(path.clone()));
    assert!(errors.to_string().contains(&path.display().to_string()));
}

#[test]
fn missing_resources_file_is_one_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let errors = load_resources(&path, &lookup(&[])).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].origin, Origin::File(path));
    assert!(
        errors.0[0]
            .message
            .starts_with("cannot read resources file"),
        "{errors}"
    );
}

// ---- document shape ----

#[test]
fn empty_file_requires_format_version() {
    assert_eq!(errors("", &[]), ["_format_version: is required"]);
}

#[test]
fn missing_format_version_is_an_error_at_its_path() {
    assert_eq!(
        errors("models: []\n", &[]),
        ["_format_version: is required"]
    );
}

#[test]
fn format_version_other_than_string_1_is_rejected() {
    assert_eq!(
        errors("_format_version: \"2\"\n", &[]),
        ["_format_version: unsupported format version \"2\" (this gateway reads \"1\")"]
    );
    assert_eq!(
        errors("_format_version: 1\n", &[]),
        ["_format_version: expected the string \"1\" (quote it: _format_version: \"1\")"]
    );
}

#[test]
fn document_that_is_not_a_mapping_is_one_error() {
    assert_eq!(
        errors("- a\n- b\n", &[]),
        ["expected a mapping with _format_version and the collections"]
    );
}

#[test]
fn yaml_syntax_error_is_one_error() {
    let errors = errors("_format_version: \"1\"\nmodels: [\n  - a: b\n", &[]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("not valid YAML: "), "{errors:?}");
}

#[test]
fn yaml_anchors_and_merge_keys_are_resolved() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - &base
    display_name: a
    provider: openai
    model_name: m
    provider_key: openai-main
  - <<: *base
    display_name: b
"#;
    let resources = load(yaml, &[]);
    assert_eq!(resources.models[1].display_name, "b");
    assert_eq!(resources.models[1].model_name, "m");
}

#[test]
fn unknown_top_level_collection_is_named() {
    assert_eq!(
        errors("_format_version: \"1\"\nroutes: []\n", &[]),
        [
            "routes: unknown collection (expected one of: _format_version, provider_keys, models, api_keys)"
        ]
    );
}

#[test]
fn misspelled_collection_suggests_the_known_one() {
    assert_eq!(
        errors("_format_version: \"1\"\nmodel: []\n", &[]),
        ["model: unknown collection (did you mean models?)"]
    );
}

#[test]
fn collection_that_is_not_a_list_is_an_error() {
    let yaml = r#"
_format_version: "1"
models:
  gpt-4o: {}
"#;
    assert_eq!(errors(yaml, &[]), ["models: expected a list"]);
}

#[test]
fn entry_that_is_not_a_mapping_is_an_error() {
    let yaml = r#"
_format_version: "1"
models:
  - gpt-4o
"#;
    assert_eq!(errors(yaml, &[]), ["models[0]: expected a mapping"]);
}

// ---- fields ----

#[test]
fn unknown_field_names_its_path() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - display_name: a
    provider: openai
    model_name: a
    provider_key: openai-main
    foo: 1
    timout: 5
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "models[0].foo: unknown field (expected one of: display_name, disabled, provider, model_name, provider_key, timeout, connect_timeout, first_token_timeout, stream_idle_timeout, stream_timeout, rate_limit, cost, retries, cooldown, continuation, output_tokens_field)",
            "models[0].timout: unknown field (did you mean timeout?)",
        ]
    );
}

#[test]
fn output_tokens_field_defaults_by_family_and_is_overridden_per_model() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: oai, provider: openai}
models:
  - {display_name: a, provider: openai, model_name: o3-mini, provider_key: oai}
  - {display_name: b, provider: openai, model_name: gpt-4o, provider_key: oai}
  - {display_name: c, provider: openai, model_name: openai/GPT-5-mini, provider_key: oai}
  - {display_name: d, provider: openai, model_name: my-reasoner, provider_key: oai, output_tokens_field: max_completion_tokens}
  - {display_name: e, provider: openai, model_name: o4-mini, provider_key: oai, output_tokens_field: max_tokens}
"#;
    let fields: Vec<&str> = load(yaml, &[])
        .models
        .iter()
        .map(|m| m.output_tokens_field().as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "max_completion_tokens",
            "max_tokens",
            "max_completion_tokens",
            "max_completion_tokens",
            "max_tokens"
        ]
    );
    let bad = yaml.replace(
        "output_tokens_field: max_tokens",
        "output_tokens_field: max_output",
    );
    assert_eq!(
        errors(&bad, &[]),
        [
            "models[4].output_tokens_field: expected max_tokens or max_completion_tokens, not \"max_output\""
        ]
    );
}

#[test]
fn wrong_type_names_the_path() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: a, provider: openai, model_name: m, provider_key: openai-main, timeout: 1}
  - {display_name: b, provider: openai, model_name: m, provider_key: openai-main, timeout: fast}
  - {display_name: c, provider: openai, model_name: m, provider_key: openai-main, timeout: 0}
  - {display_name: d, provider: openai, model_name: m, provider_key: openai-main, timeout: -5}
  - {display_name: e, provider: openai, model_name: m, provider_key: openai-main, timeout: 1.5}
  - {display_name: f, provider: openai, model_name: m, provider_key: openai-main, connect_timeout: 0, first_token_timeout: x, stream_idle_timeout: -1}
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "models[1].timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
            "models[2].timeout: must be at least 1ms",
            "models[3].timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
            "models[4].timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
            "models[5].connect_timeout: must be at least 1ms",
            "models[5].first_token_timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
            "models[5].stream_idle_timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
        ]
    );
}

#[test]
fn non_string_values_name_their_path() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - display_name: [x]
    provider: openai
    api_key: 12345
api_keys:
  - display_name: k
    key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    allowed_models: gpt-4o
    disabled: maybe
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].display_name: expected a string",
            "provider_keys[0].api_key: expected a string",
            "api_keys[0].allowed_models: expected a list",
            "api_keys[0].disabled: expected true or false",
        ]
    );
}

#[test]
fn missing_required_fields_are_each_reported() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {}
models:
  - display_name: a
    provider: openai
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].display_name: is required",
            "provider_keys[0].provider: is required",
            "models[0].model_name: is required",
            "models[0].provider_key: is required",
        ]
    );
}

#[test]
fn empty_names_are_rejected() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: "", provider: openai, model_name: "", provider_key: openai-main}
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "models[0].display_name: must not be empty",
            "models[0].model_name: must not be empty",
        ]
    );
}

#[test]
fn unsupported_provider_is_named() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: a, provider: bedrock}
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].provider: unsupported provider \"bedrock\" (this gateway supports openai, azure_openai, anthropic, gemini, vertex, mock)"
        ]
    );
}

// ---- references and uniqueness ----

#[test]
fn dangling_provider_key_reference_names_the_entry() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: a, provider: openai, model_name: a, provider_key: openai-main}
  - {display_name: b, provider: openai, model_name: b, provider_key: openai-main}
  - {display_name: c, provider: openai, model_name: c, provider_key: oai}
"#;
    assert_eq!(
        errors(yaml, &[]),
        ["models[2].provider_key: no provider key named \"oai\""]
    );
}

#[test]
fn reference_to_a_broken_provider_key_is_not_called_dangling() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: k, provider: openai, api_base: "ftp://x"}
models:
  - {display_name: a, provider: openai, model_name: a, provider_key: k}
"#;
    assert_eq!(
        errors(yaml, &[]),
        ["provider_keys[0].api_base: must start with http:// or https://"]
    );
}

#[test]
fn model_provider_must_match_its_provider_keys() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: a, provider: mock, model_name: a, provider_key: openai-main}
"#;
    assert_eq!(
        errors(yaml, &[]),
        ["models[0].provider: is mock but provider key \"openai-main\" is openai"]
    );
}

#[test]
fn duplicate_display_name_names_both_places() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: a, provider: openai, model_name: m, provider_key: openai-main}
  - {display_name: gpt-4o, provider: openai, model_name: m, provider_key: openai-main}
  - {display_name: b, provider: openai, model_name: m, provider_key: openai-main}
  - {display_name: gpt-4o, provider: openai, model_name: m, provider_key: openai-main}
"#;
    assert_eq!(
        errors(yaml, &[]),
        ["models[3].display_name: duplicate name \"gpt-4o\" (first at models[1])"]
    );
}

#[test]
fn duplicate_names_are_checked_in_every_collection() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: p, provider: mock}
  - {display_name: p, provider: mock}
api_keys:
  - {display_name: k, key_env: A, allowed_models: []}
  - {display_name: k, key_env: B, allowed_models: []}
"#;
    assert_eq!(
        errors(yaml, &[("A", "key-a"), ("B", "key-b")]),
        [
            "provider_keys[1].display_name: duplicate name \"p\" (first at provider_keys[0])",
            "api_keys[1].display_name: duplicate name \"k\" (first at api_keys[0])",
        ]
    );
}

#[test]
fn two_api_keys_with_the_same_key_are_an_error_without_the_key() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, allowed_models: []}
  - {display_name: b, key_env: B, allowed_models: []}
"#;
    assert_eq!(
        errors(yaml, &[("B", "test")]),
        ["api_keys[1].key_env: the same key as api_keys[0] (each API key must be unique)"]
    );
}

// ---- ${VAR} interpolation ----

#[test]
fn interpolation_fills_string_values_anywhere() {
    let yaml = r#"
_format_version: "${VERSION}"
provider_keys:
  - display_name: "${NAME}-key"
    provider: openai
    api_key: "Bearer-${TOKEN}"
    api_base: "https://${HOST}:${PORT}/v1"
models:
  - display_name: m
    provider: openai
    model_name: m
    provider_key: "${NAME}-key"
api_keys:
  - display_name: k
    key_hash: "${HASH}"
    allowed_models: ["${MODEL}"]
"#;
    let resources = load(
        yaml,
        &[
            ("VERSION", "1"),
            ("NAME", "acme"),
            ("TOKEN", "t0k"),
            ("HOST", "llm.internal"),
            ("PORT", "8443"),
            ("HASH", TEST_HASH),
            ("MODEL", "m"),
        ],
    );
    let key = &resources.provider_keys[0];
    assert_eq!(key.display_name, "acme-key");
    assert_eq!(key.api_key.as_ref().unwrap().expose(), "Bearer-t0k");
    assert_eq!(key.api_base, "https://llm.internal:8443/v1");
    assert_eq!(resources.models[0].provider_key, "acme-key");
    assert_eq!(resources.api_keys[0].key_hash, hash_key("test"));
    assert!(resources.api_keys[0].allows("m"));
}

#[test]
fn interpolated_integer_and_boolean_fields_are_accepted() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai-main, provider: openai}
models:
  - {display_name: a, provider: openai, model_name: a, provider_key: openai-main, timeout: "${T}"}
api_keys:
  - {display_name: k, key_env: K, allowed_models: [a], disabled: "${D}"}
"#;
    let resources = load(yaml, &[("T", "2500"), ("D", "true"), ("K", "key")]);
    assert_eq!(
        resources.models[0].timeouts.total,
        Some(Duration::from_millis(2500))
    );
    assert!(resources.api_keys[0].disabled);
}

#[test]
fn missing_variable_names_the_variable_and_entry_path() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - display_name: openai-main
    provider: openai
    api_key: "${OPENAI_API_KEY}"
"#;
    assert_eq!(
        errors(yaml, &[]),
        ["provider_keys[0].api_key: environment variable OPENAI_API_KEY is not set"]
    );
}

#[test]
fn missing_variable_is_reported_once_not_again_as_a_bad_value() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - display_name: "${NAME}"
    provider: openai
    api_base: "${BASE}"
api_keys:
  - display_name: k
    key_env: "${VAR_NAME}"
    allowed_models: ["${M}"]
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].display_name: environment variable NAME is not set",
            "provider_keys[0].api_base: environment variable BASE is not set",
            "api_keys[0].key_env: environment variable VAR_NAME is not set",
            "api_keys[0].allowed_models[0]: environment variable M is not set",
        ]
    );
}

#[test]
fn unterminated_placeholder_is_an_error() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: a, provider: openai, api_key: "abc${OPENAI"}
"#;
    assert_eq!(
        errors(yaml, &[("OPENAI", "x")]),
        ["provider_keys[0].api_key: unterminated \"${\" (expected ${NAME})"]
    );
}

#[test]
fn dollar_without_brace_is_left_alone() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: $a, provider: openai, api_key: "pa$$word$"}
"#;
    let key = &load(yaml, &[]).provider_keys[0];
    assert_eq!(key.display_name, "$a");
    assert_eq!(key.api_key.as_ref().unwrap().expose(), "pa$$word$");
}

#[test]
fn unknown_fields_are_interpolated_too() {
    assert_eq!(
        errors("_format_version: \"1\"\nextra: \"${NOPE}\"\n", &[]),
        [
            "extra: environment variable NOPE is not set",
            "extra: unknown collection (expected one of: _format_version, provider_keys, models, api_keys)",
        ]
    );
}

// ---- provider keys ----

#[test]
fn api_base_defaults_per_provider() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: o, provider: openai}
  - {display_name: m, provider: mock}
  - {display_name: a, provider: anthropic}
"#;
    let keys = load(yaml, &[]).provider_keys;
    assert_eq!(keys[0].api_base, "https://api.openai.com/v1");
    assert_eq!(keys[1].api_base, "");
    assert_eq!(keys[2].api_base, "https://api.anthropic.com");
    assert_eq!(keys[2].anthropic_version, None);
}

#[test]
fn anthropic_version_is_read_for_anthropic_keys_only() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: a, provider: anthropic, anthropic_version: "2024-01-01"}
"#;
    let keys = load(yaml, &[]).provider_keys;
    assert_eq!(keys[0].anthropic_version.as_deref(), Some("2024-01-01"));

    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: o, provider: openai, anthropic_version: "2024-01-01"}
  - {display_name: a, provider: anthropic, anthropic_version: "2024 01"}
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].anthropic_version: only anthropic providers take an anthropic_version",
            "provider_keys[1].anthropic_version: must be an API version such as 2024-10-21 (letters, digits, '-', '.')",
        ]
    );
}

#[test]
fn api_base_trailing_slash_is_trimmed() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: a, provider: openai, api_base: "https://example.com/v1/"}
  - {display_name: b, provider: openai, api_base: "http://[::1]:8000//"}
  - {display_name: c, provider: mock, api_base: "http://127.0.0.1:9/"}
"#;
    let keys = load(yaml, &[]).provider_keys;
    assert_eq!(keys[0].api_base, "https://example.com/v1");
    assert_eq!(keys[1].api_base, "http://[::1]:8000");
    assert_eq!(keys[2].api_base, "http://127.0.0.1:9");
}

#[test]
fn api_base_must_be_an_http_url_with_a_host() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: k0, provider: openai, api_base: "api.openai.com/v1"}
  - {display_name: k1, provider: openai, api_base: "ftp://example.com"}
  - {display_name: k2, provider: openai, api_base: "https://"}
  - {display_name: k3, provider: openai, api_base: "https:///v1"}
  - {display_name: k4, provider: openai, api_base: "http://:8080/v1"}
  - {display_name: k5, provider: openai, api_base: "http://host:port/v1"}
  - {display_name: k6, provider: openai, api_base: "http://host:99999"}
  - {display_name: k7, provider: openai, api_base: "http://exa mple.com"}
  - {display_name: k8, provider: mock, api_base: ""}
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].api_base: must start with http:// or https://",
            "provider_keys[1].api_base: must start with http:// or https://",
            "provider_keys[2].api_base: must name a host (such as https://api.openai.com/v1)",
            "provider_keys[3].api_base: must name a host (such as https://api.openai.com/v1)",
            "provider_keys[4].api_base: must name a host (such as https://api.openai.com/v1)",
            "provider_keys[5].api_base: has an invalid port",
            "provider_keys[6].api_base: has an invalid port",
            "provider_keys[7].api_base: must be a URL without spaces",
            "provider_keys[8].api_base: must start with http:// or https://",
        ]
    );
}

#[test]
fn api_base_with_credentials_is_not_echoed() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: a, provider: openai, api_base: "ftp://user:hunter2@host"}
"#;
    let errors = errors(yaml, &[]);
    assert_eq!(errors.len(), 1);
    assert!(!errors[0].contains("hunter2"), "{errors:?}");
}

#[test]
fn provider_api_key_is_optional_but_not_empty() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: local, provider: openai, api_base: "http://127.0.0.1:8000/v1"}
  - {display_name: blank, provider: openai, api_key: "${EMPTY}"}
"#;
    assert_eq!(
        errors(yaml, &[("EMPTY", "")]),
        ["provider_keys[1].api_key: must not be empty"]
    );
}

// ---- API keys ----

#[test]
fn api_key_needs_exactly_one_of_key_env_or_key_hash() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - display_name: both
    key_env: A
    key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    allowed_models: []
  - display_name: neither
    allowed_models: []
"#;
    assert_eq!(
        errors(yaml, &[("A", "key-a")]),
        [
            "api_keys[0]: give one of key_env or key_hash, not both",
            "api_keys[1]: one of key_env (a variable holding the key) or key_hash (its hex SHA-256) is required",
        ]
    );
}

#[test]
fn key_env_unset_or_empty_names_the_variable() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: TEAM_A_KEY, allowed_models: []}
  - {display_name: b, key_env: TEAM_B_KEY, allowed_models: []}
  - {display_name: c, key_env: "", allowed_models: []}
"#;
    assert_eq!(
        errors(yaml, &[("TEAM_B_KEY", "")]),
        [
            "api_keys[0].key_env: environment variable TEAM_A_KEY is not set",
            "api_keys[1].key_env: environment variable TEAM_B_KEY is empty",
            "api_keys[2].key_env: must not be empty",
        ]
    );
}

#[test]
fn key_env_plaintext_is_hashed_at_load() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: K, allowed_models: []}
"#;
    let resources = load(yaml, &[("K", "sk-client-plaintext")]);
    assert_eq!(
        resources.api_keys[0].key_hash,
        hash_key("sk-client-plaintext")
    );
    assert!(!format!("{resources:?}").contains("sk-client-plaintext"));
}

#[test]
fn key_hash_accepts_either_case() {
    let yaml = format!(
        "_format_version: \"1\"\napi_keys:\n  - {{display_name: a, key_hash: {}, allowed_models: []}}\n",
        TEST_HASH.to_uppercase()
    );
    assert_eq!(load(&yaml, &[]).api_keys[0].key_hash, hash_key("test"));
}

#[test]
fn key_hash_must_be_64_hex_characters() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: short, key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0, allowed_models: []}
  - {display_name: not-hex, key_hash: 9x86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, allowed_models: []}
  - {display_name: plaintext, key_hash: sk-my-key, allowed_models: []}
"#;
    let expected = |i: usize| {
        format!(
            "api_keys[{i}].key_hash: expected 64 hexadecimal characters (the SHA-256 of the key)"
        )
    };
    assert_eq!(errors(yaml, &[]), [expected(0), expected(1), expected(2)]);
}

#[test]
fn allowed_models_is_required_and_hints_at_star() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: K}
"#;
    assert_eq!(
        errors(yaml, &[("K", "k")]),
        [
            "api_keys[0].allowed_models: is required (use [\"*\"] to allow every model, [] to allow none)"
        ]
    );
}

#[test]
fn allowed_models_entries_must_be_non_empty_strings() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: K, allowed_models: [gpt-4o, 7, ""]}
"#;
    assert_eq!(
        errors(yaml, &[("K", "k")]),
        [
            "api_keys[0].allowed_models[1]: expected a string",
            "api_keys[0].allowed_models[2]: must not be empty",
        ]
    );
}

#[test]
fn allowed_models_patterns_decide_access() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: scoped, key_env: K, allowed_models: [gpt-4o, "claude-*"]}
  - {display_name: all, key_env: L, allowed_models: ["*"]}
  - {display_name: none, key_env: M, allowed_models: []}
"#;
    let resources = load(yaml, &[("K", "k"), ("L", "l"), ("M", "m")]);
    let [scoped, all, none] = &resources.api_keys[..] else {
        panic!("expected three keys");
    };
    assert!(scoped.allows("gpt-4o"));
    assert!(scoped.allows("claude-3-5-sonnet"));
    assert!(!scoped.allows("gpt-4o-mini"));
    assert!(all.allows("anything"));
    assert!(!none.allows("gpt-4o"));
}

#[test]
fn expires_at_must_be_rfc3339() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: A, allowed_models: [], expires_at: "2027-01-01"}
  - {display_name: b, key_env: B, allowed_models: [], expires_at: 1798761600}
"#;
    assert_eq!(
        errors(yaml, &[("A", "a"), ("B", "b")]),
        [
            "api_keys[0].expires_at: expected an RFC 3339 timestamp such as \"2027-01-01T00:00:00Z\"",
            "api_keys[1].expires_at: expected a string",
        ]
    );
}

#[test]
fn expires_at_with_offset_decides_expiry() {
    let yaml = r#"
_format_version: "1"
api_keys:
  - {display_name: a, key_env: A, allowed_models: [], expires_at: 2027-01-01T02:00:00+02:00}
"#;
    let key = &load(yaml, &[("A", "a")]).api_keys[0];
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(NEW_YEAR_2027);
    assert_eq!(key.expires_at, Some(at));
    assert!(!key.is_expired(at - Duration::from_secs(1)));
    assert!(key.is_expired(at));
}

// ---- everything at once, nothing secret ----

#[test]
fn all_errors_in_a_file_are_reported_at_once() {
    let yaml = r#"
_format_version: "2"
routes: []
provider_keys:
  - display_name: p
    provider: openai
    api_key: "${MISSING}"
    colour: blue
models:
  - display_name: m
    provider: openai
    model_name: m
    provider_key: nope
    timeout: soon
api_keys:
  - display_name: k
    key_env: UNSET
"#;
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].api_key: environment variable MISSING is not set",
            "_format_version: unsupported format version \"2\" (this gateway reads \"1\")",
            "routes: unknown collection (expected one of: _format_version, provider_keys, models, api_keys)",
            "provider_keys[0].colour: unknown field (expected one of: display_name, provider, api_key, api_base, api_version, anthropic_version, headers, stream_usage, responses, bill_prompt_on_error, health_check, project, location, credentials_file)",
            "models[0].timeout: expected a duration such as 30s or 250ms, or a whole number of milliseconds",
            "api_keys[0].key_env: environment variable UNSET is not set",
            "api_keys[0].allowed_models: is required (use [\"*\"] to allow every model, [] to allow none)",
            "models[0].provider_key: no provider key named \"nope\"",
        ]
    );
}

#[test]
fn no_error_message_contains_a_secret() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - display_name: p
    provider: openai
    api_key: ["sk-provider-secret"]
    api_base: "ftp://sk-in-url-secret@host"
  - display_name: q
    provider: openai
    api_key: "sk-other-secret ${sk-braced-secret}"
api_keys:
  - display_name: a
    key_hash: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    allowed_models: []
  - display_name: b
    key_env: CLIENT
    allowed_models: []
  - display_name: c
    key_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
    allowed_models: []
    expires_at: "sk-expiry-secret"
"#;
    let errors = errors(yaml, &[("CLIENT", "test")]);
    assert_eq!(errors.len(), 6, "{errors:?}");
    for error in &errors {
        for secret in ["secret", "9f86d0", "test"] {
            assert!(!error.contains(secret), "{error:?} contains {secret:?}");
        }
    }
}

#[test]
fn provider_keys_as_deployed_load_with_their_extras() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - display_name: az
    provider: azure_openai
    api_base: https://res.openai.azure.com/
    api_version: 2024-12-01-preview
    api_key: az-key
  - display_name: gw
    provider: openai
    api_base: http://gw.local/v1/?tenant=t1
    stream_usage: false
    bill_prompt_on_error: true
    headers:
      OpenAI-Organization: org-1
      X-Secret-Header: s3cret
models:
  - {display_name: a, provider: azure_openai, model_name: gpt4o.prod_1, provider_key: az}
"#;
    let resources = load(yaml, &[]);
    let az = &resources.provider_keys[0];
    assert_eq!(az.provider, ProviderKind::AzureOpenAi);
    assert_eq!(az.api_base, "https://res.openai.azure.com");
    assert_eq!(az.api_version.as_deref(), Some("2024-12-01-preview"));
    assert!(az.stream_usage);
    assert!(
        !az.bill_prompt_on_error,
        "prompts of error answers are free by default"
    );
    let gw = &resources.provider_keys[1];
    assert_eq!(gw.api_base, "http://gw.local/v1?tenant=t1");
    assert!(!gw.stream_usage);
    assert!(gw.bill_prompt_on_error);
    let headers: Vec<(&str, &str)> = gw
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.expose()))
        .collect();
    assert_eq!(
        headers,
        [
            ("openai-organization", "org-1"),
            ("x-secret-header", "s3cret")
        ]
    );
    assert!(
        !format!("{gw:?}").contains("s3cret"),
        "header values print as ***"
    );
}

#[test]
fn provider_key_extras_are_validated_with_their_paths() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: az, provider: azure_openai}
  - {display_name: oai, provider: openai, api_version: "2024-10-21", stream_usage: maybe}
  - display_name: bad-headers
    provider: openai
    api_base: "https://x.example/v1#frag"
    headers:
      Authorization: Bearer leaked-value
      Connection: close
      "Bad Name": x
      X-Ok: "line\nbreak-secret"
  - {display_name: az2, provider: azure_openai, api_base: "https://r.openai.azure.com", api_version: "2024/10"}
models:
  - {display_name: m, provider: azure_openai, model_name: "dep/../x", provider_key: az2}
  - {display_name: dots, provider: azure_openai, model_name: "..", provider_key: az2}
  - {display_name: query, provider: azure_openai, model_name: "dep?x=1#f", provider_key: az2}
"#;
    let errors = errors(yaml, &[]);
    for expected in [
        "provider_keys[0].api_version: required for azure_openai",
        "provider_keys[0].api_base: required for azure_openai",
        "provider_keys[1].api_version: only azure_openai providers take an api_version",
        "provider_keys[1].stream_usage: expected true or false",
        "provider_keys[2].api_base: must not have a #fragment",
        "provider_keys[2].headers.Authorization: is set by the gateway",
        "provider_keys[2].headers.Connection: is set by the gateway",
        "provider_keys[2].headers.Bad Name: is not a valid header name",
        "provider_keys[2].headers.X-Ok: must be visible ASCII without line breaks",
        "provider_keys[3].api_version: must be an API version",
        "models[0].model_name: is the Azure deployment name here",
        "models[1].model_name: is the Azure deployment name here",
        "models[2].model_name: is the Azure deployment name here",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{expected}\n{errors:#?}"
        );
    }
    for error in &errors {
        assert!(
            !error.contains("leaked-value") && !error.contains("break-secret"),
            "{error}"
        );
    }
}

/// `resources.example.yaml` with its commented entries (`# - ...` and their `#   key:` lines)
/// uncommented: every example an operator may copy must load.
#[test]
fn the_commented_examples_in_resources_example_yaml_are_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../resources.example.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let entry_line = |line: &str| {
        let Some(rest) = line.strip_prefix("  # ") else {
            return false;
        };
        let rest = rest.strip_prefix("- ").unwrap_or(rest);
        let key = rest.trim_start();
        let (name, _) = key.split_once(':').unwrap_or(("", ""));
        (rest.starts_with("  ") || line.starts_with("  # - "))
            && !name.is_empty()
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    };
    let mut uncommented = 0;
    let yaml: String = text
        .lines()
        .map(|line| {
            if entry_line(line) {
                uncommented += 1;
                format!("  {}\n", &line[4..])
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    assert!(uncommented > 30, "{uncommented} lines uncommented:\n{yaml}");
    let resources =
        aisix_config::parse_resources(&yaml, &path, &|_| Some("example-secret".to_owned()))
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert!(
        resources
            .provider_keys
            .iter()
            .any(|k| k.provider == ProviderKind::AzureOpenAi)
    );
    assert!(resources.models.len() >= 5);
    assert!(!resources.groups.is_empty(), "the group example loads");
}

#[test]
fn whether_a_provider_key_serves_the_responses_api_defaults_by_kind_and_base() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: openai, provider: openai, api_key: k}
  - {display_name: vllm, provider: openai, api_base: "http://vllm.local/v1"}
  - {display_name: proxy, provider: openai, api_base: "http://proxy.local/v1", responses: true}
  - {display_name: own, provider: openai, responses: false}
  - {display_name: az, provider: azure_openai, api_base: "https://r.openai.azure.com", api_version: "2024-10-21"}
  - {display_name: claude, provider: anthropic}
models: []
"#;
    let resources = load(yaml, &[]);
    let serves: Vec<bool> = resources
        .provider_keys
        .iter()
        .map(|key| key.responses)
        .collect();
    assert_eq!(serves, [true, false, true, false, true, false]);
}

#[test]
fn only_openai_kinds_may_say_they_serve_the_responses_api() {
    let yaml = r#"
_format_version: "1"
provider_keys:
  - {display_name: claude, provider: anthropic, responses: true}
  - {display_name: oai, provider: openai, responses: "yes"}
models: []
"#;
    let errors = errors(yaml, &[]);
    for expected in [
        "provider_keys[0].responses: only openai and azure_openai providers serve the Responses API",
        "provider_keys[1].responses: expected true or false",
    ] {
        assert!(
            errors.iter().any(|e| e == expected),
            "{expected}\n{errors:#?}"
        );
    }
}

#[test]
fn a_provider_key_health_check_loads_with_its_defaults_and_bounds() {
    let yaml = |check: &str| {
        format!(
            "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: p, provider: openai, api_key: k, {check}}}\n"
        )
    };
    let loaded = load(&yaml("health_check: {interval: 10s}"), &[]);
    let check = loaded.provider_keys[0].health_check.unwrap();
    assert_eq!(check.interval, Duration::from_secs(10));
    assert_eq!(check.timeout, aisix_config::HealthCheck::DEFAULT_TIMEOUT);
    let loaded = load(&yaml("stream_usage: true"), &[]);
    assert_eq!(
        loaded.provider_keys[0].health_check, None,
        "off unless given"
    );
    assert_eq!(
        errors(&yaml("health_check: {interval: 10ms, every: 1s}"), &[]),
        [
            "provider_keys[0].health_check.interval: must be at least 100ms",
            "provider_keys[0].health_check.every: unknown field (expected one of: interval, timeout)",
        ]
    );
}

#[test]
fn models_and_groups_take_disabled_as_api_keys_do() {
    let yaml = r#"
_format_version: "1"
provider_keys: [{display_name: p, provider: openai, api_key: k}]
models:
  - {display_name: on, provider: openai, model_name: m, provider_key: p}
  - {display_name: off, provider: openai, model_name: m, provider_key: p, disabled: true}
  - {display_name: g, routing: {targets: [{model: off}]}, disabled: true}
"#;
    let resources = parse(yaml, &[]).unwrap();
    assert!(!resources.models[0].disabled);
    assert!(resources.models[1].disabled);
    assert!(resources.groups[0].disabled);

    let wrong = r#"
_format_version: "1"
provider_keys: [{display_name: p, provider: openai, api_key: k}]
models:
  - {display_name: m, provider: openai, model_name: m, provider_key: p, disabled: maybe}
  - {display_name: g, routing: {targets: [{model: m}]}, disabled: 1}
"#;
    assert_eq!(
        errors(wrong, &[]),
        [
            "models[0].disabled: expected true or false",
            "models[1].disabled: expected true or false",
        ]
    );
}
