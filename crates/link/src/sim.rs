//! A simulated network with virtual time: N nodes on one switch, deterministic from a seed.
//!
//! Each node has a full-duplex link of a given bandwidth to a store-and-forward switch.
//! A datagram is serialized onto the sender's uplink (whose backlog is bounded like a
//! socket send buffer: a full uplink refuses datagrams, as `EAGAIN` would), crosses the
//! wire, queues at the switch's output port for its destination (finite: overflow drops),
//! is serialized onto the downlink, and lands in the receiver's buffer (finite: overflow
//! drops, as a socket buffer does when the process is slow). On the way it may be lost,
//! corrupted by bit errors, duplicated or delayed past later packets (reordering).
//!
//! Nodes also have a CPU: receiving and sending cost virtual time, during which a node
//! does not read its buffer, so bursts that arrive faster than it can process overflow
//! it, as in the BSPlib paper's Table 5.
//!
//! Time does not pass by itself: a runner (`bulkwire_engine::sim`) asks for the next
//! event time, advances the network to it and steps the nodes that are due.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Link, LinkCaps, Rank, RxBatch, Tx};

/// Time in nanoseconds of virtual time.
pub type Time = u64;

/// Parameters of a simulated network.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: u32,
    /// Largest datagram in bytes.
    pub mtu: usize,
    /// One-way propagation delay of each hop (node to switch, switch to node), ns.
    pub latency: Time,
    /// Bandwidth of each node's link, each direction, in bits per second.
    pub bandwidth_bps: u64,
    /// Bandwidth of each node's uplink (its NIC into the switch), when faster than the
    /// switch's ports; 0: `bandwidth_bps`. A host on a shaped switch port sends at its
    /// own line rate, so bursts meet the port's buffer at full speed (a tc-shaped bridge).
    pub uplink_bps: u64,
    /// Bytes a node's uplink may have queued before it refuses datagrams (send buffer).
    pub send_buffer: usize,
    /// Bytes the switch may queue per output port before it drops.
    pub switch_buffer: usize,
    /// Bytes a node's receive buffer holds before it drops.
    pub recv_buffer: usize,
    /// Probability that a datagram is lost outright.
    pub loss: f64,
    /// Probability that any one bit is flipped (bit-error rate).
    pub ber: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
    /// Probability that a datagram is held back by up to `reorder_delay`, so that later
    /// ones overtake it.
    pub reorder: f64,
    pub reorder_delay: Time,
    /// Probability that a datagram has one byte altered, whatever its length (as
    /// `BULKWIRE_FAULTS`'s `corrupt`; `ber` makes long datagrams likelier to suffer).
    pub corrupt: f64,
    /// Probability that a datagram is held for `delay_time` on its way.
    pub delay: f64,
    pub delay_time: Time,
    /// CPU time a node spends per datagram received / sent, ns.
    pub cpu_per_recv: Time,
    pub cpu_per_send: Time,
    pub seed: u64,
    /// `None`: one switch. `Some(k)`: a two-tier fat tree of leaf switches with `k`
    /// nodes each and `k` uplinks, one to each of `k` spine switches (full bisection);
    /// traffic between leaves goes up to spine `dst mod k` and down (d-mod-k routing).
    /// Every output port on the way has `switch_buffer` bytes and the link bandwidth.
    pub hosts_per_leaf: Option<u32>,
    /// Corruption may be turned on during the run ([`SimNet::set_faults`]). Links are
    /// intact (the endpoints skip the CRC) only when this is off and `ber` and `corrupt`
    /// are 0 as the network is built.
    pub may_corrupt: bool,
}

impl SimConfig {
    /// A 10 Gb/s cluster switch with jumbo frames, 2 us hops, no faults.
    /// Whether datagrams may arrive with bytes altered.
    pub fn alters_bytes(&self) -> bool {
        self.may_corrupt || self.ber > 0.0 || self.corrupt > 0.0
    }

    pub fn new(nodes: u32) -> SimConfig {
        SimConfig {
            nodes,
            mtu: 9000,
            latency: 2_000,
            bandwidth_bps: 10_000_000_000,
            uplink_bps: 0,
            send_buffer: 256 << 10,
            switch_buffer: 1 << 20,
            recv_buffer: 1 << 20,
            loss: 0.0,
            ber: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: 20_000,
            corrupt: 0.0,
            delay: 0.0,
            delay_time: 1_000_000,
            cpu_per_recv: 500,
            cpu_per_send: 300,
            seed: 1,
            hosts_per_leaf: None,
            may_corrupt: false,
        }
    }

    /// The switch output ports a datagram from `src` to `dst` queues at, in order, and
    /// their number. Ports `0..nodes` lead to the nodes; a fat tree's uplinks and spine
    /// ports follow.
    fn route(&self, src: Rank, dst: Rank) -> ([u32; 3], usize) {
        let Some(k) = self.hosts_per_leaf.filter(|&k| k > 0) else {
            return ([dst, 0, 0], 1);
        };
        let (n, leaves) = (self.nodes, self.nodes.div_ceil(k));
        let (ls, ld) = (src / k, dst / k);
        if ls == ld {
            return ([dst, 0, 0], 1);
        }
        let spine = dst % k;
        let up = n + ls * k + spine;
        let down = n + leaves * k + spine * leaves + ld;
        ([up, down, dst], 3)
    }

    /// Output ports of the whole network.
    fn ports(&self) -> usize {
        match self.hosts_per_leaf.filter(|&k| k > 0) {
            None => self.nodes as usize,
            Some(k) => (self.nodes + 2 * self.nodes.div_ceil(k) * k) as usize,
        }
    }

    /// Nanoseconds to serialize `bytes` onto one link.
    fn wire_time(&self, bytes: usize) -> Time {
        ((bytes as u128 * 8 * 1_000_000_000) / self.bandwidth_bps.max(1) as u128) as Time
    }

    /// Bits per second of a node's uplink.
    fn uplink_rate(&self) -> u64 {
        if self.uplink_bps == 0 {
            self.bandwidth_bps
        } else {
            self.uplink_bps
        }
    }

    /// Nanoseconds to serialize `bytes` onto a node's uplink.
    fn uplink_time(&self, bytes: usize) -> Time {
        ((bytes as u128 * 8 * 1_000_000_000) / self.uplink_rate().max(1) as u128) as Time
    }
}

/// What happened to the datagrams a node sent and received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub sent: u64,
    pub sent_bytes: u64,
    /// Refused because the uplink was full (the sender retries).
    pub refused: u64,
    pub delivered: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub delayed: u64,
    /// Dropped at the switch port toward this node.
    pub switch_overflow: u64,
    /// Dropped because this node's receive buffer was full.
    pub recv_overflow: u64,
    /// Dropped because this node was dead.
    pub to_dead: u64,
}

impl NodeStats {
    fn add(&mut self, o: &NodeStats) {
        self.sent += o.sent;
        self.sent_bytes += o.sent_bytes;
        self.refused += o.refused;
        self.delivered += o.delivered;
        self.lost += o.lost;
        self.corrupted += o.corrupted;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.delayed += o.delayed;
        self.switch_overflow += o.switch_overflow;
        self.recv_overflow += o.recv_overflow;
        self.to_dead += o.to_dead;
    }
}

enum Stage {
    /// At a switch, for the `hop`-th output port of `path`.
    AtSwitch {
        path: [u32; 3],
        hops: u8,
        hop: u8,
    },
    AtReceiver,
}

struct InFlight {
    at: Time,
    order: u64,
    stage: Stage,
    dst: Rank,
    data: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.order) == (o.at, o.order)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(o.at, o.order))
    }
}

struct Node {
    uplink_free: Time,
    rx: VecDeque<Vec<u8>>,
    rx_bytes: usize,
    dead: bool,
    stats: NodeStats,
}

struct Net {
    cfg: SimConfig,
    now: Time,
    order: u64,
    rng: ChaCha8Rng,
    nodes: Vec<Node>,
    /// When each switch output port is free again (see [`SimConfig::route`]).
    ports: Vec<Time>,
    events: BinaryHeap<Reverse<InFlight>>,
    /// Nodes whose receive buffer gained data since the runner last asked.
    arrivals: Vec<Rank>,
}

impl Net {
    fn schedule(&mut self, at: Time, stage: Stage, dst: Rank, data: Vec<u8>) {
        self.order += 1;
        self.events.push(Reverse(InFlight {
            at,
            order: self.order,
            stage,
            dst,
            data,
        }));
    }

    fn corrupt(&mut self, data: &mut [u8]) -> bool {
        if data.is_empty() {
            return false;
        }
        if self.cfg.corrupt > 0.0 && self.rng.random::<f64>() < self.cfg.corrupt {
            let at = self.rng.random_range(0..data.len());
            data[at] ^= self.rng.random_range(1..=255u8);
            return true;
        }
        if self.cfg.ber <= 0.0 {
            return false;
        }
        let bits = data.len() as f64 * 8.0;
        let p_clean = (1.0 - self.cfg.ber).powf(bits);
        if self.rng.random::<f64>() < p_clean {
            return false;
        }
        // At least one flipped bit; more when the rate is high.
        let flips = 1 + (self.cfg.ber * bits) as usize;
        for _ in 0..flips.min(64) {
            let bit = self.rng.random_range(0..data.len() * 8);
            data[bit / 8] ^= 1 << (bit % 8);
        }
        true
    }

    /// A datagram reaches a switch and queues at the `hop`-th port of its path (faults
    /// strike on the last hop, the port toward the destination).
    fn at_switch(
        &mut self,
        t: Time,
        dst: Rank,
        path: [u32; 3],
        hops: u8,
        hop: u8,
        mut data: Vec<u8>,
    ) {
        let last = hop + 1 == hops;
        // Faults on the way are counted at the node the datagram was heading for.
        if last && self.cfg.loss > 0.0 && self.rng.random::<f64>() < self.cfg.loss {
            self.nodes[dst as usize].stats.lost += 1;
            return;
        }
        let port = path[hop as usize] as usize;
        let backlog_ns = self.ports[port].saturating_sub(t);
        let backlog =
            (backlog_ns as u128 * self.cfg.bandwidth_bps as u128 / 8_000_000_000) as usize;
        if backlog + data.len() > self.cfg.switch_buffer {
            self.nodes[dst as usize].stats.switch_overflow += 1;
            return;
        }
        let wire = self.cfg.wire_time(data.len());
        let depart = self.ports[port].max(t) + wire;
        self.ports[port] = depart;
        if !last {
            let stage = Stage::AtSwitch {
                path,
                hops,
                hop: hop + 1,
            };
            self.schedule(depart + self.cfg.latency, stage, dst, data);
            return;
        }
        if self.corrupt(&mut data) {
            self.nodes[dst as usize].stats.corrupted += 1;
        }
        let mut arrive = depart + self.cfg.latency;
        if self.cfg.reorder > 0.0 && self.rng.random::<f64>() < self.cfg.reorder {
            arrive += self.rng.random_range(1..=self.cfg.reorder_delay.max(1));
            self.nodes[dst as usize].stats.reordered += 1;
        }
        if self.cfg.delay > 0.0 && self.rng.random::<f64>() < self.cfg.delay {
            arrive += self.cfg.delay_time;
            self.nodes[dst as usize].stats.delayed += 1;
        }
        if self.cfg.dup > 0.0 && self.rng.random::<f64>() < self.cfg.dup {
            self.nodes[dst as usize].stats.duplicated += 1;
            let later = arrive + wire + self.rng.random_range(0..=self.cfg.latency);
            self.schedule(later, Stage::AtReceiver, dst, data.clone());
        }
        self.schedule(arrive, Stage::AtReceiver, dst, data);
    }

    fn at_receiver(&mut self, dst: Rank, data: Vec<u8>) {
        let n = &mut self.nodes[dst as usize];
        if n.dead {
            n.stats.to_dead += 1;
            return;
        }
        if n.rx_bytes + data.len() > self.cfg.recv_buffer {
            n.stats.recv_overflow += 1;
            return;
        }
        n.rx_bytes += data.len();
        n.rx.push_back(data);
        n.stats.delivered += 1;
        self.arrivals.push(dst);
    }
}

/// The network all simulated links share. Cloning gives another handle to it.
#[derive(Clone)]
pub struct SimNet {
    inner: Arc<Mutex<Net>>,
}

impl SimNet {
    pub fn new(cfg: SimConfig) -> SimNet {
        assert!(cfg.nodes > 0, "a network needs nodes");
        let nodes = (0..cfg.nodes)
            .map(|_| Node {
                uplink_free: 0,
                rx: VecDeque::new(),
                rx_bytes: 0,
                dead: false,
                stats: NodeStats::default(),
            })
            .collect();
        SimNet {
            inner: Arc::new(Mutex::new(Net {
                rng: ChaCha8Rng::seed_from_u64(cfg.seed),
                ports: vec![0; cfg.ports()],
                cfg,
                now: 0,
                order: 0,
                nodes,
                events: BinaryHeap::new(),
                arrivals: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rank `rank`'s link.
    pub fn link(&self, rank: Rank) -> SimLink {
        let n = self.lock();
        assert!(rank < n.cfg.nodes, "rank {rank} outside the network");
        SimLink {
            net: self.clone(),
            rank,
            nprocs: n.cfg.nodes,
            mtu: n.cfg.mtu,
            intact: !n.cfg.alters_bytes(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> SimConfig {
        self.lock().cfg.clone()
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.lock().now
    }

    /// Changes the fault parameters (loss, errors, duplication, reordering, delay) from
    /// now on, for fault schedules that vary during a run. The shape of the network
    /// (nodes, MTU, buffers, bandwidth) stays as built.
    pub fn set_faults(&self, f: impl FnOnce(&mut SimConfig)) {
        let mut n = self.lock();
        let mut cfg = n.cfg.clone();
        f(&mut cfg);
        assert!(
            n.cfg.alters_bytes() || !cfg.alters_bytes(),
            "set_faults turns corruption on in a network built intact: build it with \
             may_corrupt (its links skip the CRC otherwise)"
        );
        let c = &mut n.cfg;
        (c.loss, c.ber, c.dup, c.corrupt) = (cfg.loss, cfg.ber, cfg.dup, cfg.corrupt);
        (c.reorder, c.reorder_delay) = (cfg.reorder, cfg.reorder_delay);
        (c.delay, c.delay_time) = (cfg.delay, cfg.delay_time);
    }

    /// Time of the next datagram movement inside the network.
    pub fn next_event(&self) -> Option<Time> {
        self.lock().events.peek().map(|Reverse(e)| e.at)
    }

    /// Moves time forward to `t`, delivering everything due by then. Returns the nodes
    /// whose receive buffers gained datagrams (each once, in order of first arrival).
    pub fn advance(&self, t: Time) -> Vec<Rank> {
        let mut n = self.lock();
        assert!(t >= n.now, "virtual time runs forward");
        n.now = t;
        while n.events.peek().is_some_and(|Reverse(e)| e.at <= t) {
            let Reverse(e) = n.events.pop().unwrap();
            match e.stage {
                Stage::AtSwitch { path, hops, hop } => {
                    n.at_switch(e.at, e.dst, path, hops, hop, e.data)
                }
                Stage::AtReceiver => n.at_receiver(e.dst, e.data),
            }
        }
        let mut out = std::mem::take(&mut n.arrivals);
        let mut seen = vec![false; n.nodes.len()];
        out.retain(|&r| !std::mem::replace(&mut seen[r as usize], true));
        out
    }

    /// Whether `rank` has datagrams waiting in its receive buffer.
    pub fn has_input(&self, rank: Rank) -> bool {
        !self.lock().nodes[rank as usize].rx.is_empty()
    }

    /// When `rank`'s uplink will have room for a full datagram again.
    pub fn uplink_ready(&self, rank: Rank) -> Time {
        let n = self.lock();
        let room_ns = n
            .cfg
            .uplink_time(n.cfg.send_buffer.saturating_sub(n.cfg.mtu));
        n.nodes[rank as usize]
            .uplink_free
            .saturating_sub(room_ns)
            .max(n.now)
    }

    /// Kills `rank`: it sends nothing more and everything sent to it is dropped.
    pub fn kill(&self, rank: Rank) {
        let mut n = self.lock();
        let node = &mut n.nodes[rank as usize];
        node.dead = true;
        node.rx.clear();
        node.rx_bytes = 0;
    }

    /// Whether `rank` was killed.
    pub fn is_dead(&self, rank: Rank) -> bool {
        self.lock().nodes[rank as usize].dead
    }

    /// Statistics of one node.
    pub fn stats(&self, rank: Rank) -> NodeStats {
        self.lock().nodes[rank as usize].stats
    }

    /// Statistics summed over all nodes.
    pub fn total_stats(&self) -> NodeStats {
        let n = self.lock();
        let mut t = NodeStats::default();
        for node in &n.nodes {
            t.add(&node.stats);
        }
        t
    }

    /// CPU time a node spends receiving and sending the given numbers of datagrams.
    pub fn cpu_cost(&self, received: usize, sent: usize) -> Time {
        let n = self.lock();
        received as Time * n.cfg.cpu_per_recv + sent as Time * n.cfg.cpu_per_send
    }
}

/// One node's attachment to a [`SimNet`].
pub struct SimLink {
    net: SimNet,
    rank: Rank,
    nprocs: u32,
    mtu: usize,
    /// No bit errors are configured: the bytes that arrive are the bytes sent.
    intact: bool,
}

impl Link for SimLink {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    fn capabilities(&self) -> LinkCaps {
        LinkCaps {
            intact: self.intact,
            // In-process: a forgery is a test's own injection.
            private: true,
            ..LinkCaps::lossy(self.nprocs(), self.mtu)
        }
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        let mut n = self.net.lock();
        let me = self.rank as usize;
        if n.nodes[me].dead {
            return Ok(batch.len());
        }
        let now = n.now;
        for (i, tx) in batch.iter().enumerate() {
            let len = tx.len();
            if len > n.cfg.mtu {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "datagram of {len} bytes exceeds the simulated MTU {}",
                        n.cfg.mtu
                    ),
                ));
            }
            let backlog_ns = n.nodes[me].uplink_free.saturating_sub(now);
            let backlog =
                (backlog_ns as u128 * n.cfg.uplink_rate() as u128 / 8_000_000_000) as usize;
            if backlog + len > n.cfg.send_buffer {
                n.nodes[me].stats.refused += 1;
                return Ok(i);
            }
            let start = n.nodes[me].uplink_free.max(now);
            let done = start + n.cfg.uplink_time(len);
            n.nodes[me].uplink_free = done;
            n.nodes[me].stats.sent += 1;
            n.nodes[me].stats.sent_bytes += len as u64;
            let at = done + n.cfg.latency;
            if (tx.dst as usize) < n.nodes.len() {
                let (path, hops) = n.cfg.route(self.rank, tx.dst);
                let stage = Stage::AtSwitch {
                    path,
                    hops: hops as u8,
                    hop: 0,
                };
                n.schedule(at, stage, tx.dst, tx.to_vec());
            }
        }
        Ok(batch.len())
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        let mut n = self.net.lock();
        let node = &mut n.nodes[self.rank as usize];
        while !batch.is_full() {
            let Some(d) = node.rx.pop_front() else { break };
            node.rx_bytes -= d.len();
            // A datagram larger than the receiver's slots is truncated by a real socket
            // and then fails its length check; dropping it here is the same outcome.
            batch.push_copy(&d);
        }
        Ok(batch.len())
    }

    /// Virtual time does not pass while a node waits: the runner decides what happens
    /// next, so waiting returns at once.
    fn wait(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(dst: Rank, d: &[u8]) -> Tx<'_> {
        Tx {
            dst,
            head: &d[..1],
            body: &d[1..],
        }
    }

    #[test]
    fn latency_and_bandwidth_set_arrival_time() {
        let mut cfg = SimConfig::new(2);
        cfg.bandwidth_bps = 8_000_000_000; // one byte per ns
        cfg.latency = 1_000;
        let net = SimNet::new(cfg);
        let mut a = net.link(0);
        let mut b = net.link(1);
        let d = vec![7u8; 1000];
        assert_eq!(a.send(&[tx(1, &d), tx(1, &d)]).unwrap(), 2);
        // First: 1000 ns onto the uplink, 1000 latency, 1000 out of the switch, 1000 latency.
        assert_eq!(net.next_event(), Some(2_000));
        assert!(net.advance(3_999).is_empty());
        assert_eq!(net.advance(4_000), vec![1]);
        let mut rx = RxBatch::new(4, 2000);
        assert_eq!(b.recv(&mut rx).unwrap(), 1);
        assert_eq!(rx.get(0), &d[..]);
        // The second is one serialization time behind.
        assert_eq!(net.advance(5_000), vec![1]);
        assert_eq!(b.recv(&mut rx).unwrap(), 1);
    }

    #[test]
    fn full_uplink_refuses_and_full_port_drops() {
        let mut cfg = SimConfig::new(3);
        cfg.send_buffer = 2500;
        cfg.switch_buffer = 1500;
        let net = SimNet::new(cfg);
        let mut a = net.link(0);
        let mut c = net.link(2);
        let d = vec![1u8; 1000];
        assert_eq!(a.send(&[tx(1, &d), tx(1, &d), tx(1, &d)]).unwrap(), 2);
        assert_eq!(net.stats(0).refused, 1);
        // Two senders into one port at once: the port holds one and a half datagrams.
        assert_eq!(c.send(&[tx(1, &d), tx(1, &d)]).unwrap(), 2);
        net.advance(1_000_000);
        let s = net.stats(1);
        assert_eq!(s.delivered + s.switch_overflow, 4);
        assert!(s.switch_overflow >= 1);
    }

    #[test]
    fn faults_are_deterministic_per_seed() {
        let run = |seed| {
            let mut cfg = SimConfig::new(2);
            cfg.loss = 0.1;
            cfg.ber = 1e-5;
            cfg.dup = 0.05;
            cfg.reorder = 0.05;
            cfg.recv_buffer = usize::MAX / 2;
            cfg.send_buffer = usize::MAX / 2;
            cfg.switch_buffer = usize::MAX / 2;
            cfg.seed = seed;
            let net = SimNet::new(cfg);
            let mut a = net.link(0);
            let mut b = net.link(1);
            let mut got = Vec::new();
            let mut rx = RxBatch::new(64, 9000);
            for i in 0..2000u32 {
                let d = [i.to_le_bytes().as_slice(), &[0u8; 996]].concat();
                a.send(&[tx(1, &d)]).unwrap();
            }
            net.advance(u64::MAX / 2);
            while b.recv(&mut rx).unwrap() > 0 {
                got.extend(rx.iter().map(|d| d.to_vec()));
            }
            (got, net.stats(1))
        };
        let (g1, s1) = run(5);
        let (g2, s2) = run(5);
        let (g3, _) = run(6);
        assert_eq!(g1, g2);
        assert_eq!(s1, s2);
        assert_ne!(g1, g3);
        assert!((150..=250).contains(&s1.lost), "lost {}", s1.lost);
        assert!(s1.corrupted > 0 && s1.duplicated > 0 && s1.reordered > 0);
        assert_eq!(s1.delivered, 2000 - s1.lost + s1.duplicated);
        let order: Vec<u32> = g1
            .iter()
            .map(|d| u32::from_le_bytes(d[..4].try_into().unwrap()))
            .collect();
        assert!(order.windows(2).any(|w| w[1] < w[0]), "some reordering");
    }

    /// Corruption by datagram (whatever its length), delays, and faults changed in the
    /// middle of a run.
    #[test]
    fn corruption_delay_and_faults_changed_midway() {
        let mut cfg = SimConfig::new(2);
        cfg.corrupt = 0.1;
        cfg.delay = 0.1;
        cfg.delay_time = 5_000_000;
        cfg.recv_buffer = usize::MAX / 2;
        cfg.switch_buffer = usize::MAX / 2;
        cfg.send_buffer = usize::MAX / 2;
        let net = SimNet::new(cfg);
        let mut a = net.link(0);
        let mut b = net.link(1);
        let mut rx = RxBatch::new(64, 9000);
        let mut drain = |t: Time| {
            net.advance(t);
            let mut got = Vec::new();
            while b.recv(&mut rx).unwrap() > 0 {
                got.extend(rx.iter().map(|d| d.to_vec()));
            }
            got
        };
        let d = [7u8; 100];
        for _ in 0..1000 {
            a.send(&[tx(1, &d)]).unwrap();
        }
        // Everything undelayed is in by 1 ms; the delayed ones 5 ms later.
        let early = drain(1_000_000);
        let late = drain(10_000_000);
        let s = net.stats(1);
        assert!((50..=150).contains(&s.delayed), "{s:?}");
        assert_eq!(
            (early.len() as u64, late.len() as u64),
            (1000 - s.delayed, s.delayed)
        );
        let damaged = early.iter().chain(&late).filter(|g| g[..] != d[..]).count();
        assert_eq!(damaged as u64, s.corrupted);
        assert!((50..=150).contains(&s.corrupted), "{s:?}");
        // One byte altered per corrupted datagram.
        for g in early.iter().chain(&late).filter(|g| g[..] != d[..]) {
            assert_eq!(g.iter().zip(&d).filter(|(x, y)| x != y).count(), 1);
        }
        net.set_faults(|c| {
            c.loss = 1.0;
            c.corrupt = 0.0;
            c.delay = 0.0;
        });
        for _ in 0..10 {
            a.send(&[tx(1, &d)]).unwrap();
        }
        assert!(drain(20_000_000).is_empty());
        assert_eq!(net.stats(1).lost, 10);
        assert_eq!(net.config().mtu, 9000, "the shape of the network stays");
    }

    #[test]
    fn fat_tree_routes_across_leaves_through_three_ports() {
        let mut cfg = SimConfig::new(8);
        cfg.bandwidth_bps = 8_000_000_000; // one byte per ns
        cfg.latency = 1_000;
        cfg.hosts_per_leaf = Some(4);
        let net = SimNet::new(cfg.clone());
        let mut a = net.link(0);
        let d = vec![7u8; 1000];
        // Same leaf: uplink, one port, as on one switch.
        a.send(&[tx(1, &d)]).unwrap();
        assert_eq!(net.advance(3_999), Vec::<Rank>::new());
        assert_eq!(net.advance(4_000), vec![1]);
        // Another leaf: uplink, leaf uplink port, spine port, leaf port: two more hops.
        a.send(&[tx(5, &d)]).unwrap();
        assert!(net.advance(4_000 + 7_999).is_empty());
        assert_eq!(net.advance(4_000 + 8_000), vec![5]);
        // Two senders of one leaf to two nodes of another share no port (d-mod-k): both
        // arrive as fast as one.
        let mut b = net.link(1);
        let t0 = 100_000;
        net.advance(t0);
        a.send(&[tx(6, &d)]).unwrap();
        b.send(&[tx(7, &d)]).unwrap();
        assert_eq!(net.advance(t0 + 8_000), vec![6, 7]);
        assert_eq!(cfg.route(0, 6).0, [8 + 2, 8 + 8 + 2 * 2 + 1, 6]);
    }

    #[test]
    fn dead_nodes_receive_nothing() {
        let net = SimNet::new(SimConfig::new(2));
        let mut a = net.link(0);
        net.kill(1);
        a.send(&[tx(1, &[1, 2, 3])]).unwrap();
        net.advance(1_000_000);
        assert!(!net.has_input(1));
        assert_eq!(net.stats(1).to_dead, 1);
    }
}
