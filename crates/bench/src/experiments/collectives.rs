//! OSU-style latency of each collective per size and p, bulkwire (the network cache, and
//! the point-to-point algorithms over UDP) beside MPI over shared memory and over TCP;
//! targets: alltoall and allgather at the largest p, and the large transfers of broadcast,
//! allgather, alltoall and allreduce at p = 2 over the network cache, in alternating
//! rounds.

use super::Experiment;
use crate::coll::{self, CollSpec};
use crate::mpi::{MpiJob, MpiNet};
use crate::plan::{Done, Job, Outcome, Plan, Round};
use crate::rounds::Rounds;
use crate::section::{
    Axis, Baseline, Chart, Finding, Group, SPREAD_NOTE, Scale, Section, Series, Stat, Table,
    Target, ratio, size_label, spread_cell, us,
};
use crate::stack::{CollAlgo, Protocol, Stack, Transport};
use crate::stats::Spread;
use crate::suite::{Level, Suite};

pub struct Collectives;

pub enum Tag {
    /// One bulkwire job running every collective, by the `i`-th of `stacks()`.
    Ours { stack: usize, p: u32 },
    Mpi {
        net: MpiNet,
        kind: &'static str,
        p: u32,
    },
    /// Alternating rounds of stack `i` against MPI over `net`.
    Target { stack: usize, net: MpiNet },
    /// Alternating rounds of the network cache against MPI over shared memory at p = 2,
    /// `BULK_KINDS` at `BULK_SIZES`.
    Bulk,
}

/// How bulkwire's collectives are carried: the default on one host (the network cache),
/// and every byte through UDP with the point-to-point algorithms (what a job across hosts
/// gets); the full run adds the point-to-point algorithms over shared memory.
fn stacks(level: Level) -> Vec<Stack> {
    let mut v = vec![
        Stack::Coll {
            over: Transport::shm(Protocol::Utopia),
            algo: CollAlgo::Netcache,
        },
        Stack::Coll {
            over: Transport::udp(Protocol::Holefill),
            algo: CollAlgo::P2p,
        },
    ];
    if level == Level::Full {
        v.push(Stack::Coll {
            over: Transport::shm(Protocol::Utopia),
            algo: CollAlgo::P2p,
        });
    }
    v
}

/// The targets: (stack index, MPI's transport, factor, what it means).
const TARGETS: [(usize, MpiNet, f64, &str); 2] = [
    (0, MpiNet::Shm, 1.0, "no slower than MPI over shm"),
    (1, MpiNet::Tcp, 0.5, ">= 2x faster than MPI over TCP"),
];

const TARGET_KINDS: [&str; 2] = ["alltoall", "allgather"];

/// The large-transfer targets: these collectives at these sizes per process, p = 2 (no
/// process waits for a core), the network cache against MPI over shared memory.
const BULK_KINDS: [&str; 4] = ["bcast", "allgather", "alltoall", "allreduce"];
const BULK_SIZES: [usize; 2] = [64 << 10, 1 << 20];
const BULK_P: u32 = 2;

struct Params {
    sizes: Vec<usize>,
    /// The targets' sizes (the quick level's table has more, for its chart).
    target_sizes: Vec<usize>,
    warmup: usize,
    iters: usize,
    kinds: Vec<&'static str>,
    procs: Vec<u32>,
}

fn params(s: &Suite) -> Params {
    let (warmup, iters) = s.pick((5, 20), (20, 200), (50, 500));
    let full = vec![8, 128, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20];
    Params {
        sizes: s.pick(
            vec![8, 4 << 10],
            vec![8, 128, 1 << 10, 8 << 10, 64 << 10],
            full.clone(),
        ),
        target_sizes: s.pick(vec![8, 4 << 10], vec![8, 1 << 10, 64 << 10], full),
        warmup,
        iters,
        kinds: s.pick(
            vec!["barrier", "bcast", "allgather", "alltoall", "allreduce"],
            coll::KINDS.to_vec(),
            coll::KINDS.to_vec(),
        ),
        procs: s.pick(vec![2], vec![2, 4], vec![2, 4]),
    }
}

impl Params {
    /// The p of the targets and the chart: the largest measured.
    fn tp(&self) -> u32 {
        *self.procs.last().unwrap_or(&2)
    }
}

impl Experiment for Collectives {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "collectives"
    }

    fn about(&self) -> &'static str {
        "OSU-style latency of each collective per size and p (network cache, p2p over UDP)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        let spec = |stack, kinds: &[&str], sizes: &[usize], warmup, iters| CollSpec {
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            sizes: sizes.to_vec(),
            warmup,
            iters,
            stack,
        };
        for (i, stack) in stacks(s.level).into_iter().enumerate() {
            for &n in &p.procs {
                let spec = spec(stack, &p.kinds, &p.sizes, p.warmup, p.iters);
                let tag = Tag::Ours { stack: i, p: n };
                plan.add(
                    format!("{} p={n}", stack.label()),
                    tag,
                    Job::Coll { p: n, spec },
                );
            }
        }
        if let Err(e) = s.mpi() {
            plan.skip(format!("MPI: {e}"));
            return plan;
        }
        let mpi_job = |net, kind: &str, np, warmup, iters, sizes: &[usize]| MpiJob {
            kind: kind.into(),
            np,
            net,
            warmup,
            iters,
            extra: 0.0,
            sizes: sizes.to_vec(),
        };
        for net in [MpiNet::Shm, MpiNet::Tcp] {
            for &n in &p.procs {
                for &k in &p.kinds {
                    let job = mpi_job(net, k, n, p.warmup, p.iters, &p.sizes);
                    let tag = Tag::Mpi { net, kind: k, p: n };
                    plan.add(format!("MPI {} {k} p={n}", net.label()), tag, Job::Mpi(job));
                }
            }
        }
        // The targets at the largest p, in alternating rounds (see `rounds`): a p = 4
        // figure moves by up to 2x between runs a minute apart, as much as the stacks
        // differ. Per round, one bulkwire job that runs every kind at every size, and one
        // MPI job per kind, with the quick level's repetitions: five rounds of the full
        // level's 550 calls per size took over four minutes.
        let (warmup, iters, tp) = (p.warmup.min(20), p.iters.min(200), p.tp());
        let all = stacks(s.level);
        for (i, net, _, _) in TARGETS {
            let stack = all[i];
            let ours = spec(stack, &TARGET_KINDS, &p.target_sizes, warmup, iters);
            let theirs = TARGET_KINDS
                .iter()
                .map(|k| Job::Mpi(mpi_job(net, k, tp, warmup, iters, &p.target_sizes)))
                .collect();
            plan.alternate(
                format!("{} against MPI {}", stack.label(), net.label()),
                Tag::Target { stack: i, net },
                s.target_rounds(),
                theirs,
                vec![Job::Coll { p: tp, spec: ours }],
            );
        }
        let stack = all[0];
        let ours = spec(stack, &BULK_KINDS, &BULK_SIZES, warmup, iters);
        let theirs = BULK_KINDS
            .iter()
            .map(|k| Job::Mpi(mpi_job(MpiNet::Shm, k, BULK_P, warmup, iters, &BULK_SIZES)))
            .collect();
        plan.alternate(
            format!(
                "{} against MPI {}, large transfers at p={BULK_P}",
                stack.label(),
                MpiNet::Shm.label()
            ),
            Tag::Bulk,
            s.target_rounds(),
            theirs,
            vec![Job::Coll {
                p: BULK_P,
                spec: ours,
            }],
        );
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let all = stacks(s.level);
        let mut sec = Section::new("collectives", "Collectives: latency per size and p");
        // (column, p, kind) -> series over sizes.
        let mut rows: Vec<(String, u32, String, Series)> = Vec::new();
        for d in done {
            match d.tag {
                Tag::Ours { stack, p: n } => {
                    let Some(r) = d.coll() else { continue };
                    let label = all[stack].label();
                    for &k in &p.kinds {
                        let points = r
                            .points
                            .iter()
                            .filter(|x| x.kind == k)
                            .filter_map(|x| Stat::of(x.size, &x.seconds, None))
                            .collect();
                        let series = Series {
                            label: format!("bulkwire {label}, {k}, p={n}"),
                            group: Group::Bulkwire,
                            points,
                        };
                        rows.push((label.clone(), n, k.to_string(), series));
                    }
                    sec.colls.push((label, r.clone()));
                }
                Tag::Mpi { net, kind, p: n } => {
                    let Some(v) = d.mpi() else { continue };
                    let label = format!("MPI {}", net.label());
                    let series = Series::from_mpi(format!("{label}, {kind}, p={n}"), v);
                    sec.mpi.extend_from_slice(v);
                    rows.push((label, n, kind.to_string(), series));
                }
                Tag::Target { .. } | Tag::Bulk => {}
            }
        }
        let mpi_name = s.mpi().ok().map(|m| crate::section::short_mpi(&m.version));
        let mut columns: Vec<String> = all.iter().map(Stack::label).collect();
        if mpi_name.is_some() {
            columns.extend(["MPI shm".to_string(), "MPI TCP".to_string()]);
        }
        let find = |stack: &str, n: u32, k: &str, size: usize| {
            rows.iter()
                .find(|r| r.0 == stack && r.1 == n && r.2 == k)
                .and_then(|r| r.3.at(size))
        };
        let spread = |stack: &str, n: u32, k: &str, size: usize| {
            rows.iter()
                .find(|r| r.0 == stack && r.1 == n && r.2 == k)
                .and_then(|r| r.3.spread_at(size))
        };
        for &n in &p.procs {
            sec.tables
                .push(table(&p, n, &columns, mpi_name.as_deref(), &find));
            sec.tables.push(spread_table(&p, n, &columns, &spread));
        }
        for d in done {
            match d.tag {
                Tag::Target { stack, net } => {
                    let Some(&(_, _, factor, want)) = TARGETS.iter().find(|t| t.1 == net) else {
                        continue;
                    };
                    let what = format!("bulkwire {} / MPI {}", all[stack].label(), net.label());
                    let set = TargetSet {
                        kinds: &TARGET_KINDS,
                        sizes: &p.target_sizes,
                        p: p.tp(),
                        factor,
                        want,
                    };
                    targets(&mut sec, d, &what, &set);
                }
                Tag::Bulk => {
                    let what = format!("bulkwire {} / MPI {}", all[0].label(), MpiNet::Shm.label());
                    let set = TargetSet {
                        kinds: &BULK_KINDS,
                        sizes: &BULK_SIZES,
                        p: BULK_P,
                        factor: 1.0,
                        want: "no slower than MPI over shm",
                    };
                    targets(&mut sec, d, &what, &set);
                }
                _ => {}
            }
        }
        chart(&mut sec, &rows, &p);
        findings(&mut sec, &p, &find);
        sec.series = rows.into_iter().map(|r| r.3).collect();
        sec
    }
}

type Find<'a> = dyn Fn(&str, u32, &str, usize) -> Option<f64> + 'a;

fn table(p: &Params, n: u32, columns: &[String], mpi: Option<&str>, find: &Find<'_>) -> Table {
    let mut header = vec!["collective".to_string(), "size".to_string()];
    header.extend(columns.iter().map(|c| format!("{c} (us)")));
    if mpi.is_some() {
        header.push("netcache / MPI shm".into());
        header.push("p2p over UDP / MPI TCP".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut t = Table {
        title: format!("Collective latency at p = {n} (us)"),
        header,
        rows: Vec::new(),
        note: format!(
            "OSU method: per call, a barrier, then the call timed on every process; the \
             slowest process's time, median of {} calls after {} warm-up calls, one job per \
             stack running every collective. Sizes: bytes per process (per block for scatter, \
             gather, allgather, alltoall); reduce and allreduce sum size/8 doubles. MPI: {}, \
             the same loop in C, forced to the ob1 layer with vader (shm) or tcp. One host{}.",
            p.iters,
            p.warmup,
            mpi.unwrap_or("not measured"),
            if n as usize > cores {
                ", more processes than cores (oversubscribed)"
            } else {
                ""
            }
        ),
    };
    for &k in &p.kinds {
        for &size in &p.sizes {
            let mut row = vec![k.to_string(), size_label(size)];
            for c in columns {
                row.push(find(c, n, k, size).map_or("-".into(), us));
            }
            if mpi.is_some() {
                let pair = |a: &str, b: &str| match (find(a, n, k, size), find(b, n, k, size)) {
                    (Some(x), Some(y)) => ratio(x, y),
                    _ => "-".into(),
                };
                row.push(pair("netcache", "MPI shm"));
                row.push(pair("p2p over holefill/udp", "MPI TCP"));
            }
            t.rows.push(row);
        }
    }
    t
}

/// The single calls of [`table`]'s cells at p = `n`: best / median / p90.
fn spread_table(p: &Params, n: u32, columns: &[String], spread: &SpreadOf<'_>) -> Table {
    let mut header = vec!["collective".to_string(), "size".to_string()];
    header.extend(columns.iter().cloned());
    let mut t = Table {
        title: format!("Single calls at p = {n}: best / median / p90 (us)"),
        header,
        rows: Vec::new(),
        note: format!(
            "{SPREAD_NOTE} The calls of the table above ({} per cell), each the slowest \
             process's time.",
            p.iters
        ),
    };
    for &k in &p.kinds {
        for &size in &p.sizes {
            let mut row = vec![k.to_string(), size_label(size)];
            row.extend(
                columns
                    .iter()
                    .map(|c| spread_cell(spread(c, n, k, size), us)),
            );
            t.rows.push(row);
        }
    }
    t
}

type SpreadOf<'a> = dyn Fn(&str, u32, &str, usize) -> Option<Spread> + 'a;

/// Median seconds per call by (collective, size), over one side's jobs of a round.
fn medians(side: &[Outcome]) -> Vec<((String, usize), f64)> {
    let mut v = Vec::new();
    for o in side {
        match o {
            Outcome::Coll(r) => v.extend(
                r.points
                    .iter()
                    .filter(|x| !x.seconds.is_empty())
                    .map(|x| ((x.kind.clone(), x.size), x.summary().median)),
            ),
            Outcome::Mpi(pts) => v.extend(pts.iter().map(|x| ((x.kind.clone(), x.size), x.median))),
            _ => {}
        }
    }
    v
}

/// One collective's rounds, size by size.
type BySize = Vec<(usize, Rounds)>;

/// Per kind, per size, the rounds of MPI (baseline) against bulkwire.
fn by_size(
    rounds: &[Round],
    kinds: &[&'static str],
    sizes: &[usize],
) -> Vec<(&'static str, BySize)> {
    let all: Vec<_> = rounds
        .iter()
        .map(|(b, c)| (medians(b), medians(c)))
        .collect();
    let at = |m: &[((String, usize), f64)], k: &str, z: usize| {
        m.iter().find(|e| e.0.0 == k && e.0.1 == z).map(|e| e.1)
    };
    kinds
        .iter()
        .map(|&k| {
            let per_size = sizes
                .iter()
                .map(|&z| {
                    let r = Rounds::collect(all.iter().map(|(b, c)| (at(b, k, z), at(c, k, z))));
                    (z, r)
                })
                .collect();
            (k, per_size)
        })
        .collect()
}

/// A set of collective targets checked from one alternating run: each kind at `p` over
/// `sizes`, the worst size's median ratio against `factor`.
struct TargetSet<'a> {
    kinds: &'a [&'static str],
    sizes: &'a [usize],
    p: u32,
    factor: f64,
    want: &'a str,
}

/// One target per kind of `set`; `stacks` names what is compared ("bulkwire X / MPI Y").
fn targets(sec: &mut Section, d: &Done<Tag>, stacks: &str, set: &TargetSet<'_>) {
    let rounds = match d.rounds() {
        Ok(r) => r,
        Err(e) => {
            // Each target of the run is listed as failed (the error once, with the runs).
            for k in set.kinds {
                let what = format!("{k} at p={}: {stacks}", set.p);
                let judged = |w: &str, _: &Rounds| judge(w, &[], set.factor, set.want);
                sec.targets.push(Target::failed(&what, &e, judged));
            }
            return;
        }
    };
    for (k, per_size) in by_size(rounds, set.kinds, set.sizes) {
        let what = format!("{k} at p={}: {stacks}", set.p);
        sec.targets
            .push(judge(&what, &per_size, set.factor, set.want));
        for (z, r) in per_size {
            sec.rounds.push((format!("{what}, {}", size_label(z)), r));
        }
    }
}

/// The target on the worst size's median ratio.
fn judge(what: &str, by_size: &[(usize, Rounds)], factor: f64, want: &str) -> Target {
    let worst = by_size
        .iter()
        .filter_map(|(z, r)| Some((*z, r.ratio()?, r)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let measured = match worst {
        Some((z, q, r)) => format!(
            "worst {q:.2}x at {} ({}); all sizes: {}",
            size_label(z),
            r.describe(),
            by_size
                .iter()
                .map(|(z, r)| match r.ratio() {
                    Some(q) => format!("{} {q:.2}x", size_label(*z)),
                    None => format!("{} -", size_label(*z)),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "no valid round".into(),
    };
    // Undecided: "no baseline" if some size lost its baseline, else "no fit".
    let why = worst.is_none().then(|| {
        by_size
            .iter()
            .filter_map(|(_, r)| r.missing())
            .min()
            .unwrap_or("no fit")
            .to_string()
    });
    Target {
        what: what.into(),
        measured,
        target: format!("<= {factor}x ({want})"),
        met: worst.map(|w| w.1 <= factor),
        why,
        split: worst.is_some_and(|(_, _, r)| {
            let q = r.ratios();
            q.iter().any(|&x| x <= factor) && q.iter().any(|&x| x > factor)
        }),
    }
}

fn chart(sec: &mut Section, rows: &[(String, u32, String, Series)], p: &Params) {
    let kind = if p.kinds.contains(&"alltoall") {
        "alltoall"
    } else {
        p.kinds[0]
    };
    let tp = p.tp();
    sec.charts.push(Chart {
        file: "collectives.svg".into(),
        title: format!("{kind} latency at p={tp} against size"),
        x: Axis::log("bytes per process", Scale::Bytes),
        y: Axis::log("latency", Scale::Seconds),
        series: rows
            .iter()
            .filter(|r| r.1 == tp && r.2 == kind)
            .map(|r| Series {
                label: r.0.clone(),
                ..r.3.clone()
            })
            .collect(),
    });
}

/// The summary's lines: at the largest p, the geometric mean over every collective and
/// size measured by both sides.
fn findings(sec: &mut Section, p: &Params, find: &Find<'_>) {
    let tp = p.tp();
    for (ours, theirs, against) in [
        ("netcache", "MPI shm", Baseline::MpiShm),
        ("p2p over holefill/udp", "MPI TCP", Baseline::MpiTcp),
    ] {
        let cells: Vec<(f64, f64)> = p
            .kinds
            .iter()
            .flat_map(|k| p.sizes.iter().map(move |&z| (*k, z)))
            .filter_map(|(k, z)| Some((find(ours, tp, k, z)?, find(theirs, tp, k, z)?)))
            .filter(|&(a, b)| a > 0.0 && b > 0.0)
            .collect();
        if cells.is_empty() {
            continue;
        }
        let geo = |f: fn(&(f64, f64)) -> f64| {
            (cells.iter().map(|c| f(c).ln()).sum::<f64>() / cells.len() as f64).exp()
        };
        let faster = cells.iter().filter(|(a, b)| a < b).count();
        let what = format!(
            "collective latency at p={tp}, {ours} vs {theirs}: geometric mean over {} \
             collectives and sizes (faster in {faster})",
            cells.len()
        );
        sec.find(Finding::time(
            against,
            what,
            Some(geo(|c| c.0)),
            Some(geo(|c| c.1)),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_targets_take_the_worst_size_of_the_median_ratios() {
        let r = |base: &[f64], cand: &[f64]| Rounds {
            base: base.to_vec(),
            cand: cand.to_vec(),
            ..Rounds::default()
        };
        // 8 B: ratios 0.5, 2.0, 0.8 -> median 0.8; 1 KiB: 0.9, 0.95, 1.1 -> 0.95.
        let by_size = vec![
            (8, r(&[2.0, 1.0, 1.0], &[1.0, 2.0, 0.8])),
            (1024, r(&[1.0, 1.0, 1.0], &[0.9, 0.95, 1.1])),
        ];
        let got = judge("a", &by_size, 1.0, "no slower");
        assert_eq!(got.met, Some(true));
        assert!(
            got.measured
                .starts_with("worst 0.95x at 1 KiB (median of 3"),
            "{}",
            got.measured
        );
        assert!(
            got.measured.ends_with("all sizes: 8 B 0.80x, 1 KiB 0.95x"),
            "{}",
            got.measured
        );
        let got = judge("a", &by_size, 0.9, "faster");
        assert_eq!(got.met, Some(false));
        let none = vec![(8, Rounds::default())];
        assert_eq!(judge("a", &none, 1.0, "x").met, None);
    }

    #[test]
    fn rounds_are_split_by_collective_and_size() {
        let mpi = |kind: &str, size, median| crate::mpi::MpiPoint {
            kind: kind.into(),
            size,
            nprocs: 4,
            n: 1,
            min: median,
            mean: median,
            max: median,
            std_dev: 0.0,
            median,
            steps: None,
        };
        let ours = |t: f64| {
            Outcome::Coll(crate::coll::CollResult {
                spec: CollSpec {
                    kinds: vec![],
                    sizes: vec![],
                    warmup: 0,
                    iters: 0,
                    stack: stacks(Level::Quick)[0],
                },
                nprocs: 4,
                netcache: true,
                protocol: "utopia".into(),
                points: ["alltoall", "allgather"]
                    .iter()
                    .map(|k| crate::coll::CollPoint {
                        kind: k.to_string(),
                        size: 8,
                        seconds: vec![t],
                        algorithm: String::new(),
                    })
                    .collect(),
                mcast: None,
                mcast_off: None,
            })
        };
        let theirs = || {
            vec![
                Outcome::Mpi(vec![mpi("alltoall", 8, 2.0)]),
                Outcome::Mpi(vec![mpi("allgather", 8, 4.0)]),
            ]
        };
        let rounds = vec![(theirs(), vec![ours(1.0)]), (theirs(), vec![ours(3.0)])];
        let got = by_size(&rounds, &TARGET_KINDS, &[8]);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "alltoall");
        assert_eq!(got[0].1[0].1.ratios(), vec![0.5, 1.5]);
        assert_eq!(got[1].1[0].1.ratios(), vec![0.25, 0.75]);
    }
}
