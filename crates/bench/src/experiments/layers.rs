//! Latency, throughput and N/2 at each level of the stack (Warschko, Blum & Tichy's
//! Table 3): the link, a protocol, p2p, BSP and the collectives, beside MPI; target: p2p
//! over shared memory against MPI's streaming, in alternating rounds.

use super::bandwidth::best_rate;
use super::{Experiment, pair};
use crate::bspk::BspSpec;
use crate::coll::CollSpec;
use crate::mpi::{MpiJob, MpiNet};
use crate::pair::Measure;
use crate::plan::{Done, Job, Outcome, Plan};
use crate::rounds::Rounds;
use crate::section::{
    Baseline, Finding, Section, Series, Table, Target, gbs, in_gbs, short_mpi, size_label,
    spread_cell, us,
};
use crate::stack::{CollAlgo, Protocol, RawLink, Stack, Transport};
use crate::stats::{Spread, Summary, hockney};
use crate::suite::Suite;

pub struct Layers;

pub enum Tag {
    /// The 8 B latency of the `i`-th of `levels()`.
    Latency(usize),
    /// The streaming bandwidth of layer `i`.
    Bandwidth(usize),
    Bsp,
    /// A broadcast over the `i`-th of `colls()`.
    Coll(usize),
    MpiLatency(MpiNet),
    /// MPI's streaming, OSU's way (one receive buffer) or `own` (a buffer per message).
    MpiStream {
        net: MpiNet,
        own: bool,
    },
    Target,
}

/// The levels of the stack, each over the same path (UDP, or shared memory).
fn levels() -> [(&'static str, Stack); 5] {
    let holefill = Transport::udp(Protocol::Holefill);
    let utopia = Transport::shm(Protocol::Utopia);
    [
        ("link (raw UDP)", Stack::Raw { link: RawLink::Udp }),
        ("protocol (holefill over UDP)", Stack::Proto(holefill)),
        (
            "p2p (over holefill/UDP)",
            Stack::P2p {
                over: holefill,
                progress: true,
            },
        ),
        ("protocol (utopia over shared memory)", Stack::Proto(utopia)),
        (
            "p2p (over utopia/shm)",
            Stack::P2p {
                over: utopia,
                progress: true,
            },
        ),
    ]
}

/// The collectives' rows: a broadcast from one process to the other.
fn colls() -> [(&'static str, Stack); 2] {
    [
        (
            "collectives (broadcast, p=2, network cache)",
            Stack::Coll {
                over: Transport::shm(Protocol::Utopia),
                algo: CollAlgo::Netcache,
            },
        ),
        (
            "collectives (broadcast, p=2, p2p over holefill/UDP)",
            Stack::Coll {
                over: Transport::udp(Protocol::Holefill),
                algo: CollAlgo::P2p,
            },
        ),
    ]
}

struct Params {
    warmup: usize,
    iters: usize,
    sizes: Vec<usize>,
    bw_warmup: usize,
    reps: usize,
    bsp: BspSpec,
    target: (usize, usize),
}

fn params(s: &Suite) -> Params {
    let (warmup, iters) = s.pick((20, 100), (300, 3000), (2000, 20000));
    let (bw_warmup, reps) = s.pick((1, 2), (1, 3), (2, 7));
    Params {
        warmup,
        iters,
        sizes: s.pick(
            vec![1 << 10, 64 << 10],
            vec![1 << 10, 16 << 10, 256 << 10, 1 << 20],
            (10..=20).map(|k| 1usize << k).collect(),
        ),
        bw_warmup,
        reps,
        bsp: BspSpec {
            hmax: s.pick(32, 128, 256),
            hstep: s.pick(8, 8, 4),
            iters: s.pick(10, 30, 100),
            batches: s.pick(2, 3, 5),
            warmup: s.pick(2, 5, 10),
            exchange: 0,
            by_get: false,
        },
        target: s.pick((1, 2), (3, 5), (5, 9)),
    }
}

impl Params {
    fn top(&self) -> usize {
        self.sizes.last().copied().unwrap_or(1 << 20)
    }
}

impl Experiment for Layers {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "layers"
    }

    fn about(&self) -> &'static str {
        "Latency, throughput and N/2 at each level of the stack (Warschko, Blum & Tichy, Table 3)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        plan_levels(&mut plan, &p);
        match s.mpi() {
            Ok(mpi) => {
                let name = short_mpi(&mpi.version);
                plan_mpi(&mut plan, &p, &name);
                plan_target(&mut plan, s, &p, &name);
            }
            Err(e) => plan.skip(format!("MPI: {e}")),
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "layers",
            "Each level of the stack: latency, throughput, N/2 (Warschko, Blum & Tichy's Table 3)",
        );
        let mut t = table(&p);
        for (i, (name, _)) in levels().iter().enumerate() {
            let lat =
                find(done, |t| matches!(t, Tag::Latency(j) if *j == i)).and_then(|d| d.pair());
            let bw =
                find(done, |t| matches!(t, Tag::Bandwidth(j) if *j == i)).and_then(|d| d.pair());
            let lat_v = lat
                .and_then(|r| r.points.first())
                .and_then(|x| median(&x.samples));
            let lat_s = lat
                .and_then(|r| r.points.first())
                .and_then(|x| Spread::of(&x.samples));
            let bw_v = bw.map(|r| Series::from_pair(r).throughput_and_n_half());
            for r in [lat, bw].into_iter().flatten() {
                sec.series.push(Series::from_pair(r));
                sec.results.push(r.clone());
            }
            row(&mut t, name.to_string(), (lat_v, lat_s), bw_v);
        }
        if let Some(r) = find(done, |t| matches!(t, Tag::Bsp)).and_then(|d| d.bsp()) {
            // Latency = l + g (one word), r_inf = 8 / g, N/2 = 8 l / g bytes.
            let bw = (r.g_us > 0.0).then(|| (8e6 / r.g_us, 8.0 * r.l_us / r.g_us));
            let name = "BSP (holefill/UDP, p=2; one-word superstep)";
            row(
                &mut t,
                name.into(),
                (Some((r.l_us + r.g_us) * 1e-6), None),
                bw,
            );
            sec.bsp.push(("holefill/udp".into(), r.clone()));
        }
        for (i, (name, _)) in colls().iter().enumerate() {
            let Some(r) =
                find(done, |t| matches!(t, Tag::Coll(j) if *j == i)).and_then(|d| d.coll())
            else {
                continue;
            };
            let med: Vec<(f64, f64)> = r
                .points
                .iter()
                .filter(|x| !x.seconds.is_empty())
                .map(|x| (x.size as f64, Summary::of(&x.seconds).median))
                .collect();
            let top = med.last().map(|&(n, t)| n / t);
            let fit = med.get(1..).and_then(hockney);
            let lat = med.first().map(|m| m.1);
            let spread = r
                .points
                .iter()
                .find(|x| !x.seconds.is_empty())
                .and_then(|x| Spread::of(&x.seconds));
            row(
                &mut t,
                name.to_string(),
                (lat, spread),
                top.map(|t| (t, fit.map_or(f64::NAN, |h| h.n_half))),
            );
            sec.colls.push((name.to_string(), r.clone()));
        }
        let mpi_shm_top = mpi_rows(&mut sec, &mut t, s, done);
        sec.tables = vec![t];
        if let Some(d) = find(done, |t| matches!(t, Tag::Target)) {
            let r = rounds(d);
            sec.check(d.label.clone(), r, |w, r| {
                let mut t = Target::of_rounds(w, r, ">= 1x", in_gbs, |q| q >= 1.0);
                if let (Some(osu), Some((_, p))) = (mpi_shm_top, r.medians()) {
                    t.measured += &format!(
                        "; {:.2}x against MPI receiving into one buffer, OSU's way",
                        p / osu
                    );
                }
                t
            });
            if let Some((base, cand)) = sec.rounds.last().and_then(|(_, r)| r.medians()) {
                let what = d.label.replace(" over shm (", " over shared memory (");
                sec.find(Finding::rate(
                    Baseline::MpiShm,
                    what,
                    Some(cand),
                    Some(base),
                ));
            }
        }
        sec
    }
}

/// Latency and streaming at each level up to p2p, then BSP and the collectives.
fn plan_levels(plan: &mut Plan<Tag>, p: &Params) {
    let latency = Measure::Latency {
        sizes: vec![8],
        warmup: p.warmup,
        iters: p.iters,
    };
    let stream = Measure::Bandwidth {
        sizes: p.sizes.clone(),
        warmup: p.bw_warmup,
        reps: p.reps,
    };
    for (i, (name, stack)) in levels().into_iter().enumerate() {
        let lat = pair(stack, latency.clone());
        plan.add(format!("{name} latency"), Tag::Latency(i), lat);
        let bw = pair(stack, stream.clone());
        plan.add(format!("{name} bandwidth"), Tag::Bandwidth(i), bw);
    }
    // The two levels above p2p. BSP: t(h) = l + g h over h-relations of 8-byte puts.
    let bsp = Job::Bsp {
        p: 2,
        over: Transport::udp(Protocol::Holefill),
        spec: p.bsp.clone(),
    };
    plan.add("BSP", Tag::Bsp, bsp);
    let mut coll_sizes = vec![8];
    coll_sizes.extend(&p.sizes);
    for (i, (name, stack)) in colls().into_iter().enumerate() {
        let spec = CollSpec {
            kinds: vec!["bcast".into()],
            sizes: coll_sizes.clone(),
            warmup: p.warmup.min(100),
            iters: (p.iters / 10).max(20),
            stack,
        };
        plan.add(name, Tag::Coll(i), Job::Coll { p: 2, spec });
    }
}

/// A run of MPI's harness at p = 2.
fn mpi_job(kind: &str, net: MpiNet, (warmup, iters): (usize, usize), sizes: &[usize]) -> Job {
    Job::Mpi(MpiJob {
        kind: kind.into(),
        np: 2,
        net,
        warmup,
        iters,
        // OSU's window of 64 for the streams; the kind says how the receiver places it.
        extra: if kind == "latency" { 0.0 } else { 64.0 },
        sizes: sizes.to_vec(),
    })
}

/// MPI's own ping-pong and streaming, the top of its stack, over shared memory and TCP.
fn plan_mpi(plan: &mut Plan<Tag>, p: &Params, name: &str) {
    for net in [MpiNet::Shm, MpiNet::Tcp] {
        let label = format!("MPI ({name} {})", net.label());
        let lat = mpi_job("latency", net, (p.warmup, p.iters), &[8]);
        plan.add(format!("{label} latency"), Tag::MpiLatency(net), lat);
        let bw = (p.bw_warmup, p.reps);
        let osu = mpi_job("bandwidth", net, bw, &p.sizes);
        let tag = Tag::MpiStream { net, own: false };
        plan.add(format!("{label} bandwidth"), tag, osu);
        if net == MpiNet::Shm {
            let own = mpi_job("bandwidth-own", net, bw, &p.sizes);
            let tag = Tag::MpiStream { net, own: true };
            plan.add(format!("{label}, a receive buffer per message"), tag, own);
        }
    }
}

/// The target, in alternating rounds at the largest size (see `rounds`): p2p over shared
/// memory against MPI over shared memory, both with a receive buffer per message; MPI's
/// OSU figure (one buffer) from the table beside it.
fn plan_target(plan: &mut Plan<Tag>, s: &Suite, p: &Params, name: &str) {
    let top = p.top();
    let (warmup, reps) = p.target;
    let base = mpi_job("bandwidth-own", MpiNet::Shm, p.target, &[top]);
    let p2p = Stack::P2p {
        over: Transport::shm(Protocol::Utopia),
        progress: true,
    };
    let sizes = vec![top];
    let cand = pair(
        p2p,
        Measure::Bandwidth {
            sizes,
            warmup,
            reps,
        },
    );
    let what = format!(
        "p2p over shm, {} streaming vs {name} over shm (both a receive buffer per message)",
        size_label(top)
    );
    plan.alternate(what, Tag::Target, s.target_rounds(), vec![base], vec![cand]);
}

/// A latency: the median, and the single operations' spread where the harness timed each.
type Lat = (Option<f64>, Option<Spread>);

fn find<T>(done: &[Done<T>], f: impl Fn(&T) -> bool) -> Option<&Done<T>> {
    done.iter().find(|d| f(&d.tag))
}

fn median(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| Summary::of(xs).median)
}

/// The target's rounds: MPI's best repetition against p2p's best complete one.
fn rounds(d: &Done<Tag>) -> Result<Rounds, String> {
    super::latency::rounds_of(d, |o| match o {
        Outcome::Mpi(v) => v.first().map(|p| p.max),
        o => best_rate(o),
    })
}

/// Adds MPI's rows; returns its throughput over shared memory at the largest size,
/// receiving as OSU does (one buffer).
fn mpi_rows(sec: &mut Section, t: &mut Table, s: &Suite, done: &[Done<Tag>]) -> Option<f64> {
    let name = short_mpi(&s.mpi().ok()?.version);
    let mut shm_top = None;
    for net in [MpiNet::Shm, MpiNet::Tcp] {
        let label = format!("MPI ({name} {})", net.label());
        let lat =
            find(done, |t| matches!(t, Tag::MpiLatency(n) if *n == net)).and_then(|d| d.mpi());
        let osu = find(
            done,
            |t| matches!(t, Tag::MpiStream { net: n, own: false } if *n == net),
        )
        .and_then(|d| d.mpi());
        let lat_v = lat
            .and_then(|v| v.first())
            .map(|p| (Some(p.median), p.steps));
        let bw_v = osu.map(|v| Series::from_mpi(label.clone(), v).throughput_and_n_half());
        for v in [lat, osu].into_iter().flatten() {
            sec.mpi.extend_from_slice(v);
        }
        row(t, label.clone(), lat_v.unwrap_or_default(), bw_v);
        if net != MpiNet::Shm {
            continue;
        }
        shm_top = bw_v.map(|(r, _)| r);
        let own =
            find(done, |t| matches!(t, Tag::MpiStream { own: true, .. })).and_then(|d| d.mpi());
        if let Some(v) = own {
            let label = format!("{label}, a receive buffer per message");
            let s = Series::from_mpi(label.clone(), v);
            row(t, label, (None, None), Some(s.throughput_and_n_half()));
            sec.mpi.extend_from_slice(v);
        }
    }
    shm_top
}

fn table(p: &Params) -> Table {
    Table::new(
        "Basic performance parameters at each level",
        &[
            "level",
            "latency, 8 B half round trip (us)",
            "single half round trips, best / median / p90 (us)",
            "throughput at the largest size (GB/s)",
            "N/2 (Hockney)",
        ],
        format!(
            "Two processes on this host. Latency: median of {} ping-pongs, and their best, \
             median and 90th percentile (a collective: the slowest process's single calls; \
             BSP: none, its l and g are fits). Throughput and N/2: \
             OSU streaming over {} to {}, Hockney fit. BSP: latency l + g of a superstep \
             carrying one 8-byte put, throughput 8 B / g, N/2 = 8 l / g (bspbench fit). \
             Collectives: an 8-byte broadcast from one process to the other (the slowest \
             process's time), throughput and N/2 from broadcast times over the same sizes. MPI \
             rows: Open MPI's own ping-pong and streaming, the top of its stack. It receives a \
             window into one buffer (OSU's way) and, in the row so marked, each message into a \
             buffer of its own, as bulkwire's p2p kernel does. On one host, p2p and the \
             collectives over it read messages above BULKWIRE_EAGER_LOCAL (16 KiB) straight \
             from the sender's buffer (one copy, process_vm_readv), and a broadcast repeated \
             on one buffer reads it from cache: the large-size throughput of the rows over \
             holefill/UDP is that copy's, not UDP's (the protocol row is UDP's).",
            p.iters,
            size_label(p.sizes[0]),
            size_label(p.top())
        ),
    )
}

/// One level's row: its latency's median and single operations' spread, its throughput
/// and N/2.
fn row(t: &mut Table, name: String, lat: Lat, bw: Option<(f64, f64)>) {
    t.rows.push(vec![
        name,
        lat.0.map_or("-".into(), us),
        spread_cell(lat.1, us),
        bw.map_or("-".into(), |(r, _)| gbs(r)),
        bw.map_or("-".into(), |(_, n)| size_label(n.round().max(0.0) as usize)),
    ]);
}
