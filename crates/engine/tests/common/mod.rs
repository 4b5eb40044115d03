//! Random traffic for delivery tests: who sends what to whom, how to check that every
//! message arrived exactly once, intact and in per-pair order, and how to run it over a
//! transport per rank, ranks as threads.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkwire_engine::{Event, Transport};
use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One message of a traffic plan.
#[derive(Clone, Debug)]
pub struct Msg {
    pub src: u32,
    pub dst: u32,
    pub len: usize,
    /// When (ns from the start) it is sent.
    pub at: u64,
    /// Seeds its contents.
    pub key: u64,
}

/// Contents of a message: a cheap pseudo-random pattern fixed by its key.
pub fn payload(key: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut x = key | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A size from 0 B to `max`: mostly small, some medium, a few large (log-uniform within
/// each class), as real parallel programs send.
pub fn size(rng: &mut ChaCha8Rng, max: usize) -> usize {
    let class: f64 = rng.random();
    let (lo, hi) = if class < 0.05 {
        return 0;
    } else if class < 0.6 {
        (1.0f64, 512.0f64)
    } else if class < 0.92 {
        (512.0, 65536.0)
    } else {
        (65536.0, max as f64)
    };
    let hi = hi.min(max as f64).max(lo);
    (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp() as usize
}

/// A plan of `count` messages among `p` ranks, sent over `spread` ns, at most `max` bytes
/// each and about `budget` bytes in all (large messages are shrunk to fit).
pub fn plan(seed: u64, p: u32, count: usize, max: usize, budget: usize, spread: u64) -> Vec<Msg> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut total = 0usize;
    let mut msgs: Vec<Msg> = (0..count)
        .map(|i| {
            let src = rng.random_range(0..p);
            let mut dst = rng.random_range(0..p - 1);
            if dst >= src {
                dst += 1;
            }
            let mut len = size(&mut rng, max);
            if total + len > budget {
                len = len.min(4096);
            }
            total += len;
            Msg {
                src,
                dst,
                len,
                at: rng.random_range(0..=spread),
                key: seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
            }
        })
        .collect();
    msgs.sort_by_key(|m| m.at);
    msgs
}

/// Checks deliveries against a plan, pair by pair.
pub struct Checker {
    p: u32,
    /// expected[src][dst]: the messages of that pair in sending order.
    expected: Vec<Vec<Vec<Msg>>>,
    got: Vec<Vec<usize>>,
    pub delivered: usize,
    pub bytes: usize,
}

impl Checker {
    pub fn new(p: u32, plan: &[Msg]) -> Checker {
        let mut expected = vec![vec![Vec::new(); p as usize]; p as usize];
        for m in plan {
            expected[m.src as usize][m.dst as usize].push(m.clone());
        }
        Checker {
            p,
            expected,
            got: vec![vec![0; p as usize]; p as usize],
            delivered: 0,
            bytes: 0,
        }
    }

    pub fn total(&self) -> usize {
        self.expected.iter().flatten().map(|v| v.len()).sum()
    }

    pub fn complete(&self) -> bool {
        self.delivered == self.total()
    }

    /// Checks one event at rank `at`; panics on anything wrong.
    pub fn check(&mut self, at: u32, e: &Event) {
        match e {
            Event::Message { from, data, .. } => {
                let (s, d) = (*from as usize, at as usize);
                let k = self.got[s][d];
                let exp = self.expected[s][d].get(k).unwrap_or_else(|| {
                    panic!("rank {at}: message #{k} from {from} was never sent (duplicate?)")
                });
                assert_eq!(
                    data.len(),
                    exp.len,
                    "rank {at}: message #{k} from {from} has the wrong length (out of order?)"
                );
                assert!(
                    *data == payload(exp.key, exp.len),
                    "rank {at}: message #{k} from {from} ({} bytes) is corrupted",
                    exp.len
                );
                self.got[s][d] += 1;
                self.delivered += 1;
                self.bytes += data.len();
            }
            Event::PeerDead { peer, .. } => panic!("rank {at}: peer {peer} declared dead"),
            Event::Sent { .. } | Event::Announce { .. } => {}
        }
    }

    /// Describes what is missing, for failure messages.
    pub fn missing(&self) -> String {
        let mut out = Vec::new();
        for s in 0..self.p as usize {
            for d in 0..self.p as usize {
                let n = self.expected[s][d].len();
                if self.got[s][d] != n {
                    out.push(format!("{s}->{d}: {}/{n}", self.got[s][d]));
                }
            }
        }
        out.truncate(20);
        out.join(", ")
    }
}

/// The plan's message as a `Bytes`.
pub fn bytes_of(m: &Msg) -> Bytes {
    Bytes::from(payload(m.key, m.len))
}

/// Runs the plan `msgs` over `transports` (rank = index), each rank on a thread: it sends
/// its own messages, then serves (receiving, acknowledging, retransmitting; accepting what
/// rmpp announces, as a receive is always posted here) until every rank has received all
/// its messages and has nothing left to send, checking each delivery. A rank still at it at
/// `deadline` fails the test. Once every rank is done, `finish` turns each rank's transport
/// into what the run returns for it (so no rank closes its connections early).
pub fn run_plan<T, R>(
    transports: Vec<T>,
    msgs: &[Msg],
    deadline: Instant,
    finish: fn(T) -> R,
) -> (Checker, Vec<R>)
where
    T: Transport + 'static,
    R: Send + 'static,
{
    let p = transports.len() as u32;
    let checker = Arc::new(Mutex::new(Checker::new(p, msgs)));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = transports
        .into_iter()
        .enumerate()
        .map(|(r, mut t)| {
            let r = r as u32;
            let mine: Vec<_> = msgs.iter().filter(|m| m.src == r).cloned().collect();
            let expected = msgs.iter().filter(|m| m.dst == r).count();
            let (checker, done) = (checker.clone(), done.clone());
            std::thread::spawn(move || {
                for m in &mine {
                    t.send(m.dst, bytes_of(m), false).unwrap();
                }
                let mut got = 0;
                let mut finished = false;
                // Keep serving (acknowledging, retransmitting) until every rank is done.
                loop {
                    assert!(
                        Instant::now() < deadline,
                        "rank {r}: time limit, got {got}/{expected}"
                    );
                    match t.wait_for(Some(Duration::from_millis(20)), |t| t.poll_event()) {
                        Ok(Event::Announce { from, id, .. }) => t.accept(from, id),
                        Ok(ev) => {
                            checker.lock().unwrap().check(r, &ev);
                            got += 1;
                        }
                        Err(_) => {}
                    }
                    if got == expected && !t.busy() && !finished {
                        finished = true;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    if finished && done.load(Ordering::SeqCst) == p as usize {
                        return finish(t);
                    }
                }
            })
        })
        .collect();
    let results = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let checker = Arc::into_inner(checker).unwrap().into_inner().unwrap();
    (checker, results)
}

pub mod workload;
