//! `bsprun`: start a bulkwire (BSPlib) job of P processes on this host.
//!
//! ```text
//! bsprun -n 4 ./program args...            four processes, output as it comes
//! bsprun -n 4 --tag-output ./program       every line prefixed with its rank: "[3] ..."
//! bsprun -n 4 --timeout 60 ./program       fail the job (status 124) after 60 s
//! bsprun -n 2 --bind none ./program        leave placement to the scheduler (default:
//!                                          each process on its share of the cores)
//! bsprun -n 4 --profile cg.prof ./program  record the BSP cost profile: each process
//!                                          writes cg.prof.<pid> (see bwbench profile)
//! bsprun -n 16 --serve 0.0.0.0:7000        only the rendezvous server, for processes
//!                                          started by srun or mpirun (export
//!                                          BULKWIRE_RENDEZVOUS=thishost:7000 to them)
//! bsprun --help-env                        every BULKWIRE_* variable, what it accepts,
//!                                          its default (--help-env=markdown: the table
//!                                          of docs/configuration.md)
//! ```
//!
//! bsprun reads the `BULKWIRE_*` variables first, so that a bad value fails here, once,
//! naming the variable, rather than in every process.
//!
//! The processes inherit bsprun's environment (so `BULKWIRE_PROTOCOL`, `BULKWIRE_FAULTS`...
//! reach them) plus the job's `BULKWIRE_RANK`, `BULKWIRE_NPROCS`, `BULKWIRE_RENDEZVOUS`,
//! `BULKWIRE_COOKIE` and `BULKWIRE_JOB`. Rank 0 gets bsprun's standard input.
//!
//! Exit status: 0 when every process finished and exited 0; otherwise that of the first
//! failure: the failed process's exit status, 128 + signal for a process killed by a
//! signal (or bsprun interrupted), 124 for `--timeout`, 1 for an abort; 127/126 when the
//! program can't be found/executed, 2 for other launch errors.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bulkwire_launch::{
    LaunchError, LaunchOpts, Placement, Server, ServerConfig, cookie_from_job, job_id_from_name,
    launch,
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "bsprun",
    version,
    about = "Start a bulkwire (BSPlib) job of P processes",
    after_help = "Multi-host launching (--hosts, over ssh) is not implemented yet; --serve runs \
                  the rendezvous for processes another launcher (srun, mpirun) starts."
)]
struct Args {
    /// Number of processes.
    #[arg(
        short = 'n',
        long = "nprocs",
        value_name = "P",
        required_unless_present = "help_env"
    )]
    nprocs: Option<u32>,

    /// Print every BULKWIRE_* variable (what it accepts, its default, what it does) and
    /// exit; FORMAT is text (the default) or markdown.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "text",
          value_parser = ["text", "markdown"])]
    help_env: Option<String>,

    /// Prefix every output line with its rank, "[3] ...".
    #[arg(long)]
    tag_output: bool,

    /// Fail the job if it runs longer than SECS seconds (exit status 124).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,

    /// Where the processes run: "share" gives each an equal share of the cores bsprun may
    /// use (whole cores first; nothing is bound when they outnumber the CPUs), "none"
    /// leaves them to the scheduler. Default: BULKWIRE_BIND, else share.
    #[arg(long, value_name = "HOW", value_parser = parse_bind)]
    bind: Option<Placement>,

    /// Record the BSP cost profile of every superstep (BULKWIRE_PROFILE=FILE): each process
    /// writes FILE.<pid> at bsp_end; `bwbench profile FILE` reads them.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,

    /// After a failure, seconds between SIGTERM and SIGKILL for the remaining processes.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    kill_grace: f64,

    /// Run only the rendezvous server, listening on ADDR (host:port), for P processes
    /// started by another launcher with BULKWIRE_RENDEZVOUS pointing here.
    #[arg(long, value_name = "ADDR", conflicts_with = "command")]
    serve: Option<SocketAddr>,

    /// With --serve: the job id the processes derive their cookie from (BULKWIRE_JOB, or
    /// Slurm's "slurm:JOBID.STEPID"); without it the first process's cookie is adopted.
    #[arg(long, value_name = "ID", requires = "serve")]
    job: Option<String>,

    /// The program to run, then its arguments (everything after PROGRAM is passed on
    /// untouched, options included).
    #[arg(
        value_name = "PROGRAM [ARGS]",
        required_unless_present_any = ["serve", "help_env"],
        trailing_var_arg = true,
        num_args = 1..
    )]
    command: Vec<OsString>,
}

/// Most processes bsprun starts on this host: each holds a link to every other (at 1024,
/// about a million shared-memory rings), and past this the kernel refuses processes long
/// before a job could run.
const MAX_LOCAL: u32 = 1024;

fn parse_bind(s: &str) -> Result<Placement, String> {
    Placement::parse(s).ok_or_else(|| format!("{s:?}: expected share or none"))
}

fn secs(what: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("bad {what}: {s}"))
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(a) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err((code, msg)) => {
            eprintln!("bsprun: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(a: Args) -> Result<i32, (u8, String)> {
    let usage = |m: String| (2u8, m);
    if let Some(format) = a.help_env {
        let table = match format.as_str() {
            "markdown" => bulkwire_config::vars::markdown(),
            _ => bulkwire_config::vars::text(terminal_width()),
        };
        print!("{table}");
        return Ok(0);
    }
    let nprocs = a.nprocs.unwrap_or(0);
    if nprocs == 0 {
        return Err(usage("-n must be at least 1".into()));
    }
    let settings = bulkwire_config::Settings::from_env().map_err(|e| usage(e.to_string()))?;
    for w in &settings.warnings {
        eprintln!("bsprun: warning: {w}");
    }
    let timeout = a
        .timeout
        .map(|t| secs("--timeout", t))
        .transpose()
        .map_err(usage)?;
    let kill_grace = secs("--kill-grace", a.kill_grace).map_err(usage)?;

    if let Some(addr) = a.serve {
        let mut cfg = ServerConfig::new(nprocs);
        cfg.report = Some("bsprun".into());
        cfg.timeout = timeout;
        cfg.kill_grace = kill_grace;
        cfg.job = a.job.as_deref().map(|j| {
            let id = job_id_from_name(j);
            (cookie_from_job(id), id)
        });
        let server = Server::bind(addr, cfg).map_err(|e| (2, format!("--serve {addr}: {e}")))?;
        println!("BULKWIRE_RENDEZVOUS={}", server.local_addr());
        return Ok(server.run().exit_code());
    }

    if nprocs > MAX_LOCAL {
        return Err(usage(format!(
            "-n {nprocs}: bsprun starts every process on this host, and at most {MAX_LOCAL} \
             there (each process holds a link to every other)"
        )));
    }
    let (program, args) = a
        .command
        .split_first()
        .ok_or_else(|| usage("no program given".into()))?;
    let placement = a.bind.unwrap_or(settings.launch.placement);
    let env = a
        .profile
        .iter()
        .map(|f| ("BULKWIRE_PROFILE".into(), f.clone().into_os_string()))
        .collect();
    let opts = LaunchOpts {
        placement,
        tag_output: a.tag_output,
        timeout,
        kill_grace,
        report: Some("bsprun".into()),
        stdin_to_rank0: true,
        forward_signals: true,
        env,
        ..LaunchOpts::default()
    };
    match launch(nprocs, program, args, &opts) {
        Ok(outcome) => Ok(outcome.exit_code()),
        Err(e @ LaunchError::Spawn { .. }) => {
            let code = match &e {
                LaunchError::Spawn { source, .. }
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    126
                }
                LaunchError::Spawn { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    127
                }
                _ => 2,
            };
            Err((code, e.to_string()))
        }
        Err(e) => Err((2, e.to_string())),
    }
}

/// The terminal's width for the variable table (`COLUMNS`, else 80).
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&w| w >= 40)
        .unwrap_or(80)
}
