//! Command line: `aisix --config FILE` serves, `aisix validate --config FILE` checks offline,
//! `aisix export` / `aisix import FILE` move resources out of and into etcd.

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
    /// Write the resources held in etcd (the config's `etcd:`) as a resources file, to stdout
    /// or to --output.
    Export {
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Load a resources file into etcd (the config's `etcd:`): checked first, then written in
    /// one transaction.
    Import {
        /// The resources file.
        file: PathBuf,
        /// Also delete the provider keys, models and API keys the file does not hold.
        #[arg(long)]
        replace: bool,
    },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Validate) => validate(cli.config.as_deref()),
        Some(Command::Export { output }) => export(cli.config.as_deref(), output.as_deref()),
        Some(Command::Import { file, replace }) => import(cli.config.as_deref(), &file, replace),
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

/// The `etcd:` section of the config, or the message saying why there is none.
fn etcd_config(config: Option<&Path>) -> Result<aisix_config::EtcdConfig, String> {
    let bootstrap = aisix_config::load_bootstrap(config, std::env::vars()).map_err(|errors| {
        errors
            .0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    bootstrap
        .etcd
        .ok_or_else(|| "the configuration has no etcd: section".to_owned())
}

/// A runtime for one command's etcd calls.
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|runtime| runtime.block_on(future))
        .map_err(|e| format!("cannot start a runtime: {e}"))
}

fn export(config: Option<&Path>, output: Option<&Path>) -> ExitCode {
    let result =
        etcd_config(config).and_then(|etcd| block_on(crate::etcd::transfer::export(&etcd))?);
    let written = result.and_then(|yaml| match output {
        Some(path) => {
            std::fs::write(path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))
        }
        None => {
            print!("{yaml}");
            Ok(())
        }
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("aisix: {error}");
            ExitCode::FAILURE
        }
    }
}

fn import(config: Option<&Path>, file: &Path, replace: bool) -> ExitCode {
    let result = etcd_config(config).map_err(|e| vec![e]).and_then(|etcd| {
        block_on(crate::etcd::transfer::import(&etcd, file, replace)).map_err(|e| vec![e])?
    });
    match result {
        Ok(imported) => {
            println!(
                "imported {} documents (deleted {}) at etcd revision {}",
                imported.written, imported.deleted, imported.revision
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("{error}");
            }
            eprintln!("aisix: import refused; nothing was written");
            ExitCode::FAILURE
        }
    }
}
