//! The etcd-backed Kubernetes overlay under deploy/kubernetes/etcd/: it lists every file it
//! has, its names and ports agree (etcd endpoint and StatefulSet, admin port and Service), and
//! what the import Job runs then what the pods run work against a real etcd: the ConfigMap's
//! resources imported, a gateway on the overlay's config ready and serving them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, binary};
use aisix_e2e::third_party::etcd::Etcd;
use serde_yaml::Value;

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Every document of `name` under the overlay folder.
fn documents(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(folder().join("etcd").join(name)).unwrap();
    text.split("\n---\n")
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect()
}

fn get<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(value, |v, key| match key.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[key],
        })
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    get(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

/// The overlay's config.yaml, the base's resources.yaml, and every Secret variable.
fn files() -> (String, String, Vec<(String, String)>) {
    let config = documents("configmap.yaml")[0]["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let base: Value =
        serde_yaml::from_str(&std::fs::read_to_string(folder().join("configmap.yaml")).unwrap())
            .unwrap();
    let resources = base["data"]["resources.yaml"].as_str().unwrap().to_owned();
    let mut env = Vec::new();
    for secret in [
        serde_yaml::from_str::<Value>(
            &std::fs::read_to_string(folder().join("secret.yaml")).unwrap(),
        )
        .unwrap(),
        documents("secret.yaml").remove(0),
    ] {
        for (k, v) in get(&secret, "stringData").as_mapping().unwrap() {
            env.push((
                k.as_str().unwrap().to_owned(),
                v.as_str().unwrap().to_owned(),
            ));
        }
    }
    (config, resources, env)
}

#[test]
fn the_overlay_lists_every_file_and_its_names_and_ports_agree() {
    let kustomization = &documents("kustomization.yaml")[0];
    let mut listed: BTreeSet<String> = get(kustomization, "resources")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .filter(|name| name != "..")
        .collect();
    for patch in get(kustomization, "patches").as_sequence().unwrap() {
        listed.insert(text(patch, "path").to_owned());
    }
    let present: BTreeSet<String> = std::fs::read_dir(folder().join("etcd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present);

    let (config, ..) = files();
    let config: Value = serde_yaml::from_str(&config).unwrap();
    assert!(
        get(&config, "resources_file").is_null(),
        "etcd and resources_file never go together"
    );
    let endpoint = text(&config, "etcd.endpoints.0");
    let etcd = documents("etcd.yaml");
    let (service, statefulset) = (&etcd[0], &etcd[1]);
    let expected = format!(
        "http://{}-0.{}:2379",
        text(statefulset, "metadata.name"),
        text(statefulset, "spec.serviceName")
    );
    assert_eq!(endpoint, expected);
    assert_eq!(
        text(service, "metadata.name"),
        text(statefulset, "spec.serviceName")
    );

    let admin_port: u64 = text(&config, "admin.addr")
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let deployment = documents("deployment.yaml").remove(0);
    let ports = get(&deployment, "spec.template.spec.containers.0.ports");
    let admin = ports
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "admin")
        .expect("an admin container port");
    assert_eq!(admin["containerPort"].as_u64(), Some(admin_port));
    assert_eq!(
        text(
            &documents("admin-service.yaml")[0],
            "spec.ports.0.targetPort"
        ),
        "admin"
    );

    let job = &documents("import-job.yaml")[0];
    let args: Vec<&str> = get(job, "spec.template.spec.containers.0.args")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "--config",
            "/etc/aisix/config.yaml",
            "import",
            "/etc/aisix/resources.yaml"
        ]
    );
}

#[test]
fn the_import_job_then_the_pods_serve_the_configmaps_resources_from_a_real_etcd() {
    let etcd = Etcd::start();
    let (config, resources, env) = files();
    let config = config
        .replace("http://aisix-etcd-0.aisix-etcd:2379", &etcd.url())
        .replace("0.0.0.0:3000", "127.0.0.1:0")
        .replace("0.0.0.0:9090", "127.0.0.1:0")
        .replace("0.0.0.0:3001", "127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), &config).unwrap();
    std::fs::write(dir.path().join("resources.yaml"), &resources).unwrap();

    let mut import = Command::new(binary());
    import
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .arg("import")
        .arg(dir.path().join("resources.yaml"))
        .envs(env.iter().map(|(k, v)| (k, v)));
    let out = import.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = etcd.get("/aisix/api_keys/team-a").unwrap();
    let team_a = env.iter().find(|(k, _)| k == "TEAM_A_API_KEY").unwrap();
    assert!(
        !stored.contains(&team_a.1) && stored.contains("key_hash"),
        "{stored}"
    );

    let mut command = Command::new(binary());
    command
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("AISIX_PROXY__WORKERS", "2");
    let mut gateway = Gateway::start_command(command, dir);
    let admin = gateway.wait_for_log_addr("admin listening");
    let admin_key = env
        .iter()
        .find(|(k, _)| k == "AISIX_ADMIN__ADMIN_KEYS")
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listed = runtime.block_on(client::send(
        admin,
        client::request(
            "GET",
            "/admin/v1/api_keys",
            &[("authorization", &format!("Bearer {}", admin_key.1))],
            None,
        ),
    ));
    assert_eq!(listed.status, 200);
    assert!(listed.text().contains("\"team-a\""), "{}", listed.text());
}
