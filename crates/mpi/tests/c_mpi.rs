//! MPI programs in C, end to end: the programs of `tests/c/` are compiled with the system
//! C compiler (`cc`, or `$CC`) against `include/mpi.h` and the `libbulkwire.a` of this
//! target directory, and run under `bsprun -n P`, bounded in time.
//!
//! - `pt2pt.c`: every send mode, blocking, non-blocking and persistent; wildcards and
//!   order; probes and matched probes; cancel; truncation; `MPI_PROC_NULL`; synchronous
//!   sends completing only once matched; the Wait and Test families (p = 2, 3, 4);
//! - `comm.c`: communicators (dup, split, split_type, create, create_group, free) whose
//!   messages never cross, groups, Cartesian topologies, error handlers, attributes, info
//!   objects, the environment (p = 2, 3, 4);
//! - `intercoll.c`: the collectives on an intercommunicator, rooted ones with `MPI_ROOT`
//!   and `MPI_PROC_NULL`, reductions in the remote group's rank order (p = 2, 3, 5);
//! - `rma_epochs.c`: a lock after a fence epoch without operations, the handler of
//!   `MPI_Win_call_errhandler`, attributes deleted by `MPI_Win_free` (p = 2, 3);
//! - `threads.c`: `MPI_THREAD_MULTIPLE`: four threads per process make communicators at
//!   once and exchange messages with wildcards on them (p = 2, 4);
//! - `fail.c`: an invalid call under `MPI_ERRORS_ARE_FATAL` ends the job with one line
//!   naming the call and the rank; a dead peer fails a receive instead of hanging.
//!
//! `libbulkwire.a` and `bsprun` come from `cargo build -p bulkwire-capi -p bulkwire-tools`
//! (a workspace build makes both); without them, or with a library older than this
//! crate's sources, the tests say so and skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The target directory's build outputs (`target/debug`), from this test's path.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn newest_source() -> SystemTime {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// `libbulkwire.a` and `bsprun`, if built and not older than the sources.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let d = build_dir();
    let lib = d.join("libbulkwire.a");
    let run = d.join("bsprun");
    for p in [&lib, &run] {
        let Ok(m) = std::fs::metadata(p) else {
            eprintln!(
                "skipped: {} is not built (cargo build -p bulkwire-capi -p bulkwire-tools)",
                p.display()
            );
            return None;
        };
        if p == &lib && m.modified().is_ok_and(|t| t < newest_source()) {
            eprintln!(
                "skipped: {} is older than crates/mpi/src (cargo build -p bulkwire-capi -p bulkwire-tools)",
                p.display()
            );
            return None;
        }
    }
    Some((lib, run))
}

/// A compiled program, deleted when dropped.
struct Exe(PathBuf);

impl Drop for Exe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Compiles `tests/c/name.c`; `tag` keeps the executables of tests running at once apart.
fn compile(name: &str, tag: &str, lib: &Path) -> Exe {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mpi-{name}-{tag}-{}", std::process::id()));
    let o = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_DEFAULT_SOURCE",
            "-O1",
            "-I",
        ])
        .arg(here.join("include"))
        .arg(here.join(format!("tests/c/{name}.c")))
        .arg(lib)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-o"])
        .arg(&out)
        .output()
        .expect("run the C compiler");
    assert!(
        o.status.success(),
        "{cc} {name}.c:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Exe(out)
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `bsprun -n n prog args` with no `BULKWIRE_` variables of the caller's, bounded.
fn bsprun(run: &Path, n: u32, prog: &Exe, args: &[&str]) -> Run {
    let mut c = Command::new(run);
    c.args(["-n", &n.to_string(), "--timeout", "60"])
        .arg(&prog.0)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let start = Instant::now();
    let out = c.output().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(90),
        "bsprun outlived its --timeout"
    );
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `name.c` at each p; every rank must print "`name` OK rank=r".
fn every_rank_passes(name: &str, ps: &[u32]) {
    let Some((lib, run)) = tools() else { return };
    let exe = compile(name, "all", &lib);
    for &n in ps {
        let r = bsprun(&run, n, &exe, &[]);
        assert_eq!(
            r.code,
            Some(0),
            "p={n}\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
        for rank in 0..n {
            let want = format!("{name} OK rank={rank}");
            assert!(
                r.stdout.lines().any(|l| l == want),
                "p={n}: no {want:?}\nstdout:\n{}\nstderr:\n{}",
                r.stdout,
                r.stderr
            );
        }
    }
}

#[test]
fn point_to_point() {
    every_rank_passes("pt2pt", &[2, 3, 4]);
}

#[test]
fn communicators_groups_topologies_attributes() {
    every_rank_passes("comm", &[2, 3, 4]);
}

/// Every collective MPI defines on intercommunicators, between the even and odd ranks
/// (groups of 1 and 1, 2 and 1, 3 and 2).
#[test]
fn collectives_on_intercommunicators() {
    every_rank_passes("intercoll", &[2, 3, 5]);
}

/// Window epochs, the window's error handler and its attributes' delete callbacks.
#[test]
fn rma_epochs_errhandlers_and_attributes() {
    every_rank_passes("rma_epochs", &[2, 3]);
}

#[test]
fn threads_make_communicators_and_exchange_messages_at_once() {
    every_rank_passes("threads", &[2, 4]);
}

#[test]
fn an_invalid_call_is_fatal_by_default_and_names_the_call_and_rank() {
    let Some((lib, run)) = tools() else { return };
    let exe = compile("fail", "fatal", &lib);
    let r = bsprun(&run, 2, &exe, &["fatal"]);
    assert_ne!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("MPI_Send: rank 1: destination 9 is outside the communicator (size 2)"),
        "stderr:\n{}",
        r.stderr
    );
    assert!(!r.stdout.contains("not reached"), "{}", r.stdout);
}

#[test]
fn a_dead_peer_fails_the_receive_instead_of_hanging() {
    let Some((lib, run)) = tools() else { return };
    let exe = compile("fail", "dead", &lib);
    let r = bsprun(&run, 2, &exe, &["dead"]);
    assert_ne!(r.code, Some(0), "the job lost a process");
    assert!(
        r.stdout
            .contains("rank 0: receive from the dead rank failed: 58"),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
}

/// The header is valid C++ too (`extern "C"`), where a C++ compiler is installed.
#[test]
fn the_header_compiles_as_cxx() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let src =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpi-h-{}.cpp", std::process::id()));
    std::fs::write(
        &src,
        "#include <mpi.h>\nint main() { MPI_Comm c = MPI_COMM_WORLD; (void)c; return MPI_SUCCESS; }\n",
    )
    .unwrap();
    let o = Command::new(&cxx)
        .args(["-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg(&src)
        .output();
    let _ = std::fs::remove_file(&src);
    match o {
        Err(e) => eprintln!("skipped: no C++ compiler ({cxx}: {e})"),
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
    }
}
