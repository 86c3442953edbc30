//! Reading `observability.otlp`, with the standard `OTEL_*` variables filling what the file and
//! the `AISIX_*` variables leave unset (the OpenTelemetry SDKs' own precedence: explicit
//! configuration first, then the environment, then the default).

use std::path::PathBuf;
use std::time::Duration;

use config::{Value, ValueKind};

use super::Reader;
use crate::duration::Unit;
use crate::error::Origin;
use crate::otlp::{Compression, OtlpConfig, OtlpTls, Protocol, Signal};
use crate::resources::Secret;

/// The standard variables read here, by the OpenTelemetry specification's names.
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const LOGS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
const CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
const CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
const CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
const LOGS_EXPORTER: &str = "OTEL_LOGS_EXPORTER";

/// The `OTEL_EXPORTER_OTLP_*` variables read here; any other that is set is named as unread.
const READ: [&str; 10] = [
    ENDPOINT,
    TRACES_ENDPOINT,
    LOGS_ENDPOINT,
    HEADERS,
    TIMEOUT,
    PROTOCOL,
    COMPRESSION,
    CERTIFICATE,
    CLIENT_CERTIFICATE,
    CLIENT_KEY,
];

/// The prefix of the variables kept for this reader.
pub(super) const OTEL_PREFIX: &str = "OTEL_";

impl Reader<'_> {
    /// `name` from the `OTEL_*` variables, with its origin; an empty value counts as unset, as
    /// the specification asks.
    fn otel(&self, name: &str) -> Option<(String, Origin)> {
        self.otel_env
            .get(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (v.trim().to_owned(), Origin::Env(name.to_owned())))
    }

    /// A string at `path`, else the variable `var`, with where it came from.
    fn string_or_otel(&mut self, path: &'static str, var: &str) -> Option<(String, Origin)> {
        match self.string(path) {
            Some(value) => Some((value, self.origin_of(path))),
            None => self.otel(var),
        }
    }

    /// A mapping of names to scalar values at `path` (its names are free, so the whole
    /// mapping is one known key).
    fn string_map(&mut self, path: &'static str) -> Vec<(String, String)> {
        let Some((value, origin)) = self.raw(path) else {
            return Vec::new();
        };
        let ValueKind::Table(table) = value.kind else {
            self.error(path, "expected a mapping of names to values", origin);
            return Vec::new();
        };
        let mut entries = Vec::new();
        for (name, value) in table {
            match scalar(&value) {
                Some(text) => entries.push((name, text)),
                None => self.error(
                    &format!("{path}.{name}"),
                    "expected a string",
                    origin.clone(),
                ),
            }
        }
        entries
    }
}

fn scalar(value: &Value) -> Option<String> {
    match &value.kind {
        ValueKind::String(s) => Some(s.clone()),
        ValueKind::I64(n) => Some(n.to_string()),
        ValueKind::U64(n) => Some(n.to_string()),
        ValueKind::I128(n) => Some(n.to_string()),
        ValueKind::U128(n) => Some(n.to_string()),
        ValueKind::Float(n) => Some(n.to_string()),
        ValueKind::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `k1=v1,k2=v2` (the `OTEL_*_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES` form), values
/// percent-decoded. `None` when an entry has no `=`.
fn pairs(text: &str) -> Option<Vec<(String, String)>> {
    text.split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (name, value) = entry.split_once('=')?;
            Some((name.trim().to_owned(), percent_decode(value.trim())?))
        })
        .collect()
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `base` + `/v1/<signal>`, as the specification joins `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn joined(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// Whether `url` is an absolute http(s) URL with a host; the error never echoes it (it may
/// hold credentials).
fn check_url(url: &str) -> Result<(), &'static str> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| "expected an http:// or https:// URL")?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(()),
        _ => Err("expected an http:// or https:// URL with a host"),
    }
}

pub(super) fn read(r: &mut Reader<'_>, resolve: &dyn Fn(PathBuf) -> PathBuf) -> OtlpConfig {
    let d = OtlpConfig::default();
    let disabled = r
        .otel(SDK_DISABLED)
        .is_some_and(|(v, _)| v.eq_ignore_ascii_case("true"));
    let enabled = r.bool("observability.otlp.enabled").unwrap_or(d.enabled) && !disabled;

    let protocol = match r.string_or_otel("observability.otlp.protocol", PROTOCOL) {
        None => d.protocol,
        Some((protocol, origin)) => match protocol.as_str() {
            "http/protobuf" => Protocol::HttpProtobuf,
            "grpc" => Protocol::Grpc,
            other => {
                let message = match other {
                    "http/json" => "http/json is not supported; use http/protobuf or grpc",
                    _ => "expected http/protobuf or grpc",
                };
                r.error("observability.otlp.protocol", message, origin);
                d.protocol
            }
        },
    };

    let signals = read_signals(r);
    // Both signals turned off by their `OTEL_*_EXPORTER=none`: nothing to export.
    let enabled = enabled && !signals.is_empty();
    let configured = r.string("observability.otlp.endpoint");
    let endpoint_origin = r.origin_of("observability.otlp.endpoint");
    let url_for = |r: &mut Reader<'_>, signal: Signal| -> Option<String> {
        if !signals.contains(&signal) {
            return None;
        }
        let (name, own_var, method) = match signal {
            Signal::Traces => ("traces", TRACES_ENDPOINT, OtlpConfig::GRPC_TRACES_METHOD),
            Signal::Logs => ("logs", LOGS_ENDPOINT, OtlpConfig::GRPC_LOGS_METHOD),
        };
        // Over HTTP the signal's path is joined to the endpoint, and a signal's own variable
        // is its whole URL; over gRPC every endpoint is a collector's address, and the
        // service's method follows it.
        let join = |base: &str| match protocol {
            Protocol::HttpProtobuf => joined(base, name),
            Protocol::Grpc => format!("{}{method}", base.trim_end_matches('/')),
        };
        let default = match protocol {
            Protocol::HttpProtobuf => OtlpConfig::DEFAULT_ENDPOINT,
            Protocol::Grpc => OtlpConfig::DEFAULT_GRPC_ENDPOINT,
        };
        let (url, origin) = match (&configured, r.otel(own_var), r.otel(ENDPOINT)) {
            (Some(base), _, _) => (join(base), endpoint_origin.clone()),
            (None, Some((url, origin)), _) if protocol == Protocol::HttpProtobuf => (url, origin),
            (None, Some((base, origin)), _) => (join(&base), origin),
            (None, None, Some((base, origin))) => (join(&base), origin),
            (None, None, None) => (join(default), Origin::Unknown),
        };
        match check_url(&url) {
            Ok(()) => Some(url),
            Err(message) => {
                r.error("observability.otlp.endpoint", message, origin);
                None
            }
        }
    };
    let traces_url = url_for(r, Signal::Traces);
    let logs_url = url_for(r, Signal::Logs);

    let headers = read_headers(r);
    let timeout = r
        .duration(
            "observability.otlp.timeout",
            Unit::Milliseconds,
            Duration::from_millis(1),
            Duration::from_secs(600),
        )
        .or_else(|| {
            let (ms, origin) = r.otel(TIMEOUT)?;
            match ms.parse::<u64>() {
                Ok(ms) if (1..=600_000).contains(&ms) => Some(Duration::from_millis(ms)),
                _ => {
                    let message = "expected a whole number of milliseconds from 1 to 600000";
                    r.error("observability.otlp.timeout", message, origin);
                    None
                }
            }
        })
        .unwrap_or(d.timeout);

    let compression = match r.string_or_otel("observability.otlp.compression", COMPRESSION) {
        None => d.compression,
        Some((text, origin)) => match text.as_str() {
            "gzip" => Compression::Gzip,
            "none" => Compression::None,
            _ => {
                r.error(
                    "observability.otlp.compression",
                    "expected gzip or none",
                    origin,
                );
                d.compression
            }
        },
    };

    let sample_ppm = read_sample_ratio(r).unwrap_or(d.sample_ppm);
    let queue_size = r
        .bounded("observability.otlp.queue_size", 1, 1 << 20)
        .map_or(d.queue_size, |n| n as usize);
    let max_batch = r
        .bounded("observability.otlp.max_batch", 1, 1 << 16)
        .map_or(d.max_batch, |n| n as usize);
    let interval = r
        .duration(
            "observability.otlp.interval",
            Unit::Milliseconds,
            Duration::from_millis(10),
            Duration::from_secs(60),
        )
        .unwrap_or(d.interval);

    let mut resource_attributes = Vec::new();
    let mut env_service_name = None;
    if let Some((text, origin)) = r.otel(RESOURCE_ATTRIBUTES) {
        match pairs(&text) {
            Some(entries) => {
                for (name, value) in entries {
                    if name == "service.name" {
                        env_service_name = Some(value);
                    } else {
                        resource_attributes.push((name, value));
                    }
                }
            }
            None => r.error(
                "observability.otlp.resource_attributes",
                "expected name=value pairs separated by commas",
                origin,
            ),
        }
    }
    for (name, value) in r.string_map("observability.otlp.resource_attributes") {
        resource_attributes.retain(|(n, _)| *n != name);
        if name == "service.name" {
            let message = "set service.name with observability.otlp.service_name";
            r.refuse("observability.otlp.resource_attributes", message);
        } else {
            resource_attributes.push((name, value));
        }
    }
    let service_name = r
        .string("observability.otlp.service_name")
        .or_else(|| r.otel(SERVICE_NAME).map(|(v, _)| v))
        .or(env_service_name)
        .unwrap_or(d.service_name);
    if service_name.trim().is_empty() {
        r.refuse("observability.otlp.service_name", "must not be empty");
    }

    OtlpConfig {
        enabled,
        protocol,
        traces_url,
        logs_url,
        headers,
        timeout,
        compression,
        sample_ppm,
        queue_size,
        interval,
        max_batch,
        service_name,
        resource_attributes,
        capture_content: r
            .bool("observability.otlp.capture_content")
            .unwrap_or(d.capture_content),
        tls: read_tls(r, resolve),
        unread_env: r
            .otel_env
            .iter()
            .filter(|(name, value)| {
                name.starts_with("OTEL_EXPORTER_OTLP_")
                    && !READ.contains(&name.as_str())
                    && !value.trim().is_empty()
            })
            .map(|(name, _)| name.clone())
            .collect(),
    }
}

/// `observability.otlp.tls`, each file from the config (relative to its folder) or else from
/// its standard variable (relative to the working directory, as the SDKs read it).
fn read_tls(r: &mut Reader<'_>, resolve: &dyn Fn(PathBuf) -> PathBuf) -> OtlpTls {
    let file = |r: &mut Reader<'_>, path: &'static str, var: &str| match r.string(path) {
        Some(file) => Some(resolve(PathBuf::from(file))),
        None => r.otel(var).map(|(file, _)| PathBuf::from(file)),
    };
    let tls = OtlpTls {
        ca_cert_file: file(r, "observability.otlp.tls.ca_cert_file", CERTIFICATE),
        client_cert_file: file(
            r,
            "observability.otlp.tls.client_cert_file",
            CLIENT_CERTIFICATE,
        ),
        client_key_file: file(r, "observability.otlp.tls.client_key_file", CLIENT_KEY),
    };
    if tls.client_cert_file.is_some() != tls.client_key_file.is_some() {
        r.refuse(
            "observability.otlp.tls.client_cert_file",
            "client_cert_file and client_key_file go together",
        );
    }
    tls
}

/// `signals`: a list (`[traces, logs]`) or, from a variable, `traces,logs`.
fn read_signals(r: &mut Reader<'_>) -> Vec<Signal> {
    const PATH: &str = "observability.otlp.signals";
    let Some((value, origin)) = r.raw(PATH) else {
        // Unset: both, less a signal whose standard `OTEL_*_EXPORTER` says `none`.
        let mut signals = Vec::new();
        for (signal, var) in [
            (Signal::Traces, TRACES_EXPORTER),
            (Signal::Logs, LOGS_EXPORTER),
        ] {
            let Some((value, origin)) = r.otel(var) else {
                signals.push(signal);
                continue;
            };
            let names: Vec<&str> = value.split(',').map(str::trim).collect();
            if names.contains(&"otlp") {
                signals.push(signal);
            } else if !names.iter().all(|n| *n == "none") {
                r.error(
                    PATH,
                    "expected otlp or none (aisix exports over OTLP only)",
                    origin,
                );
                signals.push(signal);
            }
        }
        return signals;
    };
    let names: Vec<String> = match value.kind {
        ValueKind::Array(items) => items
            .iter()
            .map(|v| scalar(v).unwrap_or_default())
            .collect(),
        ValueKind::String(text) => text.split(',').map(|s| s.trim().to_owned()).collect(),
        _ => {
            r.error(PATH, "expected a list of signals: traces, logs", origin);
            return Vec::new();
        }
    };
    let mut signals = Vec::new();
    for name in names.iter().filter(|n| !n.is_empty()) {
        match name.as_str() {
            "traces" => signals.push(Signal::Traces),
            "logs" => signals.push(Signal::Logs),
            _ => {
                r.error(
                    PATH,
                    "unknown signal (expected traces or logs)",
                    origin.clone(),
                );
            }
        }
    }
    if signals.is_empty() && names.iter().all(|n| n.is_empty()) {
        r.error(
            PATH,
            "names no signal; list traces, logs or both, or set enabled: false",
            origin,
        );
    }
    signals
}

fn read_headers(r: &mut Reader<'_>) -> Vec<(String, Secret)> {
    const PATH: &str = "observability.otlp.headers";
    let mut headers: Vec<(String, String, Origin)> = Vec::new();
    if let Some((text, origin)) = r.otel(HEADERS) {
        match pairs(&text) {
            Some(entries) => {
                headers.extend(entries.into_iter().map(|(n, v)| (n, v, origin.clone())));
            }
            None => r.error(
                PATH,
                "expected name=value pairs separated by commas",
                origin,
            ),
        }
    }
    let origin = r.origin_of(PATH);
    for (name, value) in r.string_map(PATH) {
        headers.retain(|(n, _, _)| !n.eq_ignore_ascii_case(&name));
        headers.push((name, value, origin.clone()));
    }
    let mut valid = Vec::new();
    for (name, value, origin) in headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            r.error(&format!("{PATH}.{name}"), "not a valid header name", origin);
        } else if http::HeaderValue::from_str(&value).is_err() {
            // The value is never echoed: it is usually a credential.
            r.error(
                &format!("{PATH}.{name}"),
                "not a valid header value",
                origin,
            );
        } else {
            valid.push((name.to_ascii_lowercase(), Secret::new(value)));
        }
    }
    valid
}

/// `sample_ratio` from 0 to 1, in parts per million; else the `OTEL_TRACES_SAMPLER` pair
/// when it names a ratio (or always on / off).
fn read_sample_ratio(r: &mut Reader<'_>) -> Option<u32> {
    const PATH: &str = "observability.otlp.sample_ratio";
    let ratio = |text: &str| {
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|f| (0.0..=1.0).contains(f))
    };
    if let Some((value, origin)) = r.raw(PATH) {
        let parsed = match &value.kind {
            ValueKind::Float(f) => Some(*f).filter(|f| (0.0..=1.0).contains(f)),
            ValueKind::I64(n) => Some(*n as f64).filter(|f| (0.0..=1.0).contains(f)),
            ValueKind::U64(n) => Some(*n as f64).filter(|f| (0.0..=1.0).contains(f)),
            ValueKind::String(s) => ratio(s),
            _ => None,
        };
        return match parsed {
            Some(f) => Some((f * 1e6).round() as u32),
            None => {
                r.error(PATH, "expected a number from 0 to 1", origin);
                None
            }
        };
    }
    let (sampler, origin) = r.otel(SAMPLER)?;
    match sampler.as_str() {
        "always_on" | "parentbased_always_on" => Some(1_000_000),
        "always_off" | "parentbased_always_off" => Some(0),
        "traceidratio" | "parentbased_traceidratio" => {
            let (arg, origin) = r.otel(SAMPLER_ARG).unwrap_or(("1".to_owned(), origin));
            match ratio(&arg) {
                Some(f) => Some((f * 1e6).round() as u32),
                None => {
                    r.error(PATH, "expected a number from 0 to 1", origin);
                    None
                }
            }
        }
        _ => {
            let message = "unsupported sampler (expected a ratio, always_on or always_off; the \
                           gateway's sampling is always parent-based)";
            r.error(PATH, message, origin);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_percent_decoded_and_need_an_equals_sign() {
        assert_eq!(
            pairs("a=b%2Cc, d = e "),
            Some(vec![("a".into(), "b,c".into()), ("d".into(), "e".into())])
        );
        assert_eq!(pairs("novalue"), None);
        assert_eq!(pairs("a=%zz"), None);
    }

    #[test]
    fn a_base_endpoint_gets_the_signal_path_once() {
        assert_eq!(
            joined("http://c:4318/", "traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(joined("http://c:4318", "logs"), "http://c:4318/v1/logs");
    }
}
