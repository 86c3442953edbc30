//! The admin API against a real etcd (Debian's `etcd-server`), in both serving modes: keys and
//! models created, updated, disabled and deleted through one replica take effect at both within
//! a second; a key's secret is returned once and never stored, listed or logged; stale
//! revisions get 409, bad admin keys 401, invalid documents 400 naming their key, and every
//! write to a file source 409 with the reason. A model disabled through one replica is an
//! unknown model (404) at both within a second, its groups go on without it, and it serves
//! again once enabled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::third_party::etcd::Etcd;
use serde_json::{Value, json};

const ADMIN_KEY: &str = "admin-key-for-the-tests-0123456789";
const AGREE_WITHIN: Duration = Duration::from_secs(1);

fn seed(etcd: &Etcd, mock: &MockProvider) {
    etcd.put(
        "/aisix/provider_keys/up",
        &format!(
            r#"{{"display_name":"up","provider":"openai","api_base":"{}"}}"#,
            mock.base_url()
        ),
    );
    etcd.put(
        "/aisix/models/gpt-x",
        r#"{"display_name":"gpt-x","provider":"openai","model_name":"up-x","provider_key":"up"}"#,
    );
}

fn admin_section() -> String {
    format!("admin:\n  addr: 127.0.0.1:0\n  admin_keys: [\"{ADMIN_KEY}\"]\n")
}

/// A gateway on `etcd` with the admin API; returns it and the admin address.
fn start(mode: Mode, etcd: &Etcd) -> (Gateway, SocketAddr) {
    let mut gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .extra(&format!(
                "etcd:\n  endpoints: [\"{}\"]\n  prefix: /aisix\n",
                etcd.url()
            ))
            .extra(&admin_section()),
    );
    let admin = gateway.wait_for_log_addr("admin listening");
    (gateway, admin)
}

async fn admin(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    let body = body.map(|b| b.to_string());
    let reply = client::send(
        addr,
        client::request(method, path, &headers, body.as_deref()),
    )
    .await;
    let json = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status.as_u16(), json)
}

async fn ok(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, json) = admin(addr, method, path, Some(ADMIN_KEY), body).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {json}"
    );
    json
}

async fn chat(gateway: &Gateway, key: &str, model: &str) -> u16 {
    chat_reply(gateway, key, model).await.status.as_u16()
}

async fn chat_reply(gateway: &Gateway, key: &str, model: &str) -> client::Reply {
    client::chat(gateway.addr(), key, model).await
}

async fn agree(gateways: &[&Gateway], key: &str, model: &str, want: u16) {
    let deadline = Instant::now() + AGREE_WITHIN;
    loop {
        let mut last = Vec::new();
        for gateway in gateways {
            last.push(chat(gateway, key, model).await);
        }
        if last.iter().all(|s| *s == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not {want} everywhere within {AGREE_WITHIN:?}: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

both_modes! {
    async fn keys_and_models_written_through_one_replica_apply_at_both_within_a_second(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        let (a, admin_a) = start(mode, &etcd);
        let (b, admin_b) = start(mode, &etcd);

        // Create: the secret comes back once, and works at both replicas.
        let created = ok(admin_a, "POST", "/admin/v1/api_keys",
            Some(json!({"display_name": "team-a", "allowed_models": ["gpt-*"]}))).await;
        let secret = created["key"].as_str().unwrap().to_owned();
        assert!(secret.starts_with("sk-aisix-"), "{created}");
        agree(&[&a, &b], &secret, "gpt-x", 200).await;

        // Listed at either replica without the secret; stored only as its hash.
        for addr in [admin_a, admin_b] {
            let listed = ok(addr, "GET", "/admin/v1/api_keys", None).await;
            assert!(!listed.to_string().contains(&secret), "{listed}");
            assert_eq!(listed[0]["key_hash_prefix"], created["key_hash_prefix"], "{listed}");
        }
        let stored = etcd.get("/aisix/api_keys/team-a").unwrap();
        assert!(!stored.contains(&secret) && stored.contains("key_hash"), "{stored}");

        // Update (the secret stays): allowed no model, so the model is hidden from it.
        let revision = created["revision"].as_i64().unwrap();
        let updated = ok(admin_a, "PUT", "/admin/v1/api_keys/team-a",
            Some(json!({"revision": revision, "value": {"display_name": "team-a", "allowed_models": []}}))).await;
        agree(&[&a, &b], &secret, "gpt-x", 404).await;

        // A stale revision is refused and changes nothing.
        let (status, body) = admin(admin_b, "POST", "/admin/v1/api_keys/team-a/disable", Some(ADMIN_KEY),
            Some(json!({"revision": revision}))).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["type"], "conflict_error", "{body}");

        // Allowed again, then disabled through the other replica: refused everywhere.
        let updated = ok(admin_a, "PUT", "/admin/v1/api_keys/team-a",
            Some(json!({"revision": updated["revision"], "value": {"display_name": "team-a", "allowed_models": ["*"]}}))).await;
        agree(&[&a, &b], &secret, "gpt-x", 200).await;
        let disabled = ok(admin_b, "POST", "/admin/v1/api_keys/team-a/disable",
            Some(json!({"revision": updated["revision"]}))).await;
        agree(&[&a, &b], &secret, "gpt-x", 401).await;
        let path = format!("/admin/v1/api_keys/team-a?revision={}", disabled["revision"]);
        ok(admin_a, "DELETE", &path, None).await;
        assert_eq!(etcd.get("/aisix/api_keys/team-a"), None);

        // Models: created, updated and deleted through the admin API.
        let second = ok(admin_a, "POST", "/admin/v1/api_keys",
            Some(json!({"display_name": "team-b", "allowed_models": ["*"]}))).await;
        let key_b = second["key"].as_str().unwrap().to_owned();
        let model = ok(admin_b, "POST", "/admin/v1/models", Some(json!({
            "display_name": "gpt-z", "provider": "openai", "model_name": "up-z", "provider_key": "up"
        }))).await;
        agree(&[&a, &b], &key_b, "gpt-z", 200).await;
        let model = ok(admin_b, "PUT", "/admin/v1/models/gpt-z", Some(json!({
            "revision": model["revision"],
            "value": {"display_name": "gpt-z", "provider": "openai", "model_name": "up-z2", "provider_key": "up"}
        }))).await;
        let listed = ok(admin_a, "GET", "/admin/v1/models", None).await;
        assert!(listed.to_string().contains("up-z2"), "{listed}");
        ok(admin_a, "DELETE", &format!("/admin/v1/models/gpt-z?revision={}", model["revision"]), None).await;
        agree(&[&a, &b], &key_b, "gpt-z", 404).await;

        // No secret in either replica's log; every write logged with who and what.
        for gateway in [&a, &b] {
            let logs = gateway.logs();
            assert!(!logs.contains(&secret) && !logs.contains(&key_b), "a secret was logged");
            assert!(!logs.contains(ADMIN_KEY), "the admin key was logged");
        }
        let logs = a.logs();
        assert!(logs.contains("admin write") && logs.contains("/aisix/api_keys/team-a"), "{logs}");
    }
}

both_modes! {
    async fn the_admin_api_refuses_bad_keys_invalid_documents_and_file_sources(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        let (_gateway, addr) = start(mode, &etcd);

        let (status, body) = admin(addr, "GET", "/admin/v1/models", None, None).await;
        assert_eq!((status, body["error"]["type"].as_str()), (401, Some("authentication_error")), "{body}");
        let (status, _) = admin(addr, "GET", "/admin/v1/models", Some("not-the-admin-key-at-all"), None).await;
        assert_eq!(status, 401);
        let (status, _) = admin(addr, "POST", "/admin/v1/api_keys", Some("not-the-admin-key-at-all"),
            Some(json!({"display_name": "x", "allowed_models": []}))).await;
        assert_eq!(status, 401);
        assert_eq!(etcd.keys("/aisix/api_keys/"), Vec::<String>::new());

        // A model naming a provider key that does not exist: refused, the key named.
        let (status, body) = admin(addr, "POST", "/admin/v1/models", Some(ADMIN_KEY), Some(json!({
            "display_name": "bad", "provider": "openai", "model_name": "m", "provider_key": "nope"
        }))).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("/aisix/models/bad"), "{body}");
        assert_eq!(etcd.get("/aisix/models/bad"), None);
        // A create may not bring its own secret or hash.
        let (status, body) = admin(addr, "POST", "/admin/v1/api_keys", Some(ADMIN_KEY),
            Some(json!({"display_name": "x", "allowed_models": [], "key_hash": "00"}))).await;
        assert_eq!(status, 400, "{body}");

        // Reads: models' state in this replica, and the OpenAPI document of these types.
        let status_list = ok(addr, "GET", "/admin/v1/models/status", None).await;
        assert_eq!(status_list[0]["model"], "gpt-x", "{status_list}");
        assert_eq!(status_list[0]["health"], "available", "{status_list}");
        assert_eq!(status_list[0]["in_flight"], 0, "{status_list}");
        assert_eq!(status_list[0]["disabled"], false, "{status_list}");
        let providers = ok(addr, "GET", "/admin/v1/provider_keys", None).await;
        assert_eq!(providers[0]["display_name"], "up", "{providers}");
        let openapi = ok(addr, "GET", "/admin/openapi.json", None).await;
        assert_eq!(openapi["openapi"], "3.1.0");
        assert!(openapi["paths"]["/admin/v1/api_keys"]["post"].is_object(), "{openapi}");
        assert!(openapi["components"]["schemas"]["ApiKeyFields"]["properties"]["allowed_models"].is_object(), "{openapi}");

        // A file source: reads work, writes get 409 saying why.
        let file = format!(
            "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: up, provider: openai, api_base: \"{}\"}}\nmodels:\n  - {{display_name: gpt-x, provider: openai, model_name: up-x, provider_key: up}}\napi_keys:\n  - {{display_name: k, key_hash: \"{}\", allowed_models: [\"*\"]}}\n",
            mock.base_url(),
            "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
        );
        let mut from_file = Gateway::start(&GatewayConfig::new(mode).resources(file).extra(&admin_section()));
        let file_admin = from_file.wait_for_log_addr("admin listening");
        let keys = ok(file_admin, "GET", "/admin/v1/api_keys", None).await;
        assert_eq!(keys[0]["key_hash_prefix"], "5e884898da28", "{keys}");
        let (status, body) = admin(file_admin, "POST", "/admin/v1/api_keys", Some(ADMIN_KEY),
            Some(json!({"display_name": "x", "allowed_models": []}))).await;
        assert_eq!(status, 409, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("resources.yaml"), "{body}");
    }
}

both_modes! {
    async fn a_model_disabled_through_one_replica_is_unknown_at_both_within_a_second_until_enabled(mode: Mode) {
        let mock = MockProvider::start();
        let etcd = Etcd::start();
        seed(&etcd, &mock);
        etcd.put(
            "/aisix/models/gpt-w",
            r#"{"display_name":"gpt-w","provider":"openai","model_name":"up-w","provider_key":"up"}"#,
        );
        etcd.put(
            "/aisix/models/chat",
            r#"{"display_name":"chat","routing":{"targets":[{"model":"gpt-x"},{"model":"gpt-w"}]}}"#,
        );
        let (a, admin_a) = start(mode, &etcd);
        let (b, admin_b) = start(mode, &etcd);
        let created = ok(admin_a, "POST", "/admin/v1/api_keys",
            Some(json!({"display_name": "team", "allowed_models": ["*"]}))).await;
        let key = created["key"].as_str().unwrap().to_owned();
        agree(&[&a, &b], &key, "gpt-x", 200).await;
        assert_eq!(chat_reply(&a, &key, "chat").await.header("x-aisix-served-by"), Some("gpt-x"));

        let listed = ok(admin_a, "GET", "/admin/v1/models", None).await;
        let revision = listed.as_array().unwrap().iter()
            .find(|m| m["id"] == "gpt-x").unwrap()["revision"].clone();
        let disabled = ok(admin_a, "POST", "/admin/v1/models/gpt-x/disable",
            Some(json!({"revision": revision}))).await;
        agree(&[&a, &b], &key, "gpt-x", 404).await;

        // Disabled reads as unknown, in the client's envelope, at either replica; the group
        // goes on with its other target; /v1/models no longer lists it.
        for gateway in [&a, &b] {
            let reply = chat_reply(gateway, &key, "gpt-x").await;
            let body: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(body["error"]["code"], "model_not_found", "{body}");
            let reply = chat_reply(gateway, &key, "chat").await;
            assert_eq!((reply.status.as_u16(), reply.header("x-aisix-served-by")), (200, Some("gpt-w")));
            let models = client::send(gateway.addr(), client::request("GET", "/v1/models",
                &[("authorization", &format!("Bearer {key}"))], None)).await.text();
            assert!(!models.contains("\"gpt-x\"") && models.contains("\"gpt-w\""), "{models}");
        }
        let listed = ok(admin_b, "GET", "/admin/v1/models", None).await;
        let entry = listed.as_array().unwrap().iter().find(|m| m["id"] == "gpt-x").unwrap().clone();
        assert_eq!(entry["document"]["disabled"], true, "{entry}");
        let status = ok(admin_b, "GET", "/admin/v1/models/status", None).await;
        let gpt_x = status.as_array().unwrap().iter().find(|m| m["model"] == "gpt-x").unwrap().clone();
        assert_eq!(gpt_x["disabled"], true, "{status}");

        // A stale revision changes nothing; the current one enables it again, through B.
        let (status, body) = admin(admin_b, "POST", "/admin/v1/models/gpt-x/enable", Some(ADMIN_KEY),
            Some(json!({"revision": revision}))).await;
        assert_eq!(status, 409, "{body}");
        ok(admin_b, "POST", "/admin/v1/models/gpt-x/enable",
            Some(json!({"revision": disabled["revision"]}))).await;
        agree(&[&a, &b], &key, "gpt-x", 200).await;
        assert_eq!(chat_reply(&b, &key, "chat").await.header("x-aisix-served-by"), Some("gpt-x"));
        let logs = a.logs();
        assert!(logs.contains("action=\"disable\"") || logs.contains("action=disable"), "{logs}");
    }
}
