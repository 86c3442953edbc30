//! Every place outside the code that names metrics, against the catalog: the Grafana dashboard
//! and the Prometheus alerts under deploy/, docs/metrics.md and the README. Every metric they
//! name is in the catalog (with `_bucket`, `_sum`, `_count` only on histograms); every catalog
//! family is in both metrics references; the rules pass `promtool check rules` and their unit
//! tests; every dashboard query and every `promql` block of the docs parses as PromQL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use aisix_obs::metrics::catalog::{self, Kind};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn deploy() -> PathBuf {
    workspace().join("deploy")
}

/// Every `aisix_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(offset) = text[i..].find("aisix_") {
        let start = i + offset;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |n| start + n);
        // A bare `aisix_` is the prefix being talked about, not a name.
        if boundary && end > start + "aisix_".len() {
            names.insert(text[start..end].to_owned());
        }
        i = end;
    }
    names
}

/// Fails unless `name` is a catalog family, or a histogram family's series.
fn assert_in_catalog(name: &str, file: &str) {
    if catalog::find(name).is_some() {
        return;
    }
    let histogram_series = ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        name.strip_suffix(suffix)
            .and_then(catalog::find)
            .is_some_and(|family| matches!(family.kind, Kind::Histogram { .. }))
    });
    assert!(
        histogram_series,
        "{file} names {name}, which is not in the metric catalog"
    );
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(deploy().join("grafana/aisix.json")).unwrap())
        .unwrap()
}

fn dashboard_queries() -> Vec<String> {
    dashboard()["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap().clone())
        .map(|target| target["expr"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_in_the_catalog() {
    for file in [
        "grafana/aisix.json",
        "prometheus/alerts.yaml",
        "prometheus/alerts_test.yaml",
    ] {
        let text = std::fs::read_to_string(deploy().join(file)).unwrap();
        let names = metric_names(&text);
        assert!(!names.is_empty(), "{file} names no metric");
        for name in names {
            assert_in_catalog(&name, file);
        }
    }
}

#[test]
fn the_dashboard_shows_rate_errors_latency_ttft_tokens_worker_spread_and_in_flight() {
    let queries = dashboard_queries().join("\n");
    for needle in [
        "rate(aisix_requests_total",
        "outcome=\"upstream_error\"",
        "histogram_quantile(0.99, sum by (le) (rate(aisix_request_duration_seconds_bucket",
        "aisix_upstream_ttft_seconds_bucket",
        "aisix_tokens_total",
        "aisix_worker_requests_total",
        "aisix_requests_in_flight",
    ] {
        assert!(
            queries.contains(needle),
            "the dashboard has no query with {needle}"
        );
    }
    let ids: BTreeSet<u64> = dashboard()["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        dashboard()["panels"].as_array().unwrap().len(),
        "panel ids are unique"
    );
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}); install Debian's `prometheus` package (scripts/test.sh does)")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = deploy().join("prometheus");
    let checked = promtool(&["check", "rules", "alerts.yaml"], &dir);
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    promtool(&["test", "rules", "alerts_test.yaml"], &dir);
}

/// Checks that every query parses, by handing them to promtool as recording rules.
fn assert_queries_parse(queries: &[String]) {
    assert!(!queries.is_empty());
    let mut rules = String::from("groups:\n  - name: queries\n    rules:\n");
    for (i, query) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: query:number_{i}\n        expr: {}\n",
            serde_json::to_string(query).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("queries.yaml"), rules).unwrap();
    promtool(&["check", "rules", "queries.yaml"], dir.path());
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    // Grafana's variables, as a query runs them.
    let queries: Vec<String> = dashboard_queries()
        .iter()
        .map(|q| q.replace("$__rate_interval", "5m").replace("$job", ".+"))
        .collect();
    assert_queries_parse(&queries);
}

/// The families named in the first column of a markdown table (`| \`aisix_…\` |`).
fn table_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("| `aisix_"))
        .map(|rest| format!("aisix_{}", rest.split('`').next().unwrap()))
        .collect()
}

#[test]
fn every_catalog_family_is_in_the_metrics_reference_and_the_readme_and_nothing_else_is() {
    for file in ["docs/metrics.md", "README.md"] {
        let text = std::fs::read_to_string(workspace().join(file)).unwrap();
        let documented = table_families(&text);
        for family in &catalog::CATALOG {
            assert!(
                documented.contains(family.name),
                "{file} does not document {}",
                family.name
            );
        }
        for name in metric_names(&text) {
            assert_in_catalog(&name, file);
        }
    }
}

#[test]
fn every_promql_block_of_the_docs_parses() {
    let text = std::fs::read_to_string(workspace().join("docs/metrics.md")).unwrap();
    let blocks: Vec<String> = text
        .split("```promql\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap().trim().to_owned())
        .collect();
    assert_queries_parse(&blocks);
}
