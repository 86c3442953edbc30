//! `aisix-bench`: the saturation harness (`grid`) and the fast mock provider it drives (`mock`).
//! How to run it and what it reports: benches/README.md.

mod args;
mod gateway;
mod grid;
mod hostile;
mod http1;
mod loadgen;
mod logfile;
mod measure;
mod mock;
mod nginx;
mod openloop;
mod otlp_sink;
mod process;
mod procstat;
mod report;
mod strace;
mod variants;
mod wrk;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "aisix-bench", about = "aisix saturation harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure the gateway in each serving mode against the mock, nginx and the rig floor.
    Grid(Box<grid::GridArgs>),
    /// Serve the fast mock provider (the grid starts its own).
    Mock(mock::MockArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    process::raise_nofile_limit();
    match cli.command {
        Command::Grid(args) => grid::run(*args),
        Command::Mock(args) => mock::serve(args),
    }
}
