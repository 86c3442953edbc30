//! The watch loop on the control runtime: connect, load everything under the prefix, then
//! watch from the next revision; a lost connection reconnects with backoff and resumes from the
//! revision applied; a compacted revision starts over with a full load. Each new snapshot is
//! published to the workers as a reload is, and readiness turns true with the first.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aisix_bootstrap::Readiness;
use aisix_config::{EtcdConfig, Resources};
use aisix_gateway::GatewayFactory;
use aisix_obs::metrics::Metrics;
use aisix_obs::metrics::labels::ReloadResult;
use etcd_client::{Client, EventType, GetOptions, WatchOptions};

use super::snapshot::{Change, Documents, Outcome};

/// Reconnect delays: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(5);

/// Everything the watch touches.
pub(crate) struct EtcdSource {
    pub config: EtcdConfig,
    pub factory: Arc<GatewayFactory>,
    pub metrics: Option<Metrics>,
    pub readiness: Readiness,
}

/// Why a watch ended.
enum Ended {
    /// The connection failed: resume from the revision applied.
    Lost(String),
    /// etcd no longer has the revision to resume from: load everything again.
    Compacted(i64),
}

impl EtcdSource {
    /// Runs for as long as the process lives.
    pub(crate) async fn run(self) {
        let mut documents = Documents::new(&self.config.prefix);
        let mut current = Resources::default();
        // The revision applied; 0 until the first full load.
        let mut revision = 0i64;
        let mut backoff = BACKOFF_FIRST;
        loop {
            self.watch_up(false);
            let ended = match super::connect::connect(&self.config).await {
                Ok(mut client) => {
                    if revision == 0 {
                        match self
                            .load_all(&mut client, &mut documents, &mut current)
                            .await
                        {
                            Ok(at) => revision = at,
                            Err(error) => {
                                self.retry_later(&error, &mut backoff).await;
                                continue;
                            }
                        }
                    }
                    self.watch(
                        &mut client,
                        &mut documents,
                        &mut current,
                        &mut revision,
                        &mut backoff,
                    )
                    .await
                }
                Err(error) => Ended::Lost(error),
            };
            match ended {
                Ended::Lost(error) => self.retry_later(&error, &mut backoff).await,
                Ended::Compacted(compacted) => {
                    tracing::warn!(
                        revision,
                        compacted,
                        "etcd compacted past the watch's revision; loading every resource again"
                    );
                    revision = 0;
                }
            }
        }
    }

    async fn retry_later(&self, error: &str, backoff: &mut Duration) {
        tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "etcd resources watch: connection lost; serving the last snapshot");
        tokio::time::sleep(*backoff).await;
        *backoff = (*backoff * 2).min(BACKOFF_LAST);
    }

    /// Loads every document under the prefix; returns the revision read.
    async fn load_all(
        &self,
        client: &mut Client,
        documents: &mut Documents,
        current: &mut Resources,
    ) -> Result<i64, String> {
        let prefix = format!("{}/", self.config.prefix);
        let response = tokio::time::timeout(
            self.config.dial_timeout,
            client.get(prefix, Some(GetOptions::new().with_prefix())),
        )
        .await
        .map_err(|_| "timed out reading from etcd".to_owned())?
        .map_err(|e| format!("cannot read from etcd: {e}"))?;
        let revision = response.header().map_or(0, |h| h.revision());
        let all: BTreeMap<String, Vec<u8>> = response
            .kvs()
            .iter()
            .filter_map(|kv| Some((kv.key_str().ok()?.to_owned(), kv.value().to_vec())))
            .collect();
        let outcome = documents.replace_all(all, &env);
        self.publish(outcome, current, revision, "full load");
        self.readiness.set_ready();
        Ok(revision)
    }

    async fn watch(
        &self,
        client: &mut Client,
        documents: &mut Documents,
        current: &mut Resources,
        revision: &mut i64,
        backoff: &mut Duration,
    ) -> Ended {
        let prefix = format!("{}/", self.config.prefix);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(*revision + 1)
            .with_progress_notify();
        let mut stream = match client.watch(prefix, Some(options)).await {
            Ok(stream) => stream,
            Err(e) => return Ended::Lost(format!("cannot watch: {e}")),
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ended::Lost("the watch stream ended".to_owned()),
                Err(e) => return Ended::Lost(format!("watch failed: {e}")),
            };
            if response.compact_revision() > 0 {
                return Ended::Compacted(response.compact_revision());
            }
            if response.canceled() {
                return Ended::Lost(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason()
                ));
            }
            if response.created() {
                tracing::info!(
                    from_revision = *revision + 1,
                    "etcd resources watch: watching"
                );
                self.watch_up(true);
                *backoff = BACKOFF_FIRST;
            }
            // One response holds the events of whole revisions: apply them as one change.
            let mut changes: BTreeMap<String, Change> = BTreeMap::new();
            let mut at = *revision;
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let Ok(key) = kv.key_str() else { continue };
                at = at.max(kv.mod_revision());
                let change = match event.event_type() {
                    EventType::Put => Some(kv.value().to_vec()),
                    EventType::Delete => None,
                };
                changes.insert(key.to_owned(), change);
            }
            if changes.is_empty() {
                // A progress notice: every event up to its revision has been delivered.
                if !response.created()
                    && let Some(header) = response.header()
                    && header.revision() > *revision
                {
                    *revision = header.revision();
                    if let Some(metrics) = &self.metrics {
                        metrics.etcd_revision_applied(*revision);
                    }
                }
                continue;
            }
            let outcome = documents.apply(changes, &env);
            *revision = at;
            self.publish(outcome, current, at, "watch");
        }
    }

    /// Logs what was refused, and hands a new snapshot to every worker.
    fn publish(&self, outcome: Outcome, current: &mut Resources, revision: i64, how: &str) {
        for error in &outcome.refused {
            tracing::error!(how, revision, key = %origin_key(error), path = %error.path, %error, "etcd: document refused; the last good version keeps serving");
        }
        if let Some(metrics) = &self.metrics {
            if !outcome.refused.is_empty() {
                metrics.config_reload(ReloadResult::Failure);
                let keys: std::collections::BTreeSet<String> =
                    outcome.refused.iter().map(origin_key).collect();
                metrics.etcd_documents_refused(keys.len() as u64);
            }
            metrics.etcd_revision_applied(revision);
        }
        let Some(resources) = outcome.resources else {
            return;
        };
        let diff = current.diff(&resources);
        tracing::info!(
            how,
            revision,
            provider_keys = %diff.provider_keys,
            models = %diff.models,
            api_keys = %diff.api_keys,
            "etcd {how}: resources applied"
        );
        *current = resources.clone();
        self.factory.reload(resources);
        if let Some(metrics) = &self.metrics {
            metrics.config_reload(ReloadResult::Success);
            metrics.config_loaded(&format!("etcd-{revision}"), SystemTime::now());
        }
    }

    fn watch_up(&self, up: bool) {
        if let Some(metrics) = &self.metrics {
            metrics.etcd_watch_up(up);
        }
    }
}

fn origin_key(error: &aisix_config::ConfigError) -> String {
    match &error.origin {
        aisix_config::Origin::Etcd(key) => key.clone(),
        _ => String::new(),
    }
}

/// `${VAR}` in documents reads the process environment, as the file does.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
