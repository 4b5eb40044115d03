//! `bwbench`: the papers' experiments as one benchmark suite, measured on this machine
//! beside raw UDP, kernel TCP and (when installed) MPI, written up as a report directory:
//! `report.md`, `results.json` and SVG charts.
//!
//! ```text
//! bwbench all --quick          every experiment, about 2 minutes on two cores
//! bwbench all                  every experiment, full sizes and repetitions
//! bwbench latency              one experiment (also writes the report directory)
//! bwbench all --hosts          and the experiments across hosts (root: namespaces)
//! bwbench mpi --osu DIR        the OSU micro-benchmarks that scripts/mpi-suites.sh built,
//!                              under bulkwire's MPI, Open MPI and MPICH side by side
//! bwbench profile cg.prof      a BSP cost profile (bsprun --profile cg.prof) as tables,
//!                              a timeline (cg.prof.svg) and W + H g + S l
//! ```

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bulkwire_bench::experiments::{self, Entry, Prepared, cluster, fabric};
use bulkwire_bench::plan::Event;
use bulkwire_bench::profile::ParamSource;
use bulkwire_bench::report::{LoadProbe, Machine, Report, Status};
use bulkwire_bench::section::Section;
use bulkwire_bench::suite::{Level, Suite};
use clap::{Args as _, Command, CommandFactory, FromArgMatches, Parser};
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
    /// Fewer sizes and repetitions (about 2 minutes for `all` on two cores).
    #[arg(long, global = true)]
    quick: bool,
    /// A few sizes and iterations only: checks that everything runs (used by the tests).
    #[arg(long, global = true, hide = true)]
    smoke: bool,
    /// Leave MPI out even where it is installed.
    #[arg(long, global = true)]
    no_mpi: bool,
    /// `mpi`: the work directory of scripts/mpi-suites.sh, where it built the OSU
    /// micro-benchmarks with each MPI (default: target/mpi-suites).
    #[arg(long, global = true, value_name = "DIR")]
    osu: Option<PathBuf>,
    /// Directory the report is written to.
    #[arg(long, global = true, default_value = "bwbench-report")]
    out: PathBuf,
    /// No progress bar or progress lines.
    #[arg(long, global = true)]
    no_progress: bool,
    /// Exit with status 0 when some runs failed (the report lists them); without it a
    /// partial report exits with status 3.
    #[arg(long, global = true)]
    accept_partial: bool,
    /// List the runs the command would make, with their estimated times, and exit.
    #[arg(long, global = true)]
    plan: bool,
    /// `all`: add the experiments across hosts (network namespaces over veth, and on an
    /// emulated switch; needs root, `ip netns`, `tc`, and netns-rsh beside bwbench).
    #[arg(long, global = true)]
    hosts: bool,
    /// `fabric`: only these tables, comma-separated: exchange, coll, fig3, incast, contend,
    /// pair, mcast (broadcast and allgather over IP multicast, every rate), mcast1g (the
    /// 1 Gb/s multicast table alone; not at --smoke).
    #[arg(long, global = true, value_name = "PARTS", value_delimiter = ',')]
    only: Vec<String>,
}

/// `bwbench profile`'s own options.
#[derive(clap::Args, Debug)]
struct ProfileArgs {
    /// The profile's name: what BULKWIRE_PROFILE (or bsprun --profile) was set to; the
    /// processes wrote FILE.0, FILE.1, ...
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// g, microseconds per 8-byte word of an h-relation (with --l).
    #[arg(long, value_name = "US", requires = "l", allow_negative_numbers = true)]
    g: Option<f64>,
    /// l, microseconds per superstep (with --g).
    #[arg(long, value_name = "US", requires = "g", allow_negative_numbers = true)]
    l: Option<f64>,
    /// Take g and l from a `bwbench bsp` report (its results.json), for the profile's p
    /// and protocol.
    #[arg(long, value_name = "JSON", conflicts_with = "g")]
    bsp_results: Option<PathBuf>,
    /// With --bsp-results: the stack whose g and l to take, as the report names it
    /// (e.g. holefill/udp); default: the first of the profile's protocol.
    #[arg(long, value_name = "LABEL", requires = "bsp_results")]
    stack: Option<String>,
    /// Where to write the timeline (default: FILE.svg).
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// How many of the costliest supersteps to list (and mark on the timeline).
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Also list every superstep.
    #[arg(long)]
    all: bool,
}

/// The command line: [`Args`], `all`, a subcommand per registered experiment, and
/// `profile`.
fn command() -> Command {
    let mut cmd =
        Args::command().subcommand(Command::new("all").about(
            "Every experiment below, into one report (cluster and fabric only with --hosts)",
        ));
    for e in experiments::REGISTRY {
        cmd = cmd.subcommand(Command::new(e.name()).about(e.about()));
    }
    // After augment_args, which would set the about text to ProfileArgs' doc comment.
    cmd.subcommand(ProfileArgs::augment_args(Command::new("profile")).about(
        "A BSP cost profile (BULKWIRE_PROFILE, bsprun --profile) as tables, an SVG timeline \
         of the supersteps, and W + H g + S l beside the measured time",
    ))
}

/// `bwbench profile`: prints the tables and writes the timeline.
fn profile(m: &clap::ArgMatches) -> ExitCode {
    let a = match ProfileArgs::from_arg_matches(m) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    for (name, v) in [("--g", a.g), ("--l", a.l)] {
        if v.is_some_and(|x| !x.is_finite()) {
            eprintln!("bwbench profile: {name} must be a finite number of microseconds");
            return ExitCode::from(2);
        }
    }
    let source = match (a.g.zip(a.l), &a.bsp_results) {
        (Some((g_us, l_us)), _) => ParamSource::Given { g_us, l_us },
        (None, Some(path)) => ParamSource::Report {
            path,
            stack: a.stack.as_deref(),
        },
        (None, None) => ParamSource::None,
    };
    let w = match bulkwire_bench::profile::write_up(&a.file, source, a.top, a.all) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("bwbench profile: {e}");
            return ExitCode::FAILURE;
        }
    };
    let svg = a.svg.unwrap_or_else(|| {
        let mut s = a.file.clone().into_os_string();
        s.push(".svg");
        s.into()
    });
    print!("{}", w.markdown);
    if let Err(e) = bulkwire_launch::files::write_private(&svg, w.svg) {
        eprintln!("bwbench profile: cannot write {}: {e}", svg.display());
        return ExitCode::FAILURE;
    }
    println!("Timeline written to {}.", svg.display());
    ExitCode::SUCCESS
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
        for why in p.skipped() {
            println!("   left out  {}: {why}", p.name());
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

/// How progress is shown on stderr.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    None,
    /// A bar, redrawn in place (stderr is a terminal).
    Bar,
    /// A line as each experiment starts and ends (stderr is a log or a pipe).
    Lines,
}

/// Runs `plans` in order, showing progress as `how` says: their sections.
fn run_all(suite: &Suite, plans: Vec<Box<dyn Prepared + '_>>, how: Progress) -> Vec<Section> {
    let (bar, total) = progress_bar(how != Progress::Bar, &plans);
    if how == Progress::Lines {
        let est: f64 = plans
            .iter()
            .flat_map(|p| p.steps())
            .map(|s| s.estimate)
            .sum();
        eprintln!(
            "bwbench: {total} runs in {} experiments, about {est:.0} s",
            plans.len()
        );
    }
    let t0 = Instant::now();
    let started = AtomicUsize::new(0);
    let mut sections = Vec::new();
    let n = plans.len();
    for (i, p) in plans.into_iter().enumerate() {
        let name = p.name();
        let (runs, est) = {
            let steps = p.steps();
            (steps.len(), steps.iter().map(|s| s.estimate).sum::<f64>())
        };
        let t1 = Instant::now();
        if how == Progress::Lines {
            eprintln!(
                "bwbench: [{}/{n}] {name}: {runs} runs, about {est:.0} s (started at {:.0} s)",
                i + 1,
                t0.elapsed().as_secs_f64()
            );
        }
        let progress = |e: Event| match e {
            Event::Start(step) => {
                let k = started.fetch_add(1, Ordering::Relaxed) + 1;
                bar.set_message(format!("{k}/{total} {name}: {}", step.label));
            }
            Event::End(step, _) => bar.inc((step.estimate * 1e3) as u64),
        };
        let sec = p.run(suite, &progress);
        if how == Progress::Lines {
            let failed = match sec.failed.len() {
                0 => String::new(),
                k => format!(", {k} failed"),
            };
            eprintln!(
                "bwbench: [{}/{n}] {name}: done in {:.0} s{failed}",
                i + 1,
                t1.elapsed().as_secs_f64()
            );
        }
        sections.push(sec);
    }
    bar.finish_and_clear();
    sections
}

/// Runs a worker process of an experiment, started by bwbench itself (`__pair` and the
/// like); `None` if `argv` is not a worker's.
fn worker(argv: &[OsString]) -> Option<ExitCode> {
    let main: fn(&[OsString]) -> Result<(), String> = match argv.get(1)?.to_str()? {
        "__pair" => bulkwire_bench::pair::worker_main,
        "__group" => bulkwire_bench::group::worker_main,
        "__bsp" => bulkwire_bench::bspk::worker_main,
        "__coll" => bulkwire_bench::coll::worker_main,
        "__xchg" => bulkwire_bench::xchg::worker_main,
        // The host agent of a job across hosts (the cluster experiment).
        "__agent" => {
            let rest: Vec<String> = argv[2..]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let code = bulkwire_launch::agent::agent_main(&rest);
            return Some(ExitCode::from(code.clamp(0, 255) as u8));
        }
        _ => return None,
    };
    Some(match main(&argv[2..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bwbench worker: {e}");
            bulkwire_bench::jobs::record_failure(&argv[2..], &e);
            ExitCode::FAILURE
        }
    })
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = worker(&argv) {
        return code;
    }
    let matches = command().get_matches();
    if let Some(("profile", m)) = matches.subcommand() {
        return profile(m);
    }
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
        Some("all") | None => experiments::REGISTRY
            .iter()
            .copied()
            .filter(|e| {
                e.in_all() || (args.hosts && [cluster::NAME, fabric::NAME].contains(&e.name()))
            })
            .collect(),
        Some(name) => experiments::find(name).into_iter().collect(),
    };
    // Programs are built and run from here: a fresh private directory, not a name another
    // user of /tmp could have made first.
    let work = match bulkwire_launch::files::fresh_dir(&std::env::temp_dir(), "bwbench-") {
        Ok(w) => w,
        Err(e) => {
            eprintln!("bwbench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let level = match (args.smoke, args.quick) {
        (true, _) => Level::Smoke,
        (false, true) => Level::Quick,
        (false, false) => Level::Full,
    };
    let mut suite = Suite::new(exe, level, work.clone());
    if args.no_mpi {
        suite = suite.without_mpi();
    }
    if let Some(dir) = &args.osu {
        suite = suite.with_osu(dir.clone());
    }
    if !args.only.is_empty() {
        if let Some(bad) = args
            .only
            .iter()
            .find(|p| !fabric::PARTS.contains(&p.as_str()))
        {
            eprintln!(
                "bwbench: --only {bad}: not a part of fabric (one of {})",
                fabric::PARTS.join(", ")
            );
            return ExitCode::FAILURE;
        }
        suite = suite.with_only(args.only.clone());
    }
    let plans: Vec<Box<dyn Prepared>> = chosen.iter().map(|e| e.prepare(&suite)).collect();
    if args.plan {
        print_plan(&plans);
        return ExitCode::SUCCESS;
    }
    let t0 = Instant::now();
    let load = LoadProbe::start();
    let how = if args.no_progress {
        Progress::None
    } else if std::io::stderr().is_terminal() {
        Progress::Bar
    } else {
        Progress::Lines
    };
    let sections = run_all(&suite, plans, how);
    let mpi = match suite.mpi() {
        Ok(m) => m.version.clone(),
        Err(e) => format!("not measured ({e})"),
    };
    let mut machine = Machine::here(&mpi);
    machine.load = load.finish(machine.cores);
    machine.network = cluster::network_line(&sections, &machine.network);
    machine.network = fabric::network_line(&sections, &machine.network);
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
    write(&report, &args.out, args.accept_partial)
}

/// Writes the report into `out` and prints it. Exit status 1 if it cannot be written or
/// an experiment measured nothing, 3 if runs failed (a partial report) unless
/// `accept_partial`, 0 otherwise.
fn write(report: &Report, out: &std::path::Path, accept_partial: bool) -> ExitCode {
    if let Err(e) = report.write(out) {
        eprintln!("bwbench: cannot write the report to {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("{}", report.markdown());
    println!(
        "Report written to {}/report.md (data: results.json, charts: *.svg).",
        out.display()
    );
    match report.status() {
        Status::Whole => {}
        Status::Empty => return ExitCode::FAILURE,
        Status::Partial { runs, undecided } if !accept_partial => {
            eprintln!(
                "bwbench: {runs} run{} failed ({undecided} target{} not decided because of \
                 it): the report is partial; its summary names each. --accept-partial makes \
                 this exit 0.",
                if runs == 1 { "" } else { "s" },
                if undecided == 1 { "" } else { "s" },
            );
            return ExitCode::from(3);
        }
        Status::Partial { .. } => {}
    }
    ExitCode::SUCCESS
}
