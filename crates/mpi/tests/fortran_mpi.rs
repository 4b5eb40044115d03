//! MPI programs in Fortran, end to end: the `mpi` module (`include/mpi.f90`) is compiled
//! with `gfortran` (or `$FC`) into a temporary directory, the programs of `tests/fortran/`
//! against it (or `include/mpif.h`), linked with the `libbulkwire.a` (or
//! `libbulkwire.so`) of this target directory and run under `bsprun -n P`, bounded in
//! time.
//!
//! - `pt2pt.f90` (`use mpi`): statuses, wildcards, non-blocking calls with 1-based
//!   Waitany indices, probes, communicators, strings with hidden lengths, MPI_Wtime;
//! - `fixed.f` (fixed form, `include 'mpif.h'`): Sendrecv and Sendrecv_replace;
//! - `coll.f90`: collectives, LOGICAL reductions, MAXLOC on MPI_2DOUBLE_PRECISION, a
//!   Fortran operation (`MPI_Op_create`), a non-blocking Iallreduce;
//! - `types.f90`: derived datatypes (a strided row, a struct from MPI_Get_address sent
//!   from MPI_BOTTOM), MPI_Get_count/MPI_Get_elements, MPI_Pack and MPI_Unpack.
//!
//! The programs pass one buffer argument different types (implicit interfaces), which
//! gfortran 10 and later accept with `-fallow-argument-mismatch`, as `bwmpifort` adds.
//!
//! Without gfortran, or without `libbulkwire.a` and `bsprun` (`cargo build -p
//! bulkwire-capi -p bulkwire-tools`), the tests say so and skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The newest of the sources the library's MPI part is built from.
fn newest_source() -> SystemTime {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("src"), here.join("../capi/csrc")]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten())
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn fortran_compiler() -> Option<String> {
    let fc = std::env::var("FC").unwrap_or_else(|_| "gfortran".into());
    match Command::new(&fc).arg("--version").output() {
        Ok(o) if o.status.success() => Some(fc),
        _ => {
            eprintln!("skipped: no Fortran compiler ({fc} --version failed)");
            None
        }
    }
}

/// The Fortran compiler, `libbulkwire.a` and `bsprun`, if there and up to date.
fn tools() -> Option<(String, PathBuf, PathBuf)> {
    let fc = fortran_compiler()?;
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
                "skipped: {} is older than the MPI sources (cargo build -p bulkwire-capi -p bulkwire-tools)",
                p.display()
            );
            return None;
        }
    }
    Some((fc, lib, run))
}

/// A directory of build products, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_ok(c: &mut Command, what: &str) {
    let o = c.output().expect("run the Fortran compiler");
    assert!(
        o.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// How a program is linked.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Static,
    /// With `libbulkwire.so` (the common blocks then live in the program, the library's
    /// references bound to them).
    Shared,
}

/// Compiles the `mpi` module and `tests/fortran/{file}` into an executable.
fn compile(fc: &str, file: &str, lib: &Path, link: Link) -> (Scratch, PathBuf) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "mpif-{}{}-{}",
        file.replace('.', "_"),
        if link == Link::Shared { "-so" } else { "" },
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let scratch = Scratch(dir.clone());
    let include = here.join("include");
    run_ok(
        Command::new(fc)
            .current_dir(&dir)
            .args(["-c", "-I"])
            .arg(&include)
            .arg(include.join("mpi.f90"))
            .arg("-J")
            .arg(&dir),
        "the mpi module",
    );
    let exe = dir.join("prog");
    let mut libs: Vec<std::ffi::OsString> = Vec::new();
    match link {
        Link::Static => libs.push(lib.into()),
        Link::Shared => {
            // The library under its SONAME (libbulkwire.so.0.MINOR before 1.0), as the
            // loader looks for it.
            let major = env!("CARGO_PKG_VERSION_MAJOR");
            let abi = if major == "0" {
                format!("0.{}", env!("CARGO_PKG_VERSION_MINOR"))
            } else {
                major.to_string()
            };
            let so = lib.with_file_name("libbulkwire.so");
            std::os::unix::fs::symlink(&so, dir.join(format!("libbulkwire.so.{abi}"))).unwrap();
            std::os::unix::fs::symlink(&so, dir.join("libbulkwire.so")).unwrap();
            let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
            rpath.push(&dir);
            libs.extend([
                format!("-L{}", dir.display()).into(),
                "-lbulkwire".into(),
                rpath,
            ]);
        }
    }
    run_ok(
        Command::new(fc)
            .current_dir(&dir)
            .args([
                "-O1",
                "-Wall",
                "-fimplicit-none",
                "-fallow-argument-mismatch",
                "-I",
            ])
            .arg(&dir)
            .arg("-I")
            .arg(&include)
            .arg(here.join("tests/fortran").join(file))
            .args(&libs)
            .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-o"])
            .arg(&exe),
        file,
    );
    (scratch, exe)
}

/// Runs `tests/fortran/{file}` at each p; every rank must print "`name` OK rank=r".
fn every_rank_passes(file: &str, ps: &[u32]) {
    every_rank_passes_linked(file, ps, Link::Static);
}

fn every_rank_passes_linked(file: &str, ps: &[u32], link: Link) {
    let Some((fc, lib, run)) = tools() else {
        return;
    };
    if link == Link::Shared {
        let so = lib.with_file_name("libbulkwire.so");
        if std::fs::metadata(&so)
            .and_then(|m| m.modified())
            .map_or(true, |t| t < newest_source())
        {
            eprintln!(
                "skipped: {} is missing or older than the MPI sources (cargo build -p bulkwire-capi)",
                so.display()
            );
            return;
        }
    }
    let name = file.split('.').next().unwrap();
    let (_scratch, exe) = compile(&fc, file, &lib, link);
    for &n in ps {
        let mut c = Command::new(&run);
        c.args(["-n", &n.to_string(), "--timeout", "60"])
            .arg(&exe)
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
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "p={n}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        for rank in 0..n {
            let want = format!("{name} OK rank={rank}");
            assert!(
                stdout.lines().any(|l| l.trim() == want),
                "p={n}: no {want:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
            );
        }
    }
}

#[test]
fn point_to_point_through_the_mpi_module() {
    every_rank_passes("pt2pt.f90", &[2, 3, 4]);
}

#[test]
fn fixed_form_with_mpif_h() {
    every_rank_passes("fixed.f", &[2, 3]);
}

#[test]
fn collectives_logical_ops_and_a_fortran_operation() {
    every_rank_passes("coll.f90", &[2, 3, 4]);
}

#[test]
fn derived_datatypes_and_packing() {
    every_rank_passes("types.f90", &[2, 3]);
}

/// The shared library exports the Fortran names and the common blocks: MPI_IN_PLACE
/// and MPI_STATUS_IGNORE are recognised when the program holds them.
#[test]
fn programs_linked_with_the_shared_library() {
    every_rank_passes_linked("coll.f90", &[3], Link::Shared);
    every_rank_passes_linked("pt2pt.f90", &[2], Link::Shared);
}

/// Every constant of `mpif.h` has the value of the C constant of that name in `mpi.h`
/// (handles included: a Fortran handle is the C handle's value), and the status indices
/// are the C ones plus one. Both programs are generated from `mpif.h`'s names, compiled
/// by their own compilers and their output compared.
#[test]
fn mpif_h_constants_equal_mpi_h() {
    let Some(fc) = fortran_compiler() else {
        return;
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = here.join("include");
    let mpif = std::fs::read_to_string(include.join("mpif.h")).unwrap();
    // Fortran's own names, with the C expression each must equal.
    let fortran_only: &[(&str, &str)] = &[
        ("MPI_STATUS_SIZE", "MPI_F_STATUS_SIZE"),
        ("MPI_SOURCE", "MPI_F_SOURCE + 1"),
        ("MPI_TAG", "MPI_F_TAG + 1"),
        ("MPI_ERROR", "MPI_F_ERROR + 1"),
        ("MPI_ADDRESS_KIND", "sizeof(MPI_Aint)"),
        ("MPI_OFFSET_KIND", "sizeof(MPI_Offset)"),
        ("MPI_COUNT_KIND", "sizeof(MPI_Count)"),
        ("MPI_INTEGER_KIND", "sizeof(MPI_Fint)"),
    ];
    let names: Vec<&str> = mpif
        .lines()
        .filter_map(|l| l.trim().strip_prefix("PARAMETER ("))
        .filter_map(|r| r.split('=').next())
        .collect();
    assert!(
        names.len() > 250,
        "only {} constants in mpif.h",
        names.len()
    );
    let c_expr = |n: &str| {
        fortran_only
            .iter()
            .find(|(f, _)| *f == n)
            .map_or(n.to_string(), |(_, c)| c.to_string())
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mpif-constants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _scratch = Scratch(dir.clone());
    let mut c = String::from("#include <stdio.h>\n#include <mpi.h>\nint main(void)\n{\n");
    let mut f = String::from("program constants\nuse mpi\nimplicit none\n");
    for n in &names {
        c.push_str(&format!(
            "    printf(\"{n} %lld\\n\", (long long)(intptr_t)({}));\n",
            c_expr(n)
        ));
        f.push_str(&format!("print '(a,1x,i0)', '{n}', {n}\n"));
    }
    c.push_str("    return 0;\n}\n");
    f.push_str("end program constants\n");
    std::fs::write(dir.join("c.c"), c).unwrap();
    std::fs::write(dir.join("f.f90"), f).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run_ok(
        Command::new(&cc)
            .current_dir(&dir)
            .args(["-Wall", "-I"])
            .arg(&include)
            .args(["c.c", "-o", "c"]),
        "the C program",
    );
    run_ok(
        Command::new(&fc)
            .current_dir(&dir)
            .args(["-c", "-I"])
            .arg(&include)
            .arg(include.join("mpi.f90")),
        "the mpi module",
    );
    run_ok(
        Command::new(&fc)
            .current_dir(&dir)
            .args(["-I", "."])
            .args(["f.f90", "-o", "f"]),
        "the Fortran program",
    );
    let out = |p: &str| {
        let o = Command::new(dir.join(p)).output().unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let (from_c, from_f) = (out("c"), out("f"));
    for (lc, lf) in from_c.lines().zip(from_f.lines()) {
        assert_eq!(lc, lf.trim(), "mpi.h (left) and mpif.h (right) differ");
    }
    assert_eq!(from_c.lines().count(), names.len());
    assert_eq!(from_f.lines().count(), names.len());
}

/// The committed bindings are what `scripts/gen-mpi-fortran.py` makes of `mpi.h` and the
/// functions the library defines (after a change to either, run it again).
#[test]
fn generated_bindings_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = match Command::new("python3")
        .arg(root.join("scripts/gen-mpi-fortran.py"))
        .arg("--check")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: python3 cannot run ({e})");
            return;
        }
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
