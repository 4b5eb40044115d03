//! How `bwbench` runs an experiment as a job of its own processes: the spec travels to the
//! workers as JSON on their command line, each worker joins the job, and rank 0 writes
//! its result as JSON to a file the parent reads back.

use std::ffi::OsString;
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
    let args: Vec<OsString> = vec![job.mode.into(), json.into(), out.clone().into()];
    let opts = LaunchOpts {
        timeout: Some(job.timeout),
        report: Some("bwbench".into()),
        env: stack::env(job.stack, job.faults)
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        ..LaunchOpts::default()
    };
    let outcome = bulkwire_launch::launch(job.n, exe, &args, &opts).map_err(|e| e.to_string())?;
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
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
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
        std::fs::write(&self.out, json).map_err(|e| e.to_string())
    }
}

/// A worker's settings, from the environment its launcher gave it.
pub fn settings() -> Result<bulkwire_config::Settings, String> {
    bulkwire_config::Settings::from_env().map_err(|e| e.to_string())
}
