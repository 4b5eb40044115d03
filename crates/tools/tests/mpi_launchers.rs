//! MPI programs started by the launchers people already have, as `bulkwire.h` programs
//! are (`launchers.rs`): Open MPI's `mpirun -np 4`, MPICH's `mpiexec.hydra -n 4` and
//! processes given the environment `srun` gives its tasks. `tests/c/mpi_job.c`, built by
//! `bwmpicc`, must form one job of 4 (`MPI_Comm_size` 4, every rank once), whose
//! allreduce, ring of `MPI_Sendrecv` and gather at rank 0 give the right answers; a rank
//! that dies fails the job, named. A launcher that is not installed, or a build tree
//! without `libbulkwire.a` (`cargo build -p bulkwire-capi`), is skipped with a message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

#[path = "common/launch.rs"]
mod launch;

use bulkwire_launch::testing::Out;
use launch::{hydra, mpirun, run, srun_job};

const BWMPICC: &str = env!("CARGO_BIN_EXE_bwmpicc");

/// `tests/c/mpi_job.c` built by `bwmpicc` once per run; `None` (saying why) without
/// `libbulkwire.a` beside the wrapper.
fn program() -> Option<PathBuf> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = g.as_ref() {
        return Some(p.clone());
    }
    let lib = Path::new(BWMPICC).with_file_name("libbulkwire.a");
    if !lib.is_file() {
        eprintln!(
            "skipped: {} is not built (cargo build -p bulkwire-capi)",
            lib.display()
        );
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_job.c");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi_launchers-mpi_job");
    let o = Command::new(BWMPICC)
        .env_remove("BULKWIRE_LIB_DIR")
        .arg("-O2")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bwmpicc mpi_job.c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    *g = Some(out.clone());
    Some(out)
}

/// The job's output is one job of 4: each rank's line once, and rank 0's verdict.
fn one_job_of_4(stdout: &str, what: &str) {
    let count = |l: &str| stdout.lines().filter(|x| *x == l).count();
    for r in 0..4 {
        assert_eq!(count(&format!("rank {r} of 4")), 1, "{what}: {stdout}");
    }
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("rank ")).count(),
        4,
        "{what}: {stdout}"
    );
    assert_eq!(count("mpi_job ok p=4"), 1, "{what}: {stdout}");
    assert!(!stdout.contains("FAILED"), "{what}: {stdout}");
}

type Launch = fn(u32, &Path, &[&str], &[(&str, &str)]) -> Option<(Command, String)>;

#[test]
fn an_mpi_program_forms_one_job_under_mpirun_and_mpiexec() {
    let Some(prog) = program() else { return };
    for (what, launch) in [
        ("mpirun -np 4", mpirun as Launch),
        ("mpiexec.hydra -n 4", hydra),
    ] {
        let Some(c) = launch(4, &prog, &[], &[]) else {
            continue;
        };
        let o = run(c);
        assert_eq!(o.code, Some(0), "{what}: {o:?}");
        one_job_of_4(&o.stdout, what);
    }
}

#[test]
fn an_mpi_program_forms_one_job_as_srun_starts_it() {
    let Some(prog) = program() else { return };
    let job = format!("{}m", std::process::id());
    let outs = srun_job(4, &job, &prog, &[]);
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.code, Some(0), "rank {r}: {o:?}");
    }
    let all: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    one_job_of_4(&all, "srun's environment");
    // Each task prints its own rank: task r is MPI rank r.
    for (r, o) in outs.iter().enumerate() {
        assert!(o.stdout.contains(&format!("rank {r} of 4\n")), "{o:?}");
    }
}

/// Rank 3 kills itself while the others are in collectives: the job fails and its output
/// names rank 3 (`names`: by the launcher's message or by the rendezvous in rank 0), and
/// no survivor goes on as if nothing had happened.
fn a_death(what: &str, names: &str, o: &Out) {
    assert!(o.code.is_some_and(|c| c != 0), "{what}: {o:?}");
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(all.contains(names), "{what}: {all}");
    assert!(!o.stdout.contains("not reached"), "{what}: {o:?}");
}

#[test]
fn a_rank_of_an_mpi_job_that_dies_is_named() {
    let Some(prog) = program() else { return };
    if let Some(c) = mpirun(4, &prog, &["die", "3"], &[]) {
        // Open MPI names the rank itself ("process rank 3 ... exited on signal 9").
        a_death("mpirun -np 4", "rank 3", &run(c));
    }
    if let Some(c) = hydra(4, &prog, &["die", "3"], &[]) {
        // Hydra names the signal only, and kills the others before the rendezvous can.
        a_death("mpiexec.hydra -n 4", "signal 9", &run(c));
    }
    let job = format!("{}md", std::process::id());
    let outs = srun_job(4, &job, &prog, &["die", "3"]);
    assert!(outs.iter().all(|o| o.code != Some(0)), "{outs:?}");
    // Each survivor's MPI call fails naming rank 3 (MPI_ERRORS_ARE_FATAL's line), and
    // the rendezvous in rank 0 says it once.
    let line = "rank 3 lost its control connection before finishing";
    for (r, o) in outs.iter().enumerate().take(3) {
        assert!(o.stderr.contains(line), "rank {r}: {o:?}");
        assert!(o.stderr.contains(&format!("rank {r}: ")), "rank {r}: {o:?}");
    }
    let err: String = outs.iter().map(|o| o.stderr.as_str()).collect();
    let rendezvous = format!("mpi_job: {line}");
    assert!(
        err.lines().filter(|l| l.contains(&rendezvous)).count() <= 1,
        "{err}"
    );
    assert!(
        outs.iter().all(|o| !o.stdout.contains("not reached")),
        "{outs:?}"
    );
}
