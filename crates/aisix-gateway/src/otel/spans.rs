//! Finished requests as OTLP export requests: their spans (`ExportTraceServiceRequest`) and
//! their usage events (`ExportLogsServiceRequest`), with the GenAI semantic conventions'
//! attribute names. Runs on the exporter only.

use super::encode::{Message, Value, any_value, attribute};
use super::record::{AttemptSpan, Finished};

/// The resource every record of this process belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub attributes: Vec<(String, String)>,
}

const SCOPE: &str = "aisix";
const SPAN_KIND_SERVER: u64 = 2;
const SPAN_KIND_CLIENT: u64 = 3;
const STATUS_ERROR: u64 = 2;
const SEVERITY_INFO: u64 = 9;
/// `SpanFlags`: the sampled bit, and whether the parent's remoteness is known and true.
const FLAG_SAMPLED: u32 = 0x01;
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
const FLAG_IS_REMOTE: u32 = 0x200;

fn resource(out: &mut Message, field: u64, resource: &Resource) {
    out.message(field, |r| {
        for (key, value) in &resource.attributes {
            attribute(r, 1, key, &Value::Str(value));
        }
    });
}

fn scope(out: &mut Message) {
    out.message(1, |s| {
        s.string(1, SCOPE);
        s.string(2, env!("CARGO_PKG_VERSION"));
    });
}

/// An `ExportTraceServiceRequest` holding the spans of `batch`'s sampled requests.
pub(crate) fn traces(batch: &[Finished], res: &Resource) -> Vec<u8> {
    let mut out = Message::new();
    out.message(1, |rs| {
        resource(rs, 1, res);
        rs.message(2, |ss| {
            scope(ss);
            for f in batch.iter().filter(|f| f.sampled) {
                ss.message(2, |span| server_span(span, f));
                for (i, attempt) in f.attempts.iter().enumerate() {
                    ss.message(2, |span| attempt_span(span, f, i, attempt));
                }
            }
        });
    });
    out.into_bytes()
}

/// How many spans `traces` writes for `finished`.
pub(crate) fn span_count(finished: &Finished) -> u64 {
    if finished.sampled {
        1 + finished.attempts.len() as u64
    } else {
        0
    }
}

fn name(f: &Finished, model: Option<&str>) -> String {
    match model {
        Some(model) => format!("{} {model}", f.operation),
        None => f.operation.to_owned(),
    }
}

fn server_span(span: &mut Message, f: &Finished) {
    span.bytes(1, &f.trace_id);
    span.bytes(2, &f.span_id);
    if let Some(state) = f.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    let mut flags = FLAG_SAMPLED | FLAG_HAS_IS_REMOTE;
    if let Some(parent) = &f.parent {
        span.bytes(4, parent);
        flags |= FLAG_IS_REMOTE;
    }
    span.string(5, &name(f, f.requested_model.as_deref()));
    span.uint(6, SPAN_KIND_SERVER);
    span.fixed64(7, f.start_ns);
    span.fixed64(8, f.end_ns);
    let mut attr = |key: &str, value: Value<'_>| attribute(span, 9, key, &value);
    attr("gen_ai.operation.name", Value::Str(f.operation));
    if let Some(model) = &f.requested_model {
        attr("gen_ai.request.model", Value::Str(model));
    }
    if let Some(last) = f.attempts.last() {
        attr("gen_ai.provider.name", Value::Str(last.provider_kind));
        if let Some((host, port)) = &last.server {
            attr("server.address", Value::Str(host));
            attr("server.port", Value::Int(i64::from(*port)));
        }
    }
    if let Some(model) = &f.response_model {
        attr("gen_ai.response.model", Value::Str(model));
    }
    if let Some(max) = f.max_tokens {
        attr("gen_ai.request.max_tokens", Value::Int(max as i64));
    }
    if let Some((input, output)) = f.usage {
        attr("gen_ai.usage.input_tokens", Value::Int(input as i64));
        attr("gen_ai.usage.output_tokens", Value::Int(output as i64));
    }
    attr("http.request.method", Value::Str(f.method.as_str()));
    attr("url.path", Value::Str(&f.path));
    attr("http.response.status_code", Value::Int(i64::from(f.status)));
    if let Ok(id) = f.request_id.to_str() {
        attr("aisix.request_id", Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr("aisix.api_key.name", Value::Str(key));
    }
    if let Some(model) = &f.model {
        attr("aisix.model", Value::Str(model));
    }
    if let Some(group) = &f.group {
        attr("aisix.group", Value::Str(group));
    }
    if let Some(provider) = &f.provider_key {
        attr("aisix.provider_key", Value::Str(provider));
    }
    attr("aisix.stream", Value::Bool(f.stream));
    if let Some(ttft) = f.ttft {
        attr(
            "aisix.time_to_first_token",
            Value::Double(ttft.as_secs_f64()),
        );
    }
    attr("aisix.ending", Value::Str(f.ending));
    if let Some(cost) = f.cost {
        attr("aisix.cost_usd", Value::Double(cost.nanos() as f64 / 1e9));
    }
    if let Some(error) = f.error {
        attr("error.type", Value::Str(error));
    }
    if let Some(prompt) = f.prompt.as_ref().and_then(|p| std::str::from_utf8(p).ok()) {
        attr("gen_ai.input.messages", Value::Str(prompt));
    }
    if f.status >= 500 {
        span.message(15, |status| {
            status.string(2, f.error.unwrap_or("error"));
            status.uint(3, STATUS_ERROR);
        });
    }
    span.fixed32(16, flags);
}

fn attempt_span(span: &mut Message, f: &Finished, index: usize, a: &AttemptSpan) {
    span.bytes(1, &f.trace_id);
    span.bytes(2, &a.span_id);
    if let Some(state) = f.trace_state.as_ref().and_then(|s| s.to_str().ok()) {
        span.string(3, state);
    }
    span.bytes(4, &f.span_id);
    span.string(5, &name(f, Some(&a.upstream_model)));
    span.uint(6, SPAN_KIND_CLIENT);
    span.fixed64(7, a.start_ns);
    span.fixed64(8, a.end_ns);
    let mut attr = |key: &str, value: Value<'_>| attribute(span, 9, key, &value);
    attr("gen_ai.operation.name", Value::Str(f.operation));
    attr("gen_ai.provider.name", Value::Str(a.provider_kind));
    attr("gen_ai.request.model", Value::Str(&a.upstream_model));
    if let Some((host, port)) = &a.server {
        attr("server.address", Value::Str(host));
        attr("server.port", Value::Int(i64::from(*port)));
    }
    if let Some(status) = a.status {
        attr("http.response.status_code", Value::Int(i64::from(status)));
    }
    attr(
        "aisix.model",
        Value::Str(a.target.as_deref().unwrap_or_default()),
    );
    attr(
        "aisix.provider_key",
        Value::Str(a.provider_key.as_deref().unwrap_or_default()),
    );
    attr("aisix.attempt", Value::Int(index as i64));
    attr("aisix.ending", Value::Str(a.result));
    if let Some(error) = a.error {
        attr("error.type", Value::Str(error));
    }
    if a.error.is_some() {
        span.message(15, |status| {
            status.string(2, a.error.unwrap_or("error"));
            status.uint(3, STATUS_ERROR);
        });
    }
    span.fixed32(16, FLAG_SAMPLED | FLAG_HAS_IS_REMOTE);
}

/// An `ExportLogsServiceRequest` holding one usage event per request of `batch`.
pub(crate) fn logs(batch: &[Finished], res: &Resource) -> Vec<u8> {
    let mut out = Message::new();
    out.message(1, |rl| {
        resource(rl, 1, res);
        rl.message(2, |sl| {
            scope(sl);
            for f in batch.iter().filter(|f| f.logs) {
                sl.message(2, |log| usage_event(log, f));
            }
        });
    });
    out.into_bytes()
}

fn usage_event(log: &mut Message, f: &Finished) {
    log.fixed64(1, f.end_ns);
    log.uint(2, SEVERITY_INFO);
    log.string(3, "INFO");
    log.message(5, |body| any_value(body, &Value::Str("usage")));
    let mut attr = |key: &str, value: Value<'_>| attribute(log, 6, key, &value);
    if let Ok(id) = f.request_id.to_str() {
        attr("aisix.request_id", Value::Str(id));
    }
    if let Some(key) = &f.key_name {
        attr("aisix.api_key.name", Value::Str(key));
    }
    attr("gen_ai.operation.name", Value::Str(f.operation));
    if let Some(model) = &f.requested_model {
        attr("gen_ai.request.model", Value::Str(model));
    }
    if let Some(model) = &f.model {
        attr("aisix.model", Value::Str(model));
    }
    if let Some(last) = f.attempts.last() {
        attr("gen_ai.provider.name", Value::Str(last.provider_kind));
    }
    if let Some(model) = &f.response_model {
        attr("gen_ai.response.model", Value::Str(model));
    }
    if let Some(provider) = &f.provider_key {
        attr("aisix.provider_key", Value::Str(provider));
    }
    if let Some((input, output)) = f.usage {
        attr("gen_ai.usage.input_tokens", Value::Int(input as i64));
        attr("gen_ai.usage.output_tokens", Value::Int(output as i64));
    }
    if let Some(cost) = f.cost {
        attr("aisix.cost_usd", Value::Double(cost.nanos() as f64 / 1e9));
    }
    attr("http.response.status_code", Value::Int(i64::from(f.status)));
    attr("aisix.stream", Value::Bool(f.stream));
    attr("aisix.ending", Value::Str(f.ending));
    if let Some(error) = f.error {
        attr("error.type", Value::Str(error));
    }
    log.fixed32(8, if f.sampled { FLAG_SAMPLED } else { 0 });
    log.bytes(9, &f.trace_id);
    log.bytes(10, &f.span_id);
    log.fixed64(11, f.end_ns);
    log.string(12, "aisix.usage");
}
