//! `bwbench cluster`: the experiments between two hosts over a real network path: two
//! network namespaces joined by a veth pair at Ethernet MTU (1500, then 9000), one rank in
//! each, started as a user would (the multi-host launcher and its host agent through the
//! remote shell `netns-rsh`), beside raw UDP and TCP between the same namespaces and Open
//! MPI over TCP (`mpirun` through the same remote shell). Latency, streaming bandwidth,
//! the BSP parameters and the empty superstep, and the collectives; then the targets in
//! alternating rounds at MTU 1500.
//!
//! Every job of the plan makes its own test bed at its MTU and removes it when it ends
//! (dropping [`Testbed`] kills what still runs in the namespaces), so a failed or hung
//! job leaves nothing behind and the next one starts on a fresh path. Needs root, `ip
//! netns`, and `netns-rsh` beside the bwbench binary; the plan says which is missing.
//! Not part of `bwbench all` unless `--hosts` is given.

use std::any::Any;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bulkwire_launch::HostSlots;
use bulkwire_launch::testing::Testbed;

use super::Experiment;
use super::latency::rounds_of;
use crate::bspk::{self, BspResult, BspSpec};
use crate::coll::{self, CollResult, CollSpec};
use crate::jobs::Across;
use crate::mpi::{MpiAcross, MpiJob, MpiNet, MpiPoint};
use crate::pair::{self, Measure, PairResult, PairSpec, window_for};
use crate::plan::{Done, Job, Outcome, OwnJob, Plan};
use crate::section::{
    SPREAD_NOTE, Section, Table, Target, gbs, in_gbs, in_us, ratio, short_mpi, size_label,
    spread_cell, us,
};
use crate::stack::{CollAlgo, Faults, Protocol, RawLink, Stack, Transport};
use crate::stats::{Spread, Summary};
use crate::suite::Suite;

pub struct Cluster;

/// The experiment's name: its subcommand, and its section's in `results.json`.
pub const NAME: &str = "cluster";

/// The MTUs measured: Ethernet's, then jumbo frames.
pub const MTUS: [u32; 2] = [1500, 9000];

/// What the report's network line says when the cluster section ran.
pub const NETWORK: &str = "the cluster section: between two network namespaces over a veth \
                           pair at MTU 1500 and 9000, one rank in each (its first table)";

const TIMEOUT: Duration = Duration::from_secs(300);
/// Open MPI's set-up across namespaces hangs now and then: a try is given this long.
const MPI_TIMEOUT: Duration = Duration::from_secs(120);
/// Seconds a job of bulkwire's spends here past its measurement: the test bed, the
/// launcher, and the second host's agent started through the remote shell.
const BED_START: f64 = 0.1;
/// How much longer a measurement takes over the veth pair, on half the CPUs each, than
/// the loopback figures of [`Job::estimate`] say (a full run here, loaded).
const PATH_COST: f64 = 3.0;
/// The same for `mpirun` across the namespaces (its daemon through the remote shell).
const MPI_START: f64 = 0.35;
/// The fault seed of the lossy runs.
const SEED: u64 = 11;

/// What a run of the plan measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tag {
    /// The path: addresses, offloads, CPUs.
    Path,
    Pair {
        mtu: u32,
        stack: Stack,
        kind: Kind,
        lossy: bool,
    },
    /// Open MPI over TCP: `kind` is the harness's.
    Mpi {
        mtu: u32,
        kind: &'static str,
    },
    /// Open MPI's barrier beside the BSP figures (the collectives' barrier is a `Mpi` run).
    Barrier {
        mtu: u32,
    },
    Bsp {
        mtu: u32,
    },
    Coll {
        mtu: u32,
    },
    Target(Goal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Latency,
    Bandwidth,
}

/// The targets, checked at MTU 1500 in alternating rounds against their baselines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Latency,
    Streaming,
    Superstep,
    Loss,
}

impl Goal {
    const ALL: [Goal; 4] = [Goal::Latency, Goal::Streaming, Goal::Superstep, Goal::Loss];

    fn what(self) -> &'static str {
        match self {
            Goal::Latency => "holefill 8 B half round trip vs Open MPI over TCP, MTU 1500",
            Goal::Streaming => "holefill 1 MiB streaming vs Open MPI over TCP, MTU 1500",
            Goal::Superstep => "empty superstep at p = 2 vs MPI_Barrier over TCP, MTU 1500",
            Goal::Loss => {
                "holefill 1 MiB streaming with 1 % loss vs its lossless bandwidth, MTU 1500"
            }
        }
    }

    fn needs_mpi(self) -> bool {
        self != Goal::Loss
    }

    fn judge(self, what: &str, r: &crate::rounds::Rounds) -> Target {
        match self {
            Goal::Latency | Goal::Superstep => {
                Target::of_rounds(what, r, "<= 0.70x", in_us, |q| q <= 0.70)
            }
            Goal::Streaming => Target::of_rounds(what, r, ">= 1.00x", in_gbs, |q| q >= 1.0),
            Goal::Loss => Target::of_rounds(what, r, ">= 0.80x", in_gbs, |q| q >= 0.8),
        }
    }
}

/// What the path is, as one job found it.
#[derive(Clone, Debug)]
pub struct PathInfo {
    pub addrs: [String; 2],
    /// The veth's offloads as `ethtool -k` reports them (or why they were not read).
    pub offloads: String,
    pub cpus: [Vec<usize>; 2],
}

/// How many iterations and sizes each kind of run takes at a suite's level.
struct Params {
    lat_sizes: Vec<usize>,
    lat: (usize, usize),
    bw_sizes: Vec<usize>,
    bw: (usize, usize),
    bsp: BspSpec,
    /// Warm-up and iterations of MPI_Barrier and of the collectives (half of them).
    coll: (usize, usize),
    target_lat: (usize, usize),
    /// Warm-up and repetitions of the 1 MiB stream of the targets.
    target_bw: (usize, usize),
}

fn params(s: &Suite) -> Params {
    Params {
        lat_sizes: s.pick(vec![8], vec![8, 1024, 65536], vec![8, 1024, 65536]),
        lat: s.pick((20, 200), (500, 5000), (2000, 20000)),
        bw_sizes: s.pick(
            vec![65536],
            vec![65536, 1 << 20],
            vec![4096, 65536, 1 << 20],
        ),
        bw: s.pick((1, 2), (2, 10), (3, 30)),
        bsp: BspSpec {
            hmax: s.pick(16, 64, 256),
            hstep: s.pick(8, 16, 32),
            iters: s.pick(10, 100, 200),
            batches: s.pick(1, 3, 5),
            warmup: s.pick(5, 50, 100),
            // Not measured here.
            exchange: 0,
            by_get: false,
        },
        coll: s.pick((10, 50), (200, 2000), (500, 5000)),
        target_lat: s.pick((20, 200), (1000, 10_000), (2000, 20_000)),
        target_bw: s.pick((1, 2), (2, 10), (3, 20)),
    }
}

/// The stacks of the latency and bandwidth tables, baselines first.
fn stacks() -> Vec<Stack> {
    let mut v = vec![
        Stack::Raw { link: RawLink::Udp },
        Stack::Raw { link: RawLink::Tcp },
    ];
    v.extend(
        Protocol::DATAGRAM
            .into_iter()
            .map(|p| Stack::Proto(Transport::udp(p))),
    );
    v.push(Stack::Proto(Transport::kernel_tcp()));
    v
}

fn holefill() -> Transport {
    Transport::udp(Protocol::Holefill)
}

impl Experiment for Cluster {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "Latency, bandwidth, BSP and collectives between two network namespaces over veth at \
         MTU 1500 and 9000, beside Open MPI over TCP and raw UDP/TCP (needs root; in `all` \
         with --hosts)"
    }

    fn in_all(&self) -> bool {
        false
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        if let Err(why) = prerequisites(s) {
            let mut plan = Plan::default();
            plan.skip(format!("everything: {why}"));
            return plan;
        }
        plan_runs(s, open_mpi(s))
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            NAME,
            "Across hosts: two network namespaces over veth, beside Open MPI over TCP",
        );
        if let Some(info) = find(done, Tag::Path).and_then(|d| d.own::<PathInfo>()) {
            sec.tables.push(path_table(info));
        }
        for mtu in MTUS {
            let mut sp = Table::new(
                format!("Single operations at MTU {mtu}: best / median / p90"),
                &["figure", "stack", "best / median / p90"],
                format!(
                    "{SPREAD_NOTE} The operations of this MTU's tables above; streaming: \
                     every repetition, complete or not."
                ),
            );
            pair_tables(&mut sec, &p, done, mtu, &mut sp);
            bsp_table(&mut sec, done, mtu, &mut sp);
            coll_table(&mut sec, done, mtu, &mut sp);
            sec.tables.push(sp);
        }
        for d in done {
            if let Tag::Target(goal) = d.tag {
                let r = rounds_of(d, own_figure);
                sec.check(d.label.clone(), r, |w, r| goal.judge(w, r));
            }
        }
        sec.tables.retain(|t| !t.rows.is_empty());
        sec
    }
}

/// Why the test bed cannot be made here, if it cannot.
/// The MPI that runs across the test bed's hosts, by its short name: Open MPI's `mpirun`
/// through the remote shell, or why there is none.
pub(crate) fn open_mpi(s: &Suite) -> Result<String, String> {
    s.mpi().map_err(String::from).and_then(|m| {
        if m.version.contains("Open MPI") {
            Ok(short_mpi(&m.version))
        } else {
            Err(format!(
                "only Open MPI's mpirun is driven across hosts (found {})",
                m.version
            ))
        }
    })
}

pub(crate) fn prerequisites(s: &Suite) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the test bed of network namespaces needs root".into());
    }
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| format!("the test bed needs `ip netns` (ip: {e})"))?;
    if !out.status.success() {
        return Err(format!(
            "the test bed needs `ip netns`, which failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let rsh = rsh_of(s);
    if !rsh.is_file() {
        return Err(format!(
            "{} is missing (cargo build -p bulkwire-tools builds it beside bwbench)",
            rsh.display()
        ));
    }
    Ok(())
}

/// The remote shell that enters a test bed's namespace, beside the bwbench binary.
pub(crate) fn rsh_of(s: &Suite) -> PathBuf {
    s.exe().with_file_name("netns-rsh")
}

/// Every run, given MPI's short name (or why Open MPI is left out).
fn plan_runs(s: &Suite, mpi: Result<String, String>) -> Plan<Tag> {
    let p = params(s);
    let mut plan = Plan::default();
    plan.add("the path", Tag::Path, path_job());
    let mpi = match mpi {
        Ok(name) => Some(name),
        Err(e) => {
            plan.skip(format!("Open MPI over TCP: {e}"));
            None
        }
    };
    for mtu in MTUS {
        plan_pairs(&mut plan, &p, mtu, mpi.as_deref());
        plan_bsp_coll(&mut plan, &p, mtu, mpi.as_deref());
    }
    for goal in Goal::ALL {
        if goal.needs_mpi() && mpi.is_none() {
            plan.skip(format!("{}: no Open MPI to compare with", goal.what()));
            continue;
        }
        let (base, cand) = target_jobs(goal, &p);
        plan.alternate(
            goal.what(),
            Tag::Target(goal),
            s.target_rounds(),
            vec![base],
            vec![cand],
        );
    }
    plan
}

fn plan_pairs(plan: &mut Plan<Tag>, p: &Params, mtu: u32, mpi: Option<&str>) {
    let latency = Measure::Latency {
        sizes: p.lat_sizes.clone(),
        warmup: p.lat.0,
        iters: p.lat.1,
    };
    let bandwidth = Measure::Bandwidth {
        sizes: p.bw_sizes.clone(),
        warmup: p.bw.0,
        reps: p.bw.1,
    };
    if let Some(name) = mpi {
        let (w, n) = p.lat;
        let job = mpi_job(mtu, "latency", w, n, 0.0, &p.lat_sizes);
        let tag = Tag::Mpi {
            mtu,
            kind: "latency",
        };
        plan.add(format!("MTU {mtu}: {name} over TCP, latency"), tag, job);
        let (w, n) = p.bw;
        let job = mpi_job(mtu, "bandwidth", w, n, 64.0, &p.bw_sizes);
        let tag = Tag::Mpi {
            mtu,
            kind: "bandwidth",
        };
        plan.add(format!("MTU {mtu}: {name} over TCP, bandwidth"), tag, job);
    }
    for stack in stacks() {
        for (kind, measure) in [(Kind::Latency, &latency), (Kind::Bandwidth, &bandwidth)] {
            let spec = PairSpec {
                stack,
                measure: measure.clone(),
                faults: Faults::none(),
            };
            let what = match kind {
                Kind::Latency => "latency",
                Kind::Bandwidth => "bandwidth",
            };
            let tag = Tag::Pair {
                mtu,
                stack,
                kind,
                lossy: false,
            };
            let label = format!("MTU {mtu}: {} {what}", stack.label());
            plan.add(label, tag, pair_job(mtu, spec));
        }
    }
    // holefill under 1 % loss, with how it found and filled the holes.
    let stack = Stack::Proto(holefill());
    let spec = PairSpec {
        stack,
        measure: bandwidth,
        faults: Faults::loss(0.01, SEED),
    };
    let tag = Tag::Pair {
        mtu,
        stack,
        kind: Kind::Bandwidth,
        lossy: true,
    };
    let label = format!("MTU {mtu}: holefill/udp bandwidth, 1 % loss");
    plan.add(label, tag, pair_job(mtu, spec));
}

/// The collectives of the table, by the MPI harness's names.
const KINDS: [&str; 4] = ["barrier", "bcast", "allreduce", "alltoall"];
const COLL_SIZES: [usize; 2] = [8, 65536];

fn coll_spec(p: &Params) -> CollSpec {
    CollSpec {
        kinds: KINDS.iter().map(|k| k.to_string()).collect(),
        sizes: COLL_SIZES.to_vec(),
        warmup: p.coll.0,
        iters: p.coll.1 / 2,
        stack: Stack::Coll {
            over: holefill(),
            algo: CollAlgo::P2p,
        },
    }
}

fn plan_bsp_coll(plan: &mut Plan<Tag>, p: &Params, mtu: u32, mpi: Option<&str>) {
    let (w, n) = p.coll;
    if let Some(name) = mpi {
        let job = mpi_job(mtu, "barrier", w, n, 0.0, &[0]);
        let label = format!("MTU {mtu}: {name} over TCP, barrier beside BSP");
        plan.add(label, Tag::Barrier { mtu }, job);
    }
    let label = format!("MTU {mtu}: BSP over holefill/udp");
    plan.add(label, Tag::Bsp { mtu }, bsp_job(mtu, p.bsp.clone()));
    if let Some(name) = mpi {
        for kind in KINDS {
            let job = mpi_job(mtu, kind, w, n / 2, 0.0, &COLL_SIZES);
            let label = format!("MTU {mtu}: {name} over TCP, {kind}");
            plan.add(label, Tag::Mpi { mtu, kind }, job);
        }
    }
    let label = format!("MTU {mtu}: collectives over holefill/udp");
    plan.add(label, Tag::Coll { mtu }, coll_job(mtu, coll_spec(p)));
}

/// The baseline's and the candidate's job of `goal`, each giving one figure.
fn target_jobs(goal: Goal, p: &Params) -> (Job, Job) {
    let mtu = MTUS[0];
    let (w, n) = p.target_lat;
    let lat = PairSpec {
        stack: Stack::Proto(holefill()),
        measure: Measure::Latency {
            sizes: vec![8],
            warmup: w,
            iters: n,
        },
        faults: Faults::none(),
    };
    let (bw, reps) = p.target_bw;
    let stream = |faults: Faults| PairSpec {
        stack: Stack::Proto(holefill()),
        measure: Measure::Bandwidth {
            sizes: vec![1 << 20],
            warmup: bw,
            reps,
        },
        faults,
    };
    let mpi = |kind, w, n, extra, size| {
        let sizes = [size];
        figure(
            mpi_job(mtu, kind, w, n, extra, &sizes),
            |v: &Vec<MpiPoint>| v.first().map(|p| p.median),
        )
    };
    let best = |r: &PairResult| r.points.first().and_then(|p| p.best_complete_rate());
    match goal {
        Goal::Latency => (
            mpi("latency", w, n, 0.0, 8),
            figure(pair_job(mtu, lat), |r: &PairResult| {
                r.points.first().map(|p| Summary::of(&p.samples).median)
            }),
        ),
        Goal::Streaming => (
            mpi("bandwidth", bw, reps, 64.0, 1 << 20),
            figure(pair_job(mtu, stream(Faults::none())), best),
        ),
        Goal::Superstep => {
            let (w, n) = p.coll;
            (
                mpi("barrier", w, n, 0.0, 0),
                figure(bsp_job(mtu, p.bsp.clone()), |r: &BspResult| {
                    Some(r.empty_us * 1e-6)
                }),
            )
        }
        Goal::Loss => (
            figure(pair_job(mtu, stream(Faults::none())), best),
            figure(pair_job(mtu, stream(Faults::loss(0.01, SEED))), best),
        ),
    }
}

/// `job` (an own job returning `T`) turned into one returning the figure `f` takes from it.
fn figure<T: Any>(job: Job, f: fn(&T) -> Option<f64>) -> Job {
    let Job::Own(inner) = job else {
        return job;
    };
    Job::Own(OwnJob::new(inner.estimate, move |s| {
        let out = inner.run(s)?;
        let v = out
            .0
            .downcast_ref::<T>()
            .ok_or("a job returned a result of another kind")?;
        Ok(f(v))
    }))
}

/// A target job's figure.
fn own_figure(o: &Outcome) -> Option<f64> {
    match o {
        Outcome::Own(o) => o.0.downcast_ref::<Option<f64>>().copied().flatten(),
        _ => None,
    }
}

/// A job on a test bed of its own at `mtu`, which it removes when `f` returns.
fn on_bed<T: Any + Send + Sync>(
    mtu: u32,
    estimate: f64,
    f: impl Fn(&Bed, &Suite) -> Result<T, String> + Send + Sync + 'static,
) -> Job {
    Job::Own(OwnJob::new(estimate, move |s| {
        let bed = Bed::new(s, mtu)?;
        f(&bed, s)
    }))
}

fn path_job() -> Job {
    on_bed(MTUS[0], 0.1, |bed, _| Ok(bed.path()))
}

fn pair_job(mtu: u32, spec: PairSpec) -> Job {
    let estimate = Job::Pair(spec.clone()).estimate() * PATH_COST + BED_START;
    on_bed(mtu, estimate, move |bed, s| {
        pair::run_on(s.exe(), &spec, TIMEOUT, Some(&bed.across()))
    })
}

fn bsp_job(mtu: u32, spec: BspSpec) -> Job {
    let job = Job::Bsp {
        p: 2,
        over: holefill(),
        spec: spec.clone(),
    };
    on_bed(
        mtu,
        job.estimate() * PATH_COST + BED_START,
        move |bed, s| bspk::run_on(s.exe(), 2, &spec, holefill(), TIMEOUT, Some(&bed.across())),
    )
}

fn coll_job(mtu: u32, spec: CollSpec) -> Job {
    let estimate = Job::Coll {
        p: 2,
        spec: spec.clone(),
    }
    .estimate()
        * PATH_COST
        + BED_START;
    on_bed(mtu, estimate, move |bed, s| {
        coll::run_on(s.exe(), 2, &spec, TIMEOUT, Some(&bed.across()))
    })
}

/// Open MPI's harness across the hosts: `kind` with `warmup`, `iters` and `extra` at
/// `sizes`, one rank on each host.
fn mpi_job(
    mtu: u32,
    kind: &'static str,
    warmup: usize,
    iters: usize,
    extra: f64,
    sizes: &[usize],
) -> Job {
    let job = MpiJob {
        kind: kind.into(),
        np: 2,
        net: MpiNet::Tcp,
        warmup,
        iters,
        extra,
        sizes: sizes.to_vec(),
    };
    let estimate = Job::Mpi(job.clone()).estimate() * PATH_COST + MPI_START;
    on_bed(mtu, estimate, move |bed, s| {
        let m = s.mpi().map_err(|e| format!("MPI: {e}"))?;
        let a = bed.mpi_across();
        let run = || {
            let (w, n, x, sz) = (job.warmup, job.iters, job.extra, &job.sizes);
            m.run_across(kind, 2, w, n, x, sz, MPI_TIMEOUT, &a)
        };
        // Open MPI's TCP set-up between namespaces fails now and then: one more try.
        run().or_else(|_| run())
    })
}

/// A test bed and how jobs and MPI reach it. Each host runs on its own half of the CPUs,
/// as separate machines would: two busy-polling ranks that shared a core would measure
/// the scheduler, not the network.
struct Bed {
    tb: Testbed,
    rsh: PathBuf,
    cpus: [Vec<usize>; 2],
}

impl Bed {
    fn new(s: &Suite, mtu: u32) -> Result<Bed, String> {
        Ok(Bed {
            tb: Testbed::new(mtu).map_err(|e| format!("no test bed ({e})"))?,
            rsh: rsh_of(s),
            cpus: halves(),
        })
    }

    /// One rank on each host, the second host's through its agent.
    fn across(&self) -> Across {
        Across {
            netns: self.tb.names[0].clone(),
            hosts: self
                .tb
                .addrs
                .iter()
                .map(|a| HostSlots {
                    name: a.clone(),
                    slots: 1,
                })
                .collect(),
            rsh: vec![
                "taskset".into(),
                "-c".into(),
                list(&self.cpus[1]).into(),
                self.rsh.clone().into_os_string(),
            ],
            cpus: Some(self.cpus[0].clone()),
        }
    }

    fn mpi_across(&self) -> MpiAcross {
        let subnet = self.tb.addrs[0]
            .rsplit_once('.')
            .map_or_else(String::new, |(net, _)| format!("{net}.0/24"));
        MpiAcross {
            netns: self.tb.names[0].clone(),
            hosts: self.tb.addrs.iter().map(|a| format!("{a}:1")).collect(),
            rsh: self.rsh.clone(),
            subnet,
            cpus: [list(&self.cpus[0]), list(&self.cpus[1])],
        }
    }

    fn path(&self) -> PathInfo {
        PathInfo {
            addrs: self.tb.addrs.clone(),
            offloads: self.offloads(),
            cpus: self.cpus.clone(),
        }
    }

    /// The offloads of the first host's veth that decide how datagrams and segments cross.
    fn offloads(&self) -> String {
        let dev = format!("{}v", self.tb.names[0]);
        let out = self.tb.command(0, "ethtool").args(["-k", &dev]).output();
        let text = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => return "not read (ethtool -k failed or is not installed)".into(),
        };
        [
            "tx-udp-segmentation",
            "generic-segmentation-offload",
            "generic-receive-offload",
            "rx-udp-gro-forwarding",
            "tcp-segmentation-offload",
            "tx-checksumming",
        ]
        .iter()
        .filter_map(|k| {
            text.lines()
                .find(|l| l.trim_start().starts_with(&format!("{k}:")))
                .map(|l| l.trim().to_string())
        })
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// This machine's CPUs split in two halves (both all of them on one CPU).
fn halves() -> [Vec<usize>; 2] {
    let all = bulkwire_launch::bind::CpuSet::current()
        .map(|c| c.cpus())
        .unwrap_or_default();
    if all.len() < 2 {
        return [all.clone(), all];
    }
    let (a, b) = all.split_at(all.len() / 2);
    [a.to_vec(), b.to_vec()]
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn find<T: PartialEq>(done: &[Done<T>], tag: T) -> Option<&Done<T>> {
    done.iter().find(|d| d.tag == tag)
}

/// What the path is: veth, the MTUs, the offloads the kernel reports, the CPUs.
fn path_table(p: &PathInfo) -> Table {
    let mtus: Vec<String> = MTUS.iter().map(|m| m.to_string()).collect();
    let mut t = Table::new("The path", &["what", "value"], "");
    t.rows = vec![
        vec![
            "link".into(),
            format!(
                "veth pair between two network namespaces ({} and {}), one rank in each",
                p.addrs[0], p.addrs[1]
            ),
        ],
        vec!["MTU".into(), mtus.join(", then ")],
        vec!["offloads (ethtool -k)".into(), p.offloads.clone()],
        vec![
            "CPUs".into(),
            format!(
                "host 1 runs on CPUs {}, host 2 on {} (as separate machines)",
                list(&p.cpus[0]),
                list(&p.cpus[1])
            ),
        ],
        vec![
            "launch".into(),
            "bulkwire's multi-host launcher, the other host's ranks started by its agent \
             through netns-rsh; Open MPI by mpirun through the same netns-rsh; each job \
             on a test bed of its own"
                .into(),
        ],
    ];
    t
}

/// Open MPI's medians of `kind` at `mtu`, if measured.
fn mpi_medians(done: &[Done<Tag>], mtu: u32, kind: &'static str) -> Option<Vec<f64>> {
    medians_of(done, Tag::Mpi { mtu, kind })
}

/// The medians of the MPI run tagged `tag`, if it worked.
fn medians_of(done: &[Done<Tag>], tag: Tag) -> Option<Vec<f64>> {
    let v = find(done, tag)?.own::<Vec<MpiPoint>>()?;
    Some(v.iter().map(|p| p.median).collect())
}

fn row(label: &str, xs: &[f64], base: Option<&[f64]>, unit: fn(f64) -> String) -> Vec<String> {
    let mut r = vec![label.to_string()];
    for (i, &x) in xs.iter().enumerate() {
        let b = base.and_then(|b| b.get(i)).copied().unwrap_or(f64::NAN);
        r.push(format!("{} ({})", unit(x), ratio(x, b)));
    }
    r
}

/// Latency and bandwidth per stack at `mtu`, and Open MPI's.
fn pair_tables(sec: &mut Section, p: &Params, done: &[Done<Tag>], mtu: u32, sp: &mut Table) {
    let mpi_lat = mpi_medians(done, mtu, "latency");
    let mpi_bw = mpi_medians(done, mtu, "bandwidth");
    let mut lat = Table::by_size(
        format!("Median half round trip at MTU {mtu} (us), and ratio to Open MPI over TCP"),
        "stack",
        &p.lat_sizes,
    );
    let mut bw = Table::by_size(
        format!(
            "Streaming bandwidth at MTU {mtu} (GB/s, best repetition), and ratio to Open MPI \
             over TCP"
        ),
        "stack",
        &p.bw_sizes,
    );
    let mut counters = String::new();
    for d in done {
        let Tag::Pair {
            mtu: m,
            stack,
            kind,
            lossy,
        } = d.tag
        else {
            continue;
        };
        let Some(r) = d.own::<PairResult>().filter(|_| m == mtu) else {
            continue;
        };
        match kind {
            Kind::Latency => {
                let med: Vec<f64> = r
                    .points
                    .iter()
                    .map(|p| Summary::of(&p.samples).median)
                    .collect();
                lat.rows
                    .push(row(&stack.label(), &med, mpi_lat.as_deref(), us));
                for x in &r.points {
                    let what = format!("half round trip {} (us)", size_label(x.size));
                    spread_row(sp, &what, &stack.label(), Spread::of(&x.samples), us);
                }
            }
            Kind::Bandwidth => {
                let best: Vec<f64> = r
                    .points
                    .iter()
                    .map(|p| p.best_complete_rate().unwrap_or(f64::NAN))
                    .collect();
                let label = if lossy {
                    counters = recovery(r);
                    format!("{}, 1 % loss", stack.label())
                } else {
                    stack.label()
                };
                bw.rows.push(row(&label, &best, mpi_bw.as_deref(), gbs));
                for x in &r.points {
                    let what = format!("streaming {} (GB/s)", size_label(x.size));
                    spread_row(sp, &what, &label, Spread::of_rates(&x.samples), gbs);
                }
            }
        }
        sec.results.push(r.clone());
    }
    if let Some(m) = &mpi_lat {
        lat.rows
            .push(row("Open MPI over TCP", m, mpi_lat.as_deref(), us));
    }
    if let Some(m) = &mpi_bw {
        bw.rows
            .push(row("Open MPI over TCP", m, mpi_bw.as_deref(), gbs));
    }
    for (kind, what, unit) in [
        ("latency", "half round trip", us as fn(f64) -> String),
        ("bandwidth", "streaming", gbs),
    ] {
        let v = find(done, Tag::Mpi { mtu, kind }).and_then(|d| d.own::<Vec<MpiPoint>>());
        for x in v.into_iter().flatten() {
            let unit_name = if kind == "latency" { "us" } else { "GB/s" };
            let what = format!("{what} {} ({unit_name})", size_label(x.size));
            spread_row(sp, &what, "Open MPI over TCP", x.steps, unit);
        }
    }
    for d in done {
        let m = match d.tag {
            Tag::Mpi { mtu: m, .. } | Tag::Barrier { mtu: m } => m,
            _ => continue,
        };
        if let Some(v) = d.own::<Vec<MpiPoint>>()
            && m == mtu
        {
            sec.mpi.extend_from_slice(v);
        }
    }
    lat.note = format!(
        "{} timed exchanges after {} warm-up, one rank in each namespace. Raw UDP and TCP by \
         bulkwire's harness with the same wait policy; Open MPI by the same experiment in C \
         (ob1, tcp BTL).",
        p.lat.1, p.lat.0
    );
    bw.note = format!(
        "Windows of {} messages (fewer above 1 MiB) then an acknowledgement, {} repetitions; \
         the best complete repetition. Open MPI: the median repetition.{counters}",
        window_for(65536),
        p.bw.1
    );
    sec.tables.push(lat);
    sec.tables.push(bw);
}

/// How holefill found and filled the holes of a lossy run.
fn recovery(r: &PairResult) -> String {
    let Some(c) = &r.counters else {
        return String::new();
    };
    format!(
        " With 1 % loss, rank 0 toward rank 1 over the run: {} data packets, {} resent, {} \
         retransmission timeouts, {} prods and {} explicit acks received, smoothed round \
         trip {:.1} us.",
        c.data_sent,
        c.retransmits,
        c.timeouts,
        c.prods_received,
        c.acks_received,
        c.srtt_ns as f64 / 1e3
    )
}

/// The BSP parameters at p = 2 beside MPI_Barrier.
fn bsp_table(sec: &mut Section, done: &[Done<Tag>], mtu: u32, sp: &mut Table) {
    let mut t = Table::new(
        format!("BSP at p = 2, MTU {mtu} (us)"),
        &[
            "stack",
            "g per 8-byte put",
            "l",
            "empty superstep",
            "MPI_Barrier",
        ],
        "bspbench's method (h-relations of 8-byte puts fitted to l + g h); the empty \
         superstep is bsp_sync with nothing to send. MPI_Barrier: Open MPI over TCP.",
    );
    let barrier = medians_of(done, Tag::Barrier { mtu })
        .and_then(|b| b.first().copied())
        .unwrap_or(f64::NAN);
    if let Some(r) = find(done, Tag::Bsp { mtu }).and_then(|d| d.own::<BspResult>()) {
        t.rows.push(vec![
            "bulkwire BSP (holefill/udp)".into(),
            format!("{:.3}", r.g_us),
            format!("{:.2}", r.l_us),
            format!("{:.2} ({})", r.empty_us, ratio(r.empty_us * 1e-6, barrier)),
            us(barrier),
        ]);
        let stack = "bulkwire BSP (holefill/udp)";
        spread_row(sp, "empty superstep (us)", stack, r.empty_steps, us);
        spread_row(sp, "total exchange (us)", stack, r.exchange_steps, us);
        sec.bsp.push((format!("MTU {mtu}"), r.clone()));
    }
    let barrier = find(done, Tag::Barrier { mtu }).and_then(|d| d.own::<Vec<MpiPoint>>());
    if let Some(x) = barrier.and_then(|v| v.first()) {
        spread_row(sp, "MPI_Barrier (us)", "Open MPI over TCP", x.steps, us);
    }
    sec.tables.push(t);
}

/// The collectives at p = 2 beside Open MPI's.
fn coll_table(sec: &mut Section, done: &[Done<Tag>], mtu: u32, sp: &mut Table) {
    let mut t = Table::by_size(
        format!(
            "Collectives at p = 2, MTU {mtu}: median latency (us), and ratio to Open MPI over TCP"
        ),
        "collective",
        &COLL_SIZES,
    );
    t.note = "OSU's method (barrier, time one call, the slowest process's time); bulkwire's \
              point-to-point algorithms over holefill/udp; alltoall exchanges a block of the \
              size per process pair."
        .into();
    if let Some(r) = find(done, Tag::Coll { mtu }).and_then(|d| d.own::<CollResult>()) {
        for k in KINDS {
            let med: Vec<f64> = COLL_SIZES
                .iter()
                .map(|&n| {
                    r.points
                        .iter()
                        .find(|p| p.kind == k && p.size == n)
                        .map_or(f64::NAN, |p| p.summary().median)
                })
                .collect();
            let base = mpi_medians(done, mtu, k);
            t.rows.push(row(k, &med, base.as_deref(), us));
            let theirs =
                find(done, Tag::Mpi { mtu, kind: k }).and_then(|d| d.own::<Vec<MpiPoint>>());
            for (i, &n) in COLL_SIZES.iter().enumerate() {
                let what = format!("{k} {} (us)", size_label(n));
                let ours = r.points.iter().find(|p| p.kind == k && p.size == n);
                let ours = ours.and_then(|p| Spread::of(&p.seconds));
                spread_row(sp, &what, "bulkwire (holefill/udp)", ours, us);
                let x = theirs.and_then(|v| v.get(i)).and_then(|x| x.steps);
                spread_row(sp, &what, "Open MPI over TCP", x, us);
            }
        }
        sec.colls.push((format!("MTU {mtu}"), r.clone()));
    }
    sec.tables.push(t);
}

/// A row of a table of single operations' spreads, when there is a spread.
fn spread_row(sp: &mut Table, what: &str, stack: &str, s: Option<Spread>, unit: fn(f64) -> String) {
    if s.is_some_and(|s| s.is_measured()) {
        sp.rows
            .push(vec![what.into(), stack.into(), spread_cell(s, unit)]);
    }
}

/// The report's network line, `here` being this host's: where the cluster section ran,
/// when `sections` include it and it measured something.
pub fn network_line(sections: &[Section], here: &str) -> String {
    let ran = |s: &Section| s.name == NAME && !s.tables.is_empty();
    if sections.iter().all(ran) && !sections.is_empty() {
        NETWORK.trim_start_matches("the cluster section: ").into()
    } else if sections.iter().any(ran) {
        format!("{here}; {NETWORK}")
    } else {
        here.into()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::bspk::BspResult;
    use crate::coll::CollPoint;
    use crate::pair::{Counters, Point};
    use crate::plan::{Output, Own, Work};
    use crate::suite::Level;

    fn suite(level: Level) -> Suite {
        Suite::new(
            PathBuf::from("/nonexistent/bwbench"),
            level,
            std::env::temp_dir(),
        )
    }

    fn own<T: Any + Send + Sync>(v: T) -> Outcome {
        Outcome::Own(Own(Arc::new(v)))
    }

    fn pair_result(mtu: u32, stack: Stack, kind: Kind, p: &Params) -> PairResult {
        let (sizes, samples, measure) = match kind {
            Kind::Latency => (
                &p.lat_sizes,
                vec![2e-6, 3e-6, 4e-6],
                Measure::Latency {
                    sizes: p.lat_sizes.clone(),
                    warmup: 1,
                    iters: 3,
                },
            ),
            Kind::Bandwidth => (
                &p.bw_sizes,
                vec![1e9, 2e9, 4e9],
                Measure::Bandwidth {
                    sizes: p.bw_sizes.clone(),
                    warmup: 1,
                    reps: 3,
                },
            ),
        };
        let bw = kind == Kind::Bandwidth;
        PairResult {
            spec: PairSpec {
                stack,
                measure,
                faults: Faults::none(),
            },
            points: sizes
                .iter()
                .map(|&size| Point {
                    size,
                    samples: samples
                        .iter()
                        .map(|x| x * f64::from(mtu) / 1500.0)
                        .collect(),
                    delivered: bw.then_some(1.0),
                    // The best repetition (4 GB/s) lost bytes: the table takes 2 GB/s.
                    complete: if bw { vec![true, true, false] } else { vec![] },
                })
                .collect(),
            counters: Some(Counters {
                data_sent: 1000,
                retransmits: 10,
                ..Counters::default()
            }),
        }
    }

    fn mpi_points(kind: &str, sizes: &[usize], median: f64) -> Vec<MpiPoint> {
        sizes
            .iter()
            .map(|&size| MpiPoint {
                kind: kind.into(),
                size,
                nprocs: 2,
                n: 10,
                min: median,
                mean: median,
                max: median,
                std_dev: 0.0,
                median,
                steps: Some(Spread {
                    best: median / 2.0,
                    median,
                    p90: median * 2.0,
                }),
            })
            .collect()
    }

    /// What a run of `tag` would have returned: figures chosen so that each ratio is known.
    fn outcome(tag: Tag, p: &Params) -> Outcome {
        match tag {
            Tag::Path => own(PathInfo {
                addrs: ["10.236.0.1".into(), "10.236.0.2".into()],
                offloads: "generic-receive-offload: off".into(),
                cpus: [vec![0], vec![1]],
            }),
            Tag::Pair {
                mtu, stack, kind, ..
            } => own(pair_result(mtu, stack, kind, p)),
            Tag::Mpi { kind, .. } => own(match kind {
                "latency" => mpi_points(kind, &p.lat_sizes, 6e-6),
                "bandwidth" => mpi_points(kind, &p.bw_sizes, 4e9),
                k => mpi_points(k, &COLL_SIZES, 1e-5),
            }),
            Tag::Barrier { .. } => own(mpi_points("barrier", &[0], 5e-6)),
            Tag::Bsp { .. } => own(BspResult {
                nprocs: 2,
                g_us: 0.05,
                l_us: 10.0,
                empty_us: 3.0,
                exchange_us: 0.0,
                samples: vec![(0, 3.0)],
                empty_steps: None,
                exchange_steps: None,
            }),
            Tag::Coll { .. } => {
                let spec = coll_spec(p);
                let points = KINDS
                    .iter()
                    .flat_map(|k| COLL_SIZES.map(|size| (k, size)))
                    .map(|(k, size)| CollPoint {
                        kind: k.to_string(),
                        size,
                        seconds: vec![5e-6],
                        algorithm: String::new(),
                    })
                    .collect();
                own(CollResult {
                    spec,
                    nprocs: 2,
                    netcache: false,
                    protocol: "holefill".into(),
                    points,
                    mcast: None,
                    mcast_off: None,
                })
            }
            Tag::Target(_) => own(Some(1e-6)),
        }
    }

    /// The plan's runs, done with the outcomes above (a target: baseline 2, candidate 1).
    fn done(plan: Plan<Tag>, p: &Params) -> Vec<Done<Tag>> {
        plan.runs
            .into_iter()
            .map(|r| {
                let result = match &r.work {
                    Work::One(_) => Output::One(Box::new(outcome(r.tag, p))),
                    Work::Rounds { rounds, .. } => Output::Rounds(
                        (0..*rounds)
                            .map(|_| (vec![own(Some(2e-6))], vec![own(Some(1e-6))]))
                            .collect(),
                    ),
                };
                Done {
                    label: r.label,
                    tag: r.tag,
                    result: Ok(result),
                    seconds: 1.0,
                    estimate: 1.0,
                    jobs: 1,
                }
            })
            .collect()
    }

    #[test]
    fn without_the_test_bed_everything_is_skipped_with_the_reason() {
        let plan = Cluster.plan(&suite(Level::Quick));
        assert!(plan.runs.is_empty());
        let [why] = &plan.skipped[..] else {
            panic!("{:?}", plan.skipped)
        };
        // Not root, no `ip netns`, or no netns-rsh beside /nonexistent/bwbench.
        assert!(
            why.starts_with("everything: ")
                && (why.contains("root")
                    || why.contains("ip netns")
                    || why.contains("/nonexistent/netns-rsh is missing")),
            "{why}"
        );
    }

    #[test]
    fn the_plan_measures_each_mtu_and_checks_the_targets() {
        for level in [Level::Smoke, Level::Quick, Level::Full] {
            let s = suite(level);
            let plan = plan_runs(&s, Ok("Open MPI 4.1.4".into()));
            let stacks = stacks().len();
            // The path; per MTU: MPI latency, bandwidth, barrier and 4 collectives, each
            // stack's latency and bandwidth, the lossy stream, BSP and the collectives; the
            // four targets.
            assert_eq!(plan.runs.len(), 1 + 2 * (7 + 2 * stacks + 3) + 4);
            assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
            let steps = plan.steps();
            assert_eq!(steps.len(), plan.runs.len() - 4 + 4 * 2 * s.target_rounds());
            assert!(steps.iter().all(|st| st.estimate > 0.0));
            for mtu in MTUS {
                assert!(plan.runs.iter().any(|r| r.tag == Tag::Bsp { mtu }));
                let lossy = plan
                    .runs
                    .iter()
                    .find(|r| matches!(r.tag, Tag::Pair { mtu: m, lossy: true, .. } if m == mtu));
                assert!(lossy.is_some_and(|r| r.label.ends_with("1 % loss")));
            }
        }
        // Without Open MPI: no MPI run, and the targets against it are left out, saying why.
        let plan = plan_runs(&suite(Level::Smoke), Err("mpicc not found".into()));
        assert!(plan.runs.iter().all(|r| !matches!(r.tag, Tag::Mpi { .. })));
        let targets: Vec<Tag> = plan
            .runs
            .iter()
            .map(|r| r.tag)
            .filter(|t| matches!(t, Tag::Target(_)))
            .collect();
        assert_eq!(targets, [Tag::Target(Goal::Loss)]);
        assert_eq!(plan.skipped[0], "Open MPI over TCP: mpicc not found");
        assert_eq!(plan.skipped.len(), 4);
    }

    #[test]
    fn the_report_has_the_tables_by_mtu_and_the_targets() {
        let s = suite(Level::Quick);
        let p = params(&s);
        let plan = plan_runs(&s, Ok("Open MPI 4.1.4".into()));
        let sec = Cluster.report(&s, &done(plan, &p));
        let titles: Vec<&str> = sec.tables.iter().map(|t| t.title.as_str()).collect();
        assert_eq!(titles.len(), 1 + 5 * MTUS.len(), "{titles:?}");
        assert_eq!(titles[0], "The path");
        assert!(titles[1].starts_with("Median half round trip at MTU 1500"));
        assert!(titles[5].starts_with("Single operations at MTU 1500"));
        assert!(titles[6].starts_with("Median half round trip at MTU 9000"));
        for t in &sec.tables {
            assert!(t.rows.iter().all(|r| r.len() == t.header.len()), "{t:?}");
        }
        // Latency at MTU 1500: the median 3 us against Open MPI's 6 us.
        let lat = &sec.tables[1];
        assert_eq!(lat.rows.len(), stacks().len() + 1);
        assert_eq!(lat.rows[0][..2], ["raw UDP", "3.00 (0.50x)"]);
        assert_eq!(lat.rows.last().unwrap()[1], "6.00 (1.00x)");
        // Bandwidth: the best complete repetition, 2 GB/s against 4; the lossy row and its
        // counters.
        let bw = &sec.tables[2];
        assert_eq!(bw.rows[0][1], "2.000 (0.50x)");
        assert!(bw.rows.iter().any(|r| r[0] == "holefill/udp, 1 % loss"));
        assert!(
            bw.note.contains("1000 data packets, 10 resent"),
            "{}",
            bw.note
        );
        // At MTU 9000 the figures are 6 times those at 1500.
        assert_eq!(sec.tables[6].rows[0][1], "18.00 (3.00x)");
        // The single operations: ping-pongs of 2, 3 and 4 us; repetitions of 1, 2 and 4
        // GB/s, the best the highest; MPI's from its harness.
        let sp = &sec.tables[5];
        assert_eq!(
            sp.rows[0],
            ["half round trip 8 B (us)", "raw UDP", "2.00 / 3.00 / 4.00"]
        );
        assert!(
            sp.rows
                .iter()
                .any(|r| r[0].starts_with("streaming") && r[2] == "4.000 / 2.000 / 1.000"),
            "{sp:?}"
        );
        assert!(sp.rows.iter().any(|r| r[0] == "MPI_Barrier (us)"
            && r[1] == "Open MPI over TCP"
            && r[2] == "2.50 / 5.00 / 10.00"));
        // BSP: the empty superstep 3 us against MPI_Barrier's 5.
        assert_eq!(sec.tables[3].rows[0][3], "3.00 (0.60x)");
        assert_eq!(sec.tables[4].rows.len(), KINDS.len());
        assert_eq!(sec.tables[4].rows[0][1], "5.00 (0.50x)");
        // Every target: candidate 1 against baseline 2 in each round.
        assert_eq!(sec.targets.len(), 4);
        let met: Vec<Option<bool>> = sec.targets.iter().map(|t| t.met).collect();
        assert_eq!(met, [Some(true), Some(false), Some(true), Some(false)]);
        assert!(
            sec.targets[0]
                .measured
                .starts_with("0.50x (1.00 us vs 2.00 us")
        );
        assert_eq!(sec.results.len(), 2 * (2 * stacks().len() + 1));
        assert_eq!(
            (sec.bsp.len(), sec.colls.len(), sec.rounds.len()),
            (2, 2, 4)
        );
        assert!(sec.skipped.is_empty());
    }

    #[test]
    fn the_network_line_says_where_the_cluster_section_ran() {
        let sec = |name: &str| {
            let mut s = Section::new(name, "t");
            s.tables.push(Table::new("t", &["a"], ""));
            s
        };
        assert_eq!(network_line(&[sec("latency")], "loopback"), "loopback");
        // Skipped (no root): nothing ran between namespaces.
        let skipped = Section::new("cluster", "t");
        assert_eq!(
            network_line(&[sec("latency"), skipped], "loopback"),
            "loopback"
        );
        let both = network_line(&[sec("latency"), sec("cluster")], "loopback");
        assert!(both.starts_with("loopback; the cluster section: between two network"));
        let only = network_line(&[sec("cluster")], "loopback");
        assert!(only.starts_with("between two network namespaces over a veth pair at MTU"));
    }
}
