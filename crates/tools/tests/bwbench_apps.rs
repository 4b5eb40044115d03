//! `bwbench apps` at smoke level: it builds two NAS kernels of class S with the suite's
//! bspcc (and the user's mpicc, when found), runs them at p = 2 over shared memory and
//! holefill/UDP (and MPI), and reports the BSPlib paper's three tables with figures that
//! agree with each other: the programs' structure (supersteps, h) does not depend on the
//! stack, and shared memory loses no packet. A few seconds.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(cmd).is_file()))
}

#[test]
fn apps_smoke_builds_runs_and_reports_the_kernels() {
    let exe = env!("CARGO_BIN_EXE_bwbench");
    let lib = std::path::Path::new(exe).with_file_name("libbulkwire.a");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --profile test -p bulkwire-capi` before the tests \
         (.ci/test does)",
        lib.display()
    );
    let dir = std::env::temp_dir().join(format!("bwbench-apps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t0 = Instant::now();
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(["apps", "--smoke", "--no-progress", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run bwbench");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bwbench apps --smoke did not finish in 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "bwbench exited with {status}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for title in [
        "Table 3)",
        "Table 4)",
        "Table 5)",
        "W + H g + S l",
        "What ran, and where",
    ] {
        assert!(report.contains(title), "{title} missing from the report");
    }
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let sec = &json["sections"][0];
    assert_eq!(sec["name"], "apps");
    let runs = sec["apps"].as_array().unwrap();
    let mpi = on_path("mpicc") && on_path("mpirun");
    let skipped: Vec<&str> = sec["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    // Two kernels, two BSP stacks (and two MPI transports), one round, all verified.
    assert_eq!(
        runs.len(),
        if mpi { 8 } else { 4 },
        "runs; not measured: {skipped:?}"
    );
    if !mpi {
        assert!(skipped.iter().any(|s| s.starts_with("MPI")), "{skipped:?}");
    }
    for kernel in ["Is", "Cg"] {
        let bsp: Vec<&Value> = runs
            .iter()
            .filter(|r| r["kernel"] == kernel && r["side"]["Bsp"].is_object())
            .collect();
        assert_eq!(bsp.len(), 2, "{kernel}");
        let prof = |i: usize, k: &str| bsp[i]["profile"][k].as_u64().unwrap();
        for (i, r) in bsp.iter().enumerate() {
            assert!(r["line"]["verified"].as_bool().unwrap());
            assert!(r["line"]["time"].as_f64().unwrap() > 0.0);
            assert!(prof(i, "supersteps") > 2 && prof(i, "data_sent") > 0);
        }
        // The program, not the stack, decides its supersteps and h.
        assert_eq!(prof(0, "supersteps"), prof(1, "supersteps"), "{kernel}");
        assert_eq!(prof(0, "h_words"), prof(1, "h_words"), "{kernel}");
        // Shared memory loses nothing: every data packet sent was received.
        let shm = bsp
            .iter()
            .find(|r| r["side"]["Bsp"]["link"] == "shm")
            .unwrap();
        let p = &shm["profile"];
        assert_eq!(p["data_sent"], p["data_received"], "{kernel}: {p}");
        assert_eq!(p["retransmits"], 0);
    }
    // The BSP cost used g and l measured in this run, over each stack.
    let fits: Vec<&str> = sec["bsp"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f[0].as_str())
        .collect();
    assert_eq!(fits, ["utopia/shm", "holefill/udp"]);
    let cost = &report[report.find("#### The BSP cost").unwrap()..];
    let row = cost
        .lines()
        .find(|l| l.starts_with("| CG | 2 | holefill/udp |"))
        .unwrap();
    assert!(!row.contains("| - |"), "no g and l: {row}");
    let _ = std::fs::remove_dir_all(&dir);
}
