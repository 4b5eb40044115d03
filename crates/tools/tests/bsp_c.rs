//! BSPlib from C, end to end: programs under `tests/c/` and `examples/c/` are compiled
//! with `bspcc` against `libbulkwire.a` and run with `bsprun` (or by themselves). The
//! conformance programs check every primitive and rule and abort on the first failure;
//! this file checks how the jobs end.
//!
//! Budget: every program runs at p = 1, 2, 3, 4 and 8; the fault matrix (5% loss, every
//! protocol but utopia) runs the DRMA, BSMP and example programs at a few p.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
const BSPRUN: &str = env!("CARGO_BIN_EXE_bsprun");
/// Nothing may run longer than this (bsprun's own --timeout is shorter).
const HARD_LIMIT: Duration = Duration::from_secs(120);

fn source_dir(example: bool) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if example {
        manifest.join("../../examples/c")
    } else {
        manifest.join("tests/c")
    }
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bsp-c");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles `name.c` once per test run; returns the executable.
fn program(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(name) {
        return p.clone();
    }
    let lib = Path::new(BSPCC).with_file_name("libbulkwire.a");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --profile test -p bulkwire-capi` before the tests \
         (.ci/test does)",
        lib.display()
    );
    let example = !source_dir(false).join(format!("{name}.c")).exists();
    let dir = source_dir(example);
    let exe = out_dir().join(name);
    let o = Command::new(BSPCC)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&dir)
        .arg(dir.join(format!("{name}.c")))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bspcc {name}.c failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    map.insert(name.to_string(), exe.clone());
    exe
}

/// A copy of a program under a name of its own, so that a test can look for its
/// processes without seeing another test's.
fn private_copy(name: &str, tag: &str) -> PathBuf {
    let src = program(name);
    let dst = out_dir().join(format!("{name}-{tag}-{}", std::process::id()));
    std::fs::copy(&src, &dst).unwrap();
    dst
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Out {
    fn ok(&self, what: &str) {
        assert_eq!(
            self.code,
            Some(0),
            "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
    }

    fn count(&self, line: &str) -> usize {
        self.stdout.lines().filter(|l| *l == line).count()
    }
}

fn command(program: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("BULKWIRE_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` and collects its output (what is left of stdout, if the caller
/// took it).
fn finish(mut child: Child, start: Instant) -> Out {
    let so = child.stdout.take();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut so) = so {
            let _ = so.read_to_string(&mut s);
        }
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
            let _ = child.kill();
            panic!("a job hung: killed after {HARD_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let elapsed = start.elapsed();
    Out {
        code: status.code(),
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
        elapsed,
    }
}

/// `bsprun -n p program args` with `env`.
fn bsprun(p: u32, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = command(Path::new(BSPRUN), env);
    c.args(["--timeout", "90", "-n", &p.to_string()])
        .arg(program)
        .args(args);
    let start = Instant::now();
    finish(c.spawn().unwrap(), start)
}

/// `program args` by itself (bsp_begin starts the job).
fn alone(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = command(program, env);
    c.args(args);
    let start = Instant::now();
    finish(c.spawn().unwrap(), start)
}

const PS: [u32; 5] = [1, 2, 3, 4, 8];

/// The protocols the fault matrix runs: all but utopia, which does not recover losses.
fn lossy_protocols() -> Vec<&'static str> {
    bulkwire_protocol::PROTOCOLS
        .iter()
        .copied()
        .filter(|&p| p != "utopia")
        .collect()
}

#[test]
fn drma_conformance() {
    let prog = program("drma");
    for p in PS {
        let o = bsprun(p, &prog, &[], &[]);
        o.ok(&format!("drma p={p}"));
        assert_eq!(o.count(&format!("drma ok p={p}")), 1, "{}", o.stdout);
        assert_eq!(
            o.count("after bsp_end"),
            1,
            "only pid 0 continues: {}",
            o.stdout
        );
    }
}

#[test]
fn bsmp_conformance() {
    let prog = program("bsmp");
    for p in PS {
        let o = bsprun(p, &prog, &[], &[]);
        o.ok(&format!("bsmp p={p}"));
        assert_eq!(o.count(&format!("bsmp ok p={p}")), 1, "{}", o.stdout);
    }
}

#[test]
fn begin_end_nprocs_and_init() {
    let basics = program("basics");
    let init = program("init");
    for p in PS {
        let o = bsprun(p, &basics, &[], &[]);
        o.ok(&format!("basics p={p}"));
        // bsp_nprocs() before bsp_begin: the job's size under bsprun.
        assert_eq!(o.count(&format!("avail {p}")), p as usize, "{}", o.stdout);
        assert_eq!(o.count(&format!("basics ok p={p}")), 1);
        assert_eq!(o.count("only pid 0 after bsp_end"), 1, "{}", o.stdout);
        // bsp_init: main's sequential parts run on pid 0 only, the SPMD part on all.
        let o = bsprun(p, &init, &[&p.to_string()], &[]);
        o.ok(&format!("init p={p}"));
        assert_eq!(o.count("sequential start"), 1, "{}", o.stdout);
        assert_eq!(o.count("sequential end"), 1, "{}", o.stdout);
        assert_eq!(o.count(&format!("init ok p={p}")), 1, "{}", o.stdout);
    }
    // bsp_begin(P) under bsprun -n N > P: N - P processes sit out and exit 0.
    let o = bsprun(4, &program("drma"), &["2", "2"], &[]);
    o.ok("drma P=2 under -n 4");
    assert_eq!(o.count("drma ok p=2"), 1);
}

#[test]
fn a_program_started_by_itself_runs_like_bsprun() {
    let o = alone(&program("drma"), &["4", "4"], &[]);
    o.ok("./drma 4");
    assert_eq!(o.count("drma ok p=4"), 1);
    assert_eq!(o.count("after bsp_end"), 1);
    let o = alone(&program("init"), &["3"], &[]);
    o.ok("./init 3");
    assert_eq!(o.count("init ok p=3"), 1);
    assert_eq!(o.count("sequential start"), 1, "{}", o.stdout);
    // Before bsp_begin the program itself sees the CPUs; the processes it starts see
    // the job.
    let o = alone(&program("basics"), &["3"], &[]);
    o.ok("./basics 3");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let avail: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("avail"))
        .collect();
    assert_eq!(avail.len(), 3, "{}", o.stdout);
    assert!(
        avail.contains(&format!("avail {cpus}").as_str()),
        "{}",
        o.stdout
    );
    assert_eq!(
        avail.iter().filter(|l| **l == "avail 3").count(),
        2,
        "{}",
        o.stdout
    );
}

#[test]
fn conformance_under_loss_with_every_protocol() {
    for proto in lossy_protocols() {
        let all: [(&str, &[u32]); 4] = [
            ("drma", &[2, 3, 4, 8]),
            ("bsmp", &[2, 3, 4]),
            ("basics", &[3]),
            ("init", &[4]),
        ];
        for (name, ps) in all {
            let prog = program(name);
            for &p in ps {
                let seed = format!("loss=0.05,seed={p}");
                let arg = p.to_string();
                let args: &[&str] = if name == "init" { &[&arg] } else { &[] };
                let o = bsprun(
                    p,
                    &prog,
                    args,
                    &[("BULKWIRE_PROTOCOL", proto), ("BULKWIRE_FAULTS", &seed)],
                );
                o.ok(&format!("{name} p={p} {proto} {seed}"));
                assert_eq!(o.count(&format!("{name} ok p={p}")), 1, "{}", o.stdout);
            }
        }
    }
}

/// The same suite over bulkwire's kernel-TCP stack (`BULKWIRE_PROTOCOL=tcp`); kernel TCP
/// takes no injected faults, so it runs clean.
#[test]
fn conformance_over_kernel_tcp() {
    for (name, ps) in [
        ("drma", &[2u32, 3, 4][..]),
        ("bsmp", &[2, 4]),
        ("basics", &[3]),
    ] {
        let prog = program(name);
        for &p in ps {
            let o = bsprun(p, &prog, &[], &[("BULKWIRE_PROTOCOL", "tcp")]);
            o.ok(&format!("{name} p={p} tcp"));
            assert_eq!(o.count(&format!("{name} ok p={p}")), 1, "{}", o.stdout);
        }
    }
}

#[test]
fn examples_check_their_answers() {
    let examples = [
        ("inner_product", "inner product ok"),
        ("sample_sort", "sample sort ok"),
        ("stencil", "stencil ok"),
    ];
    for (name, ok) in examples {
        let prog = program(name);
        for p in PS {
            let o = bsprun(p, &prog, &[], &[]);
            o.ok(&format!("{name} p={p}"));
            assert_eq!(
                o.stdout.lines().filter(|l| l.starts_with(ok)).count(),
                1,
                "{name} p={p}: {}",
                o.stdout
            );
        }
        for proto in lossy_protocols() {
            let o = bsprun(
                4,
                &prog,
                &[],
                &[
                    ("BULKWIRE_PROTOCOL", proto),
                    ("BULKWIRE_FAULTS", "loss=0.05,seed=11"),
                ],
            );
            o.ok(&format!("{name} p=4 {proto} with loss"));
            assert!(o.stdout.contains(ok));
        }
    }
}

#[test]
fn schedule_pacing_and_statistics() {
    let prog = program("drma");
    let o = bsprun(
        4,
        &prog,
        &[],
        &[
            ("BULKWIRE_BSP_SCHEDULE", "pid"),
            ("BULKWIRE_BSP_RATE", "2G"),
            ("BULKWIRE_BSP_CHUNK", "4K"),
        ],
    );
    o.ok("drma with pid order, a rate cap and 4 KiB chunks");
    // Over UDP with holefill: the protocol whose acknowledgement scheme Table 5 reports.
    let o = bsprun(
        4,
        &prog,
        &[],
        &[
            ("BULKWIRE_STATS", "1"),
            ("BULKWIRE_PROTOCOL", "holefill"),
            ("BULKWIRE_TRANSPORT", "udp"),
        ],
    );
    o.ok("drma with statistics");
    assert!(
        o.stderr
            .contains("bulkwire BSP statistics (holefill over udp, p=4, "),
        "{}",
        o.stderr
    );
    for h in ["Recvd", "ExplAck", "Drops", "Dups", "ImplAck"] {
        assert!(o.stderr.contains(h), "{}", o.stderr);
    }
    let rows: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| {
            l.trim_start()
                .split(' ')
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .collect();
    assert_eq!(rows.len(), 4, "a line per process: {}", o.stderr);
    assert!(
        o.stderr
            .lines()
            .any(|l| l.trim_start().starts_with("total"))
    );
    let o = bsprun(2, &prog, &[], &[("BULKWIRE_BSP_SCHEDULE", "random")]);
    assert_ne!(o.code, Some(0));
    assert!(
        o.stderr.contains("BULKWIRE_BSP_SCHEDULE=\"random\""),
        "{}",
        o.stderr
    );
}

/// Each misuse, the words its error must contain.
const MISUSES: &[(&str, &str)] = &[
    ("put_unregistered", "aborted: bsp_put: address 0x"),
    (
        "put_pending",
        "registrations take effect at the next bsp_sync",
    ),
    ("put_inside", "lies 8 bytes inside the area registered at"),
    (
        "put_bounds",
        "bsp_put: writing 8 bytes at offset 4 into pid 1's area",
    ),
    ("put_bounds", "but pid 1 registered it with 8 bytes"),
    (
        "get_bounds",
        "bsp_get: reading 4 bytes at offset 8 from pid 1's area",
    ),
    (
        "bad_pid",
        "bsp_put: pid 3 is not a process of this computation (pids are 0..2)",
    ),
    ("negative_put", "bsp_put: nbytes is negative (-1)"),
    ("negative_offset", "bsp_get: offset is negative (-8)"),
    ("negative_push", "bsp_push_reg: size is negative (-4)"),
    ("null_source", "bsp_put: the source is NULL"),
    ("pop_unregistered", "bsp_pop_reg: address 0x"),
    (
        "push_count",
        "bsp_push_reg: in superstep 1 pid 0 registered 2 areas but pid 1 registered 1",
    ),
    (
        "push_order",
        "pushed and popped registrations in different orders",
    ),
    (
        "push_swapped",
        "bsp_put: writing 16 bytes at offset 0 into pid 1's area",
    ),
    ("push_swapped", "but pid 1 registered it with 4 bytes"),
    (
        "pop_mismatch",
        "bsp_pop_reg: in superstep 2 pid 0 and pid 1 popped different registrations",
    ),
    (
        "end_vs_sync",
        "bsp_end: pid 1 called bsp_end while pids 0, 2 called bsp_sync",
    ),
    (
        "negative_tagsize",
        "bsp_set_tagsize: the tag size is negative (-1)",
    ),
    (
        "tagsize_mismatch",
        "bsp_set_tagsize: in superstep 1 pid 0 set the tag size to 4 but pid 1 set the tag size to 8",
    ),
    ("move_empty", "bsp_move: the message queue is empty"),
    (
        "move_negative",
        "bsp_move: reception_nbytes is negative (-1)",
    ),
    ("send_negative", "bsp_send: payload_nbytes is negative (-5)"),
    ("send_null_tag", "bsp_send: the tag is NULL but 4 bytes"),
    (
        "get_tag_null_status",
        "bsp_get_tag: the status pointer is NULL",
    ),
    ("begin_twice", "bsp_begin: called twice"),
    ("abort", "rank 1 aborted: custom abort 42 from pid one"),
    ("vabort", "rank 0 aborted: vabort says 7"),
    ("abort_all", "aborted: everyone aborts (pid "),
    ("check_fails", "expected -1"),
];

#[test]
fn misuse_stops_the_job_with_a_clear_message_printed_once() {
    let prog = program("misuse");
    for &(case, words) in MISUSES {
        let o = bsprun(3, &prog, &[case], &[]);
        assert_eq!(o.code, Some(1), "{case}: exit {:?}\n{}", o.code, o.stderr);
        assert!(
            o.stderr.contains(words),
            "{case}: want {words:?} in\n{}",
            o.stderr
        );
        assert_eq!(
            o.stderr.matches("aborted:").count(),
            1,
            "{case}: once\n{}",
            o.stderr
        );
        assert!(!o.stdout.contains("not reached"), "{case}: {}", o.stdout);
        // Promptly: the others were in bsp_sync or about to be.
        assert!(
            o.elapsed < Duration::from_secs(10),
            "{case} took {:?}",
            o.elapsed
        );
    }
    // Outside a job there is no launcher: the process says it itself.
    let o = alone(&prog, &["sync_outside", "1"], &[]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr
            .contains("bsp_sync: called outside bsp_begin ... bsp_end"),
        "{}",
        o.stderr
    );
    // Self-spawned, the program's own launcher prints it.
    let o = alone(&prog, &["abort", "2"], &[]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("misuse: rank 1 aborted: custom abort 42"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.matches("aborted:").count(), 1, "{}", o.stderr);
}

/// Processes whose command line contains `path`.
fn processes_of(path: &Path) -> Vec<u32> {
    let needle = path.to_string_lossy().into_owned();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&c).contains(&needle)
        {
            v.push(pid);
        }
    }
    v
}

/// Spawns a program written a moment ago: another test's fork may still hold the copy's
/// descriptor for an instant (ETXTBSY), so retry briefly.
fn spawn_fresh(c: &mut Command) -> Child {
    for _ in 0..100 {
        match c.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r.unwrap(),
        }
    }
    panic!("the program stayed busy");
}

/// Runs `crash MODE 2 4` (under bsprun or by itself), kills pid 2 when every process has
/// reported, and checks the others stop within a few seconds, the cause named, nothing
/// left behind.
fn kill_one(mode: &str, launched: bool) {
    let prog = private_copy("crash", &format!("{mode}-{launched}"));
    let mut c = if launched {
        let mut c = command(Path::new(BSPRUN), &[]);
        c.args(["--timeout", "90", "-n", "4"]).arg(&prog);
        c
    } else {
        command(&prog, &[])
    };
    c.args([mode, "2", "4"]);
    let start = Instant::now();
    let mut child = spawn_fresh(&mut c);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut victim = None;
    let mut seen = 0;
    while seen < 4 {
        let Some(l) = lines.next() else {
            // The job ended before every process reported: say why.
            let o = finish(child, start);
            panic!("{mode}: not every process reported:\n{}", o.stderr);
        };
        let l = l.unwrap();
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["pid", pid, "os", os] = w[..] {
            seen += 1;
            if pid == "2" {
                victim = Some(os.parse::<i32>().unwrap());
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no report");
    }
    // Let them get into their loops.
    std::thread::sleep(Duration::from_millis(100));
    let killed = Instant::now();
    // SAFETY: kill(2) on a pid we just read from a child we started.
    assert_eq!(unsafe { libc::kill(victim.unwrap(), libc::SIGKILL) }, 0);
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let o = finish(child, start);
    let took = killed.elapsed();
    let rest = rest.join().unwrap();
    assert!(
        took < Duration::from_secs(5),
        "{mode}: the others took {took:?}"
    );
    assert_eq!(o.code, Some(137), "{mode}: {}", o.stderr);
    assert!(
        o.stderr.contains("rank 2 died (signal 9, SIGKILL)"),
        "{mode}: {}",
        o.stderr
    );
    assert!(!rest.iter().any(|l| l.contains("not reached")));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_of(&prog).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(processes_of(&prog).is_empty(), "{mode}: orphans left");
    let _ = std::fs::remove_file(&prog);
}

#[test]
fn a_killed_process_stops_the_others_under_bsprun() {
    kill_one("sync", true);
    kill_one("compute", true);
}

#[test]
fn a_killed_process_stops_the_others_when_self_spawned() {
    kill_one("sync", false);
    // Pid 0 computes without calling the library: the watchdog ends it.
    kill_one("compute", false);
}

#[test]
fn a_process_that_dies_by_itself_is_named() {
    let o = bsprun(4, &program("crash"), &["self", "3", "4"], &[]);
    assert_eq!(o.code, Some(137));
    assert!(
        o.stderr.contains("rank 3 died (signal 9, SIGKILL)"),
        "{}",
        o.stderr
    );
}

#[test]
fn bspcc_compiles_like_oxfords() {
    let dir = out_dir().join(format!("bspcc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("part.c"),
        "#include <bsp.h>\nint twice(int x) { return 2 * x + bsp_pid(); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\n#include <bsp.h>\nint twice(int);\n\
         int main(void) { bsp_begin(2); int v = twice(21);\n\
         if (bsp_pid() == 0) printf(\"v=%d\\n\", v); bsp_end(); return 0; }\n",
    )
    .unwrap();
    let bspcc = |args: &[&str]| {
        Command::new(BSPCC)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    // -c, then linking objects and sources together, Oxford's options ignored.
    let o = bspcc(&["-c", "-O2", "part.c", "-flibrary-level", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.join("part.o").exists());
    let o = bspcc(&["-v", "-fcombine-puts", "part.o", "main.c", "-o", "prog"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cmd = String::from_utf8_lossy(&o.stderr);
    assert!(
        cmd.contains("libbulkwire.a") && cmd.contains("-o prog"),
        "{cmd}"
    );
    assert!(!cmd.contains("library-level"), "{cmd}");
    let o = alone(&dir.join("prog"), &[], &[]);
    o.ok("bspcc-built program");
    assert_eq!(o.stdout, "v=42\n");
    // --show prints without running; errors are the compiler's.
    let o = bspcc(&["--show", "main.c"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("main.c"));
    std::fs::write(dir.join("bad.c"), "int main(void) { return nope; }\n").unwrap();
    assert!(!bspcc(&["bad.c", "-o", "bad"]).status.success());
    let o = bspcc(&[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no input files"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_benchmark_kernel_runs_from_c() {
    let o = bsprun(2, &program("bspbench"), &["32", "5", "100"], &[]);
    o.ok("bspbench");
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("p=2 g="))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    let num = |key: &str| -> f64 {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(num("g=").is_finite());
    assert!(num("l=").is_finite());
    assert!(num("empty=") > 0.0);
    assert!(o.stdout.contains("empty superstep:"), "{}", o.stdout);
}
