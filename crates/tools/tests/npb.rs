//! The NAS kernels of `apps/npb` end to end: class S of IS, EP, CG, MG and FT built by the
//! Makefile (bspcc, and mpicc when it is found), run over BSPlib at p = 1, 2 and 4 and over
//! MPI at the same p. Every program checks its result against NPB's reference values
//! itself; this file checks that each says so, that its machine-readable line is
//! consistent, that the BSP and MPI versions compute the same numbers (they add every
//! reduction in process order), that runs under injected faults with each reliable
//! protocol compute them too, and that a process count a kernel cannot use is refused
//! with a message saying which it can.
//!
//! Budget: about 50 runs of class S, each bounded by `HARD_LIMIT` (bsprun's and mpirun's
//! own limits are shorter); under a minute on two cores.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");
/// No run may take longer; a job still running then is stopped (SIGTERM, then SIGKILL).
const HARD_LIMIT: Duration = Duration::from_secs(100);
const PS: [u32; 3] = [1, 2, 4];

/// The programs, built once per test run.
struct Programs {
    bin: PathBuf,
    /// `mpirun` and its options, when the MPI versions were built.
    mpirun: Option<Vec<String>>,
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(cmd).is_file()))
}

/// How to start an MPI job here, stopped after 80 s: Open MPI needs to be told it may run
/// as root and place more processes than cores; MPICH's mpirun takes its time limit from
/// the environment (`mpi` sets MPIEXEC_TIMEOUT).
fn mpirun_command() -> Vec<String> {
    let mut cmd = vec!["mpirun".to_string()];
    let version = Command::new("mpirun")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if version.contains("Open MPI") {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.push("--allow-run-as-root".into());
        }
        cmd.push("--oversubscribe".into());
        cmd.extend(["--timeout".into(), "80".into()]);
    }
    cmd
}

fn programs() -> &'static Programs {
    static BUILT: OnceLock<Programs> = OnceLock::new();
    BUILT.get_or_init(|| {
        let lib = Path::new(BSPCC).with_file_name("libbulkwire.a");
        assert!(
            lib.exists(),
            "{} is missing: run `cargo build --profile test -p bulkwire-capi` before the tests \
             (.ci/test does)",
            lib.display()
        );
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npb");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/npb");
        let mpi = on_path("mpicc") && on_path("mpirun");
        if !mpi {
            // Straight to stderr: the test harness captures print!, and this must show.
            let _ = writeln!(
                std::io::stderr(),
                "npb: mpicc or mpirun not found on PATH: the MPI side of the NAS tests is skipped"
            );
        }
        let o = Command::new("make")
            .arg("-C")
            .arg(&src)
            .args(["-j2", "CLASS=S"])
            .arg(format!("BSPCC={BSPCC}"))
            .arg(format!("BUILDDIR={}", out.join("build").display()))
            .arg(format!("BIN={}", out.join("bin").display()))
            .arg(if mpi { "all" } else { "bsp" })
            .output()
            .expect("make (needed to build apps/npb)");
        assert!(
            o.status.success(),
            "building apps/npb failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Programs {
            bin: out.join("bin"),
            mpirun: mpi.then(mpirun_command),
        }
    })
}

struct Out {
    what: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    fn ok(&self) {
        assert_eq!(
            self.code,
            Some(0),
            "{}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.code,
            self.stdout,
            self.stderr
        );
    }
}

/// Stops a job that ran out of time: the launcher first, so it can stop its processes.
fn stop(child: &mut Child) {
    let pid = child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn run(what: String, mut cmd: Command, env: &[(&str, &str)]) -> Out {
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > HARD_LIMIT {
            stop(&mut child);
            panic!("{what} hung: stopped after {HARD_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        what,
        code: status.code(),
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

fn bsp(kernel: &str, p: u32, env: &[(&str, &str)]) -> Out {
    let prog = programs().bin.join(format!("{kernel}.S.bsp"));
    let mut c = Command::new(BSPRUN);
    c.args(["--timeout", "80", "-n", &p.to_string()]).arg(prog);
    run(format!("{kernel}.S.bsp p={p} {env:?}"), c, env)
}

fn mpi(kernel: &str, p: u32) -> Option<Out> {
    let mpirun = programs().mpirun.as_ref()?;
    let prog = programs().bin.join(format!("{kernel}.S.mpi"));
    let mut c = Command::new(&mpirun[0]);
    c.args(&mpirun[1..]).args(["-np", &p.to_string()]).arg(prog);
    Some(run(
        format!("{kernel}.S.mpi p={p}"),
        c,
        &[("MPIEXEC_TIMEOUT", "80")],
    ))
}

/// The `BWNPB key=value ...` line, checked against what the run was.
fn report(o: &Out, kernel: &str, p: u32, imp: &str) -> HashMap<String, String> {
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("BWNPB "))
        .collect();
    assert_eq!(lines.len(), 1, "{}: one BWNPB line:\n{}", o.what, o.stdout);
    let r: HashMap<String, String> = lines[0]
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let want = [
        ("kernel", kernel.to_uppercase()),
        ("class", "S".into()),
        ("impl", imp.into()),
        ("np", p.to_string()),
        ("verified", "1".into()),
    ];
    for (k, v) in want {
        assert_eq!(r.get(k), Some(&v), "{}: {k} in {}", o.what, lines[0]);
    }
    let num = |k: &str| -> f64 {
        r.get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{}: no number {k} in {}", o.what, lines[0]))
    };
    let (time, comm, comp) = (num("time"), num("comm"), num("comp"));
    assert!(time > 0.0 && comm >= 0.0, "{}: {}", o.what, lines[0]);
    // comm is a mean over processes of times within the slowest one's.
    assert!(comm <= time, "{}: {}", o.what, lines[0]);
    assert!(
        (comp - (time - comm)).abs() <= 2e-6,
        "{}: {}",
        o.what,
        lines[0]
    );
    assert!(num("mops") > 0.0, "{}: {}", o.what, lines[0]);
    r
}

/// The `BWNPB-COMM` line: seconds and calls per exchange; the seconds add up to `comm`.
fn phases(o: &Out, comm: f64) -> HashMap<String, (f64, u64)> {
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("BWNPB-COMM "))
        .unwrap_or_else(|| panic!("{}: no BWNPB-COMM line:\n{}", o.what, o.stdout));
    let phases: HashMap<String, (f64, u64)> = line
        .split_whitespace()
        .skip(5)
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            let (secs, calls) = v.split_once('/').unwrap();
            (
                k.to_string(),
                (secs.parse().unwrap(), calls.parse().unwrap()),
            )
        })
        .collect();
    let sum: f64 = phases.values().map(|(s, _)| s).sum();
    assert!(
        (sum - comm).abs() <= 1e-5,
        "{}: {line} vs comm={comm}",
        o.what
    );
    phases
}

/// Exchanges a kernel makes in its timed section at p > 1, by NPB's iteration counts.
fn calls(kernel: &str) -> &'static [(&'static str, u64)] {
    match kernel {
        // One count exchange and one key exchange per iteration.
        "is" => &[("counts", 10), ("keys", 10)],
        "ep" => &[("sums", 1)],
        // 15 steps of 25 CG iterations plus the residual: 26 products; 2 dot products per
        // iteration plus 3 a step.
        "cg" => &[("matvec", 15 * 26), ("rowsum", 15 * 53)],
        // One transpose forward, one per step back; a checksum per step.
        "ft" => &[("transpose", 7), ("checksum", 6)],
        // MG's ghost exchanges depend on how many levels are cut into slabs.
        _ => &[("norm", 2)],
    }
}

/// A verified run of `kernel` at `p`, with its NPB report.
fn verified(o: &Out, kernel: &str, p: u32, imp: &str) {
    o.ok();
    let success = o
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().collect::<Vec<_>>() == ["Verification", "=", "SUCCESSFUL"])
        .count();
    assert_eq!(
        success, 1,
        "{}: NPB's verification line:\n{}",
        o.what, o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("{} Benchmark Completed.", kernel.to_uppercase())),
        "{}",
        o.stdout
    );
    let r = report(o, kernel, p, imp);
    let ph = phases(o, r["comm"].parse().unwrap());
    if p > 1 {
        for &(name, n) in calls(kernel) {
            assert_eq!(
                ph.get(name).map(|x| x.1),
                Some(n),
                "{}: {name} in {ph:?}",
                o.what
            );
        }
    }
}

/// The lines that carry the computed numbers (not the times): EP's sums and counts, CG's
/// residuals and zeta, MG's norm, FT's checksums.
fn results(kernel: &str, stdout: &str) -> Vec<String> {
    let numbered = |l: &str| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() == 3 && w[0].parse::<u32>().is_ok() && w[1].contains('e') && w[2].contains('e')
    };
    let lines: Vec<String> = stdout
        .lines()
        .filter(|l| match kernel {
            "ep" => l.starts_with("Sums =") || l.starts_with("No. Gaussian Pairs"),
            "cg" => l.contains("Zeta is") || numbered(l),
            "mg" => l.contains("L2 Norm is"),
            "ft" => l.contains("Checksum ="),
            _ => false,
        })
        .map(str::to_string)
        .collect();
    let want = match kernel {
        "ep" => 2,
        "cg" => 16,
        "mg" => 1,
        "ft" => 6,
        _ => 0,
    };
    assert_eq!(lines.len(), want, "{kernel}: result lines in\n{stdout}");
    lines
}

/// Class S of one kernel: BSP at p = 1, 2, 4 verified; MPI at the same p verified and
/// computing the same numbers.
fn class_s(kernel: &str) {
    for p in PS {
        let b = bsp(kernel, p, &[]);
        verified(&b, kernel, p, "bsp");
        match mpi(kernel, p) {
            Some(m) => {
                verified(&m, kernel, p, "mpi");
                assert_eq!(
                    results(kernel, &b.stdout),
                    results(kernel, &m.stdout),
                    "{kernel} p={p}: BSP and MPI differ"
                );
            }
            None => {
                let _ = writeln!(std::io::stderr(), "npb: {kernel} p={p}: MPI side skipped");
            }
        }
    }
}

#[test]
fn is_class_s() {
    class_s("is");
}

#[test]
fn ep_class_s() {
    class_s("ep");
}

#[test]
fn cg_class_s() {
    class_s("cg");
}

#[test]
fn mg_class_s() {
    class_s("mg");
}

#[test]
fn ft_class_s() {
    class_s("ft");
}

/// Over UDP with 5% loss (and some duplication, reordering and corruption) every reliable
/// protocol delivers what the kernels need: verified, and the same numbers as a clean
/// run. Kernel TCP takes no injected faults, so it runs clean.
#[test]
fn kernels_under_faults_with_every_reliable_protocol() {
    let kernels = ["is", "cg", "mg", "ft"];
    let clean: Vec<Vec<String>> = kernels
        .iter()
        .map(|k| {
            let o = bsp(k, 4, &[]);
            verified(&o, k, 4, "bsp");
            results(k, &o.stdout)
        })
        .collect();
    let lossy = bulkwire_protocol::PROTOCOLS
        .iter()
        .filter(|&&p| p != "utopia");
    for (i, proto) in lossy.enumerate() {
        for (k, want) in kernels.iter().zip(&clean) {
            let faults = format!(
                "loss=0.05,dup=0.01,reorder=0.01,corrupt=0.01,seed={}",
                7 + i
            );
            let env = [
                ("BULKWIRE_PROTOCOL", *proto),
                ("BULKWIRE_TRANSPORT", "udp"),
                ("BULKWIRE_FAULTS", faults.as_str()),
            ];
            let o = bsp(k, 4, &env);
            verified(&o, k, 4, "bsp");
            assert_eq!(&results(k, &o.stdout), want, "{k} {proto} {faults}");
        }
    }
    for (k, want) in kernels.iter().zip(&clean).take(2) {
        let o = bsp(k, 4, &[("BULKWIRE_PROTOCOL", "tcp")]);
        verified(&o, k, 4, "bsp");
        assert_eq!(&results(k, &o.stdout), want, "{k} over kernel TCP");
    }
}

/// IS and EP take any p; CG, MG and FT a power of two (MG and FT up to a size limit).
/// A count they cannot use stops the job at once, the message saying which they take.
#[test]
fn process_counts_the_kernels_take() {
    for k in ["is", "ep"] {
        verified(&bsp(k, 3, &[]), k, 3, "bsp");
    }
    let refused = [
        (
            "cg",
            3,
            "CG runs on a power-of-two number of processes (1, 2, 4, 8, ...); got p = 3",
        ),
        (
            "mg",
            6,
            "MG class S runs on a power-of-two number of processes from 1 to 16",
        ),
        (
            "ft",
            3,
            "FT class S runs on a power-of-two number of processes from 1 to 64",
        ),
    ];
    for (k, p, words) in refused {
        let o = bsp(k, p, &[]);
        assert_eq!(o.code, Some(1), "{}: {}", o.what, o.stderr);
        assert!(
            o.stderr.contains(words),
            "{}: want {words:?} in\n{}",
            o.what,
            o.stderr
        );
        assert!(o.stderr.contains(&format!("{k}.S.bsp: ")), "{}", o.stderr);
        assert_eq!(
            o.stderr.matches("aborted:").count(),
            1,
            "once: {}",
            o.stderr
        );
        assert!(!o.stdout.contains("BWNPB"), "{}", o.stdout);
        if let Some(m) = mpi(k, p) {
            assert_ne!(m.code, Some(0), "{}", m.what);
            assert_eq!(m.stderr.matches(words).count(), 1, "once: {}", m.stderr);
        }
    }
    // Started by itself, a BSP kernel takes its process count as its argument.
    let prog = programs().bin.join("is.S.bsp");
    let mut c = Command::new(&prog);
    c.arg("2");
    let o = run("is.S.bsp 2, by itself".into(), c, &[]);
    verified(&o, "is", 2, "bsp");
    let mut c = Command::new(&prog);
    c.arg("x");
    let o = run("is.S.bsp x".into(), c, &[]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("is.S.bsp: not a number of processes"),
        "{}",
        o.stderr
    );
}
