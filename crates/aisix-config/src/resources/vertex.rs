//! A `vertex` provider key's own fields (`project`, `location`, `credentials_file`) and the
//! service-account key file they name, read and checked at load so a bad file is an error with
//! its path, never a failed request.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::reader::{Report, non_empty_string};
use super::types::Secret;

/// `provider_keys[]` of `provider: vertex`: where its models live and how it authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexKey {
    /// `project`: the Google Cloud project id.
    pub project: String,
    /// `location`: the region (`us-central1`, `europe-west4`) or `global`.
    pub location: String,
    /// The service account whose key signs the token requests.
    pub service_account: ServiceAccount,
}

/// The fields of a service-account JSON key file the gateway uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    /// The file it was read from (`credentials_file`, else `GOOGLE_APPLICATION_CREDENTIALS`).
    pub file: PathBuf,
    pub client_email: String,
    /// The PEM-encoded RSA private key (PKCS#8), never printed.
    pub private_key: Secret,
    /// Named in the assertion's `kid` header when the file has one.
    pub private_key_id: Option<String>,
    /// Where the signed assertion is exchanged for an access token.
    pub token_uri: String,
}

/// The environment variable naming the key file when `credentials_file` is not given.
pub const CREDENTIALS_ENV: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// The host every endpoint of `location` is served from: `https://{location}-aiplatform.googleapis.com`,
/// or `https://aiplatform.googleapis.com` for `global`.
pub fn default_api_base(location: &str) -> String {
    if location == "global" {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }
}

/// `project`: Google's project ids are lowercase letters, digits and `-` (older domain-scoped
/// ones carry `example.com:`); anything else would not name a project.
pub(super) fn project(report: &mut Report, value: &Value, path: &str) -> Option<String> {
    let project = non_empty_string(report, value, path)?;
    if project
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-.:".contains(&c))
    {
        Some(project.to_owned())
    } else {
        report.error(
            path,
            "expected a Google Cloud project id (lowercase letters, digits and -)",
        );
        None
    }
}

/// `location`: a region such as `us-central1`, or `global`.
pub(super) fn location(report: &mut Report, value: &Value, path: &str) -> Option<String> {
    let location = non_empty_string(report, value, path)?;
    if location
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        Some(location.to_owned())
    } else {
        report.error(
            path,
            "expected a Google Cloud location such as us-central1 or global",
        );
        None
    }
}

/// Reads the key file at `file` (named at `path`, or by [`CREDENTIALS_ENV`] when `path` is the
/// key's own path). Errors name the file and the field, never the key.
pub(super) fn read_service_account(
    report: &mut Report,
    file: &Path,
    path: &str,
) -> Option<ServiceAccount> {
    let shown = file.display();
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            report.error(
                path,
                format!("cannot read the service-account key {shown}: {e}"),
            );
            return None;
        }
    };
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(json) => json,
        Err(_) => {
            report.error(
                path,
                format!("the service-account key {shown} is not valid JSON"),
            );
            return None;
        }
    };
    if let Some(kind) = json.get("type").and_then(|t| t.as_str())
        && kind != "service_account"
    {
        report.error(
            path,
            format!(
                "{shown} is a {kind:?} credential; a vertex provider needs a service_account key"
            ),
        );
        return None;
    }
    let field = |name: &str| {
        json.get(name)
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let mut missing = Vec::new();
    let client_email = field("client_email");
    let private_key = field("private_key");
    let token_uri = field("token_uri");
    for (name, value) in [
        ("client_email", &client_email),
        ("private_key", &private_key),
        ("token_uri", &token_uri),
    ] {
        if value.is_none() {
            missing.push(name);
        }
    }
    if !missing.is_empty() {
        report.error(
            path,
            format!(
                "the service-account key {shown} has no {}",
                missing.join(", ")
            ),
        );
        return None;
    }
    let (client_email, private_key, token_uri) = (client_email?, private_key?, token_uri?);
    if !private_key.trim_start().starts_with("-----BEGIN") {
        report.error(
            path,
            format!("the private_key of {shown} is not a PEM-encoded key"),
        );
        return None;
    }
    let lower = token_uri.to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
        report.error(
            path,
            format!("the token_uri of {shown} is not an http(s) URL"),
        );
        return None;
    }
    Some(ServiceAccount {
        file: file.to_path_buf(),
        client_email,
        private_key: Secret::new(private_key),
        private_key_id: field("private_key_id"),
        token_uri,
    })
}
