//! Command line: `aisix --config FILE` serves, `aisix validate --config FILE` checks offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::run;

#[derive(Debug, Parser)]
#[command(name = "aisix", version, about = "A thread-per-core LLM gateway")]
struct Cli {
    /// The bootstrap config file (YAML).
    #[arg(short, long, global = true, env = aisix_config::CONFIG_PATH_VAR, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the configuration (and the resources file it names) without starting; prints every
    /// error with its path and exits non-zero if there is any.
    Validate,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Validate) => validate(cli.config.as_deref()),
        None => match run::serve(cli.config.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("aisix: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

fn validate(config: Option<&Path>) -> ExitCode {
    match run::load_and_check(config) {
        Ok(_) => {
            println!("configuration is valid");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("{error}");
            }
            eprintln!(
                "aisix: {} configuration error{}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            ExitCode::FAILURE
        }
    }
}
