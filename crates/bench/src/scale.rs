//! `bwbench scale`: the BSP messaging layer of the BSPlib paper (Donaldson, Hill &
//! Skillicorn) at p = 16 to 4096, on a simulated cluster in virtual time. Every rank
//! runs the real `bsp_sync` (`bulkwire_bsp::core`) over the real protocol and endpoint,
//! as a thread of [`bulkwire_engine::simproc`] over the simulated network; only the
//! network and the CPU cost per datagram and per message are modelled. A run is a
//! function of its parameters and seed.
//!
//! Programs, each checking its result: empty supersteps (l), bspbench's h-relations of
//! single-word puts (g and l by least squares), a total exchange of `size` bytes per pair
//! (latin square, pid order or random, with and without pacing), and a sample sort with
//! BSMP.

use bulkwire_bsp::core::{Core, Net};
use bulkwire_bsp::{Config, Schedule};
use bulkwire_engine::Transport;
use bulkwire_engine::simproc::{self, SimOutcome, SimSetup, SimTransport, SimWatch};
use bulkwire_link::sim::{NodeStats, SimConfig};
use bulkwire_protocol::PeerStats;
use bulkwire_protocol::Time;
use bulkwire_protocol::wire::HEADER_LEN;
use serde::Serialize;

use crate::suite::Level;

/// How the nodes are wired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Topology {
    /// Every node on one switch.
    OneSwitch,
    /// Leaf switches of `hosts_per_leaf` nodes, each with as many uplinks to spine
    /// switches (full bisection), a route per destination.
    FatTree { hosts_per_leaf: u32 },
}

/// The simulated cluster: its parameters are printed with every result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    pub link_gbps: f64,
    /// Each node's uplink into the switch, when faster than the switch's ports (a host
    /// at its line rate on a shaped switch port); 0: `link_gbps`.
    pub uplink_gbps: f64,
    pub mtu: usize,
    /// Propagation and forwarding per hop (node to switch, switch to node), ns.
    pub hop_ns: Time,
    /// Output-port buffer of each switch port, bytes.
    pub switch_buffer: usize,
    /// The NIC's send queue: bytes a node's uplink holds before it refuses more.
    pub nic_queue: usize,
    /// A node's receive buffer (socket), bytes.
    pub recv_buffer: usize,
    /// CPU per datagram received / sent, and per message handed to the transport, ns.
    pub cpu_per_recv: Time,
    pub cpu_per_send: Time,
    pub cpu_per_message: Time,
    pub topology: Topology,
    pub protocol: String,
    /// Congestion control (`BULKWIRE_CC`).
    pub cc: bool,
    /// `BULKWIRE_CC=all` (with `cc`): the controller's experimental parts as well.
    pub cc_all: bool,
    pub seed: u64,
}

impl Cluster {
    /// A 25 Gb/s Ethernet cluster with 9000-byte frames and one switch tier: 1 us per hop,
    /// 512 KiB per switch port, a 256 KiB NIC queue, 4 MiB socket buffers, holefill.
    pub fn ethernet25() -> Cluster {
        Cluster {
            link_gbps: 25.0,
            uplink_gbps: 0.0,
            mtu: 9000,
            hop_ns: 1_000,
            switch_buffer: 512 << 10,
            nic_queue: 256 << 10,
            recv_buffer: 4 << 20,
            cpu_per_recv: 500,
            cpu_per_send: 300,
            cpu_per_message: 1_000,
            topology: Topology::OneSwitch,
            protocol: "holefill".into(),
            cc: true,
            cc_all: false,
            seed: 1,
        }
    }

    /// The switched cluster of the papers' network experiments (and issue's test bed):
    /// one switch whose ports run at `link_gbps` with 64 KiB output buffers, 1500-byte
    /// frames, hosts that send at 10 Gb/s into it (so a burst meets the port's buffer at
    /// full speed, as on a tc-shaped bridge), 20 us per hop, 256 KiB NIC queues and 4 MiB
    /// socket buffers.
    pub fn switched(link_gbps: f64, protocol: &str, cc: bool) -> Cluster {
        Cluster {
            link_gbps,
            uplink_gbps: 10.0,
            mtu: 1500,
            hop_ns: 20_000,
            switch_buffer: 64 << 10,
            nic_queue: 256 << 10,
            recv_buffer: 4 << 20,
            protocol: protocol.into(),
            cc,
            ..Cluster::ethernet25()
        }
    }

    /// This cluster with each host's uplink at the switch ports' rate and a 16 MiB send
    /// queue, as the emulated switch of `bwbench fabric` shapes each host's egress
    /// (`bulkwire_launch::testing::Fabric`): a host's packets leave one at a time at the
    /// link rate, in the order it sent them, instead of reaching the port as a burst.
    pub fn hosts_at_line_rate(self) -> Cluster {
        Cluster {
            uplink_gbps: self.link_gbps,
            nic_queue: 16 << 20,
            ..self
        }
    }

    /// The same cluster as a two-tier fat tree of `hosts_per_leaf`-port leaves.
    pub fn fat_tree(hosts_per_leaf: u32) -> Cluster {
        Cluster {
            topology: Topology::FatTree { hosts_per_leaf },
            ..Cluster::ethernet25()
        }
    }

    /// One line naming every parameter.
    pub fn describe(&self) -> String {
        let topo = match self.topology {
            Topology::OneSwitch => "one switch".to_string(),
            Topology::FatTree { hosts_per_leaf } => {
                format!("two-tier fat tree, {hosts_per_leaf} hosts per leaf, full bisection")
            }
        };
        let uplink = if self.uplink_gbps > 0.0 {
            format!(" ({} Gb/s uplinks)", self.uplink_gbps)
        } else {
            String::new()
        };
        format!(
            "{} Gb/s links{uplink}, {}-byte frames, {} us per hop, {}; switch ports {} KiB, \
             NIC queue {} KiB, receive buffer {} KiB; CPU {} ns per datagram received, {} \
             ns per datagram sent, {} ns per message; {}{}, seed {}",
            self.link_gbps,
            self.mtu,
            self.hop_ns as f64 / 1e3,
            topo,
            self.switch_buffer >> 10,
            self.nic_queue >> 10,
            self.recv_buffer >> 10,
            self.cpu_per_recv,
            self.cpu_per_send,
            self.cpu_per_message,
            self.protocol,
            if self.cc {
                ""
            } else {
                " without congestion control"
            },
            self.seed
        )
    }

    /// Link rate in bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.link_gbps * 1e9 / 8.0
    }

    /// Time the links need to carry `bytes` of messages in full frames, ns.
    pub fn wire_ns(&self, bytes: f64) -> f64 {
        let payload = (self.mtu - HEADER_LEN) as f64;
        bytes * self.mtu as f64 / payload / self.bytes_per_sec() * 1e9
    }

    /// A pacing rate just under what a link carries (95 % of its payload rate).
    pub fn pace(&self) -> u64 {
        let payload = (self.mtu - HEADER_LEN) as f64 / self.mtu as f64;
        (self.bytes_per_sec() * payload * 0.95) as u64
    }

    /// The simulation setup for `p` nodes.
    pub fn setup(&self, p: u32) -> SimSetup {
        let mut net = SimConfig::new(p);
        net.mtu = self.mtu;
        net.latency = self.hop_ns;
        net.bandwidth_bps = (self.link_gbps * 1e9) as u64;
        net.uplink_bps = (self.uplink_gbps * 1e9) as u64;
        net.send_buffer = self.nic_queue;
        net.switch_buffer = self.switch_buffer;
        net.recv_buffer = self.recv_buffer;
        net.cpu_per_recv = self.cpu_per_recv;
        net.cpu_per_send = self.cpu_per_send;
        net.seed = self.seed;
        if let Topology::FatTree { hosts_per_leaf } = self.topology {
            net.hosts_per_leaf = Some(hosts_per_leaf);
        }
        let mut s = SimSetup::new(net, &self.protocol);
        s.protocols.cc = self.cc;
        s.protocols.cc_all = self.cc_all;
        s.cpu_per_message = self.cpu_per_message;
        // A rank's stack holds the BSP calls and a program's locals: 256 KiB is ample,
        // and thousands of ranks then reserve little.
        s.stack = 256 << 10;
        s
    }
}

/// One simulated BSP process: the real library's user and transport sides.
pub struct Proc {
    pub core: Core,
    pub net: Net,
    pub watch: SimWatch,
}

impl Proc {
    pub fn new(t: SimTransport, cfg: Config) -> Proc {
        let p = t.nprocs();
        let watch = t.watch();
        let (core, net) = Core::new(Box::new(t), p, cfg);
        Proc { core, net, watch }
    }

    /// This rank's packet counts so far.
    pub fn packets(&self) -> Packets {
        Packets::now(&self.watch)
    }

    pub fn pid(&self) -> u32 {
        self.core.pid()
    }

    /// Virtual time, ns.
    pub fn now(&self) -> Time {
        self.net.transport().now()
    }

    /// `bsp_sync`.
    pub fn sync(&mut self) -> Result<(), String> {
        let pid = self.pid();
        self.core
            .sync(&mut self.net, false)
            .map_err(|e| format!("pid {pid}: {e}"))
    }

    /// `bsp_end`'s superstep.
    pub fn end(&mut self) -> Result<(), String> {
        let pid = self.pid();
        self.core
            .sync(&mut self.net, true)
            .map_err(|e| format!("pid {pid}: {e}"))
    }

    /// Unregisters `area`.
    pub fn pop_reg<T>(&mut self, area: &[T]) -> Result<(), String> {
        self.core
            .pop_reg("bsp_pop_reg", area.as_ptr() as usize)
            .map_err(|e| e.to_string())
    }

    /// Registers `area` (which must not move until popped).
    pub fn push_reg<T>(&mut self, area: &[T]) {
        self.core
            .push_reg(area.as_ptr() as usize, std::mem::size_of_val(area));
    }

    pub fn put<T: Copy>(
        &mut self,
        pid: u32,
        src: &[T],
        dst: &[T],
        index: usize,
    ) -> Result<(), String> {
        let bytes = as_bytes(src);
        let size = std::mem::size_of::<T>();
        self.core
            .put("bsp_put", pid, bytes, dst.as_ptr() as usize, index * size)
            .map_err(|e| e.to_string())
    }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain `Copy` data viewed as its bytes, for as long as the borrow.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// A span of virtual time and the packets one process counted in it.
pub type Timed = (Time, Packets);
/// When one process started and ended a span, and the packets it counted.
pub type Span = (Time, Time, Packets);

/// What every rank's program returns: a figure, or why its check failed.
pub type RankResult<T> = Result<T, String>;

/// Runs `program` on p simulated ranks of `cluster`; the first rank's error, if any.
pub fn run<T: Send>(
    cluster: &Cluster,
    p: u32,
    program: impl Fn(SimTransport) -> RankResult<T> + Sync,
) -> Result<SimOutcome<T>, String> {
    // A rank whose check fails stops, and the others then wait for it in vain: its own
    // error is the one to report, not the stall.
    let first = std::sync::Mutex::new(None::<String>);
    let out = simproc::run(&cluster.setup(p), |t| {
        let r = program(t);
        if let Err(e) = &r {
            first
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| e.clone());
        }
        r
    });
    let first = first.into_inner().unwrap_or_else(|e| e.into_inner());
    // Thousands of threads leave glibc's arenas fragmented: give the freed memory back
    // before the next run, or a series of big runs adds up.
    // SAFETY: malloc_trim only releases free memory.
    unsafe { libc::malloc_trim(0) };
    let out = out.map_err(|e| first.unwrap_or_else(|| e.to_string()))?;
    let mut results = Vec::with_capacity(out.results.len());
    for r in out.results {
        results.push(r?);
    }
    Ok(SimOutcome {
        results,
        finish: out.finish,
        net: out.net,
        peers: out.peers,
        drops: out.drops,
        handovers: out.handovers,
        trace: out.trace,
    })
}

/// Packet counts of a run, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Packets {
    pub data: u64,
    pub retransmits: u64,
    pub explicit_acks: u64,
    /// Sent packets freed by an acknowledgement riding on data or sent alone.
    pub acked: u64,
    /// Sent packets freed by the superstep colour, with no acknowledgement.
    pub implicit_acks: u64,
    pub prods: u64,
    pub control: u64,
    pub switch_drops: u64,
    pub receiver_drops: u64,
}

impl Packets {
    pub fn of<T>(o: &SimOutcome<T>) -> Packets {
        Packets::from_stats(&o.peers, &o.net)
    }

    fn from_stats(s: &PeerStats, n: &NodeStats) -> Packets {
        Packets {
            data: s.data_sent,
            retransmits: s.retransmits,
            explicit_acks: s.acks_sent,
            acked: s.acked,
            implicit_acks: s.implicit_acks,
            prods: s.prods_sent,
            control: s.control_sent,
            switch_drops: n.switch_overflow,
            receiver_drops: n.recv_overflow,
        }
    }

    /// One rank's counts so far.
    fn now(t: &SimWatch) -> Packets {
        Packets::from_stats(&t.protocol_stats(), &t.node_stats())
    }

    fn minus(self, o: Packets) -> Packets {
        Packets {
            data: self.data - o.data,
            retransmits: self.retransmits - o.retransmits,
            explicit_acks: self.explicit_acks - o.explicit_acks,
            acked: self.acked - o.acked,
            implicit_acks: self.implicit_acks - o.implicit_acks,
            prods: self.prods - o.prods,
            control: self.control - o.control,
            switch_drops: self.switch_drops - o.switch_drops,
            receiver_drops: self.receiver_drops - o.receiver_drops,
        }
    }

    fn plus(self, o: Packets) -> Packets {
        Packets {
            data: self.data + o.data,
            retransmits: self.retransmits + o.retransmits,
            explicit_acks: self.explicit_acks + o.explicit_acks,
            acked: self.acked + o.acked,
            implicit_acks: self.implicit_acks + o.implicit_acks,
            prods: self.prods + o.prods,
            control: self.control + o.control,
            switch_drops: self.switch_drops + o.switch_drops,
            receiver_drops: self.receiver_drops + o.receiver_drops,
        }
    }
}

/// Empty supersteps: the mean virtual time of one, ns, after two to warm up, and the
/// packets of the timed ones.
pub fn empty(
    cluster: &Cluster,
    p: u32,
    steps: u32,
) -> Result<(f64, Packets, SimOutcome<Timed>), String> {
    let out = run(cluster, p, |t| {
        let mut b = Proc::new(t, Config::default());
        let r = empty_body(&mut b, steps)?;
        b.end()?;
        Ok(r)
    })?;
    let worst = out.results.iter().map(|r| r.0).max().unwrap_or(0);
    let packets = out
        .results
        .iter()
        .fold(Packets::default(), |a, r| a.plus(r.1));
    Ok((worst as f64 / steps as f64, packets, out))
}

/// The program of [`empty`] for one process: two supersteps to warm up, then `steps`
/// timed; their time and packets.
pub fn empty_body(b: &mut Proc, steps: u32) -> RankResult<Timed> {
    b.sync()?;
    b.sync()?;
    let (n0, bytes0) = (b.core.counters.supersteps, b.core.counters.bytes_out);
    let t0 = b.now();
    let k0 = b.packets();
    for _ in 0..steps {
        b.sync()?;
    }
    let dt = b.now() - t0;
    let counted = b.packets().minus(k0);
    let c = b.core.counters;
    if c.supersteps != n0 + steps as u64 || c.bytes_out != bytes0 {
        return Err(format!("pid {}: counters {c:?}", b.pid()));
    }
    Ok((dt, counted))
}

/// bspbench's g and l: per h, the mean time of an h-relation of single-word puts, ns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HRelations {
    pub h: Vec<u32>,
    pub ns: Vec<f64>,
    /// Least squares t(h) = l + g h: ns per word and ns.
    pub g: f64,
    pub l: f64,
}

/// The value word `i` of pid `s` carries in an h-relation.
fn word(s: u32, i: u32) -> u64 {
    ((s as u64) << 32) | i as u64
}

/// Each process puts h words, word i to pid (s + 1 + i) mod p at index s + (i / p) p
/// (bspbench's pattern), `reps` times per h; every word is checked where it lands.
pub fn h_relations(
    cluster: &Cluster,
    p: u32,
    hs: &[u32],
    reps: u32,
) -> Result<(HRelations, SimOutcome<Vec<Time>>), String> {
    let out = run(cluster, p, |t| {
        let mut b = Proc::new(t, Config::default());
        let r = h_body(&mut b, hs, reps)?;
        b.end()?;
        Ok(r)
    })?;
    let ns: Vec<f64> = (0..hs.len())
        .map(|k| out.results.iter().map(|v| v[k]).max().unwrap_or(0) as f64)
        .collect();
    let pts: Vec<(f64, f64)> = hs
        .iter()
        .map(|&h| h as f64)
        .zip(ns.iter().copied())
        .collect();
    let line = crate::stats::fit_line(&pts).ok_or("h-relations: fewer than two values of h")?;
    Ok((
        HRelations {
            h: hs.to_vec(),
            ns,
            g: line.b,
            l: line.a,
        },
        out,
    ))
}

/// The program of [`h_relations`] for one process: the time of each h.
pub fn h_body(b: &mut Proc, hs: &[u32], reps: u32) -> RankResult<Vec<Time>> {
    let (me, p) = (b.pid(), b.core.nprocs());
    let hmax = hs.iter().copied().max().unwrap_or(0);
    let slots = (hmax.div_ceil(p).max(1) * p) as usize;
    let dst = vec![0u64; slots];
    b.push_reg(&dst);
    b.sync()?;
    let mut times = Vec::new();
    for &h in hs {
        b.sync()?;
        let t0 = b.now();
        for _ in 0..reps {
            for i in 0..h {
                let to = (me + 1 + i) % p;
                let at = (me + (i / p) * p) as usize;
                b.put(to, &[word(me, i)], &dst, at)?;
            }
            b.sync()?;
        }
        times.push((b.now() - t0) / reps.max(1) as Time);
        for i in 0..h {
            // Words for us: from s with (s + 1 + i) mod p == me.
            let s = (me + p - 1 - i % p) % p;
            let at = (s + (i / p) * p) as usize;
            if dst[at] != word(s, i) {
                return Err(format!(
                    "pid {me}: word {i} of pid {s} at {at} is {:#x}",
                    dst[at]
                ));
            }
        }
    }
    b.pop_reg(&dst)?;
    b.sync()?;
    Ok(times)
}

/// One total exchange: its time, the links' bound, and what the network saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Exchange {
    pub p: u32,
    pub size: usize,
    pub schedule: String,
    pub paced: bool,
    /// From the first process leaving the barrier before it to the last leaving its
    /// superstep, ns; the packets are those each process counted in that span.
    pub ns: f64,
    /// What the links allow: every process sends and receives (p - 1) size bytes in full
    /// frames, ns.
    pub bound_ns: f64,
    pub packets: Packets,
}

impl Exchange {
    pub fn ratio(&self) -> f64 {
        self.ns / self.bound_ns
    }
}

/// The byte of pid `s`'s data for pid `d` at `k`.
fn pattern(s: u32, d: u32, k: usize) -> u8 {
    (s.wrapping_mul(31) ^ d.wrapping_mul(7) ^ k as u32) as u8
}

/// Every pair exchanges `size` bytes in one superstep. Below `distinct_limit` bytes in
/// all, each sender has its own place at the receiver and every byte is checked; above,
/// the data of every sender goes to the same place (memory stays per process, not per
/// pair) and the receiver checks that the highest pid's data is what it holds, as puts
/// are applied in pid order.
pub fn total_exchange(
    cluster: &Cluster,
    p: u32,
    size: usize,
    schedule: Schedule,
    paced: bool,
    distinct_limit: u64,
) -> Result<(Exchange, SimOutcome<Span>), String> {
    let cfg = Config {
        schedule,
        rate: paced.then(|| cluster.pace()),
        chunk: paced.then_some(bulkwire_bsp::PACED_CHUNK),
        ..Config::default()
    };
    let distinct = p as u64 * p as u64 * size as u64 <= distinct_limit;
    let out = run(cluster, p, |t| {
        let mut b = Proc::new(t, cfg.clone());
        let r = exchange_body(&mut b, size, distinct)?;
        b.end()?;
        Ok(r)
    })?;
    let start = out.results.iter().map(|r| r.0).min().unwrap_or(0);
    let end = out.results.iter().map(|r| r.1).max().unwrap_or(0);
    let packets = out
        .results
        .iter()
        .fold(Packets::default(), |a, r| a.plus(r.2));
    let x = Exchange {
        p,
        size,
        schedule: format!("{schedule:?}").to_lowercase(),
        paced,
        ns: (end - start) as f64,
        bound_ns: cluster.wire_ns(((p - 1) as usize * size) as f64),
        packets,
    };
    Ok((x, out))
}

/// The program of [`total_exchange`] for one process (the schedule and pacing are the
/// process's configuration): the times it left the barrier before the exchange and the
/// exchange's superstep, and the packets it counted in between.
pub fn exchange_body(b: &mut Proc, size: usize, distinct: bool) -> RankResult<Span> {
    let (me, p) = (b.pid(), b.core.nprocs());
    let places = if distinct { p as usize } else { 1 };
    let area = vec![0u8; places * size];
    b.push_reg(&area);
    b.sync()?;
    let t0 = b.now();
    let k0 = b.packets();
    let mut src = vec![0u8; size];
    if !distinct {
        // One source for every destination, read as each message is built: memory
        // stays per process.
        for (k, x) in src.iter_mut().enumerate() {
            *x = pattern(me, 0, k);
        }
    }
    for d in (0..p).filter(|&d| d != me) {
        if distinct {
            for (k, x) in src.iter_mut().enumerate() {
                *x = pattern(me, d, k);
            }
            b.put(d, &src, &area, me as usize * size)?;
        } else {
            // SAFETY: `src` lives, unchanged, until after the sync below.
            unsafe {
                b.core.hpput(
                    "bsp_hpput",
                    d,
                    src.as_ptr() as usize,
                    area.as_ptr() as usize,
                    0,
                    size,
                )
            }
            .map_err(|e| e.to_string())?;
        }
    }
    b.sync()?;
    let t1 = b.now();
    let counted = b.packets().minus(k0);
    let senders: Vec<u32> = if distinct {
        (0..p).filter(|&s| s != me).collect()
    } else {
        vec![if me == p - 1 { p - 2 } else { p - 1 }]
    };
    for s in senders {
        let at = if distinct { s as usize * size } else { 0 };
        let d = if distinct { me } else { 0 };
        if let Some(k) = (0..size).find(|&k| area[at + k] != pattern(s, d, k)) {
            return Err(format!("pid {me}: byte {k} from pid {s} is wrong"));
        }
    }
    b.pop_reg(&area)?;
    b.sync()?;
    Ok((t0, t1, counted))
}

/// Supersteps of one pattern repeated: each superstep's time and what the network saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Steps {
    pub p: u32,
    pub size: usize,
    /// Each superstep, from the first process leaving the barrier before it to the last
    /// leaving it, ns.
    pub ns: Vec<f64>,
    /// What the links allow for one superstep, ns.
    pub bound_ns: f64,
    /// Packets of all the timed supersteps.
    pub packets: Packets,
}

impl Steps {
    /// The median superstep, ns.
    pub fn median(&self) -> f64 {
        let mut v = self.ns.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }

    /// The slowest superstep, ns.
    pub fn worst(&self) -> f64 {
        self.ns.iter().copied().fold(0.0, f64::max)
    }

    /// Switch and receiver drops per data packet sent.
    pub fn drop_rate(&self) -> f64 {
        let k = &self.packets;
        (k.switch_drops + k.receiver_drops) as f64 / k.data.max(1) as f64
    }
}

/// `steps` supersteps of the total exchange of `size` bytes per pair (the BSP layer's
/// default schedule, the latin square, no pacing), every pair's bytes in its own place
/// and checked after each superstep.
pub fn exchange_steps(cluster: &Cluster, p: u32, size: usize, steps: u32) -> Result<Steps, String> {
    exchange_steps_with(cluster, &Config::default(), p, size, steps)
}

/// [`exchange_steps`] with the BSP layer's configuration `bsp` (schedule, pacing).
pub fn exchange_steps_with(
    cluster: &Cluster,
    bsp: &Config,
    p: u32,
    size: usize,
    steps: u32,
) -> Result<Steps, String> {
    steps_of(cluster, bsp, p, size, steps, |me, p| {
        (0..p).filter(|&d| d != me).collect()
    })
    .map(|mut s| {
        s.bound_ns = cluster.wire_ns(((p - 1) as usize * size) as f64);
        s
    })
}

/// `steps` supersteps in which every process but pid 0 puts `size` bytes into pid 0
/// (a gather: p - 1 senders into one switch port), checked.
pub fn incast_steps(cluster: &Cluster, p: u32, size: usize, steps: u32) -> Result<Steps, String> {
    steps_of(cluster, &Config::default(), p, size, steps, |me, _| {
        if me == 0 { Vec::new() } else { vec![0] }
    })
    .map(|mut s| {
        s.bound_ns = cluster.wire_ns(((p - 1) as usize * size) as f64);
        s
    })
}

/// Runs `steps` supersteps in which each process `me` puts `size` bytes of its own
/// pattern to each of `dests(me, p)`, at `me`'s place in the destination's area.
fn steps_of(
    cluster: &Cluster,
    bsp: &Config,
    p: u32,
    size: usize,
    steps: u32,
    dests: impl Fn(u32, u32) -> Vec<u32> + Sync,
) -> Result<Steps, String> {
    let out = run(cluster, p, |t| {
        let mut b = Proc::new(t, bsp.clone());
        let (me, p) = (b.pid(), b.core.nprocs());
        let area = vec![0u8; p as usize * size];
        b.push_reg(&area);
        b.sync()?;
        let to = dests(me, p);
        let k0 = b.packets();
        let mut spans = Vec::with_capacity(steps as usize);
        for step in 0..steps {
            let t0 = b.now();
            for &d in &to {
                let src: Vec<u8> = (0..size).map(|k| pattern(me, d, k) ^ step as u8).collect();
                b.put(d, &src, &area, me as usize * size)?;
            }
            b.sync()?;
            spans.push((t0, b.now()));
            for s in (0..p).filter(|&s| dests(s, p).contains(&me)) {
                let at = s as usize * size;
                if let Some(k) = (0..size).find(|&k| area[at + k] != pattern(s, me, k) ^ step as u8)
                {
                    return Err(format!(
                        "pid {me}: superstep {step}: byte {k} from pid {s} is wrong"
                    ));
                }
            }
        }
        let counted = b.packets().minus(k0);
        b.pop_reg(&area)?;
        b.sync()?;
        b.end()?;
        Ok((spans, counted))
    })?;
    let ns = (0..steps as usize)
        .map(|i| {
            let start = out.results.iter().map(|r| r.0[i].0).min().unwrap_or(0);
            let end = out.results.iter().map(|r| r.0[i].1).max().unwrap_or(0);
            (end - start) as f64
        })
        .collect();
    let packets = out
        .results
        .iter()
        .fold(Packets::default(), |a, r| a.plus(r.1));
    Ok(Steps {
        p,
        size,
        ns,
        bound_ns: 0.0,
        packets,
    })
}

/// Sample sort with BSMP: `n` keys per process, regular sampling, buckets sent with
/// `bsp_send`; pid 0 checks the whole result (every key once, in order across pids).
pub fn sample_sort(cluster: &Cluster, p: u32, n: usize) -> Result<SimOutcome<usize>, String> {
    run(cluster, p, |t| {
        let mut b = Proc::new(t, Config::default());
        let r = sort_body(&mut b, n)?;
        b.end()?;
        Ok(r)
    })
}

/// The program of [`sample_sort`] for one process: the number of keys it ends with.
pub fn sort_body(b: &mut Proc, n: usize) -> RankResult<usize> {
    let (me, p) = (b.pid(), b.core.nprocs());
    let mut x = (me as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut keys: Vec<u64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> 16
        })
        .collect();
    keys.sort_unstable();
    let local_sum = keys.iter().fold(0u64, |a, &k| a.wrapping_add(k));
    let samples = vec![0u64; p as usize * (p as usize - 1)];
    let splitters = vec![0u64; p as usize - 1];
    let summary = vec![0u64; 4 * p as usize];
    b.push_reg(&samples);
    b.push_reg(&splitters);
    b.push_reg(&summary);
    b.sync()?;
    // Regular samples to pid 0, which picks the splitters and puts them everywhere.
    let mine: Vec<u64> = (1..p as usize).map(|k| keys[k * n / p as usize]).collect();
    b.put(0, &mine, &samples, me as usize * (p as usize - 1))?;
    b.sync()?;
    if me == 0 {
        let mut all = samples.clone();
        all.sort_unstable();
        let chosen: Vec<u64> = (1..p as usize)
            .map(|k| all[k * all.len() / p as usize])
            .collect();
        for d in 0..p {
            b.put(d, &chosen, &splitters, 0)?;
        }
    }
    b.sync()?;
    // Buckets by BSMP: one message per destination with its keys.
    let mut start = 0;
    for d in 0..p {
        let end = match splitters.get(d as usize) {
            Some(&s) => keys.partition_point(|&k| k < s).max(start),
            None => keys.len(),
        };
        if end > start {
            b.core
                .send("bsp_send", d, &[], as_bytes(&keys[start..end]))
                .map_err(|e| e.to_string())?;
        }
        start = end;
    }
    b.sync()?;
    let mut mine: Vec<u64> = Vec::new();
    while let Some((_, payload)) = b.core.first_message() {
        mine.extend(
            payload
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
        b.core.pop_message();
    }
    mine.sort_unstable();
    let sum = mine.iter().fold(0u64, |a, &k| a.wrapping_add(k));
    let report = [
        mine.len() as u64,
        sum.wrapping_sub(local_sum),
        mine.first().copied().unwrap_or(u64::MAX),
        mine.last().copied().unwrap_or(0),
    ];
    b.put(0, &report, &summary, 4 * me as usize)?;
    b.sync()?;
    if me == 0 {
        let total: u64 = (0..p as usize).map(|r| summary[4 * r]).sum();
        let diff = (0..p as usize).fold(0u64, |a, r| a.wrapping_add(summary[4 * r + 1]));
        if total != p as u64 * n as u64 || diff != 0 {
            return Err(format!(
                "sample sort: {total} keys came out of {} (sum off by {diff})",
                p as u64 * n as u64
            ));
        }
        let mut last = 0;
        for r in 0..p as usize {
            if summary[4 * r] == 0 {
                continue;
            }
            if summary[4 * r + 2] < last {
                return Err(format!(
                    "sample sort: pid {r}'s keys start below pid {}'s",
                    r - 1
                ));
            }
            last = summary[4 * r + 3];
        }
    }
    b.pop_reg(&summary)?;
    b.pop_reg(&splitters)?;
    b.pop_reg(&samples)?;
    b.sync()?;
    Ok(mine.len())
}

/// What `bwbench scale` runs at each level.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Params {
    pub procs: Vec<u32>,
    /// Empty supersteps timed per run.
    pub steps: u32,
    /// bspbench's h values and repetitions, up to `h_upto` processes.
    pub hs: Vec<u32>,
    pub reps: u32,
    pub h_upto: u32,
    /// Total exchange: bytes per pair; every schedule with and without pacing up to
    /// `all_upto` processes, the latin square (paced and not) up to `exchange_upto`.
    /// (Pid and random order hold unacknowledged data for many destinations at once,
    /// 64 MiB per process at p = 1024: more than this machine has for all of them.)
    pub size: usize,
    pub all_upto: u32,
    pub exchange_upto: u32,
    /// Sample sort: keys per process, up to `sort_upto` processes.
    pub sort_keys: usize,
    pub sort_upto: u32,
    /// The fat tree: processes and hosts per leaf.
    pub fat_tree: (u32, u32),
    /// Runs repeated with the same seed to check they agree.
    pub twice: u32,
}

impl Params {
    pub fn for_level(level: Level) -> Params {
        match level {
            Level::Smoke => Params {
                procs: vec![16, 64],
                steps: 3,
                hs: vec![0, 16, 64],
                reps: 1,
                h_upto: 64,
                size: 16 << 10,
                all_upto: 16,
                exchange_upto: 64,
                sort_keys: 64,
                sort_upto: 64,
                fat_tree: (64, 8),
                twice: 16,
            },
            Level::Quick => Params {
                procs: vec![16, 64, 256, 1024],
                steps: 5,
                hs: vec![0, 64, 128, 256],
                reps: 1,
                h_upto: 256,
                size: 64 << 10,
                all_upto: 64,
                exchange_upto: 256,
                sort_keys: 256,
                sort_upto: 256,
                fat_tree: (64, 8),
                twice: 64,
            },
            Level::Full => Params {
                procs: vec![16, 64, 256, 1024, 4096],
                steps: 10,
                hs: vec![0, 32, 64, 128, 192, 256],
                reps: 2,
                h_upto: 1024,
                size: 64 << 10,
                all_upto: 256,
                exchange_upto: 1024,
                sort_keys: 1024,
                sort_upto: 1024,
                fat_tree: (256, 16),
                twice: 256,
            },
        }
    }

    /// The total exchanges measured at `p`: (schedule, paced).
    pub fn exchanges(&self, p: u32) -> Vec<(Schedule, bool)> {
        let all = [Schedule::Latin, Schedule::Pid, Schedule::Random];
        if p <= self.all_upto {
            all.iter().flat_map(|&s| [(s, true), (s, false)]).collect()
        } else if p <= self.exchange_upto {
            vec![(Schedule::Latin, true), (Schedule::Latin, false)]
        } else {
            Vec::new()
        }
    }
}

/// Everything measured at one p.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub p: u32,
    /// Mean empty superstep, ns, and the packets of the timed supersteps.
    pub empty_ns: f64,
    pub empty_packets: Packets,
    pub h: Option<HRelations>,
    pub exchanges: Vec<Exchange>,
    /// Keys sorted by pid 0's check, if the sort ran.
    pub sorted_keys: Option<u64>,
    /// Host time the simulations of this p took, s.
    pub wall_s: f64,
}
