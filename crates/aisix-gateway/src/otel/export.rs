//! The exporter: one task on the control runtime (never a worker) that drains the workers'
//! queues into batches and sends each as OTLP protobuf, compressed, to the collector (over
//! OTLP/HTTP, or OTLP/gRPC: [`super::grpc`]), trying again after a transport error, a timeout,
//! a 429/502/503/504 or a retryable gRPC status (after the wait a throttling collector asks
//! for, [`super::reply`]). A batch goes when it is full
//! (a worker wakes the exporter once per batch's worth of records) or when `interval` has
//! passed since the last collection; up to [`IN_FLIGHT`] batches are sent at once. Records it
//! could not deliver, and those a partial success rejects, are counted in
//! `aisix_otel_dropped_total`; the workers never wait for it,
//! so a collector that hangs or refuses changes nothing for requests. On shutdown
//! ([`Running::flush`]) what is queued is sent before the process goes, within the export
//! timeout.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aisix_config::{Compression, OtlpConfig, OtlpTls, Protocol};
use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::{Notify, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use aisix_obs::metrics::emit;

use super::encode::Message;
use super::grpc;
use super::queue::{self, Hub, Queue};
use super::reply::{self, Answer, Partial};
use super::spans::{self, Memo, Resource};
use super::{Trace, Wall};

/// The exporter's `User-Agent`, as the gateway's upstream requests name it.
static EXPORTER_AGENT: HeaderValue =
    HeaderValue::from_static(concat!("aisix/", env!("CARGO_PKG_VERSION")));

/// gRPC's request headers: the export's limit, and the message's compression.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

/// Tries per export request: the first and two more.
const TRIES: u32 = 3;
/// The longest wait before another try that a throttling collector may ask for (its
/// `Retry-After`, its `RetryInfo`); past it, the batch is dropped rather than held.
const LONGEST_WAIT: Duration = Duration::from_secs(30);
/// The pause before the second try; doubled before the third.
const BACKOFF: Duration = Duration::from_millis(250);
/// Export requests sent at once at most; past them, the queues hold what comes (and drop
/// what does not fit).
const IN_FLIGHT: usize = 4;

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
/// Delivers the workers' traces and usage events; start it with [`Exporter::start`] on the
/// control runtime.
pub struct Exporter {
    announced: UnboundedReceiver<Queue>,
    queues: Vec<Queue>,
    /// Rung by the workers once per batch's worth of records.
    wake: Arc<Notify>,
    delivery: Delivery,
    interval: Duration,
    max_batch: usize,
}

/// What sends one batch: shared by the batches in flight.
struct Delivery {
    resource: Resource,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    traces: Option<Uri>,
    logs: Option<Uri>,
    headers: HeaderMap,
    timeout: Duration,
    gzip: bool,
    /// OTLP/gRPC rather than OTLP/HTTP.
    grpc: bool,
    /// Whether the last export failed, so a collector that stays down is logged once.
    failing: AtomicBool,
    /// Whether the last accepted export was accepted in part, so a collector that keeps
    /// rejecting is logged once.
    partial: AtomicBool,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("traces", &self.delivery.traces)
            .field("logs", &self.delivery.logs)
            .field("queues", &self.queues.len())
            .finish_non_exhaustive()
    }
}

/// The exporter once started: [`Running::flush`] sends what is queued and stops it.
#[derive(Debug)]
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    timeout: Duration,
}

impl Running {
    /// Stops the exporter once it has sent what the queues hold (call it when the workers
    /// are done), waiting at most the export timeout; what is left then is not sent.
    pub async fn flush(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(self.timeout, self.task).await.is_err() {
            tracing::warn!(
                timeout = ?self.timeout,
                "OTLP export not flushed before exit: what was still queued is not sent"
            );
        }
    }
}

impl Exporter {
    /// The exporter `config` asks for, `None` when export is off. Installs the queues' hub:
    /// from here on, each worker opens its queue as it starts (a shared runtime's threads, on
    /// their first traced request).
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
        if !config.unread_env.is_empty() {
            tracing::warn!(
                variables = %config.unread_env.join(", "),
                "OTLP: these OTEL_EXPORTER_OTLP_* variables are set but aisix does not read them (docs/opentelemetry.md lists those it does)"
            );
        }
        let tls = exporter_tls(&config.tls).map_err(ExporterError::Config)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let grpc = config.protocol == Protocol::Grpc;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        // gRPC is HTTP/2 only: offered by ALPN over TLS, spoken from the first byte over
        // plain TCP (as gRPC clients do, with no upgrade).
        let connector = match grpc {
            true => connector.enable_http2().wrap_connector(http),
            false => connector.enable_http1().wrap_connector(http),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(IN_FLIGHT)
            .http2_only(grpc)
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
        let wake = Arc::new(Notify::new());
        if !queue::install(Hub {
            announce,
            size: config.queue_size,
            wake_every: wake_every(config.max_batch, config.queue_size),
            wake: wake.clone(),
        }) {
            return Err(ExporterError::AlreadyRunning);
        }
        Ok(Some(Self {
            announced,
            queues: Vec::new(),
            wake,
            delivery: Delivery {
                resource: Resource { attributes },
                client,
                traces: uri(&config.traces_url)?,
                logs: uri(&config.logs_url)?,
                headers,
                timeout: config.timeout,
                gzip: config.compression == Compression::Gzip,
                grpc,
                failing: AtomicBool::new(false),
                partial: AtomicBool::new(false),
            },
            interval: config.interval,
            max_batch: config.max_batch,
        }))
    }

    /// Spawns the exporter on the current runtime (the control runtime's).
    pub fn start(self) -> Running {
        let (stop, stopped) = oneshot::channel();
        let timeout = self.delivery.timeout;
        Running {
            stop,
            task: tokio::spawn(self.run(stopped)),
            timeout,
        }
    }

    /// Drains the queues into batches and sends them until `stop`, then sends what is left.
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        // The thread that sends, named in the resource so a collector can see it is not a
        // worker's.
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        self.delivery
            .resource
            .attributes
            .push(("aisix.exporter.thread".to_owned(), thread));
        let Exporter {
            mut announced,
            mut queues,
            wake,
            delivery,
            interval,
            max_batch,
        } = self;
        let delivery = Arc::new(delivery);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pending: Vec<Box<Trace>> = Vec::new();
        // Every export request is written here: one buffer, whose space comes back once the
        // export that took it is sent, and that is made large enough before each is written.
        let mut buf = Buffer::default();
        let mut memo = Memo::default();
        let mut in_flight = JoinSet::new();
        // The interval passed: a batch that is not full goes too.
        let mut due = false;
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                _ = &mut stop, if !stopping => stopping = true,
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                _ = tick.tick() => due = true,
                () = wake.notified() => {}
            }
            while let Ok(queue) = announced.try_recv() {
                queues.push(queue);
            }
            while in_flight.len() < IN_FLIGHT {
                take(&mut queues, &mut pending, max_batch);
                let full = pending.len() >= max_batch;
                if !full {
                    if pending.is_empty() || !(due || stopping) {
                        // Nothing more to send until a batch fills or the interval passes.
                        due &= !pending.is_empty();
                        break;
                    }
                    due = false;
                }
                let bodies = delivery.encode(&pending, &mut buf, &mut memo);
                pending.clear();
                let delivery = delivery.clone();
                in_flight.spawn(async move { delivery.export(bodies).await });
            }
            if stopping && in_flight.is_empty() && pending.is_empty() {
                return;
            }
        }
    }
}

/// The exporter's TLS: the collector's certificate checked against `ca_cert_file`'s CAs alone
/// when it is set (as the OpenTelemetry SDKs use `OTEL_EXPORTER_OTLP_CERTIFICATE`), else
/// against the gateway's trust store; `client_cert_file` and its key offered when the
/// collector asks for a client certificate.
fn exporter_tls(tls: &OtlpTls) -> Result<rustls::ClientConfig, String> {
    use aisix_bootstrap::{pem_certs, pem_key};
    let why = |key: &str, path: &std::path::Path, reason: String| {
        format!("tls.{key} {}: {reason}", path.display())
    };
    let certs = |key: &str, path: &std::path::Path| {
        pem_certs(path).map_err(|reason| why(key, path, reason))
    };
    let roots = match &tls.ca_cert_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs("ca_cert_file", path)? {
                roots
                    .add(cert)
                    .map_err(|e| why("ca_cert_file", path, e.to_string()))?;
            }
            roots
        }
        None => crate::upstream::tls::trust_store(),
    };
    let builder = crate::upstream::tls::client_builder(roots)
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = certs("client_cert_file", cert)?;
            let private = pem_key(key).map_err(|reason| why("client_key_file", key, reason))?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                format!("tls.client_cert_file and client_key_file do not form a usable pair: {e}")
            })
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// Records a worker puts between two wakes of the exporter: a batch's worth, or half its
/// queue when that is smaller, so the exporter comes before the queue is full.
fn wake_every(max_batch: usize, queue_size: usize) -> usize {
    max_batch.min(queue_size / 2).max(1)
}

/// Moves records into `batch` until it holds `max_batch`, taken from every queue in turn; a
/// queue whose worker has gone is forgotten once empty.
// The boxes the workers filled are kept as they are: no trace is copied out of its box.
#[allow(clippy::vec_box)]
fn take(queues: &mut Vec<Queue>, batch: &mut Vec<Box<Trace>>, max_batch: usize) {
    let mut open = vec![true; queues.len()];
    'fill: while batch.len() < max_batch {
        let mut any = false;
        for (queue, open) in queues.iter_mut().zip(open.iter_mut()) {
            if !*open {
                continue;
            }
            match queue.pop() {
                Some(trace) => {
                    any = true;
                    batch.push(trace);
                    if batch.len() >= max_batch {
                        break 'fill;
                    }
                }
                None => *open = false,
            }
        }
        if !any {
            break;
        }
    }
    queues.retain(|queue| !queue.is_done());
}

/// Where export requests are written: one buffer, and what each signal's last request took
/// per record, so that the next is given its room before it is written. A request written into
/// a buffer that grows as it goes is copied at each growth (the whole request, each time), which
/// cost more than writing it.
#[derive(Debug, Default)]
struct Buffer {
    bytes: BytesMut,
    per_record: [usize; 2],
}

/// Room for what a batch's resource and scope take, beyond its records.
const BATCH_ROOM: usize = 4096;

impl Buffer {
    /// Makes room for `records` records of `signal` (a quarter more than the last request's
    /// took each); a buffer that already has it is left as it is. One that has not is
    /// replaced, not grown: growing it would copy the requests already written into it,
    /// which are sent or being sent.
    fn make_room(&mut self, signal: Signal, records: u64) {
        let per = self.per_record[signal as usize];
        let records = usize::try_from(records).unwrap_or(usize::MAX);
        let room = records
            .saturating_mul(per.saturating_add(per / 4))
            .saturating_add(BATCH_ROOM);
        if self.bytes.capacity() - self.bytes.len() < room {
            self.bytes = BytesMut::with_capacity(room);
        }
    }

    /// A request of `signal` took `len` bytes for `records` records.
    fn took(&mut self, signal: Signal, len: usize, records: u64) {
        let records = usize::try_from(records.max(1)).unwrap_or(usize::MAX);
        self.per_record[signal as usize] = len / records;
    }
}

/// One signal's export request, written and compressed (over gRPC, framed), and how many
/// records it holds.
struct Body {
    signal: Signal,
    bytes: Bytes,
    gzipped: bool,
    records: u64,
}

impl Body {
    /// The body of `records` records of `signal` written in `written` after `head` bytes kept
    /// for a gRPC frame's head (0 over HTTP): compressed when `gzip` asks, and framed.
    fn of(
        signal: Signal,
        records: u64,
        mut written: BytesMut,
        (head, gzip): (usize, bool),
    ) -> Self {
        let gzipped = match gzip {
            true => self::gzip(&written[head..], head),
            false => None,
        };
        let compressed = gzipped.is_some();
        let bytes = match gzipped {
            Some(mut gzipped) => {
                if head > 0 {
                    grpc::frame(&mut gzipped, true);
                }
                Bytes::from(gzipped)
            }
            None => {
                if head > 0 {
                    grpc::frame(&mut written, false);
                }
                written.freeze()
            }
        };
        Body {
            signal,
            bytes,
            gzipped: compressed,
            records,
        }
    }
}

impl Delivery {
    /// Writes `batch` as each signal's export request, through `buf` (kept for the next
    /// batch), and compresses it when configured; the batch's times are put on the wall clock
    /// with one reading.
    fn encode(&self, batch: &[Box<Trace>], buf: &mut Buffer, memo: &mut Memo) -> [Option<Body>; 2] {
        let wall = Wall::now();
        let prepared = memo.prepare(batch, &wall);
        // A gRPC frame's head is kept before the message and filled once it is written.
        let head = if self.grpc { grpc::HEAD } else { 0 };
        // `requests`: how many requests it holds (what its room is made by); `records`: how
        // many spans or usage events (what is counted).
        let mut write = |signal: Signal,
                         (requests, records): (u64, u64),
                         encode: &mut dyn FnMut(&mut Message)| {
            buf.make_room(signal, requests);
            let mut message = Message::reusing(std::mem::take(&mut buf.bytes));
            message.raw(&[0; grpc::HEAD][..head]);
            encode(&mut message);
            let written = message.split();
            buf.bytes = message.into_buffer();
            buf.took(signal, written.len() - head, requests);
            Body::of(signal, records, written, (head, self.gzip))
        };
        let traces = self.traces.as_ref().and_then(|_| {
            let spans: u64 = batch.iter().map(|t| spans::span_count(t)).sum();
            let sampled = batch.iter().filter(|t| spans::span_count(t) > 0).count() as u64;
            (spans > 0).then(|| {
                write(Signal::Traces, (sampled, spans), &mut |m| {
                    spans::traces(m, batch, (&self.resource, &mut *memo, &prepared), &wall)
                })
            })
        });
        let logs = self.logs.as_ref().and_then(|_| {
            let events = batch.iter().filter(|t| spans::logged(t)).count() as u64;
            (events > 0).then(|| {
                write(Signal::Logs, (events, events), &mut |m| {
                    spans::logs(m, batch, (&self.resource, &mut *memo, &prepared))
                })
            })
        });
        [traces, logs]
    }

    /// Sends each written export request.
    async fn export(&self, bodies: [Option<Body>; 2]) {
        for body in bodies.into_iter().flatten() {
            let uri = match body.signal {
                Signal::Traces => self.traces.as_ref(),
                Signal::Logs => self.logs.as_ref(),
            };
            if let Some(uri) = uri {
                self.deliver(uri, body).await;
            }
        }
    }

    /// Sends `body` to `uri`, trying again while the failure is one a retry may cure (after
    /// the wait a throttling collector asks for, when it names one); counts what was delivered
    /// or lost, the records a partial success rejects among the lost.
    async fn deliver(&self, uri: &Uri, body: Body) {
        let Body {
            signal,
            bytes,
            gzipped,
            records,
        } = body;
        let mut failure = String::new();
        for attempt in 0..TRIES {
            let (why, after) = match self.send(uri, bytes.clone(), gzipped).await {
                Answer::Delivered(partial) => return self.delivered(signal, records, partial),
                Answer::Fatal(why) => (why, None),
                Answer::Retry { why, after } => (why, Some(after)),
            };
            failure = why;
            let Some(after) = after else { break };
            if attempt + 1 == TRIES {
                break;
            }
            // At least the backoff: a `Retry-After` of 0, or a date already past, is no
            // reason to try again at once.
            let backoff = BACKOFF * 2u32.pow(attempt);
            let wait = after.map_or(backoff, |after| after.max(backoff));
            if wait > LONGEST_WAIT {
                failure = format!(
                    "{failure}; the collector asked for a wait of {wait:?}, longer than the {LONGEST_WAIT:?} a batch is held"
                );
                break;
            }
            tokio::time::sleep(wait).await;
        }
        emit::otel_dropped(signal.label(), records);
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(signal = signal.label(), error = %failure, records, "OTLP export failed; its records are dropped (logged once until export resumes)");
        }
    }

    /// The collector accepted an export of `records` records: all of them, or all but those
    /// its partial success rejects (lost, and not sent again, as OTLP's specification says).
    fn delivered(&self, signal: Signal, records: u64, partial: Option<Partial>) {
        let rejected = partial.as_ref().map_or(0, |p| p.rejected.min(records));
        emit::otel_exported(signal.label(), records - rejected);
        if rejected > 0 {
            emit::otel_dropped(signal.label(), rejected);
        }
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(signal = signal.label(), "OTLP export resumed");
        }
        match partial {
            Some(Partial { rejected, message }) => {
                if !self.partial.swap(true, Ordering::Relaxed) {
                    tracing::warn!(signal = signal.label(), rejected, message = %message, "the OTLP collector accepted an export in part; what it rejected is dropped (logged once until it accepts one whole)");
                }
            }
            None => self.partial.store(false, Ordering::Relaxed),
        }
    }

    async fn send(&self, uri: &Uri, body: Bytes, gzipped: bool) -> Answer {
        let content_type = match self.grpc {
            true => "application/grpc",
            false => "application/x-protobuf",
        };
        let mut request = match Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(CONTENT_TYPE, content_type)
            .body(Full::new(body))
        {
            Ok(request) => request,
            Err(e) => return Answer::Fatal(format!("cannot build the request: {e}")),
        };
        let headers = request.headers_mut();
        headers.insert(USER_AGENT, EXPORTER_AGENT.clone());
        match (self.grpc, gzipped) {
            (true, _) => {
                headers.insert(TE, HeaderValue::from_static("trailers"));
                headers.insert(GRPC_TIMEOUT, grpc::timeout(self.timeout));
                if gzipped {
                    headers.insert(GRPC_ENCODING, HeaderValue::from_static("gzip"));
                }
            }
            (false, true) => {
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            (false, false) => {}
        }
        for (name, value) in &self.headers {
            headers.insert(name, value.clone());
        }
        let transport = |e: &dyn std::fmt::Display| Answer::Retry {
            why: format!("transport: {e}"),
            after: None,
        };
        let exchange = async {
            let response = match self.client.request(request).await {
                Ok(response) => response,
                Err(e) => return transport(&e),
            };
            let (head, body) = response.into_parts();
            // Read whole (so the connection can be used again, and over gRPC for the status
            // in its trailers), up to a bound: a reply is a few bytes.
            let collected = match Limited::new(body, reply::MAX_REPLY).collect().await {
                Ok(collected) => collected,
                // More than a reply has to say (a proxy's error page): the status decides
                // alone, the body unread. Over gRPC, an answer with HTTP's 200 has its status
                // in the trailers after it, never read: not sent again, which could send the
                // records twice.
                Err(e) if e.is::<LengthLimitError>() => {
                    return match (self.grpc, head.status) {
                        (false, status) => reply::http(status, &head.headers, b""),
                        (true, StatusCode::OK) => {
                            Answer::Fatal(format!("a reply longer than {} bytes", reply::MAX_REPLY))
                        }
                        (true, status) => grpc::answer(status, &head.headers, None, b""),
                    };
                }
                Err(e) => return transport(&e),
            };
            let trailers = collected.trailers().cloned();
            let body = collected.to_bytes();
            match self.grpc {
                true => grpc::answer(head.status, &head.headers, trailers.as_ref(), &body),
                false => reply::http(head.status, &head.headers, &body),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Answer::Retry {
                why: "timed out".to_owned(),
                after: None,
            })
    }
}

/// `body` compressed, after `head` bytes kept for a frame's head.
fn gzip(body: &[u8], head: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(head + body.len() / 4);
    out.resize(head, 0);
    let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    encoder.write_all(body).ok()?;
    encoder.finish().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_the_message_gzipped_or_not_and_over_grpc_framed_with_its_flag_and_length() {
        use std::io::Read;
        let message = b"\x0a\x03abc-an-export-request".repeat(40);
        let gunzip = |bytes: &[u8]| {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(bytes)
                .read_to_end(&mut out)
                .unwrap();
            out
        };
        let written = |head: usize| {
            let mut buf = BytesMut::new();
            buf.extend_from_slice(&[0; grpc::HEAD][..head]);
            buf.extend_from_slice(&message);
            buf
        };
        // OTLP/HTTP: the message, or the message gzipped.
        let plain = Body::of(Signal::Traces, 3, written(0), (0, false));
        assert_eq!(
            (&plain.bytes[..], plain.gzipped, plain.records),
            (&message[..], false, 3)
        );
        let gzipped = Body::of(Signal::Logs, 3, written(0), (0, true));
        assert!(gzipped.gzipped && gzipped.bytes.len() < message.len());
        assert_eq!(gunzip(&gzipped.bytes), message);
        // OTLP/gRPC: a frame's head (the compressed flag, the big-endian length), then the
        // message as it would go over HTTP.
        for gzip in [false, true] {
            let body = Body::of(Signal::Traces, 3, written(grpc::HEAD), (grpc::HEAD, gzip));
            let (head, rest) = body.bytes.split_at(grpc::HEAD);
            assert_eq!(head[0], u8::from(gzip));
            assert_eq!(
                u32::from_be_bytes(head[1..].try_into().unwrap()) as usize,
                rest.len()
            );
            let sent = if gzip { gunzip(rest) } else { rest.to_vec() };
            assert_eq!(sent, message, "gzip {gzip}");
            assert_eq!(body.gzipped, gzip);
        }
    }

    #[test]
    fn a_buffer_is_given_each_signal_s_room_before_writing_and_replaced_when_short_of_it() {
        let mut buf = Buffer::default();
        // Nothing written yet: the batch's own room only.
        buf.make_room(Signal::Traces, 512);
        assert!(buf.bytes.capacity() >= BATCH_ROOM);
        // 512 records took 600 KiB: the next 512 are given that and a quarter more.
        buf.took(Signal::Traces, 600 * 1024, 512);
        buf.took(Signal::Logs, 100 * 1024, 512);
        buf.make_room(Signal::Traces, 512);
        let traces_room = 512 * (1200 + 300) + BATCH_ROOM;
        assert!(
            buf.bytes.capacity() >= traces_room,
            "{}",
            buf.bytes.capacity()
        );
        // A request written and sent (still in flight) keeps its bytes when the buffer is
        // short of room for the next one and replaced.
        buf.bytes.extend_from_slice(&vec![7u8; traces_room]);
        let sent = buf.bytes.split().freeze();
        buf.make_room(Signal::Traces, 512);
        assert!(buf.bytes.capacity() >= traces_room);
        assert!(buf.bytes.is_empty());
        assert!(sent.iter().all(|b| *b == 7) && sent.len() == traces_room);
        // One with the room is kept as it is: a small logs request fits what is left.
        buf.bytes.extend_from_slice(b"logs");
        let kept = buf.bytes.as_ptr();
        buf.make_room(Signal::Logs, 1);
        assert_eq!(buf.bytes.as_ptr(), kept);
        assert_eq!(&buf.bytes[..], b"logs");
    }
}
