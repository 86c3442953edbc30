//! Reading `resources.yaml`: YAML → `${VAR}` interpolation → a strict walk of each collection →
//! cross-entry checks (unique names and keys, references that resolve). Every error is kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_yaml::Value;

use super::cooldown::read_cooldown;
use super::group::{self, GroupDraft};
use super::interpolate::interpolate;
use super::key::{KeyHash, hash_key};
use super::limits::{
    Cost, RateLimit, SpendBudget, SpendingPolicy, read_budget, read_cost, read_rate_limit,
    read_spending,
};
use super::pattern::ModelPattern;
use super::reader::{
    Fields, Report, Slot, bool, duration, index_path, integer, list, non_empty_string, string,
};
use super::rfc3339;
use super::types::{
    ApiKey, Continuation, HealthCheck, Model, OutputTokensField, ProviderKey, ProviderKind,
    Resources, Secret,
};
use super::vertex::{self, CREDENTIALS_ENV, VertexKey};
use crate::bootstrap::CooldownOverrides;
use crate::duration::Unit;
use crate::error::{ConfigError, ConfigErrors, Origin};
use crate::timeouts::TimeoutOverrides;

/// The only `_format_version` this gateway reads.
const FORMAT_VERSION: &str = "1";

const KEY_SOURCE_REQUIRED: &str =
    "one of key_env (a variable holding the key) or key_hash (its hex SHA-256) is required";

/// Reads and validates the resources file at `path`. `env` looks up variables for `${VAR}` and
/// `key_env` (the process environment in production; a map in tests).
pub fn load_resources(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resources, ConfigErrors> {
    load_resources_file(path, env).map(|loaded| loaded.resources)
}

/// A resources file as loaded, with the identity of its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedResources {
    pub resources: Resources,
    /// Lowercase hex SHA-256 of the file's bytes, as `sha256sum` prints it.
    pub sha256: String,
}

/// [`load_resources`], also returning the SHA-256 of the bytes read, so a caller can tell which
/// file is in force and whether a changed file changed anything.
pub fn load_resources_file(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedResources, ConfigErrors> {
    let unreadable = |reason: String| {
        ConfigErrors(vec![ConfigError::new(
            "",
            reason,
            Origin::File(path.to_path_buf()),
        )])
    };
    let bytes =
        std::fs::read(path).map_err(|e| unreadable(format!("cannot read resources file: {e}")))?;
    let yaml = std::str::from_utf8(&bytes)
        .map_err(|_| unreadable("the resources file is not valid UTF-8".to_owned()))?;
    let resources = parse_resources(yaml, path, env)?;
    Ok(LoadedResources {
        resources,
        sha256: sha256_hex(&bytes),
    })
}

/// Lowercase hex SHA-256 of `bytes`, as `sha256sum` prints it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// Validates resources given as YAML text; `origin` is the file named in errors.
pub fn parse_resources(
    yaml: &str,
    origin: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resources, ConfigErrors> {
    let mut report = Report::new(origin);
    let mut document = match serde_yaml::from_str::<Value>(yaml) {
        Ok(document) => document,
        Err(e) => {
            report.error("", format!("not valid YAML: {e}"));
            return report.finish(None);
        }
    };
    if let Err(e) = document.apply_merge() {
        report.error("", format!("not valid YAML: {e}"));
        return report.finish(None);
    }
    interpolate(&mut document, "", env, &mut report);
    let resources = read_document(&mut report, &document, env);
    report.finish(resources)
}

/// Validates resources already parsed into one document (the shape of the file), so every
/// source is checked by the same walk as the file.
pub(crate) fn parse_resources_value(
    mut document: Value,
    origin: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resources, ConfigErrors> {
    let mut report = Report::new(origin);
    interpolate(&mut document, "", env, &mut report);
    let resources = read_document(&mut report, &document, env);
    report.finish(resources)
}

fn read_document(
    report: &mut Report,
    document: &Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Resources> {
    if document.is_null() {
        report.error("_format_version", "is required");
        return None;
    }
    let Value::Mapping(_) = document else {
        report.error(
            "",
            "expected a mapping with _format_version and the collections",
        );
        return None;
    };
    let mut top = Fields::new(report, String::new(), document)?;
    read_format_version(report, &mut top);
    let provider_keys = collection(report, &mut top, "provider_keys");
    let models = collection(report, &mut top, "models");
    let api_keys = collection(report, &mut top, "api_keys");
    top.finish(report, "collection");

    let provider_keys: Vec<_> = provider_keys
        .into_iter()
        .map(|(value, path)| read_provider_key(report, value, path, env))
        .collect();
    let mut drafts = Vec::new();
    let mut groups = Vec::new();
    // Direct models and groups share one list and one namespace, in file order.
    let mut names = Vec::with_capacity(models.len());
    for (value, path) in models {
        match read_entry(report, value, path) {
            Entry::Direct(draft) => {
                names.push(draft.name.clone());
                drafts.push(draft);
            }
            Entry::Group(draft) => {
                names.push(draft.name.clone());
                groups.push(draft);
            }
        }
    }
    let api_keys: Vec<_> = api_keys
        .into_iter()
        .map(|(value, path)| read_api_key(report, value, path, env))
        .collect();

    check_unique_names(
        report,
        "provider_keys",
        provider_keys.iter().map(|d| d.name.as_deref()),
    );
    check_unique_names(report, "models", names.iter().map(Option::as_deref));
    check_unique_names(
        report,
        "api_keys",
        api_keys.iter().map(|d| d.name.as_deref()),
    );
    check_unique_key_hashes(report, &api_keys);
    let direct: HashMap<&str, usize> = drafts
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((d.name.as_deref()?, i)))
        .collect();
    let group_names: Vec<Option<String>> = groups.iter().map(|g| g.name.clone()).collect();
    let groups = group::resolve_targets(report, &direct, &group_names, groups);
    let models = resolve_provider_keys(report, &provider_keys, drafts);

    if !report.is_clean() {
        return None;
    }
    Some(Resources {
        provider_keys: provider_keys
            .into_iter()
            .map(|d| d.built)
            .collect::<Option<_>>()?,
        models: models.into_iter().collect::<Option<_>>()?,
        groups: groups.into_iter().collect::<Option<_>>()?,
        api_keys: api_keys
            .into_iter()
            .map(|d| d.built)
            .collect::<Option<_>>()?,
    })
}

fn read_format_version(report: &mut Report, top: &mut Fields<'_>) {
    let Some((value, path)) = top.required(report, "_format_version") else {
        return;
    };
    let message = match value {
        Value::String(version) if version == FORMAT_VERSION => return,
        Value::String(version) => format!(
            "unsupported format version {version:?} (this gateway reads {FORMAT_VERSION:?})"
        ),
        _ => format!(
            "expected the string {FORMAT_VERSION:?} (quote it: _format_version: {FORMAT_VERSION:?})"
        ),
    };
    report.error(path, message);
}

/// The entries of a top-level collection with their paths; absent or `null` is empty.
fn collection<'v>(
    report: &mut Report,
    top: &mut Fields<'v>,
    name: &'static str,
) -> Vec<(&'v Value, String)> {
    let Some((value, path)) = top.optional(report, name) else {
        return Vec::new();
    };
    list(report, value, &path)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, entry)| (entry, index_path(&path, i)))
        .collect()
}

/// A provider key as far as it could be read; `built` is `None` when something was wrong.
#[derive(Default)]
struct ProviderKeyDraft {
    name: Option<String>,
    provider: Option<ProviderKind>,
    built: Option<ProviderKey>,
}

fn read_provider_key(
    report: &mut Report,
    value: &Value,
    path: String,
    env: &dyn Fn(&str) -> Option<String>,
) -> ProviderKeyDraft {
    let Some(mut fields) = Fields::new(report, path.clone(), value) else {
        return ProviderKeyDraft::default();
    };
    let name = display_name(report, &mut fields);
    let provider = fields
        .required(report, "provider")
        .and_then(|(v, p)| provider_kind(report, v, &p));
    let api_key = fields
        .optional(report, "api_key")
        .map(|(v, p)| non_empty_string(report, v, &p).map(Secret::new));
    let api_base = fields
        .optional(report, "api_base")
        .map(|(v, p)| string(report, v, &p).and_then(|base| api_base(report, base, &p)));
    let api_version = fields.optional(report, "api_version").map(|(v, p)| {
        non_empty_string(report, v, &p).and_then(|version| api_version(report, version, &p))
    });
    // The same shape as an Azure api-version (`api_version` is shadowed by the field here).
    let anthropic_version = fields.optional(report, "anthropic_version").map(|(v, p)| {
        non_empty_string(report, v, &p).and_then(|version| self::api_version(report, version, &p))
    });
    let headers = fields
        .optional(report, "headers")
        .map(|(v, p)| static_headers(report, v, &p));
    let stream_usage = fields
        .optional(report, "stream_usage")
        .map(|(v, p)| bool(report, v, &p));
    let responses = fields
        .optional(report, "responses")
        .map(|(v, p)| bool(report, v, &p));
    let bill_prompt_on_error = fields
        .optional(report, "bill_prompt_on_error")
        .map(|(v, p)| bool(report, v, &p));
    let health_check = fields
        .optional(report, "health_check")
        .map(|(v, p)| read_health_check(report, v, &p));
    let project = fields
        .optional(report, "project")
        .map(|(v, p)| vertex::project(report, v, &p));
    let location = fields
        .optional(report, "location")
        .map(|(v, p)| vertex::location(report, v, &p));
    let credentials_file = fields
        .optional(report, "credentials_file")
        .map(|(v, p)| non_empty_string(report, v, &p).map(|f| (PathBuf::from(f), p)));
    fields.finish(report, "field");
    let mut vertex_key = None;

    if let Some(provider) = provider {
        let field = |name: &str| format!("{path}.{name}");
        if provider == ProviderKind::AzureOpenAi {
            if api_version.is_none() {
                report.error(field("api_version"), "required for azure_openai");
            }
        } else if api_version.is_some() {
            report.error(
                field("api_version"),
                "only azure_openai providers take an api_version",
            );
        }
        if provider != ProviderKind::Anthropic && anthropic_version.is_some() {
            report.error(
                field("anthropic_version"),
                "only anthropic providers take an anthropic_version",
            );
        }
        if matches!(
            provider,
            ProviderKind::Anthropic
                | ProviderKind::Gemini
                | ProviderKind::Vertex
                | ProviderKind::Mock
        ) && matches!(responses, Some(Some(true)))
        {
            report.error(
                field("responses"),
                "only openai and azure_openai providers serve the Responses API",
            );
        }
        if provider == ProviderKind::Vertex {
            vertex_key = read_vertex(report, &path, project, location, credentials_file, env);
            if health_check.is_some() {
                report.error(
                    field("health_check"),
                    "vertex providers have no health check (Vertex AI lists no models under a project)",
                );
            }
            if api_key.is_some() {
                report.error(
                    field("api_key"),
                    "vertex providers authenticate with their service account (credentials_file)",
                );
            }
        } else {
            for (name, given) in [
                ("project", project.is_some()),
                ("location", location.is_some()),
                ("credentials_file", credentials_file.is_some()),
            ] {
                if given {
                    report.error(field(name), format!("only vertex providers take a {name}"));
                }
            }
        }
        if provider.default_api_base().is_none()
            && provider != ProviderKind::Vertex
            && api_base.is_none()
        {
            report.error(
                field("api_base"),
                format!("required for {provider} (such as https://RESOURCE.openai.azure.com)"),
            );
        }
    }

    let built = build_provider_key(
        name.clone(),
        provider,
        api_key,
        api_base,
        api_version,
        anthropic_version,
        headers,
        stream_usage,
        responses,
        bill_prompt_on_error,
        health_check,
        vertex_key,
    );
    ProviderKeyDraft {
        name,
        provider,
        built,
    }
}

#[allow(
    clippy::too_many_arguments,
    reason = "one argument per field of the key, each read and checked on its own"
)]
fn build_provider_key(
    name: Option<String>,
    provider: Option<ProviderKind>,
    api_key: Option<Option<Secret>>,
    api_base: Option<Option<String>>,
    api_version: Option<Option<String>>,
    anthropic_version: Option<Option<String>>,
    headers: Option<Option<Vec<(String, Secret)>>>,
    stream_usage: Option<Option<bool>>,
    responses: Option<Option<bool>>,
    bill_prompt_on_error: Option<Option<bool>>,
    health_check: Option<Option<HealthCheck>>,
    vertex: Option<VertexKey>,
) -> Option<ProviderKey> {
    let provider = provider?;
    if provider == ProviderKind::Vertex && vertex.is_none() {
        return None;
    }
    let api_base = match (given(api_base)?, &vertex) {
        (Some(base), _) => base,
        (None, Some(vertex)) => super::vertex::default_api_base(&vertex.location),
        (None, None) => provider.default_api_base()?.to_owned(),
    };
    let responses = given(responses)?.unwrap_or(match provider {
        ProviderKind::OpenAi => Some(api_base.as_str()) == provider.default_api_base(),
        ProviderKind::AzureOpenAi => true,
        ProviderKind::Anthropic
        | ProviderKind::Gemini
        | ProviderKind::Vertex
        | ProviderKind::Mock => false,
    });
    Some(ProviderKey {
        display_name: name?,
        provider,
        api_key: given(api_key)?,
        api_base,
        api_version: given(api_version)?,
        anthropic_version: given(anthropic_version)?,
        headers: given(headers)?.unwrap_or_default(),
        stream_usage: given(stream_usage)?.unwrap_or(true),
        responses,
        bill_prompt_on_error: given(bill_prompt_on_error)?.unwrap_or(false),
        health_check: given(health_check)?,
        vertex,
    })
}

/// A `vertex` key's `project` and `location` (both required) and its service account, from
/// `credentials_file` or else the file [`CREDENTIALS_ENV`] names.
fn read_vertex(
    report: &mut Report,
    path: &str,
    project: Option<Option<String>>,
    location: Option<Option<String>>,
    credentials_file: Option<Option<(PathBuf, String)>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<VertexKey> {
    let field = |name: &str| format!("{path}.{name}");
    if project.is_none() {
        report.error(
            field("project"),
            "required for vertex (the Google Cloud project id)",
        );
    }
    if location.is_none() {
        report.error(
            field("location"),
            "required for vertex (such as us-central1, or global)",
        );
    }
    let service_account = match credentials_file {
        Some(Some((file, at))) => {
            // A relative path is the resources file's neighbour, as `resources_file` is the
            // config file's.
            let file = match report.folder() {
                Some(folder) if file.is_relative() => folder.join(file),
                _ => file,
            };
            vertex::read_service_account(report, &file, &at)
        }
        Some(None) => None,
        None => match env(CREDENTIALS_ENV).filter(|f| !f.is_empty()) {
            Some(file) => vertex::read_service_account(
                report,
                Path::new(&file),
                &format!("{} (from {CREDENTIALS_ENV})", field("credentials_file")),
            ),
            None => {
                report.error(
                    field("credentials_file"),
                    format!(
                        "required for vertex: the service-account JSON key file (or set {CREDENTIALS_ENV})"
                    ),
                );
                None
            }
        },
    };
    Some(VertexKey {
        project: project??,
        location: location??,
        service_account: service_account?,
    })
}

/// `health_check: {interval, timeout}`, each a duration (`30s`, or milliseconds).
fn read_health_check(report: &mut Report, value: &Value, path: &str) -> Option<HealthCheck> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let interval = fields.optional(report, "interval").map(|(v, p)| {
        duration(
            report,
            v,
            &p,
            Unit::Milliseconds,
            Duration::from_millis(100),
        )
    });
    let timeout = fields
        .optional(report, "timeout")
        .map(|(v, p)| duration(report, v, &p, Unit::Milliseconds, Duration::from_millis(1)));
    fields.finish(report, "field");
    Some(HealthCheck {
        interval: given(interval)?.unwrap_or(HealthCheck::DEFAULT_INTERVAL),
        timeout: given(timeout)?.unwrap_or(HealthCheck::DEFAULT_TIMEOUT),
    })
}

/// An Azure `api-version` such as `2024-10-21` or `2024-12-01-preview`: it goes into a query
/// string as it is, so only letters, digits, `-` and `.` are taken.
fn api_version(report: &mut Report, version: &str, path: &str) -> Option<String> {
    if version
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
    {
        Some(version.to_owned())
    } else {
        report.error(
            path,
            "must be an API version such as 2024-10-21 (letters, digits, '-', '.')",
        );
        None
    }
}

/// Headers the gateway sets itself, or that belong to one connection: never static.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "authorization",
    "api-key",
    "x-request-id",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `headers`: a mapping of header names to string values. Values are never echoed in errors
/// (they may be credentials).
fn static_headers(report: &mut Report, value: &Value, path: &str) -> Option<Vec<(String, Secret)>> {
    let Value::Mapping(mapping) = value else {
        report.error(path, "expected a mapping of header names to values");
        return None;
    };
    let mut headers = Some(Vec::with_capacity(mapping.len()));
    for (name, value) in mapping {
        let Value::String(name) = name else {
            report.error(path, "header names must be strings");
            headers = None;
            continue;
        };
        let header_path = format!("{path}.{name}");
        let lower = name.to_ascii_lowercase();
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c));
        let value = if !valid_name {
            report.error(header_path, "is not a valid header name");
            None
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            report.error(
                header_path,
                "is set by the gateway or belongs to one connection: it cannot be a static header",
            );
            None
        } else {
            match value {
                Value::String(v) if v.bytes().all(|c| c == b'\t' || (b' '..=b'~').contains(&c)) => {
                    Some(Secret::new(v.as_str()))
                }
                Value::String(_) => {
                    report.error(header_path, "must be visible ASCII without line breaks");
                    None
                }
                _ => {
                    report.error(header_path, "expected a string");
                    None
                }
            }
        };
        match (value, headers.as_mut()) {
            (Some(value), Some(headers)) => headers.push((lower, value)),
            _ => headers = None,
        }
    }
    headers
}

/// An optional field as read (`None` absent, `Some(None)` given but wrong) to what the entry
/// holds (`Some(None)` absent, `None` wrong).
pub(super) fn given<T>(field: Option<Option<T>>) -> Option<Option<T>> {
    field.map_or(Some(None), |value| value.map(Some))
}

/// An `http://` or `https://` URL with a host, without trailing `/`. The URL is not echoed in
/// errors: it may carry credentials (`https://user:pass@host`).
fn api_base(report: &mut Report, base: &str, path: &str) -> Option<String> {
    let lower = base.to_ascii_lowercase();
    let Some(scheme_len) = ["http://", "https://"]
        .iter()
        .find(|scheme| lower.starts_with(*scheme))
        .map(|scheme| scheme.len())
    else {
        report.error(path, "must start with http:// or https://");
        return None;
    };
    if base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        report.error(path, "must be a URL without spaces");
        return None;
    }
    if base.contains('#') {
        report.error(path, "must not have a #fragment");
        return None;
    }
    let rest = &base[scheme_len..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, after)) => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => ("", None),
            },
            None => ("", None),
        },
        None => match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        report.error(path, "must name a host (such as https://api.openai.com/v1)");
        return None;
    }
    if let Some(port) = port
        && (port.is_empty()
            || !port.bytes().all(|c| c.is_ascii_digit())
            || port.parse::<u16>().is_err())
    {
        report.error(path, "has an invalid port");
        return None;
    }
    // The path loses its trailing `/`; a query string stays after it.
    Some(match base.split_once('?') {
        Some((base, query)) => format!("{}?{query}", base.trim_end_matches('/')),
        None => base.trim_end_matches('/').to_owned(),
    })
}

fn provider_kind(report: &mut Report, value: &Value, path: &str) -> Option<ProviderKind> {
    let name = string(report, value, path)?;
    let kind = ProviderKind::from_name(name);
    if kind.is_none() {
        let supported: Vec<_> = ProviderKind::ALL.iter().map(ProviderKind::as_str).collect();
        report.error(
            path,
            format!(
                "unsupported provider {name:?} (this gateway supports {})",
                supported.join(", ")
            ),
        );
    }
    kind
}

fn display_name(report: &mut Report, fields: &mut Fields<'_>) -> Option<String> {
    fields
        .required(report, "display_name")
        .and_then(|(v, p)| non_empty_string(report, v, &p))
        .map(str::to_owned)
}

/// A model as far as it could be read, before its provider key is looked up.
#[derive(Default)]
struct ModelDraft {
    path: String,
    name: Option<String>,
    provider: Option<ProviderKind>,
    model_name: Option<String>,
    provider_key: Option<String>,
    /// `None` when one of them was wrong.
    timeouts: Option<TimeoutOverrides>,
    rate_limit: Option<Option<RateLimit>>,
    cost: Option<Option<Cost>>,
    retries: Option<Option<u32>>,
    cooldown: Option<Option<CooldownOverrides>>,
    continuation: Option<Option<Continuation>>,
    output_tokens_field: Option<Option<OutputTokensField>>,
    disabled: Option<Option<bool>>,
}

/// A `models[]` entry: a direct model, or a group when it has `routing`.
enum Entry {
    Direct(ModelDraft),
    Group(GroupDraft),
}

fn read_entry(report: &mut Report, value: &Value, path: String) -> Entry {
    let Some(mut fields) = Fields::new(report, path.clone(), value) else {
        return Entry::Direct(ModelDraft::default());
    };
    let name = display_name(report, &mut fields);
    for (field, message) in AISIX_ONLY_FIELDS {
        fields.refuse(report, field, message);
    }
    // `disabled`, as on API keys: the entry stays loaded (groups may still name it) but is
    // answered as an unknown model.
    let disabled = fields
        .optional(report, "disabled")
        .map(|(v, p)| bool(report, v, &p));
    if group::is_group(value) {
        let timeouts = read_timeouts(report, &mut fields);
        let rate_limit = fields
            .optional(report, "rate_limit")
            .map(|(v, p)| read_rate_limit(report, v, &p));
        let mut group = group::read_group(report, fields, name, timeouts, rate_limit);
        group.disabled = disabled;
        return Entry::Group(group);
    }
    Entry::Direct(ModelDraft {
        disabled,
        ..read_model(report, fields, path, name)
    })
}

/// `timeout`, `connect_timeout`, `first_token_timeout` and `stream_idle_timeout` (a duration;
/// a bare number is milliseconds) of a model or group, and AISIX's `stream_timeout` for
/// `stream_idle_timeout`; `None` when one of them is wrong.
fn read_timeouts(report: &mut Report, fields: &mut Fields<'_>) -> Option<TimeoutOverrides> {
    let mut millis = |name, min| {
        fields
            .optional(report, name)
            .map(|(v, p)| (duration(report, v, &p, Unit::Milliseconds, min), p))
    };
    let one_ms = Duration::from_millis(1);
    let total = millis("timeout", one_ms);
    let connect = millis("connect_timeout", one_ms);
    let first_token = millis("first_token_timeout", one_ms);
    let stream_idle = millis("stream_idle_timeout", one_ms);
    // AISIX's name; its 0 means unset, as in AISIX.
    let stream_timeout = millis("stream_timeout", Duration::ZERO)
        .map(|(d, p)| (d.map(|d| (!d.is_zero()).then_some(d)), p));
    let stream_idle = match (stream_idle, stream_timeout) {
        (Some(_), Some((_, path))) => {
            report.error(
                path,
                "is AISIX's name for stream_idle_timeout: give one of them, not both",
            );
            return None;
        }
        (Some((d, _)), None) => Some(d),
        (None, Some((Some(Some(d)), _))) => Some(Some(d)),
        (None, Some((Some(None), _))) | (None, None) => None,
        (None, Some((None, _))) => Some(None),
    };
    Some(TimeoutOverrides {
        connect: given(connect.map(|(d, _)| d))?,
        first_token: given(first_token.map(|(d, _)| d))?,
        stream_idle: given(stream_idle)?,
        total: given(total.map(|(d, _)| d))?,
    })
}

/// AISIX's per-model fields aisix does not implement, refused by name.
const AISIX_ONLY_FIELDS: &[(&str, &str)] = &[
    (
        "allowed_cidrs",
        "is AISIX's client IP allowlist, which aisix does not implement",
    ),
    (
        "auto_prompt_caching",
        "is AISIX's prompt-cache injection, which aisix does not implement",
    ),
    (
        "background_model_check",
        "is AISIX's background health check, which aisix does not implement",
    ),
    (
        "embedding",
        "is AISIX's embedding metadata, which aisix does not implement",
    ),
    (
        "ensemble",
        "is AISIX's ensemble model, which aisix does not implement",
    ),
    (
        "semantic",
        "is AISIX's semantic routing, which aisix does not implement",
    ),
    (
        "provider_key_id",
        "is AISIX's stored-resource id; name the provider key with provider_key",
    ),
];

fn read_model(
    report: &mut Report,
    mut fields: Fields<'_>,
    path: String,
    name: Option<String>,
) -> ModelDraft {
    let provider = fields
        .required(report, "provider")
        .and_then(|(v, p)| provider_kind(report, v, &p));
    let model_name = fields
        .required(report, "model_name")
        .and_then(|(v, p)| non_empty_string(report, v, &p))
        .map(str::to_owned);
    let provider_key = fields
        .required(report, "provider_key")
        .and_then(|(v, p)| non_empty_string(report, v, &p))
        .map(str::to_owned);
    let timeouts = read_timeouts(report, &mut fields);
    let rate_limit = fields
        .optional(report, "rate_limit")
        .map(|(v, p)| read_rate_limit(report, v, &p));
    let cost = fields
        .optional(report, "cost")
        .map(|(v, p)| read_cost(report, v, &p));
    let retries = fields.optional(report, "retries").map(|(v, p)| {
        integer(report, v, &p, 0, group::MAX_RETRIES).and_then(|n| u32::try_from(n).ok())
    });
    let cooldown = fields
        .optional(report, "cooldown")
        .map(|(v, p)| read_cooldown(report, v, &p));
    let continuation = fields
        .optional(report, "continuation")
        .map(|(v, p)| continuation(report, v, &p));
    let output_tokens_field = fields
        .optional(report, "output_tokens_field")
        .map(|(v, p)| {
            let name = string(report, v, &p)?;
            let field = OutputTokensField::from_name(name);
            if field.is_none() {
                report.error(
                    &p,
                    format!("expected max_tokens or max_completion_tokens, not {name:?}"),
                );
            }
            field
        });
    fields.finish(report, "field");
    ModelDraft {
        path,
        name,
        provider,
        model_name,
        provider_key,
        timeouts,
        rate_limit,
        cost,
        retries,
        cooldown,
        continuation,
        output_tokens_field,
        disabled: None,
    }
}

fn continuation(report: &mut Report, value: &Value, path: &str) -> Option<Continuation> {
    let name = string(report, value, path)?;
    let found = Continuation::ALL.into_iter().find(|c| c.as_str() == name);
    if found.is_none() {
        let names: Vec<_> = Continuation::ALL.iter().map(|c| c.as_str()).collect();
        report.error(
            path,
            format!(
                "unknown value {name:?} (expected one of: {})",
                names.join(", ")
            ),
        );
    }
    found
}

/// Checks each model's `provider_key` against the provider keys and builds the model; `None`
/// for a model with any error.
fn resolve_provider_keys(
    report: &mut Report,
    provider_keys: &[ProviderKeyDraft],
    models: Vec<ModelDraft>,
) -> Vec<Option<Model>> {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, key) in provider_keys.iter().enumerate() {
        if let Some(name) = &key.name {
            by_name.entry(name).or_insert(i);
        }
    }
    models
        .into_iter()
        .map(|model| {
            let reference = model.provider_key.as_deref()?;
            let Some(&index) = by_name.get(reference) else {
                report.error(
                    format!("{}.provider_key", model.path),
                    format!("no provider key named {reference:?}"),
                );
                return None;
            };
            let key_provider = provider_keys.get(index).and_then(|key| key.provider);
            if let (Some(provider), Some(key_provider)) = (model.provider, key_provider)
                && provider != key_provider
            {
                report.error(
                    format!("{}.provider", model.path),
                    format!("is {provider} but provider key {reference:?} is {key_provider}"),
                );
                return None;
            }
            if key_provider == Some(ProviderKind::AzureOpenAi)
                && let Some(deployment) = &model.model_name
                && (!deployment
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
                    || matches!(deployment.as_str(), "." | ".."))
            {
                // A path segment: `.` and `..` would name another path once resolved.
                report.error(
                    format!("{}.model_name", model.path),
                    "is the Azure deployment name here: letters, digits, '-', '_' and '.' only, and not '.' or '..'",
                );
                return None;
            }
            Some(Model {
                display_name: model.name?,
                provider: model.provider?,
                model_name: model.model_name?,
                provider_key: reference.to_owned(),
                provider_key_index: index,
                timeouts: model.timeouts?,
                rate_limit: given(model.rate_limit)?.unwrap_or_default(),
                cost: given(model.cost)?,
                retries: given(model.retries)?,
                cooldown: given(model.cooldown)?.unwrap_or_default(),
                continuation: given(model.continuation)?
                    .or(model.provider.map(Continuation::default_for))?,
                output_tokens_field: given(model.output_tokens_field)?,
                disabled: given(model.disabled)?.unwrap_or(false),
            })
        })
        .collect()
}

/// An API key as far as it could be read; `hash` comes with the path of the field it came from.
#[derive(Default)]
struct ApiKeyDraft {
    name: Option<String>,
    hash: Option<(KeyHash, String)>,
    built: Option<ApiKey>,
}

fn read_api_key(
    report: &mut Report,
    value: &Value,
    path: String,
    env: &dyn Fn(&str) -> Option<String>,
) -> ApiKeyDraft {
    let Some(mut fields) = Fields::new(report, path, value) else {
        return ApiKeyDraft::default();
    };
    let name = display_name(report, &mut fields);
    let hash = match (
        fields.take(report, "key_env"),
        fields.take(report, "key_hash"),
    ) {
        (Slot::Present(..) | Slot::Poisoned, Slot::Present(..) | Slot::Poisoned) => {
            report.error(fields.path(), "give one of key_env or key_hash, not both");
            None
        }
        (Slot::Absent, Slot::Absent) => {
            report.error(fields.path(), KEY_SOURCE_REQUIRED);
            None
        }
        (Slot::Present(v, p), Slot::Absent) => {
            key_from_env(report, v, &p, env).map(|hash| (hash, p))
        }
        (Slot::Absent, Slot::Present(v, p)) => key_from_hash(report, v, &p).map(|hash| (hash, p)),
        (Slot::Poisoned, Slot::Absent) | (Slot::Absent, Slot::Poisoned) => None,
    };
    let allowed_models = fields
        .required_or(
            report,
            "allowed_models",
            "is required (use [\"*\"] to allow every model, [] to allow none)",
        )
        .and_then(|(v, p)| allowed_models(report, v, &p));
    let disabled = fields
        .optional(report, "disabled")
        .map(|(v, p)| bool(report, v, &p));
    let expires_at = fields.optional(report, "expires_at").map(|(v, p)| {
        let text = string(report, v, &p)?;
        let at = rfc3339::parse(text);
        if at.is_none() {
            report.error(
                &p,
                "expected an RFC 3339 timestamp such as \"2027-01-01T00:00:00Z\"",
            );
        }
        at
    });
    let rate_limit = fields
        .optional(report, "rate_limit")
        .map(|(v, p)| read_rate_limit(report, v, &p));
    let budget = fields
        .optional(report, "budget")
        .map(|(v, p)| read_budget(report, v, &p));
    let spending = fields
        .optional(report, "spending")
        .map(|(v, p)| read_spending(report, v, &p));
    fields.finish(report, "field");

    let built = build_api_key(
        name.clone(),
        hash.as_ref().map(|(hash, _)| *hash),
        allowed_models,
        ApiKeyOptions {
            disabled,
            expires_at,
            rate_limit,
            budget,
            spending,
        },
    );
    ApiKeyDraft { name, hash, built }
}

/// An API key's optional fields as read (`None` absent, `Some(None)` given but wrong).
struct ApiKeyOptions {
    disabled: Option<Option<bool>>,
    expires_at: Option<Option<SystemTime>>,
    rate_limit: Option<Option<RateLimit>>,
    budget: Option<Option<SpendBudget>>,
    spending: Option<Option<SpendingPolicy>>,
}

fn build_api_key(
    name: Option<String>,
    hash: Option<KeyHash>,
    allowed_models: Option<Vec<ModelPattern>>,
    options: ApiKeyOptions,
) -> Option<ApiKey> {
    Some(ApiKey {
        display_name: name?,
        key_hash: hash?,
        allowed_models: allowed_models?,
        disabled: given(options.disabled)?.unwrap_or(false),
        expires_at: given(options.expires_at)?,
        rate_limit: given(options.rate_limit)?.unwrap_or_default(),
        budget: given(options.budget)?,
        spending: given(options.spending)?.unwrap_or_default(),
    })
}

/// Reads the key's plaintext from the variable named at `key_env` and hashes it; the plaintext
/// goes no further.
fn key_from_env(
    report: &mut Report,
    value: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<KeyHash> {
    let var = non_empty_string(report, value, path)?;
    match env(var) {
        None => {
            report.error(path, format!("environment variable {var} is not set"));
            None
        }
        Some(plaintext) if plaintext.is_empty() => {
            report.error(path, format!("environment variable {var} is empty"));
            None
        }
        Some(plaintext) => Some(hash_key(&plaintext)),
    }
}

fn key_from_hash(report: &mut Report, value: &Value, path: &str) -> Option<KeyHash> {
    let hex = string(report, value, path)?;
    let hash = KeyHash::from_hex(hex);
    if hash.is_none() {
        report.error(
            path,
            "expected 64 hexadecimal characters (the SHA-256 of the key)",
        );
    }
    hash
}

fn allowed_models(report: &mut Report, value: &Value, path: &str) -> Option<Vec<ModelPattern>> {
    let items = list(report, value, path)?;
    let mut patterns = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let item_path = index_path(path, i);
        let pattern = if report.is_poisoned(&item_path) {
            None
        } else {
            non_empty_string(report, item, &item_path).map(ModelPattern::new)
        };
        match (pattern, patterns.as_mut()) {
            (Some(pattern), Some(patterns)) => patterns.push(pattern),
            _ => patterns = None,
        }
    }
    patterns
}

/// Reports each `display_name` already used earlier in `collection`.
fn check_unique_names<'a>(
    report: &mut Report,
    collection: &str,
    names: impl Iterator<Item = Option<&'a str>>,
) {
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    for (i, name) in names.enumerate() {
        let Some(name) = name else { continue };
        match first_at.get(name) {
            Some(&first) => report.error(
                format!("{}.display_name", index_path(collection, i)),
                format!(
                    "duplicate name {name:?} (first at {})",
                    index_path(collection, first)
                ),
            ),
            None => {
                first_at.insert(name, i);
            }
        }
    }
}

/// Reports each API key whose key another entry already has, naming neither key nor hash.
fn check_unique_key_hashes(report: &mut Report, api_keys: &[ApiKeyDraft]) {
    let mut first_at: HashMap<KeyHash, usize> = HashMap::new();
    for (i, key) in api_keys.iter().enumerate() {
        let Some((hash, path)) = &key.hash else {
            continue;
        };
        match first_at.get(hash) {
            Some(&first) => report.error(
                path.as_str(),
                format!(
                    "the same key as {} (each API key must be unique)",
                    index_path("api_keys", first)
                ),
            ),
            None => {
                first_at.insert(*hash, i);
            }
        }
    }
}
