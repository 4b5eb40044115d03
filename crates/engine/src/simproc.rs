//! Real blocking programs over the simulated network, deterministically. Each rank is a
//! thread running ordinary code against a [`SimTransport`] (BSP's `bsp_sync`, say), but
//! only one runs at a time: a rank that waits ([`Transport::block`]) hands over to the
//! scheduler, which advances the [`SimCluster`] in virtual time until some rank can go on
//! (a message for it, the data it was draining handed to the network, the end of its
//! timeout) and gives the turn to the earliest, ties to the lowest rank. Nothing depends
//! on how the host schedules the threads, so a run is a function of its configuration
//! and seed.
//!
//! Threads rather than a state machine: the code under test stays the code that runs on
//! real networks, blocking waits and all, with no second (asynchronous) version of it.
//!
//! What takes virtual time: the network (serialization, hops, queues) and each node's CPU
//! per datagram received and sent ([`SimConfig`]), as in [`SimCluster`]; on top of that,
//! a fixed CPU cost per message a rank hands to its transport
//! ([`SimSetup::cpu_per_message`]). A rank's own code between two waits takes none.
//! Each node's endpoint is stepped by the scheduler whenever it has work (as a progress
//! engine would), so a rank is woken only for what concerns its code, not per packet.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bulkwire_link::Rank;
use bulkwire_link::sim::{NodeStats, SimConfig};
use bulkwire_protocol::wire::DropCounts;
use bulkwire_protocol::{Coloured, MsgId, PeerStats, Time};
use bytes::Bytes;

use crate::endpoint::{EndpointConfig, Event, Progress};
use crate::sim::{SimCluster, SimError};
use crate::transport::{Transport, Waker};
use crate::{Error, WaitPolicy};

/// What a simulated run of `nodes` ranks is made of.
#[derive(Clone, Debug)]
pub struct SimSetup {
    pub net: SimConfig,
    pub endpoint: EndpointConfig,
    /// A protocol name known to [`bulkwire_protocol::by_name`], and its settings.
    pub protocol: String,
    pub protocols: bulkwire_protocol::ProtocolConfigs,
    /// Virtual time after which the run fails, ns.
    pub limit: Time,
    /// CPU time a node spends per message its rank hands to the transport, ns.
    pub cpu_per_message: Time,
    /// Stack of each rank's thread, bytes.
    pub stack: usize,
}

impl SimSetup {
    /// The network `net` with `protocol`, a virtual hour, 1 us per message sent.
    pub fn new(net: SimConfig, protocol: &str) -> SimSetup {
        SimSetup {
            net,
            endpoint: EndpointConfig::new(7),
            protocol: protocol.into(),
            protocols: Default::default(),
            limit: 3600 * bulkwire_protocol::SEC,
            cpu_per_message: 1_000,
            stack: 1 << 20,
        }
    }
}

/// What a run gives back: each rank's result and what happened on the way.
#[derive(Debug)]
pub struct SimOutcome<T> {
    /// The value each rank's program returned, by rank.
    pub results: Vec<T>,
    /// Virtual time at which each rank's program returned.
    pub finish: Vec<Time>,
    /// The network's datagram counts, summed over nodes.
    pub net: NodeStats,
    /// Protocol statistics, summed over every pair.
    pub peers: PeerStats,
    /// Datagrams the endpoints dropped before their protocol (corrupt, foreign...).
    pub drops: DropCounts,
    /// Hand-overs from one rank to another (or to itself) and a hash of their sequence
    /// (time and rank of each): two runs with equal traces scheduled identically.
    pub handovers: u64,
    pub trace: u64,
}

impl<T> SimOutcome<T> {
    /// When the last rank finished.
    pub fn end(&self) -> Time {
        self.finish.iter().copied().max().unwrap_or(0)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Ready,
    Running,
    Blocked,
    Done,
}

struct Proc {
    state: State,
    inbox: VecDeque<Event>,
    /// The end of the current block's timeout.
    deadline: Option<Time>,
    /// Peers whose queued bytes the rank saw non-zero since it last ran: it waits for
    /// them to drain.
    watch: Vec<Rank>,
    /// The rank saw its transport busy: it waits for it to be idle.
    watch_busy: bool,
}

struct World {
    sim: SimCluster,
    procs: Vec<Proc>,
    ready: BinaryHeap<Reverse<(Time, Rank)>>,
    deadlines: BinaryHeap<Reverse<(Time, Rank)>>,
    turn: Option<Rank>,
    failed: Option<String>,
    live: usize,
    limit: Time,
    cpu_per_message: Time,
    finish: Vec<Time>,
    handovers: u64,
    trace: std::collections::hash_map::DefaultHasher,
}

struct Shared {
    world: Mutex<World>,
    turns: Vec<Condvar>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl World {
    fn now(&self) -> Time {
        self.sim.now()
    }

    /// Makes `r` ready if it is blocked and what it waits for has happened.
    fn check_wake(&mut self, r: Rank) {
        let p = &self.procs[r as usize];
        if p.state != State::Blocked {
            return;
        }
        let now = self.sim.now();
        let due = p.deadline.is_some_and(|d| d <= now)
            || !p.inbox.is_empty()
            || !self.sim.events(r).is_empty()
            || p.watch
                .iter()
                .any(|&d| self.sim.endpoint_ref(r).queued_bytes(d) == 0)
            || (p.watch_busy && !self.sim.endpoint_ref(r).busy());
        if due {
            self.procs[r as usize].state = State::Ready;
            let at = now.max(self.sim.busy_until(r));
            self.ready.push(Reverse((at, r)));
        }
    }

    /// Advances the simulation until a rank can run, and returns it; `None` when no rank
    /// is left waiting and nothing more can happen.
    fn next_proc(&mut self) -> Result<Option<Rank>, String> {
        loop {
            for r in self.sim.take_touched() {
                self.check_wake(r);
            }
            while let Some(&Reverse((t, r))) = self.deadlines.peek() {
                let p = &self.procs[r as usize];
                if p.state == State::Blocked && p.deadline == Some(t) {
                    break;
                }
                self.deadlines.pop();
            }
            let tn = self.sim.next_time();
            let tr = self.ready.peek().map(|&Reverse(x)| x);
            let td = self.deadlines.peek().map(|&Reverse(x)| x);
            let before_net = |t: Time| tn.is_none_or(|n| t < n);
            match (tr, td) {
                (Some((t, r)), d) if before_net(t) && d.is_none_or(|d| (t, r) <= d) => {
                    self.ready.pop();
                    self.move_clock(t)?;
                    return Ok(Some(r));
                }
                (_, Some((t, r))) if before_net(t) => {
                    self.deadlines.pop();
                    self.move_clock(t)?;
                    self.check_wake(r);
                    continue;
                }
                _ => {}
            }
            if !self.sim.instant(self.limit).map_err(|e| e.to_string())? {
                return Ok(None);
            }
        }
    }

    fn move_clock(&mut self, t: Time) -> Result<(), String> {
        if t > self.limit {
            return Err(SimError::TimeLimit { limit: self.limit }.to_string());
        }
        if t > self.sim.now() {
            self.sim.advance_to(t).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn fail(&mut self, why: String) {
        if self.failed.is_none() {
            self.failed = Some(why);
        }
    }

    fn stalled(&self) -> String {
        let waiting: Vec<String> = (0..self.procs.len())
            .filter(|&r| self.procs[r].state == State::Blocked)
            .take(8)
            .map(|r| r.to_string())
            .collect();
        format!(
            "nothing left to happen at {} ns but ranks wait (first: {})",
            self.now(),
            waiting.join(", ")
        )
    }
}

/// Gives the turn to the next rank and, unless that is `me`, waits for it to come back.
/// `me` is `None` for a rank that has finished.
fn hand_over(sh: &Shared, mut w: MutexGuard<'_, World>, me: Option<Rank>) -> Result<(), Error> {
    // A failed run stops: every rank's next call ends with the failure.
    let found = if w.failed.is_some() {
        Ok(None)
    } else {
        w.next_proc()
    };
    let next = match found {
        Ok(Some(n)) => Some(n),
        Ok(None) if w.live == 0 || w.failed.is_some() => None,
        Ok(None) => {
            let why = w.stalled();
            w.fail(why);
            None
        }
        Err(e) => {
            w.fail(e);
            None
        }
    };
    if let Some(n) = next {
        let now = w.now();
        w.handovers += 1;
        (now, n).hash(&mut w.trace);
        w.procs[n as usize].state = State::Running;
        w.turn = Some(n);
        if me != Some(n) {
            sh.turns[n as usize].notify_one();
        }
    } else {
        w.turn = None;
        for c in &sh.turns {
            c.notify_one();
        }
    }
    let Some(me) = me else { return Ok(()) };
    while w.turn != Some(me) && w.failed.is_none() {
        w = sh.turns[me as usize]
            .wait(w)
            .unwrap_or_else(|e| e.into_inner());
    }
    match &w.failed {
        Some(f) => Err(Error::JobFailed(format!("simulation: {f}"))),
        None => Ok(()),
    }
}

/// One rank's [`Transport`] in a simulated run (see the module documentation).
pub struct SimTransport {
    sh: Arc<Shared>,
    rank: Rank,
    nprocs: u32,
    protocol: &'static str,
}

impl SimTransport {
    fn world(&self) -> MutexGuard<'_, World> {
        self.sh.lock()
    }

    /// Waits for this rank's first turn.
    fn start(&self) -> Result<(), Error> {
        let mut w = self.world();
        while w.turn != Some(self.rank) && w.failed.is_none() {
            w = self.sh.turns[self.rank as usize]
                .wait(w)
                .unwrap_or_else(|e| e.into_inner());
        }
        match &w.failed {
            Some(f) => Err(Error::JobFailed(format!("simulation: {f}"))),
            None => Ok(()),
        }
    }

    /// A handle that reads this rank's statistics while the transport itself is owned
    /// by the layer above.
    pub fn watch(&self) -> SimWatch {
        SimWatch {
            sh: self.sh.clone(),
            rank: self.rank,
            nprocs: self.nprocs,
        }
    }

    /// Puts the datagram `head` + `body` on the network from this rank to `dst` as it is,
    /// past the protocol and the endpoint: what a member that forges packets does, for
    /// tests of what the others make of it.
    pub fn inject(&self, dst: Rank, head: &[u8], body: &[u8]) -> Result<(), Error> {
        let mut w = self.world();
        w.sim
            .endpoint(self.rank)
            .link()
            .send(&[bulkwire_link::Tx { dst, head, body }])?;
        Ok(())
    }

    /// The rank's program has returned: record when, and pass the turn on.
    fn finish(&self) {
        let mut w = self.world();
        let r = self.rank as usize;
        w.procs[r].state = State::Done;
        w.finish[r] = w.now();
        w.live -= 1;
        if w.turn == Some(self.rank) {
            let _ = hand_over(&self.sh, w, None);
        }
    }

    fn node_error(e: SimError) -> Error {
        Error::JobFailed(format!("simulation: {e}"))
    }
}

/// Reads one rank's statistics (see [`SimTransport::watch`]).
pub struct SimWatch {
    sh: Arc<Shared>,
    rank: Rank,
    nprocs: u32,
}

impl SimWatch {
    /// What the network did to this node's datagrams so far (drops are counted at the
    /// node they were heading for).
    pub fn node_stats(&self) -> NodeStats {
        self.sh.lock().sim.net().stats(self.rank)
    }

    /// This node's protocol statistics, summed over its peers.
    pub fn protocol_stats(&self) -> PeerStats {
        let w = self.sh.lock();
        let ep = w.sim.endpoint_ref(self.rank);
        let mut s = PeerStats::default();
        for q in (0..self.nprocs).filter(|&q| q != self.rank) {
            s += &ep.peer_stats(q);
        }
        s
    }
}

impl Transport for SimTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    fn protocol_name(&self) -> &'static str {
        self.protocol
    }

    fn now(&self) -> Time {
        self.world().now()
    }

    fn send(&mut self, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        let mut w = self.world();
        let now = w.now();
        let cost = w.cpu_per_message;
        let id = w.sim.endpoint(self.rank).send(now, to, data, notify)?;
        w.sim.charge_cpu(self.rank, cost);
        w.sim.wake_at(self.rank, now);
        Ok(id)
    }

    fn step(&mut self) -> Result<Progress, Error> {
        let mut w = self.world();
        w.sim.poll_node(self.rank).map_err(Self::node_error)
    }

    fn poll_event(&mut self) -> Option<Event> {
        let mut w = self.world();
        let r = self.rank;
        if w.procs[r as usize].inbox.is_empty() {
            let evs = w.sim.take_events(r);
            w.procs[r as usize].inbox.extend(evs);
        }
        w.procs[r as usize].inbox.pop_front()
    }

    fn block(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        let mut w = self.world();
        if let Some(f) = &w.failed {
            return Err(Error::JobFailed(format!("simulation: {f}")));
        }
        let r = self.rank;
        let now = w.now();
        let deadline = timeout.map(|d| now + d.as_nanos() as Time);
        {
            let p = &mut w.procs[r as usize];
            p.state = State::Blocked;
            p.deadline = deadline;
        }
        if let Some(d) = deadline {
            w.deadlines.push(Reverse((d, r)));
        }
        w.check_wake(r);
        let res = hand_over(&self.sh, w, Some(r));
        let mut w = self.world();
        let p = &mut w.procs[r as usize];
        p.watch.clear();
        p.watch_busy = false;
        p.deadline = None;
        res
    }

    fn waker(&self) -> Waker {
        // Nothing runs beside the rank that holds the turn: there is no one to wake.
        Arc::new(|| {})
    }

    /// Waiting for room in the network is the scheduler's business: a rank never spins.
    fn has_unsent(&self) -> bool {
        false
    }

    fn busy(&self) -> bool {
        let mut w = self.world();
        let b = w.sim.endpoint_ref(self.rank).busy();
        if b {
            w.procs[self.rank as usize].watch_busy = true;
        }
        b
    }

    fn expect(&mut self, peer: Rank, waiting: bool) {
        self.world().sim.expect(self.rank, peer, waiting);
    }

    /// The protocol's colours, reached under the world's lock ([`Coloured`] for
    /// `SimTransport`). Offered whatever the protocol, as a phase end wakes the node.
    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        Some(self)
    }

    fn accept(&mut self, from: Rank, id: MsgId) {
        self.world().sim.accept(self.rank, from, id);
    }

    fn queued_bytes(&self, peer: Rank) -> u64 {
        let mut w = self.world();
        let q = w.sim.endpoint_ref(self.rank).queued_bytes(peer);
        if q > 0 {
            let watch = &mut w.procs[self.rank as usize].watch;
            if !watch.contains(&peer) {
                watch.push(peer);
            }
        }
        q
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        self.world().sim.endpoint_ref(self.rank).peer_stats(peer)
    }

    fn drops(&self) -> DropCounts {
        self.world().sim.endpoint_ref(self.rank).drops()
    }

    fn policy(&self) -> WaitPolicy {
        WaitPolicy {
            spin: Duration::ZERO,
            yield_cpu: false,
            own_cpus: false,
        }
    }

    fn check(&self) -> Result<(), Error> {
        match &self.world().failed {
            Some(f) => Err(Error::JobFailed(format!("simulation: {f}"))),
            None => Ok(()),
        }
    }
}

/// The protocol's colours behind the world's lock (ignored when it has none); a phase end
/// wakes the node, so that the scheduler steps it to send the acknowledgement request.
impl Coloured for SimTransport {
    fn set_colour(&mut self, colour: u8) {
        if let Some(c) = self.world().sim.endpoint(self.rank).protocol().coloured() {
            c.set_colour(colour);
        }
    }

    fn hold_colour(&mut self, hold: u8) {
        if let Some(c) = self.world().sim.endpoint(self.rank).protocol().coloured() {
            c.hold_colour(hold);
        }
    }

    fn end_phase(&mut self, peer: Rank) {
        let mut w = self.world();
        let now = w.now();
        if let Some(c) = w.sim.endpoint(self.rank).protocol().coloured() {
            c.end_phase(peer);
        }
        w.sim.wake_at(self.rank, now);
    }
}

/// Runs `program` on every rank of the network `setup` describes, each given its own
/// [`SimTransport`] (to keep or to box as a `dyn Transport`), and returns when all have returned. Fails if the run stalls (ranks
/// wait but nothing can happen), passes the time limit, or a rank's program panics.
pub fn run<T, F>(setup: &SimSetup, program: F) -> Result<SimOutcome<T>, SimError>
where
    T: Send,
    F: Fn(SimTransport) -> T + Sync,
{
    let p = setup.net.nodes;
    let mut sim = SimCluster::new(setup.net.clone(), setup.endpoint.clone(), |c| {
        // The job's timers, peer budget and congestion control, as a real job's endpoint.
        let c = setup.protocols.timers(c);
        bulkwire_protocol::by_name(&setup.protocol, c, &setup.protocols).expect("a known protocol")
    });
    sim.track_touched();
    let protocol = sim.endpoint(0).protocol_name();
    let mut ready = BinaryHeap::new();
    for r in 1..p {
        ready.push(Reverse((0, r)));
    }
    let procs = (0..p)
        .map(|r| Proc {
            state: if r == 0 { State::Running } else { State::Ready },
            inbox: VecDeque::new(),
            deadline: None,
            watch: Vec::new(),
            watch_busy: false,
        })
        .collect();
    let sh = Arc::new(Shared {
        world: Mutex::new(World {
            sim,
            procs,
            ready,
            deadlines: BinaryHeap::new(),
            turn: Some(0),
            failed: None,
            live: p as usize,
            limit: setup.limit,
            cpu_per_message: setup.cpu_per_message,
            finish: vec![0; p as usize],
            handovers: 0,
            trace: Default::default(),
        }),
        turns: (0..p).map(|_| Condvar::new()).collect(),
    });
    let program = &program;
    let results: Vec<Option<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p)
            .map(|r| {
                let make = || SimTransport {
                    sh: sh.clone(),
                    rank: r,
                    nprocs: p,
                    protocol,
                };
                let t = make();
                let mine = make();
                std::thread::Builder::new()
                    .name(format!("sim-rank-{r}"))
                    .stack_size(setup.stack)
                    .spawn_scoped(s, move || {
                        if t.start().is_err() {
                            t.finish();
                            return None;
                        }
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            program(mine)
                        }));
                        if out.is_err() {
                            t.world().fail(format!("rank {r}'s program panicked"));
                        }
                        t.finish();
                        out.ok()
                    })
                    .expect("a thread for a simulated rank")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let mut w = sh.lock();
    if let Some(f) = w.failed.take() {
        return Err(SimError::Run(f));
    }
    let mut peers = PeerStats::default();
    let mut drops = DropCounts::default();
    for r in 0..p {
        let ep = w.sim.endpoint_ref(r);
        for q in (0..p).filter(|&q| q != r) {
            peers += &ep.peer_stats(q);
        }
        drops.add(&ep.drops());
    }
    Ok(SimOutcome {
        results: results
            .into_iter()
            .map(|x| x.expect("every rank returned"))
            .collect(),
        finish: std::mem::take(&mut w.finish),
        net: w.sim.net().total_stats(),
        peers,
        drops,
        handovers: w.handovers,
        trace: w.trace.finish(),
    })
}
