//! bspbench's g and l by least squares over h-relations of 8-byte puts, and the time of an
//! empty superstep, at p = 2 and 4, beside MPI's barrier and all-to-all; targets: the
//! empty superstep against raw UDP's half round trip (in alternating rounds) and against
//! MPI's barrier over TCP.

use super::latency::{first_median, rounds_of};
use super::{Experiment, pair};
use crate::bspk::BspSpec;
use crate::mpi::{MpiJob, MpiNet};
use crate::pair::Measure;
use crate::plan::{Done, Job, Outcome, Plan};
use crate::section::{Baseline, Finding, Section, Table, Target, in_us, short_mpi};
use crate::stack::{Protocol, RawLink, Stack, Transport};
use crate::suite::Suite;

pub struct Bsp;

pub enum Tag {
    Bsp {
        over: Transport,
        p: u32,
    },
    /// The empty superstep against raw UDP's half round trip.
    Target,
    Barrier {
        net: MpiNet,
        p: u32,
    },
    Alltoall {
        net: MpiNet,
        p: u32,
    },
}

/// The BSPlib paper's stack over UDP, and what one host gets by default.
fn stacks() -> [Transport; 2] {
    [
        Transport::udp(Protocol::Holefill),
        Transport::shm(Protocol::Utopia),
    ]
}

struct Params {
    spec: BspSpec,
    procs: Vec<u32>,
    warmup: usize,
    iters: usize,
    /// The target's job: the empty superstep alone.
    empty: BspSpec,
    alltoall_iters: usize,
}

fn params(s: &Suite) -> Params {
    let (warmup, iters) = s.pick((20, 100), (500, 3000), (2000, 20000));
    Params {
        spec: BspSpec {
            hmax: s.pick(32, 256, 256),
            hstep: s.pick(8, 4, 1),
            iters: s.pick(10, 50, 100),
            batches: s.pick(2, 3, 5),
            warmup: s.pick(2, 5, 10),
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
        },
        alltoall_iters: s.pick(20, 200, 1000),
    }
}

impl Experiment for Bsp {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "bsp"
    }

    fn about(&self) -> &'static str {
        "BSP: g and l by least squares over h-relations, and the empty superstep"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        for over in stacks() {
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
        // The first target in alternating rounds (see `crate::rounds`): the empty superstep
        // alone, in a job of its own, against raw UDP's half round trip. One figure of
        // each, a minute apart, gave 1.1-3.3x in one afternoon.
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
            over: stacks()[0],
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
            Ok(m) => plan_mpi(&mut plan, &p, &short_mpi(&m.version)),
            Err(e) => plan.skip(format!("MPI: {e}")),
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new("bsp", "BSP parameters: g, l and the empty superstep");
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
        let mut t = table(&p);
        for (label, r) in &sec.bsp {
            t.rows.push(vec![
                format!("bulkwire BSP, {label}"),
                r.nprocs.to_string(),
                format!("{:.2}", r.empty_us),
                format!("{:.2}", r.l_us),
                format!("{:.4}", r.g_us),
            ]);
        }
        let barriers = mpi_rows(&mut sec, &mut t, s, done, &p.procs);
        sec.tables = vec![t];
        let empty = |label: &str| {
            sec.bsp
                .iter()
                .find(|(l, r)| l == label && r.nprocs == 2)
                .map(|(_, r)| r.empty_us * 1e-6)
        };
        let (udp, shm) = (empty("holefill/udp"), empty("utopia/shm"));
        if let (Some(e), Some(b)) = (udp, barriers[1]) {
            sec.targets.push(Target {
                what: "BSP empty superstep at p=2 (holefill/udp) vs MPI_Barrier over TCP".into(),
                measured: format!("{:.2} us vs {:.2} us", e * 1e6, b * 1e6),
                target: "faster".into(),
                met: Some(e < b),
            });
        }
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

/// MPI's counterparts: its barrier, and all-to-all h-relations for l and g.
fn plan_mpi(plan: &mut Plan<Tag>, p: &Params, name: &str) {
    for net in [MpiNet::Shm, MpiNet::Tcp] {
        for &n in &p.procs {
            let label = format!("{name} {} p={n}", net.label());
            let barrier = MpiJob {
                kind: "barrier".into(),
                np: n,
                net,
                warmup: p.warmup,
                iters: p.iters / 10,
                extra: 0.0,
                sizes: vec![0],
            };
            let tag = Tag::Barrier { net, p: n };
            plan.add(format!("{label} barrier"), tag, Job::Mpi(barrier));
            // Bytes per pair giving h-relations of up to ~256 words per process.
            let pair_bytes: Vec<usize> = [1usize, 8, 32, 64, 128, 256]
                .iter()
                .map(|h| (h * 8 / (n as usize - 1)).max(8) / 8 * 8)
                .collect();
            let a2a = MpiJob {
                kind: "alltoall".into(),
                np: n,
                net,
                warmup: 10,
                iters: p.alltoall_iters,
                extra: 0.0,
                sizes: pair_bytes,
            };
            let tag = Tag::Alltoall { net, p: n };
            plan.add(format!("{label} alltoall"), tag, Job::Mpi(a2a));
        }
    }
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
        ],
        format!(
            "bulkwire: h-relations of 8-byte puts, h = 0..{} in steps of {}, each time the \
             median of {} batch means of {} supersteps; t(h) = l + g h by least squares from \
             h = p. MPI: MPI_Barrier for the empty superstep; l and g fitted the same way to \
             MPI_Alltoall of h-relations (h words each process sends). p above the core count \
             is oversubscribed.",
            p.spec.hmax, p.spec.hstep, p.spec.batches, p.spec.iters
        ),
    )
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
            let barrier = get(&|t| matches!(t, Tag::Barrier { net: m, p } if *m == net && *p == n));
            let a2a = get(&|t| matches!(t, Tag::Alltoall { net: m, p } if *m == net && *p == n));
            let empty = barrier.and_then(|v| v.first()).map(|x| x.median * 1e6);
            if n == 2 {
                barrier2[i] = empty.map(|us| us * 1e-6);
            }
            let fit = a2a.and_then(|v| {
                let pts: Vec<(f64, f64)> = v
                    .iter()
                    .map(|m| ((m.size * (n as usize - 1) / 8) as f64, m.median * 1e6))
                    .collect();
                crate::stats::fit_line(&pts)
            });
            for v in [barrier, a2a].into_iter().flatten() {
                sec.mpi.extend_from_slice(v);
            }
            t.rows.push(vec![
                format!("{name} {}", net.label()),
                n.to_string(),
                empty.map_or("-".into(), |x| format!("{x:.2}")),
                fit.map_or("-".into(), |f| format!("{:.2}", f.a)),
                fit.map_or("-".into(), |f| format!("{:.4}", f.b)),
            ]);
        }
    }
    barrier2
}
