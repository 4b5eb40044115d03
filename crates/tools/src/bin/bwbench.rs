//! `bwbench`: the papers' experiments as one benchmark suite, measured on this machine
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bulkwire_bench::experiments::{self, Entry, Prepared};
use bulkwire_bench::plan::Event;
use bulkwire_bench::report::{Machine, Report};
use bulkwire_bench::suite::{Level, Suite};
use clap::{Command, CommandFactory, FromArgMatches, Parser};
use indicatif::{ProgressBar, ProgressStyle};

/// The options of every subcommand; the subcommands (`all` and one per experiment) come
/// from the experiments' registry.
#[derive(Parser, Debug)]
#[command(
    name = "bwbench",
    version,
    about = "Measure every bulkwire stack on this machine beside raw UDP, kernel TCP and MPI",
    subcommand_required = true
)]
struct Args {
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
    /// List the runs the command would make, with their estimated times, and exit.
    #[arg(long, global = true)]
    plan: bool,
}

/// The command line: [`Args`], `all`, and a subcommand per registered experiment.
fn command() -> Command {
    let mut cmd = Args::command()
        .subcommand(Command::new("all").about("Every experiment below, into one report"));
    for e in experiments::REGISTRY {
        cmd = cmd.subcommand(Command::new(e.name()).about(e.about()));
    }
    cmd
}

/// Prints every run of `plans`, with its estimate.
fn print_plan(plans: &[Box<dyn Prepared + '_>]) {
    let mut total = 0.0;
    let mut runs = 0;
    for p in plans {
        for st in p.steps() {
            println!("{:>7.1} s  {}: {}", st.estimate, p.name(), st.label);
            total += st.estimate;
            runs += 1;
        }
    }
    println!("{runs} runs, about {total:.0} s");
}

/// A progress bar over the plans' estimated time: each run advances it by its estimate,
/// so the time left follows the plan rather than the count of runs.
fn progress_bar(hidden: bool, plans: &[Box<dyn Prepared + '_>]) -> (ProgressBar, usize) {
    let steps: Vec<_> = plans.iter().flat_map(|p| p.steps()).collect();
    let total: f64 = steps.iter().map(|s| s.estimate).sum();
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        eprintln!(
            "bwbench: {} runs in {} experiments, about {:.0} s",
            steps.len(),
            plans.len(),
            total
        );
        ProgressBar::new((total * 1e3) as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] ~{eta} left: {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    (bar, steps.len())
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
    if let Some(w) = worker {
        return match w(&argv[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bwbench worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let matches = command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bwbench: cannot find its own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let chosen: Vec<&dyn Entry> = match matches.subcommand_name() {
        Some("all") | None => experiments::REGISTRY.to_vec(),
        Some(name) => experiments::find(name).into_iter().collect(),
    };
    let work = std::env::temp_dir().join(format!("bwbench-{}", std::process::id()));
    let level = if args.smoke {
        Level::Smoke
    } else if args.quick {
        Level::Quick
    } else {
        Level::Full
    };
    let mut suite = Suite::new(exe, level, work.clone());
    if args.no_mpi {
        suite = suite.without_mpi();
    }
    let plans: Vec<Box<dyn Prepared>> = chosen.iter().map(|e| e.prepare(&suite)).collect();
    if args.plan {
        print_plan(&plans);
        return ExitCode::SUCCESS;
    }
    let (bar, total) = progress_bar(args.no_progress, &plans);
    let started = AtomicUsize::new(0);
    let t0 = Instant::now();
    let mut sections = Vec::new();
    for p in plans {
        let name = p.name();
        let progress = |e: Event| match e {
            Event::Start(step) => {
                let k = started.fetch_add(1, Ordering::Relaxed) + 1;
                bar.set_message(format!("{k}/{total} {name}: {}", step.label));
            }
            Event::End(step, _) => bar.inc((step.estimate * 1e3) as u64),
        };
        sections.push(p.run(&suite, &progress));
    }
    bar.finish_and_clear();
    let mpi = match suite.mpi() {
        Ok(m) => m.version.clone(),
        Err(e) => format!("not measured ({e})"),
    };
    let report = Report {
        machine: Machine::here(&mpi),
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
