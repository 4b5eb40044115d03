//! How `bwbench` runs an experiment as a job of its own processes: the spec travels to the
//! workers as JSON on their command line, each worker joins the job, and rank 0 writes
//! its result as JSON to a file the parent reads back.

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bulkwire_launch::{Control, LaunchOpts};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::stack::{self, Faults, Stack};

static SERIAL: AtomicU64 = AtomicU64::new(0);

/// One job of worker processes: how many, which worker `mode` (the first argument the
/// binary dispatches on), the stack they run (their environment comes from
/// [`stack::env`]), and how long they may take.
pub struct Job<'a> {
    pub n: u32,
    pub mode: &'a str,
    pub stack: &'a Stack,
    pub faults: &'a Faults,
    pub timeout: Duration,
    /// Where the processes run when they span hosts; `None`: all on this host.
    pub across: Option<&'a Across>,
    /// Settings added to the stack's environment (`BULKWIRE_*` of a row of a table).
    pub env: &'a [(String, String)],
}

/// Where a job's processes run when they span hosts: the launcher runs in network
/// namespace `netns` (a host of the test bed), the ranks on `hosts`' slots, those of other
/// hosts started by `EXE __agent` through the remote shell `rsh`.
#[derive(Clone, Debug)]
pub struct Across {
    pub netns: String,
    pub hosts: Vec<bulkwire_launch::HostSlots>,
    pub rsh: Vec<OsString>,
    /// The CPUs the launcher and this host's ranks run on (`None`: the caller's).
    pub cpus: Option<Vec<usize>>,
}

/// Runs `job` as processes of `exe` with `spec`; returns what rank 0 wrote.
pub fn run<S: Serialize, R: DeserializeOwned>(
    exe: &Path,
    job: &Job<'_>,
    spec: &S,
) -> Result<R, String> {
    let out = std::env::temp_dir().join(format!(
        "bwbench-{}-{}.json",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
    // The names in the shared temporary directory are predictable: create both files here,
    // exclusively (a link or file another user planted fails the job instead of receiving
    // the workers' writes), for the workers to write into.
    for p in [out.clone(), errors_of(&out)] {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let args: Vec<OsString> = vec![job.mode.into(), json.into(), out.clone().into()];
    let opts = LaunchOpts {
        timeout: Some(job.timeout),
        report: Some("bwbench".into()),
        env: stack::env(job.stack, job.faults)
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .chain(job.env.iter().map(|(k, v)| (k.into(), v.into())))
            .collect(),
        ..LaunchOpts::default()
    };
    let outcome = match job.across {
        None => bulkwire_launch::launch(job.n, exe, &args, &opts).map_err(|e| e.to_string())?,
        Some(a) => launch_across(job.n, exe, args, opts, a)?,
    };
    let result = std::fs::read(&out);
    let errors = std::fs::read_to_string(errors_of(&out)).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(errors_of(&out));
    if !outcome.success() {
        // The workers' own words first (see `record_failure`), then how they ended.
        let mut why: Vec<String> = errors.lines().map(String::from).collect();
        why.extend(outcome.failures.iter().map(|f| f.to_string()));
        return Err(why.join("; "));
    }
    let bytes = result.map_err(|e| format!("no result ({e})"))?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// Launches `n` processes of `exe` across the hosts of `a`. The launcher runs on a thread
/// inside the first host's namespace, so that its rendezvous server and the processes it
/// starts belong there (and run on that host's CPUs); the other hosts' ranks are started
/// by `exe __agent` through the remote shell.
fn launch_across(
    n: u32,
    exe: &Path,
    args: Vec<OsString>,
    mut opts: LaunchOpts,
    a: &Across,
) -> Result<bulkwire_launch::JobOutcome, String> {
    opts.hosts = a.hosts.clone();
    opts.rsh = a.rsh.clone();
    opts.agent = vec![exe.into(), "__agent".into()];
    // The remote ranks get the settings of this environment, as bsprun's do.
    opts.forward_env = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(|k| k.starts_with("BULKWIRE_")))
        .collect();
    let (exe, ns, cpus) = (exe.to_path_buf(), a.netns.clone(), a.cpus.clone());
    std::thread::spawn(move || {
        enter_netns(&ns)?;
        if let Some(c) = cpus {
            bulkwire_launch::bind::CpuSet::of(&c)
                .apply()
                .map_err(|e| format!("cpus {c:?}: {e}"))?;
        }
        bulkwire_launch::launch(n, &exe, &args, &opts).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the launcher thread panicked".to_string())?
}

/// Moves the calling thread into network namespace `name` (`ip netns add` made it).
fn enter_netns(name: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let path = format!("/var/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns on a namespace descriptor we opened; it moves only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Where the workers of the job writing `out` leave their errors.
fn errors_of(out: &Path) -> PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".err");
    p.into()
}

/// For a worker that failed with `e`: leaves the error where [`run`] finds it (beside the
/// result file its arguments, those after the mode, name), so that the report says why
/// the job failed, not only that a process exited.
pub fn record_failure(args: &[OsString], e: &str) {
    let [_, out] = args else { return };
    let line = format!("{}\n", e.replace('\n', " "));
    // Never through a link: the file is one `run` created in the shared temporary
    // directory.
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(errors_of(Path::new(out)))
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

/// A worker's view of its arguments: the spec and where rank 0 writes the result.
pub struct Worker<S> {
    pub spec: S,
    out: PathBuf,
}

impl<S: DeserializeOwned> Worker<S> {
    /// Parses `args` (those after the mode).
    pub fn parse(args: &[OsString]) -> Result<Worker<S>, String> {
        let [json, out] = args else {
            return Err("usage: MODE SPEC_JSON OUT_PATH".into());
        };
        let spec =
            serde_json::from_str(&json.to_string_lossy()).map_err(|e| format!("bad spec: {e}"))?;
        Ok(Worker {
            spec,
            out: out.into(),
        })
    }

    /// Joins the job this worker was launched in.
    pub fn join(&self) -> Result<Control, String> {
        let env = settings()?.launch.job.ok_or("not started by a launcher")?;
        Control::join(&env).map_err(|e| e.to_string())
    }

    /// Writes the result (call on rank 0 only).
    pub fn write<R: Serialize>(&self, result: &R) -> Result<(), String> {
        let json = serde_json::to_vec_pretty(result).map_err(|e| e.to_string())?;
        bulkwire_launch::files::write_private(&self.out, json).map_err(|e| e.to_string())
    }
}

/// A worker's settings, from the environment its launcher gave it.
pub fn settings() -> Result<bulkwire_config::Settings, String> {
    bulkwire_config::Settings::from_env().map_err(|e| e.to_string())
}

/// A BSP worker's start: its spec, and a BSP section of the launched job's size.
pub fn bsp_worker<S: DeserializeOwned>(
    args: &[OsString],
) -> Result<(Worker<S>, bulkwire_bsp::Bsp), String> {
    let w = Worker::<S>::parse(args)?;
    let s = settings()?;
    let p = s
        .launch
        .job
        .as_ref()
        .ok_or("not started by a launcher")?
        .nprocs;
    let bsp = bulkwire_bsp::Bsp::begin(p, &s.launch, s.bsp).map_err(|e| e.to_string())?;
    Ok((w, bsp))
}
