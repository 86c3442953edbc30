//! Loading a `vertex` provider key: `project` and `location` required and checked, the
//! service-account key file read at load (from `credentials_file` or
//! `GOOGLE_APPLICATION_CREDENTIALS`) with errors that name the file and never the key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use aisix_config::{ConfigErrors, ProviderKind, Resources, parse_resources};

const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIsecretsecret\n-----END PRIVATE KEY-----\n";

fn key_file(dir: &Path, json: &serde_json::Value) -> String {
    let path = dir.join("sa.json");
    std::fs::write(&path, json.to_string()).unwrap();
    path.display().to_string()
}

fn good_key() -> serde_json::Value {
    serde_json::json!({
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "kid-1",
        "private_key": PEM,
        "client_email": "gateway@my-project.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    })
}

fn parse(yaml: &str, vars: &[(&str, &str)]) -> Result<Resources, ConfigErrors> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    parse_resources(yaml, Path::new("/etc/aisix/resources.yaml"), &move |name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

fn errors(yaml: &str, vars: &[(&str, &str)]) -> Vec<String> {
    parse(yaml, vars)
        .expect_err("expected errors")
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect()
}

fn yaml(fields: &str) -> String {
    format!(
        "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: v, provider: vertex{fields}}}\n"
    )
}

#[test]
fn a_vertex_key_reads_project_location_and_its_service_account_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), &good_key());
    let resources = parse(
        &yaml(&format!(
            ", project: my-project, location: europe-west4, credentials_file: {file}"
        )),
        &[],
    )
    .unwrap();
    let key = &resources.provider_keys[0];
    assert_eq!(key.provider, ProviderKind::Vertex);
    assert_eq!(
        key.api_base,
        "https://europe-west4-aiplatform.googleapis.com"
    );
    let vertex = key.vertex.as_ref().unwrap();
    assert_eq!(
        (&*vertex.project, &*vertex.location),
        ("my-project", "europe-west4")
    );
    let account = &vertex.service_account;
    assert_eq!(
        account.client_email,
        "gateway@my-project.iam.gserviceaccount.com"
    );
    assert_eq!(account.token_uri, "https://oauth2.googleapis.com/token");
    assert_eq!(account.private_key_id.as_deref(), Some("kid-1"));
    assert!(
        !format!("{resources:?}").contains("MIIsecret"),
        "the key printed"
    );
}

#[test]
fn the_global_location_is_served_from_the_unprefixed_host_and_api_base_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), &good_key());
    let global = parse(
        &yaml(", project: p, location: global"),
        &[("GOOGLE_APPLICATION_CREDENTIALS", &file)],
    )
    .unwrap();
    assert_eq!(
        global.provider_keys[0].api_base,
        "https://aiplatform.googleapis.com"
    );
    let local = parse(
        &yaml(&format!(
            ", project: p, location: us-east5, api_base: 'http://127.0.0.1:9', credentials_file: {file}"
        )),
        &[],
    )
    .unwrap();
    assert_eq!(local.provider_keys[0].api_base, "http://127.0.0.1:9");
}

#[test]
fn a_vertex_key_without_project_location_or_credentials_names_each_missing_field() {
    assert_eq!(
        errors(&yaml(""), &[]),
        [
            "provider_keys[0].project: required for vertex (the Google Cloud project id)",
            "provider_keys[0].location: required for vertex (such as us-central1, or global)",
            "provider_keys[0].credentials_file: required for vertex: the service-account JSON key file (or set GOOGLE_APPLICATION_CREDENTIALS)",
        ]
    );
}

#[test]
fn a_bad_project_or_location_is_refused_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), &good_key());
    assert_eq!(
        errors(
            &yaml(&format!(
                ", project: 'My Project', location: 'us-central1/../x', credentials_file: {file}"
            )),
            &[]
        ),
        [
            "provider_keys[0].project: expected a Google Cloud project id (lowercase letters, digits and -)",
            "provider_keys[0].location: expected a Google Cloud location such as us-central1 or global",
        ]
    );
}

#[test]
fn an_unreadable_or_incomplete_key_file_names_the_file_and_never_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.json").display().to_string();
    let got = errors(
        &yaml(&format!(
            ", project: p, location: global, credentials_file: {missing}"
        )),
        &[],
    );
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with(&format!(
            "provider_keys[0].credentials_file: cannot read the service-account key {missing}:"
        )),
        "{got:?}"
    );

    let mut incomplete = good_key();
    incomplete.as_object_mut().unwrap().remove("client_email");
    incomplete.as_object_mut().unwrap().remove("token_uri");
    let file = key_file(dir.path(), &incomplete);
    let got = errors(
        &yaml(", project: p, location: global"),
        &[("GOOGLE_APPLICATION_CREDENTIALS", &file)],
    );
    assert_eq!(
        got,
        [format!(
            "provider_keys[0].credentials_file (from GOOGLE_APPLICATION_CREDENTIALS): the service-account key {file} has no client_email, token_uri"
        )]
    );
    assert!(!got[0].contains("MIIsecret"));

    let user = serde_json::json!({"type": "authorized_user", "client_id": "x"});
    let file = key_file(dir.path(), &user);
    assert_eq!(
        errors(
            &yaml(&format!(
                ", project: p, location: global, credentials_file: {file}"
            )),
            &[]
        ),
        [format!(
            "provider_keys[0].credentials_file: {file} is a \"authorized_user\" credential; a vertex provider needs a service_account key"
        )]
    );
}

#[test]
fn only_vertex_keys_take_project_location_and_credentials_file() {
    let yaml = "_format_version: \"1\"\nprovider_keys:\n  - {display_name: g, provider: gemini, api_key: k, project: p, location: global}\n";
    assert_eq!(
        errors(yaml, &[]),
        [
            "provider_keys[0].project: only vertex providers take a project",
            "provider_keys[0].location: only vertex providers take a location",
        ]
    );
}

#[test]
fn a_vertex_key_refuses_an_api_key_and_a_health_check() {
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), &good_key());
    assert_eq!(
        errors(
            &yaml(&format!(
                ", project: p, location: global, credentials_file: {file}, api_key: k, health_check: {{interval: 30s}}"
            )),
            &[]
        ),
        [
            "provider_keys[0].health_check: vertex providers have no health check (Vertex AI lists no models under a project)",
            "provider_keys[0].api_key: vertex providers authenticate with their service account (credentials_file)",
        ]
    );
}

#[test]
fn a_relative_credentials_file_is_read_from_the_resources_file_s_folder() {
    let dir = tempfile::tempdir().unwrap();
    key_file(dir.path(), &good_key());
    let resources = dir.path().join("resources.yaml");
    std::fs::write(
        &resources,
        yaml(", project: p, location: global, credentials_file: sa.json"),
    )
    .unwrap();
    let loaded = aisix_config::load_resources(&resources, &|_| None).unwrap();
    let account = &loaded.provider_keys[0]
        .vertex
        .as_ref()
        .unwrap()
        .service_account;
    assert_eq!(account.file, dir.path().join("sa.json"));
}
