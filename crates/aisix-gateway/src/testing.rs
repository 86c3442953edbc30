//! Test helpers shared by the unit tests of several modules.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use aisix_obs::metrics::labels::Endpoint as EndpointLabel;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::account::{Record, Sinks};
use crate::provider::StreamMap;
use crate::provider::events::{Events, Next, StreamSettings};
use crate::request::deadline::Deadlines;
use crate::snapshot::{Named, Provider, Snapshot};
use crate::wire::Dialect;

/// A real hyper HTTP/1.1 response whose raw bytes (head and body) an upstream writes in one go
/// on an in-memory connection; the upstream keeps its end open unless `close`.
pub(crate) async fn raw_response(raw: Vec<u8>, close: bool) -> Response<Incoming> {
    let (client, mut server) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let mut head = [0u8; 1024];
        let _ = tokio::io::AsyncReadExt::read(&mut server, &mut head).await;
        let _ = server.write_all(&raw).await;
        if !close {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::post("/v1/chat/completions")
        .header("host", "up")
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

/// An SSE response whose body is `chunks` (each its own chunk of a chunked HTTP/1.1 body),
/// then the body's end.
pub(crate) fn chunked(chunks: &[&[u8]]) -> Vec<u8> {
    let mut raw =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for chunk in chunks.iter().filter(|chunk| !chunk.is_empty()) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    raw
}

/// What a client got of one upstream stream relayed through the gateway's own stream path.
pub(crate) struct Relayed {
    /// The bytes the client got, its error event included.
    pub out: Vec<u8>,
    /// The stream ended complete (else it ended with an error event).
    pub complete: bool,
    /// The stream reader, for what its map read (usage, text).
    pub events: Events,
}

/// Relays an upstream stream whose body arrives as `chunks` (each its own chunk of a chunked
/// HTTP/1.1 body, then the body's end) through [`Events`] and `map`, as the relay does for a
/// client of `dialect`: every frame the reader gives, and after a failure what it read before
/// it and the map's closing event.
pub(crate) fn relay(map: StreamMap, dialect: Dialect, chunks: &[&[u8]]) -> Relayed {
    let raw = chunked(chunks);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let response = raw_response(raw, true).await;
        let now = Instant::now();
        let deadlines = Deadlines {
            connect: Duration::from_secs(60),
            first_byte: now + Duration::from_secs(60),
            stream_idle: Duration::from_secs(60),
            end: now + Duration::from_secs(60),
        };
        let settings = StreamSettings {
            keepalive: None,
            max_event_bytes: 1 << 20,
        };
        let mut events = Events::new(
            response.into_body(),
            None,
            map,
            settings,
            deadlines,
            now,
            None,
        );
        let mut out = Vec::new();
        loop {
            match poll_fn(|cx| events.poll_relay(cx)).await {
                Next::Data(data) => out.extend_from_slice(&data),
                Next::End => {
                    return Relayed {
                        out,
                        complete: true,
                        events,
                    };
                }
                Next::Failed(error) => {
                    out.extend_from_slice(&events.take_out());
                    out.extend_from_slice(&events.map().closing(&error, dialect));
                    return Relayed {
                        out,
                        complete: false,
                        events,
                    };
                }
            }
        }
    })
}

/// The provider key of a direct `openai` model whose key is `api_key`.
pub(crate) fn provider(api_key: &str) -> Arc<Provider> {
    let yaml = format!(
        "_format_version: \"1\"\nprovider_keys: [{{display_name: p, provider: openai, api_key: {api_key}}}]\nmodels: [{{display_name: m, provider: openai, model_name: gpt, provider_key: p}}]\n"
    );
    let resources =
        aisix_config::parse_resources(&yaml, std::path::Path::new("r.yaml"), &|_| None).unwrap();
    match Snapshot::from_resources(&resources).model("m") {
        Some(Named::Direct(route)) => Arc::clone(&route.provider),
        other => panic!("{other:?}"),
    }
}

/// The record of a chat completions request, feeding no metrics and no access log.
pub(crate) fn record() -> Box<Record> {
    Record::new(
        HeaderValue::from_static("r"),
        EndpointLabel::ChatCompletions,
        Method::POST,
        Uri::from_static("/v1/chat/completions"),
        Instant::now(),
        Sinks {
            metrics: false,
            access_log: false,
        },
    )
}
