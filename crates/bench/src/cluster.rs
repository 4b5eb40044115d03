//! `bwbench cluster`: the experiments between two hosts over a real network path: two
//! network namespaces joined by a veth pair at Ethernet MTU (1500, then 9000), one rank in
//! each, started as a user would (the multi-host launcher and its host agent through the
//! remote shell `netns-rsh`), beside raw UDP and TCP between the same namespaces and Open
//! MPI over TCP (`mpirun` through the same remote shell). Latency, streaming bandwidth,
//! the BSP parameters and the empty superstep, and the collectives with all-to-all; then
//! the targets in alternating rounds at MTU 1500. Needs root, `ip`, and `netns-rsh` beside
//! the bwbench binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bulkwire_launch::HostSlots;
use bulkwire_launch::testing::Testbed;

use crate::bspk::{BspResult, BspSpec};
use crate::coll::{CollResult, CollSpec};
use crate::jobs::{self, Across};
use crate::mpi::{Mpi, MpiAcross, MpiPoint};
use crate::pair::{Measure, PairResult, PairSpec, Stack, window_for};
use crate::rounds::Rounds;
use crate::stats::Summary;
use crate::suite::{Level, Section, Table, Target, gbs, ratio, size_label, us};

/// The MTUs measured: Ethernet's, then jumbo frames.
const MTUS: [u32; 2] = [1500, 9000];
const TIMEOUT: Duration = Duration::from_secs(300);
/// Open MPI's set-up across namespaces hangs now and then: a try is given this long.
const MPI_TIMEOUT: Duration = Duration::from_secs(120);

/// How many runs [`run`] makes (for progress bars).
pub fn runs(level: Level) -> usize {
    let per_mtu = stacks().len() * 2 + 3 + 2 + 2;
    MTUS.len() * per_mtu + 4 * rounds(level) * 2
}

fn rounds(level: Level) -> usize {
    match level {
        Level::Smoke => 1,
        Level::Quick => 3,
        Level::Full => 5,
    }
}

fn pick<T>(level: Level, smoke: T, quick: T, full: T) -> T {
    match level {
        Level::Smoke => smoke,
        Level::Quick => quick,
        Level::Full => full,
    }
}

/// The stacks of the latency and bandwidth tables, baselines first.
fn stacks() -> Vec<Stack> {
    let mut v = vec![
        Stack::Raw { link: "udp".into() },
        Stack::Raw { link: "tcp".into() },
    ];
    for p in bulkwire_protocol::PROTOCOLS {
        v.push(proto(p));
    }
    v.push(proto(bulkwire_engine::job::TCP));
    v
}

fn proto(p: &str) -> Stack {
    Stack::Proto {
        protocol: p.to_string(),
        link: "udp".into(),
    }
}

/// The test bed and how jobs and MPI reach it. Each host runs on its own half of the
/// CPUs, as separate machines would: two busy-polling ranks that shared a core would
/// measure the scheduler, not the network.
struct Bed {
    tb: Testbed,
    exe: PathBuf,
    rsh: PathBuf,
    cpus: [Vec<usize>; 2],
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

impl Bed {
    fn set_mtu(&self, mtu: u32) -> Result<(), String> {
        for (i, ns) in self.tb.names.iter().enumerate() {
            let dev = format!("{ns}v");
            let o = Command::new("ip")
                .args(["-n", ns, "link", "set", &dev, "mtu", &mtu.to_string()])
                .output()
                .map_err(|e| e.to_string())?;
            if !o.status.success() {
                return Err(format!(
                    "host {i}: MTU {mtu}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
        }
        Ok(())
    }

    fn across(&self, per_host: u32) -> Across {
        Across {
            netns: self.tb.names[0].clone(),
            hosts: self
                .tb
                .addrs
                .iter()
                .map(|a| HostSlots {
                    name: a.clone(),
                    slots: per_host,
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

    fn mpi_across(&self, per_host: u32) -> MpiAcross {
        let subnet = self.tb.addrs[0]
            .rsplit_once('.')
            .map_or_else(String::new, |(net, _)| format!("{net}.0/24"));
        MpiAcross {
            netns: self.tb.names[0].clone(),
            hosts: self
                .tb
                .addrs
                .iter()
                .map(|a| format!("{a}:{per_host}"))
                .collect(),
            rsh: self.rsh.clone(),
            subnet,
            cpus: [list(&self.cpus[0]), list(&self.cpus[1])],
        }
    }

    fn pair(&self, spec: &PairSpec) -> Result<PairResult, String> {
        jobs::run_with(
            &self.exe,
            2,
            "__pair",
            spec,
            &[],
            TIMEOUT,
            Some(&self.across(1)),
        )
        .map_err(|e| format!("{}: {e}", spec.stack.label()))
    }

    fn bsp(&self, spec: &BspSpec) -> Result<BspResult, String> {
        jobs::run_with(
            &self.exe,
            2,
            "__bsp",
            spec,
            &[],
            TIMEOUT,
            Some(&self.across(1)),
        )
    }

    fn coll(&self, spec: &CollSpec) -> Result<CollResult, String> {
        let env: Vec<(&str, &str)> = spec
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        jobs::run_with(
            &self.exe,
            2,
            "__coll",
            spec,
            &env,
            TIMEOUT,
            Some(&self.across(1)),
        )
    }
}

/// The section: every experiment at each MTU, then the targets.
pub fn run(exe: &Path, level: Level, mpi: Result<&Mpi, &str>, progress: &dyn Fn(&str)) -> Section {
    let mut sec = section();
    let rsh = exe.with_file_name("netns-rsh");
    if !rsh.is_file() {
        sec.skipped.push(format!(
            "everything: {} is missing (cargo build --release -p bulkwire-tools builds it)",
            rsh.display()
        ));
        return sec;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        sec.skipped
            .push("everything: the test bed of network namespaces needs root".into());
        return sec;
    }
    let tb = match Testbed::new(MTUS[0]) {
        Ok(t) => t,
        Err(e) => {
            sec.skipped.push(format!("everything: no test bed ({e})"));
            return sec;
        }
    };
    let bed = Bed {
        tb,
        exe: exe.to_path_buf(),
        rsh,
        cpus: halves(),
    };
    let mpi = mpi.map_err(|e| e.to_string());
    sec.tables.push(path_table(&bed));
    for mtu in MTUS {
        if let Err(e) = bed.set_mtu(mtu) {
            sec.skipped.push(e);
            continue;
        }
        pairs(&bed, mtu, level, &mpi, progress, &mut sec);
        bsp_and_collectives(&bed, mtu, level, &mpi, progress, &mut sec);
    }
    if bed.set_mtu(MTUS[0]).is_ok() {
        targets(&bed, level, &mpi, progress, &mut sec);
    }
    sec
}

fn section() -> Section {
    Section::named(
        "cluster",
        "Across hosts: two network namespaces over veth, beside Open MPI over TCP",
    )
}

/// What the path is: veth, the MTUs, and the offloads the kernel reports.
fn path_table(bed: &Bed) -> Table {
    let dev = format!("{}v", bed.tb.names[0]);
    let offloads = Command::new("ip")
        .args(["netns", "exec", &bed.tb.names[0], "ethtool", "-k", &dev])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
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
        })
        .unwrap_or_else(|| "not read (ethtool is not installed)".into());
    Table {
        title: "The path".into(),
        header: vec!["what".into(), "value".into()],
        rows: vec![
            vec![
                "link".into(),
                format!(
                    "veth pair between two network namespaces ({} and {}), one rank in each",
                    bed.tb.addrs[0], bed.tb.addrs[1]
                ),
            ],
            vec![
                "MTU".into(),
                MTUS.iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join(", then "),
            ],
            vec!["offloads (ethtool -k)".into(), offloads],
            vec![
                "CPUs".into(),
                format!(
                    "host 1 runs on CPUs {}, host 2 on {} (as separate machines)",
                    list(&bed.cpus[0]),
                    list(&bed.cpus[1])
                ),
            ],
            vec![
                "launch".into(),
                "bulkwire's multi-host launcher, the other host's ranks started by its agent \
                 through netns-rsh; Open MPI by mpirun through the same netns-rsh"
                    .into(),
            ],
        ],
        note: String::new(),
    }
}

/// Latency and bandwidth per stack at `mtu`, and Open MPI's.
fn pairs(
    bed: &Bed,
    mtu: u32,
    level: Level,
    mpi: &Result<&Mpi, String>,
    progress: &dyn Fn(&str),
    sec: &mut Section,
) {
    let lat_sizes: Vec<usize> = pick(level, vec![8], vec![8, 1024, 65536], vec![8, 1024, 65536]);
    let (warmup, iters) = pick(level, (20, 200), (500, 5000), (2000, 20000));
    let bw_sizes: Vec<usize> = pick(
        level,
        vec![65536],
        vec![65536, 1 << 20],
        vec![4096, 65536, 1 << 20],
    );
    let (bw_warm, reps) = pick(level, (1, 2), (2, 10), (3, 30));
    let mut lat = table(
        &format!("Median half round trip at MTU {mtu} (us), and ratio to Open MPI over TCP"),
        &lat_sizes,
    );
    let mut bw = table(
        &format!(
            "Streaming bandwidth at MTU {mtu} (GB/s, best repetition), and ratio to Open MPI over TCP"
        ),
        &bw_sizes,
    );
    let mpi_lat = mpi_points(mpi, bed, "latency", warmup, iters, 0.0, &lat_sizes, sec);
    let mpi_bw = mpi_points(mpi, bed, "bandwidth", bw_warm, reps, 64.0, &bw_sizes, sec);
    for stack in stacks() {
        progress(&format!("cluster MTU {mtu}: {}", stack.label()));
        let l = bed.pair(&PairSpec {
            stack: stack.clone(),
            measure: Measure::Latency {
                sizes: lat_sizes.clone(),
                warmup,
                iters,
            },
            faults: String::new(),
        });
        let b = bed.pair(&PairSpec {
            stack: stack.clone(),
            measure: Measure::Bandwidth {
                sizes: bw_sizes.clone(),
                warmup: bw_warm,
                reps,
            },
            faults: String::new(),
        });
        match l {
            Ok(r) => {
                let med: Vec<f64> = r
                    .points
                    .iter()
                    .map(|p| Summary::of(&p.samples).median)
                    .collect();
                lat.rows.push(row(&stack.label(), &med, &mpi_lat, us));
                sec.results.push(r);
            }
            Err(e) => sec.skipped.push(format!("MTU {mtu} latency: {e}")),
        }
        match b {
            Ok(r) => {
                let best: Vec<f64> = r
                    .points
                    .iter()
                    .map(|p| p.best_complete_rate().unwrap_or(f64::NAN))
                    .collect();
                bw.rows.push(row(&stack.label(), &best, &mpi_bw, gbs));
                sec.results.push(r);
            }
            Err(e) => sec.skipped.push(format!("MTU {mtu} bandwidth: {e}")),
        }
    }
    // holefill under 1 % loss, with how it found and filled the holes.
    progress(&format!("cluster MTU {mtu}: holefill/udp with 1 % loss"));
    let lossy = bed.pair(&PairSpec {
        stack: proto("holefill"),
        measure: Measure::Bandwidth {
            sizes: bw_sizes.clone(),
            warmup: bw_warm,
            reps,
        },
        faults: "loss=0.01".into(),
    });
    match lossy {
        Ok(r) => {
            let best: Vec<f64> = r
                .points
                .iter()
                .map(|p| p.best_complete_rate().unwrap_or(f64::NAN))
                .collect();
            bw.rows
                .push(row("holefill/udp, 1 % loss", &best, &mpi_bw, gbs));
            if let Some(c) = &r.counters {
                bw.note += &format!(
                    " With 1 % loss, rank 0 toward rank 1 over the run: {} data packets, {} \
                     resent, {} retransmission timeouts, {} prods and {} explicit acks \
                     received, smoothed round trip {:.1} us.",
                    c.data_sent,
                    c.retransmits,
                    c.timeouts,
                    c.prods_received,
                    c.acks_received,
                    c.srtt_ns as f64 / 1e3
                );
            }
            sec.results.push(r);
        }
        Err(e) => sec
            .skipped
            .push(format!("MTU {mtu} bandwidth with loss: {e}")),
    }
    if let Some(m) = &mpi_lat {
        lat.rows.push(row("Open MPI over TCP", m, &mpi_lat, us));
    }
    if let Some(m) = &mpi_bw {
        bw.rows.push(row("Open MPI over TCP", m, &mpi_bw, gbs));
    }
    lat.note = format!(
        "{iters} timed exchanges after {warmup} warm-up, one rank in each namespace. Raw UDP \
         and TCP by bulkwire's harness with the same wait policy; Open MPI by the same \
         experiment in C (ob1, tcp BTL)."
    );
    bw.note = format!(
        "Windows of {} messages (fewer above 1 MiB) then an acknowledgement, {reps} \
         repetitions; the best complete repetition. Open MPI: the median repetition.{}",
        window_for(65536),
        bw.note
    );
    sec.tables.push(lat);
    sec.tables.push(bw);
}

/// MPI's medians for `kind` across the hosts, or `None` (and why, in `skipped`).
#[allow(clippy::too_many_arguments)]
fn mpi_points(
    mpi: &Result<&Mpi, String>,
    bed: &Bed,
    kind: &str,
    warmup: usize,
    iters: usize,
    extra: f64,
    sizes: &[usize],
    sec: &mut Section,
) -> Option<Vec<f64>> {
    let m = match mpi {
        Ok(m) => m,
        Err(e) => {
            sec.skipped.push(format!("Open MPI {kind}: {e}"));
            return None;
        }
    };
    let across = bed.mpi_across(1);
    // Open MPI's TCP set-up between namespaces fails now and then: one more try.
    let r = m
        .run_across(kind, 2, warmup, iters, extra, sizes, MPI_TIMEOUT, &across)
        .or_else(|_| m.run_across(kind, 2, warmup, iters, extra, sizes, MPI_TIMEOUT, &across));
    match r {
        Ok(points) => {
            let med = points.iter().map(|p| p.median).collect();
            sec.mpi.extend(points);
            Some(med)
        }
        Err(e) => {
            sec.skipped.push(format!("Open MPI {kind}: {e}"));
            None
        }
    }
}

fn table(title: &str, sizes: &[usize]) -> Table {
    let mut header = vec!["stack".to_string()];
    header.extend(sizes.iter().map(|&n| size_label(n)));
    Table {
        title: title.into(),
        header,
        rows: Vec::new(),
        note: String::new(),
    }
}

fn row(label: &str, xs: &[f64], base: &Option<Vec<f64>>, unit: fn(f64) -> String) -> Vec<String> {
    let mut r = vec![label.to_string()];
    for (i, &x) in xs.iter().enumerate() {
        let b = base
            .as_ref()
            .and_then(|b| b.get(i))
            .copied()
            .unwrap_or(f64::NAN);
        r.push(format!("{} ({})", unit(x), ratio(x, b)));
    }
    r
}

/// The BSP parameters at p = 2 beside MPI_Barrier, and the collectives beside Open MPI's.
fn bsp_and_collectives(
    bed: &Bed,
    mtu: u32,
    level: Level,
    mpi: &Result<&Mpi, String>,
    progress: &dyn Fn(&str),
    sec: &mut Section,
) {
    progress(&format!("cluster MTU {mtu}: BSP"));
    let spec = bsp_spec(level);
    let (warmup, iters) = pick(level, (10, 50), (200, 2000), (500, 5000));
    let barrier = mpi_points(mpi, bed, "barrier", warmup, iters, 0.0, &[0], sec);
    let mut t = Table {
        title: format!("BSP at p = 2, MTU {mtu} (us)"),
        header: [
            "stack",
            "g per 8-byte put",
            "l",
            "empty superstep",
            "MPI_Barrier",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        note: "bspbench's method (h-relations of 8-byte puts fitted to l + g h); the empty \
               superstep is bsp_sync with nothing to send. MPI_Barrier: Open MPI over TCP."
            .into(),
    };
    match bed.bsp(&spec) {
        Ok(r) => {
            let b = barrier
                .as_ref()
                .and_then(|b| b.first())
                .copied()
                .unwrap_or(f64::NAN);
            t.rows.push(vec![
                "bulkwire BSP (holefill/udp)".into(),
                format!("{:.3}", r.g_us),
                format!("{:.2}", r.l_us),
                format!("{:.2} ({})", r.empty_us, ratio(r.empty_us * 1e-6, b)),
                us(b),
            ]);
            sec.bsp.push((format!("MTU {mtu}"), r));
        }
        Err(e) => sec.skipped.push(format!("MTU {mtu} BSP: {e}")),
    }
    sec.tables.push(t);

    progress(&format!("cluster MTU {mtu}: collectives"));
    let kinds = ["barrier", "bcast", "allreduce", "alltoall"];
    let sizes = vec![8usize, 65536];
    let spec = CollSpec {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        sizes: sizes.clone(),
        warmup,
        iters: iters / 2,
        env: Vec::new(),
    };
    let mut t = Table {
        title: format!(
            "Collectives at p = 2, MTU {mtu}: median latency (us), and ratio to Open MPI over TCP"
        ),
        header: vec!["collective".into()],
        rows: Vec::new(),
        note: "OSU's method (barrier, time one call, the slowest process's time); bulkwire's \
               point-to-point algorithms over holefill/udp; alltoall exchanges a block of the \
               size per process pair."
            .into(),
    };
    t.header.extend(sizes.iter().map(|&n| size_label(n)));
    let ours = bed.coll(&spec);
    let mut theirs = Vec::new();
    for k in kinds {
        theirs.push(mpi_points(mpi, bed, k, warmup, iters / 2, 0.0, &sizes, sec));
    }
    match ours {
        Ok(r) => {
            for (k, base) in kinds.iter().zip(&theirs) {
                let med: Vec<f64> = sizes
                    .iter()
                    .map(|&n| {
                        r.points
                            .iter()
                            .find(|p| p.kind == *k && p.size == n)
                            .map_or(f64::NAN, |p| p.summary().median)
                    })
                    .collect();
                t.rows.push(row(k, &med, base, us));
            }
            sec.colls.push((format!("MTU {mtu}"), r));
        }
        Err(e) => sec.skipped.push(format!("MTU {mtu} collectives: {e}")),
    }
    sec.tables.push(t);
}

fn bsp_spec(level: Level) -> BspSpec {
    BspSpec {
        hmax: pick(level, 16, 64, 256),
        hstep: pick(level, 8, 16, 32),
        iters: pick(level, 10, 100, 200),
        batches: pick(level, 1, 3, 5),
        warmup: pick(level, 5, 50, 100),
    }
}

/// The targets at MTU 1500, each in alternating rounds against its baseline.
fn targets(
    bed: &Bed,
    level: Level,
    mpi: &Result<&Mpi, String>,
    progress: &dyn Fn(&str),
    sec: &mut Section,
) {
    let n = rounds(level);
    let holefill = proto("holefill");
    let (warmup, iters) = pick(level, (20, 200), (1000, 10_000), (2000, 20_000));
    let lat = |stack: &Stack| PairSpec {
        stack: stack.clone(),
        measure: Measure::Latency {
            sizes: vec![8],
            warmup,
            iters,
        },
        faults: String::new(),
    };
    let stream = |faults: &str| PairSpec {
        stack: holefill.clone(),
        measure: Measure::Bandwidth {
            sizes: vec![1 << 20],
            warmup: pick(level, 1, 2, 3),
            reps: pick(level, 2, 10, 20),
        },
        faults: faults.into(),
    };
    let median = |r: PairResult| r.points.first().map(|p| Summary::of(&p.samples).median);
    let best = |r: PairResult| r.points.first().and_then(|p| p.best_complete_rate());
    let across = bed.mpi_across(1);
    let mpi_fig = |kind: &str, size: usize, w: usize, it: usize, extra: f64| {
        let m = mpi.as_ref().map_err(|e| e.clone())?;
        let p = m
            .run_across(kind, 2, w, it, extra, &[size], MPI_TIMEOUT, &across)
            .or_else(|_| m.run_across(kind, 2, w, it, extra, &[size], MPI_TIMEOUT, &across))?;
        Ok(p.first().map(|p: &MpiPoint| p.median))
    };

    progress("cluster: 8 B latency, holefill vs Open MPI, alternating");
    let what = "holefill 8 B half round trip vs Open MPI over TCP, MTU 1500";
    let r = Rounds::run(
        n,
        &mut || mpi_fig("latency", 8, warmup, iters, 0.0),
        &mut || bed.pair(&lat(&holefill)).map(median),
    );
    check(sec, what, r, "<= 0.70x", in_us, |q| q <= 0.70);

    progress("cluster: 1 MiB streaming, holefill vs Open MPI, alternating");
    let what = "holefill 1 MiB streaming vs Open MPI over TCP, MTU 1500";
    let r = Rounds::run(
        n,
        &mut || mpi_fig("bandwidth", 1 << 20, 2, pick(level, 2, 10, 20), 64.0),
        &mut || bed.pair(&stream("")).map(best),
    );
    check(sec, what, r, ">= 1.00x", in_gbs, |q| q >= 1.0);

    progress("cluster: empty superstep vs MPI_Barrier, alternating");
    let what = "empty superstep at p = 2 vs MPI_Barrier over TCP, MTU 1500";
    let spec = bsp_spec(level);
    let (bw, bi) = pick(level, (10, 50), (200, 2000), (500, 5000));
    let r = Rounds::run(n, &mut || mpi_fig("barrier", 0, bw, bi, 0.0), &mut || {
        bed.bsp(&spec).map(|r| Some(r.empty_us * 1e-6))
    });
    check(sec, what, r, "<= 0.70x", in_us, |q| q <= 0.70);

    progress("cluster: 1 MiB streaming with 1 % loss vs without, alternating");
    let what = "holefill 1 MiB streaming with 1 % loss vs its lossless bandwidth, MTU 1500";
    let r = Rounds::run(n, &mut || bed.pair(&stream("")).map(best), &mut || {
        bed.pair(&stream("loss=0.01")).map(best)
    });
    check(sec, what, r, ">= 0.80x", in_gbs, |q| q >= 0.8);
}

fn in_us(x: f64) -> String {
    format!("{} us", us(x))
}

fn in_gbs(x: f64) -> String {
    format!("{} GB/s", gbs(x))
}

/// Records a target checked in rounds (or why it was not measured).
fn check(
    sec: &mut Section,
    what: &str,
    r: Result<Rounds, String>,
    target: &str,
    unit: fn(f64) -> String,
    ok: impl Fn(f64) -> bool,
) {
    match r {
        Ok(r) => {
            let q = r.ratio();
            let measured = match (q, r.medians()) {
                (Some(q), Some((b, c))) => {
                    format!("{q:.2}x ({} vs {}; {})", unit(c), unit(b), r.describe())
                }
                _ => r.describe(),
            };
            sec.targets.push(Target {
                what: what.into(),
                measured,
                target: target.into(),
                met: q.filter(|q| q.is_finite()).map(ok),
            });
            sec.rounds.push((what.into(), r));
        }
        Err(e) => sec.skipped.push(format!("{what}: {e}")),
    }
}
