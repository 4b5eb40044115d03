//! The BSP messaging layer at scale (the BSPlib paper's claims past p = 8): l, g, total
//! exchanges by schedule and pacing, and a sample sort, on a simulated cluster in virtual
//! time ([`crate::scale`]). Each simulation is a job of the plan; figures are the same on
//! every run of one seed.

use bulkwire_bsp::Schedule;

use super::Experiment;
use crate::plan::{Done, Job, OwnJob, Plan};
use crate::scale::{
    Cluster, Exchange, HRelations, Packets, Params, Point, empty, h_relations, sample_sort,
    total_exchange,
};
use crate::section::{Axis, Chart, Group, Scale, Section, Series, Stat, Table, Target, size_label};
use crate::suite::Suite;

pub struct ScaleExperiment;

/// What a job of the plan measured.
pub enum Tag {
    FatTree,
    Twice,
    Empty(u32),
    H(u32),
    Exchange(u32),
    Sort(u32),
}

/// Above this many bytes of exchanged data, every sender's data goes to one place.
const DISTINCT_LIMIT: u64 = 256 << 20;

/// Host seconds per simulated process-superstep, roughly, for the progress bar.
fn estimate(p: u32, work: f64) -> f64 {
    (p as f64 * work * 2e-5).max(0.05)
}

/// Host seconds of a run whose cost grows with p squared (every process's turn is
/// scheduled among p threads, and a total exchange moves p^2 messages): `per` seconds per
/// p^2, measured on a busy 2-core machine (half its CPUs taken by other work).
fn estimate_sq(p: u32, per: f64) -> f64 {
    (f64::from(p) * f64::from(p) * per).max(0.05)
}

/// Packets of one message of `size` bytes on the simulated cluster's jumbo frames.
fn packets(size: usize) -> f64 {
    size.div_ceil(8900).max(1) as f64
}

impl Experiment for ScaleExperiment {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        "scale"
    }

    fn about(&self) -> &'static str {
        "The BSP messaging layer at p = 16 to 4096 on a simulated 25 Gb/s cluster: l, g, total \
         exchanges by schedule and pacing, in virtual time (the BSPlib paper at scale)"
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let params = Params::for_level(s.level);
        let mut plan = Plan::default();
        let (fp, k) = params.fat_tree;
        let size = params.size;
        for (sched, name) in [(Schedule::Latin, "latin"), (Schedule::Pid, "pid")] {
            plan.add(
                format!("fat tree, p = {fp}, {name}, paced"),
                Tag::FatTree,
                Job::Own(OwnJob::new(
                    estimate_sq(fp, packets(size) * 4e-5),
                    move |_| {
                        Ok(total_exchange(
                            &Cluster::fat_tree(k),
                            fp,
                            size,
                            sched,
                            true,
                            DISTINCT_LIMIT,
                        )?
                        .0)
                    },
                )),
            );
        }
        let twice = params.clone();
        plan.add(
            format!("two runs of one seed, p = {}", params.twice),
            Tag::Twice,
            Job::Own(OwnJob::new(
                estimate(params.twice, 4.0 * params.twice as f64),
                move |_| same_seed_twice(&Cluster::ethernet25(), &twice),
            )),
        );
        // Ascending p: the biggest runs, which need the most memory, come last.
        for &p in &params.procs {
            let steps = params.steps;
            plan.add(
                format!("empty supersteps, p = {p}"),
                Tag::Empty(p),
                Job::Own(OwnJob::new(
                    estimate_sq(p, (steps as f64 + 2.0) * 6e-7),
                    move |_| {
                        let (ns, packets, _) = empty(&Cluster::ethernet25(), p, steps)?;
                        Ok((ns, packets))
                    },
                )),
            );
            if p <= params.h_upto {
                let (hs, reps) = (params.hs.clone(), params.reps);
                let work = hs.iter().map(|&h| h as f64 + 1.0).sum::<f64>() * reps as f64;
                plan.add(
                    format!("h-relations, p = {p}"),
                    Tag::H(p),
                    Job::Own(OwnJob::new(estimate(p, work), move |_| {
                        Ok(h_relations(&Cluster::ethernet25(), p, &hs, reps)?.0)
                    })),
                );
            }
            for (sched, paced) in params.exchanges(p) {
                let how = if paced { "paced" } else { "unpaced" };
                plan.add(
                    format!("total exchange, p = {p}, {sched:?}, {how}"),
                    Tag::Exchange(p),
                    Job::Own(OwnJob::new(
                        estimate_sq(p, packets(size) * 3e-5),
                        move |_| {
                            let c = Cluster::ethernet25();
                            Ok(total_exchange(&c, p, size, sched, paced, DISTINCT_LIMIT)?.0)
                        },
                    )),
                );
            }
            if p <= params.sort_upto {
                let keys = params.sort_keys;
                plan.add(
                    format!("sample sort, p = {p}"),
                    Tag::Sort(p),
                    Job::Own(OwnJob::new(estimate_sq(p, 2e-5), move |_| {
                        let out = sample_sort(&Cluster::ethernet25(), p, keys)?;
                        Ok(out.results.iter().map(|&n| n as u64).sum::<u64>())
                    })),
                );
            }
        }
        plan
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let params = Params::for_level(s.level);
        let cluster = Cluster::ethernet25();
        let tree = Cluster::fat_tree(params.fat_tree.1);
        let mut sec = Section::new(
            "scale",
            "Scale: the BSP messaging layer at p = 16 to 4096 on a simulated cluster",
        );
        sec.tables.push(Table {
            title: "The simulated cluster".into(),
            header: vec!["parameter".into(), "value".into()],
            rows: vec![
                vec!["one switch".into(), cluster.describe()],
                vec!["two-tier fat tree".into(), tree.describe()],
            ],
            note: "Virtual time: each process runs the real bsp_sync over holefill and the \
                   engine; only the network and the CPU cost per datagram and per message \
                   are modelled. The figures are means over the timed supersteps of one \
                   seeded run, the same in every run: this section has no best / median / \
                   p90 of single supersteps (the machine's noise, which they measure \
                   elsewhere, does not reach virtual time)."
                .into(),
        });
        let points = points(&params, done);
        let tree_rows: Vec<&Exchange> = done
            .iter()
            .filter(|d| matches!(d.tag, Tag::FatTree))
            .filter_map(|d| d.own::<Exchange>())
            .collect();
        let twice = done
            .iter()
            .find(|d| matches!(d.tag, Tag::Twice))
            .and_then(|d| d.own::<bool>().copied());
        tables(&mut sec, &params, &cluster, &tree, &points, &tree_rows);
        sec.tables.retain(|t| !t.rows.is_empty());
        targets(&mut sec, &points, &params, twice);
        if !points.is_empty() {
            charts(&mut sec, &points);
        }
        sec.scale = points;
        sec
    }
}

/// Gathers the jobs' figures by p.
fn points(params: &Params, done: &[Done<Tag>]) -> Vec<Point> {
    params
        .procs
        .iter()
        .filter_map(|&p| {
            let mine = |d: &&Done<Tag>| match d.tag {
                Tag::Empty(q) | Tag::H(q) | Tag::Exchange(q) | Tag::Sort(q) => q == p,
                _ => false,
            };
            let at: Vec<&Done<Tag>> = done.iter().filter(mine).collect();
            let (empty_ns, empty_packets) = at
                .iter()
                .filter(|d| matches!(d.tag, Tag::Empty(_)))
                .find_map(|d| d.own::<(f64, Packets)>())
                .copied()?;
            Some(Point {
                p,
                empty_ns,
                empty_packets,
                h: at
                    .iter()
                    .filter(|d| matches!(d.tag, Tag::H(_)))
                    .find_map(|d| d.own::<HRelations>())
                    .cloned(),
                exchanges: at
                    .iter()
                    .filter(|d| matches!(d.tag, Tag::Exchange(_)))
                    .filter_map(|d| d.own::<Exchange>())
                    .cloned()
                    .collect(),
                sorted_keys: at
                    .iter()
                    .filter(|d| matches!(d.tag, Tag::Sort(_)))
                    .find_map(|d| d.own::<u64>())
                    .copied(),
                wall_s: at.iter().map(|d| d.seconds).sum(),
            })
        })
        .collect()
}

/// Runs the empty supersteps and a latin-square exchange twice with one seed: whether
/// the schedules (every hand-over) and every figure agree.
fn same_seed_twice(cluster: &Cluster, params: &Params) -> Result<bool, String> {
    let p = params.twice;
    let run = || -> Result<(u64, u64, Exchange), String> {
        let (_, _, a) = empty(cluster, p, params.steps)?;
        let (x, b) = total_exchange(cluster, p, params.size, Schedule::Latin, true, 0)?;
        Ok((a.trace, b.trace, x))
    };
    Ok(run()? == run()?)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn tables(
    sec: &mut Section,
    params: &Params,
    cluster: &Cluster,
    tree: &Cluster,
    points: &[Point],
    tree_rows: &[&Exchange],
) {
    let base = points.first().map(|p| p.empty_ns);
    let rows = points
        .iter()
        .map(|pt| {
            let (g, l, top) =
                pt.h.as_ref()
                    .map_or(("-".into(), "-".into(), "-".into()), |h| {
                        let top = h.ns.last().map_or("-".into(), |&t| us(t));
                        (format!("{:.0}", h.g), us(h.l), top)
                    });
            vec![
                pt.p.to_string(),
                us(pt.empty_ns),
                base.map_or("-".into(), |b| format!("{:.2}x", pt.empty_ns / b)),
                top,
                g,
                l,
                pt.sorted_keys
                    .map_or("-".into(), |n| format!("{n} keys sorted")),
                format!("{:.1}", pt.wall_s),
            ]
        })
        .collect();
    sec.tables.push(Table {
        title: "l and g against p (virtual time)".into(),
        header: [
            "p",
            "empty superstep (us)",
            "vs first p",
            "largest h-relation (us)",
            "g (ns per word)",
            "l (us)",
            "sample sort (BSMP)",
            "host time (s)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: format!(
            "g and l: bspbench's least squares over h-relations of single-word puts, h = \
             {:?}. Below h = p each word travels as a message of its own (one destination \
             at a time), so t(h) measures a message's cost and need not be linear: the \
             fit's l can then come out negative. Every word, sorted key and exchanged byte \
             was checked.",
            params.hs
        ),
    });
    let xs: Vec<&Exchange> = points.iter().flat_map(|p| &p.exchanges).collect();
    sec.tables.push(exchange_table(
        &format!(
            "Total exchange of {} per pair: latin square, pid order, random; paced or not",
            size_label(params.size)
        ),
        &xs,
        cluster,
    ));
    sec.tables.push(exchange_table(
        &format!("The same on a two-tier fat tree, p = {}", params.fat_tree.0),
        tree_rows,
        tree,
    ));
}

fn exchange_table(title: &str, xs: &[&Exchange], cluster: &Cluster) -> Table {
    let rows = xs
        .iter()
        .map(|x| {
            let k = &x.packets;
            vec![
                x.p.to_string(),
                x.schedule.clone(),
                if x.paced { "yes" } else { "no" }.into(),
                format!("{:.2}", x.ns / 1e6),
                format!("{:.2}", x.bound_ns / 1e6),
                format!("{:.2}x", x.ratio()),
                k.data.to_string(),
                k.retransmits.to_string(),
                k.explicit_acks.to_string(),
                k.implicit_acks.to_string(),
                k.prods.to_string(),
                k.switch_drops.to_string(),
                k.receiver_drops.to_string(),
            ]
        })
        .collect();
    Table {
        title: title.into(),
        header: [
            "p",
            "schedule",
            "paced",
            "time (ms)",
            "bound (ms)",
            "ratio",
            "data packets",
            "retransmitted",
            "explicit acks",
            "implicit acks",
            "prods",
            "switch drops",
            "receiver drops",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: format!(
            "Time: from the first process leaving the barrier before the superstep to the \
             last leaving it. Bound: (p - 1) times the data per pair in full frames over \
             one link. Pacing: {:.2} GB/s per process. {}",
            cluster.pace() as f64 / 1e9,
            cluster.describe()
        ),
    }
}

fn targets(sec: &mut Section, points: &[Point], params: &Params, twice: Option<bool>) {
    if let (Some(first), Some(big)) = (points.first(), points.iter().find(|p| p.p == 1024)) {
        let r = big.empty_ns / first.empty_ns;
        sec.targets.push(Target {
            what: format!("empty superstep, p = 1024 against p = {}", first.p),
            measured: format!(
                "{r:.2}x ({} us against {} us)",
                us(big.empty_ns),
                us(first.empty_ns)
            ),
            target: "at most 10x (log p, not p)".into(),
            met: Some(r <= 10.0),
            ..Default::default()
        });
    }
    let best = points
        .iter()
        .flat_map(|p| &p.exchanges)
        .filter(|x| x.schedule == "latin" && x.paced)
        .max_by_key(|x| x.p);
    if let Some(x) = best {
        let drops = x.packets.switch_drops + x.packets.receiver_drops;
        let ok = x.ratio() <= 1.5 && drops * 1000 <= x.packets.data;
        sec.targets.push(Target {
            what: format!(
                "total exchange of {}, p = {}, latin square and pacing",
                size_label(params.size),
                x.p
            ),
            measured: format!("{:.2}x the links' bound, {drops} drops", x.ratio()),
            target: "at most 1.5x, drops under 0.1% of data packets (p = 1024 in the full run)"
                .into(),
            met: Some(ok),
            ..Default::default()
        });
    }
    if let Some(same) = twice {
        sec.targets.push(Target {
            what: format!("two runs of one seed, p = {}", params.twice),
            measured: if same { "identical" } else { "different" }.into(),
            target: "identical schedules and figures".into(),
            met: Some(same),
            ..Default::default()
        });
    }
}

fn charts(sec: &mut Section, points: &[Point]) {
    let series = |label: &str, f: &dyn Fn(&Point) -> Option<f64>| Series {
        label: label.into(),
        group: Group::Bulkwire,
        points: points
            .iter()
            .filter_map(|pt| f(pt).map(|v| Stat::single(pt.p as usize, 1, v)))
            .collect(),
    };
    sec.charts.push(Chart {
        file: "scale_l.svg".into(),
        title: "l against p (simulated 25 Gb/s cluster)".into(),
        x: Axis::log("processes", Scale::Count),
        y: Axis::log("time", Scale::Seconds),
        series: vec![
            series("empty superstep", &|pt| Some(pt.empty_ns / 1e9)),
            series("l (bspbench fit)", &|pt| {
                pt.h.as_ref().map(|h| h.l / 1e9).filter(|&l| l > 0.0)
            }),
        ],
    });
    sec.charts.push(Chart {
        file: "scale_g.svg".into(),
        title: "g against p (simulated 25 Gb/s cluster)".into(),
        x: Axis::log("processes", Scale::Count),
        y: Axis::log("time per word", Scale::Seconds),
        series: vec![series("g (bspbench fit)", &|pt| {
            pt.h.as_ref().map(|h| h.g / 1e9).filter(|&g| g > 0.0)
        })],
    });
}
