//! bspbench's g and l by least squares over h-relations of 8-byte puts, the time of an
//! empty superstep and of a total exchange by `bsp_put`, at p = 2 and 4, beside the same
//! h-relations done in MPI (the puts packed by hand into one `MPI_Alltoallv`,
//! `MPI_Barrier` for the empty superstep) and `MPI_Alltoall`. The targets (p = 2, so that
//! no process waits for a core) are checked in alternating rounds: each stack against MPI
//! over the matching transport (shared memory against Open MPI's shared memory,
//! holefill/UDP against TCP), and the empty superstep over UDP against raw UDP's half
//! round trip. Large total exchanges (1 MiB and up per pair) over shared memory are held
//! against `MPI_Alltoall` over Open MPI's shared memory in alternating rounds as well,
//! without a target.

use super::latency::{first_median, rounds_of};
use super::{Experiment, pair};
use crate::bspk::BspSpec;
use crate::mpi::{MpiJob, MpiNet, MpiPoint};
use crate::pair::Measure;
use crate::plan::{Done, Job, Outcome, Plan};
use crate::rounds::Rounds;
use crate::section::{Baseline, Finding, Section, Table, Target, in_us, short_mpi, size_label};
use crate::stack::{Protocol, RawLink, Stack, Transport};
use crate::stats::{Line, Spread, Summary, fit_line};
use crate::suite::Suite;

pub struct Bsp;

pub enum Tag {
    Bsp {
        over: Transport,
        p: u32,
    },
    /// The empty superstep over holefill/UDP against raw UDP's half round trip.
    Target,
    /// A stack at p = 2 against MPI over `net`, in alternating rounds.
    VsMpi {
        over: Transport,
        net: MpiNet,
    },
    /// MPI's supersteps (h-relations, h = 0 the barrier) at `p` over `net`.
    Supersteps {
        net: MpiNet,
        p: u32,
    },
    /// MPI's total exchange at `p` over `net`.
    Alltoall {
        net: MpiNet,
        p: u32,
    },
    /// Large total exchanges at p = 2 over shared memory against MPI's, alternating.
    Large,
}

/// The BSPlib paper's stack over UDP and what one host gets by default, each with the
/// MPI transport it is held against.
fn stacks() -> [(Transport, MpiNet); 2] {
    [
        (Transport::udp(Protocol::Holefill), MpiNet::Tcp),
        (Transport::shm(Protocol::Utopia), MpiNet::Shm),
    ]
}

/// Bytes per pair of the total exchange.
const EXCHANGE: usize = 64 << 10;

/// Bytes moved per timed batch of a large exchange, whatever its size, so that each
/// batch lasts long enough (tens of milliseconds) to be a steady figure.
const LARGE_BATCH: usize = 256 << 20;

/// The sizes per pair of the large total exchanges.
fn large_sizes(s: &Suite) -> Vec<usize> {
    s.pick(
        vec![1 << 20, 16 << 20],
        vec![1 << 20, 4 << 20, 16 << 20],
        vec![1 << 20, 4 << 20, 16 << 20, 64 << 20],
    )
}

/// (warmup, supersteps per batch, batches) of a large exchange of `size` bytes per pair.
fn large_timing(size: usize) -> (usize, usize, usize) {
    let iters = (LARGE_BATCH / size).clamp(4, 1000);
    (iters.div_ceil(2), iters, 3)
}

struct Params {
    spec: BspSpec,
    procs: Vec<u32>,
    warmup: usize,
    iters: usize,
    /// The target's job: the empty superstep alone.
    empty: BspSpec,
}

fn params(s: &Suite) -> Params {
    let (warmup, iters) = s.pick((20, 100), (500, 3000), (2000, 20000));
    Params {
        spec: BspSpec {
            hmax: s.pick(32, 256, 256),
            hstep: s.pick(8, 8, 4),
            iters: s.pick(10, 50, 100),
            batches: s.pick(2, 3, 5),
            warmup: s.pick(2, 5, 10),
            exchange: EXCHANGE,
            by_get: false,
        },
        procs: s.pick(vec![2], vec![2, 4], vec![2, 4]),
        warmup,
        iters,
        empty: BspSpec {
            hmax: 0,
            hstep: 1,
            iters: s.pick(20, 200, 500),
            batches: 5,
            warmup: s.pick(5, 50, 100),
            exchange: 0,
            by_get: false,
        },
    }
}

/// The h of every superstep the BSP kernel times, for MPI to time the same.
fn hs(spec: &BspSpec) -> Vec<usize> {
    (0..=spec.hmax).step_by(spec.hstep.max(1)).collect()
}

/// MPI's jobs for `spec` at `n` processes over `net`: the h-relations, then the exchange.
fn mpi_jobs(spec: &BspSpec, n: u32, net: MpiNet) -> [MpiJob; 2] {
    let job = |kind: &str, sizes| MpiJob {
        kind: kind.into(),
        np: n,
        net,
        warmup: spec.warmup,
        iters: spec.iters,
        extra: spec.batches as f64,
        sizes,
    };
    [
        job("superstep", hs(spec)),
        job("alltoall-loop", vec![spec.exchange]),
    ]
}

impl Experiment for Bsp {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "bsp"
    }

    fn about(&self) -> &'static str {
        "BSP: g and l by least squares over h-relations, the empty superstep and a total exchange, beside MPI"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        for (over, _) in stacks() {
            for &n in &p.procs {
                let job = Job::Bsp {
                    p: n,
                    over,
                    spec: p.spec.clone(),
                };
                plan.add(
                    format!("BSP {} p={n}", over.label()),
                    Tag::Bsp { over, p: n },
                    job,
                );
            }
        }
        // The empty superstep alone, in a job of its own, against raw UDP's half round
        // trip. One figure of each, a minute apart, gave 1.1-3.3x in one afternoon.
        let raw = pair(
            Stack::Raw { link: RawLink::Udp },
            Measure::Latency {
                sizes: vec![8],
                warmup: p.warmup,
                iters: p.iters,
            },
        );
        let empty = Job::Bsp {
            p: 2,
            over: stacks()[0].0,
            spec: p.empty.clone(),
        };
        plan.alternate(
            "BSP empty superstep at p=2 (holefill/udp) vs raw UDP half round trip",
            Tag::Target,
            s.target_rounds(),
            vec![raw],
            vec![empty],
        );
        match s.mpi() {
            Ok(m) => plan_mpi(&mut plan, s, &p, &short_mpi(&m.version)),
            Err(e) => plan.skip(format!("MPI: {e}")),
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let large = done
            .iter()
            .find(|d| matches!(d.tag, Tag::Large))
            .map(|d| large_table(s, d));
        let mut sec = Section::new(
            "bsp",
            "BSP parameters: g, l, the empty superstep and a total exchange",
        );
        for d in done {
            if let (Tag::Bsp { over, .. }, Some(r)) = (&d.tag, d.bsp()) {
                sec.bsp.push((over.label(), r.clone()));
            }
        }
        if let Some(d) = done.iter().find(|d| matches!(d.tag, Tag::Target)) {
            let r = rounds_of(d, |o| match o {
                Outcome::Bsp(r) => Some(r.empty_us * 1e-6),
                o => first_median(o),
            });
            sec.check(d.label.clone(), r, |w, r| {
                Target::of_rounds(w, r, "<= 2.5x", in_us, |q| q <= 2.5)
            });
        }
        for d in done {
            if let Tag::VsMpi { over, net } = d.tag {
                check_vs_mpi(&mut sec, d, over, net);
            }
        }
        let mut t = table(&p);
        for (label, r) in &sec.bsp {
            t.rows.push(vec![
                format!("bulkwire BSP, {label}"),
                r.nprocs.to_string(),
                format!("{:.2}", r.empty_us),
                fitted(r.l_us, r.g_us, |l, _| format!("{l:.2}")),
                fitted(r.l_us, r.g_us, |_, g| format!("{g:.4}")),
                format!("{:.1}", r.exchange_us),
            ]);
        }
        let barriers = mpi_rows(&mut sec, &mut t, s, done, &p.procs);
        let spread = spread_table(&sec, done, s);
        sec.tables = vec![t, spread];
        match large {
            Some(Ok(t)) => sec.tables.push(t),
            Some(Err(e)) => sec.skipped.push(format!("large total exchanges: {e}")),
            None => {}
        }
        let empty = |label: &str| {
            sec.bsp
                .iter()
                .find(|(l, r)| l == label && r.nprocs == 2)
                .map(|(_, r)| r.empty_us * 1e-6)
        };
        let (udp, shm) = (empty("holefill/udp"), empty("utopia/shm"));
        let what = |ours: &str, net: &str| {
            format!("BSP empty superstep at p=2, {ours} vs MPI_Barrier over {net}")
        };
        sec.find(Finding::time(
            Baseline::MpiShm,
            what("utopia/shm", "shm"),
            shm,
            barriers[0],
        ));
        sec.find(Finding::time(
            Baseline::MpiTcp,
            what("holefill/udp", "TCP"),
            udp,
            barriers[1],
        ));
        sec
    }
}

/// The alternating rounds of every stack at p = 2 against MPI, then MPI's table rows at
/// every p.
fn plan_mpi(plan: &mut Plan<Tag>, s: &Suite, p: &Params, name: &str) {
    for (over, net) in stacks() {
        let base = mpi_jobs(&p.spec, 2, net).map(Job::Mpi).to_vec();
        let cand = vec![Job::Bsp {
            p: 2,
            over,
            spec: p.spec.clone(),
        }];
        plan.alternate(
            format!(
                "BSP at p=2 ({}) vs {name} over {}",
                over.label(),
                net.label()
            ),
            Tag::VsMpi { over, net },
            s.target_rounds(),
            base,
            cand,
        );
    }
    let sizes = large_sizes(s);
    let base = sizes
        .iter()
        .map(|&size| {
            let (warmup, iters, batches) = large_timing(size);
            Job::Mpi(MpiJob {
                kind: "alltoall-loop".into(),
                np: 2,
                net: MpiNet::Shm,
                warmup,
                iters,
                extra: batches as f64,
                sizes: vec![size],
            })
        })
        .collect();
    let cand = sizes
        .iter()
        .map(|&size| {
            let (warmup, iters, batches) = large_timing(size);
            Job::Bsp {
                p: 2,
                over: Transport::shm(Protocol::Utopia),
                spec: BspSpec {
                    hmax: 0,
                    hstep: 1,
                    iters,
                    batches,
                    warmup,
                    exchange: size,
                    by_get: false,
                },
            }
        })
        .collect();
    plan.alternate(
        format!("BSP large total exchanges at p=2 (utopia/shm) vs {name} over shm"),
        Tag::Large,
        s.target_rounds(),
        base,
        cand,
    );
    for net in [MpiNet::Shm, MpiNet::Tcp] {
        for &n in &p.procs {
            let label = format!("{name} {} p={n}", net.label());
            let [steps, a2a] = mpi_jobs(&p.spec, n, net);
            plan.add(
                format!("{label} supersteps"),
                Tag::Supersteps { net, p: n },
                Job::Mpi(steps),
            );
            plan.add(
                format!("{label} alltoall"),
                Tag::Alltoall { net, p: n },
                Job::Mpi(a2a),
            );
        }
    }
}

/// MPI's figures from a superstep job: the barrier (h = 0) and the line fitted from h = p
/// on, as bspbench fits BSP's, in microseconds.
fn mpi_fit(v: &[MpiPoint]) -> (Option<f64>, Option<Line>) {
    let barrier = v.iter().find(|m| m.size == 0).map(|m| m.median * 1e6);
    let pts: Vec<(f64, f64)> = v
        .iter()
        .filter(|m| m.size >= m.nprocs as usize)
        .map(|m| (m.size as f64, m.median * 1e6))
        .collect();
    (barrier, fit_line(&pts))
}

/// The figures of one side of a round against MPI, in seconds: empty superstep or
/// barrier, l, g, total exchange.
#[derive(Clone, Copy, Default)]
struct Figures {
    empty: Option<f64>,
    l: Option<f64>,
    g: Option<f64>,
    exchange: Option<f64>,
}

fn mpi_figures(outs: &[Outcome]) -> Figures {
    let mpi = |i: usize| match outs.get(i) {
        Some(Outcome::Mpi(v)) => Some(v.as_slice()),
        _ => None,
    };
    let (barrier, line) = mpi(0).map_or((None, None), mpi_fit);
    // A negative l or g is no fit: never a figure a target is checked against.
    let line = line.and_then(|f| f.physical());
    Figures {
        empty: barrier.map(|us| us * 1e-6),
        l: line.map(|f| f.a * 1e-6),
        g: line.map(|f| f.b * 1e-6),
        exchange: mpi(1).and_then(|v| v.first()).map(|m| m.median),
    }
}

fn bsp_figures(outs: &[Outcome]) -> Figures {
    match outs.first() {
        Some(Outcome::Bsp(r)) => Figures {
            empty: Some(r.empty_us * 1e-6),
            l: physical(r.l_us, r.g_us).map(|(l, _)| l * 1e-6),
            g: physical(r.l_us, r.g_us).map(|(_, g)| g * 1e-6),
            exchange: (r.exchange_us > 0.0).then_some(r.exchange_us * 1e-6),
        },
        _ => Figures::default(),
    }
}

fn in_ns(x: f64) -> String {
    format!("{:.1} ns", x * 1e9)
}

/// The targets of one stack against MPI over `net`, each a median over the rounds.
fn check_vs_mpi(sec: &mut Section, d: &Done<Tag>, over: Transport, net: MpiNet) {
    // A failed run fails each of its targets (its error is listed once, with the runs).
    let figs: Result<Vec<(Figures, Figures)>, String> = d.rounds().map(|rounds| {
        rounds
            .iter()
            .map(|(b, c)| (mpi_figures(b), bsp_figures(c)))
            .collect()
    });
    let pick = |f: fn(&Figures) -> Option<f64>| {
        figs.clone()
            .map(|figs| Rounds::collect(figs.iter().map(|(m, b)| (f(m), f(b)))))
    };
    let (ours, theirs) = (over.label(), net.label());
    let shm = net == MpiNet::Shm;
    sec.check(
        format!("g of 8-byte puts at p=2, {ours} vs MPI_Alltoallv over {theirs}"),
        pick(|f| f.g),
        |w, r| Target::of_rounds(w, r, "<= 2x", in_ns, |q| q <= 2.0),
    );
    if shm {
        sec.check(
            format!("l at p=2, {ours} vs its empty superstep"),
            figs.clone()
                .map(|figs| Rounds::collect(figs.iter().map(|(_, b)| (b.empty, b.l)))),
            |w, r| Target::of_rounds(w, r, "<= 2x", in_us, |q| q <= 2.0),
        );
        sec.check(
            format!("empty superstep at p=2, {ours} vs MPI_Barrier over {theirs}"),
            pick(|f| f.empty),
            |w, r| Target::of_rounds(w, r, "<= 1.0x", in_us, |q| q <= 1.0),
        );
    }
    let (target, limit) = if shm {
        ("<= 1.0x", 1.0)
    } else {
        ("<= 0.5x", 0.5)
    };
    sec.check(
        format!("total exchange of 64 KiB per pair at p=2, {ours} (bsp_put) vs MPI_Alltoall over {theirs}"),
        pick(|f| f.exchange),
        |w, r| Target::of_rounds(w, r, target, in_us, |q| q <= limit),
    );
}

/// The large total exchanges, size by size: each side's median over the rounds and the
/// ratio's median and range.
fn large_table(s: &Suite, d: &Done<Tag>) -> Result<Table, String> {
    let rounds = d.rounds()?;
    let mut t = Table::new(
        "Large total exchanges at p = 2 over shared memory",
        &[
            "bytes per pair",
            "bulkwire BSP, utopia/shm (us)",
            "MPI_Alltoall, shm (us)",
            "ratio",
            "BSP GB/s per process",
        ],
        "One bsp_put per destination and superstep, against MPI_Alltoall over Open MPI's \
         shared memory, in alternating rounds (each a job per size and side; a figure is \
         the median of 3 batch means). From BULKWIRE_BSP_LEND bytes (8 MiB) the \
         destination reads the puts straight out of the sender's memory (process_vm_readv); \
         below, they go through the shared-memory ring. GB/s: bytes received per \
         process over the superstep's time.",
    );
    for (i, size) in large_sizes(s).into_iter().enumerate() {
        let r = Rounds::collect(rounds.iter().map(|(b, c)| {
            let mpi = b.get(i).and_then(first_median);
            let bsp = match c.get(i) {
                Some(Outcome::Bsp(r)) if r.exchange_us > 0.0 => Some(r.exchange_us * 1e-6),
                _ => None,
            };
            (mpi, bsp)
        }));
        let Some((mpi, bsp)) = r.medians() else {
            t.rows.push(vec![
                size.to_string(),
                "-".into(),
                "-".into(),
                r.describe(),
                "-".into(),
            ]);
            continue;
        };
        t.rows.push(vec![
            size.to_string(),
            format!("{:.1}", bsp * 1e6),
            format!("{:.1}", mpi * 1e6),
            format!("{:.2}x ({})", r.ratio().unwrap_or(f64::NAN), r.describe()),
            format!("{:.2}", size as f64 / bsp / 1e9),
        ]);
    }
    Ok(t)
}

/// l and g when both can be costs (l >= 0, g > 0); a fit through scattered points can
/// give a negative one, which says nothing about the machine.
fn physical(l: f64, g: f64) -> Option<(f64, f64)> {
    Line {
        a: l,
        b: g,
        r2: 1.0,
    }
    .physical()
    .map(|f| (f.a, f.b))
}

/// A cell of a fitted l or g: "no fit" unless both are costs ([`physical`]).
fn fitted(l: f64, g: f64, cell: impl Fn(f64, f64) -> String) -> String {
    physical(l, g).map_or("no fit".into(), |(l, g)| cell(l, g))
}

fn table(p: &Params) -> Table {
    Table::new(
        "BSP parameters (bspbench method), and MPI's counterparts",
        &[
            "stack",
            "p",
            "empty superstep / barrier (us)",
            "l (us)",
            "g (us per 8-byte word)",
            "total exchange, 64 KiB per pair (us)",
        ],
        format!(
            "bulkwire: h-relations of 8-byte puts (one bsp_put each), h = 0..{} in steps of \
             {}, each time the median of {} batch means of {} supersteps; t(h) = l + g h by \
             least squares from h = p. MPI: the same h-relations, the words packed by hand \
             per destination into one MPI_Alltoallv and copied to their places, MPI_Barrier \
             for h = 0, fitted the same way; the total exchange is one bsp_put per \
             destination against MPI_Alltoall, timed the same way. p above the core count \
             is oversubscribed. \"no fit\": the least-squares line gave a negative l or g \
             (the times scatter more than they grow with h), which is no figure of the \
             machine and decides no target.",
            p.spec.hmax, p.spec.hstep, p.spec.batches, p.spec.iters
        ),
    )
}

/// The single supersteps' spread at every p: the empty superstep (MPI: `MPI_Barrier`) and
/// the total exchange (MPI: `MPI_Alltoall`) of the parameters table's jobs, best, median
/// and 90th percentile. A batch mean far above the best is either every superstep slow or
/// a few very slow; this tells which.
fn spread_table(sec: &Section, done: &[Done<Tag>], s: &Suite) -> Table {
    let mut t = Table::new(
        "Single supersteps: best, median and 90th percentile",
        &[
            "figure",
            "stack",
            "p",
            "best (us)",
            "median (us)",
            "p90 (us)",
            "median / best",
        ],
        "Each superstep of the parameters table's batches timed on its own (one clock \
         read between consecutive supersteps, so they add up to the batch), on pid 0 \
         (MPI: rank 0). The parameters table and the targets take the median batch mean, \
         which counts every slow superstep; a median far above the best says most \
         supersteps are slow, a p90 far above the median that a few are. The large \
         exchanges (1 MiB per pair and up) ran once per alternating round: each of their \
         figures is its median over the rounds.",
    );
    let mut row = |figure: &str, stack: String, p: u32, x: Option<Spread>| {
        if let Some(x) = x.filter(Spread::is_measured) {
            t.rows.push(vec![
                figure.into(),
                stack,
                p.to_string(),
                format!("{:.2}", x.best * 1e6),
                format!("{:.2}", x.median * 1e6),
                format!("{:.2}", x.p90 * 1e6),
                format!("{:.2}x", x.median / x.best),
            ]);
        }
    };
    let name = s.mpi().map(|m| short_mpi(&m.version)).unwrap_or_default();
    let mpi = |want: &dyn Fn(&Tag) -> bool| {
        done.iter()
            .find(|d| want(&d.tag))
            .and_then(|d| d.mpi())
            .and_then(|v| v.iter().find(|m| m.size == 0 || m.kind == "alltoall-loop"))
            .and_then(|m| m.steps)
    };
    for (figure, exchange) in [
        ("empty superstep", false),
        ("total exchange, 64 KiB per pair", true),
    ] {
        for (label, r) in &sec.bsp {
            let x = if exchange {
                r.exchange_steps
            } else {
                r.empty_steps
            };
            row(figure, format!("bulkwire BSP, {label}"), r.nprocs, x);
        }
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            let mut ps: Vec<u32> = done
                .iter()
                .filter_map(|d| match d.tag {
                    Tag::Supersteps { net: m, p } if m == net => Some(p),
                    _ => None,
                })
                .collect();
            ps.sort_unstable();
            for p in ps {
                let x = if exchange {
                    mpi(&|t| matches!(t, Tag::Alltoall { net: m, p: q } if *m == net && *q == p))
                } else {
                    mpi(&|t| matches!(t, Tag::Supersteps { net: m, p: q } if *m == net && *q == p))
                };
                let what = if exchange {
                    "MPI_Alltoall"
                } else {
                    "MPI_Barrier"
                };
                row(figure, format!("{name} {}, {what}", net.label()), p, x);
            }
        }
    }
    // The large exchanges ran once per alternating round: each figure the median over
    // the rounds.
    let rounds = done
        .iter()
        .find(|d| matches!(d.tag, Tag::Large))
        .and_then(|d| d.rounds().ok());
    for (i, size) in large_sizes(s).into_iter().enumerate() {
        let Some(rounds) = rounds else { break };
        let figure = format!("total exchange, {} per pair", size_label(size));
        let bsp: Vec<Spread> = rounds
            .iter()
            .filter_map(|(_, c)| match c.get(i) {
                Some(Outcome::Bsp(r)) => r.exchange_steps,
                _ => None,
            })
            .collect();
        let mpi: Vec<Spread> = rounds
            .iter()
            .filter_map(|(b, _)| match b.get(i) {
                Some(Outcome::Mpi(v)) => v.first().and_then(|m| m.steps),
                _ => None,
            })
            .collect();
        let label = |who: &str| format!("{who}, median of {} rounds", rounds.len());
        row(
            &figure,
            label("bulkwire BSP, utopia/shm"),
            2,
            median_of(&bsp),
        );
        row(
            &figure,
            label(&format!("{name} shm, MPI_Alltoall")),
            2,
            median_of(&mpi),
        );
    }
    t
}

/// Each figure's median over `xs`, or none.
fn median_of(xs: &[Spread]) -> Option<Spread> {
    let m = |f: fn(&Spread) -> f64| Summary::of(&xs.iter().map(f).collect::<Vec<_>>()).median;
    (!xs.is_empty()).then(|| Spread {
        best: m(|x| x.best),
        median: m(|x| x.median),
        p90: m(|x| x.p90),
    })
}

/// Adds MPI's rows; returns its barrier at p = 2 in seconds, over shared memory and TCP.
fn mpi_rows(
    sec: &mut Section,
    t: &mut Table,
    s: &Suite,
    done: &[Done<Tag>],
    procs: &[u32],
) -> [Option<f64>; 2] {
    let mut barrier2 = [None, None];
    let Ok(mpi) = s.mpi() else {
        return barrier2;
    };
    let name = short_mpi(&mpi.version);
    for (i, net) in [MpiNet::Shm, MpiNet::Tcp].into_iter().enumerate() {
        for &n in procs {
            let get = |want: &dyn Fn(&Tag) -> bool| {
                done.iter().find(|d| want(&d.tag)).and_then(|d| d.mpi())
            };
            let steps =
                get(&|t| matches!(t, Tag::Supersteps { net: m, p } if *m == net && *p == n));
            let a2a = get(&|t| matches!(t, Tag::Alltoall { net: m, p } if *m == net && *p == n));
            let (empty, fit) = steps.map_or((None, None), mpi_fit);
            if n == 2 {
                barrier2[i] = empty.map(|us| us * 1e-6);
            }
            let exchange = a2a.and_then(|v| v.first()).map(|m| m.median * 1e6);
            for v in [steps, a2a].into_iter().flatten() {
                sec.mpi.extend_from_slice(v);
            }
            let cell =
                |x: Option<f64>, prec: usize| x.map_or("-".into(), |x| format!("{x:.prec$}"));
            t.rows.push(vec![
                format!("{name} {}", net.label()),
                n.to_string(),
                cell(empty, 2),
                fit.map_or("-".into(), |f| fitted(f.a, f.b, |l, _| format!("{l:.2}"))),
                fit.map_or("-".into(), |f| fitted(f.a, f.b, |_, g| format!("{g:.4}"))),
                cell(exchange, 1),
            ]);
        }
    }
    barrier2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bspk::BspResult;

    fn point(size: usize, median: f64) -> MpiPoint {
        MpiPoint {
            kind: "superstep".into(),
            size,
            nprocs: 2,
            n: 3,
            min: median,
            mean: median,
            max: median,
            std_dev: 0.0,
            median,
            steps: None,
        }
    }

    #[test]
    fn mpi_fit_takes_the_barrier_at_h0_and_fits_from_h_p() {
        // h = 1 lies off the line: below h = p it must not count.
        let v: Vec<MpiPoint> = [(0, 0.3e-6), (1, 9e-6)]
            .into_iter()
            .chain((2..10).map(|h| (h, (0.5 + 0.01 * h as f64) * 1e-6)))
            .map(|(h, t)| point(h, t))
            .collect();
        let (barrier, line) = mpi_fit(&v);
        assert!((barrier.unwrap() - 0.3).abs() < 1e-9);
        let line = line.unwrap();
        assert!((line.a - 0.5).abs() < 1e-9 && (line.b - 0.01).abs() < 1e-9);
    }

    #[test]
    fn the_spread_table_has_a_row_per_measured_figure() {
        let s = Suite::new(
            std::path::PathBuf::from("/nonexistent"),
            crate::suite::Level::Quick,
            std::env::temp_dir(),
        )
        .without_mpi();
        let mut sec = Section::new("bsp", "bsp");
        let spread = |best: f64| Spread {
            best,
            median: 2.0 * best,
            p90: 5.0 * best,
        };
        sec.bsp.push((
            "utopia/shm".into(),
            BspResult {
                nprocs: 2,
                g_us: 0.02,
                l_us: 2.0,
                empty_us: 1.0,
                exchange_us: 12.0,
                samples: vec![],
                empty_steps: Some(spread(0.5e-6)),
                exchange_steps: Some(spread(10e-6)),
            },
        ));
        // Without a total exchange there is no spread of it: no row.
        sec.bsp.push((
            "holefill/udp".into(),
            BspResult {
                nprocs: 2,
                g_us: 0.02,
                l_us: 2.0,
                empty_us: 1.0,
                exchange_us: 0.0,
                samples: vec![],
                empty_steps: Some(spread(3e-6)),
                exchange_steps: None,
            },
        ));
        let t = spread_table(&sec, &[], &s);
        assert_eq!(t.rows.len(), 3, "{t:?}");
        assert_eq!(
            t.rows[2],
            [
                "total exchange, 64 KiB per pair",
                "bulkwire BSP, utopia/shm",
                "2",
                "10.00",
                "20.00",
                "50.00",
                "2.00x"
            ]
        );
        assert!(t.header.iter().any(|h| h == "p90 (us)"));
    }

    #[test]
    fn the_large_exchanges_spread_is_the_median_over_the_rounds() {
        let x = |best, median, p90| Spread { best, median, p90 };
        let m = median_of(&[x(1.0, 5.0, 9.0), x(3.0, 2.0, 7.0), x(2.0, 4.0, 8.0)]);
        assert_eq!(m, Some(x(2.0, 4.0, 8.0)));
        assert_eq!(median_of(&[]), None);
    }

    #[test]
    fn figures_of_a_round_come_from_each_sides_jobs() {
        let steps = Outcome::Mpi(
            (0..5)
                .map(|h| point(h * 2, (1.0 + h as f64) * 1e-6))
                .collect(),
        );
        let mut a2a = point(EXCHANGE, 7e-6);
        a2a.kind = "alltoall-loop".into();
        let m = mpi_figures(&[steps, Outcome::Mpi(vec![a2a])]);
        assert_eq!(m.exchange, Some(7e-6));
        assert!((m.g.unwrap() - 0.5e-6).abs() < 1e-15);
        assert!((m.empty.unwrap() - 1e-6).abs() < 1e-15);
        let b = bsp_figures(&[Outcome::Bsp(BspResult {
            nprocs: 2,
            g_us: 0.02,
            l_us: 2.0,
            empty_us: 1.0,
            exchange_us: 0.0,
            samples: vec![],
            empty_steps: None,
            exchange_steps: None,
        })]);
        assert_eq!((b.g, b.l, b.exchange), (Some(0.02e-6), Some(2e-6), None));
    }
}
