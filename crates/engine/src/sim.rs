//! Deterministic simulation: many [`Endpoint`]s over a [`SimNet`], stepped in virtual time.
//!
//! The runner keeps an agenda of when each node next has work (a datagram in its buffer,
//! a protocol timer, room again on a full uplink, or a call made by the test) and always
//! advances to the earliest, so a run is a pure function of the configuration and seed.
//! Nodes pay CPU time for what they process (see [`SimConfig`]), so a node flooded faster
//! than it can read really overflows its receive buffer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bulkwire_link::sim::{SimConfig, SimNet};
use bulkwire_link::{Link, Rank};
use bulkwire_protocol::wire::HEADER_LEN;
use bulkwire_protocol::{Common, MsgId, Protocol, Time};
use bytes::Bytes;

use crate::Error;
use crate::endpoint::{Endpoint, EndpointConfig, Event, Progress};

/// Why a simulation run stopped before its goal.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    #[error("nothing left to happen at {now} ns but the goal is not reached")]
    Stalled { now: Time },
    #[error("virtual time limit of {limit} ns reached")]
    TimeLimit { limit: Time },
    #[error("node {rank} failed: {msg}")]
    Node { rank: Rank, msg: String },
    /// A run of programs over the simulation failed (see [`crate::simproc`]).
    #[error("{0}")]
    Run(String),
}

struct Node {
    ep: Endpoint,
    busy_until: Time,
    /// Paused (a stopped process): not stepped before this time.
    paused_until: Time,
    /// The time this node is scheduled for in the agenda, if any.
    wake: Option<Time>,
    inbox: Vec<Event>,
}

/// A simulated cluster: one endpoint per node of a [`SimNet`].
pub struct SimCluster {
    net: SimNet,
    nodes: Vec<Node>,
    agenda: BinaryHeap<Reverse<(Time, Rank)>>,
    /// Times the caller asked [`SimCluster::run_until`] to stop by (see `alarm`).
    alarms: BinaryHeap<Reverse<Time>>,
    now: Time,
    steps: u64,
    auto_accept: bool,
    /// Nodes stepped since [`SimCluster::take_touched`] last ran, when tracking is on.
    touched: Option<Vec<Rank>>,
}

impl SimCluster {
    /// A cluster on `cfg` whose nodes run the protocol built by `make` from each node's
    /// [`Common`] settings (payload size derived from the MTU).
    pub fn new(
        cfg: SimConfig,
        ep_cfg: EndpointConfig,
        mut make: impl FnMut(Common) -> Box<dyn Protocol>,
    ) -> SimCluster {
        let net = SimNet::new(cfg.clone());
        // A simulated node reads its buffer at no system-call cost, so a few receive
        // slots do; 32 full-size slots per node would dominate the memory of a big cluster.
        let mut ep_cfg = ep_cfg;
        ep_cfg.rx_slots = ep_cfg.rx_slots.min(4);
        let nodes = (0..cfg.nodes)
            .map(|r| {
                let link = net.link(r);
                let common = Common::new(r, cfg.nodes, link.capabilities().max_to(0) - HEADER_LEN);
                Node {
                    ep: Endpoint::new(Box::new(link), make(common), ep_cfg.clone()),
                    busy_until: 0,
                    paused_until: 0,
                    wake: None,
                    inbox: Vec::new(),
                }
            })
            .collect();
        SimCluster {
            net,
            nodes,
            agenda: BinaryHeap::new(),
            alarms: BinaryHeap::new(),
            now: 0,
            steps: 0,
            auto_accept: true,
            touched: None,
        }
    }

    /// A cluster running the protocol registered under `name`, with default settings.
    pub fn with_protocol(cfg: SimConfig, ep_cfg: EndpointConfig, name: &str) -> SimCluster {
        let protocols = bulkwire_protocol::ProtocolConfigs::default();
        SimCluster::new(cfg, ep_cfg, |c| {
            bulkwire_protocol::by_name(name, c, &protocols).expect("known protocol")
        })
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Number of node steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The network (statistics, faults).
    pub fn net(&self) -> &SimNet {
        &self.net
    }

    pub fn nodes(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// Node `rank`'s endpoint.
    pub fn endpoint(&mut self, rank: Rank) -> &mut Endpoint {
        &mut self.nodes[rank as usize].ep
    }

    /// Node `rank`'s endpoint, to look at.
    pub fn endpoint_ref(&self, rank: Rank) -> &Endpoint {
        &self.nodes[rank as usize].ep
    }

    /// `rank`'s CPU works `ns` more (a cost the endpoint does not see, such as the
    /// program's own per-message work): its next steps wait for it.
    pub fn charge_cpu(&mut self, rank: Rank, ns: Time) {
        let n = &mut self.nodes[rank as usize];
        n.busy_until = n.busy_until.max(self.now) + ns;
    }

    /// Queues a message from `from` to `to` at the current time.
    pub fn send(&mut self, from: Rank, to: Rank, data: Bytes) -> Result<MsgId, Error> {
        let now = self.now;
        let id = self.nodes[from as usize].ep.send(now, to, data, false)?;
        self.wake(from, now);
        Ok(id)
    }

    /// Whether each node accepts every [`Event::Announce`] (rmpp) the moment it is
    /// reported, as an upper layer with a receive always posted would. On by default, so
    /// that tests written for any protocol run rmpp too; the Announce is then not put in
    /// the node's events. Off, the test accepts with [`SimCluster::accept`].
    pub fn set_auto_accept(&mut self, on: bool) {
        self.auto_accept = on;
    }

    /// `rank` accepts the message `id` that `from` announced (rmpp).
    pub fn accept(&mut self, rank: Rank, from: Rank, id: MsgId) {
        let now = self.now;
        if let Some(a) = self.nodes[rank as usize].ep.protocol().announcing() {
            a.accept(now, from, id);
        }
        self.wake(rank, now);
    }

    /// `rank` starts or stops waiting for data from `peer`.
    pub fn expect(&mut self, rank: Rank, peer: Rank, waiting: bool) {
        let now = self.now;
        self.nodes[rank as usize].ep.expect(now, peer, waiting);
        self.wake(rank, now);
    }

    /// Events delivered to `rank` so far, taken out.
    pub fn take_events(&mut self, rank: Rank) -> Vec<Event> {
        std::mem::take(&mut self.nodes[rank as usize].inbox)
    }

    /// Events delivered to `rank` so far, left in place.
    pub fn events(&self, rank: Rank) -> &[Event] {
        &self.nodes[rank as usize].inbox
    }

    /// Kills `rank`: it stops running and the network drops its traffic.
    pub fn kill(&mut self, rank: Rank) {
        self.net.kill(rank);
        self.nodes[rank as usize].wake = None;
    }

    /// Starts recording which nodes are stepped (see [`SimCluster::take_touched`]).
    pub fn track_touched(&mut self) {
        self.touched.get_or_insert_with(Vec::new);
    }

    /// Nodes stepped since the last call (a node may appear more than once), when
    /// [`SimCluster::track_touched`] was called: a layer above that waits on a node's
    /// events looks at these nodes only.
    pub fn take_touched(&mut self) -> Vec<Rank> {
        self.touched
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Schedules a step of `rank` at `at` (or when its CPU is free, if later).
    pub fn wake_at(&mut self, rank: Rank, at: Time) {
        self.wake(rank, at);
    }

    /// Until when `rank`'s CPU is busy with what it processed.
    pub fn busy_until(&self, rank: Rank) -> Time {
        self.nodes[rank as usize].busy_until
    }

    /// Steps `rank` now if its CPU is free (a process driving its own endpoint);
    /// otherwise schedules the step for when it is, and reports no progress.
    pub fn poll_node(&mut self, rank: Rank) -> Result<Progress, SimError> {
        let busy = self.nodes[rank as usize].busy_until;
        if busy > self.now || self.net.is_dead(rank) {
            self.wake(rank, busy);
            return Ok(Progress::default());
        }
        self.step_node(rank)
    }

    /// Pauses `rank` until `until`, as SIGSTOP would: it neither reads nor sends nor runs
    /// timers meanwhile, while the network keeps filling (and overflowing) its receive
    /// buffer. It resumes by itself.
    pub fn pause(&mut self, rank: Rank, until: Time) {
        let n = &mut self.nodes[rank as usize];
        n.paused_until = n.paused_until.max(until);
        self.wake(rank, until);
    }

    /// Whether `rank` is paused now.
    pub fn is_paused(&self, rank: Rank) -> bool {
        self.nodes[rank as usize].paused_until > self.now
    }

    /// Makes [`SimCluster::run_until`] look at its goal at time `at` even if nothing else
    /// happens then: a test's program that acts at given times (a send at 5 ms) sets one.
    pub fn alarm(&mut self, at: Time) {
        self.alarms.push(Reverse(at.max(self.now)));
    }

    fn wake(&mut self, rank: Rank, at: Time) {
        let n = &mut self.nodes[rank as usize];
        let at = at.max(n.busy_until).max(n.paused_until);
        if n.wake.is_none_or(|w| at < w) {
            n.wake = Some(at);
            self.agenda.push(Reverse((at, rank)));
        }
    }

    fn step_node(&mut self, rank: Rank) -> Result<Progress, SimError> {
        if self.net.is_dead(rank) {
            return Ok(Progress::default());
        }
        if let Some(t) = &mut self.touched {
            t.push(rank);
        }
        let now = self.now;
        let node = &mut self.nodes[rank as usize];
        node.wake = None;
        if node.paused_until > now {
            let at = node.paused_until;
            self.wake(rank, at);
            return Ok(Progress::default());
        }
        let mut prog = node.ep.step(now).map_err(|e| SimError::Node {
            rank,
            msg: e.to_string(),
        })?;
        self.steps += 1;
        loop {
            let mut accepted = false;
            while let Some(e) = node.ep.poll_event() {
                match e {
                    Event::Announce { from, id, .. } if self.auto_accept => {
                        if let Some(a) = node.ep.protocol().announcing() {
                            a.accept(now, from, id);
                        }
                        accepted = true;
                    }
                    e => node.inbox.push(e),
                }
            }
            if !accepted {
                break;
            }
            // Send the answers to what was just accepted in the same instant.
            let more = node.ep.step(now).map_err(|e| SimError::Node {
                rank,
                msg: e.to_string(),
            })?;
            prog.received += more.received;
            prog.sent += more.sent;
        }
        node.busy_until = now + self.net.cpu_cost(prog.received, prog.sent);
        let mut next = node.ep.next_deadline();
        if node.ep.has_unsent() {
            let ready = self.net.uplink_ready(rank).max(now + 1);
            next = Some(next.map_or(ready, |t| t.min(ready)));
        }
        if self.net.has_input(rank) {
            next = Some(node.busy_until.max(now + 1));
        }
        if let Some(t) = next {
            self.wake(rank, t.max(now));
        }
        Ok(prog)
    }

    /// Runs until `done` holds (checked after every instant), the network and all nodes
    /// fall idle, or virtual time passes `limit`. Returns the time the goal was reached.
    pub fn run_until(
        &mut self,
        limit: Time,
        mut done: impl FnMut(&mut SimCluster) -> bool,
    ) -> Result<Time, SimError> {
        loop {
            if done(self) {
                return Ok(self.now);
            }
            if !self.instant(limit)? {
                return Err(SimError::Stalled { now: self.now });
            }
        }
    }

    /// Moves to the next time anything happens and runs everything due then. False if
    /// nothing is left to happen; an error past `limit`.
    pub fn instant(&mut self, limit: Time) -> Result<bool, SimError> {
        let Some(t) = self.next_time() else {
            return Ok(false);
        };
        if t > limit {
            return Err(SimError::TimeLimit { limit });
        }
        self.now = t.max(self.now);
        while self.alarms.peek().is_some_and(|Reverse(a)| *a <= self.now) {
            self.alarms.pop();
        }
        for r in self.net.advance(self.now) {
            let busy = self.nodes[r as usize].busy_until;
            self.wake(r, busy.max(self.now));
        }
        while let Some(&Reverse((at, r))) = self.agenda.peek() {
            if at > self.now {
                break;
            }
            self.agenda.pop();
            if self.nodes[r as usize].wake == Some(at) {
                self.step_node(r)?;
            }
        }
        Ok(true)
    }

    /// Runs everything due up to time `t`, then sets the clock to `t` (even if nothing was
    /// due), so that calls made next happen at `t`.
    pub fn advance_to(&mut self, t: Time) -> Result<(), SimError> {
        match self.run_until(t, |c| c.next_time().is_none_or(|n| n > t)) {
            Ok(_) | Err(SimError::Stalled { .. }) => {
                self.now = self.now.max(t);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// When the next thing happens, if anything is scheduled.
    pub fn next_time(&mut self) -> Option<Time> {
        let node_next = loop {
            match self.agenda.peek() {
                Some(&Reverse((t, r))) if self.nodes[r as usize].wake != Some(t) => {
                    self.agenda.pop();
                }
                Some(&Reverse((t, _))) => break Some(t),
                None => break None,
            }
        };
        [
            self.net.next_event(),
            node_next,
            self.alarms.peek().map(|r| r.0),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs until nothing is left to happen (every message delivered and acknowledged,
    /// or given up on), or `limit`.
    pub fn run_to_quiescence(&mut self, limit: Time) -> Result<Time, SimError> {
        match self.run_until(limit, |_| false) {
            Err(SimError::Stalled { now }) => Ok(now),
            Ok(t) => Ok(t),
            Err(e) => Err(e),
        }
    }
}
