//! `bwbench fabric`: the papers' network experiments on an emulated switched cluster
//! ([`Fabric`]): hosts as network namespaces, one rank each, on one Linux bridge whose
//! ports are shaped by `tc tbf` to a link rate (100 Mb/s as in the papers, and 1 Gb/s) with
//! a 64 KiB output buffer, MTU 1500, offloads off. Here the wire and the switch's buffers
//! decide, not the CPUs, as long as the CPUs are not busy: every row says how busy they
//! were and is marked CPU-bound above 85 %.
//!
//! - The BSPlib paper's Table 1: a BSP total exchange of 60 KB per pair (one `bsp_put` per
//!   destination, then `bsp_sync`) at 8 hosts, per superstep, in latin-square, pid and
//!   random order, with and without pacing, over every protocol, beside Open MPI's
//!   `MPI_Alltoall` over TCP; at 100 Mb/s and (full run) 1 Gb/s.
//! - `bulkwire.h`'s alltoall and allgather at 60 KB beside Open MPI's.
//! - The RMPP paper's Fig. 3: per-node bandwidth of the all-to-all against p.
//! - Incast: p-1 senders into one host's port (the collectives' gather pattern), beside
//!   `MPI_Gather`.
//! - Two-to-one: two hosts stream 256 KiB each into a third's 100 Mb/s port at once, per
//!   protocol, beside `MPI_Gather` at 3 processes.
//! - Two hosts at 100 Mb/s and 1 Gb/s: half round trip and streaming bandwidth per stack
//!   (raw UDP and TCP, holefill, gbn and rmpp over UDP) by the pair harness, beside Open
//!   MPI's ping-pong and window over TCP; streaming as a share of the link rate.
//! - The RTFC paper's network cache across hosts: `bulkwire.h`'s broadcast of 1 MiB and
//!   allgather of 128 KiB blocks over the job's IP multicast group and over its
//!   point-to-point algorithms (`BULKWIRE_MCAST=off`), beside Open MPI's `MPI_Bcast` and
//!   `MPI_Allgather` over TCP, without and with 1 % of frames dropped on their way into
//!   every host, with the multicast repairs and NACKs counted; lossless at 1 Gb/s too
//!   (default and full runs); and the broadcast against p.
//!
//! Every row shows the switch's drops and the frames it forwarded (`tc -s`, summed over
//! its ports, over the whole job), and rows are measured in alternating rounds. Each job
//! makes a fabric of its own and removes it when it ends. Needs root, `ip netns`, `tc`,
//! and `netns-rsh` beside the bwbench binary, and `iptables` for the lossy multicast
//! table; the plan says which is missing. Not part of `bwbench all` unless `--hosts` is
//! given. `--only` runs some of the tables ([`PARTS`]).

use std::process::Command;
use std::time::Duration;

use bulkwire_launch::HostSlots;
use bulkwire_launch::testing::{
    CpuTimes, CpuUse, DEFAULT_BUFFER, Fabric, FabricSpec, PortCounters,
};

use super::Experiment;
use super::cluster::{open_mpi, prerequisites, rsh_of};
use crate::coll::{self, CollResult, CollSpec, McastCounts};
use crate::jobs::Across;
use crate::mpi::{MpiAcross, MpiPoint};
use crate::pair::{self, Measure, PairResult, PairSpec, window_for};
use crate::plan::{Done, Job, OwnJob, Plan};
use crate::section::{SPREAD_NOTE, Section, Table, short_mpi, size_label, spread_cell, us};
use crate::stack::{CollAlgo, Faults, Protocol, RawLink, Stack, Transport};
use crate::stats::{Spread, Summary};
use crate::suite::Suite;
use crate::xchg::{self, XchgResult, XchgSpec};

pub struct FabricExperiment;

/// The experiment's name: its subcommand, and its section's in `results.json`.
pub const NAME: &str = "fabric";

/// Bytes per pair of the total exchange (the papers' 60 KB).
pub const SIZE: usize = 60_000;
/// Bytes each of the two senders of the two-to-one table puts per superstep: enough to
/// fill the receiver's port for 42 ms, four times its buffer per sender.
pub const CONTEND: usize = 256 << 10;
const MTU: u32 = 1500;
const MBIT: u64 = 1_000_000;
/// A job of bulkwire's is given this long (gbn and rmpp take seconds per superstep).
const TIMEOUT: Duration = Duration::from_secs(240);
const MPI_TIMEOUT: Duration = Duration::from_secs(120);
/// The broadcast of the multicast tables: the 1 MiB.
pub const BCAST: usize = 1 << 20;
/// Each process's block of the multicast tables' allgather.
pub const GATHER: usize = 128 << 10;
/// The share of frames the lossy multicast table drops on their way into every host.
pub const LOSS: f64 = 0.01;
/// Bytes on the wire around each frame beyond the MTU: Ethernet's header and frame check
/// sequence (18), preamble (8) and inter-frame gap (12).
const ETHERNET: usize = 38;
/// A two-host row is given this long: gbn and rmpp lose most of a 64 MiB stream's
/// windows to the switch's 64 KiB buffer and wait out their timeouts.
const PAIR_TIMEOUT: Duration = Duration::from_secs(90);

/// The tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The total exchange at 8 hosts at a link rate in Mb/s.
    Exchange { mbit: u64 },
    /// `bulkwire.h` collectives at 8 hosts, 100 Mb/s.
    Coll,
    /// All-to-all against p, 100 Mb/s.
    Fig3,
    /// p-1 senders into one host's port, 100 Mb/s.
    Incast,
    /// Two senders into a third host's 100 Mb/s port.
    Contend,
    /// Two hosts at a link rate in Mb/s: half round trip (`stream` false) or streaming
    /// bandwidth per stack.
    Pair { mbit: u64, stream: bool },
    /// Broadcast and allgather over multicast, point-to-point and Open MPI at a link rate
    /// in Mb/s; `loss`: with [`LOSS`] of the frames dropped on arrival at every host.
    Mcast { mbit: u64, loss: bool },
    /// The broadcast of [`Part::Mcast`] against p.
    McastHosts,
}

/// The parts' names for `--only`, in the order they run.
pub const PARTS: &[&str] = &[
    "exchange", "coll", "fig3", "incast", "contend", "pair", "mcast", "mcast1g",
];

impl Part {
    /// The part's name among [`PARTS`].
    pub fn name(self) -> &'static str {
        match self {
            Part::Exchange { .. } => "exchange",
            Part::Coll => "coll",
            Part::Fig3 => "fig3",
            Part::Incast => "incast",
            Part::Contend => "contend",
            Part::Pair { .. } => "pair",
            Part::Mcast { mbit: 1000, .. } => "mcast1g",
            Part::Mcast { .. } | Part::McastHosts => "mcast",
        }
    }

    /// Whether `--only name` takes the part: its own name, or "mcast" for every multicast
    /// table (1 Gb/s included; "mcast1g" takes that one alone).
    fn chosen_by(self, name: &str) -> bool {
        name == self.name() || name == "mcast" && matches!(self, Part::Mcast { .. })
    }
}

/// What a run is: a row of a part's table, in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub part: Part,
    pub row: usize,
    pub round: usize,
}

/// What a row runs.
#[derive(Clone, Debug, PartialEq)]
enum What {
    /// The BSP exchange (or incast) over `protocol`, with the row's settings in `env`.
    Bsp {
        protocol: Protocol,
        env: Vec<(String, String)>,
        incast: bool,
    },
    /// Open MPI's collective `kind` of `size` bytes (per process) over TCP.
    Mpi { kind: &'static str, size: usize },
    /// bulkwire.h's collective `kind` of `size` bytes over holefill; `mcast`: with
    /// `BULKWIRE_MCAST=auto` (the default) or `off`, or as the environment says (`None`).
    Coll {
        kind: &'static str,
        size: usize,
        mcast: Option<bool>,
    },
    /// Two-to-one over `protocol`, or Open MPI's `MPI_Gather` over TCP when `None`.
    Contend { protocol: Option<Protocol> },
    /// The pair harness over `stack`: ping-pong, or a stream when `stream`.
    Pair { stack: Stack, stream: bool },
    /// Open MPI's ping-pong, or its window when `stream`, over TCP.
    MpiPair { stream: bool },
}

#[derive(Clone, Debug, PartialEq)]
struct Row {
    label: String,
    hosts: usize,
    what: What,
}

/// What one job measured.
#[derive(Clone, Debug, Default)]
pub struct FabRun {
    pub hosts: usize,
    /// Seconds per superstep or call (the slowest process's), median and worst.
    pub median: f64,
    pub worst: f64,
    /// The switch's ports summed, over the whole job (start-up included).
    pub switch: PortCounters,
    /// Frames the hosts' own queues dropped (zero when they held their senders back).
    pub host_drops: u64,
    pub cpu: CpuUse,
    /// Two-host rows, per size: the median half round trip in seconds, or the best
    /// streaming rate in bytes per second (empty for the other rows).
    pub points: Vec<f64>,
    /// The single supersteps' or calls' best, median and 90th percentile (two-host rows:
    /// the first size's operations).
    pub steps: Option<Spread>,
    /// Frames dropped on arrival at the hosts on purpose ([`Fabric::drop_on_arrival`]).
    pub arrival_drops: u64,
    /// `bulkwire.h` rows: the algorithm of the last call, and the multicast group's
    /// counters summed over the processes (`None`: the job had no group).
    pub algorithm: String,
    pub mcast: Option<McastCounts>,
}

/// The level's sizes of things.
struct Params {
    hosts: usize,
    warmup: usize,
    steps: usize,
    rounds: usize,
    /// Hosts of the Fig. 3 table.
    fig3: Vec<usize>,
    /// Every protocol in Fig. 3 (else holefill and MPI).
    fig3_all: bool,
    gigabit: bool,
    /// Two-host rows: sizes, warm-up and iterations of the ping-pong.
    lat_sizes: Vec<usize>,
    lat: (usize, usize),
    /// Timed supersteps (or calls) of the two-to-one table, after one untimed.
    contend: usize,
    /// Two-host rows: sizes, warm-up and repetitions of the stream (a repetition is a
    /// window of 64 messages: 64 MiB at 1 MiB, 5.4 s at 100 Mb/s).
    bw_sizes: Vec<usize>,
    bw: (usize, usize),
    /// Hosts of the broadcast against p.
    mcast_hosts: Vec<usize>,
}

fn params(s: &Suite) -> Params {
    Params {
        hosts: s.pick(4, 8, 8),
        warmup: s.pick(1, 2, 3),
        steps: s.pick(3, 10, 20),
        rounds: s.pick(1, 2, 3),
        fig3: s.pick(vec![2, 4], vec![2, 4, 8], vec![2, 4, 8, 16]),
        fig3_all: s.pick(false, false, true),
        gigabit: s.pick(false, true, true),
        lat_sizes: vec![8, 1024],
        lat: s.pick((20, 200), (200, 2000), (500, 5000)),
        contend: s.pick(2, 5, 10),
        bw_sizes: s.pick(vec![65536], vec![65536, 1 << 20], vec![65536, 1 << 20]),
        bw: s.pick((0, 1), (0, 1), (1, 3)),
        // The smoke level's 2 hosts check that a job too small for the group still runs.
        mcast_hosts: s.pick(vec![2], vec![2, 4, 8], vec![2, 4, 8, 16]),
    }
}

fn bsp(label: String, hosts: usize, protocol: Protocol, env: &[(&str, String)]) -> Row {
    Row {
        label,
        hosts,
        what: What::Bsp {
            protocol,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            incast: false,
        },
    }
}

/// Pacing at the link rate, in bytes per second: what one receiver's port takes.
fn pace(mbit: u64) -> String {
    (mbit * MBIT / 8).to_string()
}

/// The rows of `part` (MPI's included when `mpi` names it).
fn rows(part: Part, p: &Params, mpi: Option<&str>) -> Vec<Row> {
    let h = p.hosts;
    let mut v = Vec::new();
    match part {
        Part::Exchange { mbit } => {
            let sched = |s: &str| ("BULKWIRE_BSP_SCHEDULE", s.to_string());
            let rate = ("BULKWIRE_BSP_RATE", pace(mbit));
            let full = mbit == 100;
            for s in ["latin", "pid", "random"] {
                if !full && s == "random" {
                    continue;
                }
                let what = if s == "latin" {
                    "latin square (default)".to_string()
                } else {
                    format!("BULKWIRE_BSP_SCHEDULE={s}")
                };
                v.push(bsp(
                    format!("BSP, holefill, {what}"),
                    h,
                    Protocol::Holefill,
                    &[sched(s)],
                ));
                if full {
                    v.push(bsp(
                        format!("BSP, holefill, {what}, paced at the link rate"),
                        h,
                        Protocol::Holefill,
                        &[sched(s), rate.clone()],
                    ));
                }
            }
            // Ranks that spin while they wait take cores from those with work when the
            // hosts share a few CPUs: the default beside waits that sleep at once.
            v.push(bsp(
                "BSP, holefill, latin square, BULKWIRE_SPIN_US=0".into(),
                h,
                Protocol::Holefill,
                &[sched("latin"), ("BULKWIRE_SPIN_US", "0".into())],
            ));
            // utopia is left out (the plan says why): it has no recovery, so on a switch
            // that drops its job ends at the first lost frame, a failed run every time.
            for proto in [Protocol::Gbn, Protocol::Rmpp] {
                v.push(bsp(
                    format!("BSP, {}, latin square", proto.name()),
                    h,
                    proto,
                    &[],
                ));
            }
            if let Some(m) = mpi {
                v.push(Row {
                    label: format!("{m} MPI_Alltoall over TCP"),
                    hosts: h,
                    what: What::Mpi {
                        kind: "alltoall",
                        size: SIZE,
                    },
                });
            }
        }
        Part::Coll => {
            for kind in ["alltoall", "allgather"] {
                v.push(Row {
                    label: format!("bulkwire.h {kind}, holefill"),
                    hosts: h,
                    what: What::Coll {
                        kind,
                        size: SIZE,
                        mcast: None,
                    },
                });
                if let Some(m) = mpi {
                    v.push(Row {
                        label: format!("{m} MPI_{} over TCP", capital(kind)),
                        hosts: h,
                        what: What::Mpi { kind, size: SIZE },
                    });
                }
            }
        }
        Part::Incast => {
            for proto in [Protocol::Holefill, Protocol::Gbn, Protocol::Rmpp] {
                let mut r = bsp(format!("BSP, {}", proto.name()), h, proto, &[]);
                if let What::Bsp { incast, .. } = &mut r.what {
                    *incast = true;
                }
                v.push(r);
            }
            if let Some(m) = mpi {
                v.push(Row {
                    label: format!("{m} MPI_Gather over TCP"),
                    hosts: h,
                    what: What::Mpi {
                        kind: "gather",
                        size: SIZE,
                    },
                });
            }
        }
        Part::Contend => {
            for proto in [Protocol::Holefill, Protocol::Gbn, Protocol::Rmpp] {
                v.push(Row {
                    label: format!("BSP, {}", proto.name()),
                    hosts: 3,
                    what: What::Contend {
                        protocol: Some(proto),
                    },
                });
            }
            if let Some(m) = mpi {
                v.push(Row {
                    label: format!("{m} MPI_Gather over TCP"),
                    hosts: 3,
                    what: What::Contend { protocol: None },
                });
            }
        }
        Part::Pair { stream, .. } => {
            let stacks = [
                Stack::Raw { link: RawLink::Udp },
                Stack::Raw { link: RawLink::Tcp },
                Stack::Proto(Transport::udp(Protocol::Holefill)),
                Stack::Proto(Transport::udp(Protocol::Gbn)),
                Stack::Proto(Transport::udp(Protocol::Rmpp)),
            ];
            for stack in stacks {
                v.push(Row {
                    label: stack.label(),
                    hosts: 2,
                    what: What::Pair { stack, stream },
                });
            }
            if let Some(m) = mpi {
                v.push(Row {
                    label: format!("{m} over TCP"),
                    hosts: 2,
                    what: What::MpiPair { stream },
                });
            }
        }
        Part::Mcast { .. } => {
            for (kind, size) in [("bcast", BCAST), ("allgather", GATHER)] {
                v.extend(mcast_rows(h, kind, size, mpi));
            }
        }
        Part::McastHosts => {
            for &n in &p.mcast_hosts {
                v.extend(mcast_rows(n, "bcast", BCAST, mpi));
            }
        }
        Part::Fig3 => {
            let protos: &[Protocol] = if p.fig3_all {
                &[Protocol::Holefill, Protocol::Gbn, Protocol::Rmpp]
            } else {
                &[Protocol::Holefill]
            };
            for &n in &p.fig3 {
                for &proto in protos {
                    v.push(bsp(format!("BSP, {}", proto.name()), n, proto, &[]));
                }
                if let Some(m) = mpi {
                    v.push(Row {
                        label: format!("{m} MPI_Alltoall over TCP"),
                        hosts: n,
                        what: What::Mpi {
                            kind: "alltoall",
                            size: SIZE,
                        },
                    });
                }
            }
        }
    }
    v
}

/// `kind` of `size` bytes at `hosts`: over multicast (the default settings), over the
/// point-to-point algorithms, and by MPI.
fn mcast_rows(hosts: usize, kind: &'static str, size: usize, mpi: Option<&str>) -> Vec<Row> {
    let name = if kind == "bcast" { "broadcast" } else { kind };
    let mut v = Vec::new();
    for (mcast, how) in [
        (true, "multicast (default)"),
        (false, "unicast (BULKWIRE_MCAST=off)"),
    ] {
        v.push(Row {
            label: format!("bulkwire.h {name}, {how}"),
            hosts,
            what: What::Coll {
                kind,
                size,
                mcast: Some(mcast),
            },
        });
    }
    if let Some(m) = mpi {
        v.push(Row {
            label: format!("{m} MPI_{} over TCP", capital(kind)),
            hosts,
            what: What::Mpi { kind, size },
        });
    }
    v
}

fn capital(k: &str) -> String {
    let mut c = k.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn parts(p: &Params) -> Vec<Part> {
    let mut v = vec![
        Part::Exchange { mbit: 100 },
        Part::Coll,
        Part::Fig3,
        Part::Incast,
        Part::Contend,
    ];
    if p.gigabit {
        v.insert(1, Part::Exchange { mbit: 1000 });
    }
    for mbit in [100, 1000] {
        for stream in [false, true] {
            v.push(Part::Pair { mbit, stream });
        }
    }
    v.extend([
        Part::Mcast {
            mbit: 100,
            loss: false,
        },
        Part::Mcast {
            mbit: 100,
            loss: true,
        },
    ]);
    // Lossless only: at 1 Gb/s the rows are about the CPUs more than the wire.
    if p.gigabit {
        v.push(Part::Mcast {
            mbit: 1000,
            loss: false,
        });
    }
    v.push(Part::McastHosts);
    v
}

/// The parts the suite asks for (`--only`), in order.
fn chosen(s: &Suite, p: &Params) -> Vec<Part> {
    parts(p)
        .into_iter()
        .filter(|part| s.only().is_none_or(|o| o.iter().any(|n| part.chosen_by(n))))
        .collect()
}

fn mbit_of(part: Part) -> u64 {
    match part {
        Part::Exchange { mbit } | Part::Pair { mbit, .. } | Part::Mcast { mbit, .. } => mbit,
        Part::Coll | Part::Fig3 | Part::Incast | Part::Contend | Part::McastHosts => 100,
    }
}

impl Experiment for FabricExperiment {
    type Tag = Tag;

    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "The papers' network experiments on an emulated switch: 2-16 network namespaces on a \
         bridge with tbf-shaped 100 Mb/s ports and 64 KiB buffers; total exchange, \
         collectives and all-to-all beside Open MPI over TCP, with switch drops and CPU use \
         (needs root; in `all` with --hosts)"
    }

    fn in_all(&self) -> bool {
        false
    }

    fn plan(&self, s: &Suite) -> Plan<Tag> {
        let ready = prerequisites(s).and_then(|()| {
            Command::new("tc")
                .arg("-V")
                .output()
                .map_err(|e| format!("the fabric needs `tc` ({e})"))
                .map(|_| ())
        });
        if let Err(why) = ready {
            let mut plan = Plan::default();
            plan.skip(format!("everything: {why}"));
            return plan;
        }
        plan_runs(s, open_mpi(s), iptables())
    }

    fn report(&self, s: &Suite, done: &[Done<Tag>]) -> Section {
        let p = params(s);
        let mut sec = Section::new(
            NAME,
            "A switched network: hosts as namespaces on a shaped bridge, beside Open MPI over \
             TCP",
        );
        let mpi = s.mpi().ok().map(|m| short_mpi(&m.version));
        for part in chosen(s, &p) {
            let t = table(part, &p, &rows(part, &p, mpi.as_deref()), done);
            if !t.rows.is_empty() {
                sec.tables.push(t);
            }
        }
        let t = spread_table(&p, mpi.as_deref(), done);
        if !t.rows.is_empty() {
            sec.tables.push(t);
        }
        sec
    }
}

/// Whether `iptables` runs here, which [`Fabric::drop_on_arrival`] needs.
fn iptables() -> Result<(), String> {
    match Command::new("iptables").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "iptables -V: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("no `iptables` ({e})")),
    }
}

/// Every run, given MPI's short name (or why it is left out) and whether frames can be
/// dropped on arrival (`iptables`, or why not).
fn plan_runs(s: &Suite, mpi: Result<String, String>, lossy: Result<(), String>) -> Plan<Tag> {
    let p = params(s);
    let mut plan = Plan::default();
    let mpi = match mpi {
        Ok(name) => Some(name),
        Err(e) => {
            plan.skip(format!("Open MPI over TCP: {e}"));
            None
        }
    };
    if Command::new("mpiexec.mpich")
        .arg("--version")
        .output()
        .is_ok()
    {
        // Tried by hand with hydra (-launcher rsh -launcher-exec netns-rsh): it starts, but
        // Debian's MPICH 4.0 (ch4:ucx) moved a 1 MiB MPI_Bcast in 0.1 ms with 3 KB on the
        // wire, and with UCX_TLS=tcp,self its address exchange failed ("Destination is
        // unreachable").
        plan.skip(
            "MPICH: only Open MPI's mpirun is driven across the fabric's hosts (MPICH's \
             ch4:ucx device finds the namespaces on one machine and carries their messages \
             by shared memory, off the switch; restricted to TCP, UCX finds no route \
             between them)",
        );
        plan.skip(
            "BSP over utopia: it has no recovery, so on a switch that drops (every 100 Mb/s \
             exchange here) its job ends at the first lost frame, saying so",
        );
    }
    let mut todo = chosen(s, &p);
    let all = parts(&p);
    if todo.len() < all.len() {
        // The level's parts only: a level without 1 Gb/s has no "mcast1g" to leave out.
        let left: Vec<&str> = PARTS
            .iter()
            .copied()
            .filter(|n| all.iter().any(|p| p.name() == *n))
            .filter(|n| !todo.iter().any(|p| p.name() == *n))
            .collect();
        plan.skip(format!("{}: left out by --only", left.join(", ")));
    }
    if let Err(why) = lossy {
        let loss = Part::Mcast {
            mbit: 100,
            loss: true,
        };
        if todo.contains(&loss) {
            todo.retain(|&p| p != loss);
            plan.skip(format!(
                "Broadcast and allgather with 1 % of frames lost: {why}"
            ));
        }
    }
    for part in todo {
        let rows = rows(part, &p, mpi.as_deref());
        // Alternating rounds: every row once per round, so that a slow spell of the
        // machine falls on every row alike.
        for round in 0..p.rounds {
            for (i, r) in rows.iter().enumerate() {
                let what = match part {
                    Part::Pair { stream: true, .. } => "stream, ",
                    Part::Pair { stream: false, .. } => "ping-pong, ",
                    Part::Contend => "two-to-one, ",
                    Part::Mcast { loss: true, .. } => "1 % lost, ",
                    _ => "",
                };
                let label = format!(
                    "{} hosts, {} Mb/s: {what}{} (round {})",
                    r.hosts,
                    mbit_of(part),
                    r.label,
                    round + 1
                );
                let tag = Tag {
                    part,
                    row: i,
                    round,
                };
                let loss = if matches!(part, Part::Mcast { loss: true, .. }) {
                    LOSS
                } else {
                    0.0
                };
                plan.add(label, tag, job(r.clone(), mbit_of(part), loss, &p));
            }
        }
    }
    plan
}

/// The job of `row` on a fabric of its own at `mbit` Mb/s, dropping `loss` of the frames
/// on their way into every host.
fn job(row: Row, mbit: u64, loss: f64, p: &Params) -> Job {
    let (warmup, steps) = (p.warmup, p.steps);
    let bound = link_bound(row.hosts, mbit);
    let two = Two {
        contend: p.contend,
        mbit,
        lat_sizes: p.lat_sizes.clone(),
        lat: p.lat,
        bw_sizes: p.bw_sizes.clone(),
        bw: p.bw,
    };
    // For the progress bar only: gbn and rmpp take 40-90 times the bound.
    let per_step = match &row.what {
        What::Bsp { protocol, .. } => match protocol {
            Protocol::Gbn => 90.0 * bound,
            Protocol::Rmpp => 40.0 * bound,
            _ => 2.0 * bound,
        },
        What::Pair { stream, .. } | What::MpiPair { stream } => {
            two.estimate(*stream) / (warmup + steps) as f64
        }
        What::Contend { protocol } => {
            let bound = 2.0 * CONTEND as f64 * 8.0 / (mbit * MBIT) as f64;
            let k = match protocol {
                Some(Protocol::Gbn) => 50.0,
                Some(Protocol::Rmpp) => 10.0,
                _ => 2.0,
            };
            k * bound * (1 + p.contend) as f64 / (warmup + steps) as f64
        }
        // Open MPI's broadcast takes about 6x one transmission, the others less.
        What::Coll { kind, size, .. } | What::Mpi { kind, size } if *size != SIZE => {
            6.0 * wire_time(kind, row.hosts, mbit)
        }
        _ => 3.0 * bound,
    };
    let estimate = 1.0 + 0.2 * row.hosts as f64 + per_step * (warmup + steps) as f64;
    Job::Own(OwnJob::new(estimate, move |s: &Suite| {
        let spec = FabricSpec::shaped(row.hosts, MTU, mbit * MBIT, DEFAULT_BUFFER);
        let fab = Fabric::new(spec).map_err(|e| format!("no fabric ({e})"))?;
        if loss > 0.0 {
            fab.drop_on_arrival(loss)?;
        }
        let (ports0, cpu0) = (fab.ports()?, CpuTimes::read());
        let run = run_row(s, &fab, &row, warmup, steps, &two)?;
        let cpu = CpuTimes::read().since(&cpu0);
        let arrival_drops = if loss > 0.0 {
            fab.dropped_on_arrival()?
        } else {
            0
        };
        let ports = fab.ports()?;
        let switch = PortCounters::sum(
            &ports
                .iter()
                .zip(&ports0)
                .map(|(a, b)| a.since(b))
                .collect::<Vec<_>>(),
        );
        let host_drops = (0..row.hosts)
            .map(|i| fab.host_queue(i).map(|q| q.drops))
            .sum::<Result<u64, String>>()?;
        Ok(FabRun {
            hosts: row.hosts,
            switch,
            host_drops,
            cpu,
            arrival_drops,
            ..run
        })
    }))
}

/// What the two-host rows measure.
struct Two {
    contend: usize,
    mbit: u64,
    lat_sizes: Vec<usize>,
    lat: (usize, usize),
    bw_sizes: Vec<usize>,
    bw: (usize, usize),
}

impl Two {
    /// Seconds a two-host row takes, roughly: 100 us a half round trip, a stream at half
    /// the link rate.
    fn estimate(&self, stream: bool) -> f64 {
        if stream {
            let bytes: usize = self.bw_sizes.iter().map(|&z| z * window_for(z)).sum();
            let rate = self.mbit as f64 * MBIT as f64 / 8.0 / 2.0;
            (self.bw.0 + self.bw.1) as f64 * bytes as f64 / rate
        } else {
            (self.lat.0 + self.lat.1) as f64 * self.lat_sizes.len() as f64 * 2.0 * 100e-6
        }
    }

    fn measure(&self, stream: bool) -> Measure {
        if stream {
            Measure::Bandwidth {
                sizes: self.bw_sizes.clone(),
                warmup: self.bw.0,
                reps: self.bw.1,
            }
        } else {
            Measure::Latency {
                sizes: self.lat_sizes.clone(),
                warmup: self.lat.0,
                iters: self.lat.1,
            }
        }
    }
}

/// The figures of a two-host row, per size: the median half round trip, or the best
/// rate of a repetition in which every byte arrived.
fn pair_points(r: &PairResult, stream: bool) -> Vec<f64> {
    r.points
        .iter()
        .map(|p| {
            if stream {
                p.best_complete_rate().unwrap_or(f64::NAN)
            } else {
                Summary::of(&p.samples).median
            }
        })
        .collect()
}

/// Runs `row` on `fab`: the median and worst superstep (or call), in seconds, the
/// two-host rows' figures per size, the single operations' spread, and the collectives'
/// algorithm and multicast counters.
fn run_row(
    s: &Suite,
    fab: &Fabric,
    row: &Row,
    warmup: usize,
    steps: usize,
    two: &Two,
) -> Result<FabRun, String> {
    let only = |median: f64, worst: f64, points: Vec<f64>, steps: Option<Spread>| FabRun {
        median,
        worst,
        points,
        steps,
        ..FabRun::default()
    };
    let n = row.hosts as u32;
    let spread;
    let (median, worst) = match &row.what {
        What::Pair { stack, stream } => {
            let spec = PairSpec {
                stack: *stack,
                measure: two.measure(*stream),
                faults: Faults::none(),
            };
            let r = pair::run_on(s.exe(), &spec, PAIR_TIMEOUT, Some(&across(s, fab)))?;
            let v = pair_points(&r, *stream);
            let first = v.first().copied().unwrap_or(f64::NAN);
            let xs = r.points.first().map_or(&[][..], |p| &p.samples[..]);
            let spread = if *stream {
                Spread::of_rates(xs)
            } else {
                Spread::of(xs)
            };
            return Ok(only(first, first, v, spread));
        }
        What::Contend {
            protocol: Some(protocol),
        } => {
            let spec = XchgSpec {
                size: CONTEND,
                warmup: 1,
                steps: two.contend,
                incast: true,
            };
            let over = Transport::udp(*protocol);
            let r: XchgResult =
                xchg::run_on(s.exe(), n, &spec, over, &[], TIMEOUT, Some(&across(s, fab)))?;
            spread = Spread::of(&r.seconds);
            (r.median(), r.worst())
        }
        What::Contend { protocol: None } => {
            let m = s.mpi().map_err(|e| format!("MPI: {e}"))?;
            let a = mpi_across(s, fab);
            let k = two.contend;
            let run = || m.run_across("gather", n, 1, k, 0.0, &[CONTEND], MPI_TIMEOUT, &a);
            // Open MPI's TCP set-up between namespaces fails now and then: one more try.
            let v: Vec<MpiPoint> = run().or_else(|_| run())?;
            let pt = v.first().ok_or("no result")?;
            spread = pt.steps;
            (pt.median, pt.max)
        }
        What::MpiPair { stream } => {
            let m = s.mpi().map_err(|e| format!("MPI: {e}"))?;
            let a = mpi_across(s, fab);
            let (kind, (w, k), window, sizes) = if *stream {
                ("bandwidth", two.bw, window_for(65536) as f64, &two.bw_sizes)
            } else {
                ("latency", two.lat, 0.0, &two.lat_sizes)
            };
            let run = || m.run_across(kind, 2, w, k, window, sizes, PAIR_TIMEOUT, &a);
            // Open MPI's TCP set-up between namespaces fails now and then: one more try.
            let v: Vec<MpiPoint> = run().or_else(|_| run())?;
            let spread = v.first().and_then(|p| p.steps);
            let v: Vec<f64> = v.iter().map(|p| p.median).collect();
            let first = v.first().copied().unwrap_or(f64::NAN);
            return Ok(only(first, first, v, spread));
        }

        What::Bsp {
            protocol,
            env,
            incast,
        } => {
            let spec = XchgSpec {
                size: SIZE,
                warmup,
                steps,
                incast: *incast,
            };
            let limit = TIMEOUT;
            let over = Transport::udp(*protocol);
            let r: XchgResult =
                xchg::run_on(s.exe(), n, &spec, over, env, limit, Some(&across(s, fab)))?;
            spread = Spread::of(&r.seconds);
            (r.median(), r.worst())
        }
        What::Coll { kind, size, mcast } => {
            let spec = CollSpec {
                kinds: vec![kind.to_string()],
                sizes: vec![*size],
                warmup,
                iters: steps,
                stack: Stack::Coll {
                    over: Transport::udp(Protocol::Holefill),
                    algo: CollAlgo::P2p,
                },
            };
            // Set either way, so that the row measures what it names whatever the shell
            // exports.
            let env: Vec<(String, String)> = mcast
                .map(|on| {
                    let v = if on { "auto" } else { "off" };
                    ("BULKWIRE_MCAST".to_string(), v.to_string())
                })
                .into_iter()
                .collect();
            let r: CollResult =
                coll::run_with(s.exe(), n, &spec, TIMEOUT, Some(&across(s, fab)), &env)?;
            let pt = r.points.first().ok_or("no result")?;
            let worst = pt.seconds.iter().copied().fold(f64::NAN, f64::max);
            if *mcast == Some(true) && r.mcast.is_none() {
                // Measured, but not what the row names: the report must not pass it off.
                return Err(format!(
                    "the job went without its multicast group ({})",
                    r.mcast_off.as_deref().unwrap_or("no reason given")
                ));
            }
            return Ok(FabRun {
                algorithm: pt.algorithm.clone(),
                mcast: r.mcast,
                ..only(
                    pt.summary().median,
                    worst,
                    Vec::new(),
                    Spread::of(&pt.seconds),
                )
            });
        }
        What::Mpi { kind, size } => {
            let m = s.mpi().map_err(|e| format!("MPI: {e}"))?;
            let a = mpi_across(s, fab);
            let run = || m.run_across(kind, n, warmup, steps, 0.0, &[*size], MPI_TIMEOUT, &a);
            // Open MPI's TCP set-up between namespaces fails now and then: one more try.
            let v: Vec<MpiPoint> = run().or_else(|_| run())?;
            let pt = v.first().ok_or("no result")?;
            spread = pt.steps;
            (pt.median, pt.max)
        }
    };
    Ok(only(median, worst, Vec::new(), spread))
}

/// Every row's single supersteps or calls, best / median / p90, from its median round:
/// one table for all parts, so that the parts' own tables keep their columns.
fn spread_table(p: &Params, mpi: Option<&str>, done: &[Done<Tag>]) -> Table {
    let mut t = Table::new(
        "Single supersteps and calls: best / median / p90",
        &["table", "row", "best / median / p90"],
        format!(
            "{SPREAD_NOTE} Of the round whose median the tables above show; two-host rows: \
             the first size's ping-pongs (us) or repetitions (MB/s: the links carry 12.5 or 125), the others in ms."
        ),
    );
    for part in parts(p) {
        let rows = rows(part, p, mpi);
        let first = table(part, p, &rows, done).title;
        for (i, r) in rows.iter().enumerate() {
            let Some(f) = combine(&runs_of(done, part, i)) else {
                continue;
            };
            let unit: fn(f64) -> String = match r.what {
                What::Pair { stream: true, .. } | What::MpiPair { stream: true } => mbs,
                What::Pair { .. } | What::MpiPair { .. } => us,
                _ => ms,
            };
            if f.steps.is_some_and(|s| s.is_measured()) {
                t.rows.push(vec![
                    first.clone(),
                    r.label.clone(),
                    spread_cell(f.steps, unit),
                ]);
            }
        }
    }
    t
}

/// One rank on each host; the launcher in the first host, the others' ranks through
/// their agents. No binding: the hosts share the machine's CPUs, as the CPU column says.
fn across(s: &Suite, fab: &Fabric) -> Across {
    Across {
        netns: fab.names[0].clone(),
        hosts: fab
            .addrs
            .iter()
            .map(|a| HostSlots {
                name: a.clone(),
                slots: 1,
            })
            .collect(),
        rsh: vec![rsh_of(s).into_os_string()],
        cpus: None,
    }
}

fn mpi_across(s: &Suite, fab: &Fabric) -> MpiAcross {
    let all = all_cpus();
    MpiAcross {
        netns: fab.names[0].clone(),
        hosts: fab.addrs.iter().map(|a| format!("{a}:1")).collect(),
        rsh: rsh_of(s),
        subnet: fab.subnet(),
        cpus: [all.clone(), all],
    }
}

fn all_cpus() -> String {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("0-{}", n - 1)
}

/// What the report's network line says when the fabric section ran.
pub const NETWORK: &str = "the fabric section: 2 to 16 network namespaces, one rank each, on a \
                           bridge whose ports are shaped by tc tbf (100 Mb/s or 1 Gb/s, 64 KiB \
                           buffers, MTU 1500, offloads off)";

/// The report's network line `here`, with the fabric's added when `sections` include it
/// and it measured something.
pub fn network_line(sections: &[Section], here: &str) -> String {
    if sections
        .iter()
        .any(|s| s.name == NAME && !s.tables.is_empty())
    {
        format!("{here}; {NETWORK}")
    } else {
        here.into()
    }
}

/// Frames of `bytes` over the multicast group: each carries the MTU less the IP, UDP and
/// bulkwire headers.
fn frames(bytes: usize) -> usize {
    bytes.div_ceil(MTU as usize - 28 - bulkwire_protocol::wire::HEADER_LEN)
}

/// Seconds of one transmission at `mbit` Mb/s of the multicast tables' `kind` at `hosts`:
/// the broadcast's 1 MiB, or the allgather's p blocks of 128 KiB one after the other (a
/// rotating sender), in full frames with preamble and gap.
pub fn wire_time(kind: &str, hosts: usize, mbit: u64) -> f64 {
    let n = if kind == "bcast" {
        frames(BCAST)
    } else {
        hosts * frames(GATHER)
    };
    (n * (MTU as usize + ETHERNET) * 8) as f64 / (mbit * MBIT) as f64
}

/// Seconds to carry (p-1) x 60 KB into one port at `mbit` Mb/s: no exchange is faster.
pub fn link_bound(hosts: usize, mbit: u64) -> f64 {
    (hosts - 1) as f64 * SIZE as f64 * 8.0 / (mbit * MBIT) as f64
}

/// Bytes per second as MB/s: the fabric's links carry 12.5 MB/s or 125.
fn mbs(x: f64) -> String {
    format!("{:.2}", x / 1e6)
}

fn ms(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}", x * 1e3)
    } else {
        "-".into()
    }
}

/// The rounds' runs of row `i` of `part`.
fn runs_of(done: &[Done<Tag>], part: Part, i: usize) -> Vec<&FabRun> {
    done.iter()
        .filter(|d| d.tag.part == part && d.tag.row == i)
        .filter_map(|d| d.own::<FabRun>())
        .collect()
}

/// A row's figures over its rounds: the median of the rounds' medians, the worst of all,
/// the drops and frames of the median round, and the busiest round's CPU use.
fn combine(runs: &[&FabRun]) -> Option<FabRun> {
    let mut v: Vec<&FabRun> = runs.to_vec();
    v.sort_by(|a, b| a.median.total_cmp(&b.median));
    let mid = *v.get(v.len() / 2)?;
    let worst = v.iter().map(|r| r.worst).fold(f64::NAN, f64::max);
    let busiest = v
        .iter()
        .map(|r| r.cpu)
        .max_by(|a, b| a.busy.total_cmp(&b.busy))
        .unwrap_or_default();
    Some(FabRun {
        worst,
        cpu: busiest,
        ..mid.clone()
    })
}

/// The rows of a table against the link bound: label, median, worst, x bound, x MPI,
/// drops, frames, CPU.
fn bound_rows(
    rows: &[Row],
    figures: &[Option<FabRun>],
    bound: f64,
    base: Option<f64>,
) -> Vec<Vec<String>> {
    rows.iter()
        .zip(figures)
        .filter_map(|(r, f)| {
            let f = f.as_ref()?;
            Some(vec![
                r.label.clone(),
                ms(f.median),
                ms(f.worst),
                format!("{:.2}x", f.median / bound),
                ratio(f.median, base),
                drops_cell(f),
                f.switch.packets.to_string(),
                cpu_cell(f.cpu),
            ])
        })
        .collect()
}

fn cpu_cell(c: CpuUse) -> String {
    let mut s = format!("{:.0} %", c.busy * 100.0);
    if c.steal >= 0.005 {
        s += &format!(" ({:.0} % steal)", c.steal * 100.0);
    }
    if c.cpu_bound() {
        s += ", CPU-bound";
    }
    s
}

fn drops_cell(r: &FabRun) -> String {
    let total = r.switch.packets + r.switch.drops;
    let pct = if total > 0 {
        100.0 * r.switch.drops as f64 / total as f64
    } else {
        0.0
    };
    let mut s = format!("{} ({pct:.2} %)", r.switch.drops);
    if r.host_drops > 0 {
        s += &format!(", {} in hosts' queues", r.host_drops);
    }
    if r.arrival_drops > 0 {
        s += &format!(", {} on arrival", r.arrival_drops);
    }
    s
}

fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && x.is_finite() => format!("{:.2}x", x / b),
        _ => "-".into(),
    }
}

fn table(part: Part, p: &Params, rows: &[Row], done: &[Done<Tag>]) -> Table {
    let figures: Vec<Option<FabRun>> = (0..rows.len())
        .map(|i| combine(&runs_of(done, part, i)))
        .collect();
    let mpi_of = |kind: &str, hosts: usize| {
        rows.iter()
            .zip(&figures)
            .find(|(r, _)| {
                r.hosts == hosts && matches!(r.what, What::Mpi { kind: k, .. } if k == kind)
            })
            .and_then(|(_, f)| f.as_ref().map(|f| f.median))
    };
    let common = format!(
        "{} supersteps (or calls) after {} untimed, the slowest process's time each; the \
         median of {} alternating round(s), and the worst superstep of all. Switch drops: \
         frames the switch's ports dropped over the whole job (start-up included), and their \
         share of the frames they forwarded and dropped. CPU: the whole machine's busy share \
         during the job (other work on it included; ranks that spin while they wait count as \
         busy); above 85 % the row is marked CPU-bound, and is about the CPUs, not the \
         network. Ports shaped by tc tbf with {} KiB buffers, MTU {MTU}, offloads off.",
        p.steps,
        p.warmup,
        p.rounds,
        DEFAULT_BUFFER / 1024
    );
    match part {
        Part::Exchange { mbit } => {
            let bound = link_bound(p.hosts, mbit);
            let mut t = Table::new(
                format!(
                    "Total exchange of 60 KB per pair at {} hosts, {mbit} Mb/s ports (ms)",
                    p.hosts
                ),
                &[
                    "stack",
                    "median",
                    "worst",
                    "x link bound",
                    "x MPI",
                    "switch drops",
                    "frames",
                    "CPU",
                ],
                format!(
                    "The link bound is (p-1) x 60 KB into one port: {} ms. BSP: one bsp_put of \
                     60 KB per destination, then bsp_sync; the schedule orders the sends \
                     (BULKWIRE_BSP_SCHEDULE), pacing caps a process's rate at the link's \
                     (BULKWIRE_BSP_RATE). {common}",
                    ms(bound),
                ),
            );
            let base = mpi_of("alltoall", p.hosts);
            t.rows.extend(bound_rows(rows, &figures, bound, base));
            t
        }
        Part::Coll => {
            let mut t = Table::new(
                format!(
                    "Collectives of 60 KB blocks at {} hosts, 100 Mb/s ports (ms)",
                    p.hosts
                ),
                &[
                    "collective",
                    "median",
                    "worst",
                    "x MPI",
                    "switch drops",
                    "frames",
                    "CPU",
                ],
                format!(
                    "bulkwire.h's point-to-point algorithms over holefill/udp against Open \
                     MPI's over TCP; 60 KB per block (alltoall: per pair). Calls, not \
                     supersteps: {common}"
                ),
            );
            for (r, f) in rows.iter().zip(&figures) {
                let Some(f) = f else { continue };
                let kind = match r.what {
                    What::Coll { kind, .. } | What::Mpi { kind, .. } => kind,
                    What::Bsp { .. }
                    | What::Pair { .. }
                    | What::MpiPair { .. }
                    | What::Contend { .. } => continue,
                };
                t.rows.push(vec![
                    r.label.clone(),
                    ms(f.median),
                    ms(f.worst),
                    ratio(f.median, mpi_of(kind, p.hosts)),
                    drops_cell(f),
                    f.switch.packets.to_string(),
                    cpu_cell(f.cpu),
                ]);
            }
            t
        }
        Part::Incast => {
            let bound = link_bound(p.hosts, 100);
            let mut t = Table::new(
                format!(
                    "Incast: {} senders of 60 KB each into one host's 100 Mb/s port (ms)",
                    p.hosts - 1
                ),
                &[
                    "stack",
                    "median",
                    "worst",
                    "x link bound",
                    "x MPI",
                    "switch drops",
                    "frames",
                    "CPU",
                ],
                format!(
                    "The gather and reduce pattern of the collectives: every process but one \
                     puts 60 KB to it, then bsp_sync (MPI: MPI_Gather of 60 KB blocks). The \
                     link bound is (p-1) x 60 KB into the one port: {} ms. {common}",
                    ms(bound)
                ),
            );
            let base = mpi_of("gather", p.hosts);
            t.rows.extend(bound_rows(rows, &figures, bound, base));
            t
        }
        Part::Pair { mbit, stream } => pair_table(mbit, stream, p, rows, &figures),
        Part::Mcast { .. } | Part::McastHosts => {
            mcast_table(part, p, rows, &figures, done, &common)
        }
        Part::Contend => {
            let bound = 2.0 * CONTEND as f64 * 8.0 / (100 * MBIT) as f64;
            let mut t = Table::new(
                "Two-to-one: two hosts stream 256 KiB each into a third's 100 Mb/s port",
                &[
                    "stack",
                    "median (ms)",
                    "worst (ms)",
                    "per sender (MB/s, x fair share)",
                    "x MPI",
                    "switch drops",
                    "frames",
                    "CPU",
                ],
                format!(
                    "Processes 1 and 2 each bsp_put 256 KiB to process 0, then bsp_sync \
                     (MPI: MPI_Gather of 256 KiB blocks at 3 processes); {} supersteps \
                     (calls) after 1 untimed. Per sender: its 256 KiB over the superstep; \
                     the fair share is half the link's 12.5 MB/s. The link bound is 512 KiB \
                     into the one port: {} ms. Switch drops and CPU as in the tables above.",
                    p.contend,
                    ms(bound)
                ),
            );
            let base = rows
                .iter()
                .zip(&figures)
                .find(|(r, _)| matches!(r.what, What::Contend { protocol: None }))
                .and_then(|(_, f)| f.as_ref().map(|f| f.median));
            for (r, f) in rows.iter().zip(&figures) {
                let Some(f) = f else { continue };
                let bw = CONTEND as f64 / f.median;
                let fair = (100 * MBIT) as f64 / 8.0 / 2.0;
                t.rows.push(vec![
                    r.label.clone(),
                    ms(f.median),
                    ms(f.worst),
                    format!("{:.2} ({:.2})", bw / 1e6, bw / fair),
                    ratio(f.median, base),
                    drops_cell(f),
                    f.switch.packets.to_string(),
                    cpu_cell(f.cpu),
                ]);
            }
            t
        }
        Part::Fig3 => {
            let mut t = Table::new(
                "All-to-all of 60 KB messages against p, 100 Mb/s ports: per-node bandwidth \
                 (the RMPP paper's Fig. 3)",
                &[
                    "p",
                    "stack",
                    "MB/s per node",
                    "x link",
                    "median (ms)",
                    "switch drops",
                    "CPU",
                ],
                format!(
                    "Per-node bandwidth: the (p-1) x 60 KB a process sends in the median \
                     superstep (MPI: call), over its time; the link carries 12.5 MB/s. \
                     {common}"
                ),
            );
            for (r, f) in rows.iter().zip(&figures) {
                let Some(f) = f else { continue };
                let bw = (r.hosts - 1) as f64 * SIZE as f64 / f.median;
                t.rows.push(vec![
                    r.hosts.to_string(),
                    r.label.clone(),
                    format!("{:.2}", bw / 1e6),
                    format!("{:.2}", bw * 8.0 / (100 * MBIT) as f64),
                    ms(f.median),
                    drops_cell(f),
                    cpu_cell(f.cpu),
                ]);
            }
            t
        }
    }
}

/// The figures of the row of `rows` at `hosts` doing `kind` as `pick` says.
fn base_of(
    rows: &[Row],
    figures: &[Option<FabRun>],
    hosts: usize,
    kind: &str,
    pick: impl Fn(&What) -> bool,
) -> Option<f64> {
    rows.iter()
        .zip(figures)
        .find(|(r, _)| {
            r.hosts == hosts
                && matches!(r.what, What::Coll { kind: k, .. } | What::Mpi { kind: k, .. } if k == kind)
                && pick(&r.what)
        })
        .and_then(|(_, f)| f.as_ref().map(|f| f.median))
}

/// The multicast tables: broadcast and allgather at the level's hosts (with or without
/// loss), or the broadcast against p; each row against one transmission's wire time, MPI
/// and the point-to-point algorithms.
fn mcast_table(
    part: Part,
    p: &Params,
    rows: &[Row],
    figures: &[Option<FabRun>],
    done: &[Done<Tag>],
    common: &str,
) -> Table {
    let loss = matches!(part, Part::Mcast { loss: true, .. });
    let sweep = part == Part::McastHosts;
    let mbit = mbit_of(part);
    let mut header = vec![
        "stack",
        "median",
        "worst",
        "x wire time",
        "x MPI",
        "x unicast",
    ];
    if sweep {
        header.insert(0, "p");
    }
    if loss {
        header.push("x lossless");
    }
    header.extend(["switch drops", "repairs / NACKs", "algorithm", "CPU"]);
    let title = if sweep {
        "Broadcast of 1 MiB against p over IP multicast, 100 Mb/s ports (ms)".to_string()
    } else {
        format!(
            "Broadcast of 1 MiB and allgather of 128 KiB blocks over IP multicast at {} hosts, \
             {mbit} Mb/s ports{} (ms)",
            p.hosts,
            if loss {
                format!(", {:.0} % of frames lost on arrival", LOSS * 100.0)
            } else {
                String::new()
            }
        )
    };
    let lossy = if loss {
        format!(
            " Loss: every host drops {:.0} % of the frames that reach it from the switch, at \
             random, whatever they carry (an iptables statistic rule in its INPUT chain), so \
             MPI's TCP loses as many as bulkwire's datagrams; the drops column counts them \
             (\"on arrival\"). x lossless: against the same row of the table without loss.",
            LOSS * 100.0
        )
    } else {
        String::new()
    };
    let note = if sweep {
        format!(
            "The broadcast of the first multicast table at each p: 1 MiB from rank 0, \
             {} ms of wire time. The group needs three processes: at p = 2 the \
             collectives keep their point-to-point algorithms (the algorithm column says \
             which). Columns as in that table. {common}",
            ms(wire_time("bcast", 2, mbit)),
        )
    } else {
        format!(
            "bulkwire.h's broadcast (1 MiB from rank 0) and allgather (128 KiB per process), \
             over the job's IP multicast group as the collectives take it by default \
             (BULKWIRE_MCAST=auto: the job spans hosts and the group reaches them all; a \
             rotating sender for the allgather), and over the point-to-point algorithms \
             (BULKWIRE_MCAST=off), both over holefill/udp, beside Open MPI's MPI_Bcast and \
             MPI_Allgather over TCP. Wire time: one transmission at {mbit} Mb/s in MTU-{MTU} \
             frames of {} bytes of payload (IP, UDP and bulkwire's header taken off), {} \
             bytes each on the wire with Ethernet's header, preamble and gap: {} ms for the \
             broadcast, p x that of 128 KiB for the allgather ({} ms at {} hosts). Repairs / \
             NACKs: packets the roots sent again and NACKs the receivers sent, summed over \
             the processes and the whole job (warm-up included; \"-\": no multicast group). \
             Algorithm: the collectives' choice for the last call.{lossy} {common}",
            MTU as usize - 28 - bulkwire_protocol::wire::HEADER_LEN,
            MTU as usize + ETHERNET,
            ms(wire_time("bcast", p.hosts, mbit)),
            ms(wire_time("allgather", p.hosts, mbit)),
            p.hosts,
        )
    };
    let mut t = Table::new(title, &header, note);
    let clean: Vec<Option<FabRun>> = (0..rows.len())
        .map(|i| {
            let clean = Part::Mcast { mbit, loss: false };
            combine(&runs_of(done, clean, i))
        })
        .collect();
    for (i, (r, f)) in rows.iter().zip(figures).enumerate() {
        let Some(f) = f else { continue };
        let (What::Coll { kind, .. } | What::Mpi { kind, .. }) = r.what else {
            continue;
        };
        let mpi = base_of(rows, figures, r.hosts, kind, |w| {
            matches!(w, What::Mpi { .. })
        });
        let unicast = base_of(rows, figures, r.hosts, kind, |w| {
            matches!(
                w,
                What::Coll {
                    mcast: Some(false),
                    ..
                }
            )
        });
        let mut cells = Vec::new();
        if sweep {
            cells.push(r.hosts.to_string());
        }
        cells.extend([
            r.label.clone(),
            ms(f.median),
            ms(f.worst),
            format!("{:.2}x", f.median / wire_time(kind, r.hosts, mbit)),
            ratio(f.median, mpi),
            ratio(f.median, unicast),
        ]);
        if loss {
            let base = clean.get(i).and_then(|c| c.as_ref().map(|c| c.median));
            cells.push(ratio(f.median, base));
        }
        cells.extend([
            drops_cell(f),
            f.mcast
                .map_or_else(|| "-".into(), |m| format!("{} / {}", m.repairs, m.nacks)),
            if f.algorithm.is_empty() {
                "-".into()
            } else {
                f.algorithm.clone()
            },
            cpu_cell(f.cpu),
        ]);
        t.rows.push(cells);
    }
    t
}

/// Two hosts at `mbit`: the half round trip, or the streaming rate as a share of the
/// link's, per size, each against Open MPI's.
fn pair_table(
    mbit: u64,
    stream: bool,
    p: &Params,
    rows: &[Row],
    figures: &[Option<FabRun>],
) -> Table {
    let sizes = if stream { &p.bw_sizes } else { &p.lat_sizes };
    let link = (mbit * MBIT) as f64 / 8.0;
    let mut header = vec!["stack".to_string()];
    for &z in sizes {
        header.push(if stream {
            format!("{} (MB/s, x link, x MPI)", size_label(z))
        } else {
            format!("{} (us, x MPI)", size_label(z))
        });
    }
    header.extend(["switch drops".into(), "CPU".into()]);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let common = format!(
        "One rank in each of two hosts; {} round(s), the figures of the median round. \
         Switch drops and CPU as in the tables above. Ports shaped by tc tbf with {} KiB \
         buffers, MTU {MTU}, offloads off.",
        p.rounds,
        DEFAULT_BUFFER / 1024
    );
    let mut t = if stream {
        Table::new(
            format!("Streaming bandwidth between two hosts, {mbit} Mb/s ports"),
            &header,
            format!(
                "Windows of {} messages then an acknowledgement, {} repetition(s) after {} \
                 untimed; the best repetition in which every byte arrived (Open MPI: the \
                 median repetition of MPI_Isend windows). x link: the rate over the link's \
                 {:.1} MB/s. {common}",
                window_for(65536),
                p.bw.1,
                p.bw.0,
                link / 1e6
            ),
        )
    } else {
        Table::new(
            format!("Half round trip between two hosts, {mbit} Mb/s ports"),
            &header,
            format!(
                "Median of {} ping-pongs after {} untimed (Open MPI: MPI_Send and MPI_Recv). \
                 {common}",
                p.lat.1, p.lat.0
            ),
        )
    };
    let mpi: Option<&Vec<f64>> = rows
        .iter()
        .zip(figures)
        .find(|(r, _)| matches!(r.what, What::MpiPair { .. }))
        .and_then(|(_, f)| f.as_ref().map(|f| &f.points));
    for (r, f) in rows.iter().zip(figures) {
        let Some(f) = f else { continue };
        let mut cells = vec![r.label.clone()];
        for i in 0..sizes.len() {
            let x = f.points.get(i).copied().unwrap_or(f64::NAN);
            let base = mpi.and_then(|m| m.get(i).copied());
            cells.push(if !x.is_finite() {
                "-".into()
            } else if stream {
                format!("{:.2} ({:.2}, {})", x / 1e6, x / link, ratio(x, base))
            } else {
                format!("{:.1} ({})", x * 1e6, ratio(x, base))
            });
        }
        cells.push(drops_cell(f));
        cells.push(cpu_cell(f.cpu));
        t.rows.push(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::plan::{Outcome, Output, Own, Work};
    use crate::suite::Level;

    fn suite(level: Level) -> Suite {
        Suite::new(
            PathBuf::from("/nonexistent/bwbench"),
            level,
            std::env::temp_dir(),
        )
    }

    #[test]
    fn the_network_line_names_the_fabric_when_it_ran() {
        let mut sec = Section::new(NAME, "t");
        assert_eq!(network_line(&[sec.clone()], "loopback"), "loopback");
        sec.tables.push(Table::new("t", &["a"], ""));
        let line = network_line(&[sec], "loopback");
        assert!(
            line.starts_with("loopback; the fabric section: 2 to 16"),
            "{line}"
        );
    }

    #[test]
    fn one_transmission_of_the_multicast_tables() {
        // 745 frames of 1408 bytes, 1538 bytes each on the wire, at 100 Mb/s.
        assert!((wire_time("bcast", 8, 100) - 745.0 * 1538.0 * 8.0 / 1e8).abs() < 1e-12);
        assert!((wire_time("bcast", 8, 1000) - 745.0 * 1538.0 * 8.0 / 1e9).abs() < 1e-12);
        // 8 blocks of 94 frames.
        assert!((wire_time("allgather", 8, 100) - 752.0 * 1538.0 * 8.0 / 1e8).abs() < 1e-12);
    }

    #[test]
    fn only_keeps_the_named_parts() {
        let s = suite(Level::Quick).with_only(vec!["mcast".into()]);
        let p = params(&s);
        let gig = Part::Mcast {
            mbit: 1000,
            loss: false,
        };
        assert_eq!(
            chosen(&s, &p),
            [
                Part::Mcast {
                    mbit: 100,
                    loss: false
                },
                Part::Mcast {
                    mbit: 100,
                    loss: true
                },
                gig,
                Part::McastHosts
            ]
        );
        // "mcast1g" takes the 1 Gb/s table alone; the smoke level has none.
        let one = suite(Level::Quick).with_only(vec!["mcast1g".into()]);
        assert_eq!(chosen(&one, &p), [gig]);
        let smoke = suite(Level::Smoke).with_only(vec!["mcast".into()]);
        assert!(!chosen(&smoke, &params(&smoke)).contains(&gig));
        let plan = plan_runs(&one, Err("none".into()), Ok(()));
        assert_eq!(plan.runs.len(), 2 * 2 * p.rounds);
        assert!(
            plan.skipped
                .iter()
                .any(|k| k.ends_with("pair, mcast: left out by --only")),
            "{:?}",
            plan.skipped
        );
        let plan = plan_runs(&s, Err("none".into()), Ok(()));
        assert!(
            plan.skipped
                .iter()
                .any(|k| k.starts_with("exchange, coll, fig3") && k.ends_with("--only")),
            "{:?}",
            plan.skipped
        );
        // Every run is one of the multicast tables', without MPI: 2 rows per collective.
        assert_eq!(plan.runs.len(), (3 * 2 * 2 + 2 * 3) * p.rounds);
        // Without iptables, the lossy table is left out and the plan says why.
        let plan = plan_runs(&s, Err("none".into()), Err("no `iptables`".into()));
        assert_eq!(plan.runs.len(), (2 * 2 * 2 + 2 * 3) * p.rounds);
        assert!(
            plan.skipped
                .iter()
                .any(|k| k == "Broadcast and allgather with 1 % of frames lost: no `iptables`"),
            "{:?}",
            plan.skipped
        );
    }

    #[test]
    fn the_link_bound_is_the_papers() {
        // 7 x 60 KB into a 100 Mb/s port: 33.6 ms.
        assert!((link_bound(8, 100) - 0.0336).abs() < 1e-9);
        assert!((link_bound(8, 1000) - 0.00336).abs() < 1e-9);
    }

    #[test]
    fn without_the_bed_everything_is_skipped_with_the_reason() {
        let plan = FabricExperiment.plan(&suite(Level::Quick));
        assert!(plan.runs.is_empty());
        assert!(
            plan.skipped[0].starts_with("everything: "),
            "{:?}",
            plan.skipped
        );
    }

    #[test]
    fn the_plan_and_the_report_agree() {
        for level in [Level::Smoke, Level::Quick, Level::Full] {
            let s = suite(level);
            let p = params(&s);
            let plan = plan_runs(&s, Ok("Open MPI 4.1.4".into()), Ok(()));
            let per_round: usize = parts(&p)
                .iter()
                .map(|&part| rows(part, &p, Some("Open MPI 4.1.4")).len())
                .sum();
            assert_eq!(plan.runs.len(), per_round * p.rounds);
            let done: Vec<Done<Tag>> = plan
                .runs
                .into_iter()
                .map(|r| {
                    let Work::One(_) = r.work else {
                        panic!("{}", r.label)
                    };
                    // MPI's rows take 2x the BSP rows' time; every row drops 10 of 990.
                    let mpi = r.label.contains("Open MPI");
                    let median = if mpi { 0.08 } else { 0.04 };
                    let run = FabRun {
                        hosts: 8,
                        median,
                        worst: 2.0 * median,
                        switch: PortCounters {
                            packets: 990,
                            bytes: 0,
                            drops: 10,
                        },
                        host_drops: 0,
                        steps: None,
                        cpu: CpuUse {
                            busy: 0.9,
                            steal: 0.0,
                        },
                        // Streams at 6 and 11 MB/s, half round trips of 40 and 80 ms.
                        points: if matches!(r.tag.part, Part::Pair { stream: true, .. }) {
                            vec![6e6, 11e6]
                        } else {
                            vec![median, 2.0 * median]
                        },
                        // The multicast rows repaired 3 packets on 2 NACKs.
                        mcast: r.label.contains("multicast").then_some(McastCounts {
                            repairs: 3,
                            nacks: 2,
                            ..McastCounts::default()
                        }),
                        algorithm: if r.label.contains("multicast") {
                            "Multicast".into()
                        } else {
                            String::new()
                        },
                        ..FabRun::default()
                    };
                    Done {
                        label: r.label,
                        tag: r.tag,
                        result: Ok(Output::One(Box::new(Outcome::Own(Own(Arc::new(run)))))),
                        seconds: 1.0,
                        estimate: 1.0,
                        jobs: 1,
                    }
                })
                .collect();
            let sec = FabricExperiment.report(&s, &done);
            assert_eq!(sec.tables.len(), parts(&p).len());
            for t in &sec.tables {
                for r in &t.rows {
                    assert_eq!(r.len(), t.header.len(), "{}: {r:?}", t.title);
                }
            }
            // The exchange at 100 Mb/s: BSP at half MPI's time, drops 1 %, CPU-bound.
            let x = &sec.tables[0];
            assert_eq!(x.rows[0][1], "40.0");
            assert_eq!(x.rows[0][4], "0.50x");
            assert_eq!(x.rows[0][5], "10 (1.00 %)");
            assert_eq!(x.rows[0][7], "90 %, CPU-bound");
            // Two hosts at 100 Mb/s: a share of the link's 12.5 MB/s, and MPI's figures
            // as the base (the same here, and at twice the time for the ping-pong).
            let bw = sec
                .tables
                .iter()
                .find(|t| {
                    t.title
                        .starts_with("Streaming bandwidth between two hosts, 100 Mb/s")
                })
                .unwrap();
            assert_eq!(bw.rows.len(), 6);
            assert_eq!(bw.rows[2][0], "holefill/udp");
            assert_eq!(bw.rows[2][1], "6.00 (0.48, 1.00x)");
            if p.bw_sizes.len() > 1 {
                assert_eq!(bw.rows[2][2], "11.00 (0.88, 1.00x)");
            }
            let lat = sec
                .tables
                .iter()
                .find(|t| {
                    t.title
                        .starts_with("Half round trip between two hosts, 1000 Mb/s")
                })
                .unwrap();
            assert_eq!(lat.rows[0][1], "40000.0 (0.50x)");
            // Two senders into one port: 256 KiB each over 40 ms.
            let two = sec
                .tables
                .iter()
                .find(|t| t.title.starts_with("Two-to-one"))
                .unwrap();
            assert_eq!(two.rows.len(), 4);
            assert_eq!(two.rows[0][3], "6.55 (1.05)");
            assert_eq!(two.rows[0][4], "0.50x");
            // Multicast: 40 ms against one transmission of 1 MiB (91.7 ms), MPI's 80 ms and
            // unicast's 40 ms; with loss, against the lossless row too.
            let lossy = sec
                .tables
                .iter()
                .find(|t| t.title.contains("1 % of frames lost on arrival"))
                .unwrap();
            assert_eq!(lossy.rows.len(), 6);
            let r = &lossy.rows[0];
            assert_eq!(r[0], "bulkwire.h broadcast, multicast (default)");
            assert_eq!(&r[3..7], ["0.44x", "0.50x", "1.00x", "1.00x"]);
            assert_eq!(r[8], "3 / 2");
            assert_eq!(r[9], "Multicast");
            assert_eq!(lossy.rows[1][8], "-");
            let sweep = sec
                .tables
                .iter()
                .find(|t| t.title.starts_with("Broadcast of 1 MiB against p"))
                .unwrap();
            assert_eq!(sweep.rows.len(), 3 * p.mcast_hosts.len());
            assert_eq!(sweep.rows[0][0], p.mcast_hosts[0].to_string());
            // At 1 Gb/s (not at smoke level): 40 ms against one transmission's 9.2 ms.
            let gig = sec
                .tables
                .iter()
                .find(|t| t.title.contains("multicast at 8 hosts, 1000 Mb/s"));
            assert_eq!(gig.is_some(), p.gigabit);
            if let Some(gig) = gig {
                assert_eq!(gig.rows.len(), 6);
                assert_eq!(&gig.rows[0][3..6], ["4.36x", "0.50x", "1.00x"]);
            }
        }
    }
}
