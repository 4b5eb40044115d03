//! What several test files of the tools share.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");

/// `tests/c/name.c` compiled with bspcc once per test binary, into a file named after
/// `prefix` (test binaries may run at once and must not share one).
pub fn bspcc_program(prefix: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = g.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}-{name}"));
    let o = Command::new(BSPCC)
        .args(["-O2", "-I"])
        .arg(&dir)
        .arg(dir.join(format!("{name}.c")))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bspcc {name}.c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    g.push((name.into(), out.clone()));
    out
}
