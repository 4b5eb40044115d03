//! All-to-all with 60 KiB messages (Riesen & Maccabe's Fig. 3): per-process bandwidth,
//! packets sent and drops against p, on this host (each reliable protocol over UDP,
//! bulkwire over kernel TCP, MPI) and on the simulated switch.

use super::Experiment;
use crate::group::{GroupResult, GroupSpec, Schedule};
use crate::mpi::{MpiJob, MpiNet};
use crate::plan::{Done, Job, Plan};
use crate::section::{
    Axis, Baseline, Chart, Finding, Group, SPREAD_NOTE, Scale, Section, Series, Stat, Table,
    short_mpi,
};
use crate::stack::{Protocol, Transport};
use crate::stats::{Spread, Summary};
use crate::suite::Suite;

pub struct Alltoall;

pub enum Tag {
    Group(Transport),
    Mpi(MpiNet),
    Sim(Protocol),
}

const SIZE: usize = 60 << 10;

/// The reliable stacks of all-to-all runs on this host: the protocols that recover losses
/// over UDP (utopia cannot take part in traffic that overflows buffers), and kernel TCP.
pub fn group_stacks() -> Vec<Transport> {
    let mut v: Vec<Transport> = Protocol::RELIABLE
        .iter()
        .map(|&p| Transport::udp(p))
        .collect();
    v.push(Transport::kernel_tcp());
    v
}

struct Params {
    warmup: usize,
    reps: usize,
    procs: Vec<u32>,
    sim_procs: Vec<u32>,
}

fn params(s: &Suite) -> Params {
    let (warmup, reps) = s.pick((1, 2), (1, 5), (3, 20));
    Params {
        warmup,
        reps,
        procs: s.pick(vec![2, 3], vec![2, 4], vec![2, 4, 8]),
        sim_procs: s.pick(vec![8], vec![8, 32], vec![8, 16, 32, 64]),
    }
}

impl Experiment for Alltoall {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "alltoall"
    }

    fn about(&self) -> &'static str {
        "All-to-all with 60 KiB messages: per-process bandwidth, packets and drops against p \
         (Riesen & Maccabe, Fig. 3), on this host and on the simulated switch"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let p = params(s);
        let mut plan = Plan::default();
        for over in group_stacks() {
            for &n in &p.procs {
                let spec = GroupSpec {
                    over,
                    size: SIZE,
                    schedule: Schedule::Latin,
                    warmup: p.warmup,
                    reps: p.reps,
                };
                plan.add(
                    format!("{} p={n}", over.label()),
                    Tag::Group(over),
                    Job::Group { p: n, spec },
                );
            }
        }
        match s.mpi() {
            Ok(_) => {
                for net in [MpiNet::Shm, MpiNet::Tcp] {
                    for &n in &p.procs {
                        let job = MpiJob {
                            kind: "alltoall".into(),
                            np: n,
                            net,
                            warmup: p.warmup,
                            iters: p.reps,
                            extra: 0.0,
                            sizes: vec![SIZE],
                        };
                        plan.add(
                            format!("MPI {} p={n}", net.label()),
                            Tag::Mpi(net),
                            Job::Mpi(job),
                        );
                    }
                }
            }
            Err(e) => plan.skip(format!("MPI: {e}")),
        }
        for protocol in Protocol::RELIABLE {
            for &n in &p.sim_procs {
                let job = Job::SimAlltoall {
                    protocol,
                    p: n,
                    size: SIZE,
                    schedule: Schedule::Latin,
                    rounds: 3,
                    seed: 1,
                };
                plan.add(
                    format!("simulated {protocol} p={n}"),
                    Tag::Sim(protocol),
                    job,
                );
            }
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            "alltoall",
            "All-to-all, 60 KiB messages (Riesen & Maccabe's Fig. 3)",
        );
        for over in group_stacks() {
            let mut pts = Vec::new();
            for d in done
                .iter()
                .filter(|d| matches!(d.tag, Tag::Group(t) if t == over))
            {
                if let Some(r) = d.group() {
                    pts.extend(group_stat(r));
                    sec.groups.push(r.clone());
                }
            }
            sec.series.push(Series {
                label: over.label(),
                group: Group::Bulkwire,
                points: pts,
            });
        }
        if let Ok(mpi) = s.mpi() {
            for net in [MpiNet::Shm, MpiNet::Tcp] {
                let mut pts = Vec::new();
                for d in done
                    .iter()
                    .filter(|d| matches!(d.tag, Tag::Mpi(n) if n == net))
                {
                    let Some(v) = d.mpi() else { continue };
                    // Per-process bandwidth: bytes each process sends / time.
                    if let Some(m) = v.first() {
                        let n = m.nprocs as usize;
                        let bw = |t: f64| (SIZE * (n - 1)) as f64 / t;
                        pts.push(Stat {
                            size: n,
                            n: m.n,
                            min: bw(m.max),
                            mean: bw(m.mean),
                            max: bw(m.min),
                            std_dev: 0.0,
                            median: bw(m.median),
                            delivered: None,
                            spread: m.steps.map(|x| x.as_rates(bw(1.0))),
                        });
                    }
                    sec.mpi.extend_from_slice(v);
                }
                sec.series.push(Series {
                    label: format!("{} {}", short_mpi(&mpi.version), net.label()),
                    group: Group::Mpi,
                    points: pts,
                });
            }
        }
        let host = host_table(&sec, &p);
        let spreads = spread_table(&sec, &p);
        let (sim_series, sim) = simulated(&mut sec, done, &p);
        sec.tables = vec![host, spreads, sim];
        sec.charts.push(Chart {
            file: "alltoall.svg".into(),
            title: "All-to-all: per-process bandwidth against p (60 KiB messages)".into(),
            x: Axis::linear("processes", Scale::Count),
            y: Axis::linear("bandwidth per process", Scale::BytesPerSecond),
            series: sec.series.clone(),
        });
        findings(&mut sec, &p);
        sec.series.extend(sim_series);
        sec
    }
}

fn host_table(sec: &Section, p: &Params) -> Table {
    let mut header = vec!["stack".to_string()];
    for &n in &p.procs {
        header.push(format!("p={n} MB/s per process"));
        header.push(format!("p={n} packets (drops)"));
    }
    let mut t = Table {
        title: "All-to-all on this host: per-process bandwidth, packets sent (and drops)".into(),
        header,
        rows: Vec::new(),
        note: format!(
            "Each process sends 60 KiB to every other (latin-square order) per round; {} \
             rounds after {} warm-up, the slowest process timed; median round. Packets: data \
             and control packets sent by all processes over the whole run. p above the core \
             count is oversubscribed.",
            p.reps, p.warmup
        ),
    };
    for s in &sec.series {
        let mut row = vec![s.label.clone()];
        for &n in &p.procs {
            let pt = s.points.iter().find(|x| x.size == n as usize);
            row.push(pt.map_or("-".into(), |x| format!("{:.0}", x.median / 1e6)));
            let g = sec
                .groups
                .iter()
                .find(|g| g.nprocs == n && g.spec.over.label() == s.label);
            row.push(g.map_or("-".into(), |g| {
                format!("{} ({})", g.data_packets + g.control_packets, g.drops)
            }));
        }
        t.rows.push(row);
    }
    t
}

/// The rounds' per-process bandwidth on this host, best / median / p90, per p.
fn spread_table(sec: &Section, p: &Params) -> Table {
    let procs: Vec<usize> = p.procs.iter().map(|&n| n as usize).collect();
    let mut t = Table::spreads_by_size(
        "All-to-all on this host: per-process bandwidth of single rounds, best / median / \
         p90 (MB/s)",
        &sec.series,
        &procs,
        |x| format!("{:.0}", x / 1e6),
        format!(
            "{SPREAD_NOTE} A round: every process sends 60 KiB to every other, the slowest \
             process timed; MPI: one MPI_Alltoall call."
        ),
    );
    t.header = std::iter::once("stack".to_string())
        .chain(p.procs.iter().map(|n| format!("p={n}")))
        .collect();
    t
}

/// The simulated series (left out of the chart: another network) and their table.
fn simulated(sec: &mut Section, done: &[Done<Tag>], p: &Params) -> (Vec<Series>, Table) {
    let mut series = Vec::new();
    for protocol in Protocol::RELIABLE {
        let mut pts = Vec::new();
        for d in done
            .iter()
            .filter(|d| matches!(d.tag, Tag::Sim(q) if q == protocol))
        {
            if let Some(r) = d.sim() {
                let bw = r.per_process_bandwidth();
                pts.push(Stat::single(r.nprocs as usize, r.seconds.len(), bw));
                sec.simulated.push(r.clone());
            }
        }
        series.push(Series {
            label: format!("{protocol} (simulated 10 Gb/s switch)"),
            group: Group::Bulkwire,
            points: pts,
        });
    }
    let mut header = vec!["stack".to_string()];
    for &n in &p.sim_procs {
        header.push(format!("p={n} MB/s"));
        header.push(format!("p={n} packets (drops)"));
    }
    let mut t = Table {
        title: "All-to-all on the simulated network (virtual time, deterministic)".into(),
        header,
        rows: Vec::new(),
        note: "Star network: 10 Gb/s links, 2 us per hop, 256 KiB per switch port, 1 MiB \
               receive buffers, 9000-byte frames; 3 rounds, median. Shows what one host \
               cannot: contention at a real switch."
            .into(),
    };
    for s in &series {
        let mut row = vec![s.label.clone()];
        for &n in &p.sim_procs {
            let r = sec
                .simulated
                .iter()
                .find(|r| r.nprocs == n && s.label.starts_with(&r.protocol));
            row.push(r.map_or("-".into(), |r| {
                format!("{:.0}", r.per_process_bandwidth() / 1e6)
            }));
            row.push(r.map_or("-".into(), |r| {
                format!("{} ({})", r.data_packets + r.control_packets, r.drops)
            }));
        }
        t.rows.push(row);
    }
    (series, t)
}

/// Per-process bandwidth of a group run, as a point at x = p.
fn group_stat(r: &GroupResult) -> Option<Stat> {
    if r.seconds.is_empty() || r.nprocs < 2 {
        return None;
    }
    let per = |t: f64| (r.spec.size * (r.nprocs as usize - 1)) as f64 / t;
    let s = Summary::of(&r.seconds);
    Some(Stat {
        size: r.nprocs as usize,
        n: s.n,
        min: per(s.max),
        mean: per(s.mean),
        max: per(s.min),
        std_dev: 0.0,
        median: r.per_process_bandwidth(),
        delivered: None,
        spread: Some(Spread::from(s).as_rates(per(1.0))),
    })
}

/// The summary's line: holefill over UDP against MPI over TCP at the largest p.
fn findings(sec: &mut Section, p: &Params) {
    let n = *p.procs.last().unwrap_or(&2) as usize;
    let at =
        |pred: &dyn Fn(&Series) -> bool| sec.series.iter().find(|s| pred(s)).and_then(|s| s.at(n));
    let ours = at(&|s| s.label == "holefill/udp");
    let tcp = at(&|s| s.group == Group::Mpi && s.label.ends_with(" TCP"));
    let what = format!(
        "all-to-all of 60 KiB messages at p={n}, per-process bandwidth, holefill/udp vs MPI over TCP"
    );
    sec.find(Finding::rate(Baseline::MpiTcp, what, ours, tcp));
}
