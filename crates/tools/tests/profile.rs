//! The BSP cost profile from C, end to end: `tests/c/supersteps.c` (known supersteps and
//! h-relations) built with bspcc, run by `bsprun --profile`, written up by `bwbench
//! profile`; and a profile path that cannot be written stops the job at bsp_begin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");
const BWBENCH: &str = env!("CARGO_BIN_EXE_bwbench");
const P: u32 = 3;

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("profile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build(dir: &Path) -> PathBuf {
    let lib = Path::new(BSPCC).with_file_name("libbulkwire.a");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --profile test -p bulkwire-capi` before the tests \
         (.ci/test does)",
        lib.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let exe = dir.join("supersteps");
    let o = Command::new(BSPCC)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&src)
        .arg(src.join("supersteps.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// Runs `cmd` without the caller's BULKWIRE_* settings; bsprun's --timeout bounds it.
fn run(mut cmd: Command) -> Output {
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The value column of the cost table's row `term`.
fn cost_row(report: &str, term: &str) -> String {
    let row = report
        .lines()
        .find(|l| l.starts_with(&format!("| {term} |")))
        .unwrap_or_else(|| panic!("no row {term} in\n{report}"));
    row.split('|').nth(2).unwrap().trim().to_string()
}

#[test]
fn bsprun_profiles_and_bwbench_writes_it_up() {
    let dir = dir("run");
    let exe = build(&dir);
    let base = dir.join("run.prof");
    let mut cmd = Command::new(BSPRUN);
    cmd.args(["-n", &P.to_string(), "--timeout", "60", "--profile"])
        .arg(&base)
        .arg(&exe);
    let o = run(cmd);
    assert!(o.status.success(), "{}", text(&o));
    for pid in 0..P {
        let f = PathBuf::from(format!("{}.{pid}", base.display()));
        assert!(f.is_file(), "{} missing", f.display());
    }
    let svg = dir.join("timeline.svg");
    let mut cmd = Command::new(BWBENCH);
    cmd.args(["profile", "--g", "0.5", "--l", "10", "--svg"])
        .arg(&svg)
        .arg(&base);
    let o = run(cmd);
    assert!(o.status.success(), "{}", text(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    // bsp_begin to the first sync, three puts, bsp_end: five supersteps.
    assert!(
        report.contains(&format!("5 supersteps of {P} processes over utopia")),
        "{report}"
    );
    assert_eq!(cost_row(&report, "S"), "5");
    // 1 + 2 + 3 KiB: 768 words, and a message header and a put record per superstep.
    let h: u64 = cost_row(&report, "H (words)").parse().unwrap();
    assert!((768..=768 + 3 * 8).contains(&h), "H = {h}");
    let w = cost_row(&report, "W + H g + S l");
    assert!(w.ends_with("ms") || w.ends_with("us"), "{w}");
    // The supersteps by h: the three puts in their classes, the two empty ones together.
    for class in ["| 1-2 KiB | 1 |", "| 2-4 KiB | 2 |", "| 0 | 2 |"] {
        assert!(report.contains(class), "{class} not in\n{report}");
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains(&format!("pid {}", P - 1)));
    // Without g and l: W, H and S, and no prediction.
    let mut cmd = Command::new(BWBENCH);
    cmd.arg("profile").arg("--svg").arg(&svg).arg(&base);
    let o = run(cmd);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && report.contains("No g and l given"),
        "{}",
        text(&o)
    );
    assert!(!report.contains("| W + H g + S l |"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_that_cannot_be_written_stops_the_job_at_once() {
    let dir = dir("bad");
    let exe = build(&dir);
    let base = dir.join("no/such/dir/run.prof");
    let t0 = std::time::Instant::now();
    let mut cmd = Command::new(BSPRUN);
    cmd.args(["-n", "2", "--timeout", "60"])
        .arg(&exe)
        .env("BULKWIRE_PROFILE", &base);
    let o = run(cmd);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot create the profile file")
            && err.contains(&format!("{}.", base.display()))
            && err.contains("BULKWIRE_PROFILE"),
        "{}",
        text(&o)
    );
    assert!(t0.elapsed() < Duration::from_secs(30));
    // A profile that is not one is refused with the file's name.
    let junk = dir.join("junk.prof");
    std::fs::write(format!("{}.0", junk.display()), b"not a profile").unwrap();
    let mut cmd = Command::new(BWBENCH);
    cmd.arg("profile").arg(&junk);
    let o = run(cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("junk.prof.0") && err.contains("magic"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
