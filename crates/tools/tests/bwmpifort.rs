//! `bwmpifort` from the build tree: it compiles the `mpi` module for gfortran into a cache
//! directory once (a second call finds it there), shows the flags build systems ask for,
//! builds a program that uses the module in one file and `mpif.h` in another, and that
//! program runs under `bsprun -n 2`. Without gfortran, or without `libbulkwire.a` beside
//! the wrapper (`cargo build -p bulkwire-capi`), it says so and checks nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BWMPIFORT: &str = env!("CARGO_BIN_EXE_bwmpifort");
const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");

const MAIN: &str = "program hello
    use mpi
    implicit none
    integer :: ierr, rank, size, total
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
    call add_ranks(rank, total)
    if (rank == 0) print '(a,i0,a,i0)', 'fortran size ', size, ' sum ', total
    call MPI_Finalize(ierr)
end program hello
";

/// Fixed form, with `mpif.h`.
const HELPER: &str = "      SUBROUTINE ADD_RANKS(RANK, TOTAL)
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER RANK, TOTAL, IERR
      CALL MPI_ALLREDUCE(RANK, TOTAL, 1, MPI_INTEGER, MPI_SUM,
     &                   MPI_COMM_WORLD, IERR)
      END
";

/// A directory of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `bwmpifort` with a cache directory of the test's own and no compiler variables.
fn wrapper(cache: &Path) -> Command {
    let mut c = Command::new(BWMPIFORT);
    for k in ["FC", "BWMPIFORT_FC", "BULKWIRE_LIB_DIR"] {
        c.env_remove(k);
    }
    c.env("XDG_CACHE_HOME", cache);
    c
}

fn ok(mut c: Command, what: &str) -> Output {
    let o = c.stdin(Stdio::null()).output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

#[test]
fn bwmpifort_caches_the_module_and_builds_a_program_that_runs() {
    if Command::new("gfortran").arg("--version").output().is_err() {
        eprintln!("skipped: gfortran is not installed");
        return;
    }
    let lib = Path::new(BWMPIFORT).with_file_name("libbulkwire.a");
    if !lib.is_file() {
        eprintln!(
            "skipped: {} is not built (cargo build -p bulkwire-capi)",
            lib.display()
        );
        return;
    }
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bwmpifort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _scratch = Scratch(dir.clone());
    let cache = dir.join("cache");

    // The flags: the headers' directory, the module's, and the mismatch allowance.
    let show = |what: &str| {
        let mut c = wrapper(&cache);
        c.arg(what);
        String::from_utf8(ok(c, what).stdout).unwrap()
    };
    let compile = show("-showme:compile");
    let modules: Vec<&str> = compile
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("-I"))
        .filter(|d| d.contains("mpi-mod-"))
        .collect();
    assert_eq!(modules.len(), 1, "{compile}");
    let module_dir = PathBuf::from(modules[0]);
    assert!(module_dir.starts_with(&cache), "{compile}");
    assert!(module_dir.join("mpi.mod").is_file(), "{compile}");
    assert!(compile.contains("-fallow-argument-mismatch"), "{compile}");
    let stamp = std::fs::metadata(module_dir.join("mpi.mod"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(show("-showme:compile"), compile, "a second call differs");
    let again = std::fs::metadata(module_dir.join("mpi.mod"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(stamp, again, "the module was compiled again");
    let link = show("-showme:link");
    assert!(
        link.contains("libbulkwire.a") && link.contains("-lgfortran"),
        "{link}"
    );

    // A program of two files, built and run.
    std::fs::write(dir.join("hello.f90"), MAIN).unwrap();
    std::fs::write(dir.join("helper.f"), HELPER).unwrap();
    let mut c = wrapper(&cache);
    c.current_dir(&dir)
        .args(["-O1", "hello.f90", "helper.f", "-o", "hello"]);
    ok(c, "bwmpifort hello.f90 helper.f");
    let start = Instant::now();
    let mut c = Command::new(BSPRUN);
    c.args(["-n", "2", "--timeout", "60"])
        .arg(dir.join("hello"))
        .env_remove("BULKWIRE_NPROCS");
    let o = ok(c, "bsprun -n 2 hello");
    assert!(start.elapsed() < Duration::from_secs(90));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l.trim() == "fortran size 2 sum 1"),
        "{out}"
    );
}

#[test]
fn a_missing_fortran_compiler_is_named() {
    let mut c = Command::new(BWMPIFORT);
    c.env("BWMPIFORT_FC", "/nonexistent/gfortran")
        .args(["x.f90"])
        .stdin(Stdio::null());
    let o = c.output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("$BWMPIFORT_FC = /nonexistent/gfortran was not found"),
        "{err}"
    );
}
