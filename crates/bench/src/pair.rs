//! Two-process experiments: a spec says which stack and what to measure; [`run`] launches
//! two processes of a program that hands its arguments to [`worker_main`], and reads back
//! what rank 0 measured.

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use bulkwire_engine::job::{self, JobConfig};
use bulkwire_engine::{Transport, WaitPolicy};
use bulkwire_launch::{Card, Control};
use bulkwire_link::Rank;
use bulkwire_link::{Faulty, UdpLink};
use bulkwire_protocol::PeerStats;
use serde::{Deserialize, Serialize};

use crate::jobs;
use crate::kernels::{self, Role};
use crate::p2pk;
use crate::raw::{self, RawChannel, RawTcp, RawUdp};
pub use crate::stack::Stack;
use crate::stack::{self, Faults, RawLink};

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Measure {
    /// Ping-pong half round trips, per size.
    Latency {
        sizes: Vec<usize>,
        warmup: usize,
        iters: usize,
    },
    /// Streaming bandwidth (a window of messages, then an acknowledgement), per size.
    Bandwidth {
        sizes: Vec<usize>,
        warmup: usize,
        reps: usize,
    },
    /// Riesen & Maccabe's overlap: pre-post a receive, compute for `compute_ms`, wait; the waits.
    /// Point-to-point stacks only.
    Overlap {
        sizes: Vec<usize>,
        compute_ms: u64,
        reps: usize,
    },
}

/// The OSU window: 64 messages, fewer for very large ones so a repetition stays near
/// 64 MiB.
pub fn window_for(size: usize) -> usize {
    if size <= 1 << 20 {
        64
    } else {
        ((64usize << 20) / size).max(4)
    }
}

/// One two-process experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairSpec {
    pub stack: Stack,
    pub measure: Measure,
    /// Injected on receive (`BULKWIRE_FAULTS` syntax in JSON; empty for none).
    pub faults: Faults,
}

/// The measurements at one message size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub size: usize,
    /// Latency: seconds per half round trip. Bandwidth: bytes per second.
    pub samples: Vec<f64>,
    /// Bandwidth: bytes the receiver got / bytes sent, over all repetitions.
    pub delivered: Option<f64>,
    /// Bandwidth: per repetition, whether every byte arrived (empty for latency).
    #[serde(default)]
    pub complete: Vec<bool>,
}

impl Point {
    /// Bandwidth: the best rate of a repetition in which every byte arrived. Interference
    /// on a shared machine only ever slows a repetition down, so the best one is the
    /// closest to what the stack itself can do; a repetition that lost datagrams waited
    /// for its idle timeout and says nothing about the link.
    pub fn best_complete_rate(&self) -> Option<f64> {
        self.samples
            .iter()
            .zip(&self.complete)
            .filter(|(_, c)| **c)
            .map(|(x, _)| *x)
            .reduce(f64::max)
    }
}

/// Protocol counters of rank 0 toward rank 1 after the experiment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub data_sent: u64,
    pub data_received: u64,
    pub control_sent: u64,
    pub control_received: u64,
    pub retransmits: u64,
    pub drops: u64,
    /// Retransmission timeouts, prods and explicit acks received: how losses were found.
    #[serde(default)]
    pub timeouts: u64,
    #[serde(default)]
    pub prods_received: u64,
    #[serde(default)]
    pub acks_received: u64,
    /// Smoothed round trip at the end, ns.
    #[serde(default)]
    pub srtt_ns: u64,
}

impl From<&PeerStats> for Counters {
    fn from(s: &PeerStats) -> Counters {
        Counters {
            data_sent: s.data_sent,
            data_received: s.data_received,
            control_sent: s.control_sent,
            control_received: s.control_received,
            retransmits: s.retransmits,
            drops: s.drops(),
            timeouts: s.timeouts,
            prods_received: s.prods_received,
            acks_received: s.acks_received,
            srtt_ns: s.srtt_ns,
        }
    }
}

/// What rank 0 reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    pub spec: PairSpec,
    pub points: Vec<Point>,
    pub counters: Option<Counters>,
}

/// Runs `spec` as a job of two processes of `exe`, which must call [`worker_main`] with
/// the arguments after its first.
pub fn run(exe: &Path, spec: &PairSpec, timeout: Duration) -> Result<PairResult, String> {
    run_on(exe, spec, timeout, None)
}

/// [`run`], one process on each host of `across` when it is given.
pub fn run_on(
    exe: &Path,
    spec: &PairSpec,
    timeout: Duration,
    across: Option<&jobs::Across>,
) -> Result<PairResult, String> {
    check(&spec.stack)?;
    let job = jobs::Job {
        n: 2,
        mode: "__pair",
        stack: &spec.stack,
        faults: &spec.faults,
        timeout,
        across,
        env: &[],
    };
    jobs::run(exe, &job, spec).map_err(|e| format!("{}: {e}", spec.stack.label()))
}

/// The stacks a pair measures: raw sockets, a transport, or the point-to-point library.
fn check(stack: &Stack) -> Result<(), String> {
    match stack {
        Stack::Raw { .. } | Stack::Proto(_) | Stack::P2p { .. } => Ok(()),
        other => Err(format!(
            "{}: a pair experiment measures raw sockets, a transport or p2p",
            other.label()
        )),
    }?;
    stack.transport().map_or(Ok(()), |t| t.check().map(|_| ()))
}

/// The worker side of [`run`]: `args` are the spec (JSON) and the output path. Joins the
/// job, measures, and rank 0 writes the result.
pub fn worker_main(args: &[OsString]) -> Result<(), String> {
    let w = jobs::Worker::<PairSpec>::parse(args)?;
    let spec = w.spec.clone();
    let mut ctl = w.join()?;
    if ctl.nprocs() != 2 {
        return Err(format!(
            "a pair experiment needs 2 processes, not {}",
            ctl.nprocs()
        ));
    }
    let role = if ctl.rank() == 0 {
        Role::Initiator
    } else {
        Role::Responder
    };
    check(&spec.stack)?;
    let faults = spec.faults.0.clone();
    let result = match spec.stack {
        Stack::Raw { link } => {
            let policy = WaitPolicy::for_host(2);
            let peer = 1 - ctl.rank();
            match link {
                RawLink::Udp => {
                    let cfg = jobs::settings()?.job().udp.clone();
                    let bound = UdpLink::bind((ctl.local_ip(), 0).into(), &cfg)
                        .map_err(|e| e.to_string())?;
                    let addrs = exchange(&mut ctl, bound.local_addr())?;
                    let udp = bound
                        .into_link(ctl.rank(), addrs)
                        .map_err(|e| e.to_string())?;
                    if faults.is_active() {
                        let mut ch = RawUdp::new(Faulty::new(udp, faults), peer, policy);
                        measure(&mut OnRaw(&mut ch), role, &spec)
                    } else {
                        measure(&mut OnRaw(&mut RawUdp::new(udp, peer, policy)), role, &spec)
                    }
                }
                RawLink::Tcp => {
                    let listener =
                        TcpListener::bind((ctl.local_ip(), 0)).map_err(|e| e.to_string())?;
                    let addrs =
                        exchange(&mut ctl, listener.local_addr().map_err(|e| e.to_string())?)?;
                    let stream = if ctl.rank() == 0 {
                        TcpStream::connect(addrs[1])
                    } else {
                        listener.accept().map(|(s, _)| s)
                    }
                    .map_err(|e| e.to_string())?;
                    let mut ch = RawTcp::new(stream, policy).map_err(|e| e.to_string())?;
                    measure(&mut OnRaw(&mut ch), role, &spec)
                }
            }
        }
        Stack::P2p { over, progress } => {
            let mut cfg = jobs::settings()?.p2p;
            cfg.job = job_config(over, faults)?;
            if !progress {
                cfg.progress = None;
            }
            let comm = bulkwire_p2p::Comm::from_control(ctl, cfg).map_err(|e| e.to_string())?;
            let peer = 1 - comm.rank();
            let result = measure(&mut OnComm { c: &comm, peer }, role, &spec)?;
            write_result(role, &result, &w)?;
            return comm.finalize().map_err(|e| e.to_string());
        }
        Stack::Proto(over) => {
            let cfg = job_config(over, faults)?;
            let (mut engine, _) =
                job::connect_transport(&mut ctl, &cfg).map_err(|e| e.to_string())?;
            let peer = 1 - engine.rank();
            let idle = spec
                .stack
                .lossy(&spec.faults)
                .then_some(Duration::from_millis(50));
            let k = &mut OnTransport {
                t: &mut engine,
                peer,
                idle,
            };
            let result = measure(k, role, &spec)?;
            write_result(role, &result, &w)?;
            return job::finish(&mut engine, ctl, 0).map_err(|e| e.to_string());
        }
        Stack::Bsp(_) | Stack::Coll { .. } => {
            Err(format!("{}: not a pair stack", spec.stack.label()))
        }
    }?;
    write_result(role, &result, &w)?;
    ctl.finish(0).map_err(|e| e.to_string())
}

/// Publishes this process's address and learns its peer's, through the rendezvous.
fn exchange(
    ctl: &mut Control,
    addr: std::net::SocketAddr,
) -> Result<Vec<std::net::SocketAddr>, String> {
    let me = ctl.card(vec![addr]);
    let cards = ctl.allgather(&me.to_bytes()).map_err(|e| e.to_string())?;
    cards
        .iter()
        .map(|b| Card::from_bytes(b).and_then(|c| c.addrs.first().copied()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "a peer published an unusable card".into())
}

/// The job configuration of a transport: the environment's, with its protocol, link and
/// the spec's faults (so that a spec given on the command line runs what it says).
fn job_config(
    over: stack::Transport,
    faults: bulkwire_link::FaultConfig,
) -> Result<JobConfig, String> {
    let base = jobs::settings()?.job().clone();
    let mut cfg = over.job_config(base)?;
    cfg.faults = faults;
    Ok(cfg)
}

fn write_result(role: Role, result: &PairResult, w: &jobs::Worker<PairSpec>) -> Result<(), String> {
    if role == Role::Initiator {
        w.write(result)?;
    }
    Ok(())
}

/// The kernels of one kind of stack, so that one function walks every measurement.
trait Kernels {
    fn pingpong(
        &mut self,
        role: Role,
        size: usize,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, String>;

    fn stream(
        &mut self,
        role: Role,
        size: usize,
        window: usize,
        warmup: usize,
        reps: usize,
    ) -> Result<Vec<kernels::StreamSample>, String>;

    /// Riesen & Maccabe's overlap; only the point-to-point layer has posted receives.
    fn overlap(
        &mut self,
        _role: Role,
        _size: usize,
        _compute: Duration,
        _reps: usize,
    ) -> Result<Vec<f64>, String> {
        Err("the overlap benchmark needs the point-to-point layer".into())
    }

    /// Protocol counters toward the peer, where the stack has them.
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// A transport (a protocol over a link, or kernel TCP).
struct OnTransport<'a, T: Transport> {
    t: &'a mut T,
    peer: Rank,
    /// Lossy stacks: how long a stream receiver waits before counting a message lost.
    idle: Option<Duration>,
}

impl<T: Transport> Kernels for OnTransport<'_, T> {
    fn pingpong(
        &mut self,
        role: Role,
        size: usize,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, String> {
        kernels::pingpong(self.t, role, self.peer, size, warmup, iters).map_err(|e| e.to_string())
    }
    fn stream(
        &mut self,
        role: Role,
        size: usize,
        window: usize,
        warmup: usize,
        reps: usize,
    ) -> Result<Vec<kernels::StreamSample>, String> {
        kernels::stream(
            self.t, role, self.peer, size, window, warmup, reps, self.idle,
        )
        .map_err(|e| e.to_string())
    }
    fn counters(&self) -> Option<Counters> {
        Some(Counters::from(&self.t.peer_stats(self.peer)))
    }
}

/// A bare channel (raw UDP, raw TCP).
struct OnRaw<'a>(&'a mut dyn RawChannel);

impl Kernels for OnRaw<'_> {
    fn pingpong(
        &mut self,
        role: Role,
        size: usize,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, String> {
        raw::pingpong(self.0, role, size, warmup, iters).map_err(|e| e.to_string())
    }
    fn stream(
        &mut self,
        role: Role,
        size: usize,
        window: usize,
        warmup: usize,
        reps: usize,
    ) -> Result<Vec<kernels::StreamSample>, String> {
        raw::stream(
            self.0,
            role,
            size,
            window,
            warmup,
            reps,
            Duration::from_millis(50),
        )
        .map_err(|e| e.to_string())
    }
}

/// The point-to-point library.
struct OnComm<'a> {
    c: &'a bulkwire_p2p::Comm,
    peer: Rank,
}

impl Kernels for OnComm<'_> {
    fn pingpong(
        &mut self,
        role: Role,
        size: usize,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, String> {
        p2pk::pingpong(self.c, role, self.peer, size, warmup, iters).map_err(|e| e.to_string())
    }
    fn stream(
        &mut self,
        role: Role,
        size: usize,
        window: usize,
        warmup: usize,
        reps: usize,
    ) -> Result<Vec<kernels::StreamSample>, String> {
        p2pk::stream(self.c, role, self.peer, size, window, warmup, reps).map_err(|e| e.to_string())
    }
    fn overlap(
        &mut self,
        role: Role,
        size: usize,
        compute: Duration,
        reps: usize,
    ) -> Result<Vec<f64>, String> {
        p2pk::overlap(self.c, role, self.peer, size, compute, reps).map_err(|e| e.to_string())
    }
}

/// Runs `spec`'s measurement on `k`, size by size.
fn measure(k: &mut dyn Kernels, role: Role, spec: &PairSpec) -> Result<PairResult, String> {
    let label = spec.stack.label();
    let mut points = Vec::new();
    match &spec.measure {
        Measure::Latency {
            sizes,
            warmup,
            iters,
        } => {
            for &size in sizes {
                let samples = k
                    .pingpong(role, size, *warmup, *iters)
                    .map_err(|x| format!("{label}: {size} B ping-pong: {x}"))?;
                points.push(Point {
                    size,
                    samples,
                    delivered: None,
                    complete: Vec::new(),
                });
            }
        }
        Measure::Bandwidth {
            sizes,
            warmup,
            reps,
        } => {
            for &size in sizes {
                let w = window_for(size);
                let s = k
                    .stream(role, size, w, *warmup, *reps)
                    .map_err(|x| format!("{label}: {size} B stream: {x}"))?;
                points.push(stream_point(size, w, &s));
            }
        }
        Measure::Overlap {
            sizes,
            compute_ms,
            reps,
        } => {
            for &size in sizes {
                let samples = k
                    .overlap(role, size, Duration::from_millis(*compute_ms), *reps)
                    .map_err(|x| format!("{label}: {size} B overlap: {x}"))?;
                points.push(Point {
                    size,
                    samples,
                    delivered: None,
                    complete: Vec::new(),
                });
            }
        }
    }
    Ok(PairResult {
        spec: spec.clone(),
        points,
        counters: k.counters(),
    })
}

fn stream_point(size: usize, window: usize, s: &[kernels::StreamSample]) -> Point {
    let sent = (size * window * s.len()) as f64;
    let got: f64 = s.iter().map(|x| x.bytes as f64).sum();
    Point {
        size,
        samples: s.iter().map(|x| x.rate()).collect(),
        delivered: Some(if sent > 0.0 { got / sent } else { 1.0 }),
        complete: s
            .iter()
            .map(|x| x.bytes >= (size * window) as u64)
            .collect(),
    }
}
