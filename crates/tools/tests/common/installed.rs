//! What the tests of an installed tree (`install.rs`, `mpi_install.rs`) share: running the
//! installed tools bounded in time, and listing what an install wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `c`, killed after `limit`, returning its output; panics with it if it fails.
pub fn ok_within(mut c: Command, what: &str, limit: Duration) -> Output {
    let start = Instant::now();
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let id = child.id();
    let dog = std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(50));
            if !Path::new(&format!("/proc/{id}")).exists() {
                return;
            }
        }
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(id as i32, libc::SIGKILL) };
    });
    let o = child.wait_with_output().unwrap();
    dog.join().unwrap();
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file and directory under `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                all.extend(walk(&p));
            }
            all.push(p);
        }
    }
    all
}
