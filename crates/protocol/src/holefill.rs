//! holefill: BSPlib's hole-filling selective retransmission (the BSPlib paper, sections 4.2-4.4).
//!
//! Every packet, data or control, carries the receive state of the reverse direction,
//! filled in at [`Protocol::poll_transmit`] time: `ack` (next expected sequence: all below
//! it received) and `eoh` (end of hole: the first sequence held beyond `ack`, so the hole is
//! `[ack, eoh)`; `ack == eoh` when nothing beyond `ack` is held). With symmetric traffic
//! that is all the acknowledging there is.
//!
//! **Hole filling.** The receiver places out-of-order packets straight into the
//! [`Reassembler`] (within its window and while receive buffers last) and reports the
//! first hole. A sender that learns of a hole `[ack, eoh)` from any packet resends exactly
//! those packets; the next piggybacked state shows the next hole. A packet's first resend
//! is immediate; a further resend waits at least one round trip (smoothed round trip plus
//! one mean deviation), so stale reports still in flight cannot trigger repeats.
//!
//! **Prods.** A receiver whose upper layer waits for a peer ([`Protocol::expect`]) prods
//! that peer with a control packet when nothing new arrived for a prod interval (at once,
//! rate permitting, when a hole is known): at least one round trip, doubled each time the
//! answer shows the prodder merely ran ahead, or from the third prod in a row that drew
//! nothing from the peer (random loss leaves one or two unanswered often enough), up to
//! `prod_max`, and back to one round trip as soon as new data arrives. The prodded side resends the hole the prod reveals; if the
//! prodder holds nothing beyond `ack`, it resends what it sent at least a round trip ago
//! and that is still unacknowledged (the lost tail); if nothing is missing (or everything
//! missing is already on its way) it answers with an acknowledgement.
//!
//! **Minimal acknowledgements.** A stand-alone ack is sent only when asked for (`ACK_REQ`)
//! and when at least `n/(2p)` new packets came from that peer since our last ack of any
//! kind (`n` total buffers, `p` job size; capped at half the window so a lone sender never
//! waits out a round trip per window). Some requests are answered at once: the last packet
//! of a phase (`LAST_OF_PHASE`), retransmissions (the sender is recovering and needs the
//! next hole), duplicates (the sender missed our ack), and probes. A sender asks when it
//! foresees running out of send buffers within one round trip: its free buffers toward
//! the peer (window and shared pool) are no more than the packets it consumed in the last
//! round trip. The last packet of each hole resend also asks, so recovery proceeds hole
//! by hole without waiting for a timer. A receiver also acks at once when a hole opens
//! (the first packet held beyond `ack`): one ack per hole, which spares a stream the wait
//! for the next requested ack or prod. Requests are remembered until some ack goes out,
//! and several due in one [`Protocol::poll_transmit`] make one ack, or none when data
//! leaves for that peer at the same time (the ack rides on it).
//!
//! **Colours** (BSP, [`Coloured::set_colour`]). Each sent packet remembers the colour it
//! first left under (or the later one [`Coloured::hold_colour`] asked for). A packet from
//! any peer whose colour is ahead (modulo 256, within half the space) of the colour of
//! some of our unacknowledged packets acknowledges them implicitly. Until `set_colour` is called nothing is freed this way, so the protocol is
//! also correct outside BSP.
//!
//! **Liveness.** Each peer with unacknowledged packets has a retransmission timer (RFC
//! 6298 estimate, at least 1 ms) that runs from the later of the last acknowledgement
//! progress and the last new data sent; when it fires the first unacknowledged packet is
//! resent with `ACK_REQ`, which the receiver answers at once, so the next timeout follows
//! the round trip with the job's floor instead. It backs off as gbn's recommended timer
//! does: only toward a peer silent since the timer last fired, from the third such timeout
//! in a row, at most 16x. So
//! a lost tail, a lost ack, a lost prod or last-of-phase packet, a full receive window or
//! a silent peer all end in at most one timeout, with no reverse traffic and no `expect`.
//! An explicit ack showing that the peer holds nothing beyond `ack` while more was sent
//! makes the sender resend, at once, whatever left a whole timeout ago.
//!
//! **Buffers.** `n = buffers` is split evenly into a send pool and a receive pool, both
//! shared by all peers. A sent packet holds a send buffer (a cheap `Bytes` slice of the
//! message, no copy) until acknowledged; at most `window` packets per peer are
//! unacknowledged, and no more than `inflight_bytes` of them (at least
//! [`MIN_BYTE_WINDOW`] packets), since a deep queue lengthens every repair. A packet received beyond the next expected one holds a receive buffer
//! until the gap before it fills; when the pool is empty only the next expected packet is
//! accepted (it needs no buffer), but the ack and end of hole of every arrival are still
//! used, so send queues drain and progress is guaranteed.
//!
//! Round trips are measured by timestamps: data and prods carry the sender's clock in
//! `aux` (64 ns units), and a plain `Ack` echoes the `aux` of the packet that made it due.
//! Only explicit acks give samples: a piggybacked ack may have waited on the peer's
//! computation.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::common::{
    Added, MAX_PARTIAL, OutQueue, ReadySet, Reassembler, Rtt, SeqSpace, Timers, announced_too_large,
};
use crate::congestion::Window;
use crate::wire::{Header, Kind, flags};
use crate::{
    Coloured, Common, Event, MS, MsgId, PeerDead, PeerMisbehaved, PeerStats, ProtoError, Protocol,
    Rank, Time, Transmit, US,
};

/// Settings of [`Holefill`]. Every field has a documented default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolefillConfig {
    /// `n`, the paper's total of send and receive packet buffers of this endpoint, split
    /// evenly into a send pool and a receive pool shared by all peers. Default 1024
    ///.
    pub buffers: u32,
    /// Most unacknowledged packets per peer, and how far beyond the next expected packet
    /// the receiver accepts; both sides must agree. At most the send pool (`buffers/2`)
    /// and under half the sequence space. Default 256, or the send pool if smaller and
    /// only `buffers` is set.
    pub window: u32,
    /// Width of sequence numbers in bits, 2..=32. Default 32.
    /// Narrow widths exist to exercise wrap-around: as with any sliding window, the
    /// network must not hold a packet across half a sequence cycle (the message-id check
    /// on arrival catches most such ghosts, not a stale fragment of the same message).
    pub seq_bits: u32,
    /// Most packets sent to one peer before the next peer's turn in one
    /// [`Protocol::poll_transmit`]. Default 32.
    pub burst: usize,
    /// Shortest interval between prods, whatever the round trip. Default 100 us
    ///.
    pub prod_min: Time,
    /// Longest interval between prods after back-off. Default 100 ms
    ///.
    pub prod_max: Time,
    /// Most payload bytes unacknowledged per peer: the window toward a peer is cut to this
    /// many bytes of its largest packets (but at least [`MIN_BYTE_WINDOW`] packets). 256
    /// packets of 64 KiB over loopback put 16 MiB in flight: queues in the kernel grew the
    /// round trip to milliseconds, every loss waited that long to be repaired, and the
    /// socket buffers overflowed. Default 4 MiB.
    pub inflight_bytes: u64,
}

/// n/(2p) new packets make a requested ack due, capped at half of `window` so that a lone
/// sender is never left waiting out a round trip per window.
fn ack_every(cfg: &HolefillConfig, nprocs: u32, window: u32) -> u32 {
    let per_link = cfg.buffers as u64 / (2 * nprocs.max(1) as u64);
    per_link
        .min(u32::MAX as u64)
        .max(1)
        .min((window / 2).max(1) as u64) as u32
}

/// The fewest packets a byte cap leaves in the window.
pub const MIN_BYTE_WINDOW: u32 = 16;

impl Default for HolefillConfig {
    fn default() -> Self {
        HolefillConfig {
            buffers: 1024,
            window: 256,
            seq_bits: 32,
            burst: 32,
            prod_min: 100 * US,
            prod_max: 100 * MS,
            inflight_bytes: 4 << 20,
        }
    }
}

/// Why a [`HolefillConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HolefillConfigError {
    #[error("seq_bits {0} is not in 2..=32")]
    SeqBits(u32),
    #[error("buffers {0}: at least 2 are needed (one to send, one to receive)")]
    Buffers(u32),
    #[error(
        "window {window} is not in 1..={max} (the send pool, buffers/2, and under half \
         the sequence space)"
    )]
    Window { window: u32, max: u32 },
    #[error("burst must be at least 1")]
    Burst,
    #[error("prod_min {min} ns must be positive and at most prod_max {max} ns")]
    Prod { min: Time, max: Time },
    #[error("inflight_bytes must be positive")]
    Inflight,
}

impl HolefillConfig {
    /// These settings with `buffers` packet buffers and the default window cut to what
    /// they allow.
    pub fn with_buffers(mut self, buffers: u32) -> HolefillConfig {
        self.buffers = buffers;
        self.window = HolefillConfig::default()
            .window
            .min(self.max_window())
            .max(1);
        self
    }

    /// The largest window these buffers and sequence numbers allow.
    pub fn max_window(&self) -> u32 {
        let half = if (2..=32).contains(&self.seq_bits) {
            ((1u64 << (self.seq_bits - 1)) - 1) as u32
        } else {
            0
        };
        (self.buffers / 2).min(half)
    }

    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<(), HolefillConfigError> {
        if !(2..=32).contains(&self.seq_bits) {
            return Err(HolefillConfigError::SeqBits(self.seq_bits));
        }
        if self.buffers < 2 {
            return Err(HolefillConfigError::Buffers(self.buffers));
        }
        let max = self.max_window();
        if self.window == 0 || self.window > max {
            return Err(HolefillConfigError::Window {
                window: self.window,
                max,
            });
        }
        if self.burst == 0 {
            return Err(HolefillConfigError::Burst);
        }
        if self.prod_min == 0 || self.prod_min > self.prod_max {
            return Err(HolefillConfigError::Prod {
                min: self.prod_min,
                max: self.prod_max,
            });
        }
        if self.inflight_bytes == 0 {
            return Err(HolefillConfigError::Inflight);
        }
        Ok(())
    }
}

/// Timestamps in `aux` count units of 2^6 ns: fine enough for microsecond round trips,
/// and a 32-bit value wraps only every 275 s.
const TS_SHIFT: u32 = 6;

fn stamp(now: Time) -> u32 {
    (now >> TS_SHIFT) as u32
}

/// The least retransmission timeout, whatever the job's: above the delay of our own
/// acknowledgements, which go out only when asked for or due (see the module
/// documentation); a shorter timer resends what is merely waiting for its ack.
const RTO_FLOOR: Time = MS;

/// Most doublings of the prod interval.
const MAX_PROD_BACKOFF: u32 = 16;

/// Retransmission timeouts in a row with nothing heard from the peer before the timeout
/// doubles, and the most doublings: gbn's recommended rule (docs/protocols.md). Under
/// random loss a resend and its answer both get through only part of the time (a quarter
/// at 50 % loss), so timeouts in a row are common while the peer is alive; doubling at
/// each made every further loss cost twice the one before, up to `rto_max`: 600 messages
/// between two ranks at 50 % loss took 4-25 s of virtual time against gbn's 0.1 s.
const RTO_BACKOFF_AFTER: u32 = 2;
const RTO_MAX_BACKOFF: u32 = 4;

/// Whether `s` is a sequence number of `seq` at all (no bits above its width).
fn in_space(seq: SeqSpace, s: u32) -> bool {
    seq.add(s, 0) == s
}

/// Whether colour `a` is ahead of colour `b` (modulo 256, within half the space).
fn colour_ahead(a: u8, b: u8) -> bool {
    (1..128).contains(&a.wrapping_sub(b))
}

/// Payload size above which a retransmission timeout first probes with a header-only
/// packet instead of resending data.
const PROBE_BEFORE_RESEND: usize = 512;

/// One sent, unacknowledged packet: a send buffer.
struct Slot {
    msg: MsgId,
    offset: u64,
    total: u64,
    payload: Bytes,
    /// FIRST/LAST, plus LAST_OF_PHASE|ACK_REQ once `end_phase` marked it (kept on resends).
    flags: u8,
    /// Flags for the next transmission only (ACK_REQ of a timer or hole resend).
    extra: u8,
    notify: bool,
    /// Colour it first left under, for implicit acknowledgement.
    colour: u8,
    sends: u32,
    last_tx: Time,
    /// Waiting in the resend queue.
    queued: bool,
}

/// Which packets beyond the next expected one are held, as a ring of bits indexed by
/// distance from the next expected sequence. Fixed size: no allocation per packet.
struct Bits {
    words: Vec<u64>,
    mask: usize,
    base: usize,
    count: u32,
}

impl Bits {
    fn new(window: u32) -> Bits {
        let cap = (window as usize).next_power_of_two().max(64);
        Bits {
            words: vec![0; cap / 64],
            mask: cap - 1,
            base: 0,
            count: 0,
        }
    }

    #[inline]
    fn at(&self, i: usize) -> (usize, u64) {
        let p = (self.base + i) & self.mask;
        (p >> 6, 1 << (p & 63))
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        let (w, b) = self.at(i);
        self.words[w] & b != 0
    }

    fn set(&mut self, i: usize) {
        let (w, b) = self.at(i);
        self.words[w] |= b;
        self.count += 1;
    }

    /// Clears bit 0 and makes bit 1 the new bit 0 (the next expected sequence moved on).
    fn shift(&mut self) {
        let (w, b) = self.at(0);
        if self.words[w] & b != 0 {
            self.words[w] &= !b;
            self.count -= 1;
        }
        self.base = (self.base + 1) & self.mask;
    }

    /// The smallest set index below `limit`.
    fn first(&self, limit: usize) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        let mut i = 0;
        while i < limit {
            let p = (self.base + i) & self.mask;
            let bits = self.words[p >> 6] >> (p & 63);
            if bits != 0 {
                let at = i + bits.trailing_zeros() as usize;
                return (at < limit).then_some(at);
            }
            i += 64 - (p & 63);
        }
        None
    }

    fn clear(&mut self) {
        self.words.iter_mut().for_each(|w| *w = 0);
        self.count = 0;
    }
}

struct Peer {
    // Sending.
    /// Most unacknowledged packets toward this peer (the window, cut by the byte cap).
    send_window: u32,
    /// Congestion window: bounds the unacknowledged packets below `send_window`.
    cc: Window,
    /// New packets from this peer that make a requested ack due (n/(2p), capped at half
    /// the window the peer sends with).
    ack_every: u32,
    out: OutQueue,
    inflight: VecDeque<Slot>,
    snd_una: u32,
    snd_nxt: u32,
    resend: VecDeque<u32>,
    last_msg: Option<MsgId>,
    /// Message whose last fragment, when cut, ends the phase.
    phase_end: Option<MsgId>,
    /// `end_phase` came after the last packet left: ask for an ack by a control packet.
    probe_due: bool,
    /// Last acknowledgement progress or new data sent; the timer runs from here.
    last_activity: Time,
    /// Packets consumed in the current and the previous round trip.
    rate_start: Time,
    rate_cur: u32,
    rate_prev: u32,
    /// Queued in `Holefill::blocked`, waiting for a send buffer.
    blocked: bool,
    // Receiving.
    rcv_nxt: u32,
    held: Bits,
    reasm: Reassembler,
    /// New packets accepted since our last ack of any kind.
    since_ack: u32,
    ack_requested: bool,
    ack_due: bool,
    /// `aux` of the packet that made the ack due, echoed for the peer's round trip.
    echo: u32,
    // Prodding.
    waiting: bool,
    wait_since: Time,
    last_arrival: Time,
    last_prod: Option<Time>,
    prod_backoff: u32,
    /// A prod went out and no new data came since.
    prod_pending: bool,
    prod_due: bool,
    rtt: Rtt,
    /// Something came from the peer since its retransmission timer last fired.
    heard: bool,
    /// Retransmission timeouts in a row with nothing heard from the peer.
    silent_timeouts: u32,
    /// Prods in a row unanswered, with nothing heard from the peer between them.
    silent_prods: u32,
    /// The death the engine told of ([`Protocol::close_peer`]), boxed so that a live
    /// peer's state stays as small as with a flag.
    closed: Option<Box<PeerDead>>,
    stats: PeerStats,
}

/// What the ack and end of hole of an arriving packet told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckInfo {
    /// Older than what we know.
    Stale,
    /// Nonsense; ignored and counted.
    Bogus,
    /// Everything sent is acknowledged.
    AllAcked,
    /// The peer holds nothing beyond `ack`, but we sent more.
    Tail,
    /// A hole; this many packets were queued for resending.
    Hole(u32),
}

/// The holefill protocol, for all the peers of one endpoint.
pub struct Holefill {
    c: Common,
    cfg: HolefillConfig,
    seq: SeqSpace,
    peers: Vec<Peer>,
    ready: ReadySet,
    timers: Timers,
    events: VecDeque<Event>,
    /// The first peer found to send what no correct member sends.
    misbehaved: Option<PeerMisbehaved>,
    send_free: u32,
    recv_free: u32,
    /// Peers with data waiting for a free send buffer.
    blocked: VecDeque<Rank>,
    colour: u8,
    /// Colour recorded in packets first sent from now on (see [`Coloured::hold_colour`]).
    hold: u8,
    colours_on: bool,
    /// Colour of the latest implicit-acknowledgement sweep.
    swept: u8,
}

impl Holefill {
    /// A holefill endpoint for `c` with `cfg`, validated.
    pub fn new(c: Common, cfg: HolefillConfig) -> Result<Holefill, HolefillConfigError> {
        cfg.validate()?;
        let seq = SeqSpace::new(cfg.seq_bits);
        let send_pool = cfg.buffers / 2;
        let recv_pool = cfg.buffers - send_pool;
        let window = cfg.window;
        let peers = (0..c.nprocs)
            .map(|i| {
                // The send window toward `i` in packets, cut to the byte cap; the
                // receiver acknowledges by the same cut (both ends compute it from the
                // pair's packet size), and still accepts the whole configured window.
                let mp = c.max_payload.get(i as usize).copied().unwrap_or(1).max(1) as u64;
                let by_bytes = (cfg.inflight_bytes / mp).min(u32::MAX as u64) as u32;
                let w = by_bytes.clamp(MIN_BYTE_WINDOW.min(window), window);
                (w, ack_every(&cfg, c.nprocs, w))
            })
            .map(|(send_window, ack_every)| Peer {
                send_window,
                // Only with `BULKWIRE_CC=all` ([`Common::cc_all`]): on the simulated switch of
                // docs/performance.md holefill with the window lost a seventh as many packets
                // but took 2.05x the links' bound against 1.39x without it (its hole reports
                // repair a loss within a round trip), and at 50 % random loss it took 1.2 s
                // against 0.2 s (`crates/engine/tests/sim_heavy_loss.rs`).
                cc: Window::new(c.cc_all),
                ack_every,
                out: OutQueue::default(),
                inflight: VecDeque::new(),
                snd_una: 0,
                snd_nxt: 0,
                resend: VecDeque::new(),
                last_msg: None,
                phase_end: None,
                probe_due: false,
                last_activity: 0,
                rate_start: 0,
                rate_cur: 0,
                rate_prev: 0,
                blocked: false,
                rcv_nxt: 0,
                held: Bits::new(window),
                reasm: Reassembler::new(c.max_message, c.peer_budget)
                    .with_records(MAX_PARTIAL.max(window as usize)),
                since_ack: 0,
                ack_requested: false,
                ack_due: false,
                echo: 0,
                waiting: false,
                wait_since: 0,
                last_arrival: 0,
                last_prod: None,
                prod_backoff: 0,
                prod_pending: false,
                prod_due: false,
                rtt: Rtt::new(c.rto_initial, c.rto_min.max(RTO_FLOOR), c.rto_max)
                    .with_max_backoff(RTO_MAX_BACKOFF),
                heard: false,
                silent_timeouts: 0,
                silent_prods: 0,
                closed: None,
                stats: PeerStats::default(),
            })
            .collect();
        Ok(Holefill {
            ready: ReadySet::new(c.nprocs),
            timers: Timers::new(c.nprocs),
            events: VecDeque::new(),
            misbehaved: None,
            send_free: send_pool,
            recv_free: recv_pool,
            blocked: VecDeque::new(),
            colour: 0,
            hold: 0,
            colours_on: false,
            swept: 0,
            peers,
            seq,
            cfg,
            c,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &HolefillConfig {
        &self.cfg
    }

    /// New packets from a peer after which a requested ack is sent: `n/(2p)`, capped at
    /// half the configured window (toward a peer whose window the byte cap cuts, half of
    /// that).
    pub fn ack_every(&self) -> u32 {
        ack_every(&self.cfg, self.c.nprocs, self.cfg.window)
    }

    /// Free send and receive buffers.
    pub fn free_buffers(&self) -> (u32, u32) {
        (self.send_free, self.recv_free)
    }

    /// Gap before a packet already resent may be resent again: one round trip with a
    /// margin of one mean deviation, so jitter does not make stale reports look fresh.
    fn resend_gap(rtt: &Rtt) -> Time {
        // Its round trips are not made to follow the queue's peak
        // (`Rtt::following_queue`): its samples include the acknowledgements it delays
        // on purpose, and the peak of those made recovery at 50 % loss twice as slow.
        rtt.estimate() + rtt.rttvar()
    }

    fn prod_interval(&self, p: &Peer) -> Time {
        let base = p.rtt.estimate().max(self.cfg.prod_min);
        base.saturating_mul(1 << p.prod_backoff.min(MAX_PROD_BACKOFF))
            .min(self.cfg.prod_max)
    }

    /// When `p` should prod next, if it is waiting. With a hole known, only the interval
    /// since the last prod counts: the data is certainly missing.
    fn prod_deadline(&self, p: &Peer) -> Option<Time> {
        if !p.waiting || p.closed.is_some() {
            return None;
        }
        let iv = self.prod_interval(p);
        let last = p.last_prod.unwrap_or(0);
        Some(if p.held.count > 0 {
            p.last_prod.map_or(0, |t| t + iv)
        } else {
            p.wait_since.max(p.last_arrival).max(last) + iv
        })
    }

    /// When `p`'s retransmission timer fires. Its 1 ms floor covers acknowledgements we
    /// delay on purpose; after a timeout the timer waits for the answer to an `ACK_REQ`
    /// resend or probe, which the peer sends at once, so then the job's floor (`floor`)
    /// applies: at 50 % loss a resend and its answer both arrive a quarter of the time,
    /// and a millisecond per retry made holefill several times slower than gbn.
    fn rto_deadline(p: &Peer, floor: Time) -> Option<Time> {
        (!p.inflight.is_empty() && p.closed.is_none()).then(|| {
            let rto = if p.silent_timeouts > 0 {
                p.rtt.rto_floored(floor)
            } else {
                p.rtt.rto()
            };
            p.last_activity + rto
        })
    }

    fn next_deadline(&self, peer: Rank) -> Option<Time> {
        let p = &self.peers[peer as usize];
        match (Self::rto_deadline(p, self.c.rto_min), self.prod_deadline(p)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Makes sure `peer`'s timer fires no later than its next deadline. Deadlines only
    /// move later on the hot path, so a timer set earlier is kept and re-armed when it
    /// fires; that keeps the heap untouched per packet.
    fn arm(&mut self, peer: Rank) {
        if let Some(t) = self.next_deadline(peer) {
            self.timers.set_earlier(peer, t);
        }
    }

    fn can_send_new(&self, p: &Peer) -> bool {
        !p.out.is_empty()
            && (p.inflight.len() as u32) < p.send_window
            && p.cc.allows(p.inflight.len())
            && self.send_free > 0
    }

    /// The end of hole to report to `p`.
    fn eoh(&self, p: &Peer) -> u32 {
        match p.held.first(self.cfg.window as usize) {
            Some(i) => self.seq.add(p.rcv_nxt, i as u32),
            None => p.rcv_nxt,
        }
    }

    /// Frees the first `n` unacknowledged packets to `peer`.
    fn free(&mut self, peer: Rank, n: usize, now: Time, implicit: bool) {
        let p = &mut self.peers[peer as usize];
        for _ in 0..n {
            let s = p
                .inflight
                .pop_front()
                .expect("freeing only what is in flight");
            if s.notify && s.flags & flags::LAST != 0 {
                self.events.push_back(Event::Sent {
                    to: peer,
                    id: s.msg,
                });
            }
        }
        p.snd_una = self.seq.add(p.snd_una, n as u32);
        p.cc.on_ack(n as u32);
        if implicit {
            p.stats.implicit_acks += n as u64;
        } else {
            p.stats.acked += n as u64;
        }
        p.last_activity = now;
        p.rtt.reset_backoff();
        p.silent_timeouts = 0;
        if !p.out.is_empty() {
            self.ready.insert(peer);
        }
        self.send_free += n as u32;
        while self.send_free > 0 {
            let Some(q) = self.blocked.pop_front() else {
                break;
            };
            self.peers[q as usize].blocked = false;
            self.ready.insert(q);
        }
    }

    /// Frees, for every peer, the unacknowledged packets sent under colours behind `c`.
    fn implicit_ack(&mut self, c: u8, now: Time) {
        if !self.colours_on || !colour_ahead(c, self.swept) {
            return;
        }
        self.swept = c;
        for peer in 0..self.c.nprocs {
            let p = &self.peers[peer as usize];
            let n = p
                .inflight
                .iter()
                .take_while(|s| colour_ahead(c, s.colour))
                .count();
            if n > 0 {
                self.free(peer, n, now, true);
            }
        }
    }

    /// Queues slot `idx` of `p` for resending with `extra` flags; returns whether it was
    /// newly queued.
    fn queue_resend(seq: SeqSpace, p: &mut Peer, idx: usize, extra: u8, front: bool) -> bool {
        let s = &mut p.inflight[idx];
        s.extra |= extra;
        if s.queued {
            return false;
        }
        s.queued = true;
        let sq = seq.add(p.snd_una, idx as u32);
        if front {
            p.resend.push_front(sq);
        } else {
            p.resend.push_back(sq);
        }
        true
    }

    /// Queues the slots `[0, end)` of `peer` for resending. A slot not resent yet goes at
    /// once, with `first_gap`; one resent before waits `gap` since its last transmission.
    /// The last one queued asks for an ack, to learn the next hole.
    fn resend_range(&mut self, peer: Rank, end: usize, now: Time, first_gap: Time) -> u32 {
        let p = &mut self.peers[peer as usize];
        let gap = Self::resend_gap(&p.rtt);
        let mut last = None;
        let mut n = 0;
        for i in 0..end.min(p.inflight.len()) {
            let s = &p.inflight[i];
            let wait = if s.sends >= 2 { gap } else { first_gap };
            if s.queued || now.saturating_sub(s.last_tx) < wait {
                continue;
            }
            Self::queue_resend(self.seq, p, i, 0, false);
            last = Some(i);
            n += 1;
        }
        if let Some(i) = last {
            p.inflight[i].extra |= flags::ACK_REQ;
            self.ready.insert(peer);
            // Every resend answers a loss: a hole, or a tail that did not arrive.
            p.cc.on_loss(now, &p.rtt);
        }
        n
    }

    /// Takes in the ack and end of hole of a packet from `peer`.
    fn take_ack(&mut self, peer: Rank, now: Time, hdr: &Header) -> AckInfo {
        let seq = self.seq;
        let window = self.cfg.window;
        let p = &mut self.peers[peer as usize];
        let (a, e) = (hdr.ack, hdr.eoh);
        if !in_space(seq, a) || !in_space(seq, e) {
            p.stats.bogus += 1;
            return AckInfo::Bogus;
        }
        let flight = seq.dist(p.snd_una, p.snd_nxt);
        let da = seq.dist(p.snd_una, a);
        if da > flight {
            if seq.dist(a, p.snd_una) <= window {
                return AckInfo::Stale;
            }
            p.stats.bogus += 1;
            return AckInfo::Bogus;
        }
        let left = flight - da;
        let de = seq.dist(a, e);
        // The end of hole names a packet held beyond the hole: one we sent after `a`.
        if e != a && de >= left {
            p.stats.bogus += 1;
            return AckInfo::Bogus;
        }
        if da > 0 {
            if hdr.kind == Kind::Data {
                p.stats.piggybacked_acks += 1;
            }
            self.free(peer, da as usize, now, false);
        }
        if e != a {
            // The hole's packets were all sent before `e`, which arrived: on an ordered
            // path they are lost, so the first resend goes at once.
            AckInfo::Hole(self.resend_range(peer, de as usize, now, 0))
        } else if left == 0 {
            AckInfo::AllAcked
        } else {
            AckInfo::Tail
        }
    }

    /// Takes in one data packet from `peer` (its ack already taken).
    fn take_data(&mut self, peer: Rank, now: Time, hdr: &Header, payload: &[u8]) {
        // No correct sender makes these, at any position or time (retransmissions and
        // ghosts of past sequence cycles included): report it before anything is placed.
        if hdr.total > self.c.message_limit() {
            let what = announced_too_large(hdr.total, self.c.max_message, self.c.peer_budget);
            return self.misbehave(peer, what);
        }
        if hdr
            .offset
            .checked_add(payload.len() as u64)
            .is_none_or(|e| e > hdr.total)
        {
            let what = format!(
                "sent {} bytes at offset {} of a message of {} bytes",
                payload.len(),
                hdr.offset,
                hdr.total
            );
            return self.misbehave(peer, what);
        }
        let seq = self.seq;
        let window = self.cfg.window;
        let p = &mut self.peers[peer as usize];
        // A sender under congestion control tells its window in `credit`: a requested
        // ack is due every half window, or it would wait a prod interval for acks that
        // open it.
        let ack_every = match hdr.credit {
            0 => p.ack_every,
            w => p.ack_every.min((w as u32 / 2).max(1)),
        };
        let req = hdr.has(flags::ACK_REQ);
        let mut urgent = hdr.has(flags::LAST_OF_PHASE) || hdr.has(flags::RETRANSMIT);
        let s = hdr.seq;
        if !in_space(seq, s) {
            p.stats.bogus += 1;
            return;
        }
        let d = seq.dist(p.rcv_nxt, s);
        let mut new_hole = false;
        if d < window {
            if d > 0 && p.held.get(d as usize) {
                p.stats.drop_duplicate += 1;
                urgent = true;
            } else if d > 0 && self.recv_free == 0 {
                p.stats.drop_no_buffer += 1;
            } else {
                // The packet at `rcv_nxt + d` belongs to a message at most `d` after the
                // next one to release: anything else is nonsense, or a ghost from a past
                // sequence cycle (and could make the reassembler allocate for a message
                // that will never come).
                if hdr.msg.wrapping_sub(p.reasm.next_id()) > d {
                    p.stats.bogus += 1;
                    return;
                }
                match p.reasm.add(hdr.msg, hdr.offset, hdr.total, payload) {
                    Added::Rejected => {
                        p.stats.bogus += 1;
                        return;
                    }
                    Added::Misbehaved(what) => return self.misbehave(peer, what),
                    Added::Stored | Added::Ready => {}
                }
                p.stats.bytes_received += payload.len() as u64;
                p.since_ack += 1;
                p.last_arrival = now;
                p.prod_backoff = 0;
                p.prod_pending = false;
                if d == 0 {
                    p.held.shift();
                    p.rcv_nxt = seq.add(p.rcv_nxt, 1);
                    while p.held.count > 0 && p.held.get(0) {
                        p.held.shift();
                        p.rcv_nxt = seq.add(p.rcv_nxt, 1);
                        self.recv_free += 1;
                    }
                } else {
                    new_hole = p.held.count == 0;
                    p.held.set(d as usize);
                    self.recv_free -= 1;
                }
                while let Some((id, data)) = p.reasm.pop() {
                    p.stats.messages_delivered += 1;
                    self.events.push_back(Event::Message {
                        from: peer,
                        id,
                        data,
                    });
                }
            }
        } else if seq.dist(s, p.rcv_nxt) <= window {
            p.stats.drop_duplicate += 1;
            urgent = true;
        } else {
            p.stats.drop_out_of_window += 1;
            return;
        }
        if req {
            p.ack_requested = true;
        }
        // A hole just opened: say so at once (one ack per hole), so that the sender,
        // which takes a reported hole on an ordered path as lost, repairs it within a
        // round trip instead of at the next requested ack or prod. Those come a byte
        // window or a round trip apart, and in a stream the round trip includes the
        // queue: with 1 % loss on loopback each loss cost ~0.5 ms before this.
        if new_hole || (p.ack_requested && ((req && urgent) || p.since_ack >= ack_every)) {
            p.ack_due = true;
            p.echo = hdr.aux;
            self.ready.insert(peer);
        }
        // A new hole while the upper layer waits: prod soon.
        if p.waiting && p.held.count > 0 {
            self.arm(peer);
        }
    }

    /// Foresees running out of send buffers toward `p` within one round trip.
    fn low_on_buffers(&self, p: &Peer) -> bool {
        // The congestion window counts as the send window it cuts: a sender it holds
        // back must ask for the acknowledgements that open it.
        let free = p
            .send_window
            .min(p.cc.packets())
            .saturating_sub(p.inflight.len() as u32)
            .min(self.send_free);
        free <= p.rate_prev.max(p.rate_cur)
    }

    /// Counts one new packet toward `p`'s consumption per round trip.
    fn note_consumed(p: &mut Peer, now: Time) {
        let rtt = p.rtt.estimate().max(1);
        let elapsed = now.saturating_sub(p.rate_start);
        if elapsed >= rtt {
            // Scale the finished period to one round trip, so an idle gap reads as slow.
            p.rate_prev = ((p.rate_cur as u64 * rtt) / elapsed) as u32;
            p.rate_start = now;
            p.rate_cur = 0;
        }
        p.rate_cur += 1;
    }

    /// A header toward `peer` carrying our receive state, colour and clock.
    fn header(&self, peer: Rank, kind: Kind, now: Time) -> Header {
        let p = &self.peers[peer as usize];
        let mut h = Header::new(kind);
        h.dst = peer;
        h.ack = p.rcv_nxt;
        h.eoh = self.eoh(p);
        h.colour = self.colour;
        h.aux = stamp(now);
        h
    }

    /// Any packet to the peer carries our ack: the request, if any, is answered.
    fn acked_peer(p: &mut Peer) {
        p.since_ack = 0;
        p.ack_requested = false;
        p.ack_due = false;
    }

    /// Transmits slot `idx` of `peer`.
    fn emit(&mut self, peer: Rank, idx: usize, now: Time, out: &mut Vec<Transmit>) {
        let mut h = self.header(peer, Kind::Data, now);
        let low = self.low_on_buffers(&self.peers[peer as usize]);
        let p = &mut self.peers[peer as usize];
        let s = &mut p.inflight[idx];
        let mut fl = s.flags | s.extra;
        s.extra = 0;
        if s.sends > 0 {
            fl |= flags::RETRANSMIT;
            p.stats.retransmits += 1;
        }
        if low {
            fl |= flags::ACK_REQ;
        }
        s.sends += 1;
        s.last_tx = now;
        h.flags = fl;
        if p.cc.on() {
            h.credit = p.cc.packets().min(u16::MAX as u32) as u16;
        }
        h.seq = self.seq.add(p.snd_una, idx as u32);
        h.msg = s.msg;
        h.offset = s.offset;
        h.total = s.total;
        h.len = s.payload.len() as u32;
        p.stats.data_sent += 1;
        p.stats.bytes_sent += s.payload.len() as u64;
        let payload = s.payload.clone();
        Self::acked_peer(p);
        out.push(Transmit { hdr: h, payload });
    }

    /// Sends `peer` its resends, new data and due control packets, up to a burst.
    fn serve(&mut self, peer: Rank, now: Time, out: &mut Vec<Transmit>, limit: usize) {
        if self.peers[peer as usize].closed.is_some() {
            return;
        }
        let mut n = 0;
        while n < self.cfg.burst && out.len() < limit {
            let p = &mut self.peers[peer as usize];
            let Some(sq) = p.resend.pop_front() else {
                break;
            };
            let idx = self.seq.dist(p.snd_una, sq) as usize;
            if idx >= p.inflight.len() || !p.inflight[idx].queued {
                continue; // acknowledged meanwhile
            }
            p.inflight[idx].queued = false;
            self.emit(peer, idx, now, out);
            n += 1;
        }
        let mp = self.c.max_payload[peer as usize].max(1);
        while n < self.cfg.burst
            && out.len() < limit
            && self.can_send_new(&self.peers[peer as usize])
        {
            let colour = self.hold;
            let p = &mut self.peers[peer as usize];
            let f = p.out.next_fragment(mp).expect("queue is not empty");
            let mut fl =
                if f.first { flags::FIRST } else { 0 } | if f.last { flags::LAST } else { 0 };
            if f.last && p.phase_end == Some(f.msg) {
                fl |= flags::LAST_OF_PHASE | flags::ACK_REQ;
                p.phase_end = None;
            }
            let was_idle = p.inflight.is_empty();
            p.inflight.push_back(Slot {
                msg: f.msg,
                offset: f.offset,
                total: f.total,
                payload: f.payload,
                flags: fl,
                extra: 0,
                notify: f.notify,
                colour,
                sends: 0,
                last_tx: now,
                queued: false,
            });
            p.snd_nxt = self.seq.add(p.snd_nxt, 1);
            p.last_activity = now;
            Self::note_consumed(p, now);
            let idx = p.inflight.len() - 1;
            self.send_free -= 1;
            self.emit(peer, idx, now, out);
            n += 1;
            if was_idle {
                self.arm(peer);
            }
        }
        let p = &self.peers[peer as usize];
        if !p.out.is_empty() && self.send_free == 0 && !p.blocked {
            self.peers[peer as usize].blocked = true;
            self.blocked.push_back(peer);
        }
        if out.len() < limit {
            self.control(peer, now, out);
        }
        let p = &self.peers[peer as usize];
        if !p.resend.is_empty() || self.can_send_new(p) || p.prod_due || p.probe_due || p.ack_due {
            self.ready.insert(peer);
        }
    }

    /// Sends the one control packet `peer` is due, if any: a prod, a phase-end probe or an
    /// ack. Each carries our receive state, so one covers the others' ack.
    fn control(&mut self, peer: Rank, now: Time, out: &mut Vec<Transmit>) {
        let p = &self.peers[peer as usize];
        let mut h = if p.prod_due {
            self.header(peer, Kind::Prod, now)
        } else if p.probe_due {
            let mut h = self.header(peer, Kind::Ack, now);
            h.flags = flags::ACK_REQ | flags::LAST_OF_PHASE;
            h
        } else if p.ack_due {
            self.header(peer, Kind::Ack, now)
        } else {
            return;
        };
        let p = &mut self.peers[peer as usize];
        if h.kind == Kind::Prod {
            p.prod_due = false;
            if p.prod_pending {
                // The last prod went unanswered a whole interval. From the third such
                // prod in a row with nothing heard from the peer, it is silent (stopped,
                // or busy without a progress thread), not merely unlucky: prod less
                // often, or a stopped peer draws a prod every round trip for as long as
                // it stays stopped. Under random loss a prod and its answer both arrive
                // only part of the time (a quarter at 50 % loss): backing off at each
                // unanswered one left a live peer prodded every 100 ms.
                p.silent_prods += 1;
                if p.silent_prods > RTO_BACKOFF_AFTER {
                    p.prod_backoff = (p.prod_backoff + 1).min(MAX_PROD_BACKOFF);
                }
            }
            p.prod_pending = true;
            p.last_prod = Some(now);
            p.stats.prods_sent += 1;
        } else {
            if !h.has(flags::ACK_REQ) {
                h.aux = p.echo;
            }
            p.probe_due = false;
            p.stats.acks_sent += 1;
        }
        p.stats.control_sent += 1;
        Self::acked_peer(p);
        out.push(Transmit {
            hdr: h,
            payload: Bytes::new(),
        });
    }

    /// A timer of `peer` fired.
    fn on_timer(&mut self, peer: Rank, now: Time) {
        if self.peers[peer as usize].closed.is_some() {
            return;
        }
        if Self::rto_deadline(&self.peers[peer as usize], self.c.rto_min).is_some_and(|t| now >= t)
        {
            let p = &mut self.peers[peer as usize];
            p.stats.timeouts += 1;
            // Back off only toward a peer silent since the timer last fired, from the
            // third such timeout in a row (see RTO_BACKOFF_AFTER).
            if std::mem::take(&mut p.heard) {
                p.silent_timeouts = 0;
            } else {
                p.silent_timeouts += 1;
                if p.silent_timeouts > RTO_BACKOFF_AFTER {
                    p.rtt.back_off();
                }
            }
            p.last_activity = now;
            // Most timeouts on a quiet tail find the data delivered and only the ack
            // missing (the receiver does not ack unasked). For a large packet, ask with a
            // header-only probe first; an answer that shows the tail lost resends it.
            let first = &p.inflight[0];
            if first.sends == 1 && first.payload.len() > PROBE_BEFORE_RESEND {
                p.probe_due = true;
            } else {
                Self::queue_resend(self.seq, p, 0, flags::ACK_REQ, true);
            }
            self.ready.insert(peer);
        }
        if self
            .prod_deadline(&self.peers[peer as usize])
            .is_some_and(|t| now >= t)
        {
            let p = &mut self.peers[peer as usize];
            p.prod_due = true;
            p.last_prod = Some(now);
            self.ready.insert(peer);
        }
        match self.next_deadline(peer) {
            Some(t) => self.timers.set(peer, t.max(now + 1)),
            None => self.timers.clear(peer),
        }
    }
}

impl Holefill {
    /// Records that `peer` sent what no correct member sends ([`PeerMisbehaved`]); the
    /// first such peer is reported, and its packets are ignored from then on.
    fn misbehave(&mut self, peer: Rank, what: String) {
        self.misbehaved.get_or_insert(PeerMisbehaved { peer, what });
    }
}

impl Protocol for Holefill {
    fn misbehaving(&self) -> Option<&PeerMisbehaved> {
        self.misbehaved.as_ref()
    }

    fn name(&self) -> &'static str {
        "holefill"
    }

    fn send(
        &mut self,
        _now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<MsgId, ProtoError> {
        self.c.check_send(to, data.len(), || {
            self.peers[to as usize].closed.as_deref().copied()
        })?;
        let p = &mut self.peers[to as usize];
        p.stats.messages_sent += 1;
        let id = p.out.push(data, notify);
        p.last_msg = Some(id);
        self.ready.insert(to);
        Ok(id)
    }

    fn clocked(&self) -> bool {
        true
    }

    /// Every message waits in the queues until it is acknowledged.
    fn send_now(
        &mut self,
        now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<(MsgId, Option<Transmit>), ProtoError> {
        self.send(now, to, data, notify).map(|id| (id, None))
    }

    fn handle(&mut self, now: Time, hdr: &Header, payload: &[u8]) {
        let from = hdr.src;
        if self.c.check_peer(from).is_err()
            || self.peers[from as usize].closed.is_some()
            || self.misbehaved.as_ref().is_some_and(|m| m.peer == from)
        {
            return;
        }
        let p = &mut self.peers[from as usize];
        p.heard = true;
        p.silent_prods = 0;
        self.implicit_ack(hdr.colour, now);
        match hdr.kind {
            Kind::Data => {
                self.peers[from as usize].stats.data_received += 1;
                self.take_ack(from, now, hdr);
                self.take_data(from, now, hdr, payload);
            }
            Kind::Ack => {
                let st = &mut self.peers[from as usize].stats;
                st.control_received += 1;
                st.acks_received += 1;
                let info = self.take_ack(from, now, hdr);
                if info == AckInfo::Bogus {
                    return;
                }
                let p = &mut self.peers[from as usize];
                if hdr.has(flags::ACK_REQ) {
                    // A probe: the peer wants our state now.
                    p.ack_due = true;
                    p.echo = hdr.aux;
                    self.ready.insert(from);
                    return;
                }
                let rtt = ((stamp(now).wrapping_sub(hdr.aux)) as Time) << TS_SHIFT;
                if rtt <= self.c.rto_max {
                    p.rtt.sample(rtt);
                }
                if p.prod_pending {
                    // Prodded, answered with no data: we ran ahead. Prod less often.
                    p.prod_pending = false;
                    p.prod_backoff = (p.prod_backoff + 1).min(MAX_PROD_BACKOFF);
                }
                // A sample can shorten the prod interval (the first one replaces the
                // initial timeout): bring the timer forward if so.
                self.arm(from);
                let p = &mut self.peers[from as usize];
                if info == AckInfo::Tail {
                    // A fresh answer, and the peer has nothing beyond `ack`: what left a
                    // whole timeout ago is lost.
                    let rto = p.rtt.rto();
                    let end = p.inflight.len();
                    self.resend_range(from, end, now, rto);
                }
            }
            Kind::Prod => {
                let st = &mut self.peers[from as usize].stats;
                st.control_received += 1;
                st.prods_received += 1;
                let queued = match self.take_ack(from, now, hdr) {
                    AckInfo::Bogus => return,
                    AckInfo::Hole(n) => n,
                    AckInfo::Tail => {
                        // The prodder has nothing beyond `ack`: resend what had a round
                        // trip to arrive and did not.
                        let p = &self.peers[from as usize];
                        let gap = Self::resend_gap(&p.rtt);
                        let end = p.inflight.len();
                        self.resend_range(from, end, now, gap)
                    }
                    AckInfo::Stale | AckInfo::AllAcked => 0,
                };
                if queued == 0 {
                    // Nothing missing to send (or it is on its way): say so with an ack,
                    // unless new data leaves for the prodder first and answers for it.
                    let p = &mut self.peers[from as usize];
                    p.ack_due = true;
                    p.echo = hdr.aux;
                    self.ready.insert(from);
                }
            }
            _ => self.peers[from as usize].stats.bogus += 1,
        }
    }

    fn poll_transmit(&mut self, now: Time, out: &mut Vec<Transmit>, max: usize) {
        let limit = out.len().saturating_add(max);
        while out.len() < limit {
            let Some(peer) = self.ready.pop() else {
                break;
            };
            self.serve(peer, now, out, limit);
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        self.timers.earliest()
    }

    fn handle_timeout(&mut self, now: Time) {
        while let Some(peer) = self.timers.pop_expired(now) {
            self.on_timer(peer, now);
        }
    }

    fn outstanding(&self, peer: Rank) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| !p.out.is_empty() || !p.inflight.is_empty())
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        let p = &self.peers[peer as usize];
        PeerStats {
            srtt_ns: p.rtt.srtt(),
            held_bytes: p.reasm.held_bytes(),
            ..p.stats
        }
    }

    fn close_peer(&mut self, dead: PeerDead) {
        let peer = dead.peer;
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return;
        };
        p.closed = Some(Box::new(dead));
        p.out.clear();
        self.send_free += p.inflight.len() as u32;
        p.inflight.clear();
        p.resend.clear();
        self.recv_free += p.held.count;
        p.held.clear();
        p.reasm = Reassembler::new(self.c.max_message, self.c.peer_budget)
            .with_records(MAX_PARTIAL.max(self.cfg.window as usize));
        p.waiting = false;
        p.ack_due = false;
        p.prod_due = false;
        p.probe_due = false;
        self.timers.clear(peer);
        while self.send_free > 0 {
            let Some(q) = self.blocked.pop_front() else {
                break;
            };
            self.peers[q as usize].blocked = false;
            self.ready.insert(q);
        }
    }

    fn expect(&mut self, now: Time, peer: Rank, waiting: bool) {
        if self.c.check_peer(peer).is_err() || self.peers[peer as usize].closed.is_some() {
            return;
        }
        let p = &mut self.peers[peer as usize];
        p.waiting = waiting;
        if waiting {
            p.wait_since = now;
            self.arm(peer);
        } else {
            p.prod_due = false;
        }
    }

    fn queued_bytes(&self, peer: Rank) -> u64 {
        self.peers
            .get(peer as usize)
            .map_or(0, |p| p.out.pending_bytes())
    }

    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        Some(self)
    }
}

impl Coloured for Holefill {
    fn set_colour(&mut self, colour: u8) {
        self.colour = colour;
        self.hold = colour;
        self.colours_on = true;
    }

    fn hold_colour(&mut self, hold: u8) {
        self.hold = hold;
    }

    fn end_phase(&mut self, peer: Rank) {
        if self.c.check_peer(peer).is_err() {
            return;
        }
        let p = &mut self.peers[peer as usize];
        let Some(last) = p.last_msg else {
            return;
        };
        if p.closed.is_some() {
            return;
        }
        if p.out.last_id() == Some(last) {
            p.phase_end = Some(last);
        } else if let Some(s) = p.inflight.back_mut()
            && s.msg == last
            && s.flags & flags::LAST != 0
        {
            // Its last packet already left without the request: ask by a control packet.
            s.flags |= flags::LAST_OF_PHASE | flags::ACK_REQ;
            p.probe_due = true;
            self.ready.insert(peer);
        }
    }
}

#[cfg(test)]
mod tests {
    /// `peer` declared dead after 5 s of silence.
    fn dead(peer: Rank) -> PeerDead {
        PeerDead {
            peer,
            silent_for: 5 * SEC,
        }
    }
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::SEC;

    type Packet = (Header, Bytes);

    fn node(rank: Rank, nprocs: u32, max_payload: usize, cfg: HolefillConfig) -> Holefill {
        Holefill::new(Common::new(rank, nprocs, max_payload), cfg).unwrap()
    }

    fn pair() -> (Holefill, Holefill) {
        let cfg = HolefillConfig::default();
        (node(0, 2, 1000, cfg.clone()), node(1, 2, 1000, cfg))
    }

    /// The paper's protocol alone, without congestion control (`BULKWIRE_CC=off`): what
    /// the tests of its windows and acknowledgements count.
    fn paper_node(rank: Rank, nprocs: u32, max_payload: usize, cfg: HolefillConfig) -> Holefill {
        Holefill::new(Common::new(rank, nprocs, max_payload).with_cc(false), cfg).unwrap()
    }

    /// Everything `h` transmits now, with the source the engine would fill in.
    fn out(h: &mut Holefill, now: Time) -> Vec<Packet> {
        let mut v = Vec::new();
        h.poll_transmit(now, &mut v, usize::MAX);
        v.into_iter()
            .map(|t| {
                let mut hdr = t.hdr;
                hdr.src = h.c.rank;
                hdr.len = t.payload.len() as u32;
                (hdr, t.payload)
            })
            .collect()
    }

    fn give(h: &mut Holefill, now: Time, p: &Packet) {
        h.handle(now, &p.0, &p.1);
    }

    fn seqs(v: &[Packet]) -> Vec<u32> {
        v.iter().map(|p| p.0.seq).collect()
    }

    /// Messages delivered by `h` so far: (from, id, data).
    fn delivered(h: &mut Holefill) -> Vec<(Rank, MsgId, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(e) = h.poll_event() {
            if let Event::Message { from, id, data } = e {
                v.push((from, id, data));
            }
        }
        v
    }

    fn ids(v: &[(Rank, MsgId, Vec<u8>)]) -> Vec<MsgId> {
        v.iter().map(|m| m.1).collect()
    }

    /// A data packet from `src` to `dst` carrying one whole one-byte message.
    fn data(src: Rank, dst: Rank, seq: u32, fl: u8) -> Packet {
        let mut h = Header::new(Kind::Data);
        h.src = src;
        h.dst = dst;
        h.seq = seq;
        h.msg = seq;
        h.total = 1;
        h.len = 1;
        h.flags = flags::FIRST | flags::LAST | fl;
        (h, Bytes::from(vec![seq as u8]))
    }

    #[test]
    fn config_validation() {
        // Fewer buffers alone shrink the default window with them.
        assert_eq!(HolefillConfig::default().with_buffers(64).window, 32);
        assert_eq!(HolefillConfig::default().with_buffers(4096).window, 256);
        let bad = |f: fn(&mut HolefillConfig)| {
            let mut c = HolefillConfig::default();
            f(&mut c);
            Holefill::new(Common::new(0, 2, 100), c).err().unwrap()
        };
        assert_eq!(
            bad(|c| (c.seq_bits, c.window) = (8, 128)),
            HolefillConfigError::Window {
                window: 128,
                max: 127
            }
        );
        assert_eq!(bad(|c| c.seq_bits = 33), HolefillConfigError::SeqBits(33));
        assert_eq!(bad(|c| c.buffers = 1), HolefillConfigError::Buffers(1));
        assert_eq!(bad(|c| c.burst = 0), HolefillConfigError::Burst);
        assert!(matches!(
            bad(|c| c.prod_min = 2 * c.prod_max),
            HolefillConfigError::Prod { .. }
        ));
        // n/(2p), at most half the window.
        let ack_every = |n: u32, w: u32, p: u32| {
            let cfg = HolefillConfig {
                buffers: n,
                window: w,
                ..HolefillConfig::default()
            };
            Holefill::new(Common::new(0, p, 100), cfg)
                .unwrap()
                .ack_every()
        };
        assert_eq!(ack_every(1024, 256, 2), 128);
        assert_eq!(ack_every(1024, 256, 16), 32);
        assert_eq!(ack_every(1024, 256, 4096), 1);
        assert!(crate::by_name("holefill", Common::new(0, 2, 100), &Default::default()).is_ok());
    }

    #[test]
    fn paper_example_resends_exactly_the_holes() {
        let (mut a, mut b) = pair();
        for i in 0..10u8 {
            a.send(0, 1, Bytes::from(vec![i]), false).unwrap();
        }
        let pk = out(&mut a, 0);
        assert_eq!(seqs(&pk), (0..10).collect::<Vec<_>>());
        assert!(pk.iter().all(|p| !p.0.has(flags::RETRANSMIT)));
        let t = 100 * US;
        for i in [0, 1, 4, 5, 6, 9] {
            give(&mut b, t, &pk[i]);
        }
        assert_eq!(ids(&delivered(&mut b)), [0, 1]);
        // Reverse traffic carries the first hole [2, 4).
        b.send(t, 0, Bytes::from_static(b"r1"), false).unwrap();
        let r = out(&mut b, t);
        assert_eq!(r.len(), 1, "no explicit ack: nobody asked");
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Data, 2, 4));
        give(&mut a, 2 * t, &r[0]);
        let rs = out(&mut a, 2 * t);
        assert_eq!(seqs(&rs), [2, 3]);
        assert!(rs.iter().all(|p| p.0.has(flags::RETRANSMIT)));
        assert!(
            rs[1].0.has(flags::ACK_REQ),
            "the last resend asks for the next hole"
        );
        for p in &rs {
            give(&mut b, 3 * t, p);
        }
        assert_eq!(ids(&delivered(&mut b)), [2, 3, 4, 5, 6]);
        // The requested ack rides on reverse data: the next hole is [7, 9).
        b.send(3 * t, 0, Bytes::from_static(b"r2"), false).unwrap();
        let r = out(&mut b, 3 * t);
        assert_eq!(r.len(), 1, "the ack rides on the data");
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Data, 7, 9));
        give(&mut a, 4 * t, &r[0]);
        let rs = out(&mut a, 4 * t);
        assert_eq!(seqs(&rs), [7, 8]);
        for p in &rs {
            give(&mut b, 5 * t, p);
        }
        let got = delivered(&mut b);
        assert_eq!(ids(&got), [7, 8, 9]);
        assert_eq!(got[2].2, [9]);
        // No data left for A: the request is answered by a stand-alone ack.
        let r = out(&mut b, 5 * t);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Ack, 10, 10));
        give(&mut a, 6 * t, &r[0]);
        assert!(!a.outstanding(1));
        let s = a.peer_stats(1);
        assert_eq!((s.data_sent, s.retransmits, s.acked), (14, 4, 10));
        assert_eq!(s.piggybacked_acks, 2);
        assert!(s.srtt_ns > 0, "the explicit ack echoed a timestamp");
        assert_eq!(b.peer_stats(0).acks_sent, 1);
        assert_eq!(ids(&delivered(&mut a)), [0, 1]);
    }

    #[test]
    fn no_second_resend_within_a_round_trip() {
        let (mut a, mut b) = pair();
        for i in 0..6u8 {
            a.send(0, 1, Bytes::from(vec![i]), false).unwrap();
        }
        let pk = out(&mut a, 0);
        for i in [0, 1, 4, 5] {
            give(&mut b, 10 * US, &pk[i]);
        }
        let stale = |b: &mut Holefill, t: Time| {
            b.send(t, 0, Bytes::from_static(b"x"), false).unwrap();
            let r = out(b, t);
            assert_eq!((r[0].0.ack, r[0].0.eoh), (2, 4));
            r
        };
        let r = stale(&mut b, 20 * US);
        give(&mut a, 30 * US, &r[0]);
        // The first resend goes at once, well within a round trip of the original.
        assert_eq!(seqs(&out(&mut a, 30 * US)), [2, 3]);
        // Those resends are lost; reports sent before they could arrive keep coming.
        let gap = Holefill::resend_gap(&a.peers[1].rtt);
        for t in [40 * US, MS, gap] {
            let r = stale(&mut b, t);
            give(&mut a, t + 10 * US, &r[0]);
            assert!(out(&mut a, t + 10 * US).is_empty(), "resent again at {t}");
        }
        // A round trip after the resend, the hole still reported is resent once more.
        let t = 30 * US + gap;
        let r = stale(&mut b, t);
        give(&mut a, t, &r[0]);
        assert_eq!(seqs(&out(&mut a, t)), [2, 3]);
        give(&mut a, t, &r[0]);
        assert!(out(&mut a, t).is_empty());
        assert_eq!(a.peer_stats(1).retransmits, 4);
    }

    #[test]
    fn prod_gets_the_hole_and_then_the_tail_resent() {
        let (mut a, mut b) = pair();
        for i in 0..5u8 {
            a.send(0, 1, Bytes::from(vec![i]), false).unwrap();
        }
        let pk = out(&mut a, 0);
        for i in [0, 1, 3] {
            give(&mut b, 50 * US, &pk[i]);
        }
        // B waits for A and knows of a hole: it prods at once.
        b.expect(50 * US, 0, true);
        let due = b.poll_timeout().unwrap();
        assert!(due <= 50 * US);
        b.handle_timeout(50 * US);
        let r = out(&mut b, 50 * US);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Prod, 2, 3));
        // A resends the hole, and only the hole: no ack needed, the data answers.
        give(&mut a, 100 * US, &r[0]);
        let rs = out(&mut a, 100 * US);
        assert_eq!(seqs(&rs), [2]);
        give(&mut b, 150 * US, &rs[0]);
        assert_eq!(ids(&delivered(&mut b)), [0, 1, 2, 3]);
        // The resend asked for an ack; it says nothing is held beyond 4.
        let r = out(&mut b, 150 * US);
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Ack, 4, 4));
        give(&mut a, 200 * US, &r[0]);
        assert!(
            out(&mut a, 200 * US).is_empty(),
            "packet 4 left less than a timeout ago"
        );
        // B's next prod, a prod interval after the last arrival, reveals the lost tail.
        let earliest = 150 * US + b.prod_interval(&b.peers[0]);
        let (next, r) = loop {
            let t = b.poll_timeout().unwrap();
            b.handle_timeout(t);
            let r = out(&mut b, t);
            if !r.is_empty() {
                break (t, r);
            }
        };
        assert!(next >= earliest, "prodded at {next}, before {earliest}");
        assert_eq!((r[0].0.kind, r[0].0.ack, r[0].0.eoh), (Kind::Prod, 4, 4));
        give(&mut a, next + 50 * US, &r[0]);
        let rs = out(&mut a, next + 50 * US);
        assert_eq!(seqs(&rs), [4]);
        give(&mut b, next + 100 * US, &rs[0]);
        assert_eq!(ids(&delivered(&mut b)), [4]);
        assert_eq!(b.peer_stats(0).prods_sent, 2);
        assert_eq!(a.peer_stats(1).prods_received, 2);
        assert_eq!(a.peer_stats(1).acks_sent, 0);
    }

    /// A small deterministic network of holefill nodes with a fixed latency and a
    /// pluggable fate for each packet.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Fate {
        Deliver,
        Drop,
        Dup,
        Delay(Time),
    }

    type FateFn = Box<dyn FnMut(Time, &Header) -> Fate>;

    struct Net {
        nodes: Vec<Holefill>,
        now: Time,
        latency: Time,
        wire: BTreeMap<(Time, u64), (Rank, Header, Bytes)>,
        order: u64,
        fate: FateFn,
        got: Vec<Vec<(Rank, MsgId, Vec<u8>)>>,
        sent: Vec<Vec<(Rank, MsgId)>>,
        log: Vec<(Time, Header)>,
    }

    impl Net {
        fn new(nodes: Vec<Holefill>, fate: FateFn) -> Net {
            let n = nodes.len();
            Net {
                nodes,
                now: 0,
                latency: 50 * US,
                wire: BTreeMap::new(),
                order: 0,
                fate,
                got: vec![Vec::new(); n],
                sent: vec![Vec::new(); n],
                log: Vec::new(),
            }
        }

        fn clean(nodes: Vec<Holefill>) -> Net {
            Net::new(nodes, Box::new(|_, _| Fate::Deliver))
        }

        fn put(&mut self, at: Time, to: Rank, h: Header, b: Bytes) {
            self.order += 1;
            self.wire.insert((at, self.order), (to, h, b));
        }

        /// Does everything due at `now`; whether anything happened.
        fn pump(&mut self) -> bool {
            let now = self.now;
            let mut any = false;
            let mut v = Vec::new();
            for r in 0..self.nodes.len() {
                let n = &mut self.nodes[r];
                if n.poll_timeout().is_some_and(|t| t <= now) {
                    n.handle_timeout(now);
                    any = true;
                }
                n.poll_transmit(now, &mut v, 64);
                for t in v.drain(..) {
                    any = true;
                    let mut h = t.hdr;
                    h.src = r as Rank;
                    h.len = t.payload.len() as u32;
                    self.log.push((now, h));
                    let at = now + self.latency;
                    match (self.fate)(now, &h) {
                        Fate::Deliver => self.put(at, h.dst, h, t.payload),
                        Fate::Drop => {}
                        Fate::Dup => {
                            self.put(at, h.dst, h, t.payload.clone());
                            self.put(at + 1, h.dst, h, t.payload);
                        }
                        Fate::Delay(d) => self.put(at + d, h.dst, h, t.payload),
                    }
                }
                while let Some(e) = self.nodes[r].poll_event() {
                    match e {
                        Event::Message { from, id, data } => self.got[r].push((from, id, data)),
                        Event::Sent { to, id } => self.sent[r].push((to, id)),
                        Event::Announce { .. } => panic!("holefill never announces"),
                        Event::PeerDead { .. } => panic!("deaths are the engine's to report"),
                    }
                }
            }
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > now {
                    break;
                }
                let (to, h, b) = e.remove();
                self.nodes[to as usize].handle(now, &h, &b);
                any = true;
            }
            any
        }

        /// Runs until `done` or virtual time `limit`; whether `done` was reached.
        fn run(&mut self, limit: Time, mut done: impl FnMut(&Net) -> bool) -> bool {
            loop {
                while self.pump() {}
                if done(self) {
                    return true;
                }
                let wire = self.wire.keys().next().map(|k| k.0);
                let timer = self.nodes.iter_mut().filter_map(|n| n.poll_timeout()).min();
                let next = match (wire, timer) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => match a.or(b) {
                        Some(t) => t,
                        None => return false,
                    },
                };
                if next > limit {
                    return false;
                }
                self.now = next.max(self.now + 1);
            }
        }

        fn quiet(&self) -> bool {
            let n = self.nodes.len() as Rank;
            self.wire.is_empty()
                && (0..n).all(|r| (0..n).all(|q| q == r || !self.nodes[r as usize].outstanding(q)))
        }

        fn stats(&self, r: Rank, q: Rank) -> PeerStats {
            self.nodes[r as usize].peer_stats(q)
        }
    }

    /// Its acknowledgements are delayed on purpose, so its timer never goes under 1 ms,
    /// whatever the job's floor (200 us by default, for gbn and rmpp).
    #[test]
    fn its_timeout_stays_above_its_delayed_acks() {
        let mut h = Holefill::new(Common::new(0, 2, 100), HolefillConfig::default()).unwrap();
        for _ in 0..20 {
            h.peers[1].rtt.sample(10 * US);
        }
        assert_eq!(h.peers[1].rtt.rto(), MS);
    }

    /// The retransmission timer doubles only toward a peer heard from by nothing since
    /// it last fired, from the third such timeout in a row, at most 16x; a peer that is
    /// heard from (its answers merely lost or late) keeps the timer where it is.
    #[test]
    fn its_timer_backs_off_only_toward_a_silent_peer() {
        for heard in [false, true] {
            let (mut a, _) = pair();
            a.send(0, 1, Bytes::from_static(b"x"), false).unwrap();
            let _ = out(&mut a, 0);
            let mut resent = Vec::new();
            while resent.len() < 10 {
                let now = a.poll_timeout().expect("a timer while unacknowledged");
                a.handle_timeout(now);
                if out(&mut a, now).iter().any(|p| p.0.kind == Kind::Data) {
                    resent.push(now);
                }
                if heard {
                    // Something from the peer, which acknowledges nothing (and echoes
                    // the time now: a round trip of nothing).
                    let mut h = Header::new(Kind::Ack);
                    (h.src, h.dst, h.aux) = (1, 0, stamp(now));
                    a.handle(now, &h, &[]);
                }
            }
            let gaps: Vec<Time> = resent.windows(2).map(|w| w[1] - w[0]).collect();
            let base = gaps[0];
            if heard {
                // At the floor from the first sample on, and no further.
                assert!(gaps[1..].iter().all(|&g| g == RTO_FLOOR), "{gaps:?}");
            } else {
                assert_eq!(gaps[..2], [base, base], "{gaps:?}");
                assert_eq!(
                    gaps[2..6],
                    [2 * base, 4 * base, 8 * base, 16 * base],
                    "{gaps:?}"
                );
                assert!(gaps[6..].iter().all(|&g| g == 16 * base), "{gaps:?}");
            }
        }
    }

    /// A peer that answers nothing (stopped) is prodded less and less often, as one that
    /// answers that nothing is missing is: not once per round trip while it stays away.
    #[test]
    fn prods_toward_a_silent_peer_back_off() {
        let (_, mut b) = pair();
        b.expect(0, 0, true);
        let mut prods = Vec::new();
        let mut now = 0;
        while now < 2 * SEC {
            let Some(t) = b.poll_timeout() else { break };
            now = t;
            b.handle_timeout(now);
            // Everything b sends is lost: its peer is stopped.
            prods.extend(
                crate::testkit::tx(&mut b, now)
                    .iter()
                    .filter(|t| t.hdr.kind == Kind::Prod)
                    .map(|_| now),
            );
        }
        assert!(prods.len() < 40, "{} prods in 2 s", prods.len());
        let gaps: Vec<Time> = prods.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
        assert_eq!(*gaps.last().unwrap(), b.cfg.prod_max, "{gaps:?}");
    }

    #[test]
    fn prod_when_caught_up_is_acked_and_backs_off() {
        let (a, b) = pair();
        let mut net = Net::clean(vec![a, b]);
        net.nodes[1].expect(0, 0, true);
        net.run(2 * SEC, |_| false);
        let prods: Vec<Time> = net
            .log
            .iter()
            .filter(|(_, h)| h.kind == Kind::Prod)
            .map(|(t, _)| *t)
            .collect();
        let (sa, sb) = (net.stats(0, 1), net.stats(1, 0));
        assert_eq!(sb.prods_sent as usize, prods.len());
        assert_eq!(sa.acks_sent, sb.prods_sent, "each prod answered by an ack");
        assert_eq!(sa.data_sent, 0);
        // Exponential back-off: each gap at least the previous, doubling up to the cap.
        // The first prod waits the initial timeout (no round trip measured yet); its
        // answer gives a sample, and from there the intervals double.
        assert_eq!(prods[0], net.nodes[1].c.rto_initial);
        let gaps: Vec<Time> = prods.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
        assert!(gaps[1] >= 2 * gaps[0] - 2 * US, "{gaps:?}");
        assert_eq!(*gaps.last().unwrap(), net.nodes[1].cfg.prod_max);
        assert!(prods.len() < 40, "{} prods in 2 s", prods.len());
        // New data resets the back-off: the next silence is prodded after one interval.
        net.nodes[0]
            .send(net.now, 1, Bytes::from_static(b"hi"), false)
            .unwrap();
        let t0 = net.now;
        assert!(net.run(t0 + SEC, |n| !n.got[1].is_empty()));
        assert_eq!(net.nodes[1].peers[0].prod_backoff, 0);
    }

    #[test]
    fn acks_only_when_asked_and_after_n_over_2p_packets() {
        // n = 64, p = 4: a requested ack waits for 8 new packets.
        let cfg = HolefillConfig {
            buffers: 64,
            window: 32,
            ..HolefillConfig::default()
        };
        let mut b = node(1, 4, 1000, cfg);
        assert_eq!(b.ack_every(), 8);
        let mut t = 0;
        let mut feed = |b: &mut Holefill, seq: u32, fl: u8| {
            t += US;
            give(b, t, &data(0, 1, seq, fl));
            out(b, t)
        };
        // Unasked, nothing is acknowledged however much arrives.
        for s in 0..20 {
            assert!(feed(&mut b, s, 0).is_empty());
        }
        // Asked on every packet: one ack per 8 packets since the last ack.
        let mut acks = Vec::new();
        for s in 20..45 {
            for p in feed(&mut b, s, flags::ACK_REQ) {
                acks.push((s, p.0.kind, p.0.ack));
            }
        }
        // The first request finds 21 packets in since the last ack: answered at once.
        assert_eq!(
            acks,
            [
                (20, Kind::Ack, 21),
                (28, Kind::Ack, 29),
                (36, Kind::Ack, 37),
                (44, Kind::Ack, 45)
            ]
        );
        // A request is remembered: the 8th packet after the last ack triggers it.
        assert!(feed(&mut b, 45, flags::ACK_REQ).is_empty());
        for s in 46..52 {
            assert!(feed(&mut b, s, 0).is_empty());
        }
        assert_eq!(feed(&mut b, 52, 0)[0].0.ack, 53);
        // Last of phase, retransmissions and duplicates are answered at once.
        let r = feed(&mut b, 53, flags::ACK_REQ | flags::LAST_OF_PHASE);
        assert_eq!((r[0].0.kind, r[0].0.ack), (Kind::Ack, 54));
        let r = feed(&mut b, 54, flags::ACK_REQ | flags::RETRANSMIT);
        assert_eq!(r[0].0.ack, 55);
        let r = feed(&mut b, 40, flags::ACK_REQ);
        assert_eq!(r[0].0.ack, 55);
        // Without a request, a duplicate is only counted.
        assert!(feed(&mut b, 41, 0).is_empty());
        let s = b.peer_stats(0);
        assert_eq!((s.acks_sent, s.drop_duplicate, s.data_received), (8, 2, 57));
        assert_eq!(s.messages_delivered, 55);
    }

    #[test]
    fn asks_for_acks_when_send_buffers_run_low() {
        let cfg = HolefillConfig {
            buffers: 32,
            window: 16,
            ..HolefillConfig::default()
        };
        let mut a = paper_node(0, 2, 1000, cfg.clone());
        let b = paper_node(1, 2, 1000, cfg);
        assert_eq!((a.config().window, a.ack_every()), (16, 8));
        for i in 0..40u8 {
            a.send(0, 1, Bytes::from(vec![i]), false).unwrap();
        }
        let pk = out(&mut a, 0);
        assert_eq!(pk.len(), 16, "the window holds 16");
        let asks: Vec<bool> = pk.iter().map(|p| p.0.has(flags::ACK_REQ)).collect();
        // With 16 free, the whole window goes in one round trip: ask from halfway on.
        assert!(!asks[0] && asks[15], "{asks:?}");
        assert_eq!(asks.iter().filter(|&&x| x).count(), 9);
        let mut net = Net::clean(vec![a, b]);
        net.wire.clear();
        for p in pk {
            net.put(50 * US, 1, p.0, p.1);
        }
        assert!(net.run(SEC, |n| n.got[1].len() == 40 && n.quiet()));
        let (sa, sb) = (net.stats(0, 1), net.stats(1, 0));
        assert_eq!(sa.retransmits, 0);
        assert!(sb.acks_sent <= 6, "{} acks for 40 packets", sb.acks_sent);
        assert_eq!(sa.acked, 40);
    }

    #[test]
    fn end_phase_asks_for_a_prompt_ack() {
        let (mut a, mut b) = pair();
        a.send(0, 1, Bytes::from(vec![7; 2500]), true).unwrap();
        a.end_phase(1);
        let pk = out(&mut a, 0);
        assert_eq!(pk.len(), 3);
        let fl = |p: &Packet| p.0.flags & (flags::ACK_REQ | flags::LAST_OF_PHASE);
        assert_eq!(
            pk.iter().map(fl).collect::<Vec<_>>(),
            [0, 0, flags::ACK_REQ | flags::LAST_OF_PHASE]
        );
        for p in &pk {
            give(&mut b, 10 * US, p);
        }
        assert_eq!(delivered(&mut b)[0].2, vec![7; 2500]);
        let r = out(&mut b, 10 * US);
        assert_eq!((r[0].0.kind, r[0].0.ack), (Kind::Ack, 3));
        give(&mut a, 20 * US, &r[0]);
        assert!(!a.outstanding(1));
        assert!(matches!(a.poll_event(), Some(Event::Sent { to: 1, id: 0 })));
        // end_phase after the last packet left: a control packet asks instead.
        a.send(30 * US, 1, Bytes::from_static(b"late"), true)
            .unwrap();
        let pk = out(&mut a, 30 * US);
        assert!(!pk[0].0.has(flags::ACK_REQ));
        a.end_phase(1);
        let probe = out(&mut a, 30 * US);
        assert_eq!(probe.len(), 1);
        assert_eq!(probe[0].0.kind, Kind::Ack);
        assert!(probe[0].0.has(flags::ACK_REQ | flags::LAST_OF_PHASE));
        give(&mut b, 40 * US, &pk[0]);
        give(&mut b, 40 * US, &probe[0]);
        let r = out(&mut b, 40 * US);
        assert_eq!((r.len(), r[0].0.kind, r[0].0.ack), (1, Kind::Ack, 4));
        give(&mut a, 50 * US, &r[0]);
        assert!(!a.outstanding(1));
        assert!(matches!(a.poll_event(), Some(Event::Sent { to: 1, id: 1 })));
        // end_phase with nothing unacknowledged does nothing.
        a.end_phase(1);
        assert!(out(&mut a, 60 * US).is_empty());
    }

    fn three(colours: bool) -> (Holefill, Holefill, Holefill) {
        let cfg = HolefillConfig::default();
        let mut v: Vec<Holefill> = (0..3).map(|r| node(r, 3, 1000, cfg.clone())).collect();
        if colours {
            for n in &mut v {
                n.set_colour(4);
            }
        }
        let c = v.pop().unwrap();
        let b = v.pop().unwrap();
        (v.pop().unwrap(), b, c)
    }

    #[test]
    fn a_later_colour_from_anyone_acknowledges_implicitly() {
        let (mut a, mut b, mut c) = three(true);
        a.send(0, 1, Bytes::from(vec![1; 2500]), true).unwrap();
        let pk = out(&mut a, 0);
        assert!(pk.iter().all(|p| p.0.colour == 4));
        for p in &pk {
            give(&mut b, 10 * US, p);
        }
        assert!(out(&mut b, 10 * US).is_empty(), "nobody asked for an ack");
        assert!(a.outstanding(1));
        // Same-colour traffic from C says nothing about B.
        c.send(20 * US, 0, Bytes::from_static(b"c4"), false)
            .unwrap();
        let r = out(&mut c, 20 * US);
        give(&mut a, 30 * US, &r[0]);
        assert!(a.outstanding(1));
        // C has passed the next barrier, so everyone had all of colour 4.
        c.set_colour(5);
        c.send(40 * US, 0, Bytes::from_static(b"c5"), false)
            .unwrap();
        let r = out(&mut c, 40 * US);
        assert_eq!(r[0].0.colour, 5);
        give(&mut a, 50 * US, &r[0]);
        assert!(!a.outstanding(1));
        let s = a.peer_stats(1);
        assert_eq!((s.implicit_acks, s.acked), (3, 0));
        let sent: Vec<_> = std::iter::from_fn(|| a.poll_event())
            .filter(|e| matches!(e, Event::Sent { .. }))
            .collect();
        assert!(matches!(sent[..], [Event::Sent { to: 1, id: 0 }]));
        // Packets sent under the new colour wait for a later one still.
        a.set_colour(5);
        a.send(60 * US, 1, Bytes::from_static(b"a5"), false)
            .unwrap();
        out(&mut a, 60 * US);
        give(&mut a, 70 * US, &r[0]);
        assert!(a.outstanding(1));
    }

    #[test]
    fn held_packets_need_a_colour_ahead_of_the_hold() {
        let (mut a, mut b, mut c) = three(true);
        // A barrier message: sent before passing barrier 5, so it carries colour 4, but
        // only a process past barrier 6 proves everyone has it.
        a.hold_colour(5);
        a.send(0, 1, Bytes::from_static(b"row"), false).unwrap();
        let pk = out(&mut a, 0);
        assert_eq!(pk[0].0.colour, 4, "the carried colour is the honest one");
        give(&mut b, 10 * US, &pk[0]);
        c.set_colour(5);
        c.send(20 * US, 0, Bytes::from_static(b"c5"), false)
            .unwrap();
        let r = out(&mut c, 20 * US);
        give(&mut a, 30 * US, &r[0]);
        assert!(
            a.outstanding(1),
            "colour 5 does not free a packet held at 5"
        );
        c.set_colour(6);
        c.send(40 * US, 0, Bytes::from_static(b"c6"), false)
            .unwrap();
        let r = out(&mut c, 40 * US);
        give(&mut a, 50 * US, &r[0]);
        assert!(!a.outstanding(1));
        assert_eq!(a.peer_stats(1).implicit_acks, 1);
    }

    #[test]
    fn no_implicit_ack_without_colours() {
        let (mut a, mut b, _) = three(false);
        a.send(0, 1, Bytes::from_static(b"x"), false).unwrap();
        let pk = out(&mut a, 0);
        give(&mut b, 10 * US, &pk[0]);
        // A peer claims a later colour, but this endpoint never set one.
        let mut h = Header::new(Kind::Data);
        (h.src, h.dst, h.colour, h.total, h.len) = (2, 0, 9, 1, 1);
        h.flags = flags::FIRST | flags::LAST;
        a.handle(20 * US, &h, b"z");
        assert!(a.outstanding(1));
        assert_eq!(a.peer_stats(1).implicit_acks, 0);
    }

    #[test]
    fn timer_recovers_a_lost_tail_without_reverse_traffic() {
        let (a, b) = pair();
        // The first transmission of the last packet is lost; nobody waits or replies.
        let fate: FateFn = Box::new(|_, h| {
            if h.kind == Kind::Data && h.seq == 2 && !h.has(flags::RETRANSMIT) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        let mut net = Net::new(vec![a, b], fate);
        for i in 0..3u8 {
            net.nodes[0].send(0, 1, Bytes::from(vec![i]), true).unwrap();
        }
        assert!(net.run(SEC, |n| n.got[1].len() == 3 && n.quiet()));
        assert!(net.now < 100 * MS, "recovered at {} ns", net.now);
        let s = net.stats(0, 1);
        assert!(s.timeouts >= 1 && s.retransmits >= 1, "{s:?}");
        assert_eq!(net.sent[0].len(), 3, "every notify message reported sent");
        assert_eq!(
            net.got[1].iter().map(|m| m.2[0]).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn lost_acks_and_lost_prods_still_terminate() {
        // Every control packet's first two attempts are lost, and a burst of data too.
        let mut ctl = 0u32;
        let fate: FateFn = Box::new(move |_, h| match h.kind {
            Kind::Data if (5..9).contains(&h.seq) && !h.has(flags::RETRANSMIT) => Fate::Drop,
            Kind::Ack | Kind::Prod => {
                ctl += 1;
                if !ctl.is_multiple_of(3) {
                    Fate::Drop
                } else {
                    Fate::Deliver
                }
            }
            _ => Fate::Deliver,
        });
        let (a, b) = pair();
        let mut net = Net::new(vec![a, b], fate);
        for i in 0..12u8 {
            net.nodes[0]
                .send(0, 1, Bytes::from(vec![i; 10]), false)
                .unwrap();
        }
        net.nodes[0].end_phase(1);
        net.nodes[1].expect(0, 0, true);
        assert!(net.run(10 * SEC, |n| n.got[1].len() == 12 && n.quiet()));
        assert_eq!(ids(&net.got[1]), (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn zero_byte_and_multi_fragment_messages() {
        let cfg = HolefillConfig::default();
        let a = node(0, 2, 100, cfg.clone());
        let b = node(1, 2, 100, cfg);
        let mut k = 0u32;
        let fate: FateFn = Box::new(move |_, h| {
            k += 1;
            if h.kind == Kind::Data && k.is_multiple_of(4) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        let mut net = Net::new(vec![a, b], fate);
        let sizes = [0usize, 1, 99, 100, 101, 0, 1000, 12345, 0, 200];
        let msg = |i: usize, n: usize| (0..n).map(|j| (j * 31 + i) as u8).collect::<Vec<_>>();
        for (i, &n) in sizes.iter().enumerate() {
            net.nodes[0]
                .send(0, 1, Bytes::from(msg(i, n)), false)
                .unwrap();
        }
        net.nodes[1].expect(0, 0, true);
        assert!(net.run(10 * SEC, |n| n.got[1].len() == sizes.len() && n.quiet()));
        for (i, &n) in sizes.iter().enumerate() {
            assert_eq!(net.got[1][i].2, msg(i, n), "message {i}");
        }
        let s = net.stats(0, 1);
        assert_eq!(
            s.data_sent - s.retransmits,
            1 + 1 + 1 + 1 + 2 + 1 + 10 + 124 + 1 + 2
        );
    }

    #[test]
    fn sequence_numbers_wrap() {
        let cfg = HolefillConfig {
            seq_bits: 8,
            window: 127,
            ..HolefillConfig::default()
        };
        let a = node(0, 2, 64, cfg.clone());
        let b = node(1, 2, 64, cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let fate: FateFn = Box::new(move |_, _| {
            if rng.random_bool(0.05) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        let mut net = Net::new(vec![a, b], fate);
        for i in 0..600u32 {
            let n = (i as usize * 7) % 150;
            net.nodes[0]
                .send(0, 1, Bytes::from(vec![i as u8; n]), false)
                .unwrap();
            net.nodes[1]
                .send(0, 0, Bytes::from(vec![!i as u8; n]), false)
                .unwrap();
        }
        assert!(net.run(60 * SEC, |n| n.got[0].len() == 600
            && n.got[1].len() == 600
            && n.quiet()));
        for i in 0..600u32 {
            let n = (i as usize * 7) % 150;
            assert_eq!(net.got[1][i as usize].2, vec![i as u8; n]);
            assert_eq!(net.got[0][i as usize].2, vec![!i as u8; n]);
        }
        assert!(net.stats(0, 1).data_sent > 1000, "wrapped several times");
    }

    #[test]
    fn symmetric_traffic_needs_almost_no_explicit_acks() {
        // The paper's claim, for its protocol: the congestion window's first round trips
        // ask for a few acks more.
        let cfg = HolefillConfig::default();
        let (a, b) = (
            paper_node(0, 2, 1000, cfg.clone()),
            paper_node(1, 2, 1000, cfg),
        );
        let mut net = Net::clean(vec![a, b]);
        for round in 0..50u32 {
            let t = round as Time * 200 * US;
            assert!(net.run(t, |_| false) || net.now <= t);
            net.now = net.now.max(t);
            for i in 0..4u8 {
                net.nodes[0]
                    .send(t, 1, Bytes::from(vec![i; 3000]), false)
                    .unwrap();
                net.nodes[1]
                    .send(t, 0, Bytes::from(vec![i; 3000]), false)
                    .unwrap();
            }
        }
        assert!(net.run(10 * SEC, |n| n.got[0].len() == 200
            && n.got[1].len() == 200
            && n.quiet()));
        let (sa, sb) = (net.stats(0, 1), net.stats(1, 0));
        assert_eq!(sa.data_sent, 600 + sa.retransmits);
        // Only the final tails need a stand-alone ack.
        assert!(sa.control_sent + sb.control_sent <= 4, "{sa:?} {sb:?}");
        assert!(sa.piggybacked_acks > 40 && sb.piggybacked_acks > 40);
    }

    #[test]
    fn bulk_one_way_traffic_needs_few_control_packets() {
        let (a, b) = pair();
        let mut net = Net::clean(vec![a, b]);
        net.nodes[0]
            .send(0, 1, Bytes::from(vec![3; 4 << 20]), false)
            .unwrap();
        net.nodes[1].expect(0, 0, true);
        assert!(net.run(10 * SEC, |n| n.got[1].len() == 1 && n.quiet()));
        let (sa, sb) = (net.stats(0, 1), net.stats(1, 0));
        // The unacknowledged tail costs one timer resend, nothing else is repeated.
        assert!(sa.retransmits <= 1, "{sa:?}");
        assert!(sa.data_sent > 4000);
        // One ack per n/(2p) = 128 packets at most, where gbn would send one per packet.
        assert!(sb.control_sent * 64 < sa.data_sent, "{sb:?}");
    }

    #[test]
    fn low_receive_buffers_take_only_the_next_packet_but_every_ack() {
        // n = 8: 4 receive buffers shared by three senders, window 4.
        let cfg = HolefillConfig {
            buffers: 8,
            window: 4,
            ..HolefillConfig::default()
        };
        let mut b = node(1, 4, 1000, cfg);
        assert_eq!(b.config().window, 4);
        b.send(0, 2, Bytes::from_static(b"to c"), false).unwrap();
        assert_eq!(out(&mut b, 0).len(), 1);
        for s in 1..4 {
            give(&mut b, US, &data(0, 1, s, 0));
        }
        give(&mut b, US, &data(3, 1, 2, 0));
        assert_eq!(b.free_buffers().1, 0);
        // Out of order from C: no buffer. Its ack still frees what B sent to C.
        let mut p = data(2, 1, 1, 0);
        p.0.ack = 1;
        p.0.eoh = 1;
        give(&mut b, 2 * US, &p);
        assert_eq!(b.peer_stats(2).drop_no_buffer, 1);
        assert!(!b.outstanding(2));
        // The next expected packet needs no buffer.
        give(&mut b, 3 * US, &data(2, 1, 0, 0));
        assert_eq!(ids(&delivered(&mut b)), [0]);
        // Filling A's gap frees its three buffers.
        give(&mut b, 4 * US, &data(0, 1, 0, 0));
        assert_eq!(delivered(&mut b).len(), 4);
        assert_eq!(b.free_buffers().1, 3);
    }

    #[test]
    fn nonsense_headers_are_ignored_and_counted() {
        let cfg = HolefillConfig::default();
        let mut c = Common::new(1, 3, 1000);
        c.max_message = 1 << 20;
        let mut b = Holefill::new(c, cfg.clone()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let kinds = [
            Kind::Data,
            Kind::Ack,
            Kind::Prod,
            Kind::Nack,
            Kind::Rts,
            Kind::Fin,
        ];
        let near = [0u32, 1, 2, 255, 256, u32::MAX, u32::MAX / 2, 1 << 31];
        for i in 0..20_000u64 {
            let mut h = Header::new(kinds[rng.random_range(0..kinds.len())]);
            h.src = 2;
            h.dst = 1;
            let pick = |rng: &mut ChaCha8Rng| {
                if rng.random_bool(0.5) {
                    near[rng.random_range(0..near.len())]
                } else {
                    rng.random()
                }
            };
            h.seq = pick(&mut rng);
            h.ack = pick(&mut rng);
            h.eoh = pick(&mut rng);
            h.msg = pick(&mut rng);
            h.flags = rng.random::<u8>() & flags::KNOWN;
            h.colour = rng.random();
            h.aux = rng.random();
            let len = rng.random_range(0..50usize);
            h.total = rng.random_range(len as u64..=(1 << 20));
            h.offset = rng.random_range(0..=h.total - len as u64);
            h.len = len as u32;
            b.handle(i * US, &h, &vec![0xAB; len]);
            let mut v = Vec::new();
            b.poll_transmit(i * US, &mut v, 64);
            if b.poll_timeout().is_some_and(|t| t <= i * US) {
                b.handle_timeout(i * US);
            }
        }
        assert!(b.peer_stats(2).bogus > 1000);
        assert!(b.peer_stats(2).held_bytes <= b.c.peer_budget);
        assert!(b.misbehaving().is_none(), "{:?}", b.misbehaving());
        // The endpoint still works with its other peer.
        let a = node(0, 3, 1000, cfg);
        let mut net = Net::clean(vec![a, b]);
        net.nodes[0]
            .send(0, 1, Bytes::from_static(b"still fine"), false)
            .unwrap();
        net.now = 20_000 * US;
        assert!(net.run(30 * SEC, |n| n.got[1].len() == 1 && n.quiet()));
    }

    #[test]
    fn acks_of_nothing_sent_and_inverted_holes_are_ignored() {
        let (mut a, mut b) = pair();
        let ack = |ack: u32, eoh: u32| {
            let mut h = Header::new(Kind::Ack);
            (h.src, h.dst, h.ack, h.eoh) = (1, 0, ack, eoh);
            h
        };
        a.handle(0, &ack(5, 5), &[]);
        assert_eq!(a.peer_stats(1).bogus, 1, "ack for nothing sent");
        for i in 0..4u8 {
            a.send(0, 1, Bytes::from(vec![i]), false).unwrap();
        }
        let pk = out(&mut a, 0);
        for (k, e) in [(2, 1), (1, 4), (1, 9), (1 << 31, 2)] {
            a.handle(US, &ack(k, e), &[]);
        }
        assert_eq!(a.peer_stats(1).bogus, 5);
        assert!(out(&mut a, US).is_empty(), "nothing resent on nonsense");
        assert_eq!(a.peer_stats(1).acked, 0);
        // A valid report still works afterwards.
        give(&mut b, 2 * US, &pk[0]);
        give(&mut b, 2 * US, &pk[3]);
        b.send(2 * US, 0, Bytes::new(), false).unwrap();
        let r = out(&mut b, 2 * US);
        give(&mut a, 3 * US, &r[0]);
        assert_eq!(seqs(&out(&mut a, 3 * US)), [1, 2]);
        // An old report (ack behind what is known) is stale, not bogus.
        a.handle(4 * US, &ack(0, 3), &[]);
        assert_eq!(a.peer_stats(1).bogus, 5);
        assert!(out(&mut a, 4 * US).is_empty());
    }

    #[test]
    fn the_byte_cap_cuts_the_window_of_large_packets_only() {
        // 64 KiB packets: 4 MiB in flight is 64 of them, and the receiver acknowledges
        // every 32 (half the cut window). Small packets keep the configured 256.
        for (payload, window, ack_every) in [(65_536, 64, 32), (1_000, 256, 128)] {
            let mut a = paper_node(0, 2, payload, HolefillConfig::default());
            a.send(0, 1, Bytes::from(vec![7u8; 40 << 20]), false)
                .unwrap();
            let mut out = Vec::new();
            a.poll_transmit(0, &mut out, usize::MAX);
            assert_eq!(out.len(), window, "payload {payload}");
            assert!(out.iter().all(|t| t.payload.len() == payload));
            let b = node(1, 2, payload, HolefillConfig::default());
            assert_eq!(b.peers[0].ack_every, ack_every, "payload {payload}");
        }
        // The cap never leaves fewer than MIN_BYTE_WINDOW packets.
        let cfg = HolefillConfig {
            inflight_bytes: 1,
            ..HolefillConfig::default()
        };
        let mut a = paper_node(0, 2, 65_536, cfg);
        a.send(0, 1, Bytes::from(vec![7u8; 4 << 20]), false)
            .unwrap();
        let mut out = Vec::new();
        a.poll_transmit(0, &mut out, usize::MAX);
        assert_eq!(out.len(), MIN_BYTE_WINDOW as usize);
    }

    #[test]
    fn a_full_receive_window_drains_without_reverse_traffic() {
        let cfg = HolefillConfig {
            buffers: 8,
            window: 4,
            ..HolefillConfig::default()
        };
        let (a, b) = (node(0, 2, 100, cfg.clone()), node(1, 2, 100, cfg));
        // The first packet's first transmission is lost: the receiver then holds a full
        // window behind a hole, and the sender's window is full too.
        let fate: FateFn = Box::new(|_, h| {
            if h.kind == Kind::Data && h.seq == 0 && !h.has(flags::RETRANSMIT) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        let mut net = Net::new(vec![a, b], fate);
        for i in 0..20u8 {
            net.nodes[0]
                .send(0, 1, Bytes::from(vec![i; 150]), false)
                .unwrap();
        }
        assert!(net.run(SEC, |n| n.got[1].len() == 20 && n.quiet()));
        assert_eq!(ids(&net.got[1]), (0..20).collect::<Vec<_>>());
        let s = net.stats(0, 1);
        assert_eq!(s.timeouts, 0, "the requested ack revealed the hole: {s:?}");
    }

    #[test]
    fn close_peer_forgets_and_returns_buffers() {
        let (mut a, _) = pair();
        let free = a.free_buffers();
        for _ in 0..5 {
            a.send(0, 1, Bytes::from(vec![0; 2500]), true).unwrap();
        }
        out(&mut a, 0);
        assert!(a.outstanding(1));
        a.close_peer(dead(1));
        assert!(!a.outstanding(1));
        assert_eq!(a.free_buffers(), free);
        assert_eq!(
            a.send(0, 1, Bytes::new(), false),
            Err(ProtoError::PeerDead(dead(1)))
        );
        assert!(out(&mut a, 0).is_empty());
        a.handle(SEC, &data(1, 0, 0, flags::ACK_REQ).0, b"x");
        assert!(a.poll_event().is_none());
        assert_eq!(a.poll_timeout(), None);
    }

    /// One random run: messages both ways (or one way) through loss, duplication and
    /// reordering; every message arrives exactly once, intact, in order, in bounded time.
    #[derive(Clone, Copy, Debug)]
    struct Faults {
        loss: f64,
        dup: f64,
        reorder: f64,
    }

    fn faulty_run(
        seed: u64,
        f: Faults,
        sizes: &[usize],
        both_ways: bool,
        wait: bool,
        seq_bits: u32,
    ) {
        let cfg = HolefillConfig {
            seq_bits,
            window: 64,
            buffers: 128,
            ..HolefillConfig::default()
        };
        let nodes = vec![node(0, 2, 256, cfg.clone()), node(1, 2, 256, cfg)];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let fate: FateFn = Box::new(move |_, _| {
            let x: f64 = rng.random();
            if x < f.loss {
                Fate::Drop
            } else if x < f.loss + f.dup {
                Fate::Dup
            } else if x < f.loss + f.dup + f.reorder {
                Fate::Delay(rng.random_range(1..200) * US)
            } else {
                Fate::Deliver
            }
        });
        let mut net = Net::new(nodes, fate);
        let msg = |dir: usize, i: usize, n: usize| -> Vec<u8> {
            (0..n).map(|j| (j * 13 + i * 7 + dir) as u8).collect()
        };
        for (i, &n) in sizes.iter().enumerate() {
            net.nodes[0]
                .send(0, 1, Bytes::from(msg(0, i, n)), i % 3 == 0)
                .unwrap();
            if both_ways {
                net.nodes[1]
                    .send(0, 0, Bytes::from(msg(1, i, n)), false)
                    .unwrap();
            }
        }
        if wait {
            net.nodes[1].expect(0, 0, true);
        }
        let want = if both_ways { sizes.len() } else { 0 };
        let ok = net.run(120 * SEC, |n| {
            n.got[1].len() >= sizes.len() && n.got[0].len() >= want && n.quiet()
        });
        assert!(
            ok,
            "stuck at {} ns: got {}/{} and {}/{}",
            net.now,
            net.got[1].len(),
            sizes.len(),
            net.got[0].len(),
            want
        );
        assert_eq!(net.got[1].len(), sizes.len(), "exactly once");
        assert_eq!(net.got[0].len(), want, "exactly once");
        for (i, &n) in sizes.iter().enumerate() {
            assert_eq!(net.got[1][i].1 as usize, i);
            assert!(net.got[1][i].2 == msg(0, i, n), "message {i} damaged");
            if both_ways {
                assert!(net.got[0][i].2 == msg(1, i, n), "reply {i} damaged");
            }
        }
        let notified = sizes.len().div_ceil(3);
        assert_eq!(net.sent[0].len(), notified);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn random_faults_deliver_exactly_once_in_order(
            seed in any::<u64>(),
            loss in 0.0..0.3f64,
            dup in 0.0..0.2f64,
            reorder in 0.0..0.3f64,
            sizes in prop::collection::vec(
                prop_oneof![Just(0usize), 1..300usize, 300..5000usize], 1..40),
            both_ways in any::<bool>(),
            wait in any::<bool>(),
            wide in any::<bool>(),
        ) {
            faulty_run(seed, Faults { loss, dup, reorder }, &sizes, both_ways, wait, if wide { 32 } else { 8 });
        }
    }
}
