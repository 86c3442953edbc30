//! A direct model's `cooldown` block, in AISIX's shape, read into the overrides of the
//! `upstream.*` cooldown settings. What AISIX can tune there but aisix cannot is refused by name.

use std::time::Duration;

use serde_yaml::Value;

use super::load::given;
use super::reader::{Fields, Report, bool, duration};
use crate::bootstrap::CooldownOverrides;
use crate::duration::Unit;

/// Reads `cooldown`: `enabled`, `default_seconds`, `max_seconds`, `honor_retry_after`, and
/// `trigger_on_timeout`/`trigger_on_transport` as long as they are `true` (aisix always counts
/// timeouts and transport failures).
pub(super) fn read_cooldown(
    report: &mut Report,
    value: &Value,
    path: &str,
) -> Option<CooldownOverrides> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let flag = |fields: &mut Fields<'_>, report: &mut Report, name| {
        fields
            .optional(report, name)
            .map(|(v, p)| bool(report, v, &p).map(|b| (b, p)))
    };
    let enabled = flag(&mut fields, report, "enabled");
    let honor_retry_after = flag(&mut fields, report, "honor_retry_after");
    for name in ["trigger_on_timeout", "trigger_on_transport"] {
        if let Some(Some((false, p))) = flag(&mut fields, report, name) {
            report.error(
                p,
                "aisix always counts this failure toward a cooldown; only true is accepted",
            );
        }
    }
    let default_seconds = fields
        .optional(report, "default_seconds")
        .map(|(v, p)| duration(report, v, &p, Unit::Seconds, Duration::from_millis(1)));
    let max_seconds = fields
        .optional(report, "max_seconds")
        .map(|(v, p)| duration(report, v, &p, Unit::Seconds, Duration::from_secs(1)));
    fields.refuse(
        report,
        "trigger_statuses",
        "aisix counts 429 and 5xx answers toward a cooldown; a list per model is not supported",
    );
    fields.finish(report, "field");

    let honor_retry_after = given(honor_retry_after)?.map(|(honor, _)| honor);
    let max_seconds = given(max_seconds)?;
    Some(CooldownOverrides {
        enabled: given(enabled)?.map(|(enabled, _)| enabled),
        cooldown: given(default_seconds)?,
        retry_after_max: match honor_retry_after {
            Some(false) => Some(Duration::ZERO),
            _ => max_seconds,
        },
    })
}
