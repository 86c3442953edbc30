//! The Responses state in the Redis the limiter uses (`ratelimit.backend: redis`), so that every
//! replica reads what any of them stored: one key per stored response or pin, with the store's
//! TTL. Writes go through a bounded queue to one background thread, never awaited by a request;
//! reads and deletes are one Redis call each, bounded by `ratelimit.redis.timeout_ms`, made only
//! by requests that name a response (`previous_response_id`, `GET`/`DELETE /v1/responses/{id}`).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use aisix_config::RedisConfig;
use arc_swap::ArcSwapOption;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Notify, mpsc};

use crate::limit::Warnings;

/// Writes waiting for the background thread, at most; beyond that a write is dropped (warned).
const WRITE_QUEUE: usize = 4096;
/// How often the background thread tries to reconnect while Redis is away.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(500);

/// One write: the value under `key` for `ttl`.
#[derive(Debug)]
struct Write {
    key: String,
    value: Vec<u8>,
    ttl: Duration,
}

/// The connection every worker reads, and the background thread that writes and reconnects.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Arc<State>,
    writes: mpsc::Sender<Write>,
    _thread: JoinHandle<()>,
}

// shared: every worker reads through the connection; the background thread replaces it.
#[derive(Debug)]
struct State {
    client: redis::Client,
    url: String,
    conn: ArcSwapOption<MultiplexedConnection>,
    /// Wakes the background thread when a request dropped the connection.
    dropped: Notify,
    timeout: Duration,
    /// The limiter's rate limit on warnings: one every ten seconds, with a count of the rest.
    warnings: Warnings,
}

impl Shared {
    /// Starts the background thread, which connects at once; requests do not wait for it.
    pub(crate) fn start(config: &RedisConfig) -> std::io::Result<Shared> {
        let client = redis::Client::open(config.url.expose()).map_err(std::io::Error::other)?;
        let state = Arc::new(State {
            client,
            url: config.url.redacted().to_owned(),
            conn: ArcSwapOption::empty(),
            dropped: Notify::new(),
            timeout: config.timeout,
            warnings: Warnings::default(),
        });
        let (writes, queue) = mpsc::channel(WRITE_QUEUE);
        let thread = std::thread::Builder::new()
            .name("aisix-responses".to_owned())
            .spawn({
                let state = state.clone();
                move || state.run(queue)
            })?;
        Ok(Shared {
            state,
            writes,
            _thread: thread,
        })
    }

    /// Queues `value` under `key` for `ttl`; never waits.
    pub(crate) fn put(&self, key: String, value: Vec<u8>, ttl: Duration) {
        if self.writes.try_send(Write { key, value, ttl }).is_err() {
            self.state.warn("write queue full, a response was not kept");
        }
    }

    /// The value under `key`; `None` when there is none or Redis did not answer in time.
    pub(crate) async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut command = redis::cmd("GET");
        command.arg(key);
        self.state.call::<Option<Vec<u8>>>(command).await.flatten()
    }

    /// Deletes `key`; whether it was there.
    pub(crate) async fn delete(&self, key: &str) -> bool {
        let mut command = redis::cmd("DEL");
        command.arg(key);
        self.state.call::<i64>(command).await.unwrap_or(0) > 0
    }
}

impl State {
    /// Logs `what` unless a warning went out less than ten seconds ago (then counts it).
    fn warn(&self, what: &str) {
        self.warnings.warn(|suppressed| {
            tracing::warn!(redis = %self.url, suppressed, "Responses store in Redis: {what}");
        });
    }

    /// One command within the timeout; `None` (the connection dropped, warned) if it failed.
    async fn call<T: redis::FromRedisValue>(&self, command: redis::Cmd) -> Option<T> {
        let Some(conn) = self.conn.load_full() else {
            self.warn("not connected");
            return None;
        };
        let mut connection = (*conn).clone();
        match tokio::time::timeout(self.timeout, command.query_async::<T>(&mut connection)).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(error)) => {
                self.warn(&format!("call failed: {error}"));
                self.drop_connection(&conn);
                None
            }
            Err(_) => {
                self.warn("call timed out");
                self.drop_connection(&conn);
                None
            }
        }
    }

    fn drop_connection(&self, conn: &Arc<MultiplexedConnection>) {
        let _ = self
            .conn
            .compare_and_swap(conn, None::<Arc<MultiplexedConnection>>);
        self.dropped.notify_one();
    }

    /// The background thread: connects (again, when dropped), and sends the queued writes.
    fn run(self: Arc<Self>, mut queue: mpsc::Receiver<Write>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "Responses store: cannot start its Redis thread");
                return;
            }
        };
        runtime.block_on(async move {
            let mut reconnect = tokio::time::interval(RECONNECT_INTERVAL);
            loop {
                tokio::select! {
                    write = queue.recv() => match write {
                        Some(write) => self.write(write).await,
                        None => return,
                    },
                    _ = reconnect.tick() => {
                        if self.conn.load().is_none() {
                            self.connect().await;
                        }
                    }
                    () = self.dropped.notified() => self.connect().await,
                }
            }
        });
    }

    async fn connect(&self) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.timeout * 3, connecting).await {
            Ok(Ok(conn)) => {
                self.conn.store(Some(Arc::new(conn)));
                tracing::info!(redis = %self.url, "Responses store connected to Redis");
            }
            Ok(Err(error)) => self.warn(&format!("cannot connect: {error}")),
            Err(_) => self.warn("timed out connecting"),
        }
    }

    async fn write(&self, write: Write) {
        if self.conn.load().is_none() {
            self.connect().await;
        }
        let ttl = u64::try_from(write.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut command = redis::cmd("SET");
        command.arg(&write.key).arg(write.value).arg("PX").arg(ttl);
        let _: Option<()> = self.call(command).await;
    }
}
