//! The exporter: one task on the control runtime (never a worker) that collects the workers'
//! finished requests every `interval`, writes them as OTLP protobuf, compresses and sends them
//! to the collector, trying again after a transport error, a timeout or a 429/502/503/504.
//! Records it could not deliver are counted in `aisix_otel_dropped_total`; the workers never
//! wait for it, so a collector that hangs or refuses changes nothing for requests.

use std::io::Write;
use std::time::Duration;

use aisix_config::{Compression, OtlpConfig};
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc::{self, UnboundedReceiver, error::TryRecvError};

use aisix_obs::metrics::emit;

use super::queue::{self, Hub, Queue};
use super::record::Finished;
use super::spans::{self, Resource};

/// Tries per export request: the first and two more.
const TRIES: u32 = 3;
/// The pause before the second try; doubled before the third.
const BACKOFF: Duration = Duration::from_millis(250);

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("observability.otlp: {0}")]
    Config(String),
    #[error("observability.otlp: an exporter is already running in this process")]
    AlreadyRunning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Logs,
}

impl Signal {
    fn label(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
        }
    }
}

/// Delivers the workers' traces and usage events; run it with [`Exporter::run`] on the
/// control runtime.
pub struct Exporter {
    announced: UnboundedReceiver<Queue>,
    queues: Vec<Queue>,
    resource: Resource,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    traces: Option<Uri>,
    logs: Option<Uri>,
    headers: HeaderMap,
    timeout: Duration,
    interval: Duration,
    max_batch: usize,
    gzip: bool,
    /// Whether the last export failed, so a collector that stays down is logged once.
    failing: bool,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("traces", &self.traces)
            .field("logs", &self.logs)
            .field("queues", &self.queues.len())
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// The exporter `config` asks for, `None` when export is off. Installs the queues' hub:
    /// from here on, each worker's first traced request opens its queue.
    pub fn new(config: &OtlpConfig) -> Result<Option<Self>, ExporterError> {
        if !config.enabled {
            return Ok(None);
        }
        let uri = |url: &Option<String>| -> Result<Option<Uri>, ExporterError> {
            url.as_deref()
                .map(|u| {
                    u.parse::<Uri>()
                        .map_err(|_| ExporterError::Config("the endpoint is not a URI".into()))
                })
                .transpose()
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ExporterError::Config(format!("header {name}: not a valid name")))?;
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|_| ExporterError::Config(format!("header {name}: not a valid value")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let tls = crate::upstream::tls::tls_client_config()
            .map_err(|e| ExporterError::Config(format!("cannot set up TLS: {e}")))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(connector);
        let mut attributes = vec![
            ("service.name".to_owned(), config.service_name.clone()),
            (
                "service.version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
            ("telemetry.sdk.name".to_owned(), "aisix".to_owned()),
            ("telemetry.sdk.language".to_owned(), "rust".to_owned()),
            ("process.pid".to_owned(), std::process::id().to_string()),
        ];
        attributes.extend(config.resource_attributes.iter().cloned());
        let (announce, announced) = mpsc::unbounded_channel();
        if !queue::install(Hub {
            announce,
            size: config.queue_size,
        }) {
            return Err(ExporterError::AlreadyRunning);
        }
        Ok(Some(Self {
            announced,
            queues: Vec::new(),
            resource: Resource { attributes },
            client,
            traces: uri(&config.traces_url)?,
            logs: uri(&config.logs_url)?,
            headers,
            timeout: config.timeout,
            interval: config.interval,
            max_batch: config.max_batch,
            gzip: config.compression == Compression::Gzip,
            failing: false,
        }))
    }

    /// Collects and sends, every `interval`, for as long as the process lives.
    pub async fn run(mut self) {
        // The thread that sends, named in the resource so a collector can see it is not a
        // worker's.
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        self.resource
            .attributes
            .push(("aisix.exporter.thread".to_owned(), thread));
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            while let Ok(queue) = self.announced.try_recv() {
                self.queues.push(queue);
            }
            loop {
                let batch = self.take();
                if batch.is_empty() {
                    break;
                }
                self.export(&batch).await;
                if batch.len() < self.max_batch {
                    break;
                }
            }
        }
    }

    /// Up to `max_batch` records, taken from every queue in turn; a queue whose worker has
    /// gone is forgotten.
    fn take(&mut self) -> Vec<Finished> {
        let mut batch = Vec::new();
        let mut open = vec![true; self.queues.len()];
        'fill: while batch.len() < self.max_batch {
            let mut any = false;
            for (queue, open) in self.queues.iter_mut().zip(open.iter_mut()) {
                if !*open {
                    continue;
                }
                match queue.try_recv() {
                    Ok(finished) => {
                        any = true;
                        batch.push(*finished);
                        if batch.len() == self.max_batch {
                            break 'fill;
                        }
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => *open = false,
                }
            }
            if !any {
                break;
            }
        }
        self.queues
            .retain(|queue| !queue.is_closed() || !queue.is_empty());
        batch
    }

    async fn export(&mut self, batch: &[Finished]) {
        if let Some(uri) = self.traces.clone() {
            let spans: u64 = batch.iter().map(spans::span_count).sum();
            if spans > 0 {
                let body = spans::traces(batch, &self.resource);
                let sampled = batch.iter().filter(|f| f.sampled).count() as u64;
                self.deliver(&uri, body, Signal::Traces, sampled).await;
            }
        }
        if let Some(uri) = self.logs.clone() {
            let events = batch.iter().filter(|f| f.logs).count() as u64;
            if events > 0 {
                let body = spans::logs(batch, &self.resource);
                self.deliver(&uri, body, Signal::Logs, events).await;
            }
        }
    }

    /// Sends `body` (holding `records` requests' worth of `signal`) to `uri`, trying again
    /// while the failure is one a retry may cure; counts what was delivered or lost.
    async fn deliver(&mut self, uri: &Uri, body: Vec<u8>, signal: Signal, records: u64) {
        let body = match self.gzip {
            true => gzip(&body).unwrap_or(body),
            false => body,
        };
        let body = Bytes::from(body);
        let mut failure = String::new();
        for attempt in 0..TRIES {
            if attempt > 0 {
                tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
            }
            match self.send(uri, body.clone()).await {
                Ok(()) => {
                    emit::otel_exported(signal.label(), records);
                    if self.failing {
                        tracing::info!(signal = signal.label(), "OTLP export resumed");
                        self.failing = false;
                    }
                    return;
                }
                Err(Failure { retry, why }) => {
                    failure = why;
                    if !retry {
                        break;
                    }
                }
            }
        }
        emit::otel_dropped(signal.label(), records);
        if !self.failing {
            tracing::warn!(signal = signal.label(), error = %failure, records, "OTLP export failed; its records are dropped (logged once until export resumes)");
            self.failing = true;
        }
    }

    async fn send(&self, uri: &Uri, body: Bytes) -> Result<(), Failure> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(body))
            .map_err(|e| Failure::fatal(format!("cannot build the request: {e}")))?;
        if self.gzip {
            request
                .headers_mut()
                .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        for (name, value) in &self.headers {
            request.headers_mut().insert(name, value.clone());
        }
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| Failure::retry(format!("transport: {e}")))?;
            let status = response.status();
            // Read the answer whole, so the connection can be used again.
            let _ = response.into_body().collect().await;
            match status.as_u16() {
                200..=299 => Ok(()),
                429 | 502 | 503 | 504 => Err(Failure::retry(format!("status {status}"))),
                _ => Err(Failure::fatal(format!("status {status}"))),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::retry("timed out".to_owned())))
    }
}

/// Why one try failed, and whether another may succeed.
struct Failure {
    retry: bool,
    why: String,
}

impl Failure {
    fn retry(why: String) -> Self {
        Self { retry: true, why }
    }
    fn fatal(why: String) -> Self {
        Self { retry: false, why }
    }
}

fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(body).ok()?;
    encoder.finish().ok()
}
