//! The launchers people already have, as the launcher tests start them (`launchers.rs` for
//! BSPlib programs, `mpi_launchers.rs` for MPI programs): Open MPI's `mpirun`, MPICH's
//! `mpiexec.hydra`, and processes given the environment `srun` gives its tasks. A missing
//! launcher gives `None`, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bulkwire_launch::testing::{self, Out};

pub const LIMIT: Duration = Duration::from_secs(60);

pub fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(cmd))
            .find(|p| p.is_file())
    })
}

/// Open MPI's mpirun with `np` processes of `prog args`, the test's mark passed on.
pub fn mpirun(
    np: u32,
    prog: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(Command, String)> {
    let Some(mpirun) = which("mpirun.openmpi").or_else(|| which("mpirun")) else {
        eprintln!("skipped: Open MPI's mpirun is not installed");
        return None;
    };
    let m = testing::mark();
    let mut c = Command::new(mpirun);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.args([
        "--oversubscribe",
        "--bind-to",
        "none",
        "-x",
        testing::MARK_VAR,
    ]);
    for (k, v) in env {
        c.env(k, v).args(["-x", k]);
    }
    c.arg("-np").arg(np.to_string()).arg(prog).args(args);
    testing::clean(&mut c, &m);
    Some((c, m))
}

/// MPICH's Hydra with `np` processes (it passes the whole environment on).
pub fn hydra(
    np: u32,
    prog: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(Command, String)> {
    let Some(hydra) = which("mpiexec.hydra") else {
        eprintln!("skipped: MPICH's mpiexec.hydra is not installed");
        return None;
    };
    let m = testing::mark();
    let mut c = Command::new(hydra);
    c.arg("-n").arg(np.to_string()).arg(prog).args(args);
    testing::clean(&mut c, &m);
    // Hydra's own variables in the test runner's environment would confuse it.
    c.env_remove("PMI_FD")
        .env_remove("PMI_RANK")
        .env_remove("PMI_SIZE");
    c.envs(env.iter().copied());
    Some((c, m))
}

/// Runs a launcher's command bounded in time; no process of it may outlive it.
pub fn run(c: (Command, String)) -> Out {
    let (mut c, m) = c;
    let out = testing::run(&mut c, LIMIT);
    testing::assert_no_leftovers(&m);
    out
}

/// What srun gives each task when no PMI plugin is asked for, with the user's key that a
/// derived rendezvous needs (srun passes the submitting shell's environment on).
pub fn srun_like(rank: u32, size: u32, job: &str, prog: &Path, m: &str) -> Command {
    let mut c = Command::new(prog);
    testing::clean(&mut c, m);
    c.env("BULKWIRE_SECRET", "5eed".repeat(16))
        .env("SLURM_PROCID", rank.to_string())
        .env("SLURM_NTASKS", size.to_string())
        .env("SLURM_JOB_ID", job)
        .env("SLURM_STEP_ID", "0")
        .env("SLURM_STEP_NODELIST", "localhost")
        .env("SLURM_JOB_NODELIST", "localhost");
    c
}

/// `size` tasks of `prog args` started as srun starts them, each bounded in time; their
/// outputs by rank, once no process of the job is left.
pub fn srun_job(size: u32, job: &str, prog: &Path, args: &[&str]) -> Vec<Out> {
    let m = testing::mark();
    let ts: Vec<_> = (0..size)
        .map(|r| {
            let mut c = srun_like(r, size, job, prog, &m);
            c.args(args);
            std::thread::spawn(move || testing::run(&mut c, LIMIT))
        })
        .collect();
    let outs = ts.into_iter().map(|t| t.join().unwrap()).collect();
    testing::assert_no_leftovers(&m);
    outs
}
