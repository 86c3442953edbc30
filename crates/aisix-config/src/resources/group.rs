//! Model groups: `models[]` entries with a `routing` block, answered by one of several direct
//! models (their targets). Reading a group's fields and checking its targets against the direct
//! models live here; retries, fallback and cooldown are the gateway's job.

use std::collections::HashMap;

use serde_yaml::Value;

use super::limits::RateLimit;
use super::load::given;
use super::reader::{Fields, Report, bool, index_path, integer, list, non_empty_string, string};
use crate::timeouts::TimeoutOverrides;

/// The most same-target retries a group may ask for.
pub const MAX_RETRIES: i64 = 10;
/// The most fallbacks a group may ask for (more than any group has targets).
pub const MAX_FALLBACKS: i64 = 1000;
/// The largest `weight` of a target (weights are relative; this keeps the round-robin
/// schedule, one slot per unit of weight, small).
pub const MAX_WEIGHT: i64 = 1000;

/// `models[]` with `routing`: a name clients send, answered by one of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelGroup {
    pub display_name: String,
    /// The group's own deadlines (ms at entry level, as on direct models); for a request to the
    /// group they win over each target's.
    pub timeouts: TimeoutOverrides,
    /// `rate_limit`: limits on every request to the group, whatever the key.
    pub rate_limit: RateLimit,
    pub routing: Routing,
    /// `disabled`: loaded, but answered as an unknown model.
    pub disabled: bool,
}

/// `routing`: how a group picks, retries and falls back among its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    pub strategy: Strategy,
    /// Never empty; each names a direct model once.
    pub targets: Vec<GroupTarget>,
    /// Same-target retries for retryable failures.
    pub retries: u32,
    /// Other targets tried after the first; `None` tries them all.
    pub max_fallbacks: Option<u32>,
    /// A 429 is retried on the same target (it always may fall over to the next).
    pub retry_on_429: bool,
    /// Upstream statuses that fall over to the next target instead of being returned.
    pub fallback_on_statuses: Vec<u16>,
    /// Kinds of upstream refusal, recognised across dialects, that fall over to the next
    /// target instead of being returned.
    pub fallback_on_errors: Vec<FallbackError>,
    pub when_all_unavailable: WhenAllUnavailable,
    /// A stream cut after content was sent is continued by the next target.
    pub continue_on_cut: bool,
}

/// `routing.targets[]`: one direct model of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTarget {
    /// The direct model's `display_name`.
    pub model: String,
    /// Index of that model in [`Resources::models`](super::Resources::models).
    pub model_index: usize,
    /// Higher first; targets of one priority share by the strategy.
    pub priority: i32,
    /// Relative share under `round_robin` (1 to [`MAX_WEIGHT`]).
    pub weight: u32,
}

/// `routing.strategy`: the order in which a request meets the targets of one priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// In the order listed.
    Failover,
    /// Smooth weighted round robin over `weight`.
    RoundRobin,
    /// Fewest requests in flight first, counted over every worker.
    LeastBusy,
    /// Lowest moving average of time to first byte first.
    LeastLatency,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::Failover,
        Strategy::RoundRobin,
        Strategy::LeastBusy,
        Strategy::LeastLatency,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Failover => "failover",
            Strategy::RoundRobin => "round_robin",
            Strategy::LeastBusy => "least_busy",
            Strategy::LeastLatency => "least_latency",
        }
    }
}

/// `routing.fallback_on_errors[]`: a kind of upstream refusal, whatever the provider's dialect
/// calls it, that falls over to the next target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FallbackError {
    /// The prompt does not fit the model's context window (OpenAI's
    /// `context_length_exceeded`, Anthropic's "prompt is too long").
    ContextLengthExceeded,
    /// A content filter refused the prompt (`content_filter`, `content_policy_violation`).
    ContentFilter,
}

impl FallbackError {
    pub const ALL: [FallbackError; 2] = [
        FallbackError::ContextLengthExceeded,
        FallbackError::ContentFilter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FallbackError::ContextLengthExceeded => "context_length_exceeded",
            FallbackError::ContentFilter => "content_filter",
        }
    }
}

/// `routing.when_all_unavailable`: what a request does when every target is cooling down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenAllUnavailable {
    /// 503 `all_candidates_unavailable` with `Retry-After` at the nearest cooldown's end.
    Fail,
    /// Try the targets anyway, in order.
    TryAnyway,
}

/// A group as far as it could be read, before its targets are looked up.
pub(super) struct GroupDraft {
    pub name: Option<String>,
    pub timeouts: Option<TimeoutOverrides>,
    pub rate_limit: Option<Option<RateLimit>>,
    pub routing: Option<RoutingDraft>,
    pub disabled: Option<Option<bool>>,
}

struct TargetDraft {
    path: String,
    model: String,
    priority: i32,
    weight: u32,
}

pub(super) struct RoutingDraft {
    strategy: Option<Strategy>,
    /// `None` when any target was wrong.
    targets: Option<Vec<TargetDraft>>,
    retries: Option<u32>,
    max_fallbacks: Option<Option<u32>>,
    retry_on_429: Option<bool>,
    fallback_on_statuses: Option<Vec<u16>>,
    fallback_on_errors: Option<Vec<FallbackError>>,
    when_all_unavailable: Option<WhenAllUnavailable>,
    continue_on_cut: Option<bool>,
}

/// Whether a `models[]` entry is a group (it has a `routing` key).
pub(super) fn is_group(value: &Value) -> bool {
    matches!(value, Value::Mapping(m) if m.contains_key("routing"))
}

/// Reads a group's fields; `name`, `timeouts` and `rate_limit` are the entry-level fields every
/// model has.
pub(super) fn read_group(
    report: &mut Report,
    mut fields: Fields<'_>,
    name: Option<String>,
    timeouts: Option<TimeoutOverrides>,
    rate_limit: Option<Option<RateLimit>>,
) -> GroupDraft {
    let routing = fields
        .required(report, "routing")
        .and_then(|(value, path)| read_routing(report, value, path));
    fields.finish(report, "field");
    GroupDraft {
        name,
        timeouts,
        rate_limit,
        routing,
        disabled: None,
    }
}

fn read_routing(report: &mut Report, value: &Value, path: String) -> Option<RoutingDraft> {
    let mut fields = Fields::new(report, path.clone(), value)?;
    let strategy = fields
        .optional(report, "strategy")
        .map(|(v, p)| choice(report, v, &p, &Strategy::ALL, Strategy::as_str));
    let targets = fields
        .required(report, "targets")
        .map(|(v, p)| read_targets(report, v, &p));
    let mut count = |name, max| {
        fields
            .optional(report, name)
            .map(|(v, p)| integer(report, v, &p, 0, max).map(|n| n as u32))
    };
    let retries = count("retries", MAX_RETRIES);
    let max_fallbacks = count("max_fallbacks", MAX_FALLBACKS);
    let retry_on_429 = fields
        .optional(report, "retry_on_429")
        .map(|(v, p)| bool(report, v, &p));
    let fallback_on_statuses = fields
        .optional(report, "fallback_on_statuses")
        .map(|(v, p)| statuses(report, v, &p));
    let fallback_on_errors = fields
        .optional(report, "fallback_on_errors")
        .map(|(v, p)| error_kinds(report, v, &p));
    let when_all_unavailable = fields
        .optional(report, "when_all_unavailable")
        .map(|(v, p)| {
            choice(
                report,
                v,
                &p,
                &[WhenAllUnavailable::Fail, WhenAllUnavailable::TryAnyway],
                |w| match w {
                    WhenAllUnavailable::Fail => "fail",
                    WhenAllUnavailable::TryAnyway => "try_anyway",
                },
            )
        });
    let continue_on_cut = fields
        .optional(report, "continue_on_cut")
        .map(|(v, p)| bool(report, v, &p));
    fields.finish(report, "field");
    Some(RoutingDraft {
        strategy: given(strategy)?.or(Some(Strategy::Failover)),
        targets: targets.flatten(),
        retries: given(retries)?.or(Some(0)),
        max_fallbacks: Some(given(max_fallbacks)?),
        retry_on_429: given(retry_on_429)?.or(Some(false)),
        fallback_on_statuses: given(fallback_on_statuses)?.or(Some(Vec::new())),
        fallback_on_errors: given(fallback_on_errors)?.or(Some(Vec::new())),
        when_all_unavailable: given(when_all_unavailable)?.or(Some(WhenAllUnavailable::Fail)),
        continue_on_cut: given(continue_on_cut)?.or(Some(false)),
    })
}

fn read_targets(report: &mut Report, value: &Value, path: &str) -> Option<Vec<TargetDraft>> {
    let items = list(report, value, path)?;
    if items.is_empty() {
        report.error(path, "must list at least one target");
        return None;
    }
    let mut targets = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let target = read_target(report, item, index_path(path, i));
        match (target, targets.as_mut()) {
            (Some(target), Some(targets)) => targets.push(target),
            _ => targets = None,
        }
    }
    targets
}

fn read_target(report: &mut Report, value: &Value, path: String) -> Option<TargetDraft> {
    let mut fields = Fields::new(report, path.clone(), value)?;
    let model = fields
        .required(report, "model")
        .and_then(|(v, p)| non_empty_string(report, v, &p))
        .map(str::to_owned);
    let priority = fields
        .optional(report, "priority")
        .map(|(v, p)| integer(report, v, &p, -1000, 1000).map(|n| n as i32));
    let weight = fields
        .optional(report, "weight")
        .map(|(v, p)| integer(report, v, &p, 1, MAX_WEIGHT).map(|n| n as u32));
    fields.finish(report, "field");
    Some(TargetDraft {
        model: model?,
        priority: given(priority)?.unwrap_or(0),
        weight: given(weight)?.unwrap_or(1),
        path,
    })
}

/// A list of HTTP error statuses (400 to 599).
fn statuses(report: &mut Report, value: &Value, path: &str) -> Option<Vec<u16>> {
    let items = list(report, value, path)?;
    let mut statuses = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let status = integer(report, item, &index_path(path, i), 400, 599).map(|n| n as u16);
        match (status, statuses.as_mut()) {
            (Some(status), Some(statuses)) => statuses.push(status),
            _ => statuses = None,
        }
    }
    statuses
}

/// A list of [`FallbackError`] names.
fn error_kinds(report: &mut Report, value: &Value, path: &str) -> Option<Vec<FallbackError>> {
    let items = list(report, value, path)?;
    let mut kinds = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let path = index_path(path, i);
        let kind = choice(
            report,
            item,
            &path,
            &FallbackError::ALL,
            FallbackError::as_str,
        );
        match (kind, kinds.as_mut()) {
            (Some(kind), Some(kinds)) => kinds.push(kind),
            _ => kinds = None,
        }
    }
    kinds
}

/// One of `options`, named by `name_of`.
fn choice<T: Copy>(
    report: &mut Report,
    value: &Value,
    path: &str,
    options: &[T],
    name_of: impl Fn(T) -> &'static str,
) -> Option<T> {
    let text = string(report, value, path)?;
    let found = options.iter().copied().find(|o| name_of(*o) == text);
    if found.is_none() {
        let names: Vec<_> = options.iter().map(|o| name_of(*o)).collect();
        report.error(
            path,
            format!(
                "unknown value {text:?} (expected one of: {})",
                names.join(", ")
            ),
        );
    }
    found
}

/// Looks each group's targets up among the direct models and builds the group; `None` for a
/// group with any error. `direct` maps a direct model's name to its index in the built models;
/// `groups` holds every group's name, since a target naming a group would nest groups (and
/// could make a cycle), which is refused.
pub(super) fn resolve_targets(
    report: &mut Report,
    direct: &HashMap<&str, usize>,
    group_names: &[Option<String>],
    groups: Vec<GroupDraft>,
) -> Vec<Option<ModelGroup>> {
    groups
        .into_iter()
        .map(|group| {
            let routing = group.routing?;
            let drafts = routing.targets?;
            let mut seen: HashMap<&str, &str> = HashMap::new();
            let mut targets = Some(Vec::with_capacity(drafts.len()));
            for TargetDraft {
                path,
                model,
                priority,
                weight,
            } in &drafts
            {
                let model_path = format!("{path}.model");
                let resolved = if let Some(&index) = direct.get(model.as_str()) {
                    Some(index)
                } else if group.name.as_deref() == Some(model.as_str()) {
                    report.error(
                        &model_path,
                        "names this group itself: targets are direct models",
                    );
                    None
                } else if group_names.iter().flatten().any(|g| g == model) {
                    report.error(
                        &model_path,
                        format!(
                            "names the group {model:?}: targets are direct models (groups do not nest, so they cannot form a cycle)"
                        ),
                    );
                    None
                } else {
                    report.error(&model_path, format!("no model named {model:?}"));
                    None
                };
                if let Some(first) = seen.insert(model, path) {
                    report.error(
                        &model_path,
                        format!("{model:?} is already a target of this group (at {first})"),
                    );
                    targets = None;
                    continue;
                }
                match (resolved, targets.as_mut()) {
                    (Some(model_index), Some(targets)) => targets.push(GroupTarget {
                        model: model.clone(),
                        model_index,
                        priority: *priority,
                        weight: *weight,
                    }),
                    _ => targets = None,
                }
            }
            Some(ModelGroup {
                display_name: group.name?,
                timeouts: group.timeouts?,
                rate_limit: given(group.rate_limit)?.unwrap_or_default(),
                routing: Routing {
                    strategy: routing.strategy?,
                    targets: targets?,
                    retries: routing.retries?,
                    max_fallbacks: routing.max_fallbacks?,
                    retry_on_429: routing.retry_on_429?,
                    fallback_on_statuses: routing.fallback_on_statuses?,
                    fallback_on_errors: routing.fallback_on_errors?,
                    when_all_unavailable: routing.when_all_unavailable?,
                    continue_on_cut: routing.continue_on_cut?,
                },
                disabled: given(group.disabled)?.unwrap_or(false),
            })
        })
        .collect()
}
