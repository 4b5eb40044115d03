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
//!   naming the call and the rank; a dead peer fails a receive instead of hanging;
//! - `distgraph.c`: distributed graph topologies, adjacent and from edges any process
//!   names, weighted and not, and the neighbourhood collectives on them (p = 2, 3, 4);
//! - `profiling.c`: the profiling interface: the program's own `MPI_Send` and
//!   `MPI_Allreduce` replace the library's and reach it through `PMPI_*`, linked with
//!   `libbulkwire.a` and with `libbulkwire.so` (p = 2, 3).
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
    compile_linked(name, tag, &[lib.into()])
}

/// Compiles `tests/c/name.c`, linked with `libs` (the library's arguments).
fn compile_linked(name: &str, tag: &str, libs: &[std::ffi::OsString]) -> Exe {
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
        .args(libs)
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
        assert_every_rank(name, n, &bsprun(&run, n, &exe, &[]));
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
fn distributed_graph_topologies_and_their_neighbourhood_collectives() {
    every_rank_passes("distgraph", &[2, 3, 4]);
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

/// A directory holding `libbulkwire.so` under its SONAME (`libbulkwire.so.0.MINOR` before
/// 1.0, as the loader looks for it), removed when dropped.
struct SoDir(PathBuf);

impl Drop for SoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `libbulkwire.so` beside `lib`, if built and not older than the sources: its directory and
/// the link arguments for it.
fn shared(lib: &Path) -> Option<(SoDir, Vec<std::ffi::OsString>)> {
    let so = lib.with_file_name("libbulkwire.so");
    if std::fs::metadata(&so)
        .and_then(|m| m.modified())
        .map_or(true, |t| t < newest_source())
    {
        eprintln!(
            "skipped: {} is missing or older than crates/mpi/src (cargo build -p bulkwire-capi)",
            so.display()
        );
        return None;
    }
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let abi = if major == "0" {
        format!("0.{}", env!("CARGO_PKG_VERSION_MINOR"))
    } else {
        major.to_string()
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpi-so-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = SoDir(dir.clone());
    for n in [format!("libbulkwire.so.{abi}"), "libbulkwire.so".into()] {
        std::os::unix::fs::symlink(&so, dir.join(n)).unwrap();
    }
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(&dir);
    Some((
        d,
        vec![
            format!("-L{}", dir.display()).into(),
            "-lbulkwire".into(),
            rpath,
        ],
    ))
}

/// Checks every rank's "`name` OK rank=r" line of a run at p = n.
fn assert_every_rank(name: &str, n: u32, r: &Run) {
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

/// A program's own `MPI_Send` and `MPI_Allreduce` intercept its calls and reach the
/// library through `PMPI_*`, with the static library and with the shared one.
#[test]
fn the_programs_own_mpi_functions_intercept_its_calls() {
    let Some((lib, run)) = tools() else { return };
    let exe = compile("profiling", "static", &lib);
    for n in [2, 3] {
        assert_every_rank("profiling", n, &bsprun(&run, n, &exe, &[]));
    }
    let Some((_dir, libs)) = shared(&lib) else {
        return;
    };
    let exe = compile_linked("profiling", "shared", &libs);
    for n in [2, 3] {
        assert_every_rank("profiling", n, &bsprun(&run, n, &exe, &[]));
    }
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
