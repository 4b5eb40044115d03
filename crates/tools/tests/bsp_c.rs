//! BSPlib from C and C++, end to end: programs under `tests/c/` and `examples/c/` are
//! compiled with `bspcc` (`bspcxx`) against `libbulkwire.a` and run with `bsprun` (or by
//! themselves). The conformance programs check every primitive and rule and abort on the
//! first failure; this file checks how the jobs end.
//!
//! Dialects: the conformance programs are written with BSPonMPI's dialect-neutral types
//! and compiled three ways (the int dialect, MulticoreBSP's through `bsp.h` with
//! `--mcbsp`, and through `mcbsp.h`); `check.h` checks each dialect's types and signatures
//! at compile time.
//!
//! Budget: in the int dialect every program runs at p = 1, 2, 3, 4 and 8, in the others
//! at p = 1 to 4; the fault matrix (5% loss, every protocol but utopia) runs the DRMA,
//! BSMP and example programs at a few p.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BSPCC: &str = env!("CARGO_BIN_EXE_bspcc");
const BSPCXX: &str = env!("CARGO_BIN_EXE_bspcxx");
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

/// The BSPlib dialects a program is compiled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// `bsp.h`: the Oxford toolset's and BSPonMPI's.
    Int,
    /// `bsp.h` with `bspcc --mcbsp`: MulticoreBSP for C 2's.
    Mcbsp,
    /// `mcbsp.h`: MulticoreBSP for C 1's header name, the same dialect.
    McbspH,
}

impl Dialect {
    const ALL: [Dialect; 3] = [Dialect::Int, Dialect::Mcbsp, Dialect::McbspH];

    fn flags(self) -> &'static [&'static str] {
        match self {
            Dialect::Int => &[],
            Dialect::Mcbsp => &["--mcbsp"],
            Dialect::McbspH => &["-DUSE_MCBSP_H"],
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Dialect::Int => "",
            Dialect::Mcbsp => "-mcbsp",
            Dialect::McbspH => "-mcbsp-h",
        }
    }
}

/// Compiles `name.c` once per test run; returns the executable.
fn program(name: &str) -> PathBuf {
    program_in(name, Dialect::Int)
}

/// Compiles `name.c` (or `name.cpp`, with bspcxx) in `dialect` once per test run.
fn program_in(name: &str, dialect: Dialect) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{name}{}", dialect.suffix());
    let mut g = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(&key) {
        return p.clone();
    }
    let lib = Path::new(BSPCC).with_file_name("libbulkwire.a");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --profile test -p bulkwire-capi` before the tests \
         (.ci/test does)",
        lib.display()
    );
    let cxx = source_dir(false).join(format!("{name}.cpp"));
    let example = !cxx.exists() && !source_dir(false).join(format!("{name}.c")).exists();
    let dir = source_dir(example);
    let (wrapper, src, std) = if cxx.exists() {
        (BSPCXX, cxx, "-std=c++17")
    } else {
        (BSPCC, dir.join(format!("{name}.c")), "-std=gnu11")
    };
    let exe = out_dir().join(&key);
    // Built under another name and renamed: a program being written is never started.
    let tmp = out_dir().join(format!(".{key}.{}", std::process::id()));
    let o = Command::new(wrapper)
        .args([std, "-O2", "-Wall", "-Wextra", "-Werror"])
        .args(dialect.flags())
        .arg("-I")
        .arg(&dir)
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{wrapper} {} ({dialect:?}) failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::rename(&tmp, &exe).unwrap();
    map.insert(key, exe.clone());
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

/// The conformance programs in MulticoreBSP's dialect (both ways of selecting it), at
/// p = 1 to 4; the int dialect runs them in the tests above.
#[test]
fn conformance_in_multicorebsp_dialects() {
    for d in [Dialect::Mcbsp, Dialect::McbspH] {
        for name in ["drma", "bsmp", "basics", "init"] {
            let prog = program_in(name, d);
            for p in 1..=4u32 {
                let arg = p.to_string();
                let args: &[&str] = if name == "init" { &[&arg] } else { &[] };
                let o = bsprun(p, &prog, args, &[]);
                o.ok(&format!("{name} {d:?} p={p}"));
                assert_eq!(o.count(&format!("{name} ok p={p}")), 1, "{}", o.stdout);
            }
        }
    }
}

/// Every primitive of MulticoreBSP's dialect, its documented behaviour where it differs
/// (bsp_direct_get, bsp_move on an empty queue, SIZE_MAX for no message, qsize without a
/// byte count), the mcbsp_* names and the affinity, profiling and checkpointing calls.
#[test]
fn multicorebsp_programs_run_with_every_primitive() {
    for d in [Dialect::Mcbsp, Dialect::McbspH] {
        let prog = program_in("mcbsp_all", d);
        for p in 1..=4u32 {
            let o = bsprun(p, &prog, &[&p.to_string()], &[]);
            o.ok(&format!("mcbsp_all {d:?} p={p}"));
            assert_eq!(o.count(&format!("mcbsp ok p={p}")), 1, "{}", o.stdout);
        }
    }
}

/// `bsp_begin` after `bsp_end`: each section's processes run the function bsp_init last
/// named, and only pid 0 runs main between them; started by itself and under bsprun
/// (whose other processes have ended: pid 0 starts the next section's itself).
#[test]
fn several_spmd_sections_in_one_program() {
    let want = |o: &Out, p: u32, what: &str| {
        o.ok(what);
        assert_eq!(o.count("section 1 ok p=2"), 2, "{what}: {}", o.stdout);
        assert_eq!(
            o.count(&format!("section 2 ok p={p}")),
            1,
            "{what}: {}",
            o.stdout
        );
        assert_eq!(o.count("between sections"), 1, "{what}: {}", o.stdout);
        assert_eq!(o.count("sections done"), 1, "{what}: {}", o.stdout);
    };
    for d in Dialect::ALL {
        let prog = program_in("sections", d);
        want(&alone(&prog, &["3"], &[]), 3, &format!("sections {d:?}"));
    }
    let prog = program("sections");
    want(
        &bsprun(2, &prog, &["4"], &[]),
        4,
        "sections under bsprun -n 2",
    );
    // Without bsp_init the new processes would run main from the top: refused, named.
    let o = alone(&prog, &["2", "no-init"], &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "bsp_begin: a new SPMD section (bsp_begin after bsp_end) starts processes that \
             run the function last given to bsp_init, and this program called no bsp_init"
        ),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("not reached"));
}

/// Nested sections (MulticoreBSP's `hierarchical` example): every process of a section
/// begins one of its own after naming its function with bsp_init, as pid 0 of it; its
/// bsp_end returns to the outer section, whose registrations and pids still hold. Started
/// by itself (the outer pid 0 runs two jobs at once) and under bsprun, in each dialect.
#[test]
fn nested_spmd_sections_split_the_machine() {
    let want = |o: &Out, q: u32, what: &str| {
        o.ok(what);
        for s in 0..2u32 {
            let sum: u32 = (0..q).map(|k| 100 * s + k).sum();
            assert_eq!(
                o.count(&format!("outer {s}: inner {q} ok sum {sum}")),
                1,
                "{what}: {}",
                o.stdout
            );
            assert_eq!(
                o.count(&format!("outer {s} ok p=2")),
                1,
                "{what}: {}",
                o.stdout
            );
        }
        assert_eq!(o.count("nested done"), 1, "{what}: {}", o.stdout);
        assert!(!o.stdout.contains("not reached"), "{what}: {}", o.stdout);
    };
    for d in Dialect::ALL {
        let prog = program_in("nested", d);
        want(&alone(&prog, &["3"], &[]), 3, &format!("nested {d:?}"));
    }
    let prog = program("nested");
    want(
        &alone(&prog, &["1"], &[]),
        1,
        "nested, inner sections of one",
    );
    want(
        &bsprun(2, &prog, &["2"], &[]),
        2,
        "nested under bsprun -n 2",
    );
}

/// A program that starts its own sections gives pid 0's thread its share of the CPUs in
/// each, and all of them back at bsp_end: bsp_nprocs() outside the sections stays the
/// CPU count, and the second section is as wide as the first.
#[test]
fn cpus_are_given_back_after_a_self_started_section() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus < 2 {
        eprintln!("skipped: one CPU, so nothing is bound");
        return;
    }
    for d in Dialect::ALL {
        let o = alone(&program_in("affinity", d), &[], &[]);
        o.ok(&format!("affinity {d:?}"));
        for l in ["before", "between", "after"] {
            assert_eq!(o.count(&format!("{l} {cpus}")), 1, "{d:?}: {}", o.stdout);
        }
        assert_eq!(
            o.count(&format!("section p={cpus}")),
            2,
            "{d:?}: {}",
            o.stdout
        );
    }
    // Nothing bound, nothing to give back.
    let o = alone(&program("affinity"), &[], &[("BULKWIRE_BIND", "none")]);
    o.ok("affinity, BULKWIRE_BIND=none");
    assert_eq!(o.count(&format!("after {cpus}")), 1, "{}", o.stdout);
}

/// A process given a `BULKWIRE_SPMD_ENTRY` that names no function of the program (the ELF
/// header, where a rank once jumped and crashed; a check that does not match) stops at its
/// first call into the library with an error naming the variable and the value, and the
/// job fails; no rank crashes.
#[test]
fn spmd_entries_that_point_nowhere_are_refused_at_start() {
    let prog = program("sections");
    for entry in [
        "0:0:",
        "0:0:0000000000000000:",
        "0:40:0123456789abcdef:",
        "0:0:/not/this/program",
    ] {
        let o = bsprun(2, &prog, &["3"], &[("BULKWIRE_SPMD_ENTRY", entry)]);
        assert_ne!(o.code, Some(0), "{entry}: {}", o.stderr);
        assert!(
            o.stderr
                .contains(&format!("BULKWIRE_SPMD_ENTRY={entry:?} is not accepted")),
            "{entry}: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("SIGSEGV"), "{entry}: {}", o.stderr);
    }
}

/// MulticoreBSP's examples name their SPMD function with bsp_init after reading input:
/// started by itself, the program's other processes run that function, not main's code
/// before it.
#[test]
fn bsp_init_after_code_of_main_started_by_itself() {
    for d in Dialect::ALL {
        let prog = program_in("late_init", d);
        let o = alone(&prog, &["3"], &[]);
        o.ok(&format!("late_init {d:?}"));
        assert_eq!(
            o.count("prologue with 1 available"),
            1,
            "{d:?}: {}",
            o.stdout
        );
        assert_eq!(o.count("late init ok p=3"), 1, "{d:?}: {}", o.stdout);
        assert_eq!(o.count("epilogue"), 1, "{d:?}: {}", o.stdout);
    }
}

/// C++: bsp.h in each dialect and bulkwire.h compile as C++ (with -Wall -Wextra -Werror)
/// and run.
#[test]
fn cxx_programs_build_with_bspcxx_and_run() {
    for d in Dialect::ALL {
        let prog = program_in("cxx_bsp", d);
        for p in [1u32, 3] {
            let o = bsprun(p, &prog, &[&p.to_string()], &[]);
            o.ok(&format!("cxx_bsp {d:?} p={p}"));
            assert_eq!(o.count(&format!("cxx ok p={p}")), 1, "{}", o.stdout);
        }
    }
    let o = alone(&program("cxx_p2p"), &["3"], &[]);
    o.ok("cxx_p2p");
    assert_eq!(o.count("cxx p2p ok n=3"), 1, "{}", o.stdout);
}

/// MulticoreBSP's C++ interface, `bsp.hpp`: a class deriving from `mcbsp::BSP_program`
/// begun with begin(P) and then begin() (bsp_nprocs() processes), as its hello_world_cpp
/// does; built with plain bspcxx (the header selects MulticoreBSP's dialect) and with
/// `--mcbsp`, run by itself and under bsprun. Pid 0's object holds what its spmd()
/// gathered after begin() returns.
#[test]
fn multicorebsp_cxx_interface_runs_bsp_programs() {
    let want = |o: &Out, p: u32, what: &str| {
        o.ok(what);
        let sum: u32 = (0..p).sum();
        assert_eq!(
            o.count(&format!("sum 1 = {sum} ({p} processes)")),
            1,
            "{what}: {}",
            o.stdout
        );
        assert_eq!(o.count("between sections"), 1, "{what}: {}", o.stdout);
        // The second section has what bsp_nprocs() gave before it: read it back.
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with("sum 2 = "))
            .unwrap_or_else(|| panic!("{what}: no second section\n{}", o.stdout));
        let n: u32 = line
            .split('(')
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what}: {line:?}"));
        assert!(n >= 1, "{what}: {line}");
        let sum: u32 = (0..n).sum();
        assert_eq!(line, format!("sum 2 = {sum} ({n} processes)"), "{what}");
        // Every process of each section says hello once.
        let mut want: std::collections::HashMap<String, usize> = Default::default();
        for m in [p, n] {
            for s in 0..m {
                *want.entry(format!("hello from {s} of {m}")).or_default() += 1;
            }
        }
        for (l, c) in &want {
            assert_eq!(o.count(l), *c, "{what}: {l:?} in {}", o.stdout);
        }
        let hellos = o.stdout.lines().filter(|l| l.starts_with("hello")).count();
        assert_eq!(hellos, (p + n) as usize, "{what}: {}", o.stdout);
    };
    for d in [Dialect::Int, Dialect::Mcbsp] {
        let prog = program_in("cxx_mcbsp", d);
        want(&alone(&prog, &["3"], &[]), 3, &format!("bsp.hpp {d:?}"));
        let o = bsprun(2, &prog, &["2"], &[]);
        want(&o, 2, &format!("bsp.hpp {d:?} under bsprun -n 2"));
        assert!(o.stdout.contains("sum 2 = 1 (2 processes)"), "{}", o.stdout);
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

/// The README's example with a size of its own: N is read after `bsp_init`, on pid 0
/// only, and reaches the other processes in the section (under bsprun and started by
/// itself).
#[test]
fn inner_product_with_a_size_of_its_own() {
    let prog = program("inner_product");
    let sum = |n: u64| n * (n + 1) * (2 * n + 1) / 6;
    for (p, n) in [(4u32, 100u64), (3, 7), (2, 1000), (4, 1)] {
        let o = bsprun(p, &prog, &[&n.to_string()], &[]);
        o.ok(&format!("bsprun -n {p} inner_product {n}"));
        let want = format!("inner product ok: n={n} p={p} sum={} ", sum(n));
        assert_eq!(
            o.stdout.lines().filter(|l| l.starts_with(&want)).count(),
            1,
            "p={p} n={n}: {}",
            o.stdout
        );
    }
    let o = alone(&prog, &["1000"], &[("BULKWIRE_NPROCS", "3")]);
    o.ok("./inner_product 1000");
    let want = format!("inner product ok: n=1000 p=3 sum={} ", sum(1000));
    assert_eq!(
        o.stdout.lines().filter(|l| l.starts_with(&want)).count(),
        1,
        "{}",
        o.stdout
    );
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
    let o = bsprun(2, &prog, &[], &[("BULKWIRE_BSP_SCHEDULE", "shuffle")]);
    assert_ne!(o.code, Some(0));
    assert!(
        o.stderr.contains("BULKWIRE_BSP_SCHEDULE=\"shuffle\""),
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
        "bsp_end: pid 1 called bsp_end while pid 0 called bsp_sync",
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
    (
        "pop_null_nothing",
        "bsp_pop_reg: in superstep 1 every process popped NULL (call 1), but no registration",
    ),
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
    // Every call but bsp_nprocs needs a running SPMD section: before bsp_begin, and on pid
    // 0 after bsp_end.
    let o = alone(&prog, &["pid_outside", "1"], &[]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr
            .contains("bsp_pid: called outside bsp_begin ... bsp_end"),
        "{}",
        o.stderr
    );
    let o = bsprun(2, &prog, &["time_after_end"], &[]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("bsp_time: called outside bsp_begin ... bsp_end"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("time "), "{}", o.stdout);
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

/// `bsp_abort` in MulticoreBSP's dialect does what it does in the int dialect (see
/// docs/bsp.md): the job stops with status 1 and the message printed once, naming the
/// process, and control does not return to main; self-started and under bsprun.
#[test]
fn bsp_abort_stops_the_program_in_every_dialect() {
    for d in Dialect::ALL {
        let prog = program_in("abort_main", d);
        for (how, o) in [
            ("self-started", alone(&prog, &["3"], &[])),
            ("bsprun -n 3", bsprun(3, &prog, &["3"], &[])),
        ] {
            assert_eq!(o.code, Some(1), "{d:?} {how}: {}", o.stderr);
            assert_eq!(
                o.stderr.matches("rank 1 aborted: stopped by pid 1").count(),
                1,
                "{d:?} {how}: {}",
                o.stderr
            );
            assert!(
                !o.stdout.contains("back in main"),
                "{d:?} {how}: {}",
                o.stdout
            );
        }
    }
}

/// Four processes that misuse a call at the same moment share one stderr: every message is
/// written whole, in one write, so no line holds two processes' words.
#[test]
fn messages_of_processes_that_fail_at_once_are_whole_lines() {
    let prog = program("misuse");
    let line = "bsp_pid: called outside bsp_begin ... bsp_end";
    for round in 0..5 {
        let o = bsprun(4, &prog, &["pid_outside"], &[]);
        assert_eq!(o.code, Some(1), "round {round}: {}", o.stderr);
        let ours: Vec<&str> = o.stderr.lines().filter(|l| l.contains("bsp_pid")).collect();
        assert!(!ours.is_empty(), "round {round}: {}", o.stderr);
        for l in ours {
            assert_eq!(l, line, "round {round}: {}", o.stderr);
        }
    }
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

/// Runs `cmd` in a process group of its own, which is killed after `limit`: a wrapper
/// that ran itself would otherwise go on forking.
fn bounded(mut cmd: Command, limit: Duration) -> Out {
    use std::os::unix::process::CommandExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let child = cmd.spawn().unwrap();
    let group = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let dog = std::thread::spawn(move || {
        while !flag.load(Ordering::SeqCst) {
            if start.elapsed() > limit {
                // SAFETY: a signal to the process group this test started.
                unsafe { libc::kill(-group, libc::SIGKILL) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
    let o = finish(child, start);
    done.store(true, Ordering::SeqCst);
    assert!(!dog.join().unwrap(), "killed after {limit:?}: {}", o.stderr);
    o
}

/// `bspcc` in `dir`, with `PATH` starting with `path_first` and `env` set.
fn wrapper_in(dir: &Path, path_first: &[&Path], env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut path: Vec<PathBuf> = path_first.iter().map(|p| p.to_path_buf()).collect();
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut c = Command::new(BSPCC);
    c.args(args)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env_remove("CC")
        .env_remove("BSPCC_CC")
        .envs(env.iter().copied());
    c
}

#[test]
fn bspcc_never_runs_itself_and_passes_the_compilers_errors_on() {
    let dir = out_dir().join(format!("selfcc-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        dir.join("prog.c"),
        "#include <stdio.h>\n#include <bsp.h>\nint main(void) { bsp_begin(2);\n\
         bsp_pid_t s = bsp_pid(); bsp_sync(); if (s == 0) printf(\"prog %d\\n\", (int)bsp_nprocs());\n\
         bsp_end(); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("Makefile"),
        "prog: prog.o\n\t$(CC) -o prog prog.o\nprog.o: prog.c\n\t$(CC) -O2 -c prog.c\n",
    )
    .unwrap();
    let wrappers = Path::new(BSPCC).parent().unwrap();
    let limit = Duration::from_secs(60);
    let built = |o: &Out, what: &str| {
        o.ok(what);
        let run = alone(&dir.join("prog"), &[], &[]);
        run.ok(what);
        assert_eq!(run.stdout, "prog 2\n", "{what}");
        let _ = std::fs::remove_file(dir.join("prog"));
    };
    // make exports CC=bspcc to the commands it runs: the wrapper finds itself there.
    let mut make = Command::new("make");
    make.args(["-s", "CC=bspcc"]).current_dir(&dir).env(
        "PATH",
        std::env::join_paths(
            std::iter::once(wrappers.to_path_buf()).chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
        )
        .unwrap(),
    );
    built(&bounded(make, limit), "make CC=bspcc");
    // Named by its full path, in either variable.
    let o = bounded(
        wrapper_in(
            &dir,
            &[],
            &[("CC", BSPCC), ("BSPCC_CC", BSPCC)],
            &["prog.c", "-o", "prog"],
        ),
        limit,
    );
    built(&o, "CC=BSPCC_CC=bspcc's path");
    // A `cc` on the PATH that is this wrapper (a symlink): skipped for gcc.
    std::os::unix::fs::symlink(BSPCC, bin.join("cc")).unwrap();
    let o = bounded(
        wrapper_in(&dir, &[&bin], &[], &["-v", "prog.c", "-o", "prog"]),
        limit,
    );
    assert!(
        o.stderr
            .lines()
            .next()
            .is_some_and(|l| !l.starts_with(bin.join("cc").to_str().unwrap())),
        "{}",
        o.stderr
    );
    built(&o, "cc -> bspcc first on the PATH");
    // A script that calls the wrapper back: the wrapper it starts ignores $CC.
    let script = bin.join("mycc");
    std::fs::write(&script, format!("#!/bin/sh\nexec {BSPCC} \"$@\"\n")).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = bounded(
        wrapper_in(
            &dir,
            &[],
            &[("CC", script.to_str().unwrap())],
            &["prog.c", "-o", "prog"],
        ),
        limit,
    );
    built(&o, "CC=a script calling bspcc");
    // A compiler that is not there is named, not replaced.
    let o = bounded(
        wrapper_in(
            &dir,
            &[],
            &[("CC", "/nonexistent/cc")],
            &["prog.c", "-o", "prog"],
        ),
        limit,
    );
    assert_eq!(o.code, Some(2));
    assert!(
        o.stderr
            .contains("bspcc: the compiler $CC = /nonexistent/cc was not found"),
        "{}",
        o.stderr
    );
    // The compiler's diagnostics reach the user whole, with its exit status.
    std::fs::write(
        dir.join("bad.c"),
        "int f(void) { return first_undeclared; }\nint g(void) { return second_undeclared; }\n",
    )
    .unwrap();
    let o = bounded(wrapper_in(&dir, &[], &[], &["-c", "bad.c"]), limit);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    for name in ["first_undeclared", "second_undeclared"] {
        assert!(
            o.stderr
                .lines()
                .any(|l| l.contains("error") && l.contains(name)),
            "{name}: {}",
            o.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bulkwire.h program needs nothing but bspcc: the header comes with it.
#[test]
fn bspcc_builds_bulkwire_h_programs() {
    let dir = out_dir().join(format!("bwcc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bw.c"),
        "#include <stdio.h>\n#include <bulkwire.h>\nint main(void) {\n\
         if (bw_init_spawn(3) != BW_SUCCESS) return 1;\n\
         int r, n; bw_rank(&r); bw_size(&n); long long one = 1, all = 0;\n\
         if (bw_allreduce(&one, &all, 1, BW_INT64, BW_SUM) != BW_SUCCESS) return 1;\n\
         if (r == 0) printf(\"bw %d %lld\\n\", n, all);\n\
         return bw_finalize() != BW_SUCCESS; }\n",
    )
    .unwrap();
    let o = Command::new(BSPCC)
        .args(["-O2", "bw.c", "-o", "bw"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = alone(&dir.join("bw"), &[], &[]);
    o.ok("bulkwire.h program built by bspcc");
    assert_eq!(o.stdout, "bw 3 3\n");
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
