//! Reading a Prometheus text page in tests: sum the samples of a family that carry given labels.

/// The sum of every sample named `name` whose labels include all of `labels`.
pub fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let all = labels.iter().all(|(k, v)| {
                series_labels
                    .split(',')
                    .any(|pair| pair == format!("{k}=\"{v}\""))
            });
            all.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Whether any sample named `name` carries all of `labels`.
pub fn has_series(page: &str, name: &str, labels: &[(&str, &str)]) -> bool {
    page.lines().filter(|l| !l.starts_with('#')).any(|line| {
        line.starts_with(&format!("{name}{{"))
            && labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
    })
}

/// Runs `promtool check metrics` on the page; `Err` with promtool's complaint.
pub fn promtool_check(page: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run promtool ({e}); install Debian's `prometheus` package (scripts/test.sh does)")
        })?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(page.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The sum of `name`'s samples carrying `labels` on the gateway's `/metrics` at `addr`, once it
/// is above `above` (a request is settled just after its answer ends); waits up to 10 s, then
/// returns what is there.
pub async fn settled(
    addr: std::net::SocketAddr,
    name: &str,
    labels: &[(&str, &str)],
    above: f64,
) -> f64 {
    let mut value = 0.0;
    for _ in 0..200 {
        value = sample(
            &crate::client::get(addr, "/metrics").await.text(),
            name,
            labels,
        );
        if value > above {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    value
}

/// The micro-dollars (rounded) a key has spent on a model by `aisix_spend_usd_total`, once
/// more than `before` has been settled.
pub async fn spent_micros(addr: std::net::SocketAddr, key: &str, model: &str, before: u64) -> u64 {
    let labels = [("api_key", key), ("model", model)];
    let usd = settled(addr, "aisix_spend_usd_total", &labels, before as f64 / 1e6).await;
    (usd * 1e6).round() as u64
}
