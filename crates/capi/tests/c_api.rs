//! `bulkwire.h` from C: compiles the programs of `tests/c/` with the system C compiler
//! (`cc`, or `$CC`) against the freshly built `libbulkwire.a`, then runs them as jobs of
//! several processes (the programs self-spawn), bounded in time:
//!
//! - `p2p_test.c`: point-to-point, p = 2 and 3;
//! - `coll_test.c`: every collective against a serial reference, p = 1 to 4 over shared
//!   memory (the network cache), p = 3 with the point-to-point algorithms over UDP, with
//!   and without 5% loss; and the collectives' set-up failing on a bad `BULKWIRE_COLL`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The static library cargo built for this test run: in `deps` beside the test (a test
/// build does not copy it up), or one level up after a `cargo build`.
fn libbulkwire() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libbulkwire.a"),
        deps.parent().unwrap().join("libbulkwire.a"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("libbulkwire.a not built near {}", deps.display()))
}

fn compile(src: &Path, out: &Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let st = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(&inc)
        .arg(src)
        .arg(libbulkwire())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-o"])
        .arg(out)
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "{cc} failed on {}", src.display());
}

fn run(prog: &Path, n: u32) -> (Option<i32>, String, String) {
    run_with(prog, &[&n.to_string()], &[], Duration::from_secs(60))
}

/// Runs `prog args` with no `BULKWIRE_` variables but `env`, killed after `limit`.
fn run_with(
    prog: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, String, String) {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let child = c.spawn().unwrap();
    let pid = child.id();
    let start = Instant::now();
    // A watchdog: rank 0 is the launcher, its death takes the others.
    let dog = std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(50));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        // SAFETY: a signal to the child we started; no memory involved.
        unsafe { libc_kill(pid as i32, 9) };
    });
    let out = child.wait_with_output().unwrap();
    let _ = dog.join();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn c_program_against_libbulkwire() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/p2p_test.c");
    let out = std::env::temp_dir().join(format!("bulkwire_p2p_c_test_{}", std::process::id()));
    compile(&src, &out);
    for n in [2, 3] {
        let (code, stdout, stderr) = run(&out, n);
        assert_eq!(code, Some(0), "n={n}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        for r in 0..n {
            assert!(
                stdout.lines().any(|l| l == format!("C OK rank={r}")),
                "n={n}: rank {r} missing\n{stdout}\n{stderr}"
            );
        }
    }
    let _ = std::fs::remove_file(&out);
}

/// A compiled test program, deleted when dropped.
struct Exe(PathBuf);

impl Drop for Exe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `coll_test.c`, compiled for one test (`name` keeps parallel tests apart).
fn coll_test(name: &str) -> Exe {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/coll_test.c");
    let out = std::env::temp_dir().join(format!("bulkwire_coll_c_{name}_{}", std::process::id()));
    compile(&src, &out);
    Exe(out)
}

/// Runs `coll_test` at `n` processes with 4 MiB as the big size and checks that every
/// rank finished its checks.
fn coll_job(prog: &Exe, n: u32, env: &[(&str, &str)]) {
    let ns = n.to_string();
    let start = Instant::now();
    let (code, stdout, stderr) =
        run_with(&prog.0, &[&ns, "4194304"], env, Duration::from_secs(180));
    let what = format!("n={n} {env:?} after {:?}", start.elapsed());
    assert_eq!(
        code,
        Some(0),
        "{what}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for r in 0..n {
        assert!(
            stdout.lines().any(|l| l == format!("C COLL OK rank={r}")),
            "{what}: rank {r} missing\n{stdout}\n{stderr}"
        );
    }
    let summary = stdout
        .lines()
        .find(|l| l.starts_with(&format!("coll_test p={n} big=4194304 checks=")))
        .unwrap_or_else(|| panic!("{what}: no summary\n{stdout}\n{stderr}"));
    eprintln!("{what}: {summary}");
}

#[test]
fn c_collectives_over_the_network_cache() {
    let prog = coll_test("netcache");
    for n in 1..=4 {
        coll_job(
            &prog,
            n,
            &[("BULKWIRE_TRANSPORT", "shm"), ("BULKWIRE_COLL", "netcache")],
        );
    }
}

#[test]
fn c_collectives_point_to_point_over_udp() {
    coll_job(
        &coll_test("udp"),
        3,
        &[("BULKWIRE_TRANSPORT", "udp"), ("BULKWIRE_COLL", "p2p")],
    );
}

/// 5% of datagrams lost; single copy off so that big messages cross the lossy transport
/// too (otherwise a peer on this host reads them straight out of the sender's memory).
#[test]
fn c_collectives_over_udp_with_loss() {
    coll_job(
        &coll_test("loss"),
        3,
        &[
            ("BULKWIRE_TRANSPORT", "udp"),
            ("BULKWIRE_COLL", "p2p"),
            ("BULKWIRE_SINGLE_COPY", "off"),
            ("BULKWIRE_FAULTS", "loss=0.05,seed=3"),
        ],
    );
}

/// Processes that configure the collectives differently: the first collective fails on
/// every process with `BW_ERR_INIT` naming the variable, later ones too, and the job
/// still finalizes.
#[test]
fn c_collectives_setup_error() {
    let prog = coll_test("setup");
    let (code, stdout, stderr) = run_with(
        &prog.0,
        &["2", "0", "init-error"],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for r in 0..2 {
        assert!(
            stdout
                .lines()
                .any(|l| l == format!("C COLL INIT-ERROR OK rank={r}")),
            "rank {r} missing\n{stdout}\n{stderr}"
        );
    }
}

/// A bad `BULKWIRE_COLL` is refused by `bw_init`, naming the variable, the value and
/// what is accepted, before any process is started.
#[test]
fn c_bad_setting_fails_at_init() {
    let prog = coll_test("setup");
    let (code, stdout, stderr) = run_with(
        &prog.0,
        &["2", "0", "bad-setting"],
        &[("BULKWIRE_COLL", "bogus")],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("C COLL BAD-SETTING OK"),
        "{stdout}\n{stderr}"
    );
}
