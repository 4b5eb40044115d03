//! The collectives from C: `tests/c/coll.c` compiled with the system C compiler (`cc`, or
//! `$CC`) against `mpi.h` and the built `libbulkwire.a`, run under `bsprun -n P` for
//! p = 1 to 4 and 7 (and with `BULKWIRE_COLL=p2p` at p = 3 and 4, and over UDP with 5%
//! loss at p = 3), bounded in time. The program checks every collective, blocking and
//! non-blocking, on `MPI_COMM_WORLD` (through the collectives layer) and on a reordered
//! communicator (the schedules), and aborts on the first wrong value.
//!
//! Needs `libbulkwire.a` with the MPI layer linked in and `bsprun` in the target directory
//! (`cargo build -p bulkwire-capi -p bulkwire-tools`); skips with the reason otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(90);

/// `target/<profile>`: the test binary lives in its `deps`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The library and launcher, or why the test cannot run.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let t = target_dir();
    let lib = [t.join("libbulkwire.a"), t.join("deps/libbulkwire.a")]
        .into_iter()
        .find(|p| p.exists())
        .ok_or_else(|| format!("no libbulkwire.a in {}", t.display()))?;
    let bytes = std::fs::read(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    if !bytes.windows(9).any(|w| w == b"MPI_Init\0") {
        return Err(format!("{} has no MPI layer linked in", lib.display()));
    }
    let run = t.join("bsprun");
    if !run.exists() {
        return Err(format!("no bsprun in {}", t.display()));
    }
    Ok((lib, run))
}

fn compile(lib: &Path) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi_coll_c");
    let st = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/coll.c"))
        .arg(lib)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-o"])
        .arg(&out)
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "{cc} failed on coll.c");
    out
}

/// Runs `bsprun -n p prog` with no `BULKWIRE_` settings but `env`; exit status and output.
fn run(bsprun: &Path, prog: &Path, p: u32, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut c = Command::new(bsprun);
    c.args(["-n", &p.to_string(), "--timeout", "60"])
        .arg(prog)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let mut child = c.spawn().expect("start bsprun");
    let start = Instant::now();
    loop {
        if let Some(_st) = child.try_wait().unwrap() {
            break;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn every_collective_from_c_under_bsprun() {
    let (lib, bsprun) = match tools() {
        Ok(t) => t,
        Err(why) => {
            eprintln!("skipped: {why} (cargo build -p bulkwire-capi -p bulkwire-tools)");
            return;
        }
    };
    let prog = compile(&lib);
    // The default (the network cache on this host for world-like communicators), the
    // collectives layer's point-to-point algorithms, and those over UDP losing 5% of the
    // packets.
    const P2P: &[(&str, &str)] = &[("BULKWIRE_COLL", "p2p")];
    const LOSSY: &[(&str, &str)] = &[
        ("BULKWIRE_COLL", "p2p"),
        ("BULKWIRE_TRANSPORT", "udp"),
        ("BULKWIRE_FAULTS", "loss=0.05,seed=3"),
    ];
    let runs =
        [1, 2, 3, 4, 7]
            .map(|p| (p, &[][..]))
            .into_iter()
            .chain([(3, P2P), (4, P2P), (3, LOSSY)]);
    for (p, env) in runs {
        let (code, out) = run(&bsprun, &prog, p, env);
        assert_eq!(code, Some(0), "p = {p} {env:?}:\n{out}");
        for r in 0..p {
            assert!(
                out.lines().any(|l| l == format!("COLL OK rank={r}")),
                "p = {p}: rank {r} did not finish:\n{out}"
            );
        }
        if p > 1 {
            assert!(
                out.contains("calls through Coll"),
                "p = {p}: no report of the Coll path:\n{out}"
            );
        }
    }
    let _ = std::fs::remove_file(&prog);
}
