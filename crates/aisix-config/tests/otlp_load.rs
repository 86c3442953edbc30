//! `observability.otlp`: off by default, read from the file, the `AISIX_*` variables and the
//! standard `OTEL_*` ones, and refused with every error at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::time::Duration;

use aisix_config::{Bootstrap, Compression, ConfigErrors, OtlpConfig, Protocol, load_bootstrap};

fn load(yaml: &str, vars: &[(&str, &str)]) -> Result<Bootstrap, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let env = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect::<Vec<_>>();
    load_bootstrap(Some(&path), env)
}

fn messages(errors: &ConfigErrors) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn otlp_is_off_by_default_even_with_otel_variables_set() {
    let config = load("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
    assert!(!config.observability.otlp.enabled);
    // Uncompressed unless asked, as OTLP's own exporters (`OTEL_EXPORTER_OTLP_COMPRESSION`).
    assert_eq!(config.observability.otlp.compression, Compression::None);
}

#[test]
fn otlp_keys_are_read_from_the_file() {
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n    endpoint: http://collector:4318/\n\
         \x20   protocol: http/protobuf\n    headers:\n      x-honeycomb-team: abc\n\
         \x20   timeout: 2s\n    compression: gzip\n    sample_ratio: 0.25\n\
         \x20   signals: [traces]\n    queue_size: 64\n    interval: 200ms\n\
         \x20   service_name: edge\n    resource_attributes:\n      deployment.environment: prod\n\
         \x20   capture_content: true\n",
        &[],
    )
    .unwrap();
    let otlp = config.observability.otlp;
    assert!(otlp.enabled);
    assert_eq!(
        otlp.traces_url.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
    assert_eq!(otlp.logs_url, None);
    assert_eq!(otlp.headers.len(), 1);
    assert_eq!(otlp.headers[0].0, "x-honeycomb-team");
    assert_eq!(otlp.headers[0].1.expose(), "abc");
    assert_eq!(otlp.timeout, Duration::from_secs(2));
    assert_eq!(otlp.compression, Compression::Gzip);
    assert_eq!(otlp.sample_ppm, 250_000);
    assert_eq!(otlp.queue_size, 64);
    assert_eq!(otlp.interval, Duration::from_millis(200));
    assert_eq!(otlp.service_name, "edge");
    assert_eq!(
        otlp.resource_attributes,
        vec![("deployment.environment".to_owned(), "prod".to_owned())]
    );
    assert!(otlp.capture_content);
}

#[test]
fn standard_otel_variables_fill_what_the_file_leaves_unset() {
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "http://logs:9000/ingest",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret,x-team=a"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
            ("OTEL_SERVICE_NAME", "gw"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,team=ml"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ],
    )
    .unwrap();
    let otlp = config.observability.otlp;
    assert_eq!(
        otlp.traces_url.as_deref(),
        Some("http://base:4318/v1/traces")
    );
    assert_eq!(otlp.logs_url.as_deref(), Some("http://logs:9000/ingest"));
    assert_eq!(otlp.headers[0].1.expose(), "s=cret");
    assert_eq!(otlp.timeout, Duration::from_millis(1500));
    assert_eq!(otlp.service_name, "gw");
    assert_eq!(
        otlp.resource_attributes,
        vec![("team".to_owned(), "ml".to_owned())]
    );
    assert_eq!(otlp.sample_ppm, 500_000);
}

#[test]
fn the_file_wins_over_otel_variables_and_aisix_variables_win_over_the_file() {
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n    service_name: file\n",
        &[
            ("OTEL_SERVICE_NAME", "otel"),
            ("AISIX_OBSERVABILITY__OTLP__SAMPLE_RATIO", "0.1"),
        ],
    )
    .unwrap();
    assert_eq!(config.observability.otlp.service_name, "file");
    assert_eq!(config.observability.otlp.sample_ppm, 100_000);
}

#[test]
fn otel_sdk_disabled_turns_export_off() {
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[("OTEL_SDK_DISABLED", "true")],
    )
    .unwrap();
    assert!(!config.observability.otlp.enabled);
}

#[test]
fn bad_otlp_settings_are_all_reported_without_echoing_secrets() {
    let errors = load(
        "observability:\n  otlp:\n    enabled: true\n    endpoint: collector:4318\n\
         \x20   protocol: thrift\n    sample_ratio: 1.5\n    signals: [traces, metrics]\n\
         \x20   compression: zstd\n    queue_size: 0\n    timeout: soon\n    headers:\n\
         \x20     authorization: \"Bearer sk-secret\\n\"\n    colour: blue\n",
        &[],
    )
    .unwrap_err();
    let all = messages(&errors).join("\n");
    for needle in [
        "observability.otlp.endpoint",
        "observability.otlp.protocol: expected http/protobuf or grpc",
        "observability.otlp.sample_ratio",
        "observability.otlp.signals: unknown signal",
        "observability.otlp.compression",
        "observability.otlp.queue_size",
        "observability.otlp.timeout",
        "observability.otlp.headers.authorization: not a valid header value",
        "observability.otlp.colour: unknown key",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert!(!all.contains("sk-secret"), "{all}");
}

#[test]
fn a_bad_otel_variable_is_named_as_the_origin() {
    let errors = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
    )
    .unwrap_err();
    let all = messages(&errors).join("\n");
    assert!(all.contains("http/json is not supported"), "{all}");
    assert!(all.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{all}");
}

#[test]
fn grpc_sends_to_the_collector_s_address_and_its_services_methods() {
    let traces = OtlpConfig::GRPC_TRACES_METHOD;
    let logs = OtlpConfig::GRPC_LOGS_METHOD;
    assert_eq!(
        traces,
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    );
    // By default, a collector's gRPC port on this host.
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n    protocol: grpc\n",
        &[],
    )
    .unwrap();
    let otlp = config.observability.otlp;
    assert_eq!(otlp.protocol, Protocol::Grpc);
    assert_eq!(
        otlp.traces_url.as_deref(),
        Some(format!("http://localhost:4317{traces}").as_str())
    );
    assert_eq!(
        otlp.logs_url.as_deref(),
        Some(format!("http://localhost:4317{logs}").as_str())
    );
    // The standard variables: the protocol, the endpoint, and a signal's own endpoint, which
    // over gRPC is an address like the others (its method follows it).
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317/"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:4317"),
        ],
    )
    .unwrap();
    let otlp = config.observability.otlp;
    assert_eq!(otlp.protocol, Protocol::Grpc);
    assert_eq!(
        otlp.traces_url.as_deref(),
        Some(format!("https://collector:4317{traces}").as_str())
    );
    assert_eq!(
        otlp.logs_url.as_deref(),
        Some(format!("http://logs:4317{logs}").as_str())
    );
    // Over HTTP, a signal's own endpoint is its whole URL, as before.
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom")],
    )
    .unwrap();
    assert_eq!(config.observability.otlp.protocol, Protocol::HttpProtobuf);
    assert_eq!(
        config.observability.otlp.traces_url.as_deref(),
        Some("http://t:4318/custom")
    );
}

#[test]
fn tls_files_come_from_the_file_or_the_standard_variables_and_a_client_pair_goes_together() {
    // From the file: relative to its folder.
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n    tls:\n      ca_cert_file: certs/ca.pem\n\
         \x20     client_cert_file: /etc/aisix/client.pem\n      client_key_file: client-key.pem\n",
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/elsewhere/ca.pem")],
    )
    .unwrap();
    let tls = config.observability.otlp.tls;
    let ca = tls.ca_cert_file.unwrap();
    assert!(ca.is_absolute() && ca.ends_with("certs/ca.pem"), "{ca:?}");
    assert_eq!(
        tls.client_cert_file.as_deref(),
        Some(std::path::Path::new("/etc/aisix/client.pem"))
    );
    assert!(tls.client_key_file.unwrap().ends_with("client-key.pem"));
    // From the standard variables, as the SDKs read them (relative to the working directory).
    let config = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/run/client.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/run/client-key.pem"),
        ],
    )
    .unwrap();
    let tls = config.observability.otlp.tls;
    assert_eq!(
        tls.ca_cert_file.as_deref(),
        Some(std::path::Path::new("ca.pem"))
    );
    assert_eq!(
        tls.client_key_file.as_deref(),
        Some(std::path::Path::new("/run/client-key.pem"))
    );
    // None by default: the system's trust store, no client certificate.
    let config = load("observability:\n  otlp:\n    enabled: true\n", &[]).unwrap();
    assert_eq!(
        config.observability.otlp.tls,
        aisix_config::OtlpTls::default()
    );
    // A certificate with no key, and a key with no certificate, are refused.
    for vars in [
        [("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "c.pem")],
        [("OTEL_EXPORTER_OTLP_CLIENT_KEY", "k.pem")],
    ] {
        let errors = load("observability:\n  otlp:\n    enabled: true\n", &vars).unwrap_err();
        assert!(
            messages(&errors)
                .iter()
                .any(|m| m.contains("client_cert_file and client_key_file go together")),
            "{errors:?}"
        );
    }
}

#[test]
fn a_signal_whose_standard_exporter_variable_is_none_is_not_exported() {
    let on = "observability:\n  otlp:\n    enabled: true\n";
    let otlp = load(on, &[("OTEL_LOGS_EXPORTER", "none")])
        .unwrap()
        .observability
        .otlp;
    assert!(otlp.enabled && otlp.traces_url.is_some() && otlp.logs_url.is_none());
    let otlp = load(
        on,
        &[
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_LOGS_EXPORTER", "otlp"),
        ],
    )
    .unwrap()
    .observability
    .otlp;
    assert!(otlp.traces_url.is_none() && otlp.logs_url.is_some());
    // `otlp` among others keeps it.
    let otlp = load(on, &[("OTEL_TRACES_EXPORTER", "otlp,console")])
        .unwrap()
        .observability
        .otlp;
    assert!(otlp.traces_url.is_some());
    // Both none: nothing to export, export is off.
    let otlp = load(
        on,
        &[
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ],
    )
    .unwrap()
    .observability
    .otlp;
    assert!(!otlp.enabled);
    // The file's `signals` wins over the variables.
    let otlp = load(
        "observability:\n  otlp:\n    enabled: true\n    signals: [traces, logs]\n",
        &[("OTEL_TRACES_EXPORTER", "none")],
    )
    .unwrap()
    .observability
    .otlp;
    assert!(otlp.traces_url.is_some());
    // An exporter aisix does not have is refused.
    let errors = load(on, &[("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
    assert!(
        messages(&errors)
            .iter()
            .any(|m| m.contains("expected otlp or none")),
        "{errors:?}"
    );
}

#[test]
fn otlp_variables_that_are_set_but_not_read_are_named_without_their_values() {
    let otlp = load(
        "observability:\n  otlp:\n    enabled: true\n",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                "x-api-key=secret-value",
            ),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://c:4318/v1/metrics",
            ),
            ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", ""),
        ],
    )
    .unwrap()
    .observability
    .otlp;
    assert_eq!(
        otlp.unread_env,
        [
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
        ]
    );
    assert!(!format!("{otlp:?}").contains("secret-value"));
}
