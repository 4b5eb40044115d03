//! bulkwire's MPI installed the way build systems look for an MPI: `make install-files`
//! puts this build (the test profile's tools and libraries) under a temporary prefix, and
//! then, with `PREFIX/lib/bulkwire/mpi/bin` first in `PATH`:
//!
//! - `mpicc`, `mpicxx`, `mpic++` are the MPI wrappers and answer Open MPI's and MPICH's
//!   questions (`-showme:compile`, `-showme:link`, `-show`, `-compile_info`, `-link_info`)
//!   with the installed header directory and library; `mpirun` and `mpiexec` are `bsprun`
//!   and take `-np P` and `-n P`; `pkg-config` finds `bulkwire-mpi` (and Debian's names
//!   `mpi`, `mpi-c`, `mpi-cxx` in the MPI directory);
//! - an MPI program builds with the installed `mpicc` and runs under `mpirun -np 2`; an
//!   autoconf `configure` run as `CC=mpicc ./configure` finds `mpi.h` and `MPI_Init` and
//!   its Makefile builds the program; CMake's `find_package(MPI)` finds the wrapper and
//!   builds an `MPI::MPI_C` program (each when autoconf or CMake is installed; without them
//!   it says so). These need libbulkwire to carry the MPI layer: a tree whose library
//!   does not says so and checks the rest.
//!
//! Then `make uninstall` removes every file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
/// The C ABI's manifest: libbulkwire carries the MPI layer when it depends on it.
const CAPI_MANIFEST: &str = include_str!("../../capi/Cargo.toml");

/// A BSPlib program: `mpirun` starts bulkwire jobs of any kind.
const BSP_PROGRAM: &str = r#"#include <stdio.h>
#include <bsp.h>
int main(void) {
    bsp_begin(bsp_nprocs());
    if (bsp_pid() == 0) printf("bsp p %d\n", (int)bsp_nprocs());
    bsp_end();
    return 0;
}
"#;

/// An MPI program: each rank sends its rank to rank 0, which sums them with a reduction
/// too.
const MPI_PROGRAM: &str = r#"#include <stdio.h>
#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, sum = 0, got = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        for (int q = 1; q < size; q++) {
            int v;
            MPI_Recv(&v, 1, MPI_INT, q, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            got += v;
        }
    } else {
        MPI_Send(&rank, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    }
    MPI_Reduce(&rank, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("mpi size %d recv %d reduce %d\n", size, got, sum);
    MPI_Finalize();
    return 0;
}
"#;

#[path = "common/installed.rs"]
mod installed;
use installed::{repo, stdout, walk};

/// Runs `c` (bounded in time), returning its output; panics with it if it fails.
fn ok(c: Command, what: &str) -> Output {
    installed::ok_within(c, what, Duration::from_secs(180))
}

fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The environment of a build system's user: the MPI directory first in `PATH`, no
/// `BULKWIRE_` variables (the programs start their own jobs), nothing naming a compiler
/// or a library directory, and a `HOME` of its own (an installed wrapper writes nothing).
struct Env {
    path: OsString,
    home: PathBuf,
}

impl Env {
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars() {
            if k.starts_with("BULKWIRE_")
                || [
                    "CC",
                    "CXX",
                    "BWMPICC_CC",
                    "BWMPICXX_CXX",
                    "XDG_CACHE_HOME",
                    "PKG_CONFIG_PATH",
                ]
                .contains(&k.as_str())
            {
                c.env_remove(k);
            }
        }
        c.env("PATH", &self.path).env("HOME", &self.home);
        c
    }
}

#[test]
fn installed_mpi_names_serve_configure_cmake_pkg_config_and_mpirun() {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpi-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let prefix = root.join("prefix");
    let work = root.join("work");
    let home = root.join("home");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let builddir = Path::new(BSPCC).parent().unwrap();
    let make = |target: &str| {
        let mut c = Command::new("make");
        c.arg("-s")
            .arg("-C")
            .arg(repo())
            .arg(target)
            .arg(format!("PREFIX={}", prefix.display()))
            .arg(format!("BUILDDIR={}", builddir.display()));
        ok(c, &format!("make {target}"));
    };
    make("install-files");

    let mpibin = prefix.join("lib/bulkwire/mpi/bin");
    for (name, tool) in [
        ("mpicc", "bwmpicc"),
        ("mpicxx", "bwmpicxx"),
        ("mpic++", "bwmpicxx"),
        ("mpirun", "bsprun"),
        ("mpiexec", "bsprun"),
    ] {
        let real = std::fs::canonicalize(mpibin.join(name))
            .unwrap_or_else(|e| panic!("{name} not installed: {e}"));
        assert_eq!(
            real,
            std::fs::canonicalize(prefix.join("bin").join(tool)).unwrap(),
            "{name}"
        );
    }
    let mut path = OsString::from(&mpibin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let env = Env {
        path,
        home: home.clone(),
    };
    let include = prefix.join("include/bulkwire-mpi");
    let library = prefix.join("lib/libbulkwire.a");

    // What CMake's FindMPI and other build systems ask, answered on standard output.
    let ask = |tool: &str, opt: &str| -> String {
        let mut c = env.command(tool);
        c.arg(opt);
        stdout(&ok(c, &format!("{tool} {opt}"))).trim().to_string()
    };
    let pkg = |name: &str, dir: &Path| -> String {
        let mut c = env.command("pkg-config");
        c.args(["--cflags", "--libs", name])
            .env("PKG_CONFIG_PATH", dir);
        stdout(&ok(c, &format!("pkg-config {name}")))
            .trim()
            .to_string()
    };
    let inc_flag = format!("-I{}", include.display());
    assert_eq!(ask("mpicc", "-showme:compile"), inc_flag);
    assert_eq!(
        ask("mpicc", "-showme:incdirs"),
        include.display().to_string()
    );
    let link = ask("mpicc", "-showme:link");
    assert!(
        link.starts_with(&library.display().to_string()) && link.ends_with("-ldl"),
        "mpicc -showme:link: {link}"
    );
    assert_eq!(
        ask("mpicc", "-showme:libdirs"),
        prefix.join("lib").display().to_string()
    );
    assert!(ask("mpicc", "-showme:libs").starts_with("bulkwire "));
    for opt in ["-show", "-showme", "-link_info"] {
        let line = ask("mpicxx", opt);
        assert!(
            line.contains(&inc_flag) && line.contains(&library.display().to_string()),
            "mpicxx {opt}: {line}"
        );
    }
    let compile = ask("mpic++", "-compile_info");
    assert!(
        compile.contains(&inc_flag) && !compile.contains("libbulkwire"),
        "mpic++ -compile_info: {compile}"
    );
    assert!(ask("mpicc", "--version").contains("bulkwire"));
    let cflags = pkg("bulkwire-mpi", &prefix.join("lib/pkgconfig"));
    assert!(cflags.contains(&inc_flag) && cflags.contains("-lbulkwire"));
    for name in ["mpi", "mpi-c", "mpi-cxx"] {
        assert_eq!(
            pkg(name, &prefix.join("lib/bulkwire/mpi/pkgconfig")),
            cflags
        );
    }

    // mpirun and mpiexec start bulkwire jobs as mpirun and mpiexec are called.
    let bsp = work.join("bsp.c");
    std::fs::write(&bsp, BSP_PROGRAM).unwrap();
    let prog = work.join("bsp");
    let mut c = env.command(prefix.join("bin/bspcc"));
    c.arg(&bsp).arg("-o").arg(&prog);
    ok(c, "installed bspcc");
    for (launcher, n) in [("mpirun", "-np"), ("mpiexec", "-n"), ("mpirun", "--np")] {
        let mut c = env.command(launcher);
        c.args([n, "3"]).arg(&prog);
        assert_eq!(
            stdout(&ok(c, &format!("{launcher} {n} 3"))),
            "bsp p 3\n",
            "{launcher} {n} 3"
        );
    }

    assert!(include.join("mpi.h").is_file(), "mpi.h not installed");
    if CAPI_MANIFEST.contains("bulkwire-mpi") {
        mpi_programs(&env, &work, &mpibin);
    } else {
        eprintln!(
            "libbulkwire does not link the MPI layer yet (crates/capi): MPI programs not built"
        );
    }

    make("uninstall");
    let left: Vec<PathBuf> = walk(&prefix).into_iter().filter(|p| !p.is_dir()).collect();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
    assert!(
        !prefix.join("lib/bulkwire").exists(),
        "lib/bulkwire left after uninstall"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The MPI program built by the installed `mpicc`, by an autoconf `configure` and by
/// CMake's `find_package(MPI)`, each run by `mpirun -np 2`.
fn mpi_programs(env: &Env, work: &Path, mpibin: &Path) {
    const EXPECT: &str = "mpi size 2 recv 1 reduce 1\n";
    let src = work.join("mpi.c");
    std::fs::write(&src, MPI_PROGRAM).unwrap();
    let run = |prog: &Path, what: &str| {
        let mut c = env.command("mpirun");
        c.args(["-np", "2"]).arg(prog);
        assert_eq!(stdout(&ok(c, what)), EXPECT, "{what}");
    };
    let prog = work.join("mpi");
    let mut c = env.command("mpicc");
    c.arg("-O2").arg(&src).arg("-o").arg(&prog);
    ok(c, "installed mpicc");
    run(&prog, "mpicc's program");

    if has("autoconf") {
        let dir = work.join("configure");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&src, dir.join("mpi.c")).unwrap();
        // What AX_MPI and hand-written checks do: the compiler named by CC compiles and
        // links a program calling MPI_Init, with mpi.h.
        std::fs::write(
            dir.join("configure.ac"),
            "AC_INIT([mpicheck], [1])\nAC_PROG_CC\n\
             AC_CHECK_HEADER([mpi.h], [], [AC_MSG_ERROR([mpi.h not found])])\n\
             AC_CHECK_FUNC([MPI_Init], [], [AC_MSG_ERROR([MPI_Init not found])])\n\
             AC_CONFIG_FILES([Makefile])\nAC_OUTPUT\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("Makefile.in"),
            "CC = @CC@\nCFLAGS = @CFLAGS@\nmpi: mpi.c\n\t$(CC) $(CFLAGS) -o mpi mpi.c\n",
        )
        .unwrap();
        let mut c = env.command("autoconf");
        c.current_dir(&dir);
        ok(c, "autoconf");
        let mut c = env.command("./configure");
        c.current_dir(&dir).env("CC", "mpicc");
        let o = ok(c, "CC=mpicc ./configure");
        assert!(stdout(&o).contains("checking for MPI_Init... yes"));
        let mut c = env.command("make");
        c.current_dir(&dir);
        ok(c, "make of configure's Makefile");
        run(&dir.join("mpi"), "configure's program");
    } else {
        eprintln!("autoconf is not installed: CC=mpicc ./configure is not checked");
    }

    if has("cmake") {
        let proj = work.join("cmake");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(
            proj.join("CMakeLists.txt"),
            "cmake_minimum_required(VERSION 3.13)\nproject(uses_mpi C)\n\
             find_package(MPI REQUIRED COMPONENTS C)\n\
             message(STATUS \"MPI_C_COMPILER=${MPI_C_COMPILER}\")\n\
             add_executable(mpiprog ../mpi.c)\n\
             target_link_libraries(mpiprog PRIVATE MPI::MPI_C)\n",
        )
        .unwrap();
        let build = proj.join("build");
        let mut c = env.command("cmake");
        c.arg("-S").arg(&proj).arg("-B").arg(&build);
        let o = ok(c, "cmake configure with find_package(MPI)");
        let wanted = format!("MPI_C_COMPILER={}", mpibin.join("mpicc").display());
        assert!(
            stdout(&o).contains(&wanted),
            "FindMPI found another MPI:\n{}",
            stdout(&o)
        );
        let mut c = env.command("cmake");
        c.arg("--build").arg(&build);
        ok(c, "cmake build");
        run(&build.join("mpiprog"), "cmake's program");
    } else {
        eprintln!("cmake is not installed: find_package(MPI) is not checked");
    }
}
