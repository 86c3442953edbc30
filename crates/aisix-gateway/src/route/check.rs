//! Active health checks (`provider_keys[].health_check`): the provider's model list asked for
//! every `interval`, by one task on the control runtime, never on a worker. Each outcome feeds
//! the target state of every direct model on that key, as a call's would: a failed check is a
//! failed call (enough of them cool the models down; a refused key cools them at once), and a
//! good one ends their cooldown by taking the probe's place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::factory::Common;
use crate::snapshot::{Loaded, Named, Provider, Snapshot};
use crate::target::state::{Admission, Excuse, TargetState, Verdict};
use crate::upstream::pool::Pool;
use aisix_config::ProviderKind;

type Body = http_body_util::Full<bytes::Bytes>;

/// How often the task looks for checks that are due.
const TICK: Duration = Duration::from_millis(100);
/// How often it looks for a reload that adds a check, while none is configured.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// One provider key's check: its provider entry and the models on it.
struct Checked {
    provider: Arc<Provider>,
    targets: Vec<Arc<TargetState>>,
}

/// Runs every configured check until the process ends. Spawn it on the control runtime.
pub(crate) async fn run(common: Arc<Common>) {
    let pool = Pool::new(&common.settings.upstream, common.tls.clone());
    let mut source: Option<Arc<Loaded>> = None;
    let mut checked: Vec<Checked> = Vec::new();
    let mut due: HashMap<Arc<str>, Instant> = HashMap::new();
    loop {
        // Without any check configured, only reloads are looked for, once a second.
        tokio::time::sleep(if checked.is_empty() { IDLE_TICK } else { TICK }).await;
        let loaded = common.loaded.load_full();
        if !source.as_ref().is_some_and(|s| Arc::ptr_eq(s, &loaded)) {
            checked = checks_of(&loaded, &common);
            source = Some(loaded);
        }
        let now = Instant::now();
        for check in &checked {
            let Some((settings, _)) = &check.provider.health_check else {
                continue;
            };
            let next = due.entry(check.provider.name.clone()).or_insert(now);
            if *next > now {
                continue;
            }
            *next = now + settings.interval;
            let verdict = probe(&pool, &check.provider).await;
            for target in &check.targets {
                feed(target, verdict, source.as_deref());
            }
        }
    }
}

/// The provider keys that have a check, each with the state of every direct model on it.
fn checks_of(loaded: &Loaded, common: &Common) -> Vec<Checked> {
    let snapshot = Snapshot::build(loaded, &common.egress, &common.limiter);
    let mut by_key: Vec<Checked> = Vec::new();
    for named in snapshot.models() {
        let Named::Direct(direct) = named else {
            continue;
        };
        if direct.provider.health_check.is_none() {
            continue;
        }
        match by_key
            .iter_mut()
            .find(|c| c.provider.name == direct.provider.name)
        {
            Some(check) => check.targets.push(direct.state.clone()),
            None => by_key.push(Checked {
                provider: direct.provider.clone(),
                targets: vec![direct.state.clone()],
            }),
        }
    }
    by_key
}

/// Asks `provider` for its model list: answered 2xx, refused the key (401, 403), or failed
/// (any other status, a transport error, the timeout).
async fn probe(pool: &Pool, provider: &Provider) -> Verdict {
    let Some((settings, uri)) = &provider.health_check else {
        return Verdict::Silent;
    };
    let mut request = Request::new(Body::default());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri.clone();
    *request.headers_mut() = provider.headers().clone();
    if provider.kind == ProviderKind::Anthropic {
        request
            .headers_mut()
            .insert("anthropic-version", provider.anthropic_version.clone());
    }
    let call = async {
        let (response, _lease) = pool
            .send(request, &provider.route, settings.timeout)
            .await
            .ok()?;
        let status = response.status();
        // Read to the end, so the connection goes back to the pool.
        let _ = response.into_body().collect().await;
        Some(status)
    };
    let verdict = match tokio::time::timeout(settings.timeout, call).await {
        Ok(Some(status)) if status.is_success() => Verdict::Answered,
        Ok(Some(StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)) => Verdict::KeyRefused,
        _ => Verdict::Failed { retry_after: None },
    };
    if verdict != Verdict::Answered {
        tracing::warn!(provider = %provider.name, ?verdict, "health check failed");
    }
    verdict
}

/// Reports one check's `verdict` to `target`. A good check of a cooling target takes the
/// probe's place and ends the cooldown; one of an open target says nothing new.
fn feed(target: &Arc<TargetState>, verdict: Verdict, loaded: Option<&Loaded>) {
    let Some(clock) = loaded.map(|l| l.states.clock) else {
        return;
    };
    let now = clock.now_ms();
    let probe = match (verdict, target.admit(now)) {
        (Verdict::Answered, Admission::Probe(stamp)) => stamp,
        (Verdict::Answered, _) => return,
        // A failing model that is cooling already: nothing to add.
        (_, Admission::Cooling(_)) => return,
        (_, Admission::Probe(stamp)) => stamp,
        (_, Admission::Open) => 0,
    };
    target
        .ticket(clock, now, probe, false, Excuse::default())
        .settle(verdict);
}
