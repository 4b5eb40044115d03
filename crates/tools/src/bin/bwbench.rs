//! `bwbench`: the seeds' experiments as one benchmark suite, measured on this machine
//! beside raw UDP, kernel TCP and (when installed) MPI, written up as a report directory:
//! `report.md`, `results.json` and SVG charts.
//!
//! ```text
//! bwbench all --quick          every experiment, about a minute
//! bwbench all                  every experiment, full sizes and repetitions
//! bwbench latency              one experiment (also writes the report directory)
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bulkwire_bench::report::{Machine, Report};
use bulkwire_bench::suite::{Level, Section, Suite};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

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
    /// A few sizes and iterations only: checks that everything runs (used by the tests).
    #[arg(long, global = true, hide = true)]
    smoke: bool,
    /// Leave MPI out even where it is installed.
    #[arg(long, global = true)]
    no_mpi: bool,
    /// Directory the report is written to.
    #[arg(long, global = true, default_value = "bwbench-report")]
    out: PathBuf,
    /// No progress bar (for logs).
    #[arg(long, global = true)]
    no_progress: bool,
    /// `all`: add the experiments across two hosts (network namespaces, needs root).
    #[arg(long, global = true)]
    hosts: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Every experiment below, into one report.
    All,
    /// One experiment.
    #[command(flatten)]
    One(Experiment),
}

#[derive(Subcommand, Debug, Clone, Copy, ValueEnum)]
enum Experiment {
    /// Ping-pong half round trip per size: min / avg / max / std dev (seed 000 Table 1).
    Latency,
    /// Streaming bandwidth per size and the Hockney fit: t0, r_inf, n_1/2 (seed 002 Table 1).
    Bandwidth,
    /// All-to-all with 60 KiB messages: per-process bandwidth, packets and drops against p
    /// (seed 000 Fig. 3), on this host and on the simulated switch.
    Alltoall,
    /// Total exchange in latin-square against pid order (seed 003 Table 1).
    Exchange,
    /// Client/server wait against bit-error rate per protocol (seed 000 Fig. 5 and 6).
    Loss,
    /// Pre-post, compute, wait: the wait against message size (seed 000 Fig. 4).
    Overlap,
    /// Latency, throughput and N/2 at each level of the stack (seed 004 Table 3).
    Layers,
    /// BSP: g and l by least squares over h-relations, and the empty superstep.
    Bsp,
    /// OSU-style latency of each collective per size and p (network cache, p2p over UDP).
    Collectives,
    /// Latency, bandwidth, BSP and collectives between two network namespaces over veth at
    /// MTU 1500 and 9000, beside Open MPI over TCP and raw UDP/TCP (needs root).
    Cluster,
}

const ALL: [Experiment; 9] = [
    Experiment::Latency,
    Experiment::Bandwidth,
    Experiment::Layers,
    Experiment::Bsp,
    Experiment::Collectives,
    Experiment::Alltoall,
    Experiment::Overlap,
    Experiment::Exchange,
    Experiment::Loss,
];

impl Experiment {
    fn runs(self, s: &Suite) -> usize {
        match self {
            Experiment::Latency | Experiment::Bandwidth => s.pair_runs(),
            Experiment::Alltoall => s.alltoall_runs(),
            Experiment::Exchange => s.exchange_runs(),
            Experiment::Loss => s.loss_runs(),
            Experiment::Overlap => s.overlap_runs(),
            Experiment::Layers => s.layers_runs(),
            Experiment::Bsp => s.bsp_runs(),
            Experiment::Collectives => s.collectives_runs(),
            Experiment::Cluster => s.cluster_runs(),
        }
    }

    fn run(self, s: &Suite) -> Section {
        match self {
            Experiment::Latency => s.latency(),
            Experiment::Bandwidth => s.bandwidth(),
            Experiment::Alltoall => s.alltoall(),
            Experiment::Exchange => s.exchange(),
            Experiment::Loss => s.loss(),
            Experiment::Overlap => s.overlap(),
            Experiment::Layers => s.layers(),
            Experiment::Bsp => s.bsp(),
            Experiment::Collectives => s.collectives(),
            Experiment::Cluster => s.cluster(),
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    // Worker processes of an experiment, started by bwbench itself.
    let worker = match argv.get(1).and_then(|a| a.to_str()) {
        Some("__pair") => Some(bulkwire_bench::pair::worker_main as fn(&[OsString]) -> _),
        Some("__group") => Some(bulkwire_bench::group::worker_main as fn(&[OsString]) -> _),
        Some("__bsp") => Some(bulkwire_bench::bspk::worker_main as fn(&[OsString]) -> _),
        Some("__coll") => Some(bulkwire_bench::coll::worker_main as fn(&[OsString]) -> _),
        _ => None,
    };
    // The host agent of a job across hosts (the cluster experiment).
    if argv.get(1).and_then(|a| a.to_str()) == Some("__agent") {
        let rest: Vec<String> = argv[2..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return ExitCode::from(bulkwire_launch::agent::agent_main(&rest).clamp(0, 255) as u8);
    }
    if let Some(w) = worker {
        return match w(&argv[2..]) {
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
    let experiments: Vec<Experiment> = match args.cmd {
        Cmd::All if args.hosts => ALL.iter().copied().chain([Experiment::Cluster]).collect(),
        Cmd::All => ALL.to_vec(),
        Cmd::One(e) => vec![e],
    };
    let work = std::env::temp_dir().join(format!("bwbench-{}", std::process::id()));
    let bar = if args.no_progress {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} runs, ~{eta} left: {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let b2 = bar.clone();
    let level = if args.smoke {
        Level::Smoke
    } else if args.quick {
        Level::Quick
    } else {
        Level::Full
    };
    let mut suite = Suite::new(exe, level, work.clone()).on_progress(move |what| {
        b2.inc(1);
        b2.set_message(what.to_string());
    });
    if args.no_mpi {
        suite = suite.without_mpi();
    }
    bar.set_length(experiments.iter().map(|e| e.runs(&suite)).sum::<usize>() as u64);
    let t0 = Instant::now();
    let mut sections = Vec::new();
    for e in &experiments {
        let t = Instant::now();
        let mut sec = e.run(&suite);
        sec.seconds = t.elapsed().as_secs_f64();
        sections.push(sec);
    }
    bar.finish_and_clear();
    let mpi = match suite.mpi() {
        Ok(m) => m.version.clone(),
        Err(e) => format!("not measured ({e})"),
    };
    let mut machine = Machine::here(&mpi);
    let across = "between two network namespaces over a veth pair (the cluster section's \
                  first table)";
    if experiments.iter().all(|e| matches!(e, Experiment::Cluster)) {
        machine.network = across.into();
    } else if experiments.iter().any(|e| matches!(e, Experiment::Cluster)) {
        machine.network += &format!("; the cluster section: {across}");
    }
    let report = Report {
        machine,
        level,
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" "),
        seconds: t0.elapsed().as_secs_f64(),
        sections,
    };
    let _ = std::fs::remove_dir_all(&work);
    if let Err(e) = report.write(&args.out) {
        eprintln!(
            "bwbench: cannot write the report to {}: {e}",
            args.out.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{}", report.markdown());
    println!(
        "Report written to {}/report.md (data: results.json, charts: *.svg).",
        args.out.display()
    );
    let failed = report
        .sections
        .iter()
        .any(|s| s.series.is_empty() && s.tables.is_empty());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
