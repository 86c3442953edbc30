//! What an entry may use: `rate_limit` (API keys and model entries), `cost` (model entries) and
//! `budget` (API keys), as types and as strict readers. Enforcing them is the gateway's job.

use std::fmt;

use serde_yaml::Value;

use super::load::given;
use super::reader::{Fields, Report, index_path, list, non_empty_string, positive_integer, string};

/// `rate_limit`: request, token and concurrency limits of one API key or one model entry. Each
/// is optional; an empty mapping limits nothing. Window limits count per fixed window of one
/// second (`rps`), minute (`rpm`, `tpm`), hour (`rph`) or day (`rpd`, `tpd`); `concurrency`
/// caps the requests in flight at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RateLimit {
    pub rps: Option<u64>,
    pub rpm: Option<u64>,
    pub rph: Option<u64>,
    pub rpd: Option<u64>,
    pub tpm: Option<u64>,
    pub tpd: Option<u64>,
    pub concurrency: Option<u64>,
}

impl RateLimit {
    /// The field names, in the order the file documents them.
    pub const FIELDS: [&'static str; 7] = ["rps", "rpm", "rph", "rpd", "tpm", "tpd", "concurrency"];

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// An amount of US dollars, held exactly in billionths (nano-dollars) so that prices, budgets
/// and spend add up without floating-point drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Usd {
    nanos: u64,
}

impl Usd {
    pub const ZERO: Usd = Usd { nanos: 0 };
    pub const NANOS_PER_DOLLAR: u64 = 1_000_000_000;

    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// The amount in nano-dollars.
    pub const fn nanos(self) -> u64 {
        self.nanos
    }

    /// The amount in dollars, for display and metrics (exact up to 2^53 nano-dollars).
    pub fn as_f64(self) -> f64 {
        self.nanos as f64 / Self::NANOS_PER_DOLLAR as f64
    }

    /// Parses a non-negative decimal (`12`, `0.00015`); digits past the ninth decimal place
    /// are rounded half up. `None` for anything else or an amount beyond `u64` nano-dollars.
    pub fn parse(text: &str) -> Option<Self> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
            return None;
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut nanos: u64 = 0;
        for (place, b) in (0u32..).zip(fraction.bytes().take(10)) {
            let digit = u64::from(b - b'0');
            if place < 9 {
                nanos += digit * 10u64.pow(8 - place);
            } else {
                nanos += u64::from(digit >= 5);
            }
        }
        whole
            .checked_mul(Self::NANOS_PER_DOLLAR)?
            .checked_add(nanos)
            .map(Self::from_nanos)
    }
}

impl fmt::Display for Usd {
    /// `$12.5`, `$0.00015`: as many decimals as the amount needs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.nanos / Self::NANOS_PER_DOLLAR;
        let fraction = self.nanos % Self::NANOS_PER_DOLLAR;
        if fraction == 0 {
            return write!(f, "${whole}");
        }
        let digits = format!("{fraction:09}");
        write!(f, "${whole}.{}", digits.trim_end_matches('0'))
    }
}

/// `cost`: what a model entry's tokens cost, in US dollars per 1000 tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Cost {
    pub input_per_1k: Usd,
    pub output_per_1k: Usd,
}

/// The span of time a budget counts over, in UTC: a calendar day, an ISO week (from Monday
/// 00:00) or a calendar month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetPeriod {
    Day,
    Week,
    Month,
}

impl BudgetPeriod {
    pub const ALL: [BudgetPeriod; 3] = [BudgetPeriod::Day, BudgetPeriod::Week, BudgetPeriod::Month];

    /// The name the resources file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
        }
    }
}

impl fmt::Display for BudgetPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `budget`: how much an API key may spend per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpendBudget {
    pub usd: Usd,
    pub period: BudgetPeriod,
}

/// Reads a `rate_limit` mapping; `None` (recorded) when anything in it is wrong.
pub(super) fn read_rate_limit(report: &mut Report, value: &Value, path: &str) -> Option<RateLimit> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let mut ok = true;
    let mut limit = |name: &'static str, unit: &str, report: &mut Report| {
        let read = fields
            .optional(report, name)
            .map(|(v, p)| positive_integer(report, v, &p, unit));
        ok &= !matches!(read, Some(None));
        read.flatten()
    };
    let rate_limit = RateLimit {
        rps: limit("rps", "requests per second", report),
        rpm: limit("rpm", "requests per minute", report),
        rph: limit("rph", "requests per hour", report),
        rpd: limit("rpd", "requests per day", report),
        tpm: limit("tpm", "tokens per minute", report),
        tpd: limit("tpd", "tokens per day", report),
        concurrency: limit("concurrency", "requests in flight", report),
    };
    fields.finish(report, "field");
    ok.then_some(rate_limit)
}

/// `api_keys[].spending`: what a key may buy beyond its tokens, so that a key holder cannot
/// buy features outside the cost model. Every field unset allows anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SpendingPolicy {
    /// `max_n`: the most choices (`n`) one request may ask for.
    pub max_n: Option<u32>,
    /// `service_tiers`: the `service_tier` values a request may name (a request naming none
    /// passes).
    pub service_tiers: Option<Vec<String>>,
    /// `anthropic_betas`: the `anthropic-beta` header values a request may send.
    pub anthropic_betas: Option<Vec<String>>,
}

impl SpendingPolicy {
    /// Whether `n` choices are allowed.
    pub fn allows_n(&self, n: u32) -> bool {
        self.max_n.is_none_or(|max| n <= max)
    }

    /// Whether `tier` may be named.
    pub fn allows_service_tier(&self, tier: &str) -> bool {
        self.service_tiers
            .as_ref()
            .is_none_or(|tiers| tiers.iter().any(|t| t == tier))
    }

    /// Whether the `anthropic-beta` value `beta` may be sent.
    pub fn allows_anthropic_beta(&self, beta: &str) -> bool {
        self.anthropic_betas
            .as_ref()
            .is_none_or(|betas| betas.iter().any(|b| b == beta))
    }
}

/// Reads a `spending` mapping.
pub(super) fn read_spending(
    report: &mut Report,
    value: &Value,
    path: &str,
) -> Option<SpendingPolicy> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let max_n = fields.optional(report, "max_n").map(|(v, p)| {
        positive_integer(report, v, &p, "choices").and_then(|n| u32::try_from(n).ok())
    });
    let mut names = |field: &'static str, report: &mut Report| {
        fields.optional(report, field).map(|(v, p)| {
            let items = list(report, v, &p)?;
            let mut names = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                names.push(non_empty_string(report, item, &index_path(&p, i))?.to_owned());
            }
            Some(names)
        })
    };
    let service_tiers = names("service_tiers", report);
    let anthropic_betas = names("anthropic_betas", report);
    fields.finish(report, "field");
    Some(SpendingPolicy {
        max_n: given(max_n)?,
        service_tiers: given(service_tiers)?,
        anthropic_betas: given(anthropic_betas)?,
    })
}

/// Reads a `cost` mapping; at least one price must be given, the other defaults to 0.
pub(super) fn read_cost(report: &mut Report, value: &Value, path: &str) -> Option<Cost> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let input = fields
        .optional(report, "input_per_1k")
        .map(|(v, p)| usd(report, v, &p));
    let output = fields
        .optional(report, "output_per_1k")
        .map(|(v, p)| usd(report, v, &p));
    fields.finish(report, "field");
    if input.is_none() && output.is_none() {
        report.error(
            path,
            "give input_per_1k, output_per_1k or both (USD per 1000 tokens)",
        );
        return None;
    }
    Some(Cost {
        input_per_1k: input.unwrap_or(Some(Usd::ZERO))?,
        output_per_1k: output.unwrap_or(Some(Usd::ZERO))?,
    })
}

/// Reads a `budget` mapping: `usd` (above 0) and `period`, both required.
pub(super) fn read_budget(report: &mut Report, value: &Value, path: &str) -> Option<SpendBudget> {
    let mut fields = Fields::new(report, path.to_owned(), value)?;
    let usd = fields.required(report, "usd").and_then(|(v, p)| {
        let amount = usd(report, v, &p)?;
        if amount == Usd::ZERO {
            report.error(&p, "must be above 0 (use disabled: true to stop a key)");
            return None;
        }
        Some(amount)
    });
    let period = fields
        .required(report, "period")
        .and_then(|(v, p)| budget_period(report, v, &p));
    fields.finish(report, "field");
    Some(SpendBudget {
        usd: usd?,
        period: period?,
    })
}

fn budget_period(report: &mut Report, value: &Value, path: &str) -> Option<BudgetPeriod> {
    let name = string(report, value, path)?;
    let period = BudgetPeriod::ALL.into_iter().find(|p| p.as_str() == name);
    if period.is_none() {
        report.error(path, format!("expected day, week or month, got {name:?}"));
    }
    period
}

/// A non-negative amount of dollars: a YAML number, or a decimal string so a `${VAR}` can
/// supply it.
fn usd(report: &mut Report, value: &Value, path: &str) -> Option<Usd> {
    let amount = match value {
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(whole), _) => whole
                .checked_mul(Usd::NANOS_PER_DOLLAR)
                .map(Usd::from_nanos),
            // Rust prints floats without an exponent, which `Usd::parse` reads exactly.
            (None, Some(x)) if x.is_finite() && x >= 0.0 => Usd::parse(&format!("{x}")),
            _ => None,
        },
        Value::String(s) => Usd::parse(s.trim()),
        _ => None,
    };
    if amount.is_none() {
        report.error(
            path,
            "expected a non-negative amount of US dollars (such as 0.0025)",
        );
    }
    amount
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_parses_decimals_exactly_to_the_nano_dollar() {
        assert_eq!(Usd::parse("12"), Some(Usd::from_nanos(12_000_000_000)));
        assert_eq!(Usd::parse("0.00015"), Some(Usd::from_nanos(150_000)));
        assert_eq!(Usd::parse(".5"), Some(Usd::from_nanos(500_000_000)));
        assert_eq!(Usd::parse("3."), Some(Usd::from_nanos(3_000_000_000)));
        assert_eq!(Usd::parse("0.0000000004"), Some(Usd::ZERO));
        assert_eq!(Usd::parse("0.0000000015"), Some(Usd::from_nanos(2)));
        for bad in [
            "",
            ".",
            "-1",
            "1e-3",
            "1.2.3",
            " 1",
            "abc",
            "99999999999999999999",
        ] {
            assert_eq!(Usd::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn usd_displays_only_the_decimals_it_needs() {
        assert_eq!(Usd::from_nanos(12_000_000_000).to_string(), "$12");
        assert_eq!(Usd::from_nanos(150_000).to_string(), "$0.00015");
        assert_eq!(Usd::from_nanos(2_500_000_000).to_string(), "$2.5");
    }

    #[test]
    fn an_empty_rate_limit_limits_nothing() {
        assert!(RateLimit::default().is_empty());
        assert!(
            !RateLimit {
                concurrency: Some(1),
                ..RateLimit::default()
            }
            .is_empty()
        );
    }
}
