//! Datatypes and one-sided communication from C, end to end: `tests/c/datatype_test.c`
//! and `tests/c/rma_test.c` are compiled with the system C compiler (`cc`, or `$CC`)
//! against `include/mpi.h` and the `libbulkwire.a` of this target directory, and run
//! under `bsprun -n P` (p = 1 to 4), bounded in time. Both programs check themselves
//! (they pass under MPICH and Open MPI too) and every rank prints "`name` OK rank=r".
//!
//! `libbulkwire.a` and `bsprun` come from `cargo build -p bulkwire-capi -p bulkwire-tools`;
//! without them, or with a library older than this crate's sources, the tests say so and
//! skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The newest modification time of the crate's sources (`src`, one level of modules).
fn newest_source() -> SystemTime {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut dirs = vec![src];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap().filter_map(Result::ok) {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                dirs.push(e.path());
            } else if let Ok(t) = m.modified() {
                newest = newest.max(t);
            }
        }
    }
    newest
}

fn tools() -> Option<(PathBuf, PathBuf)> {
    let d = build_dir();
    let (lib, run) = (d.join("libbulkwire.a"), d.join("bsprun"));
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

fn compile(name: &str, lib: &Path) -> Exe {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mpi-types-{name}-{}", std::process::id()));
    let o = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
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

/// Runs `name.c` under `bsprun -n p` (with no `BULKWIRE_` variables of the caller's) at
/// each p; every rank must report success.
fn every_rank_passes(name: &str, ps: &[u32]) {
    let Some((lib, run)) = tools() else { return };
    let exe = compile(name, &lib);
    for &n in ps {
        let mut c = Command::new(&run);
        c.args(["-n", &n.to_string(), "--timeout", "60"])
            .arg(&exe.0)
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
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "p={n}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        for rank in 0..n {
            let want = format!("{name} OK rank={rank}");
            assert!(
                stdout.lines().any(|l| l == want),
                "p={n}: no {want:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
            );
        }
    }
}

#[test]
fn datatypes() {
    every_rank_passes("datatype_test", &[1, 2, 3]);
}

#[test]
fn one_sided_communication() {
    every_rank_passes("rma_test", &[1, 2, 3, 4]);
}
