//! `bwbench all` at smoke level: every experiment runs, the report directory is complete,
//! and every figure in the JSON is finite and positive.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

fn figures(v: &Value, path: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                figures(x, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                figures(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
    if let Value::Object(m) = v
        && let Some(x) = m.get("median")
    {
        out.push((path.to_string(), x.as_f64().unwrap_or(f64::NAN)));
    }
}

#[test]
fn smoke_suite_writes_a_complete_report() {
    let dir = std::env::temp_dir().join(format!("bwbench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bwbench"))
        .args(["all", "--smoke", "--no-mpi", "--no-progress", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run bwbench");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("bwbench all --smoke did not finish in 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "bwbench exited with {status}");
    for f in [
        "report.md",
        "results.json",
        "latency.svg",
        "bandwidth.svg",
        "alltoall.svg",
        "loss.svg",
        "collectives.svg",
    ] {
        let p = dir.join(f);
        assert!(
            p.is_file() && std::fs::metadata(&p).unwrap().len() > 100,
            "{f} missing"
        );
    }
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    let sections = json["sections"].as_array().unwrap();
    let names: Vec<&str> = sections
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for want in [
        "latency",
        "bandwidth",
        "layers",
        "bsp",
        "collectives",
        "alltoall",
        "overlap",
        "exchange",
        "loss",
    ] {
        assert!(
            names.contains(&want),
            "section {want} missing from {names:?}"
        );
    }
    for s in sections {
        let name = s["name"].as_str().unwrap();
        let took = s["seconds"].as_f64().unwrap_or(0.0);
        assert!(took > 0.0 && took < 600.0, "{name}: took {took} s");
        let tables = s["tables"].as_array().unwrap();
        assert!(!tables.is_empty(), "{name}: no table");
        for t in tables {
            assert!(
                !t["rows"].as_array().unwrap().is_empty(),
                "{name}: empty table {}",
                t["title"]
            );
        }
        // Every stack of bulkwire's must have been measured (MPI is left out on purpose):
        // nothing left out but MPI, and no run failed.
        let failed: Vec<&str> = s["failed"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .collect();
        assert!(failed.is_empty(), "{name}: failed: {failed:?}");
        let skipped: Vec<&str> = s["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .filter(|x| !x.starts_with("MPI"))
            .collect();
        // Kernel TCP under bit errors needs the right to make network namespaces; it may
        // be skipped.
        let skipped: Vec<&str> = skipped
            .into_iter()
            .filter(|x| !x.starts_with("kernel TCP"))
            .collect();
        assert!(skipped.is_empty(), "{name}: not measured: {skipped:?}");
    }
    // The collectives ran where their labels say: the network cache, then p2p over UDP.
    let coll = sections
        .iter()
        .find(|s| s["name"] == "collectives")
        .unwrap();
    let carried: Vec<(&str, bool, &str)> = coll["colls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c[0].as_str().unwrap(),
                c[1]["netcache"].as_bool().unwrap(),
                c[1]["protocol"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        carried.contains(&("netcache", true, "utopia"))
            && carried.contains(&("p2p over holefill/udp", false, "holefill")),
        "collectives carried by {carried:?}"
    );
    // The targets of the transport core were measured in alternating rounds (one round at
    // smoke level), each round with a figure for both sides or counted as invalid.
    for (name, checks) in [("latency", 1), ("bandwidth", 2)] {
        let s = sections.iter().find(|s| s["name"] == name).unwrap();
        let rounds = s["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), checks, "{name}: {rounds:?}");
        for r in rounds {
            let valid = r[1]["base"].as_array().unwrap().len();
            assert_eq!(r[1]["cand"].as_array().unwrap().len(), valid);
            let left_out = r[1]["invalid"].as_u64().unwrap() + r[1]["no_figure"].as_u64().unwrap();
            assert_eq!(valid + left_out as usize, 1, "{r:?}");
        }
    }
    // The BSP section times single supersteps too: best <= median <= p90 in every row.
    let bsp = sections.iter().find(|s| s["name"] == "bsp").unwrap();
    let spread = bsp["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| {
            t["title"]
                .as_str()
                .unwrap()
                .starts_with("Single supersteps")
        })
        .expect("the BSP section's table of single supersteps");
    let header: Vec<&str> = spread["header"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(header[3..6], ["best (us)", "median (us)", "p90 (us)"]);
    for r in spread["rows"].as_array().unwrap() {
        let x: Vec<f64> = (3..6)
            .map(|i| r[i].as_str().unwrap().parse().unwrap())
            .collect();
        assert!(x[0] > 0.0 && x[0] <= x[1] && x[1] <= x[2], "{r:?}");
    }
    // Every section that times single operations shows their best / median / p90, in a
    // table of its own or in a column, each cell in that order (the BSP section's table
    // is checked above; scale's figures are means in virtual time).
    for s in sections {
        let name = s["name"].as_str().unwrap();
        if name == "bsp" || name == "scale" {
            continue;
        }
        let cells: Vec<String> = s["tables"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| {
                let header = t["header"].as_array().unwrap();
                let whole = t["title"].as_str().unwrap().contains("best / median / p90");
                let cols: Vec<usize> = (0..header.len())
                    .filter(|&i| {
                        whole && i > 0 || header[i].as_str().unwrap().contains("best / median")
                    })
                    .collect();
                t["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(move |r| {
                        cols.iter()
                            .map(|&i| r[i].as_str().unwrap().to_string())
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|c| c.matches(" / ").count() == 2)
            .collect();
        assert!(!cells.is_empty(), "{name}: no best / median / p90");
        for c in &cells {
            let x: Vec<f64> = c.split(" / ").map(|v| v.parse().unwrap()).collect();
            let ordered = x[0] <= x[1] && x[1] <= x[2] || x[0] >= x[1] && x[1] >= x[2];
            assert!(x[0] > 0.0 && ordered, "{name}: {c}");
        }
    }
    let mut all = Vec::new();
    figures(&json, "", &mut all);
    assert!(all.len() > 50, "only {} figures", all.len());
    for (path, x) in &all {
        assert!(x.is_finite() && *x > 0.0, "{path} = {x}");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("raw UDP") && md.contains("holefill/udp") && md.contains("utopia/shm"));
    // The head says how busy the machine was, from /proc.
    assert!(md.contains("Load: 1-minute load average"), "no load line");
    assert!(json["machine"]["load"]["before"].as_f64().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}
