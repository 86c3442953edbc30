//! The Kubernetes manifests under deploy/kubernetes/: every file parses, and the fields that
//! must agree do agree (ports, paths, labels, grace versus drain, secrets versus the variables
//! the config reads, the image's user). The ConfigMap's files pass `aisix validate`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_yaml::Value;

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

fn manifest(name: &str) -> Value {
    let text = std::fs::read_to_string(folder().join(name)).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `value[a][b]...`, panicking with the path when something is missing.
fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    let mut current = value;
    for key in path.split('.') {
        current = match key.parse::<usize>() {
            Ok(index) => current.get(index),
            Err(_) => current.get(key),
        }
        .unwrap_or_else(|| panic!("missing {path} (at {key})"));
    }
    current
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    at(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

/// One key that may itself contain dots (`config.yaml`, `prometheus.io/port`).
fn key<'a>(value: &'a Value, key: &str) -> &'a str {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("missing string {key}"))
}

fn number(value: &Value, path: &str) -> u64 {
    at(value, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not a number"))
}

fn port_of(addr: &str) -> u64 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// The ConfigMap's `config.yaml` and `resources.yaml`, parsed.
fn configmap_files() -> (Value, Value, String, String) {
    let configmap = manifest("configmap.yaml");
    let data = at(&configmap, "data");
    let config_text = key(data, "config.yaml").to_owned();
    let resources_text = key(data, "resources.yaml").to_owned();
    (
        serde_yaml::from_str(&config_text).unwrap(),
        serde_yaml::from_str(&resources_text).unwrap(),
        config_text,
        resources_text,
    )
}

fn container(deployment: &Value) -> &Value {
    at(deployment, "spec.template.spec.containers.0")
}

fn named_port(container: &Value, name: &str) -> u64 {
    at(container, "ports")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .map(|p| number(p, "containerPort"))
        .unwrap_or_else(|| panic!("no container port named {name}"))
}

#[test]
fn the_kustomization_lists_every_manifest_in_the_folder() {
    let listed: BTreeSet<String> = at(&manifest("kustomization.yaml"), "resources")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(folder())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present);
    for name in &present {
        let doc = manifest(name);
        assert_eq!(text(&doc, "metadata.name"), "aisix", "{name}");
    }
}

#[test]
fn ports_paths_and_probes_agree_with_the_config() {
    let (config, ..) = configmap_files();
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let proxy_port = port_of(text(&config, "proxy.addr"));
    let metrics_port = port_of(text(&config, "observability.metrics.prometheus.addr"));
    let metrics_path = text(&config, "observability.metrics.prometheus.path");
    assert!(text(&config, "observability.metrics.prometheus.addr").starts_with("0.0.0.0:"));
    assert_eq!(named_port(container, "http"), proxy_port);
    assert_eq!(named_port(container, "metrics"), metrics_port);

    assert_eq!(text(container, "livenessProbe.httpGet.path"), "/livez");
    assert_eq!(text(container, "livenessProbe.httpGet.port"), "http");
    assert_eq!(text(container, "readinessProbe.httpGet.path"), "/readyz");
    assert_eq!(text(container, "readinessProbe.httpGet.port"), "http");

    let annotations = at(&deployment, "spec.template.metadata.annotations");
    assert_eq!(key(annotations, "prometheus.io/scrape"), "true");
    assert_eq!(
        key(annotations, "prometheus.io/port"),
        metrics_port.to_string()
    );
    assert_eq!(key(annotations, "prometheus.io/path"), metrics_path);

    let service = manifest("service.yaml");
    let service_ports = at(&service, "spec.ports").as_sequence().unwrap();
    for name in ["http", "metrics"] {
        assert!(
            service_ports
                .iter()
                .any(|p| text(p, "name") == name && text(p, "targetPort") == name),
            "service port {name}"
        );
    }
    let monitor = manifest("servicemonitor.yaml");
    let endpoint = at(&monitor, "spec.endpoints.0");
    assert_eq!(text(endpoint, "port"), "metrics");
    assert_eq!(text(endpoint, "path"), metrics_path);
}

#[test]
fn selectors_match_the_pod_labels() {
    let deployment = manifest("deployment.yaml");
    let pod_labels = at(&deployment, "spec.template.metadata.labels")
        .as_mapping()
        .unwrap();
    let matches = |selector: &Value, what: &str| {
        for (label, value) in selector.as_mapping().unwrap() {
            assert_eq!(
                pod_labels.get(label),
                Some(value),
                "{what} selects {label:?}"
            );
        }
    };
    matches(at(&deployment, "spec.selector.matchLabels"), "deployment");
    matches(at(&manifest("service.yaml"), "spec.selector"), "service");
    matches(
        at(&manifest("pdb.yaml"), "spec.selector.matchLabels"),
        "pdb",
    );
    let service = manifest("service.yaml");
    let service_labels = at(&service, "metadata.labels").as_mapping().unwrap();
    for (label, value) in at(
        &manifest("servicemonitor.yaml"),
        "spec.selector.matchLabels",
    )
    .as_mapping()
    .unwrap()
    {
        assert_eq!(
            service_labels.get(label),
            Some(value),
            "servicemonitor selects the service"
        );
    }
    assert!(
        number(&deployment, "spec.replicas") > number(&manifest("pdb.yaml"), "spec.maxUnavailable")
    );
}

#[test]
fn termination_grace_exceeds_readiness_grace_plus_drain() {
    let (config, ..) = configmap_files();
    let grace = number(&config, "shutdown.readiness_grace_secs");
    let drain = number(&config, "shutdown.drain_timeout_secs");
    assert!(
        grace > 0,
        "the example gives endpoint removal time to propagate"
    );
    let deployment = manifest("deployment.yaml");
    let termination = number(
        &deployment,
        "spec.template.spec.terminationGracePeriodSeconds",
    );
    assert!(
        termination > grace + drain,
        "{termination} <= {grace} + {drain}"
    );
    assert!(
        container(&deployment).get("lifecycle").is_none(),
        "no preStop: the readiness grace does its job"
    );
}

#[test]
fn workers_follow_the_cpu_limit_and_requests_equal_limits() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let workers = at(container, "env")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| text(e, "name") == "AISIX_PROXY__WORKERS")
        .expect("AISIX_PROXY__WORKERS is set");
    assert_eq!(
        text(workers, "valueFrom.resourceFieldRef.resource"),
        "limits.cpu"
    );
    assert_eq!(text(workers, "valueFrom.resourceFieldRef.divisor"), "1");
    assert_eq!(
        at(container, "resources.requests.cpu"),
        at(container, "resources.limits.cpu")
    );
}

#[test]
fn the_config_is_mounted_as_a_folder_where_the_args_point() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let args: Vec<&str> = at(container, "args")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mount = at(container, "volumeMounts.0");
    assert!(
        mount.get("subPath").is_none(),
        "a subPath mount never sees ConfigMap updates"
    );
    assert_eq!(
        args,
        [
            "--config",
            &format!("{}/config.yaml", text(mount, "mountPath"))
        ]
    );
    let volume = at(&deployment, "spec.template.spec.volumes.0");
    assert_eq!(text(volume, "name"), text(mount, "name"));
    assert_eq!(text(volume, "configMap.name"), "aisix");
    let (config, ..) = configmap_files();
    assert_eq!(at(&config, "resources_watch").as_bool(), Some(true));
}

#[test]
fn the_pod_runs_as_the_images_non_root_user_on_a_read_only_root() {
    let deployment = manifest("deployment.yaml");
    let pod = at(&deployment, "spec.template.spec.securityContext");
    let dockerfile =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile"))
            .unwrap();
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert_eq!(
        number(pod, "runAsUser").to_string(),
        user.split(':').next().unwrap()
    );
    assert_eq!(at(pod, "runAsNonRoot").as_bool(), Some(true));
    let container = container(&deployment);
    assert_eq!(
        at(container, "securityContext.readOnlyRootFilesystem").as_bool(),
        Some(true)
    );
    assert_eq!(
        at(container, "securityContext.allowPrivilegeEscalation").as_bool(),
        Some(false)
    );
}

/// `${VAR}` references and `key_env` names in the resources file.
fn variables_read(resources_text: &str, resources: &Value) -> BTreeSet<String> {
    let mut vars: BTreeSet<String> = resources_text
        .split("${")
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap().to_owned())
        .collect();
    for api_key in at(resources, "api_keys").as_sequence().unwrap() {
        if let Some(var) = api_key.get("key_env").and_then(Value::as_str) {
            vars.insert(var.to_owned());
        }
    }
    vars
}

#[test]
fn every_variable_the_config_reads_comes_from_the_secret_and_validate_accepts_the_files() {
    let (_, resources, config_text, resources_text) = configmap_files();
    let secret = manifest("secret.yaml");
    let secret_data = at(&secret, "stringData").as_mapping().unwrap();
    let provided: BTreeSet<String> = secret_data
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(variables_read(&resources_text, &resources), provided);
    let deployment = manifest("deployment.yaml");
    assert_eq!(
        text(container(&deployment), "envFrom.0.secretRef.name"),
        text(&secret, "metadata.name")
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), config_text).unwrap();
    std::fs::write(dir.path().join("resources.yaml"), resources_text).unwrap();
    let mut validate = std::process::Command::new(aisix_e2e::gateway::binary());
    validate
        .args(["validate", "--config"])
        .arg(dir.path().join("config.yaml"))
        .env("AISIX_PROXY__WORKERS", "2");
    for (name, value) in secret_data {
        validate.env(name.as_str().unwrap(), value.as_str().unwrap());
    }
    let out = validate.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
