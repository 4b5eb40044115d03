//! The safe Rust API in real processes: `bsp-probe` starts its own job with
//! `Bsp::begin`, as `./program` does.

use std::process::Command;

const PROBE: &str = env!("CARGO_BIN_EXE_bsp-probe");

fn probe(args: &[&str]) -> (Option<i32>, String, String) {
    let mut c = Command::new(PROBE);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    let o = c.args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn begin_sync_put_end_in_processes() {
    for p in ["1", "3"] {
        let (code, out, err) = probe(&[p, "sum"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            out.lines().filter(|l| l.starts_with("sum ok")).count(),
            1,
            "{out}"
        );
        // Only pid 0 continues after end.
        assert_eq!(
            out.lines().filter(|l| *l == "after end pid 0").count(),
            1,
            "{out}"
        );
    }
}

#[test]
fn the_spmd_part_may_be_a_function() {
    let (code, out, err) = probe(&["4", "spmd"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.matches("sequential part").count(), 1, "{out}");
    assert!(out.contains("sum ok p=4 total=10"), "{out}");
}

#[test]
fn abort_stops_every_process() {
    let (code, _, err) = probe(&["3", "abort"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("rank 1 aborted: the probe gives up"), "{err}");
    assert_eq!(err.matches("aborted").count(), 1, "{err}");
}
