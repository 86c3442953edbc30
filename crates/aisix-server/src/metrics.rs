//! The Prometheus listener, on the control thread: its own address, never the workers' port.
//! Each scrape renders the whole process (every worker's series summed); an upkeep timer keeps
//! the exporter's storage bounded.

use std::net::SocketAddr;
use std::time::Duration;

use aisix_config::PrometheusConfig;
use aisix_obs::metrics::Metrics;
use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;

/// How often the exporter's upkeep runs.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Binds the metrics address without `SO_REUSEPORT`, so a taken port is a startup failure.
pub(crate) fn bind(config: &PrometheusConfig) -> Result<std::net::TcpListener, String> {
    let listener = std::net::TcpListener::bind(config.addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!(
                "observability.metrics.prometheus.addr {} is already in use",
                config.addr
            )
        } else {
            format!("cannot listen on metrics address {}: {e}", config.addr)
        }
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("metrics listener: {e}"))?;
    Ok(listener)
}

/// Serves `path` on `listener` and runs the upkeep timer. Runs on the control runtime until the
/// process ends.
pub(crate) async fn serve(listener: std::net::TcpListener, path: String, metrics: Metrics) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "metrics listener failed; /metrics is unavailable");
            return;
        }
    };
    tokio::spawn(async move {
        let mut upkeep = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            upkeep.tick().await;
            metrics.run_upkeep();
        }
    });
    let app = Router::new().route(
        &path,
        get(move || async move {
            #[allow(unused_mut)]
            let mut page = metrics.render();
            #[cfg(feature = "count-alloc")]
            page.push_str(&aisix_obs::alloc_count::render());
            #[cfg(feature = "poll-probe")]
            page.push_str(&format!(
                "# TYPE aisix_worker_longest_delay_seconds gauge\naisix_worker_longest_delay_seconds {}\n\
                 # TYPE aisix_worker_longest_poll_seconds gauge\naisix_worker_longest_poll_seconds {}\n\
                 # TYPE aisix_worker_longest_poll_cpu_seconds gauge\naisix_worker_longest_poll_cpu_seconds {}\n",
                aisix_bootstrap::poll_probe::take_longest().as_secs_f64(),
                aisix_bootstrap::poll_probe::take_longest_poll().as_secs_f64(),
                aisix_bootstrap::poll_probe::take_longest_poll_cpu().as_secs_f64()
            ));
            (
                [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                page,
            )
        }),
    );
    if let Some(addr) = addr {
        tracing::info!(%addr, %path, "metrics listening");
    }
    if let Err(error) = axum::serve(listener, app).await {
        tracing::error!(%error, "metrics listener stopped");
    }
}
