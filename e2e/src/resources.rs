//! Resources files for tests: one OpenAI-compatible provider key `up` at a given base URL, models
//! on it, and one API key `k` read from a variable and allowed every model. `api_keys` comes
//! last, so a test appends more keys with [`api_key`].

/// `models` are `(display_name, model_name)` pairs.
pub fn openai(upstream: &str, models: &[(&str, &str)], key_env: &str) -> String {
    let models: String = models
        .iter()
        .map(|(name, upstream_name)| {
            format!(
                "  - display_name: {name}\n    provider: openai\n    model_name: {upstream_name}\n    provider_key: up\n"
            )
        })
        .collect();
    format!(
        "_format_version: \"1\"\nprovider_keys:\n  - display_name: up\n    provider: openai\n    api_base: {upstream}\nmodels:\n{models}api_keys:\n  - display_name: k\n    key_env: {key_env}\n    allowed_models: [\"*\"]\n"
    )
}

/// One more `api_keys` entry, to append to [`openai`]'s file: `name`, read from `key_env`,
/// allowed `models`.
pub fn api_key(name: &str, key_env: &str, models: &[&str]) -> String {
    let models = models
        .iter()
        .map(|model| format!("\"{model}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!("  - display_name: {name}\n    key_env: {key_env}\n    allowed_models: [{models}]\n")
}
