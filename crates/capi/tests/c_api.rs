//! `bulkwire.h` from C: compiles `tests/c/p2p_test.c` with the system C compiler (`cc`,
//! or `$CC`) against the freshly built `libbulkwire.a`, then runs it as jobs of 2 and 3
//! processes (the program self-spawns), bounded in time.

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
    let mut c = Command::new(prog);
    c.arg(n.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let child = c.spawn().unwrap();
    let pid = child.id();
    let start = Instant::now();
    // A watchdog: rank 0 is the launcher, its death takes the others.
    let dog = std::thread::spawn(move || {
        while start.elapsed() < Duration::from_secs(60) {
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
