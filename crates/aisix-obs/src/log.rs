//! Process logging: `tracing` to stderr (journald and container logs read it), filtered by
//! `observability.log_level` unless `RUST_LOG` is set. Lines are handed to a writer thread, so
//! a worker that logs never blocks on a slow stderr.

use tracing_subscriber::EnvFilter;

/// Keeps the log writer thread alive; dropping it flushes what is queued.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard(#[allow(dead_code)] tracing_appender::non_blocking::WorkerGuard);

/// Checks a filter such as `info` or `aisix_gateway=debug,warn` without installing it.
pub fn validate_filter(filter: &str) -> Result<(), String> {
    EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| format!("not a valid log filter: {e}"))
}

/// Installs the process-wide subscriber. `RUST_LOG`, when set, wins over `level`.
pub fn init(level: &str) -> Result<LogGuard, String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => EnvFilter::builder()
            .parse(&from_env)
            .map_err(|e| format!("RUST_LOG is not a valid log filter: {e}"))?,
        _ => EnvFilter::builder()
            .parse(level)
            .map_err(|e| format!("observability.log_level is not a valid log filter: {e}"))?,
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .thread_name("aisix-stderr")
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(LogGuard(guard))
}
