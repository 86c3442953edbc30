//! `aisix-bench`: the saturation harness (`grid`) and the fast mock provider it drives (`mock`).
//! How to run it and what it reports: benches/README.md.

mod args;
mod bystander;
mod compare;
mod floor;
mod gateway;
mod grid;
mod hostile;
mod http1;
mod instr;
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
mod sse_origin;
mod strace;
mod variants;
mod wrk;

use clap::{Parser, Subcommand};

// The floor proxy (`floor`) must run on the allocator the gateway runs on, with the same options
// (crates/aisix-server/src/main.rs), or the floor leg would price allocators too. The mock and
// the load generator get it as well, in every leg alike.
#[cfg(target_os = "linux")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a NUL-terminated string of 'static lifetime, only ever read.
    Some(unsafe {
        &*c"background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:5000".as_ptr()
    });

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
    /// Compare this tree's gateway with another revision's, interleaved in one run (unary and
    /// streaming), and print the ratios.
    Compare(Box<compare::CompareArgs>),
    /// User-space instructions per request under valgrind (aisix, the floor, nginx, a
    /// baseline binary), with system calls per request: figures that do not drift.
    Instr(Box<instr::InstrArgs>),
    /// Serve the fast mock provider (the grid starts its own).
    Mock(mock::MockArgs),
    /// Serve the floor proxy: the gateway's stack (serving core, upstream pool) with no gateway
    /// logic (the grid starts its own).
    Floor(floor::FloorArgs),
    /// Serve the stand-in OTLP/HTTP collector (the grid's OpenTelemetry legs start their own):
    /// for benches/otel-instr.sh.
    OtlpSink(otlp_sink::SinkArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    process::raise_nofile_limit();
    match cli.command {
        Command::Grid(args) => grid::run(*args),
        Command::Mock(args) => mock::serve(args),
        Command::Compare(args) => compare::run(*args),
        Command::Instr(args) => instr::run(*args),
        Command::Floor(args) => floor::serve(args),
        Command::OtlpSink(args) => otlp_sink::serve(args),
    }
}
