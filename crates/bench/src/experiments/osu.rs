//! `bwbench mpi`: the OSU micro-benchmarks, unchanged, under bulkwire's MPI beside Open
//! MPI and MPICH. The binaries are those `scripts/mpi-suites.sh` built by OSU's own
//! `configure` with each MPI's `mpicc` (`bwbench --osu DIR` names its work directory); each
//! benchmark runs under every MPI in alternating rounds (the MPI that starts a round
//! rotates), and the tables put OSU's own figures side by side, the median of the rounds.
//! The targets of issue 30 at p = 2 over shared memory are checked as ratios of bulkwire's
//! figure to Open MPI's in the same rounds: `osu_latency` at 8 B and `osu_allreduce` and
//! `osu_bcast` at 8 B and 64 KiB at most 1.0x, `osu_bw` at 1 MiB at least 1.0x.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::Experiment;
use crate::mpi::MpiPoint;
use crate::osu::{self, Build, Impl};
use crate::plan::{Done, Job, OwnJob, Plan};
use crate::rounds::Rounds;
use crate::section::{Section, Table, Target, in_us, rate_label, ratio, size_label};
use crate::stats::Summary;
use crate::suite::Suite;

pub struct Osu;

pub const NAME: &str = "mpi";

/// What OSU's figure is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Microseconds: lower is better.
    Micros,
    /// MB/s: higher is better.
    MegaBytes,
}

struct Bench {
    name: &'static str,
    /// The largest size (`-m 8:MAX`); `None` for a benchmark without sizes.
    max: Option<usize>,
    unit: Unit,
}

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

const BENCHES: &[Bench] = &[
    Bench {
        name: "osu_latency",
        max: Some(MIB),
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_bw",
        max: Some(MIB),
        unit: Unit::MegaBytes,
    },
    Bench {
        name: "osu_bibw",
        max: Some(MIB),
        unit: Unit::MegaBytes,
    },
    Bench {
        name: "osu_allreduce",
        max: Some(64 * KIB),
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_bcast",
        max: Some(64 * KIB),
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_allgather",
        max: Some(64 * KIB),
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_alltoall",
        max: Some(64 * KIB),
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_barrier",
        max: None,
        unit: Unit::Micros,
    },
    Bench {
        name: "osu_iallreduce",
        max: Some(64 * KIB),
        unit: Unit::Micros,
    },
];

/// The sizes each table shows (of those a benchmark measures).
const SHOWN: [usize; 5] = [8, KIB, 8 * KIB, 64 * KIB, MIB];

/// The targets: benchmark, size, and whether bulkwire's figure must be at most (true) or
/// at least (false) Open MPI's.
const TARGETS: [(&str, usize, bool); 6] = [
    ("osu_latency", 8, true),
    ("osu_bw", MIB, false),
    ("osu_allreduce", 8, true),
    ("osu_allreduce", 64 * KIB, true),
    ("osu_bcast", 8, true),
    ("osu_bcast", 64 * KIB, true),
];

const NP: u32 = 2;

pub struct Tag {
    bench: usize,
    imp: Impl,
    round: usize,
}

/// The script's work directory: `--osu DIR`, else `target/mpi-suites` here.
fn suites_dir(s: &Suite) -> PathBuf {
    s.osu_dir()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/mpi-suites"))
}

/// OSU's iterations and warm-up at the suite's level (`None`: OSU's defaults, 10,000
/// iterations of a small message's latency, 100 windows of 64 messages for bandwidth).
/// `-i` sets every size's count: a bandwidth benchmark's are windows of 64 messages, up
/// to 1 MiB each, so it takes fewer.
fn iterations(s: &Suite, unit: Unit) -> Option<(usize, usize)> {
    match unit {
        Unit::Micros => s.pick(Some((20, 5)), Some((1000, 100)), None),
        Unit::MegaBytes => s.pick(Some((3, 1)), Some((20, 5)), None),
    }
}

/// A figure in the report's units: seconds, or bytes per second.
fn si(unit: Unit, v: f64) -> f64 {
    match unit {
        Unit::Micros => v * 1e-6,
        Unit::MegaBytes => v * 1e6,
    }
}

impl Experiment for Osu {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "The OSU micro-benchmarks under bulkwire's MPI, Open MPI and MPICH, side by side (built by scripts/mpi-suites.sh)"
    }

    fn in_all(&self) -> bool {
        false
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let mut plan = Plan::default();
        let dir = suites_dir(s);
        let (builds, missing) = osu::find(&dir);
        for m in missing {
            plan.skip(m);
        }
        plan.skip(
            "osu_latency and osu_bw across two network namespaces (TCP) against Open MPI over \
             TCP: not run here",
        );
        let rounds = s.target_rounds();
        let timeout = Duration::from_secs(s.pick(60, 180, 600));
        for (b, bench) in BENCHES.iter().enumerate() {
            let iters = iterations(s, bench.unit);
            let have: Vec<&Build> = builds.iter().filter(|x| x.has(bench.name)).collect();
            for x in builds.iter().filter(|x| !x.has(bench.name)) {
                plan.skip(format!("{} under {}: not built", bench.name, x.imp.label()));
            }
            let mut args: Vec<String> = Vec::new();
            if let Some(max) = bench.max {
                args.extend(["-m".into(), format!("8:{max}")]);
            }
            if let Some((i, x)) = iters {
                args.extend(["-i".into(), i.to_string(), "-x".into(), x.to_string()]);
            }
            // Starting the job, then the iterations over every size (a window of 64
            // messages of up to 1 MiB for bandwidth).
            let estimate = match (iters, bench.unit) {
                (Some((i, _)), Unit::Micros) => 1.0 + i as f64 * 3e-4,
                (Some((i, _)), Unit::MegaBytes) => 1.0 + i as f64 * 0.05,
                (None, _) => 20.0,
            };
            for round in 0..rounds {
                // Each round starts with the next MPI, so none always runs first.
                let n = have.len().max(1);
                for k in 0..have.len() {
                    let build = have[(k + round) % n].clone();
                    let args = args.clone();
                    let name = bench.name;
                    plan.add(
                        format!("{name} {} round {}", build.imp.label(), round + 1),
                        Tag {
                            bench: b,
                            imp: build.imp,
                            round,
                        },
                        Job::Own(OwnJob::new(estimate, move |_s: &Suite| {
                            build.run(name, NP, &args, timeout)
                        })),
                    );
                }
            }
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let mut sec = Section::new(
            NAME,
            "MPI: the OSU micro-benchmarks under bulkwire, Open MPI and MPICH",
        );
        let rounds = s.target_rounds();
        // (bench, imp, round) -> OSU's figures by size.
        let mut figs: HashMap<(usize, Impl, usize), HashMap<usize, f64>> = HashMap::new();
        for d in done {
            if let Some(points) = d.own::<Vec<(usize, f64)>>() {
                figs.insert(
                    (d.tag.bench, d.tag.imp, d.tag.round),
                    points.iter().copied().collect(),
                );
            }
        }
        let at = |b: usize, imp: Impl, round: usize, size: usize| {
            figs.get(&(b, imp, round))
                .and_then(|m| m.get(&size))
                .copied()
        };
        for (b, bench) in BENCHES.iter().enumerate() {
            let imps: Vec<Impl> = Impl::ALL
                .into_iter()
                .filter(|&i| (0..rounds).any(|r| figs.contains_key(&(b, i, r))))
                .collect();
            if imps.is_empty() {
                continue;
            }
            let mut sizes: Vec<usize> = figs
                .iter()
                .filter(|((bb, _, _), _)| *bb == b)
                .flat_map(|(_, m)| m.keys().copied())
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            let what = match bench.unit {
                Unit::Micros => "us",
                Unit::MegaBytes => "MB/s",
            };
            let mut header = vec!["Size".to_string()];
            header.extend(imps.iter().map(|i| format!("{} ({what})", i.label())));
            let ompi = imps.contains(&Impl::OpenMpi) && imps.contains(&Impl::Bulkwire);
            if ompi {
                header.push("bulkwire / Open MPI".into());
            }
            let mut table = Table {
                title: format!("{}, p = {NP}", bench.name),
                header,
                rows: Vec::new(),
                note: format!(
                    "OSU's own figures ({what}), each the median of {rounds} alternating \
                     round{} (the MPI that starts a round rotates); Open MPI over shared \
                     memory (vader), MPICH with its defaults, bulkwire under bsprun. OSU \
                     prints one aggregate per size and round (its average over its \
                     iterations), so this section has no best / median / p90 of single \
                     operations: the other sections' harnesses time each one.",
                    if rounds == 1 { "" } else { "s" }
                ),
            };
            for &size in &sizes {
                let medians: Vec<Option<f64>> = imps
                    .iter()
                    .map(|&imp| {
                        let xs: Vec<f64> =
                            (0..rounds).filter_map(|r| at(b, imp, r, size)).collect();
                        if xs.is_empty() {
                            return None;
                        }
                        let sum = Summary::of(&xs);
                        let to = |v| si(bench.unit, v);
                        sec.mpi.push(MpiPoint {
                            kind: format!("{} {}", bench.name, imp.dir()),
                            size,
                            nprocs: NP,
                            n: sum.n,
                            min: to(sum.min),
                            mean: to(sum.mean),
                            max: to(sum.max),
                            std_dev: to(sum.std_dev),
                            median: to(sum.median),
                            steps: None,
                        });
                        Some(sum.median)
                    })
                    .collect();
                if bench.max.is_some() && !SHOWN.contains(&size) {
                    continue;
                }
                let mut row = vec![if bench.max.is_some() {
                    size_label(size)
                } else {
                    "-".into()
                }];
                row.extend(
                    medians
                        .iter()
                        .map(|m| m.map_or("-".into(), |v| format!("{v:.2}"))),
                );
                if ompi {
                    let of = |i: Impl| {
                        imps.iter()
                            .position(|&x| x == i)
                            .and_then(|k| medians[k])
                            .unwrap_or(f64::NAN)
                    };
                    row.push(ratio(of(Impl::Bulkwire), of(Impl::OpenMpi)));
                }
                table.rows.push(row);
            }
            sec.tables.push(table);
        }
        for (name, size, at_most) in TARGETS {
            let Some(b) = BENCHES.iter().position(|x| x.name == name) else {
                continue;
            };
            let unit = BENCHES[b].unit;
            let what = format!(
                "{name} {}, p = {NP}, shared memory: bulkwire / Open MPI",
                size_label(size)
            );
            let have = |imp: Impl| (0..rounds).any(|r| figs.contains_key(&(b, imp, r)));
            if !have(Impl::Bulkwire) || !have(Impl::OpenMpi) {
                sec.skipped.push(format!(
                    "target {what}: not checked ({} not measured)",
                    if have(Impl::Bulkwire) {
                        "Open MPI's figures"
                    } else {
                        "bulkwire's figures"
                    }
                ));
                continue;
            }
            let r = Rounds::collect((0..rounds).map(|round| {
                (
                    at(b, Impl::OpenMpi, round, size).map(|v| si(unit, v)),
                    at(b, Impl::Bulkwire, round, size).map(|v| si(unit, v)),
                )
            }));
            let fmt: fn(f64) -> String = match unit {
                Unit::Micros => in_us,
                Unit::MegaBytes => rate_label,
            };
            sec.check(what, Ok(r), |w, r| {
                if at_most {
                    Target::of_rounds(w, r, "<= 1.0x", fmt, |q| q <= 1.0)
                } else {
                    Target::of_rounds(w, r, ">= 1.0x", fmt, |q| q >= 1.0)
                }
            });
        }
        sec
    }
}
