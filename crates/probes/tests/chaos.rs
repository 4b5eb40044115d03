//! The chaos campaign with real processes: jobs of the probes (p2p `mix`, the collectives'
//! `suite`, BSP `steps`, which check their results) over shared memory, UDP and kernel
//! TCP, p in {2, 3, 4}, with seeded random `BULKWIRE_FAULTS`, a rank stopped for a while
//! (SIGSTOP, then SIGCONT) or killed (SIGKILL), and sometimes no progress thread. Each
//! job must end within its bound, correct, or, when a rank was killed, failing with a
//! message that names it; no process may be left behind. A failure prints the seed and
//! the schedule. A short campaign runs with `cargo test`, a longer one with `--ignored`.

use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_launch::testing::{self, Out, field};

const P2P_PROBE: &str = env!("CARGO_BIN_EXE_p2p-probe");

/// The bound of every job: far above what a job needs, loaded machine included.
const LIMIT: Duration = Duration::from_secs(120);
/// Messages per pair of the p2p probe's `mix`.
const MIX: &str = "600";

/// The dead-peer deadline of the jobs: stops stay well under it.
const DEAD_AFTER_MS: u64 = 8000;

/// The schedules' random numbers (SplitMix64: a seed gives the same schedule anywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    fn below(&mut self, x: f64) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * x
    }

    fn chance(&mut self, p: f64) -> bool {
        self.below(1.0) < p
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    P2p,
    Coll,
    Bsp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Shm,
    Udp,
    Tcp,
}

#[derive(Clone, Copy, Debug)]
enum Act {
    Nothing,
    /// Stop `rank` after `at` ms for `ms` ms.
    Stop {
        rank: u32,
        at: u64,
        ms: u64,
    },
    /// Kill `rank` after `at` ms.
    Kill {
        rank: u32,
        at: u64,
    },
}

#[derive(Debug)]
struct Job {
    seed: u64,
    work: Work,
    transport: Transport,
    p: u32,
    protocol: &'static str,
    faults: String,
    progress_off: bool,
    /// Collectives by point-to-point messages over the transport (where the faults are),
    /// not by the shared-memory network cache.
    coll_p2p: bool,
    act: Act,
}

fn job(seed: u64, work: Work, transport: Transport, p: u32) -> Job {
    let mut rng = Rng(seed);
    let protocol = match transport {
        Transport::Tcp => "tcp",
        _ => ["holefill", "gbn", "rmpp"][rng.range(0, 3) as usize],
    };
    let mut faults = String::new();
    if transport != Transport::Tcp {
        for (k, max) in [
            ("loss", 0.1),
            ("corrupt", 0.02),
            ("dup", 0.02),
            ("reorder", 0.02),
        ] {
            if rng.chance(0.6) {
                faults += &format!("{k}={:.4},", rng.below(max));
            }
        }
        if rng.chance(0.3) {
            faults += &format!("delay={:.4},delay_us=500,", rng.below(0.01));
        }
        faults += &format!("seed={seed}");
    }
    let rank = rng.range(1, p as u64) as u32;
    let act = match rng.range(0, 100) {
        0..40 => Act::Nothing,
        40..75 => Act::Stop {
            rank,
            at: rng.range(20, 200),
            ms: rng.range(100, 800),
        },
        _ => Act::Kill {
            rank,
            at: rng.range(20, 300),
        },
    };
    Job {
        seed,
        work,
        transport,
        p,
        protocol,
        faults,
        progress_off: rng.chance(0.2),
        coll_p2p: rng.chance(0.7),
        act,
    }
}

/// The pid of `rank` among the processes carrying `mark` (ranks above 0 carry their rank
/// in the environment; rank 0 started them).
fn pid_of(mark: &str, rank: u32) -> Option<i32> {
    let want = [
        format!("{}={mark}", testing::MARK_VAR),
        format!("BULKWIRE_RANK={rank}"),
    ];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_string_lossy().parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        want.iter()
            .all(|w| vars.contains(&w.as_bytes()))
            .then_some(pid)
    })
}

/// Sends `sig` to `rank` of the job marked `mark` once it is up, after `at` ms; whether
/// the signal was delivered.
fn signal(mark: &str, rank: u32, at: u64, sig: i32) -> Option<i32> {
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(at));
    while t0.elapsed() < Duration::from_secs(20) {
        if let Some(pid) = pid_of(mark, rank) {
            // SAFETY: kill(2) on a process this test started; no memory is involved.
            return (unsafe { libc::kill(pid, sig) } == 0).then_some(pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The job's command in a clean environment marked `mark` ([`testing::clean`]), with the
/// job's settings.
fn command(j: &Job, mark: &str) -> Command {
    let n = j.p.to_string();
    let mut c = match j.work {
        Work::P2p => {
            let mut c = Command::new(P2P_PROBE);
            c.args(["-n", &n, "mix", MIX, "65536"]);
            c
        }
        Work::Coll => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_coll-probe"));
            c.args(["-n", &n, "suite", "8", "1024", "65536", "262144"]);
            c
        }
        Work::Bsp => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_bsp-probe"));
            c.args([&n, "steps", "1000"]);
            c
        }
    };
    testing::clean(&mut c, mark);
    let transport = match j.transport {
        Transport::Shm => "shm",
        Transport::Udp | Transport::Tcp => "udp",
    };
    c.env("BULKWIRE_TRANSPORT", transport)
        .env("BULKWIRE_PROTOCOL", j.protocol)
        .env("BULKWIRE_DEAD_AFTER_MS", DEAD_AFTER_MS.to_string());
    if !j.faults.is_empty() {
        c.env("BULKWIRE_FAULTS", &j.faults);
    }
    if j.progress_off {
        c.env("BULKWIRE_PROGRESS_US", "0");
    }
    if j.coll_p2p {
        c.env("BULKWIRE_COLL", "p2p");
    }
    c
}

/// Every rank reported its work done and correct.
fn correct(j: &Job, out: &Out) -> Result<(), String> {
    if out.code != Some(0) {
        return Err(format!("exit {:?}", out.code));
    }
    let (prefix, each) = match j.work {
        Work::P2p => (
            "mix ",
            Some(MIX.parse::<usize>().unwrap() * (j.p as usize - 1)),
        ),
        Work::Coll => ("suite rank=", None),
        Work::Bsp => ("steps ok", None),
    };
    let lines = out.lines(prefix);
    if lines.len() != j.p as usize {
        return Err(format!("{} of {} ranks reported", lines.len(), j.p));
    }
    if let Some(n) = each
        && let Some(l) = lines.iter().find(|l| field::<usize>(l, "received") != n)
    {
        return Err(format!("{l}: expected {n} messages"));
    }
    Ok(())
}

/// Runs one job with its action; `Err` describes what went wrong.
fn play(j: &Job) -> Result<(), String> {
    let mark = testing::mark();
    let mut c = command(j, &mark);
    let m = mark.clone();
    let act = j.act;
    let actor = std::thread::spawn(move || match act {
        Act::Nothing => None,
        Act::Stop { rank, at, ms } => {
            let pid = signal(&m, rank, at, libc::SIGSTOP)?;
            std::thread::sleep(Duration::from_millis(ms));
            // SAFETY: as in `signal`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
            None
        }
        Act::Kill { rank, at } => signal(&m, rank, at, libc::SIGKILL).map(|_| rank),
    });
    let out = testing::run(&mut c, LIMIT);
    let killed = actor.join().unwrap_or(None);
    testing::assert_no_leftovers(&mark);
    eprintln!(
        "seed {} {:?} {:?} p={} {} {:?}: exit {:?} in {:.2} s",
        j.seed,
        j.work,
        j.transport,
        j.p,
        j.protocol,
        j.act,
        out.code,
        out.elapsed.as_secs_f64()
    );
    let text = format!("{}\n{}", out.stdout, out.stderr);
    match killed {
        // Killed after it had finished its part: either ending is right.
        Some(r) if out.code != Some(0) => {
            let named = [format!("rank {r} "), format!("pid {r} ")];
            if named.iter().any(|n| text.contains(n.as_str())) {
                Ok(())
            } else {
                Err(format!("rank {r} was killed; the failure does not name it"))
            }
        }
        _ => correct(j, &out),
    }
    .map_err(|e| {
        format!(
            "seed {}: {e}\n  {j:?}\n  exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            j.seed, out.code, out.elapsed, out.stdout, out.stderr
        )
    })
}

fn campaign(jobs: Vec<Job>) {
    let n = jobs.len();
    let bad: Vec<String> = jobs.iter().filter_map(|j| play(j).err()).collect();
    eprintln!("{n} jobs, {} bad", bad.len());
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

const WORKS: [Work; 3] = [Work::P2p, Work::Coll, Work::Bsp];
const TRANSPORTS: [Transport; 3] = [Transport::Shm, Transport::Udp, Transport::Tcp];

/// Every transport, workload and p once, each with its seed's faults and action.
#[test]
fn chaos_over_every_transport_workload_and_size() {
    let mut jobs = Vec::new();
    let mut seed = 1;
    for t in TRANSPORTS {
        for w in WORKS {
            for p in [2, 3, 4] {
                jobs.push(job(seed, w, t, p));
                seed += 1;
            }
        }
    }
    campaign(jobs);
}

#[test]
#[ignore]
fn long_chaos_campaign() {
    let jobs = (1000..1200)
        .map(|seed| {
            let mut rng = Rng(seed ^ 0xC4A05);
            let w = WORKS[rng.range(0, 3) as usize];
            let t = TRANSPORTS[rng.range(0, 3) as usize];
            job(seed, w, t, rng.range(2, 5) as u32)
        })
        .collect();
    campaign(jobs);
}

/// utopia over a link that loses fails the job with the reason, instead of hanging.
#[test]
fn utopia_over_a_lossy_link_fails_and_says_why() {
    for work in WORKS {
        let j = Job {
            seed: 0,
            work,
            transport: Transport::Udp,
            p: 3,
            protocol: "utopia",
            faults: "loss=0.02,seed=5".into(),
            progress_off: false,
            coll_p2p: true,
            act: Act::Nothing,
        };
        let mark = testing::mark();
        let out = testing::run(&mut command(&j, &mark), LIMIT);
        testing::assert_no_leftovers(&mark);
        let text = format!("{}\n{}", out.stdout, out.stderr);
        assert_ne!(out.code, Some(0), "{work:?}: {out:#?}");
        assert!(
            text.contains("utopia has no recovery") && text.contains("were lost"),
            "{work:?}: {out:#?}"
        );
        assert!(out.elapsed < Duration::from_secs(30), "{work:?}: {out:#?}");
    }
}
