//! Process logging: `tracing` to stderr (journald and container logs read it), filtered by
//! `observability.log_level` unless `RUST_LOG` is set.

use tracing_subscriber::EnvFilter;

/// Checks a filter such as `info` or `aisix_gateway=debug,warn` without installing it.
pub fn validate_filter(filter: &str) -> Result<(), String> {
    EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| format!("not a valid log filter: {e}"))
}

/// Installs the process-wide subscriber. `RUST_LOG`, when set, wins over `level`.
pub fn init(level: &str) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => EnvFilter::builder()
            .parse(&from_env)
            .map_err(|e| format!("RUST_LOG is not a valid log filter: {e}"))?,
        _ => EnvFilter::builder()
            .parse(level)
            .map_err(|e| format!("observability.log_level is not a valid log filter: {e}"))?,
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}
