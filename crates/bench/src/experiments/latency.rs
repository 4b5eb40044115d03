//! Ping-pong latency per size, every stack beside raw UDP, raw TCP and MPI (at 8 B in the
//! layout of Riesen & Maccabe's Table 1); targets: holefill against raw UDP, and utopia over
//! shared memory against MPI's, in alternating rounds.

use super::{Experiment, add_mpi, pair};
use crate::mpi::{MpiJob, MpiNet};
use crate::pair::{Measure, PairResult};
use crate::plan::{Done, Job, Outcome, Plan};
use crate::rounds::Rounds;
use crate::section::{
    Axis, Baseline, Chart, Finding, SPREAD_NOTE, Scale, Section, Series, Table, Target, in_us,
    ratio, size_label, us,
};
use crate::stack::{Protocol, RawLink, Stack, Transport};
use crate::suite::Suite;

pub struct Latency;

pub enum Tag {
    Stack,
    Mpi,
    /// holefill/udp against raw UDP.
    UdpTarget,
    /// utopia/shm against MPI over shared memory.
    ShmTarget,
}

struct Params {
    sizes: Vec<usize>,
    warmup: usize,
    iters: usize,
    /// Exchanges per side of a target round.
    target_iters: usize,
}

fn params(s: &Suite) -> Params {
    let (warmup, iters) = s.pick((20, 100), (500, 3000), (2000, 20000));
    Params {
        sizes: s.pick(
            vec![8, 1024],
            vec![8, 64, 512, 1 << 10, 8 << 10, 64 << 10],
            (3..=16).map(|k| 1usize << k).collect(),
        ),
        warmup,
        iters,
        target_iters: s.pick(100, 10_000, 20_000),
    }
}

/// The stacks every two-process table compares: the baselines first, then each protocol
/// over UDP, bulkwire over kernel TCP, and what a job on one host gets by default.
pub fn stacks() -> Vec<Stack> {
    let mut v = vec![
        Stack::Raw { link: RawLink::Udp },
        Stack::Raw { link: RawLink::Tcp },
    ];
    v.extend(
        Protocol::DATAGRAM
            .iter()
            .map(|&p| Stack::Proto(Transport::udp(p))),
    );
    v.push(Stack::Proto(Transport::kernel_tcp()));
    v.push(Stack::Proto(Transport::shm(Protocol::Utopia)));
    v
}

/// The median half round trip at the first size of a latency run.
pub fn first_median(o: &Outcome) -> Option<f64> {
    match o {
        Outcome::Pair(r) => r.points.first().and_then(|p| median(&p.samples)),
        Outcome::Mpi(v) => v.first().map(|p| p.median),
        _ => None,
    }
}

fn median(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| crate::stats::Summary::of(xs).median)
}

/// A target's rounds: per round, the figure `fig` takes from each side's only job.
pub fn rounds_of<T>(d: &Done<T>, fig: fn(&Outcome) -> Option<f64>) -> Result<Rounds, String> {
    Ok(Rounds::collect(d.rounds()?.iter().map(|(b, c)| {
        (b.first().and_then(fig), c.first().and_then(fig))
    })))
}

impl Experiment for Latency {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "latency"
    }

    fn about(&self) -> &'static str {
        "Ping-pong half round trip per size: min / avg / max / std dev (Riesen & Maccabe, Table 1)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        let measure = Measure::Latency {
            sizes: p.sizes.clone(),
            warmup: p.warmup,
            iters: p.iters,
        };
        for stack in stacks() {
            plan.add(stack.label(), Tag::Stack, pair(stack, measure.clone()));
        }
        let mpi = add_mpi(
            &mut plan,
            s,
            |_| Tag::Mpi,
            |net| MpiJob {
                kind: "latency".into(),
                np: 2,
                net,
                warmup: p.warmup,
                iters: p.iters,
                extra: 0.0,
                sizes: p.sizes.clone(),
            },
        );
        // The targets, in alternating rounds at the first size (see `rounds`).
        let n = p.sizes[0];
        let at_n = |stack| {
            pair(
                stack,
                Measure::Latency {
                    sizes: vec![n],
                    warmup: p.warmup,
                    iters: p.target_iters,
                },
            )
        };
        plan.alternate(
            format!("holefill {} half round trip vs raw UDP", size_label(n)),
            Tag::UdpTarget,
            s.target_rounds(),
            vec![at_n(Stack::Raw { link: RawLink::Udp })],
            vec![at_n(Stack::Proto(Transport::udp(Protocol::Holefill)))],
        );
        if let Some(mpi) = mpi {
            let vader = Job::Mpi(MpiJob {
                kind: "latency".into(),
                np: 2,
                net: MpiNet::Shm,
                warmup: p.warmup,
                iters: p.target_iters,
                extra: 0.0,
                sizes: vec![n],
            });
            plan.alternate(
                format!(
                    "shared memory {} half round trip: utopia/shm vs {mpi} shm",
                    size_label(n)
                ),
                Tag::ShmTarget,
                s.target_rounds(),
                vec![vader],
                vec![at_n(Stack::Proto(Transport::shm(Protocol::Utopia)))],
            );
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new("latency", "Latency: ping-pong half round trip");
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
                Tag::UdpTarget | Tag::ShmTarget => {}
            }
        }
        let spreads = Table::spreads_by_size(
            "Single half round trips per size: best / median / p90 (us)",
            &sec.series,
            &p.sizes,
            us,
            format!(
                "{SPREAD_NOTE} Each ping-pong of the tables above timed on its own ({} per \
                 size), bulkwire's harness and MPI's alike.",
                p.iters
            ),
        );
        sec.tables = vec![
            first_size_table(&sec, &p),
            per_size_table(&sec, &p),
            spreads,
        ];
        sec.charts.push(Chart {
            file: "latency.svg".into(),
            title: "Half round trip against message size".into(),
            x: Axis::log("message size", Scale::Bytes),
            y: Axis::log("half round trip", Scale::Seconds),
            series: sec.series.clone(),
        });
        for d in done {
            let target = match d.tag {
                Tag::UdpTarget => ("<= 1.20x", 1.2, false),
                Tag::ShmTarget => ("< 1x", 1.0, true),
                _ => continue,
            };
            let (want, limit, strict) = target;
            let r = rounds_of(d, first_median);
            sec.check(d.label.clone(), r, |w, r| {
                Target::of_rounds(w, r, want, in_us, |q| {
                    if strict { q < limit } else { q <= limit }
                })
            });
        }
        findings(&mut sec, p.sizes[0]);
        sec
    }
}

/// The RMPP paper's Table 1 at the first size, with packets per message.
fn first_size_table(sec: &Section, p: &Params) -> Table {
    let n = p.sizes[0];
    let base = sec
        .series("raw UDP")
        .and_then(|b| b.at(n))
        .unwrap_or(f64::NAN);
    let mut t = Table::new(
        format!(
            "Half round trip at {} (us), in the layout of Riesen & Maccabe's Table 1",
            size_label(n)
        ),
        &[
            "stack",
            "min",
            "avg",
            "max",
            "std dev",
            "median",
            "median vs raw UDP",
            "packets per message",
        ],
        format!(
            "{} timed exchanges after {} warm-up; two processes on this host (loopback). Raw \
             UDP and raw TCP are measured by bulkwire's own harness with the same wait policy; \
             MPI by the same experiment in C.",
            p.iters, p.warmup
        ),
    );
    let sent = (p.sizes.len() * (p.warmup + p.iters)) as f64;
    for s in &sec.series {
        let Some(x) = s.points.first() else { continue };
        t.rows.push(vec![
            s.label.clone(),
            us(x.min),
            us(x.mean),
            us(x.max),
            us(x.std_dev),
            us(x.median),
            ratio(x.median, base),
            packets_per_message(&sec.results, &s.label, sent),
        ]);
    }
    t
}

/// Packets rank 0 sent per message it sent, over the whole run (Riesen & Maccabe: "RMPP
/// received three times as many packets as TCP").
fn packets_per_message(results: &[PairResult], label: &str, sent: f64) -> String {
    results
        .iter()
        .find(|r| r.spec.stack.label() == label)
        .and_then(|r| r.counters.as_ref())
        .map_or("-".into(), |c| {
            format!("{:.2}", (c.data_sent + c.control_sent) as f64 / sent)
        })
}

fn per_size_table(sec: &Section, p: &Params) -> Table {
    let base = sec.series("raw UDP");
    let base_at = |n| base.and_then(|b| b.at(n)).unwrap_or(f64::NAN);
    let mut t = Table::by_size(
        "Median half round trip per size (us), and ratio to raw UDP",
        "stack",
        &p.sizes,
    );
    for s in &sec.series {
        let mut row = vec![s.label.clone()];
        for &n in &p.sizes {
            row.push(match s.at(n) {
                None => "-".into(),
                Some(m) if s.label == "raw UDP" => us(m),
                Some(m) => format!("{} ({})", us(m), ratio(m, base_at(n))),
            });
        }
        t.rows.push(row);
    }
    t
}

/// The summary's lines: holefill over UDP against raw UDP and TCP and MPI over TCP, utopia
/// over shared memory against MPI's; the alternating rounds' medians where there are.
fn findings(sec: &mut Section, n: usize) {
    let what =
        |who: &str, base: &str| format!("{} half round trip, {who} vs {base}", size_label(n));
    let at = |label: &str| sec.series(label).and_then(|s| s.at(n));
    // Where a target checks the comparison, its rounds alone speak for it.
    let (holefill, raw_udp) = match sec.decided("vs raw UDP") {
        Some(m) => (m.map(|m| m.1), m.map(|m| m.0)),
        None => (at("holefill/udp"), at("raw UDP")),
    };
    let mut v = vec![
        Finding::time(
            Baseline::RawUdp,
            what("holefill/udp", "raw UDP"),
            holefill,
            raw_udp,
        ),
        Finding::time(
            Baseline::KernelTcp,
            what("holefill/udp", "raw TCP"),
            at("holefill/udp"),
            at("raw TCP"),
        ),
    ];
    let mpi: Vec<String> = sec
        .series
        .iter()
        .filter(|s| s.group == crate::section::Group::Mpi)
        .map(|s| s.label.clone())
        .collect();
    for m in &mpi {
        if m.ends_with(" shm") {
            let (shm, vader) = match sec.decided("utopia/shm vs") {
                Some(m) => (m.map(|m| m.1), m.map(|m| m.0)),
                None => (at("utopia/shm"), at(m)),
            };
            v.push(Finding::time(
                Baseline::MpiShm,
                what("utopia/shm", m),
                shm,
                vader,
            ));
        } else {
            v.push(Finding::time(
                Baseline::MpiTcp,
                what("holefill/udp", m),
                at("holefill/udp"),
                at(m),
            ));
        }
    }
    for f in v {
        sec.find(f);
    }
}
