//! `bsprun`: start a bulkwire (BSPlib) job of P processes, on this host or across hosts.
//!
//! ```text
//! bsprun -n 4 ./program args...            four processes, output as it comes
//! bsprun -np 4 ./program args...           the same, as mpirun and mpiexec are called
//! bsprun -n 8 --host a:4,b:4 ./program     ranks 0-3 on host a, 4-7 on b, started
//!                                          through ssh (--rsh CMD, BULKWIRE_RSH)
//! bsprun ./program                         without -n: one process per CPU bsprun may
//!                                          use (with --host or --hostfile: per slot)
//! bsprun --hostfile hosts ./program        Open MPI's hostfile format
//! bsprun -n 8 -H a:4,b:4 -x PATH ./prog    also pass PATH to the ranks on other hosts
//! bsprun -n 4 --tag-output ./program       every line prefixed with its rank: "[3] ..."
//! bsprun -n 4 --timeout 60 ./program       fail the job (status 124) after 60 s
//! bsprun -n 2 --bind none ./program        leave placement to the scheduler (default:
//!                                          each process on its share of the cores)
//! bsprun -n 4 --profile cg.prof ./program  record the BSP cost profile: each process
//!                                          writes cg.prof.<pid> (see bwbench profile)
//! bsprun -n 16 --serve 0.0.0.0:7000        only the rendezvous server, for processes
//!                                          started by srun or mpirun: it prints the
//!                                          BULKWIRE_RENDEZVOUS and BULKWIRE_SECRET_FILE
//!                                          to export to them
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
//! `BULKWIRE_SECRET` (a fresh secret per job, in the environment only) and `BULKWIRE_JOB`.
//! Other hosts' agents get the secret on their standard input. Rank 0 gets bsprun's standard input. On other
//! hosts, bsprun's `--agent` (the same path there) starts the ranks: they get the
//! `BULKWIRE_*` settings of bsprun's environment and the variables named with `-x`, and
//! run in bsprun's working directory when the host has it.
//!
//! Exit status: 0 when every process finished and exited 0; otherwise that of the first
//! failure: the failed process's exit status, 128 + signal for a process killed by a
//! signal (or bsprun interrupted), 124 for `--timeout`, 1 for an abort; 127/126 when the
//! program can't be found/executed, 2 for other launch errors.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bulkwire_launch::{
    HostSlots, LaunchError, LaunchOpts, Placement, Secret, Server, ServerConfig, launch,
    write_key_file,
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "bsprun",
    version,
    about = "Start a bulkwire (BSPlib) job of P processes, on this host or across hosts",
    after_help = "Across hosts, each other host runs `bsprun --agent` (bsprun must be at the \
                  same path there), started through the remote shell. --serve runs only the \
                  rendezvous, for processes another launcher starts; srun, mpirun and \
                  mpiexec need none (the job forms through their PMI or PMIx)."
)]
struct Args {
    /// Number of processes. Default: the slots of --host or --hostfile, else the CPUs
    /// bsprun may run on (its CPU affinity, within a cgroup's CPU quota). Required with
    /// --serve.
    #[arg(short = 'n', long = "nprocs", value_name = "P")]
    nprocs: Option<u32>,

    /// Hosts and their slots, as mpirun takes them: a:4,b:4 (a host without :N has one
    /// slot). Ranks fill the slots in order. May be repeated.
    #[arg(short = 'H', long = "host", value_name = "LIST")]
    host: Vec<String>,

    /// A file of hosts in Open MPI's format: "host slots=N" per line, # comments.
    #[arg(long, value_name = "FILE", conflicts_with = "host")]
    hostfile: Option<std::path::PathBuf>,

    /// The remote shell for other hosts, called as CMD HOST COMMAND... Default:
    /// BULKWIRE_RSH, else ssh.
    #[arg(long, value_name = "CMD")]
    rsh: Option<String>,

    /// Where the rendezvous listens (host:port, port 0 for any). Default: loopback for
    /// one host, else this machine's address on the route to the other hosts.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Pass the variable NAME (with its value here, or NAME=VALUE) to every process, also
    /// on other hosts. May be repeated.
    #[arg(short = 'x', value_name = "NAME[=VALUE]")]
    export: Vec<String>,

    /// Fail the job if its processes have not all joined SECS seconds after the first one
    /// did. Default: BULKWIRE_JOIN_TIMEOUT, else 60.
    #[arg(long, value_name = "SECS")]
    join_timeout: Option<f64>,

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

    /// With --serve: where to write the job's fresh secret (a new file, mode 0600; default
    /// ~/.config/bulkwire/serve-PORT.secret), removed when the server ends. Give it to the
    /// processes as BULKWIRE_SECRET_FILE.
    #[arg(long, value_name = "PATH", requires = "serve")]
    secret_file: Option<PathBuf>,

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
    // The host agent of a multi-host job, started by the launcher on another host.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--agent") {
        return ExitCode::from(bulkwire_launch::agent::agent_main(&argv[1..]).clamp(0, 255) as u8);
    }
    let a = Args::parse_from(mpirun_forms(std::env::args_os().collect()));
    match run(a) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err((code, msg)) => {
            eprintln!("bsprun: {msg}");
            ExitCode::from(code)
        }
    }
}

/// mpirun's and mpiexec's `-np P` (also `--np P`, `-np=P`) as `-n P`, so that scripts and
/// build systems that call `mpirun -np 4 ./prog` start the same job (clap would read
/// `-np` as `-n p`). Only bsprun's own options are rewritten: everything from the program
/// on (the first word that is neither an option nor an option's value) is the program's.
fn mpirun_forms(argv: Vec<OsString>) -> Vec<OsString> {
    use clap::CommandFactory;
    let cmd = Args::command();
    // The options whose value is the next word.
    let with_value: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && a.get_action().takes_values())
        .filter(|a| a.get_num_args().is_none_or(|n| n.min_values() > 0))
        .flat_map(|a| {
            a.get_short()
                .map(|c| format!("-{c}"))
                .into_iter()
                .chain(a.get_long().map(|l| format!("--{l}")))
        })
        .collect();
    let mut out = Vec::with_capacity(argv.len());
    let mut words = argv.into_iter();
    out.extend(words.next());
    let mut value_next = false;
    while let Some(w) = words.next() {
        let s = w.to_string_lossy();
        if value_next {
            value_next = false;
        } else if s == "-np" || s == "--np" {
            out.push("-n".into());
            value_next = true;
            continue;
        } else if let Some(v) = s.strip_prefix("-np=").or_else(|| s.strip_prefix("--np=")) {
            out.push(format!("--nprocs={v}").into());
            continue;
        } else if s == "--" || !s.starts_with('-') {
            out.push(w);
            out.extend(words);
            break;
        } else if with_value.iter().any(|o| *o == s) {
            value_next = true;
        }
        out.push(w);
    }
    out
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
    let hosts = hosts(&a).map_err(|e| usage(e.to_string()))?;
    if a.serve.is_some() && a.nprocs.is_none() {
        return Err(usage(
            "--serve needs -n P: the processes another launcher starts".into(),
        ));
    }
    // Without -n, as Open MPI's mpirun: every slot given, else every CPU of this host
    // that bsprun may use (a job of its own ranks runs here).
    let nprocs = a.nprocs.unwrap_or_else(|| {
        if hosts.is_empty() {
            bulkwire_launch::available_cpus() as u32
        } else {
            bulkwire_launch::hosts::total_slots(&hosts)
        }
    });
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
    let join_timeout = match a.join_timeout {
        Some(t) => secs("--join-timeout", t).map_err(usage)?,
        None => settings.launch.join_timeout,
    };

    if let Some(addr) = a.serve {
        return serve(addr, nprocs, a.secret_file.as_deref(), |cfg| {
            cfg.report = Some("bsprun".into());
            cfg.timeout = timeout;
            cfg.kill_grace = kill_grace;
            cfg.join_timeout = Some(join_timeout);
        });
    }

    if hosts.is_empty() && nprocs > MAX_LOCAL {
        return Err(usage(format!(
            "-n {nprocs}: without --host, bsprun starts every process on this host, and at \
             most {MAX_LOCAL} there (each process holds a link to every other)"
        )));
    }
    if let Some(h) = hosts.iter().find(|h| h.slots > MAX_LOCAL) {
        return Err(usage(format!(
            "host {} has {} slots: at most {MAX_LOCAL} processes per host",
            h.name, h.slots
        )));
    }
    let mut exports = exports(&a.export).map_err(usage)?;
    // --profile is BULKWIRE_PROFILE for every rank, wherever it runs.
    exports.extend(
        a.profile
            .iter()
            .map(|f| ("BULKWIRE_PROFILE".into(), f.clone().into_os_string())),
    );
    let rsh = match &a.rsh {
        Some(r) => r.split_whitespace().map(String::from).collect(),
        None => settings.launch.rsh.clone(),
    };
    if rsh.is_empty() {
        return Err(usage("--rsh: empty command".into()));
    }
    let exe = std::env::current_exe().map_err(|e| (2, format!("cannot find itself: {e}")))?;
    let (program, args) = a
        .command
        .split_first()
        .ok_or_else(|| usage("no program given".into()))?;
    let placement = a.bind.unwrap_or(settings.launch.placement);
    let opts = LaunchOpts {
        placement,
        tag_output: a.tag_output,
        timeout,
        kill_grace,
        join_timeout: Some(join_timeout),
        report: Some("bsprun".into()),
        stdin_to_rank0: true,
        forward_signals: true,
        listen: a.listen,
        env: exports,
        forward_env: forwarded(),
        rsh: rsh.into_iter().map(Into::into).collect(),
        agent: vec![exe.into_os_string(), "--agent".into()],
        cwd: std::env::current_dir().map_or_else(|_| "/".into(), |d| d.into_os_string()),
        hosts,
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

/// `--serve`: a server for a job of its own fresh secret, written to a new private file
/// (never printed: a terminal's scrollback or a log is no place for it) whose path is
/// printed with the address, and removed when the job ends.
fn serve(
    addr: SocketAddr,
    nprocs: u32,
    file: Option<&std::path::Path>,
    set: impl FnOnce(&mut ServerConfig),
) -> Result<i32, (u8, String)> {
    let secret = Secret::generate();
    let mut cfg = ServerConfig::new(nprocs, secret.clone());
    set(&mut cfg);
    let server = Server::bind(addr, cfg).map_err(|e| (2, format!("--serve {addr}: {e}")))?;
    let port = server.local_addr().port();
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => {
            let home = std::env::var_os("HOME")
                .ok_or_else(|| (2, "--serve: HOME is not set; give --secret-file".into()))?;
            let dir = PathBuf::from(home).join(".config/bulkwire");
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| (2, format!("--serve: cannot create {}: {e}", dir.display())))?;
            dir.join(format!("serve-{port}.secret"))
        }
    };
    write_key_file(&path, &secret).map_err(|e| {
        (
            2,
            format!(
                "--serve: cannot create the secret file {} (it must not exist yet): {e}",
                path.display()
            ),
        )
    })?;
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    println!("BULKWIRE_RENDEZVOUS={}", server.local_addr());
    println!("BULKWIRE_SECRET_FILE={}", path.display());
    let code = server.run().exit_code();
    let _ = std::fs::remove_file(&path);
    Ok(code)
}

/// The hosts of `--host` or `--hostfile`; empty for this host alone.
fn hosts(a: &Args) -> Result<Vec<HostSlots>, LaunchError> {
    if let Some(path) = &a.hostfile {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LaunchError::Usage(format!("--hostfile {}: {e}", path.display())))?;
        return bulkwire_launch::hosts::parse_hostfile(&text, &path.display().to_string());
    }
    let mut all: Vec<HostSlots> = Vec::new();
    for list in &a.host {
        for h in bulkwire_launch::hosts::parse_host_list(list)? {
            match all.iter_mut().find(|x| x.name == h.name) {
                Some(x) => x.slots += h.slots,
                None => all.push(h),
            }
        }
    }
    Ok(all)
}

/// The `-x` variables with their values (`NAME=VALUE`, or `NAME` with its value here).
fn exports(names: &[String]) -> Result<Vec<(OsString, OsString)>, String> {
    names
        .iter()
        .map(|x| match x.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
            Some(_) => Err(format!("-x {x:?}: no variable name")),
            None => std::env::var_os(x)
                .map(|v| (x.into(), v))
                .ok_or_else(|| format!("-x {x}: {x} is not set here (use -x {x}=VALUE)")),
        })
        .collect()
}

/// The `BULKWIRE_*` settings of this environment, for the ranks on other hosts; the job's
/// own variables and this host's identity are set per host.
fn forwarded() -> Vec<(OsString, OsString)> {
    const PER_HOST: [&str; 7] = [
        "BULKWIRE_RANK",
        "BULKWIRE_NPROCS",
        "BULKWIRE_RENDEZVOUS",
        "BULKWIRE_COOKIE",
        "BULKWIRE_JOB",
        "BULKWIRE_HOST_ID",
        "BULKWIRE_HOST_CPUS",
    ];
    std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with("BULKWIRE_") && !PER_HOST.contains(&k))
        })
        .collect()
}

/// The terminal's width for the variable table (`COLUMNS`, else 80).
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&w| w >= 40)
        .unwrap_or(80)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forms(words: &[&str]) -> Vec<String> {
        mpirun_forms(words.iter().map(OsString::from).collect())
            .into_iter()
            .map(|w| w.into_string().unwrap())
            .collect()
    }

    #[test]
    fn mpiruns_np_is_bsprun_n_before_the_program_only() {
        assert_eq!(
            forms(&["bsprun", "-np", "4", "./a"]),
            ["bsprun", "-n", "4", "./a"]
        );
        assert_eq!(
            forms(&["bsprun", "--np", "2", "./a"]),
            ["bsprun", "-n", "2", "./a"]
        );
        assert_eq!(
            forms(&["bsprun", "-np=3", "./a"]),
            ["bsprun", "--nprocs=3", "./a"]
        );
        // The program's own -np stays; so does an option's value that looks like one.
        assert_eq!(
            forms(&["bsprun", "-n", "2", "./a", "-np", "5"]),
            ["bsprun", "-n", "2", "./a", "-np", "5"]
        );
        assert_eq!(
            forms(&["bsprun", "-x", "-np", "-np", "2", "./a"]),
            ["bsprun", "-x", "-np", "-n", "2", "./a"]
        );
        assert_eq!(
            forms(&["bsprun", "--timeout", "9", "-np", "2", "--", "./a", "-np"]),
            ["bsprun", "--timeout", "9", "-n", "2", "--", "./a", "-np"]
        );
        let a = Args::parse_from(mpirun_forms(
            ["bsprun", "-np", "4", "./a", "-x"]
                .map(OsString::from)
                .to_vec(),
        ));
        assert_eq!(a.nprocs, Some(4));
        assert_eq!(a.command, ["./a", "-x"].map(OsString::from));
    }
}
