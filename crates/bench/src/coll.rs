//! Collective latency, OSU-style (`osu_bcast`, `osu_alltoall`, ...): for each size, a
//! warm-up, then iterations of barrier / time one call / the slowest process's time
//! (a max-reduce to rank 0), exactly as `c/mpi_harness.c` measures the user's MPI, so the
//! two sit side by side in one table. Like [`crate::group`], a spec goes to worker
//! processes of the calling program (which must hand `__coll` arguments to
//! [`worker_main`]), and rank 0 writes the result.
//!
//! Sizes mean what they mean to the harness: bytes per process for barrier (ignored),
//! broadcast and the per-process block of scatter, gather, allgather and alltoall;
//! reduce and allreduce reduce `size / 8` doubles (at least one) with a sum.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use bulkwire_collectives::{Coll, Op};
use bulkwire_p2p::Comm;
use serde::{Deserialize, Serialize};

use crate::jobs;
use crate::stack::{Faults, Stack};
use crate::stats::Summary;

/// The collectives measured, by the harness's names.
pub const KINDS: &[&str] = &[
    "barrier",
    "bcast",
    "scatter",
    "gather",
    "allgather",
    "alltoall",
    "reduce",
    "allreduce",
];

/// One collective-latency experiment over p processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollSpec {
    /// Some of [`KINDS`], measured one after the other in the same job.
    pub kinds: Vec<String>,
    pub sizes: Vec<usize>,
    pub warmup: usize,
    pub iters: usize,
    /// How the collectives are carried (the workers' environment comes from it).
    pub stack: Stack,
}

/// Per collective and size, the slowest process's seconds per call, one per iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollPoint {
    pub kind: String,
    pub size: usize,
    pub seconds: Vec<f64>,
    /// The algorithm of the last timed call (`Coll::last_algorithm`, e.g. `Multicast`).
    #[serde(default)]
    pub algorithm: String,
}

impl CollPoint {
    pub fn summary(&self) -> Summary {
        Summary::of(&self.seconds)
    }
}

/// What rank 0 reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollResult {
    pub spec: CollSpec,
    pub nprocs: u32,
    /// Whether the network cache carried the collective (all processes on one host and
    /// not `BULKWIRE_COLL=p2p`).
    pub netcache: bool,
    /// The transport protocol under p2p.
    pub protocol: String,
    pub points: Vec<CollPoint>,
    /// The multicast group's counters over the whole job, summed over the processes;
    /// `None` when the job had no group.
    #[serde(default)]
    pub mcast: Option<McastCounts>,
    /// Why the job went without its multicast group, where it tried one.
    #[serde(default)]
    pub mcast_off: Option<String>,
}

/// What the job's reliable multicast did, summed over its processes (warm-up included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastCounts {
    /// Data packets the roots multicast the first time.
    pub data_sent: u64,
    /// Packets the roots sent again, to the group or to one receiver.
    pub repairs: u64,
    /// NACKs the receivers sent, and those they kept back because another's came first.
    pub nacks: u64,
    pub nacks_suppressed: u64,
}

/// Runs `spec` as a job of `n` processes of `exe` (which passes `__coll` arguments to
/// [`worker_main`]).
pub fn run(exe: &Path, n: u32, spec: &CollSpec, timeout: Duration) -> Result<CollResult, String> {
    run_on(exe, n, spec, timeout, None)
}

/// [`run`], the processes spread over the hosts of `across` when it is given.
pub fn run_on(
    exe: &Path,
    n: u32,
    spec: &CollSpec,
    timeout: Duration,
    across: Option<&jobs::Across>,
) -> Result<CollResult, String> {
    run_with(exe, n, spec, timeout, across, &[])
}

/// [`run_on`] with `env` added to the stack's settings.
pub fn run_with(
    exe: &Path,
    n: u32,
    spec: &CollSpec,
    timeout: Duration,
    across: Option<&jobs::Across>,
    env: &[(String, String)],
) -> Result<CollResult, String> {
    if let Some(k) = spec.kinds.iter().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(format!("unknown collective {k:?}"));
    }
    if !matches!(spec.stack, Stack::Coll { .. }) {
        return Err(format!("{}: not a collectives stack", spec.stack.label()));
    }
    let job = jobs::Job {
        n,
        mode: "__coll",
        stack: &spec.stack,
        faults: &Faults::none(),
        timeout,
        across,
        env,
    };
    jobs::run(exe, &job, spec)
}

/// One call of `kind` with `size` (see the module documentation).
fn call(c: &Coll, kind: &str, size: usize, b: &mut Bufs) -> Result<(), String> {
    let p = c.comm().size() as usize;
    let r = match kind {
        "barrier" => c.barrier(),
        "bcast" => c.broadcast(&mut b.send[..size], 0),
        "scatter" => c.scatter(&b.send[..size * p], &mut b.recv[..size], 0),
        "gather" => c.gather(&b.send[..size], &mut b.recv[..size * p], 0),
        "allgather" => c.allgather(&b.send[..size], &mut b.recv[..size * p]),
        "alltoall" => c.alltoall(&b.send[..size * p], &mut b.recv[..size * p]),
        "reduce" => {
            let k = (size / 8).max(1);
            c.reduce(&b.dsend[..k], &mut b.drecv[..k], &Op::Sum, 0)
        }
        "allreduce" => {
            let k = (size / 8).max(1);
            c.allreduce(&b.dsend[..k], &mut b.drecv[..k], &Op::Sum)
        }
        other => return Err(format!("unknown collective {other:?}")),
    };
    r.map_err(|e| format!("{kind} of {size}: {e}"))
}

struct Bufs {
    send: Vec<u8>,
    recv: Vec<u8>,
    dsend: Vec<f64>,
    drecv: Vec<f64>,
}

/// The worker side of [`run`]: `__coll SPEC_JSON OUT_PATH`.
pub fn worker_main(args: &[OsString]) -> Result<(), String> {
    let w = jobs::Worker::<CollSpec>::parse(args)?;
    let s = jobs::settings()?;
    let comm = Comm::init(&s.launch, s.p2p).map_err(|e| e.to_string())?;
    let res = measure(&comm, &w.spec, s.coll).and_then(|r| {
        if comm.rank() == 0 {
            w.write(&r)?;
        }
        Ok(())
    });
    res.and_then(|()| comm.finalize().map_err(|e| e.to_string()))
}

fn measure(
    comm: &Comm,
    spec: &CollSpec,
    cfg: bulkwire_collectives::Config,
) -> Result<CollResult, String> {
    let c = Coll::new(comm, cfg).map_err(|e| e.to_string())?;
    let (me, p) = (comm.rank(), comm.size() as usize);
    let most = spec.sizes.iter().copied().max().unwrap_or(0);
    let mut b = Bufs {
        send: vec![me as u8 + 1; most * p],
        recv: vec![0; most * p],
        dsend: vec![me as f64; (most / 8).max(1)],
        drecv: vec![0.0; (most / 8).max(1)],
    };
    let mut points = Vec::new();
    for kind in &spec.kinds {
        for &size in &spec.sizes {
            let (seconds, algorithm) = time(&c, kind, size, spec, &mut b)?;
            points.push(CollPoint {
                kind: kind.clone(),
                size,
                seconds,
                algorithm,
            });
        }
    }
    let netcache = c.uses_netcache();
    let mcast = mcast_counts(&c)?;
    Ok(CollResult {
        spec: spec.clone(),
        nprocs: p as u32,
        netcache,
        protocol: comm.protocol_name().to_string(),
        points,
        mcast,
        mcast_off: comm.mcast_off().map(str::to_string),
    })
}

/// The multicast group's counters summed over the processes (at rank 0), if the job has
/// a group: every process has one or none, so the reduction is collective.
fn mcast_counts(c: &Coll) -> Result<Option<McastCounts>, String> {
    let Some((s, _)) = c.comm().mcast_stats() else {
        return Ok(None);
    };
    let mine = [
        s.data_sent as f64,
        (s.repairs_group + s.repairs_unicast) as f64,
        s.nacks_sent as f64,
        s.nacks_suppressed as f64,
    ];
    let mut sum = [0.0f64; 4];
    c.reduce(&mine, &mut sum, &Op::Sum, 0)
        .map_err(|e| e.to_string())?;
    Ok(Some(McastCounts {
        data_sent: sum[0] as u64,
        repairs: sum[1] as u64,
        nacks: sum[2] as u64,
        nacks_suppressed: sum[3] as u64,
    }))
}

/// `spec.iters` timed calls of `kind` with `size` after `spec.warmup` untimed ones, and
/// the algorithm of the last.
fn time(
    c: &Coll,
    kind: &str,
    size: usize,
    spec: &CollSpec,
    b: &mut Bufs,
) -> Result<(Vec<f64>, String), String> {
    let mut seconds = Vec::with_capacity(spec.iters);
    let mut algorithm = String::new();
    for i in 0..spec.warmup + spec.iters {
        c.barrier().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        call(c, kind, size, b)?;
        let dt = [t0.elapsed().as_secs_f64()];
        // Before the reduce below, which is a collective call of its own.
        algorithm = format!("{:?}", c.last_algorithm());
        let mut worst = [0.0f64];
        c.reduce(&dt, &mut worst, &Op::Max, 0)
            .map_err(|e| e.to_string())?;
        if i >= spec.warmup {
            seconds.push(worst[0]);
        }
    }
    Ok((seconds, algorithm))
}
