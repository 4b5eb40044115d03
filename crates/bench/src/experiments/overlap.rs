//! Overlap of computation and communication (Riesen & Maccabe's Fig. 4): pre-post a
//! receive, compute, then wait; the wait against message size for every stack under the
//! point-to-point layer, with and without its progress thread, beside MPI.

use super::{Experiment, add_mpi, pair};
use crate::mpi::MpiJob;
use crate::pair::Measure;
use crate::plan::{Done, Plan};
use crate::section::{
    Axis, Baseline, Chart, Finding, Group, SPREAD_NOTE, Scale, Section, Series, Table, size_label,
    us,
};
use crate::stack::{Protocol, Stack, Transport};
use crate::suite::Suite;

pub struct Overlap;

pub enum Tag {
    Stack,
    Mpi,
}

/// Every transport under the point-to-point layer with its progress thread, and holefill
/// over UDP without it.
fn stacks() -> Vec<Stack> {
    let with = |over| Stack::P2p {
        over,
        progress: true,
    };
    let mut v: Vec<Stack> = Protocol::DATAGRAM
        .iter()
        .map(|&p| with(Transport::udp(p)))
        .collect();
    v.push(with(Transport::kernel_tcp()));
    v.push(with(Transport::shm(Protocol::Utopia)));
    v.push(Stack::P2p {
        over: Transport::udp(Protocol::Holefill),
        progress: false,
    });
    v
}

struct Params {
    sizes: Vec<usize>,
    compute_ms: u64,
    reps: usize,
}

fn params(s: &Suite) -> Params {
    Params {
        sizes: s.pick(
            vec![8, 64 << 10],
            vec![8, 1 << 10, 64 << 10, 1 << 20, 16 << 20],
            vec![
                8,
                1 << 10,
                16 << 10,
                64 << 10,
                256 << 10,
                1 << 20,
                4 << 20,
                16 << 20,
            ],
        ),
        compute_ms: s.pick(10, 100, 200),
        reps: s.pick(2, 5, 9),
    }
}

impl Experiment for Overlap {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "overlap"
    }

    fn about(&self) -> &'static str {
        "Pre-post, compute, wait: the wait against message size (Riesen & Maccabe, Fig. 4)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        let measure = Measure::Overlap {
            sizes: p.sizes.clone(),
            compute_ms: p.compute_ms,
            reps: p.reps,
        };
        for stack in stacks() {
            plan.add(stack.label(), Tag::Stack, pair(stack, measure.clone()));
        }
        add_mpi(
            &mut plan,
            s,
            |_| Tag::Mpi,
            |net| MpiJob {
                kind: "overlap".into(),
                np: 2,
                net,
                warmup: 0,
                iters: p.reps,
                extra: p.compute_ms as f64 / 1e3,
                sizes: p.sizes.clone(),
            },
        );
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "overlap",
            "Overlap of computation and communication (Riesen & Maccabe's Fig. 4)",
        );
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
            }
        }
        let mut t = Table::by_size(
            format!(
                "Wait after {} ms of computation (us, median): pre-post, compute, wait",
                p.compute_ms
            ),
            "stack",
            &p.sizes,
        );
        t.note = format!(
            "Rank 0 posts a receive, tells rank 1 to send, computes {} ms without calling the \
             library, then waits; {} repetitions. A wait near zero at every size means the \
             message arrived during the computation (Riesen & Maccabe: Utopia and RMPP); a \
             wait growing with the size means it did not (UDP and TCP there). bulkwire's \
             progress thread is what makes the difference: the row without it is the same \
             stack.",
            p.compute_ms, p.reps
        );
        for s in &sec.series {
            let mut row = vec![s.label.clone()];
            for &n in &p.sizes {
                row.push(s.at(n).map_or("-".into(), us));
            }
            t.rows.push(row);
        }
        let spreads = Table::spreads_by_size(
            format!(
                "Single waits after {} ms of computation: best / median / p90 (us)",
                p.compute_ms
            ),
            &sec.series,
            &p.sizes,
            us,
            SPREAD_NOTE,
        );
        sec.tables = vec![t, spreads];
        sec.charts.push(Chart {
            file: "overlap.svg".into(),
            title: "Wait after a long computation against message size".into(),
            x: Axis::log("message size", Scale::Bytes),
            y: Axis::log("wait", Scale::Seconds),
            series: sec.series.clone(),
        });
        findings(&mut sec, &p);
        sec
    }
}

/// The summary's lines at the largest size: p2p over shared memory and over UDP, each with
/// its progress thread, against MPI over the same kind of path.
fn findings(sec: &mut Section, p: &Params) {
    let n = *p.sizes.last().unwrap_or(&8);
    let at = |label: &str| sec.series(label).and_then(|s| s.at(n));
    let mut v = Vec::new();
    for m in sec.series.iter().filter(|s| s.group == Group::Mpi) {
        let (ours, against) = if m.label.ends_with(" shm") {
            ("p2p over utopia/shm", Baseline::MpiShm)
        } else {
            ("p2p over holefill/udp", Baseline::MpiTcp)
        };
        let what = format!(
            "wait for {} after {} ms of computation, {ours} vs {}",
            size_label(n),
            p.compute_ms,
            m.label
        );
        v.push(Finding::time(against, what, at(ours), m.at(n)));
    }
    for f in v {
        sec.find(f);
    }
}
