//! An in-memory [`Transport`] between the ranks of one process: reliable, per-pair
//! ordered, no packets and no protocol. For tests of p2p's logic (including the RMPP-style
//! announce-then-accept delivery, before RMPP itself exists) and for measuring p2p's own
//! per-message cost apart from any network.
//!
//! In [`Delivery::Announce`] mode every message is first announced with its first `head`
//! bytes, and its data is delivered only after [`Transport::accept`], as RMPP does: a
//! test can then check that data only ever lands in posted buffers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bulkwire_engine::endpoint::Progress;
use bulkwire_engine::{Error as EngineError, Event, Transport, WaitPolicy, Waker};
use bulkwire_link::Rank;
use bulkwire_protocol::{MsgId, PeerStats, Time};
use bytes::Bytes;

/// How messages reach the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Whole messages at once.
    Whole,
    /// An announcement with the first `head` bytes; the data once accepted.
    Announce { head: usize },
}

struct Net {
    queues: Vec<VecDeque<(Rank, MsgId, Bytes)>>,
    /// Messages taken by a receiver, per receiver: accept calls seen (for tests).
    accepts: Vec<u64>,
}

struct Hub {
    net: Mutex<Net>,
    ready: Condvar,
    /// Ranks asleep in `block`: a send notifies only when there are some (a notify is a
    /// system call even with nobody waiting).
    sleepers: std::sync::atomic::AtomicUsize,
}

impl Hub {
    fn wake(&self) {
        if self.sleepers.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.ready.notify_all();
        }
    }
}

/// One rank's end of a loopback network made by [`network`].
pub struct Loopback {
    hub: Arc<Hub>,
    me: Rank,
    n: u32,
    mode: Delivery,
    next_id: Vec<MsgId>,
    events: VecDeque<Event>,
    announced: HashMap<(Rank, MsgId), Bytes>,
    epoch: Instant,
    ctl: Arc<Mutex<Ctl>>,
}

/// What a test injects into one rank's transport.
struct Ctl {
    events: VecDeque<Event>,
    /// Ranks reported dead: sends to them fail.
    dead: Vec<bool>,
    /// Ids for injected messages, per claimed sender.
    next_id: Vec<MsgId>,
    /// Injected announcements' data, delivered when accepted.
    bodies: HashMap<(Rank, MsgId), Vec<u8>>,
}

/// Injects events into a [`Loopback`] after it has been handed to a communicator.
#[derive(Clone)]
pub struct Injector {
    ctl: Arc<Mutex<Ctl>>,
    hub: Arc<Hub>,
}

impl Injector {
    fn ctl(&self) -> std::sync::MutexGuard<'_, Ctl> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delivers raw bytes as if `from` had sent them (robustness tests). Their ids follow
    /// a sequence of their own (`u32::MAX` downwards), apart from real traffic's.
    pub fn inject(&self, from: Rank, data: Vec<u8>) {
        let mut c = self.ctl();
        let id = c.next_id[from as usize];
        c.next_id[from as usize] = id.wrapping_sub(1);
        c.events.push_back(Event::Message { from, id, data });
        drop(c);
        self.hub.wake();
    }

    /// Announces raw bytes as if `from` had sent them, with their first `head` bytes;
    /// the whole of `data` is delivered if the receiver accepts it, as a reliable
    /// announcing transport (RMPP) does.
    pub fn inject_announce(&self, from: Rank, data: Vec<u8>, head: usize) {
        let mut c = self.ctl();
        let id = c.next_id[from as usize];
        c.next_id[from as usize] = id.wrapping_sub(1);
        c.events.push_back(Event::Announce {
            from,
            id,
            total: data.len() as u64,
            head: data[..head.min(data.len())].to_vec(),
        });
        c.bodies.insert((from, id), data);
    }

    /// Reports `peer` dead, as the engine does after its silence; sends to it then fail.
    pub fn kill(&self, peer: Rank) {
        let mut c = self.ctl();
        c.dead[peer as usize] = true;
        c.events.push_back(Event::PeerDead {
            peer,
            silent_for: 0,
        });
        drop(c);
        self.hub.wake();
    }

    /// How many times this rank has called `accept`.
    pub fn accepts(&self, rank: Rank) -> u64 {
        self.hub
            .net
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .accepts[rank as usize]
    }
}

/// `n` connected ranks.
pub fn network(n: u32, mode: Delivery) -> Vec<Loopback> {
    let hub = Arc::new(Hub {
        net: Mutex::new(Net {
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            accepts: vec![0; n as usize],
        }),
        ready: Condvar::new(),
        sleepers: std::sync::atomic::AtomicUsize::new(0),
    });
    (0..n)
        .map(|me| Loopback {
            hub: hub.clone(),
            me,
            n,
            mode,
            next_id: vec![0; n as usize],
            events: VecDeque::new(),
            announced: HashMap::new(),
            epoch: Instant::now(),
            ctl: Arc::new(Mutex::new(Ctl {
                events: VecDeque::new(),
                dead: vec![false; n as usize],
                next_id: vec![u32::MAX; n as usize],
                bodies: HashMap::new(),
            })),
        })
        .collect()
}

impl Loopback {
    /// A handle to inject events into this rank's transport later.
    pub fn injector(&self) -> Injector {
        Injector {
            ctl: self.ctl.clone(),
            hub: self.hub.clone(),
        }
    }
}

impl Transport for Loopback {
    fn rank(&self) -> Rank {
        self.me
    }

    fn nprocs(&self) -> u32 {
        self.n
    }

    fn protocol_name(&self) -> &'static str {
        match self.mode {
            Delivery::Whole => "loopback",
            Delivery::Announce { .. } => "loopback-announce",
        }
    }

    fn now(&self) -> Time {
        self.epoch.elapsed().as_nanos() as Time
    }

    fn send(&mut self, to: Rank, data: Bytes, _notify: bool) -> Result<MsgId, EngineError> {
        if to >= self.n || to == self.me {
            return Err(EngineError::Config(format!("bad destination {to}")));
        }
        if self.ctl.lock().unwrap_or_else(|e| e.into_inner()).dead[to as usize] {
            return Err(EngineError::PeerDead(crate::PeerDead {
                peer: to,
                silent_for: 0,
            }));
        }
        let mut net = self.hub.net.lock().unwrap_or_else(|e| e.into_inner());
        // Ids per (sender, receiver) pair, as a protocol numbers them.
        let id = self.next_id[to as usize];
        self.next_id[to as usize] = id.wrapping_add(1);
        net.queues[to as usize].push_back((self.me, id, data));
        drop(net);
        self.hub.wake();
        Ok(id)
    }

    fn step(&mut self) -> Result<Progress, EngineError> {
        self.events.extend(
            self.ctl
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .events
                .drain(..),
        );
        let mut net = self.hub.net.lock().unwrap_or_else(|e| e.into_inner());
        let q = std::mem::take(&mut net.queues[self.me as usize]);
        drop(net);
        let received = q.len();
        for (from, id, data) in q {
            match self.mode {
                Delivery::Whole => self.events.push_back(Event::Message {
                    from,
                    id,
                    data: data.to_vec(),
                }),
                Delivery::Announce { head } => {
                    self.events.push_back(Event::Announce {
                        from,
                        id,
                        total: data.len() as u64,
                        head: data[..head.min(data.len())].to_vec(),
                    });
                    self.announced.insert((from, id), data);
                }
            }
        }
        Ok(Progress { received, sent: 0 })
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn block(&mut self, timeout: Option<Duration>) -> Result<(), EngineError> {
        let net = self.hub.net.lock().unwrap_or_else(|e| e.into_inner());
        let me = self.me as usize;
        let t = timeout
            .unwrap_or(Duration::from_millis(1))
            .min(Duration::from_millis(1));
        // Counted under the lock a sender takes to queue: no wake can slip between.
        self.hub
            .sleepers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let g = self
            .hub
            .ready
            .wait_timeout_while(net, t, |n| n.queues[me].is_empty());
        self.hub
            .sleepers
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        drop(g);
        Ok(())
    }

    fn waker(&self) -> Waker {
        let hub = self.hub.clone();
        Arc::new(move || hub.ready.notify_all())
    }

    fn has_unsent(&self) -> bool {
        false
    }

    fn busy(&self) -> bool {
        false
    }

    fn expect(&mut self, _peer: Rank, _waiting: bool) {}

    fn accept(&mut self, from: Rank, id: MsgId) {
        self.hub
            .net
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .accepts[self.me as usize] += 1;
        if let Some(data) = self.announced.remove(&(from, id)) {
            self.events.push_back(Event::Message {
                from,
                id,
                data: data.to_vec(),
            });
        } else {
            let mut c = self.ctl.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(data) = c.bodies.remove(&(from, id)) {
                c.events.push_back(Event::Message { from, id, data });
            }
        }
    }

    fn peer_stats(&self, _peer: Rank) -> PeerStats {
        PeerStats::default()
    }

    fn policy(&self) -> WaitPolicy {
        WaitPolicy {
            spin: Duration::from_micros(20),
            yield_cpu: true,
            own_cpus: false,
        }
    }
}
