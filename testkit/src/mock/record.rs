//! What the mock saw: one [`RecordedRequest`] per request received, for assertions.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Version, request::Parts};
use serde_json::Value;

/// A request as the mock received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: Method,
    /// The path without the query, e.g. `/v1/chat/completions`.
    pub path: String,
    pub query: Option<String>,
    pub version: Version,
    /// Lowercase name → value; repeated headers are joined with `", "`, values that are not
    /// UTF-8 are converted lossily.
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
    /// Which accepted connection carried it: 1 for the first connection, 2 for the second, …
    pub connection: usize,
    /// When its body had arrived in full.
    pub received_at: Instant,
}

impl RecordedRequest {
    pub(crate) fn new(parts: &Parts, body: Bytes, connection: usize) -> RecordedRequest {
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in &parts.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            headers
                .entry(name.as_str().to_owned())
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert_with(|| value.into_owned());
        }
        RecordedRequest {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            version: parts.version,
            headers,
            body,
            connection,
            received_at: Instant::now(),
        }
    }

    /// The header's value; `name` is matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The body parsed as JSON.
    pub fn body_json(&self) -> serde_json::Result<Value> {
        serde_json::from_slice(&self.body)
    }
}
