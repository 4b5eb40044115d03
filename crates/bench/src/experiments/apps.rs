//! The application level (the BSPlib paper's Tables 3, 4 and 5): the NAS kernels of
//! `apps/npb`, built here with the suite's `bspcc` and the user's `mpicc`, each at p = 2
//! and 4, over BSPlib on every bulkwire stack beside MPI over shared memory and TCP, in
//! alternating rounds (each round runs every stack once, in an order rotated from round
//! to round). The BSP runs are profiled (`BULKWIRE_PROFILE`): the packet statistics and
//! where the time in `bsp_sync` went come from the profiles, and `bwbench bsp`'s g and l,
//! measured in the same run, give the BSP cost `W + H g + S l`.
//!
//! Targets (class W, p = 2, ratios within each round): the BSP version's communication
//! time over holefill/UDP at most half the MPI version's over TCP, and over shared memory
//! at most the MPI version's, for IS, CG, MG and FT; total time within 1.05x of the MPI
//! version's on every kernel.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::Experiment;
use crate::bspk::{BspResult, BspSpec};
use crate::mpi::MpiNet;
use crate::npb::{self, Built, Class, Kernel, NpbRun, Side, Tools};
use crate::plan::{Done, Job, OwnJob, Plan};
use crate::profile::Params as CostParams;
use crate::rounds::Rounds;
use crate::section::{Baseline, Finding, Section, Table, Target, short_mpi};
use crate::stack::{Protocol, Transport};
use crate::stats::Summary;
use crate::suite::Suite;

pub struct Apps;

/// What a run of the plan is for.
pub enum Tag {
    Build,
    Run {
        kernel: Kernel,
        p: u32,
        side: Side,
        round: usize,
    },
    /// bspbench's g and l of a stack, for the BSP cost.
    Params {
        over: Transport,
        p: u32,
    },
}

struct Params {
    class: Class,
    kernels: Vec<Kernel>,
    procs: Vec<u32>,
    rounds: usize,
    bsp: Vec<Transport>,
    bench: BspSpec,
    timeout: Duration,
}

/// The BSP stacks: shared memory as one host gets it by default, the BSPlib paper's
/// protocol over UDP, the other protocols, kernel TCP.
fn all_stacks() -> Vec<Transport> {
    vec![
        Transport::shm(Protocol::Utopia),
        Transport::udp(Protocol::Holefill),
        Transport::udp(Protocol::Gbn),
        Transport::udp(Protocol::Rmpp),
        Transport::kernel_tcp(),
    ]
}

/// The comparisons of the targets: BSP over shared memory against MPI's, and holefill
/// over UDP against MPI over TCP.
const SHM: (Side, Side) = (
    Side::Bsp(Transport {
        protocol: Protocol::Utopia,
        link: crate::stack::Link::Shm,
    }),
    Side::Mpi(MpiNet::Shm),
);
const NET: (Side, Side) = (
    Side::Bsp(Transport {
        protocol: Protocol::Holefill,
        link: crate::stack::Link::Udp,
    }),
    Side::Mpi(MpiNet::Tcp),
);

fn params(s: &Suite) -> Params {
    Params {
        class: s.pick(Class::S, Class::S, Class::W),
        kernels: s.pick(
            vec![Kernel::Is, Kernel::Cg],
            Kernel::ALL.to_vec(),
            Kernel::ALL.to_vec(),
        ),
        procs: s.pick(vec![2], vec![2, 4], vec![2, 4]),
        // A class W run takes tens of milliseconds: on a shared machine one slow moment
        // moves a round's ratio by 2x, so the full level takes the median of nine.
        rounds: s.pick(1, 3, 9),
        bsp: s.pick(all_stacks()[..2].to_vec(), all_stacks(), all_stacks()),
        bench: BspSpec {
            // Even the smoke level fits g over enough h and batches that a moment's noise
            // does not make it negative.
            hmax: s.pick(64, 256, 256),
            hstep: s.pick(8, 32, 16),
            iters: s.pick(20, 20, 50),
            batches: s.pick(3, 3, 3),
            warmup: s.pick(1, 5, 5),
            // Not measured here.
            exchange: 0,
            by_get: false,
        },
        timeout: Duration::from_secs(s.pick(120, 120, 600)),
    }
}

fn sides(p: &Params, mpi: bool) -> Vec<Side> {
    let mut v: Vec<Side> = p.bsp.iter().map(|&t| Side::Bsp(t)).collect();
    if mpi {
        v.extend([Side::Mpi(MpiNet::Shm), Side::Mpi(MpiNet::Tcp)]);
    }
    v
}

impl Experiment for Apps {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "apps"
    }

    fn about(&self) -> &'static str {
        "The NAS kernels IS, EP, CG, MG and FT over BSPlib on every stack beside MPI, \
         profiled (the BSPlib paper's Tables 3, 4 and 5); builds them first, not part of `all`"
    }

    fn in_all(&self) -> bool {
        false
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        let mpi = match s.mpi() {
            Ok(_) => true,
            Err(e) => {
                plan.skip(format!("MPI: {e}"));
                false
            }
        };
        let built: Arc<OnceLock<Built>> = Arc::default();
        add_build(&mut plan, &p, built.clone());
        let sides = sides(&p, mpi);
        for round in 0..p.rounds {
            for &kernel in &p.kernels {
                for &n in &p.procs {
                    for i in 0..sides.len() {
                        let side = sides[(i + round) % sides.len()];
                        add_run(&mut plan, &p, &built, kernel, n, side, round);
                    }
                }
            }
        }
        for &over in &p.bsp {
            for &n in &p.procs {
                let job = Job::Bsp {
                    p: n,
                    over,
                    spec: p.bench.clone(),
                };
                let label = format!("g and l of BSP {} p={n}", over.label());
                plan.add(label, Tag::Params { over, p: n }, job);
            }
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "apps",
            &format!(
                "Applications: the NAS kernels, class {}, over BSPlib and MPI",
                p.class.letter()
            ),
        );
        let runs = Runs::of(done);
        let mpi_name = s.mpi().ok().map(|m| short_mpi(&m.version));
        if let Some(b) = done
            .iter()
            .find(|d| matches!(d.tag, Tag::Build))
            .and_then(|d| d.own::<Built>())
            && let Err(e) = &b.mpi
            && s.mpi().is_ok()
        {
            sec.skipped
                .push(format!("MPI versions of the kernels: {e}"));
        }
        let sides = sides(&p, s.mpi().is_ok());
        sec.tables
            .push(setup_table(&p, &sides, mpi_name.as_deref()));
        sec.tables.push(table3(&p, &sides, &runs));
        for &n in &p.procs {
            sec.tables.push(table4(&p, &sides, &runs, n));
        }
        for &n in &p.procs {
            sec.tables.push(table5(&p, &runs, n));
        }
        sec.tables.push(ratios_table(&p, &runs));
        sec.tables.push(where_table(&p, &runs));
        sec.tables.push(cost_table(&p, &runs, done));
        for d in done {
            if let (Tag::Params { over, .. }, Some(r)) = (&d.tag, d.bsp()) {
                sec.bsp.push((over.label(), r.clone()));
            }
        }
        sec.tables.retain(|t| !t.rows.is_empty());
        if matches!(p.class, Class::W | Class::A) {
            targets(&mut sec, &p, &runs);
        }
        findings(&mut sec, &p, &runs);
        sec.apps = runs.all.iter().map(|(_, r)| (*r).clone()).collect();
        sec
    }
}

fn add_build(plan: &mut Plan<Tag>, p: &Params, built: Arc<OnceLock<Built>>) {
    let (class, kernels) = (p.class, p.kernels.clone());
    plan.add(
        format!("build the NAS kernels, class {}", class.letter()),
        Tag::Build,
        Job::Own(OwnJob::new(
            2.0 + kernels.len() as f64 * 1.5,
            move |s: &Suite| {
                let bspcc = s.exe().with_file_name("bspcc");
                let mpicc = s.mpi().map(|m| m.mpicc()).map_err(str::to_string);
                let dir = s.work_dir().join("npb");
                let b = npb::build(&dir, class, &kernels, &bspcc, mpicc);
                let _ = built.set(b.clone());
                b.bsp.clone().map(|()| b)
            },
        )),
    );
}

fn add_run(
    plan: &mut Plan<Tag>,
    p: &Params,
    built: &Arc<OnceLock<Built>>,
    kernel: Kernel,
    n: u32,
    side: Side,
    round: usize,
) {
    let start = match side {
        Side::Bsp(_) => 0.1,
        Side::Mpi(_) => 0.3,
    };
    // p = 4 shares two cores: about twice the time.
    let estimate = start + kernel.seconds(p.class) * f64::from(n) / 2.0;
    let (built, timeout) = (built.clone(), p.timeout);
    plan.add(
        format!(
            "{} p={n} {} (round {} of {})",
            kernel.label(),
            side.label(),
            round + 1,
            p.rounds
        ),
        Tag::Run {
            kernel,
            p: n,
            side,
            round,
        },
        Job::Own(OwnJob::new(estimate, move |s: &Suite| {
            let b = built.get().ok_or("the kernels were not built")?;
            let bsprun = s.exe().with_file_name("bsprun");
            let tools = Tools {
                bsprun: &bsprun,
                mpi: s.mpi().ok(),
                dir: &s.work_dir().join("npb"),
            };
            npb::run(b, kernel, n, side, &tools, timeout)
        })),
    );
}

/// The runs that worked, with their round.
struct Runs<'a> {
    all: Vec<(usize, &'a NpbRun)>,
}

/// The medians of a kernel's runs on one stack, and the run whose time is the median (its
/// profile stands for the stack).
struct Medians<'a> {
    time: f64,
    comm: f64,
    comp: f64,
    mops: f64,
    typical: &'a NpbRun,
}

impl<'a> Runs<'a> {
    fn of(done: &'a [Done<Tag>]) -> Runs<'a> {
        let all = done
            .iter()
            .filter_map(|d| match d.tag {
                Tag::Run { round, .. } => d.own::<NpbRun>().map(|r| (round, r)),
                _ => None,
            })
            .collect();
        Runs { all }
    }

    fn get(&self, kernel: Kernel, p: u32, side: Side) -> impl Iterator<Item = (usize, &'a NpbRun)> {
        self.all
            .iter()
            .filter(move |(_, r)| r.kernel == kernel && r.p == p && r.side == side)
            .copied()
    }

    fn medians(&self, kernel: Kernel, p: u32, side: Side) -> Option<Medians<'a>> {
        let mut v: Vec<&NpbRun> = self.get(kernel, p, side).map(|(_, r)| r).collect();
        if v.is_empty() {
            return None;
        }
        let med =
            |f: fn(&NpbRun) -> f64| Summary::of(&v.iter().map(|r| f(r)).collect::<Vec<_>>()).median;
        let m = Medians {
            time: med(|r| r.line.time),
            comm: med(|r| r.line.comm),
            comp: med(|r| r.line.comp),
            mops: med(|r| r.line.mops),
            typical: v[0],
        };
        v.sort_by(|a, b| a.line.time.total_cmp(&b.line.time));
        Some(Medians {
            typical: v[(v.len() - 1) / 2],
            ..m
        })
    }

    /// Each round's figure `f` of `base` and `cand` (the same kernel and p).
    fn rounds(
        &self,
        kernel: Kernel,
        p: u32,
        (cand, base): (Side, Side),
        f: fn(&NpbRun) -> f64,
    ) -> Rounds {
        let b: Vec<(usize, &NpbRun)> = self.get(kernel, p, base).collect();
        let pairs = self.get(kernel, p, cand).map(|(round, c)| {
            let x = b.iter().find(|(r, _)| *r == round).map(|(_, x)| f(x));
            (x, Some(f(c)))
        });
        Rounds::collect(pairs)
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(", "))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn setup_table(p: &Params, sides: &[Side], mpi: Option<&str>) -> Table {
    let mut t = Table::new(
        "What ran, and where",
        &["setting", "value"],
        "Each round runs every stack once per kernel and p, in an order rotated from round \
         to round, so that a slow moment of the machine falls on all of them alike; the \
         tables give medians over the rounds and the ratios are taken within each round.",
    );
    let n = cores();
    let row = |a: &str, b: String| vec![a.to_string(), b];
    t.rows.push(row("class", p.class.letter().to_string()));
    let kernels: Vec<&str> = p.kernels.iter().map(|k| k.label()).collect();
    t.rows.push(row("kernels", kernels.join(", ")));
    t.rows.push(row("rounds", p.rounds.to_string()));
    let labels: Vec<String> = sides.iter().map(|s| s.label()).collect();
    t.rows.push(row("stacks", labels.join(", ")));
    t.rows.push(row(
        "MPI",
        mpi.map_or("not measured (see below)".into(), |m| {
            format!("{m}, ob1 over vader (shm) and over TCP on loopback")
        }),
    ));
    for &np in &p.procs {
        let what = if np as usize > n {
            format!(
                "oversubscribed: {np} processes on {n} cores, {:.1} per core (nothing bound)",
                np as f64 / n as f64
            )
        } else {
            format!("{np} processes on {n} cores: one core or more each")
        };
        t.rows.push(row(&format!("p = {np}"), what));
    }
    t.rows.push(row("load average at the end", load_average()));
    t
}

fn fmt(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.4}")
    }
}

/// Table 3: Mop/s per process.
fn table3(p: &Params, sides: &[Side], runs: &Runs) -> Table {
    let mut header = vec!["kernel", "p"];
    let labels: Vec<String> = sides.iter().map(|s| s.label()).collect();
    header.extend(labels.iter().map(String::as_str));
    let mut t = Table::new(
        format!(
            "Mop/s per process, class {} (the BSPlib paper's Table 3)",
            p.class.letter()
        ),
        &header,
        "NPB's operation count over the timed section of the slowest process, per \
         process; medians over the rounds. Every run verified its result against NPB's \
         reference values.",
    );
    for &k in &p.kernels {
        for &n in &p.procs {
            let mut row = vec![k.label().to_string(), n.to_string()];
            row.extend(sides.iter().map(|&side| {
                runs.medians(k, n, side)
                    .map_or("-".into(), |m| format!("{:.1}", m.mops / f64::from(n)))
            }));
            t.rows.push(row);
        }
    }
    t
}

fn slowdown(x: f64, best: f64) -> String {
    if best > 0.0 {
        format!("{:.2}", x / best)
    } else {
        "-".into()
    }
}

/// Table 4: computation and communication time, with the slowdown against the fastest.
fn table4(p: &Params, sides: &[Side], runs: &Runs, n: u32) -> Table {
    let mut t = Table::new(
        format!(
            "Computation and communication, class {}, p = {n} (the BSPlib paper's Table 4)",
            p.class.letter()
        ),
        &[
            "kernel",
            "implementation",
            "computation (s)",
            "communication (s)",
            "total (s)",
            "communication slowdown",
            "total slowdown",
        ],
        "Communication: the mean over processes of the time in the library's calls within \
         the timed section (BSP: the puts and bsp_sync, so waiting for the others counts); \
         computation: the rest of the slowest process's time. Slowdown: against the \
         fastest of the kernel's rows. Medians over the rounds.",
    );
    for &k in &p.kernels {
        let m: Vec<(Side, Medians)> = sides
            .iter()
            .filter_map(|&s| runs.medians(k, n, s).map(|m| (s, m)))
            .collect();
        let best_comm = m.iter().map(|x| x.1.comm).fold(f64::INFINITY, f64::min);
        let best_time = m.iter().map(|x| x.1.time).fold(f64::INFINITY, f64::min);
        for (side, x) in &m {
            t.rows.push(vec![
                k.label().into(),
                side.label(),
                fmt(x.comp),
                fmt(x.comm),
                fmt(x.time),
                slowdown(x.comm, best_comm),
                slowdown(x.time, best_time),
            ]);
        }
    }
    t
}

fn pct(x: u64, of: u64) -> String {
    if of > 0 {
        format!("{:.2}%", 100.0 * x as f64 / of as f64)
    } else {
        "-".into()
    }
}

/// Table 5: the BSP runs' packets, from their profiles.
fn table5(p: &Params, runs: &Runs, n: u32) -> Table {
    let mut t = Table::new(
        format!(
            "Packets of the BSP runs, class {}, p = {n} (the BSPlib paper's Table 5)",
            p.class.letter()
        ),
        &[
            "kernel",
            "stack",
            "supersteps",
            "received",
            "explicit acks",
            "drops",
            "duplicates",
            "implicit acks",
            "sent",
            "retransmitted",
        ],
        "From the profile of the run with the median time, every process added up, the \
         whole program (set-up and verification too). Received and sent: the protocol's \
         data packets (kernel TCP: segments); explicit acknowledgements as a share of the \
         packets received, implicit ones (freed by the superstep colour) of those sent.",
    );
    for &k in &p.kernels {
        for &over in &p.bsp {
            let Some(m) = runs.medians(k, n, Side::Bsp(over)) else {
                continue;
            };
            let Some(f) = &m.typical.profile else {
                continue;
            };
            t.rows.push(vec![
                k.label().into(),
                over.label(),
                f.supersteps.to_string(),
                f.data_received.to_string(),
                pct(f.acks_sent, f.data_received),
                f.drops.to_string(),
                f.duplicates.to_string(),
                pct(f.implicit_acks, f.data_sent),
                f.data_sent.to_string(),
                f.retransmits.to_string(),
            ]);
        }
    }
    t
}

/// "0.45x (0.40-0.52)" of a check's rounds.
fn ratio_cell(r: &Rounds) -> String {
    let v = r.ratios();
    match r.ratio() {
        Some(q) if v.len() > 1 => {
            let s = Summary::of(&v);
            format!("{q:.2}x ({:.2}-{:.2})", s.min, s.max)
        }
        Some(q) => format!("{q:.2}x"),
        None => "-".into(),
    }
}

fn comm(r: &NpbRun) -> f64 {
    r.line.comm
}

fn time(r: &NpbRun) -> f64 {
    r.line.time
}

/// The BSP version over the MPI version, within each round.
fn ratios_table(p: &Params, runs: &Runs) -> Table {
    let mut t = Table::new(
        "BSP over MPI within a round: time and communication time",
        &[
            "kernel",
            "p",
            "shm: time",
            "shm: communication",
            "network: time",
            "network: communication",
        ],
        "shm: BSP over utopia/shm against MPI over shared memory; network: BSP over \
         holefill/udp against MPI over TCP. The median of the rounds' ratios, and their \
         range.",
    );
    for &k in &p.kernels {
        for &n in &p.procs {
            let cells = [
                (SHM, time as fn(&NpbRun) -> f64),
                (SHM, comm),
                (NET, time),
                (NET, comm),
            ]
            .map(|(pair, f)| ratio_cell(&runs.rounds(k, n, pair, f)));
            if cells.iter().all(|c| c == "-") {
                continue;
            }
            let mut row = vec![k.label().to_string(), n.to_string()];
            row.extend(cells);
            t.rows.push(row);
        }
    }
    t
}

/// The costliest supersteps (by h) of a profile: "4-8 KiB: 416 supersteps, 74%, 78 us
/// each; ...".
fn costliest(f: &npb::ProfileFigures, n: usize) -> String {
    f.by_h
        .iter()
        .take(n)
        .map(|(label, steps, sync, _)| {
            format!(
                "h {label}: {steps} supersteps, {:.0}% of sync, {:.0} us each",
                if f.sync > 0.0 {
                    100.0 * sync / f.sync
                } else {
                    0.0
                },
                sync / *steps as f64 * 1e6
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where the BSP runs spent their time in sync, by the supersteps' h.
fn where_table(p: &Params, runs: &Runs) -> Table {
    let mut t = Table::new(
        "Where the BSP runs' communication went (from their profiles)",
        &[
            "kernel",
            "p",
            "stack",
            "communication / MPI's",
            "in bsp_sync (s)",
            "the costliest supersteps, by h",
        ],
        "From the profile of the run with the median time (the whole program): the time in \
         bsp_sync (mean over processes) of the supersteps grouped by h, the most bytes a \
         process sent or received in them. `bsprun --profile FILE` and `bwbench profile \
         FILE` give the same for any program, superstep by superstep.",
    );
    for &k in &p.kernels {
        for &n in &p.procs {
            for pair in [SHM, NET] {
                let Some(m) = runs.medians(k, n, pair.0) else {
                    continue;
                };
                let Some(f) = &m.typical.profile else {
                    continue;
                };
                let Side::Bsp(over) = pair.0 else { continue };
                t.rows.push(vec![
                    k.label().into(),
                    n.to_string(),
                    over.label(),
                    ratio_cell(&runs.rounds(k, n, pair, comm)),
                    format!("{:.4}", f.sync),
                    costliest(f, 3),
                ]);
            }
        }
    }
    t
}

/// The BSP cost of each BSP run against its measured time.
fn cost_table(p: &Params, runs: &Runs, done: &[Done<Tag>]) -> Table {
    let fit = |over: Transport, n: u32| -> Option<&BspResult> {
        done.iter()
            .find(|d| matches!(d.tag, Tag::Params { over: o, p } if o == over && p == n))
            .and_then(|d| d.bsp())
    };
    let mut t = Table::new(
        "The BSP cost W + H g + S l against the measured time",
        &[
            "kernel",
            "p",
            "stack",
            "W (s)",
            "H (words)",
            "S",
            "g (us/word)",
            "l (us)",
            "W + H g + S l (s)",
            "measured (s)",
            "measured / cost",
        ],
        "From the profile of the run with the median time (the whole program, bsp_begin to \
         bsp_end); g and l by bspbench's method over the same stack in this run \
         (h-relations of single 8-byte puts, so g carries a put's own cost: large \
         transfers cost less per word than g says).",
    );
    for &k in &p.kernels {
        for &n in &p.procs {
            for &over in &p.bsp {
                let Some(m) = runs.medians(k, n, Side::Bsp(over)) else {
                    continue;
                };
                let Some(f) = &m.typical.profile else {
                    continue;
                };
                let params = fit(over, n).map(|r| CostParams {
                    g_us: r.g_us,
                    l_us: r.l_us,
                    source: String::new(),
                });
                let cost = params.as_ref().map(|q| {
                    f.w + (f.h_words as f64 * q.g_us + f.supersteps as f64 * q.l_us) * 1e-6
                });
                let opt = |x: Option<f64>, d: usize| x.map_or("-".into(), |v| format!("{v:.d$}"));
                t.rows.push(vec![
                    k.label().into(),
                    n.to_string(),
                    over.label(),
                    format!("{:.4}", f.w),
                    f.h_words.to_string(),
                    f.supersteps.to_string(),
                    opt(params.as_ref().map(|q| q.g_us), 4),
                    opt(params.as_ref().map(|q| q.l_us), 1),
                    opt(cost, 4),
                    format!("{:.4}", f.measured),
                    cost.filter(|&c| c > 0.0)
                        .map_or("-".into(), |c| format!("{:.2}x", f.measured / c)),
                ]);
            }
        }
    }
    t
}

fn in_s(x: f64) -> String {
    format!("{x:.4} s")
}

/// A target: a ratio of the BSP version's figure to the MPI version's, within each round.
struct Check {
    pair: (Side, Side),
    figure: fn(&NpbRun) -> f64,
    what: &'static str,
    bound: f64,
    /// EP communicates once, at the end: only its total time has a target.
    ep_too: bool,
}

const CHECKS: [Check; 4] = [
    Check {
        pair: NET,
        figure: comm,
        what: "communication",
        bound: 0.5,
        ep_too: false,
    },
    Check {
        pair: SHM,
        figure: comm,
        what: "communication",
        bound: 1.0,
        ep_too: false,
    },
    Check {
        pair: SHM,
        figure: time,
        what: "total time",
        bound: 1.05,
        ep_too: true,
    },
    Check {
        pair: NET,
        figure: time,
        what: "total time",
        bound: 1.05,
        ep_too: true,
    },
];

/// The targets, at p = 2.
fn targets(sec: &mut Section, p: &Params, runs: &Runs) {
    let class = p.class.letter();
    for &k in &p.kernels {
        for c in CHECKS.iter().filter(|c| c.ep_too || k != Kernel::Ep) {
            let (Side::Bsp(ours), Side::Mpi(theirs)) = c.pair else {
                continue;
            };
            let r = runs.rounds(k, 2, c.pair, c.figure);
            if r.ratios().is_empty() {
                continue;
            }
            let label = format!(
                "{} class {class} p=2 {}: BSP {} vs MPI {}",
                k.label(),
                c.what,
                ours.label(),
                theirs.label()
            );
            let bound = c.bound;
            sec.check(label, Ok(r), |w, r| {
                Target::of_rounds(w, r, &format!("<= {bound}x"), in_s, |q| q <= bound)
            });
        }
    }
}

/// The summary's lines: each kernel's total time at p = 2 against MPI's.
fn findings(sec: &mut Section, p: &Params, runs: &Runs) {
    let class = p.class.letter();
    for &k in &p.kernels {
        for (pair, against) in [(SHM, Baseline::MpiShm), (NET, Baseline::MpiTcp)] {
            let ours = runs.medians(k, 2, pair.0).map(|m| m.time);
            let theirs = runs.medians(k, 2, pair.1).map(|m| m.time);
            let what = format!(
                "NAS {} class {class} p=2, total time ({} vs {})",
                k.label(),
                pair.0.label(),
                pair.1.label()
            );
            sec.find(Finding::time(against, what, ours, theirs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npb::{Line, ProfileFigures};
    use crate::plan::{Outcome, Output, Own};

    fn run(kernel: Kernel, p: u32, side: Side, time: f64, comm: f64) -> NpbRun {
        NpbRun {
            kernel,
            class: Class::W,
            p,
            side,
            line: Line {
                kernel: kernel.label().into(),
                np: p,
                time,
                comm,
                comp: time - comm,
                mops: 100.0 / time,
                verified: true,
            },
            exchanges: Vec::new(),
            profile: matches!(side, Side::Bsp(_)).then(|| ProfileFigures {
                supersteps: 10,
                w: time - comm,
                h_words: 1000,
                measured: time,
                sync: comm,
                data_sent: 20,
                data_received: 20,
                acks_sent: 2,
                implicit_acks: 18,
                retransmits: 0,
                duplicates: 0,
                drops: 0,
                by_h: vec![
                    ("4-8 KiB".into(), 8, comm * 0.75, 900),
                    ("0".into(), 2, comm * 0.25, 0),
                ],
            }),
        }
    }

    fn done(tag: Tag, r: NpbRun) -> Done<Tag> {
        Done {
            label: String::new(),
            tag,
            result: Ok(Output::One(Box::new(Outcome::Own(Own(Arc::new(r)))))),
            seconds: 1.0,
            estimate: 1.0,
            jobs: 1,
        }
    }

    #[test]
    fn ratios_and_targets_come_from_the_same_rounds() {
        let p = Params {
            class: Class::W,
            kernels: vec![Kernel::Cg],
            procs: vec![2],
            rounds: 3,
            bsp: all_stacks()[..2].to_vec(),
            bench: BspSpec {
                hmax: 1,
                hstep: 1,
                iters: 1,
                batches: 1,
                warmup: 1,
                exchange: 0,
                by_get: false,
            },
            timeout: Duration::from_secs(1),
        };
        // Round r: MPI TCP's communication 1.0 s, holefill's 0.3, 0.4, 0.9 s.
        let mut d = Vec::new();
        for (round, c) in [0.3, 0.4, 0.9].into_iter().enumerate() {
            let tag = |side| Tag::Run {
                kernel: Kernel::Cg,
                p: 2,
                side,
                round,
            };
            d.push(done(tag(NET.1), run(Kernel::Cg, 2, NET.1, 2.0, 1.0)));
            d.push(done(tag(NET.0), run(Kernel::Cg, 2, NET.0, 1.0 + c, c)));
            d.push(done(tag(SHM.1), run(Kernel::Cg, 2, SHM.1, 1.0, 0.2)));
            d.push(done(tag(SHM.0), run(Kernel::Cg, 2, SHM.0, 1.1, 0.25)));
        }
        let runs = Runs::of(&d);
        let r = runs.rounds(Kernel::Cg, 2, NET, comm);
        assert_eq!(r.ratios(), [0.3, 0.4, 0.9]);
        let mut sec = Section::new("apps", "t");
        targets(&mut sec, &p, &runs);
        let met: Vec<(String, Option<bool>)> = sec
            .targets
            .iter()
            .map(|t| (t.what.clone(), t.met))
            .collect();
        // Network communication 0.4x (met), shm communication 1.25x (not), shm time 1.1x
        // (not), network time 1.4/2 = 0.7x (met).
        assert_eq!(met.len(), 4, "{met:?}");
        assert_eq!(
            met.iter().map(|m| m.1).collect::<Vec<_>>(),
            [Some(true), Some(false), Some(false), Some(true)]
        );
        assert!(
            met[0]
                .0
                .contains("CG class W p=2 communication: BSP holefill/udp vs MPI TCP")
        );
        let t = ratios_table(&p, &runs);
        assert_eq!(t.rows[0][5], "0.40x (0.30-0.90)");
        let w = where_table(&p, &runs);
        assert!(
            w.rows[0][5].starts_with("h 4-8 KiB: 8 supersteps, 75% of sync"),
            "{:?}",
            w.rows[0]
        );
        let t4 = table4(&p, &sides(&p, true), &runs, 2);
        // The fastest communication (MPI shm, 0.2 s) has slowdown 1.
        let mpi_shm = t4.rows.iter().find(|r| r[1] == "MPI shm").unwrap();
        assert_eq!(mpi_shm[5], "1.00");
        let t5 = table5(&p, &runs, 2);
        assert_eq!(t5.rows.len(), 2);
        assert_eq!(t5.rows[0][4], "10.00%");
    }
}
