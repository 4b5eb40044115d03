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

use crate::suite::{Chart, Group, Level, Section, Series, Stat, Table, Target};

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
    pub seed: u64,
}

impl Cluster {
    /// A 25 Gb/s Ethernet cluster with 9000-byte frames and one switch tier: 1 us per hop,
    /// 512 KiB per switch port, a 256 KiB NIC queue, 4 MiB socket buffers, holefill.
    pub fn ethernet25() -> Cluster {
        Cluster {
            link_gbps: 25.0,
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
            seed: 1,
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
        format!(
            "{} Gb/s links, {}-byte frames, {} us per hop, {}; switch ports {} KiB, NIC \
             queue {} KiB, receive buffer {} KiB; CPU {} ns per datagram received, {} ns \
             per datagram sent, {} ns per message; {}, seed {}",
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
        chunk: paced.then_some(64 << 10),
        stats: false,
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
pub struct Plan {
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

impl Plan {
    pub fn for_level(level: Level) -> Plan {
        match level {
            Level::Smoke => Plan {
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
            Level::Quick => Plan {
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
            Level::Full => Plan {
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

    /// Simulated runs in all, for a progress bar.
    pub fn runs(&self) -> usize {
        let per_p: usize = self
            .procs
            .iter()
            .map(|&p| {
                1 + usize::from(p <= self.h_upto)
                    + usize::from(p <= self.sort_upto)
                    + self.exchanges(p).len()
            })
            .sum();
        per_p + 2 + 2
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

/// The `bwbench scale` section: the cluster, l and g against p, the total exchanges,
/// the fat tree, the targets and whether two runs of one seed agree.
pub fn section(level: Level, progress: &dyn Fn(&str)) -> Section {
    let plan = Plan::for_level(level);
    let cluster = Cluster::ethernet25();
    let mut sec = Section::new(
        "scale",
        "Scale: the BSP messaging layer at p = 16 to 4096 on a simulated cluster",
    );
    sec.tables.push(Table {
        title: "The simulated cluster".into(),
        header: vec!["parameter".into(), "value".into()],
        rows: vec![vec!["one switch".into(), cluster.describe()]],
        note: "Virtual time: each process runs the real bsp_sync over holefill and the \
               engine; only the network and the CPU cost per datagram and per message \
               are modelled."
            .into(),
    });
    let (fp, k) = plan.fat_tree;
    progress(&format!("scale: fat tree, p = {fp}"));
    let tree = Cluster::fat_tree(k);
    let mut tree_rows = Vec::new();
    for (s, paced) in [(Schedule::Latin, true), (Schedule::Pid, true)] {
        match total_exchange(&tree, fp, plan.size, s, paced, DISTINCT_LIMIT) {
            Ok((x, _)) => tree_rows.push(x),
            Err(e) => sec.skipped.push(format!("fat tree p = {fp}: {e}")),
        }
    }
    progress("scale: same seed twice");
    let twice = same_seed_twice(&cluster, &plan);
    // Ascending p: the biggest runs, which need the most memory, come last.
    let mut points = Vec::new();
    for &p in &plan.procs {
        match measure_point(&cluster, &plan, p, progress) {
            Ok(pt) => points.push(pt),
            Err(e) => sec.skipped.push(format!("p = {p}: {e}")),
        }
    }
    tables(
        &mut sec, &plan.hs, &cluster, &tree, &points, &tree_rows, plan.size,
    );
    targets(&mut sec, &points, &plan, twice);
    charts(&mut sec, &points);
    sec.scale = points;
    sec
}

/// Above this many bytes of exchanged data, every sender's data goes to one place.
const DISTINCT_LIMIT: u64 = 256 << 20;

fn measure_point(
    cluster: &Cluster,
    plan: &Plan,
    p: u32,
    progress: &dyn Fn(&str),
) -> Result<Point, String> {
    let t0 = std::time::Instant::now();
    progress(&format!("scale: empty supersteps, p = {p}"));
    let (empty_ns, empty_packets, _) = empty(cluster, p, plan.steps)?;
    let h = if p <= plan.h_upto {
        progress(&format!("scale: h-relations, p = {p}"));
        Some(h_relations(cluster, p, &plan.hs, plan.reps)?.0)
    } else {
        None
    };
    let mut exchanges = Vec::new();
    for (s, paced) in plan.exchanges(p) {
        let how = if paced { "paced" } else { "unpaced" };
        progress(&format!("scale: total exchange, p = {p}, {s:?}, {how}"));
        exchanges.push(total_exchange(cluster, p, plan.size, s, paced, DISTINCT_LIMIT)?.0);
    }
    let sorted_keys = if p <= plan.sort_upto {
        progress(&format!("scale: sample sort, p = {p}"));
        let out = sample_sort(cluster, p, plan.sort_keys)?;
        Some(out.results.iter().map(|&n| n as u64).sum())
    } else {
        None
    };
    Ok(Point {
        p,
        empty_ns,
        empty_packets,
        h,
        exchanges,
        sorted_keys,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// Runs the empty supersteps and a latin-square exchange twice with one seed: whether
/// the schedules (every hand-over) and every figure agree.
fn same_seed_twice(cluster: &Cluster, plan: &Plan) -> Result<bool, String> {
    let p = plan.twice;
    let run = || -> Result<(u64, u64, Exchange), String> {
        let (_, _, a) = empty(cluster, p, plan.steps)?;
        let (x, b) = total_exchange(cluster, p, plan.size, Schedule::Latin, true, 0)?;
        Ok((a.trace, b.trace, x))
    };
    Ok(run()? == run()?)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn tables(
    sec: &mut Section,
    hs: &[u32],
    cluster: &Cluster,
    tree: &Cluster,
    points: &[Point],
    tree_rows: &[Exchange],
    size: usize,
) {
    let base = points.first().map(|p| p.empty_ns);
    let rows = points
        .iter()
        .map(|pt| {
            let (g, l, top) =
                pt.h.as_ref()
                    .map_or(("-".into(), "-".into(), "-".into()), |h| {
                        let top = h.ns.last().map_or("-".into(), |&t| us(t));
                        (format!("{:.0}", h.g), us(h.l), top)
                    });
            vec![
                pt.p.to_string(),
                us(pt.empty_ns),
                base.map_or("-".into(), |b| format!("{:.2}x", pt.empty_ns / b)),
                top,
                g,
                l,
                pt.sorted_keys
                    .map_or("-".into(), |n| format!("{n} keys sorted")),
                format!("{:.1}", pt.wall_s),
            ]
        })
        .collect();
    sec.tables.push(Table {
        title: "l and g against p (virtual time)".into(),
        header: [
            "p",
            "empty superstep (us)",
            "vs first p",
            "largest h-relation (us)",
            "g (ns per word)",
            "l (us)",
            "sample sort (BSMP)",
            "host time (s)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: format!(
            "g and l: bspbench's least squares over h-relations of single-word puts, h = \
             {hs:?}. Below h = p each word travels as a message of its own (one destination \
             at a time), so t(h) measures a message's cost and need not be linear: the \
             fit's l can then come out negative. Every word, sorted key and exchanged byte \
             was checked."
        ),
    });
    let xs: Vec<&Exchange> = points.iter().flat_map(|p| &p.exchanges).collect();
    sec.tables.push(exchange_table(
        &format!(
            "Total exchange of {} per pair: latin square, pid order, random; paced or not",
            crate::suite::size_label(size)
        ),
        &xs,
        cluster,
    ));
    let tx: Vec<&Exchange> = tree_rows.iter().collect();
    sec.tables
        .push(exchange_table("The same on a two-tier fat tree", &tx, tree));
}

fn exchange_table(title: &str, xs: &[&Exchange], cluster: &Cluster) -> Table {
    let rows = xs
        .iter()
        .map(|x| {
            let k = &x.packets;
            vec![
                x.p.to_string(),
                x.schedule.clone(),
                if x.paced { "yes" } else { "no" }.into(),
                format!("{:.2}", x.ns / 1e6),
                format!("{:.2}", x.bound_ns / 1e6),
                format!("{:.2}x", x.ratio()),
                k.data.to_string(),
                k.retransmits.to_string(),
                k.explicit_acks.to_string(),
                k.implicit_acks.to_string(),
                k.prods.to_string(),
                k.switch_drops.to_string(),
                k.receiver_drops.to_string(),
            ]
        })
        .collect();
    Table {
        title: title.into(),
        header: [
            "p",
            "schedule",
            "paced",
            "time (ms)",
            "bound (ms)",
            "ratio",
            "data packets",
            "retransmitted",
            "explicit acks",
            "implicit acks",
            "prods",
            "switch drops",
            "receiver drops",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: format!(
            "Time: from the first process leaving the barrier before the superstep to the \
             last leaving it. Bound: (p - 1) times the data per pair in full frames over \
             one link. Pacing: {:.2} GB/s per process. {}",
            cluster.pace() as f64 / 1e9,
            cluster.describe()
        ),
    }
}

fn targets(sec: &mut Section, points: &[Point], plan: &Plan, twice: Result<bool, String>) {
    if let (Some(first), Some(big)) = (points.first(), points.iter().find(|p| p.p == 1024)) {
        let r = big.empty_ns / first.empty_ns;
        sec.targets.push(Target {
            what: format!("empty superstep, p = 1024 against p = {}", first.p),
            measured: format!(
                "{r:.2}x ({} us against {} us)",
                us(big.empty_ns),
                us(first.empty_ns)
            ),
            target: "at most 10x (log p, not p)".into(),
            met: Some(r <= 10.0),
        });
    }
    let best = points
        .iter()
        .flat_map(|p| &p.exchanges)
        .filter(|x| x.schedule == "latin" && x.paced)
        .max_by_key(|x| x.p);
    if let Some(x) = best {
        let drops = x.packets.switch_drops + x.packets.receiver_drops;
        let ok = x.ratio() <= 1.5 && drops * 1000 <= x.packets.data;
        sec.targets.push(Target {
            what: format!(
                "total exchange of {}, p = {}, latin square and pacing",
                crate::suite::size_label(plan.size),
                x.p
            ),
            measured: format!("{:.2}x the links' bound, {drops} drops", x.ratio()),
            target: "at most 1.5x, drops under 0.1% of data packets (p = 1024 in the full run)"
                .into(),
            met: Some(ok),
        });
    }
    let (measured, met) = match twice {
        Ok(same) => (
            if same { "identical" } else { "different" }.to_string(),
            Some(same),
        ),
        Err(e) => (format!("not run: {e}"), None),
    };
    sec.targets.push(Target {
        what: format!("two runs of one seed, p = {}", plan.twice),
        measured,
        target: "identical schedules and figures".into(),
        met,
    });
}

fn charts(sec: &mut Section, points: &[Point]) {
    let series = |label: &str, f: &dyn Fn(&Point) -> Option<f64>| Series {
        label: label.into(),
        group: Group::Bulkwire,
        points: points
            .iter()
            .filter_map(|pt| {
                f(pt).map(|v| Stat {
                    size: pt.p as usize,
                    n: 1,
                    min: v,
                    mean: v,
                    max: v,
                    std_dev: 0.0,
                    median: v,
                    delivered: None,
                })
            })
            .collect(),
    };
    sec.charts.push(Chart {
        file: "scale_l.svg".into(),
        title: "l against p (simulated 25 Gb/s cluster)".into(),
        x_label: "processes".into(),
        y_label: "time (us)".into(),
        y_scale: 1e6,
        log_x: true,
        log_y: true,
        series: vec![
            series("empty superstep", &|pt| Some(pt.empty_ns / 1e9)),
            series("l (bspbench fit)", &|pt| {
                pt.h.as_ref().map(|h| h.l / 1e9).filter(|&l| l > 0.0)
            }),
        ],
    });
    sec.charts.push(Chart {
        file: "scale_g.svg".into(),
        title: "g against p (simulated 25 Gb/s cluster)".into(),
        x_label: "processes".into(),
        y_label: "ns per word".into(),
        y_scale: 1e9,
        log_x: true,
        log_y: true,
        series: vec![series("g (bspbench fit)", &|pt| {
            pt.h.as_ref().map(|h| h.g / 1e9).filter(|&g| g > 0.0)
        })],
    });
}
