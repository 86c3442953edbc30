//! `observability.otlp`: where and how the gateway exports its traces and usage events over
//! OTLP/HTTP. Off unless `enabled`; the standard `OTEL_*` variables fill what the file leaves
//! unset. Reading lives in `load::otlp`; the exporter itself in `aisix-gateway`'s `otel`.

use std::path::PathBuf;
use std::time::Duration;

use crate::resources::Secret;

/// A signal the gateway can export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Logs,
}

/// How an export body is compressed: none by default, as OTLP's own exporters default
/// (`OTEL_EXPORTER_OTLP_COMPRESSION`); gzip (its fast level) for a collector across a slow link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    None,
}

/// How export requests travel (`observability.otlp.protocol`, `OTEL_EXPORTER_OTLP_PROTOCOL`):
/// OTLP/HTTP with protobuf bodies (the default, a collector's port 4318), or OTLP/gRPC (its
/// port 4317: HTTP/2, the same protobuf messages in gRPC's framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    Grpc,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// `observability.otlp.enabled` (default off).
    pub enabled: bool,
    pub protocol: Protocol,
    /// Where spans go (`<endpoint>/v1/traces`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; over
    /// gRPC, the endpoint and the trace service's method,
    /// `/opentelemetry.proto.collector.trace.v1.TraceService/Export`); `None` when `signals`
    /// leaves traces out.
    pub traces_url: Option<String>,
    /// Where usage events go (`<endpoint>/v1/logs`; over gRPC, the endpoint and
    /// `/opentelemetry.proto.collector.logs.v1.LogsService/Export`); `None` when `signals`
    /// leaves logs out.
    pub logs_url: Option<String>,
    /// Sent with every export (an API key for a hosted backend): values print as `***`.
    pub headers: Vec<(String, Secret)>,
    /// One export request's limit, each try.
    pub timeout: Duration,
    pub compression: Compression,
    /// Root requests sampled, in parts per million; a client's sampled flag wins.
    pub sample_ppm: u32,
    /// Records each worker holds for the exporter at most; past it they are dropped and counted.
    pub queue_size: usize,
    /// How long a batch that is not full waits at most before it is sent (a full one goes at
    /// once).
    pub interval: Duration,
    /// Records in one export request at most.
    pub max_batch: usize,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Further resource attributes (`deployment.environment`, …).
    pub resource_attributes: Vec<(String, String)>,
    /// Whether spans carry the prompt and the answer (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`): off, since they hold the users' content.
    pub capture_content: bool,
    /// TLS toward an `https://` collector beyond the system's trust store.
    pub tls: OtlpTls,
    /// The `OTEL_EXPORTER_OTLP_*` variables that were set but are not read (per-signal
    /// headers, timeouts, certificates, metrics' endpoints...), by name only: the exporter
    /// warns of them, and never prints their values.
    pub unread_env: Vec<String>,
}

/// `observability.otlp.tls` (or `OTEL_EXPORTER_OTLP_CERTIFICATE`, `_CLIENT_CERTIFICATE`,
/// `_CLIENT_KEY`): the CA a collector's certificate is checked against, in place of the
/// system's trust store, as the OpenTelemetry SDKs use it; and a client certificate and key
/// for a collector that asks for one (mutual TLS). Each a PEM file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpTls {
    pub ca_cert_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
}

impl OtlpConfig {
    pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
    /// A collector's OTLP/gRPC port, where `protocol: grpc` sends by default.
    pub const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
    /// The gRPC methods export requests call, after the endpoint.
    pub const GRPC_TRACES_METHOD: &str =
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    pub const GRPC_LOGS_METHOD: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
}

impl Default for OtlpConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            protocol: Protocol::HttpProtobuf,
            traces_url: Some(format!("{}/v1/traces", Self::DEFAULT_ENDPOINT)),
            logs_url: Some(format!("{}/v1/logs", Self::DEFAULT_ENDPOINT)),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            compression: Compression::None,
            sample_ppm: 1_000_000,
            queue_size: 16384,
            interval: Duration::from_secs(1),
            max_batch: 512,
            service_name: "aisix".to_owned(),
            resource_attributes: Vec::new(),
            capture_content: false,
            tls: OtlpTls::default(),
            unread_env: Vec::new(),
        }
    }
}
