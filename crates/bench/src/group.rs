//! Experiments over a job of p processes: all-to-all traffic (Riesen & Maccabe's Fig. 3)
//! and total exchange in latin-square against pid order (Donaldson, Hill & Skillicorn's
//! Table 1). Like [`crate::pair`], a spec is passed to worker processes of the `bwbench`
//! binary, and rank 0 writes the result.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use bulkwire_engine::job;
use bulkwire_engine::{Error, Event, PeerDead, Transport};
use bulkwire_link::Rank;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::jobs;
use crate::kernels::TIMEOUT;
use crate::stack::{self, Faults, Stack};

/// The order in which a process sends to the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Schedule {
    /// Process i sends to i+1, i+2, ... (mod p): a latin square, so at each step every
    /// process has exactly one sender (Donaldson, Hill & Skillicorn, section 3).
    Latin,
    /// Everyone sends to 0, then 1, ...: each destination in turn is hit by all.
    PidOrder,
}

impl Schedule {
    /// The `k`-th destination (k in 1..p) of process `me` among `p`.
    pub fn dest(self, me: Rank, k: u32, p: u32) -> Rank {
        match self {
            Schedule::Latin => (me + k) % p,
            Schedule::PidOrder => (k - 1 + u32::from(k > me)) % p,
        }
    }
}

/// A p-process experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSpec {
    /// The transport every process runs.
    #[serde(flatten)]
    pub over: stack::Transport,
    /// Bytes each process sends to each other process per round.
    pub size: usize,
    pub schedule: Schedule,
    pub warmup: usize,
    pub reps: usize,
}

/// What rank 0 reports: per repetition, the time of the slowest process, and the job's
/// packet counts summed over all processes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupResult {
    pub spec: GroupSpec,
    pub nprocs: u32,
    /// Seconds per round, slowest process, one per repetition.
    pub seconds: Vec<f64>,
    /// Data and control packets sent, summed over processes and peers.
    pub data_packets: u64,
    pub control_packets: u64,
    pub retransmits: u64,
    /// Packets dropped (protocol drops and datagrams that failed to decode).
    pub drops: u64,
}

impl GroupResult {
    /// Per-process bandwidth of the median round: bytes each process sent / time.
    pub fn per_process_bandwidth(&self) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        let med = s.get(s.len() / 2).copied().unwrap_or(f64::NAN);
        (self.spec.size * (self.nprocs as usize - 1)) as f64 / med
    }
}

/// Runs `spec` as a job of `n` processes of `exe`.
pub fn run(exe: &Path, n: u32, spec: &GroupSpec, timeout: Duration) -> Result<GroupResult, String> {
    let job = jobs::Job {
        n,
        mode: "__group",
        stack: &Stack::Proto(spec.over.check()?),
        faults: &Faults::none(),
        timeout,
        across: None,
        env: &[],
    };
    jobs::run(exe, &job, spec)
}

/// First byte of every message: what it is for.
const DATA: u8 = 1;
const BARRIER: u8 = 2;
const REPORT: u8 = 3;

/// Messages that arrived before anyone asked for them, by sender and kind.
struct Inbox {
    q: Vec<VecDeque<Vec<u8>>>,
}

impl Inbox {
    fn new(p: u32) -> Inbox {
        Inbox {
            q: (0..p * 4).map(|_| VecDeque::new()).collect(),
        }
    }

    /// The next message of `kind` from `from`, waiting for it.
    fn take<T: Transport>(&mut self, t: &mut T, from: Rank, kind: u8) -> Result<Vec<u8>, Error> {
        let idx = (from * 4 + kind as u32) as usize;
        if let Some(m) = self.q[idx].pop_front() {
            return Ok(m);
        }
        t.expect(from, true);
        let q = &mut self.q;
        let r = t.wait_for(Some(TIMEOUT), |t| {
            while let Some(e) = t.poll_event() {
                match e {
                    Event::Message { from: f, data, .. } => {
                        let k = data.first().copied().unwrap_or(0).min(3);
                        if f == from && k == kind {
                            return Some(Ok(data));
                        }
                        q[(f * 4 + k as u32) as usize].push_back(data);
                    }
                    Event::PeerDead { peer, silent_for } => {
                        return Some(Err(Error::PeerDead(PeerDead { peer, silent_for })));
                    }
                    Event::Announce { from, id, .. } => t.accept(from, id),
                    Event::Sent { .. } => {}
                }
            }
            None
        });
        t.expect(from, false);
        r?
    }
}

/// A dissemination barrier over the transport: log2(p) rounds of one small message.
fn barrier<T: Transport>(t: &mut T, inbox: &mut Inbox) -> Result<(), Error> {
    let (me, p) = (t.rank(), t.nprocs());
    let mut d = 1;
    while d < p {
        t.send((me + d) % p, Bytes::from_static(&[BARRIER]), false)?;
        inbox.take(t, (me + p - d) % p, BARRIER)?;
        d *= 2;
    }
    Ok(())
}

/// The worker side of [`run`].
pub fn worker_main(args: &[OsString]) -> Result<(), String> {
    let w = jobs::Worker::<GroupSpec>::parse(args)?;
    let spec = w.spec.clone();
    let mut ctl = w.join()?;
    let cfg = spec.over.job_config(jobs::settings()?.job().clone())?;
    let (mut t, _) = job::connect_transport(&mut ctl, &cfg).map_err(|e| e.to_string())?;
    let (me, p) = (t.rank(), t.nprocs());
    let mut inbox = Inbox::new(p);
    let mut msg = vec![0u8; spec.size.max(1)];
    msg[0] = DATA;
    let msg = Bytes::from(msg);
    let mut times = Vec::new();
    let run = |t: &mut Box<dyn Transport>,
               inbox: &mut Inbox,
               times: &mut Vec<f64>|
     -> Result<(), Error> {
        for rep in 0..spec.warmup + spec.reps {
            barrier(t, inbox)?;
            let t0 = t.now();
            for k in 1..p {
                t.send(spec.schedule.dest(me, k, p), msg.clone(), false)?;
            }
            for k in 1..p {
                inbox.take(t, (me + p - k) % p, DATA)?;
            }
            let dt = (t.now() - t0) as f64 / 1e9;
            if rep >= spec.warmup {
                times.push(dt);
            }
        }
        Ok(())
    };
    run(&mut t, &mut inbox, &mut times).map_err(|e| e.to_string())?;
    // Everyone reports its times and counters to rank 0.
    let mut data = 0u64;
    let mut control = 0u64;
    let mut retrans = 0u64;
    let mut drops = t.drops().total();
    for q in (0..p).filter(|&q| q != me) {
        let s = t.peer_stats(q);
        data += s.data_sent;
        control += s.control_sent;
        retrans += s.retransmits;
        drops += s.drops();
    }
    let mine = Report {
        times,
        data,
        control,
        retrans,
        drops,
    };
    if me == 0 {
        let mut all = vec![mine];
        for q in 1..p {
            let m = inbox.take(&mut t, q, REPORT).map_err(|e| e.to_string())?;
            all.push(serde_json::from_slice(&m[1..]).map_err(|e| e.to_string())?);
        }
        let seconds = (0..spec.reps)
            .map(|i| all.iter().map(|r| r.times[i]).fold(0.0, f64::max))
            .collect();
        let res = GroupResult {
            spec: spec.clone(),
            nprocs: p,
            seconds,
            data_packets: all.iter().map(|r| r.data).sum(),
            control_packets: all.iter().map(|r| r.control).sum(),
            retransmits: all.iter().map(|r| r.retrans).sum(),
            drops: all.iter().map(|r| r.drops).sum(),
        };
        w.write(&res)?;
    } else {
        let mut m = vec![REPORT];
        m.extend(serde_json::to_vec(&mine).map_err(|e| e.to_string())?);
        t.send(0, Bytes::from(m), false)
            .map_err(|e| e.to_string())?;
    }
    job::finish(&mut t, ctl, 0).map_err(|e| e.to_string())
}

#[derive(Serialize, Deserialize)]
struct Report {
    times: Vec<f64>,
    data: u64,
    control: u64,
    retrans: u64,
    drops: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_visit_every_other_process_once() {
        for p in [2u32, 3, 8] {
            for s in [Schedule::Latin, Schedule::PidOrder] {
                for me in 0..p {
                    let mut d: Vec<Rank> = (1..p).map(|k| s.dest(me, k, p)).collect();
                    assert!(!d.contains(&me));
                    d.sort();
                    d.dedup();
                    assert_eq!(d.len(), p as usize - 1);
                }
                // Latin: at every step each process has exactly one sender.
                if s == Schedule::Latin {
                    for k in 1..p {
                        let mut at: Vec<Rank> = (0..p).map(|me| s.dest(me, k, p)).collect();
                        at.sort();
                        assert_eq!(at, (0..p).collect::<Vec<_>>());
                    }
                }
            }
        }
        assert_eq!(Schedule::PidOrder.dest(2, 1, 4), 0);
        assert_eq!(Schedule::PidOrder.dest(2, 3, 4), 3);
    }
}
