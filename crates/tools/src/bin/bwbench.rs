//! `bwbench`: the seeds' experiments as one benchmark suite. See `bwbench --help`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "bwbench",
    version,
    about = "Measure every bulkwire stack on this machine beside raw UDP, kernel TCP and MPI"
)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
    /// Fewer sizes and repetitions (about a minute for `all`).
    #[arg(long, global = true)]
    quick: bool,
    /// Where `all` writes its report.
    #[arg(long, global = true, default_value = "bwbench-report")]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Ping-pong half round trip per size: min / avg / max / std dev (seed 000 Table 1).
    Latency,
    /// Streaming bandwidth per size and the Hockney fit (seed 002 Table 1).
    Bandwidth,
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    // Worker processes of an experiment, started by bwbench itself.
    if argv.get(1).is_some_and(|a| a == "__pair") {
        return match bulkwire_bench::pair::worker_main(&argv[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bwbench worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bwbench: cannot find its own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let suite = bulkwire_bench::suite::Suite::new(exe, args.quick);
    let r = match args.cmd {
        Cmd::Latency => suite.latency(),
        Cmd::Bandwidth => suite.bandwidth(),
    };
    match r {
        Ok(section) => {
            println!("{}", section.markdown());
            let _ = &args.out;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bwbench: {e}");
            ExitCode::FAILURE
        }
    }
}
