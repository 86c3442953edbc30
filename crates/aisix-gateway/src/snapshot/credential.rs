//! A credential refreshed off the request path: a cell every worker reads without locking,
//! filled and renewed by one task on the control runtime ([`run`]) before it expires. What a
//! credential is and how it is fetched is its [`Source`]'s (a Google service account's token in
//! [`super::google`]; an AWS web identity's keys in [`super::web_identity`]); this module owns when to
//! fetch, the cell, the failure policy, and carrying a cell over a reload.
//!
//! - **Start.** A cell starts empty. The control task fetches every empty cell on its first
//!   tick; a request that finds its cell still empty makes that one first fetch itself (one
//!   worker at a time, the others wait for it), the only fetch ever made on a request path.
//! - **Refresh.** At two thirds of the credential's life the control task fetches a new one;
//!   requests go on with the old one meanwhile, so none waits on the token endpoint.
//! - **Failure.** A failed fetch keeps the old credential and counts
//!   `aisix_credential_refresh_failures_total{provider}`; the control task tries again after
//!   1 s, doubling to at most 60 s. Once the old credential has expired (or none was ever
//!   fetched), requests are answered 502 at once, without a fetch, until a fetch succeeds.
//! - **Reload.** A reload that keeps a provider key with the same credential settings keeps its
//!   cell, live credential and all ([`Credentials::carry_over`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use http::HeaderValue;
use tokio::time::Instant;

use super::cache::Loaded;
use crate::error::{ErrorKind, GatewayError};
use crate::upstream::egress::Egress;
use crate::upstream::pool::Pool;
use crate::upstream::sigv4::Signer;

/// A fetch's future: on the control runtime (`Send`), or on the worker that makes the first.
pub(crate) type Fetching<'a, T> =
    Pin<Box<dyn Future<Output = Result<Fresh<T>, String>> + Send + 'a>>;

/// Where a credential comes from. `fetch` sends through `pool` (the control task's, or the
/// worker's for a first fetch); its error is logged, so it must hold no secret.
pub(crate) trait Source<T>: Send + Sync {
    fn fetch<'a>(&'a self, pool: &'a Pool) -> Fetching<'a, T>;
}

/// A credential as fetched, with how long it is good for.
pub(crate) struct Fresh<T> {
    pub value: T,
    pub lifetime: Duration,
}

struct Held<T> {
    value: T,
    expires: Instant,
    /// Two thirds into its life: when the control task fetches the next one.
    renew: Instant,
}

/// One provider key's credential.
// shared: one credential per provider key, read by every worker and renewed by the control task.
pub(crate) struct Refreshed<T> {
    /// The provider key's display name (logs and the failure metric).
    name: Arc<str>,
    current: ArcSwapOption<Held<T>>,
    source: Box<dyn Source<T>>,
    /// Serialises the first fetch, the only one a worker makes.
    first: tokio::sync::Mutex<()>,
    /// A fetch has been tried: from then on only the control task fetches.
    tried: AtomicBool,
}

impl<T> std::fmt::Debug for Refreshed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshed")
            .field("name", &self.name)
            .field("held", &self.current.load().is_some())
            .finish()
    }
}

impl<T: Clone + Send + Sync + 'static> Refreshed<T> {
    pub(crate) fn new(name: &str, source: Box<dyn Source<T>>) -> Self {
        Self {
            name: name.into(),
            current: ArcSwapOption::empty(),
            source,
            first: tokio::sync::Mutex::new(()),
            tried: AtomicBool::new(false),
        }
    }

    /// The credential for a request: the one held while it is good (one atomic load and a
    /// clock read); the first fetch when none was ever tried; else a 502 saying why.
    pub(crate) async fn get(&self, pool: &Pool) -> Result<T, GatewayError> {
        if let Some(value) = self.good(Instant::now()) {
            return Ok(value);
        }
        if self.current.load().is_none() {
            // Never fetched: wait for a first fetch in flight, or make it if none was tried.
            let _first = self.first.lock().await;
            if !self.tried.load(Ordering::Acquire) {
                self.fetch(pool).await;
            }
            if let Some(value) = self.good(Instant::now()) {
                return Ok(value);
            }
        }
        Err(self.unavailable())
    }

    /// The credential held now, expired or not (what an upstream may still echo).
    pub(crate) fn peek(&self) -> Option<T> {
        self.current.load().as_ref().map(|held| held.value.clone())
    }

    /// A cell already holding `value`, good for `lifetime`, with nowhere to fetch another.
    #[cfg(test)]
    pub(crate) fn holding(name: &str, value: T, lifetime: Duration) -> Self {
        struct Nowhere;
        impl<T> Source<T> for Nowhere {
            fn fetch<'a>(&'a self, _pool: &'a Pool) -> Fetching<'a, T> {
                Box::pin(async { Err("no source in this test".to_owned()) })
            }
        }
        let cell = Self::new(name, Box::new(Nowhere));
        let now = Instant::now();
        cell.current.store(Some(Arc::new(Held {
            value,
            expires: now + lifetime,
            renew: now + lifetime * 2 / 3,
        })));
        cell.tried.store(true, Ordering::Release);
        cell
    }

    fn good(&self, now: Instant) -> Option<T> {
        let held = self.current.load();
        held.as_ref()
            .filter(|held| now < held.expires)
            .map(|held| held.value.clone())
    }

    fn unavailable(&self) -> GatewayError {
        let expired = self.current.load().is_some();
        GatewayError::new(
            ErrorKind::UpstreamUnavailable,
            format!(
                "The gateway has no valid credential for provider key '{}': {} (see the gateway's log).",
                self.name,
                if expired {
                    "it expired and could not be refreshed"
                } else {
                    "it could not be fetched"
                }
            ),
        )
    }

    /// Fetches a new credential and holds it; a failure keeps the old one and is counted.
    async fn fetch(&self, pool: &Pool) -> bool {
        self.tried.store(true, Ordering::Release);
        let started = Instant::now();
        match self.source.fetch(pool).await {
            Ok(fresh) => {
                let renew = started + fresh.lifetime.mul_f64(2.0 / 3.0);
                self.current.store(Some(Arc::new(Held {
                    value: fresh.value,
                    expires: started + fresh.lifetime,
                    renew,
                })));
                tracing::debug!(provider = %self.name, lifetime = ?fresh.lifetime, "credential refreshed");
                true
            }
            Err(error) => {
                tracing::warn!(provider = %self.name, %error, "credential refresh failed; the current one (if any) is kept until it expires");
                aisix_obs::metrics::emit::credential_refresh_failed(&self.name);
                false
            }
        }
    }
}

/// A cell the control task renews, whatever its credential's type.
pub(crate) trait Refresh: Send + Sync {
    fn name(&self) -> &Arc<str>;
    /// None held yet, or the held one is two thirds into its life.
    fn due(&self, now: Instant) -> bool;
    /// Fetches a new one; whether it succeeded.
    fn refresh<'a>(&'a self, pool: &'a Pool) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

impl<T: Clone + Send + Sync + 'static> Refresh for Refreshed<T> {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn due(&self, now: Instant) -> bool {
        self.current
            .load()
            .as_ref()
            .is_none_or(|held| now >= held.renew)
    }

    fn refresh<'a>(&'a self, pool: &'a Pool) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            if self.current.load().is_none() {
                // A worker's first fetch may be in flight: never two at once.
                let _first = self.first.lock().await;
                if self.current.load().is_some() {
                    return true;
                }
                return self.fetch(pool).await;
            }
            self.fetch(pool).await
        })
    }
}

/// A provider key's header credential (`Authorization: Bearer …`) with the settings it was
/// built from, which a reload compares.
#[derive(Clone)]
pub(crate) struct Entry {
    settings: aisix_config::VertexKey,
    pub(crate) cell: Arc<Refreshed<HeaderValue>>,
}

/// A `bedrock` key's web-identity keys, as a signer, with the settings they were fetched
/// with, which a reload compares.
#[derive(Clone)]
pub(crate) struct AwsEntry {
    settings: super::web_identity::WebIdentity,
    pub(crate) cell: Arc<Refreshed<Arc<Signer>>>,
}

/// Every refreshed credential of the loaded resources, by provider key name.
#[derive(Default, Clone)]
pub(crate) struct Credentials {
    by_key: HashMap<String, Entry>,
    aws_by_key: HashMap<String, AwsEntry>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.by_key.keys().chain(self.aws_by_key.keys()))
            .finish()
    }
}

impl Credentials {
    /// The cells of `resources`' keys that need one: `previous`'s where the key's settings did
    /// not change (its live credential kept), new and empty otherwise. A `bedrock` key gets
    /// one when it has no keys of its own, the environment no `AWS_ACCESS_KEY_ID`, and a web
    /// identity ([`super::web_identity::WebIdentity::from_env`]).
    pub(crate) fn carry_over(
        previous: Option<&Credentials>,
        resources: &aisix_config::Resources,
        egress: &Egress,
    ) -> Self {
        let mut by_key = HashMap::new();
        let mut aws_by_key = HashMap::new();
        for key in &resources.provider_keys {
            if key.provider == aisix_config::ProviderKind::Bedrock
                && key.aws.is_none()
                && std::env::var_os("AWS_ACCESS_KEY_ID").is_none_or(|v| v.is_empty())
                && let Some(identity) = super::web_identity::WebIdentity::from_env(
                    key.region.as_deref().unwrap_or_default(),
                )
            {
                let kept = previous
                    .and_then(|p| p.aws_by_key.get(&key.display_name))
                    .filter(|entry| entry.settings == identity)
                    .cloned();
                let entry = kept.unwrap_or_else(|| AwsEntry {
                    cell: Arc::new(Refreshed::new(
                        &key.display_name,
                        Box::new(super::web_identity::AssumedRole::new(&identity, egress)),
                    )),
                    settings: identity,
                });
                aws_by_key.insert(key.display_name.clone(), entry);
                continue;
            }
            let Some(vertex) = &key.vertex else {
                continue;
            };
            let kept = previous
                .and_then(|p| p.by_key.get(&key.display_name))
                .filter(|entry| entry.settings == *vertex)
                .cloned();
            let entry = kept.unwrap_or_else(|| Entry {
                settings: vertex.clone(),
                cell: Arc::new(Refreshed::new(
                    &key.display_name,
                    Box::new(super::google::ServiceAccountToken::new(
                        &vertex.service_account,
                        egress,
                    )),
                )),
            });
            by_key.insert(key.display_name.clone(), entry);
        }
        Self { by_key, aws_by_key }
    }

    /// The header credential of the provider key named `name`, if it has one.
    pub(crate) fn header(&self, name: &str) -> Option<Arc<Refreshed<HeaderValue>>> {
        self.by_key.get(name).map(|entry| entry.cell.clone())
    }

    /// The web-identity signer of the `bedrock` key named `name`, if it has one.
    pub(crate) fn signer(&self, name: &str) -> Option<Arc<Refreshed<Arc<Signer>>>> {
        self.aws_by_key.get(name).map(|entry| entry.cell.clone())
    }

    fn cells(&self) -> impl Iterator<Item = Arc<dyn Refresh>> + '_ {
        self.by_key
            .values()
            .map(|entry| entry.cell.clone() as Arc<dyn Refresh>)
            .chain(
                self.aws_by_key
                    .values()
                    .map(|entry| entry.cell.clone() as Arc<dyn Refresh>),
            )
    }
}

/// How often the control task looks for credentials to renew.
const TICK: Duration = Duration::from_millis(200);
/// The first retry after a failed fetch; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Renews the credentials of whatever resources are loaded, for as long as the process lives.
/// `loaded` gives the resources in force; spawn it on the control runtime, with a pool of its
/// own.
pub(crate) async fn run(loaded: impl Fn() -> Arc<Loaded>, pool: Pool) {
    // After a failure: when to try again, and the pause after that.
    let mut backoff: HashMap<Arc<str>, (Instant, Duration)> = HashMap::new();
    loop {
        let current = loaded();
        let now = Instant::now();
        for cell in current.credentials.cells() {
            if !cell.due(now) {
                continue;
            }
            if let Some((next, _)) = backoff.get(cell.name())
                && *next > now
            {
                continue;
            }
            if cell.refresh(&pool).await {
                backoff.remove(cell.name());
            } else {
                let pause = backoff
                    .get(cell.name())
                    .map_or(FIRST_BACKOFF, |(_, pause)| (*pause * 2).min(MAX_BACKOFF));
                backoff.insert(cell.name().clone(), (Instant::now() + pause, pause));
            }
        }
        tokio::time::sleep(TICK).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use aisix_config::UpstreamConfig;

    use super::*;
    use crate::upstream::tls::tls_client_config;

    /// Hands out `token-1`, `token-2`, … living `lifetime`, or fails while `failing`.
    struct Scripted {
        fetched: Arc<AtomicU32>,
        failing: Arc<AtomicBool>,
        lifetime: Duration,
    }

    impl Source<HeaderValue> for Scripted {
        fn fetch<'a>(&'a self, _pool: &'a Pool) -> Fetching<'a, HeaderValue> {
            Box::pin(async move {
                if self.failing.load(Ordering::SeqCst) {
                    return Err("the token endpoint is down".to_owned());
                }
                let n = self.fetched.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(Fresh {
                    value: HeaderValue::try_from(format!("token-{n}")).unwrap(),
                    lifetime: self.lifetime,
                })
            })
        }
    }

    fn cell(lifetime: Duration) -> (Refreshed<HeaderValue>, Arc<AtomicU32>, Arc<AtomicBool>) {
        let fetched = Arc::new(AtomicU32::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let source = Scripted {
            fetched: fetched.clone(),
            failing: failing.clone(),
            lifetime,
        };
        (Refreshed::new("vtx", Box::new(source)), fetched, failing)
    }

    fn pool() -> Pool {
        Pool::new(&UpstreamConfig::default(), tls_client_config().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_makes_the_first_fetch_and_then_reads_the_held_credential() {
        let (cell, fetched, _) = cell(Duration::from_secs(60));
        let pool = pool();
        assert_eq!(cell.get(&pool).await.unwrap(), "token-1");
        assert_eq!(cell.get(&pool).await.unwrap(), "token-1");
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        assert!(!cell.due(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_control_side_renews_at_two_thirds_of_the_life_and_requests_never_fetch() {
        let (cell, fetched, _) = cell(Duration::from_secs(60));
        let pool = pool();
        assert!(cell.due(Instant::now()), "an empty cell is due");
        assert!(cell.refresh(&pool).await);
        tokio::time::advance(Duration::from_secs(39)).await;
        assert!(!cell.due(Instant::now()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(cell.due(Instant::now()));
        // Due, yet a request still reads the held one without fetching.
        assert_eq!(cell.get(&pool).await.unwrap(), "token-1");
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        assert!(cell.refresh(&pool).await);
        assert_eq!(cell.get(&pool).await.unwrap(), "token-2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_keeps_the_old_credential_until_it_expires_then_refuses_without_fetching()
     {
        let (cell, fetched, failing) = cell(Duration::from_secs(30));
        let pool = pool();
        assert!(cell.refresh(&pool).await);
        failing.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(!cell.refresh(&pool).await);
        assert_eq!(cell.get(&pool).await.unwrap(), "token-1");
        tokio::time::advance(Duration::from_secs(10)).await;
        let error = cell.get(&pool).await.unwrap_err();
        assert_eq!(error.status(), http::StatusCode::BAD_GATEWAY);
        assert!(
            error
                .message
                .contains("'vtx': it expired and could not be refreshed"),
            "{}",
            error.message
        );
        failing.store(false, Ordering::SeqCst);
        assert!(
            cell.get(&pool).await.is_err(),
            "a request never fetches again"
        );
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        assert!(cell.refresh(&pool).await);
        assert_eq!(cell.get(&pool).await.unwrap(), "token-2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_first_fetch_is_made_once_and_later_requests_are_refused_at_once() {
        let (cell, _, failing) = cell(Duration::from_secs(30));
        failing.store(true, Ordering::SeqCst);
        let pool = pool();
        let error = cell.get(&pool).await.unwrap_err();
        assert!(
            error.message.contains("it could not be fetched"),
            "{}",
            error.message
        );
        failing.store(false, Ordering::SeqCst);
        assert!(cell.get(&pool).await.is_err());
        assert!(cell.due(Instant::now()));
        assert!(cell.refresh(&pool).await);
        assert_eq!(cell.get(&pool).await.unwrap(), "token-1");
    }

    fn resources(key_file: &std::path::Path, location: &str) -> aisix_config::Resources {
        crate::snapshot::tests::parse(&format!(
            "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: vtx, provider: vertex, project: p, location: {location}, credentials_file: {}}}\n",
            key_file.display()
        ))
    }

    #[test]
    fn a_reload_with_the_same_settings_keeps_the_live_cell_and_a_changed_one_gets_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = crate::snapshot::tests::service_account_file(dir.path());
        let egress = Egress::direct();
        let first = Credentials::carry_over(None, &resources(&file, "global"), &egress);
        let same = Credentials::carry_over(Some(&first), &resources(&file, "global"), &egress);
        let moved = Credentials::carry_over(Some(&same), &resources(&file, "us-east5"), &egress);
        let cell = |c: &Credentials| c.header("vtx").unwrap();
        assert!(Arc::ptr_eq(&cell(&first), &cell(&same)));
        assert!(!Arc::ptr_eq(&cell(&same), &cell(&moved)));
        assert!(
            Credentials::carry_over(Some(&moved), &aisix_config::Resources::default(), &egress)
                .header("vtx")
                .is_none()
        );
    }
}
