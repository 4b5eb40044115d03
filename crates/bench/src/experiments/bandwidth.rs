//! Streaming bandwidth per size and the Hockney fit (Melas & Zaluska's Table 1), and each
//! protocol's share of utopia's (Riesen & Maccabe's Fig. 2); targets: holefill against
//! raw UDP, holefill under 1 % loss against its own lossless rate, and p2p over shared
//! memory against MPI over shared memory at 1 MiB and 16 MiB, in alternating rounds.

use super::latency::stacks;
use super::{Experiment, add_mpi, pair};
use crate::mpi::{MpiJob, MpiNet};
use crate::pair::{Measure, PairSpec, window_for};
use crate::plan::{Done, Job, Outcome, Plan};
use crate::rounds::Rounds;
use crate::section::{
    Axis, Baseline, Chart, Finding, Group, SPREAD_NOTE, Scale, Section, Series, Table, Target, gbs,
    in_gbs, ratio, size_label, us,
};
use crate::stack::{Faults, Protocol, RawLink, Stack, Transport};
use crate::stats::hockney;
use crate::suite::Suite;

pub struct Bandwidth;

pub enum Tag {
    Stack,
    Mpi,
    /// holefill/udp against raw UDP at 1 MiB.
    UdpTarget,
    /// holefill/udp with 1 % loss against itself without.
    LossTarget,
    /// p2p over utopia/shm against MPI over shared memory, both a receive buffer per
    /// message, at one of `SHM_TARGET_SIZES`.
    ShmTarget,
}

/// The sizes of the p2p-over-shared-memory targets (large transfers by single copy).
const SHM_TARGET_SIZES: [usize; 2] = [MIB, 16 * MIB];

const MIB: usize = 1 << 20;

struct Params {
    sizes: Vec<usize>,
    warmup: usize,
    reps: usize,
    /// Warm-up and repetitions per side of a target round.
    target: (usize, usize),
}

fn params(s: &Suite) -> Params {
    let (warmup, reps) = s.pick((1, 2), (1, 3), (2, 9));
    Params {
        sizes: s.pick(
            vec![1 << 10, 64 << 10],
            (5..=12).map(|k| 1usize << (2 * k)).collect(),
            (10..=24).map(|k| 1usize << k).collect(),
        ),
        warmup,
        reps,
        target: s.pick((1, 2), (3, 5), (5, 9)),
    }
}

/// The best complete repetition at the first size of a bandwidth run (see
/// `Point::best_complete_rate`): raw UDP counts what arrives, and a repetition in which the
/// kernel dropped datagrams says nothing about the link.
pub fn best_rate(o: &Outcome) -> Option<f64> {
    match o {
        Outcome::Pair(r) => r.points.first().and_then(|p| p.best_complete_rate()),
        _ => None,
    }
}

impl Experiment for Bandwidth {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "bandwidth"
    }

    fn about(&self) -> &'static str {
        "Streaming bandwidth per size and the Hockney fit: t0, r_inf, n_1/2 (Melas & Zaluska, Table 1)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        let measure = Measure::Bandwidth {
            sizes: p.sizes.clone(),
            warmup: p.warmup,
            reps: p.reps,
        };
        for stack in stacks() {
            plan.add(stack.label(), Tag::Stack, pair(stack, measure.clone()));
        }
        // The MPI harness uses the OSU window of 64 at every size.
        add_mpi(
            &mut plan,
            s,
            |_| Tag::Mpi,
            |net| MpiJob {
                kind: "bandwidth".into(),
                np: 2,
                net,
                warmup: p.warmup,
                iters: p.reps,
                extra: 64.0,
                sizes: p.sizes.clone(),
            },
        );
        let (warmup, reps) = p.target;
        let at_mib = |stack, faults| {
            Job::Pair(PairSpec {
                stack,
                measure: Measure::Bandwidth {
                    sizes: vec![MIB],
                    warmup,
                    reps,
                },
                faults,
            })
        };
        let holefill = Stack::Proto(Transport::udp(Protocol::Holefill));
        plan.alternate(
            "holefill 1 MiB streaming bandwidth vs raw UDP",
            Tag::UdpTarget,
            s.target_rounds(),
            vec![at_mib(Stack::Raw { link: RawLink::Udp }, Faults::none())],
            vec![at_mib(holefill, Faults::none())],
        );
        // The same stream with 1 % of the datagrams dropped on receive (the fault wrapper,
        // seeded), against holefill's own lossless figure.
        plan.alternate(
            "holefill 1 MiB streaming bandwidth with 1% loss vs its lossless",
            Tag::LossTarget,
            s.target_rounds(),
            vec![at_mib(holefill, Faults::none())],
            vec![at_mib(holefill, Faults::loss(0.01, 11))],
        );
        plan_shm_targets(&mut plan, s, p.target);
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new("bandwidth", "Bandwidth: streaming, and the Hockney fit");
        for d in done {
            match d.tag {
                Tag::Stack => {
                    if let Some(r) = d.pair() {
                        sec.series.push(Series::from_pair(r));
                        sec.results.push(r.clone());
                    }
                }
                Tag::Mpi => {
                    if let Some(v) = d.mpi() {
                        sec.series.push(Series::from_mpi(d.label.clone(), v));
                        sec.mpi.extend_from_slice(v);
                    }
                }
                Tag::UdpTarget | Tag::LossTarget | Tag::ShmTarget => {}
            }
        }
        let spreads = Table::spreads_by_size(
            "Streaming bandwidth of single repetitions per size: best / median / p90 (GB/s)",
            &sec.series,
            &p.sizes,
            gbs,
            format!(
                "{SPREAD_NOTE} A repetition: one window of messages and its acknowledgement \
                 ({} per size).",
                p.reps
            ),
        );
        sec.tables = vec![
            per_size_table(&sec, &p),
            spreads,
            hockney_table(&sec),
            utopia_share_table(&sec, &p),
        ];
        sec.charts.push(Chart {
            file: "bandwidth.svg".into(),
            title: "Streaming bandwidth against message size".into(),
            x: Axis::log("message size", Scale::Bytes),
            y: Axis::log("bandwidth", Scale::BytesPerSecond),
            series: sec.series.clone(),
        });
        for d in done {
            let (want, limit) = match d.tag {
                Tag::UdpTarget => (">= 0.90x (90 %)", 0.9),
                Tag::LossTarget => (">= 0.80x (80 %)", 0.8),
                Tag::ShmTarget => (">= 1.0x", 1.0),
                _ => continue,
            };
            let r = match d.tag {
                Tag::ShmTarget => shm_rounds(d),
                _ => rounds_of(d),
            };
            let lossy = matches!(d.tag, Tag::LossTarget);
            sec.check(d.label.clone(), r, |w, r| {
                let mut t = Target::of_rounds(w, r, want, in_gbs, |q| q >= limit);
                // Loss never speeds a stream up: above 1x is the spread between rounds.
                if lossy && r.ratio().is_some_and(|q| q > 1.0) {
                    t.measured += "; above 1x only by the spread between rounds: the loss \
                                   cost less than the machine's noise";
                }
                t
            });
        }
        findings(&mut sec);
        sec
    }
}

fn rounds_of(d: &Done<Tag>) -> Result<Rounds, String> {
    super::latency::rounds_of(d, best_rate)
}

/// p2p over utopia/shm against MPI over shared memory at each of `SHM_TARGET_SIZES`, both
/// receiving each message of a window into a buffer of its own and with the same window
/// (`window_for`), so that both move the same bytes per repetition.
fn plan_shm_targets(plan: &mut Plan<Tag>, s: &Suite, (warmup, reps): (usize, usize)) {
    if s.mpi().is_err() {
        return;
    }
    let p2p = Stack::P2p {
        over: Transport::shm(Protocol::Utopia),
        progress: true,
    };
    for size in SHM_TARGET_SIZES {
        let mpi = Job::Mpi(MpiJob {
            kind: "bandwidth-own".into(),
            np: 2,
            net: MpiNet::Shm,
            warmup,
            iters: reps,
            extra: window_for(size) as f64,
            sizes: vec![size],
        });
        let ours = pair(
            p2p,
            Measure::Bandwidth {
                sizes: vec![size],
                warmup,
                reps,
            },
        );
        plan.alternate(
            format!(
                "p2p over shm, {} streaming vs MPI over shm (both a receive buffer per message)",
                size_label(size)
            ),
            Tag::ShmTarget,
            s.target_rounds(),
            vec![mpi],
            vec![ours],
        );
    }
}

/// A shared-memory target's rounds: MPI's best repetition against p2p's best complete one.
fn shm_rounds(d: &Done<Tag>) -> Result<Rounds, String> {
    super::latency::rounds_of(d, |o| match o {
        Outcome::Mpi(v) => v.first().map(|p| p.max),
        o => best_rate(o),
    })
}

fn per_size_table(sec: &Section, p: &Params) -> Table {
    let base = sec.series("raw UDP");
    let base_at = |n| base.and_then(|b| b.at(n)).unwrap_or(f64::NAN);
    let mut t = Table::by_size(
        "Streaming bandwidth per message size (GB/s, median), and ratio to raw UDP",
        "stack",
        &p.sizes,
    );
    t.note = format!(
        "OSU method: a window of 64 messages (bulkwire: fewer above 1 MiB, ~64 MiB per \
         repetition), then a short acknowledgement; {} repetitions after {} warm-up. \
         Bandwidth counts bytes delivered: raw UDP and utopia over UDP lose what the kernel \
         drops, shown in the fit table's last column.",
        p.reps, p.warmup
    );
    for s in &sec.series {
        let mut row = vec![s.label.clone()];
        for &n in &p.sizes {
            row.push(match s.at(n) {
                None => "-".into(),
                Some(m) if s.label == "raw UDP" => gbs(m),
                Some(m) => format!("{} ({})", gbs(m), ratio(m, base_at(n))),
            });
        }
        t.rows.push(row);
    }
    t
}

fn hockney_table(sec: &Section) -> Table {
    let mut t = Table::new(
        "Hockney fit t(n) = t0 + n / r_inf (in the layout of Melas & Zaluska's Table 1)",
        &[
            "stack",
            "t0 (us)",
            "r_inf (GB/s)",
            "n_1/2",
            "delivered (worst size)",
        ],
        "Least squares of per-message time (size / bandwidth) against size over all sizes, \
         each point weighted by its relative error so that small and large sizes count \
         alike; n_1/2 = t0 * r_inf. In a stream, t0 is the cost per message that \
         overlapping does not hide, not the latency.",
    );
    for s in &sec.series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (p.size as f64, p.size as f64 / p.median))
            .collect();
        let delivered = s
            .points
            .iter()
            .map(|p| p.delivered.unwrap_or(1.0))
            .fold(1.0f64, f64::min);
        let h = hockney(&pts);
        t.rows.push(vec![
            s.label.clone(),
            h.map_or("no fit".into(), |h| us(h.t0)),
            h.map_or("no fit".into(), |h| gbs(h.r_inf)),
            h.map_or("no fit".into(), |h| size_label(h.n_half.round() as usize)),
            format!("{:.1} %", delivered * 100.0),
        ]);
    }
    t
}

fn utopia_share_table(sec: &Section, p: &Params) -> Table {
    let mut t = Table::by_size(
        "Bandwidth as a fraction of utopia's (Riesen & Maccabe's Fig. 2)",
        "stack",
        &p.sizes,
    );
    t.note = "Utopia sends and trusts: the ceiling for every protocol over the same link.".into();
    let Some(u) = sec.series("utopia/udp") else {
        t.note += " Utopia was not measured in this run (see the failed runs), so no stack \
                   has a share to show.";
        return t;
    };
    for s in sec.series.iter().filter(|s| s.group == Group::Bulkwire) {
        let mut row = vec![s.label.clone()];
        for &n in &p.sizes {
            // Utopia may deliver nothing at a size (the kernel drops it all).
            row.push(match (s.at(n), u.at(n).filter(|&b| b > 0.0)) {
                (Some(m), Some(b)) => format!("{:.0} %", 100.0 * m / b),
                _ => "-".into(),
            });
        }
        t.rows.push(row);
    }
    t
}

/// The summary's lines at 1 MiB: holefill over UDP against raw UDP (the rounds' medians),
/// raw TCP and MPI over TCP.
fn findings(sec: &mut Section) {
    let what = |base: &str| format!("1 MiB streaming bandwidth, holefill/udp vs {base}");
    let at = |label: &str| sec.series(label).and_then(|s| s.at(MIB));
    // Where a target checks the comparison, its rounds alone speak for it.
    let (ours, raw) = match sec.decided("vs raw UDP") {
        Some(m) => (m.map(|m| m.1), m.map(|m| m.0)),
        None => (at("holefill/udp"), at("raw UDP")),
    };
    let mut v = vec![
        Finding::rate(Baseline::RawUdp, what("raw UDP"), ours, raw),
        Finding::rate(
            Baseline::KernelTcp,
            what("raw TCP"),
            at("holefill/udp"),
            at("raw TCP"),
        ),
    ];
    for s in sec.series.iter().filter(|s| s.group == Group::Mpi) {
        if s.label.ends_with(" TCP") {
            v.push(Finding::rate(
                Baseline::MpiTcp,
                what(&s.label),
                at("holefill/udp"),
                s.at(MIB),
            ));
        }
    }
    for f in v {
        sec.find(f);
    }
}
