//! gbn: the ParaStation2 reliable transmission protocol (the ParaStation2 paper, section 3).
//!
//! Every data packet is acknowledged by an explicit ACK or rejected by a NACK; each
//! (sender, receiver) pair numbers its packets with `seq_bits`-bit sequence numbers; the
//! sender keeps at most `window` packets unacknowledged; on a NACK or a timeout it goes
//! back N: the first unacknowledged packet and every one after it are sent again.
//!
//! # Send buffers (the paper's Figure 3)
//!
//! Each peer has `window` send slots, one per sequence number in flight, in one of the
//! states of [`SlotState`]:
//!
//! ```text
//!   IDLE --store packet (host)--> READY --send--> INTRANSIT --ACK--> IDLE
//!                                                   |    ^
//!                                   NACK / timeout  v    | send
//!                                                 RETRANSMIT
//! ```
//!
//! "Store packet" is the host cutting the next fragment of a queued message
//! ([`OutQueue`], a `Bytes` slice, no copy) into an idle slot. Only non-idle slots are
//! stored, oldest first, so memory follows what is in flight, not the configured window.
//! Slots are transmitted in sequence order, so after a go-back the RETRANSMIT slots (all
//! of them older) leave before any READY one.
//!
//! # Receive rule (the paper's Table 1)
//!
//! | packet | check        | meaning            | action                                  |
//! |--------|--------------|--------------------|-----------------------------------------|
//! | DATA   | `<` expected | lost ACK           | resend the ACK                          |
//! | DATA   | `=` expected | ok                 | ACK, or NACK and drop if no spare slot  |
//! | DATA   | `>` expected | lost data          | drop and NACK                           |
//! | ACK    | `<` expected | duplicate ACK      | ignore                                  |
//! | ACK    | `=` expected | ok                 | release the send slot                   |
//! | ACK    | `>` expected | previous ACK lost  | ignore (the timeout resends)            |
//! | NACK   | -            |                    | go back N if that slot is INTRANSIT     |
//! | CRC    | -            | corrupt            | dropped by the engine before us         |
//!
//! The paper itself calls the ACK-ahead rule suboptimal: one lost ACK costs a timeout and
//! a whole window of retransmissions. [`GbnConfig::cumulative_acks`] lets an ACK release
//! every older slot as well, which is sound because the receiver accepts strictly in
//! order. [`GbnConfig::default`] is the paper's protocol, the rule included; jobs run
//! [`GbnConfig::recommended`]: cumulative ACKs, and timers that back off only toward a
//! silent peer (see its fields; the floor of the timeout is the job's,
//! [`Common::rto_min`]). Under heavy loss the
//! paper's rule is close to a hang: with a quarter of the datagrams lost, most windows
//! lose the ACK of their oldest packet, each such loss waits out a timeout, and the
//! timeouts back off (2,000 16 KiB messages among 4 processes over UDP with 20 % loss
//! took minutes instead of a second).
//!
//! # Receive slots
//!
//! ParaStation2's NI stores each accepted packet in a slot of one receive ring, shared by
//! all senders, until the host copies it out; a packet that would take the ring's last
//! free slot is NACKed and dropped, so one slot is always free. Here a receive slot is
//! taken when a DATA packet is accepted and all slots are given back when the host polls,
//! i.e. on [`Protocol::poll_event`]. So at most `rx_slots - 1` packets are accepted between
//! two polls, from all peers together, and a receiver that stops polling pushes back on
//! its senders with NACKs. The payload itself goes straight into the reassembly buffer on
//! acceptance: the ring is a count, not a second copy, but the ACK/NACK decisions are
//! exactly those of a ring of `rx_slots` buffers. It cannot deadlock: slots are released
//! per packet (not per message, so a message longer than the ring still gets through),
//! a NACKed packet is resent at once and again on every timeout, and the next poll frees
//! the ring for it.
//!
//! # Beyond the paper: telling laps of a small sequence space apart
//!
//! Myrinet does not reorder; our links may, and the sequence space may be tiny (3 bits).
//! A delayed packet from an earlier lap of the space would then pass for a current one.
//! Every DATA carries its position (message id and byte offset); ACK and NACK echo it and
//! the attempt number (`aux`). The receiver classifies by position, which never wraps in
//! practice, and uses the sequence number as the paper does; the sender releases a slot
//! only if the echo matches what the slot holds, and takes a NACK only for the attempt
//! currently in transit (a NACK for an earlier attempt concerns a transmission already
//! superseded, so acting on it would start a second, useless go-back).
//!
//! Header use: DATA: `seq`, `msg`, `offset`, `total`, flags FIRST/LAST/RETRANSMIT, `aux` =
//! attempt (1 = first transmission). ACK/NACK: `seq`, `msg`, `offset`, `aux` echoed from
//! the DATA, `ack` = receiver's next expected sequence (informational).

use std::cmp::Ordering;
use std::collections::VecDeque;

use bytes::Bytes;

use crate::common::{
    Added, OutQueue, ReadySet, Reassembler, Rtt, SeqSpace, Timers, announced_too_large,
};
use crate::congestion::Window;
use crate::wire::{Header, Kind, flags};
use crate::{
    Common, Event, MsgId, PeerDead, PeerMisbehaved, PeerStats, ProtoError, Protocol, Rank, Time,
    Transmit,
};

/// Settings of [`Gbn`]. The defaults are the paper's: 8-bit sequence numbers, a window of
/// 8 packets, explicit ACK for every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GbnConfig {
    /// Most unacknowledged data packets per peer (the send ring has this many slots).
    pub window: u32,
    /// Width of the per-pair sequence numbers, 1..=32; `window < 2^seq_bits`.
    pub seq_bits: u32,
    /// Receive ring size, shared by all peers; at least 2 (one is always kept free). The
    /// paper does not give its ring size; 64 lets about eight full windows arrive between
    /// two host polls.
    pub rx_slots: u32,
    /// Improvement over the paper: an ACK also acknowledges every older packet, so a lost
    /// ACK no longer costs a timeout. Off in [`GbnConfig::default`] (the paper's
    /// protocol), on in [`GbnConfig::recommended`] (what jobs run).
    pub cumulative_acks: bool,
    /// Timeouts in a row toward a silent peer before the timeout doubles (it never does
    /// while the peer is heard from). 0 in [`GbnConfig::default`] (doubling at every
    /// timeout, as RFC 6298 does); 2 in [`GbnConfig::recommended`]: under random loss two
    /// losses in a row are common, and a stopped peer still makes the timeout double from
    /// the third on.
    pub backoff_after: u32,
    /// Most doublings of the timeout. 20 in [`GbnConfig::default`]; 4 in
    /// [`GbnConfig::recommended`]: a run of random losses then costs at most 16 base
    /// timeouts per further loss instead of climbing toward a second (a silent peer is
    /// the engine's liveness to judge, not this timer's), while a stopped peer still gets
    /// at most one window per 16 base timeouts.
    pub max_backoff: u32,
}

impl Default for GbnConfig {
    fn default() -> GbnConfig {
        GbnConfig {
            window: 8,
            seq_bits: 8,
            rx_slots: 64,
            cumulative_acks: false,
            backoff_after: 0,
            max_backoff: 20,
        }
    }
}

/// An invalid [`GbnConfig`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GbnConfigError {
    #[error("gbn window must be at least 1 packet")]
    ZeroWindow,
    #[error("gbn sequence width of {0} bits is not in 1..=32")]
    SeqBits(u32),
    #[error(
        "gbn window {window} must be smaller than the sequence space 2^{seq_bits} = {space}: \
         go-back-N needs more sequence numbers than packets in flight"
    )]
    WindowTooLarge {
        window: u32,
        seq_bits: u32,
        space: u64,
    },
    #[error("gbn needs at least 2 receive slots (one is always kept free), not {0}")]
    RxSlots(u32),
}

impl GbnConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), GbnConfigError> {
        if !(1..=32).contains(&self.seq_bits) {
            return Err(GbnConfigError::SeqBits(self.seq_bits));
        }
        if self.window == 0 {
            return Err(GbnConfigError::ZeroWindow);
        }
        let space = 1u64 << self.seq_bits;
        if self.window as u64 >= space {
            return Err(GbnConfigError::WindowTooLarge {
                window: self.window,
                seq_bits: self.seq_bits,
                space,
            });
        }
        if self.rx_slots < 2 {
            return Err(GbnConfigError::RxSlots(self.rx_slots));
        }
        Ok(())
    }

    /// What a job runs unless told otherwise: the paper's settings with cumulative ACKs,
    /// and back-off only from the third timeout in a row toward a silent peer, at most
    /// 16x (see the module documentation and the fields).
    pub fn recommended() -> GbnConfig {
        GbnConfig {
            cumulative_acks: true,
            backoff_after: 2,
            max_backoff: 4,
            ..GbnConfig::default()
        }
    }

    /// These settings with the timeout doubling from the `after + 1`th silent timeout in
    /// a row, at most `max` times.
    pub fn with_backoff(self, after: u32, max: u32) -> GbnConfig {
        GbnConfig {
            backoff_after: after,
            max_backoff: max,
            ..self
        }
    }
}

/// State of one send slot (the paper's Figure 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Empty, free for the host to store a packet in.
    Idle,
    /// Holds a packet never sent.
    Ready,
    /// Sent; waiting for its ACK.
    InTransit,
    /// Sent, then NACKed or timed out: to be sent again.
    Retransmit,
}

/// One non-idle send slot: a fragment and its transmission record.
struct Slot {
    state: SlotState,
    msg: MsgId,
    offset: u64,
    total: u64,
    payload: Bytes,
    first: bool,
    last: bool,
    notify: bool,
    /// Transmissions so far (echoed by the receiver in `aux`).
    attempts: u32,
    /// Time of the latest transmission.
    sent_at: Time,
    /// Time of the first transmission.
    first_at: Time,
}

/// Everything kept per peer: its send ring and its receive position.
struct Peer {
    out: OutQueue,
    /// The non-idle send slots, at most `window`, oldest (sequence `una`) first; the
    /// window's other slots are IDLE.
    slots: VecDeque<Slot>,
    /// Index in `slots` of the next one to transmit. Slots before it are INTRANSIT; slots
    /// from it on are RETRANSMIT (older) or READY (newer).
    cursor: usize,
    /// Sequence number of `slots[0]`.
    una: u32,
    rtt: Rtt,
    /// Congestion window: bounds the slots in transit (`cursor`) below `window`.
    cc: Window,
    /// Receiver: next expected sequence number and the position it must carry.
    rcv_nxt: u32,
    rcv_msg: MsgId,
    rcv_off: u64,
    /// Total of the message being received, once its first fragment is in.
    rcv_total: u64,
    reasm: Reassembler,
    /// The death the engine told of ([`Protocol::close_peer`]), boxed so that a live
    /// peer's state stays as small as with a flag.
    closed: Option<Box<PeerDead>>,
    /// Something came from the peer since the retransmission timer was last armed.
    heard: bool,
    /// Timeouts in a row with nothing heard from the peer.
    silent_timeouts: u32,
    /// Packets of kinds gbn does not use.
    ignored: u64,
    stats: PeerStats,
}

/// Control packets waiting beyond this many are dropped, as a full NI send queue would;
/// the peer's retransmission timeout recovers. Bounds memory under a flood.
const CTL_QUEUE_MAX: usize = 1 << 14;

/// The ParaStation2 go-back-N protocol, for all peers of one endpoint.
pub struct Gbn {
    c: Common,
    cfg: GbnConfig,
    space: SeqSpace,
    peers: Vec<Peer>,
    timers: Timers,
    ready: ReadySet,
    /// ACKs and NACKs to send (`dst` set), ahead of data.
    ctl: VecDeque<Header>,
    /// Receive slots taken since the host last polled.
    rx_used: u32,
    events: VecDeque<Event>,
    /// The first peer found to send what no correct member sends.
    misbehaved: Option<PeerMisbehaved>,
}

/// Order of two positions (message id, byte offset) within a pair's stream. Message ids
/// wrap, so they compare by signed distance.
fn cmp_pos(msg: MsgId, off: u64, ref_msg: MsgId, ref_off: u64) -> Ordering {
    (msg.wrapping_sub(ref_msg) as i32)
        .cmp(&0)
        .then(off.cmp(&ref_off))
}

impl Gbn {
    /// A gbn endpoint with settings `cfg`.
    pub fn new(c: Common, cfg: GbnConfig) -> Result<Gbn, GbnConfigError> {
        cfg.validate()?;
        let peers = (0..c.nprocs)
            .map(|_| Peer {
                out: OutQueue::default(),
                slots: VecDeque::new(),
                cursor: 0,
                una: 0,
                rtt: Rtt::new(c.rto_initial, c.rto_min, c.rto_max)
                    .with_max_backoff(cfg.max_backoff)
                    .following_queue(c.cc),
                cc: Window::new(c.cc),
                rcv_nxt: 0,
                rcv_msg: 0,
                rcv_off: 0,
                rcv_total: 0,
                reasm: Reassembler::new(c.max_message, c.peer_budget),
                closed: None,
                heard: false,
                silent_timeouts: 0,
                ignored: 0,
                stats: PeerStats::default(),
            })
            .collect();
        Ok(Gbn {
            space: SeqSpace::new(cfg.seq_bits),
            peers,
            timers: Timers::new(c.nprocs),
            ready: ReadySet::new(c.nprocs),
            ctl: VecDeque::new(),
            rx_used: 0,
            events: VecDeque::new(),
            misbehaved: None,
            c,
            cfg,
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &GbnConfig {
        &self.cfg
    }

    /// States of `peer`'s `window` send slots, oldest sequence number first
    /// (diagnostics and tests: it allocates).
    pub fn send_slots(&self, peer: Rank) -> Vec<SlotState> {
        let p = &self.peers[peer as usize];
        let idle = self.cfg.window as usize - p.slots.len();
        p.slots
            .iter()
            .map(|s| s.state)
            .chain(std::iter::repeat_n(SlotState::Idle, idle))
            .collect()
    }

    /// `peer`'s congestion window, in sixteenths of a packet (diagnostics and tests).
    pub fn peer_cc(&self, peer: Rank) -> u32 {
        self.peers[peer as usize].cc.raw()
    }

    /// Receive slots free now.
    pub fn rx_free(&self) -> u32 {
        self.cfg.rx_slots - self.rx_used
    }

    /// Packets from `peer` of a kind gbn does not use, ignored.
    pub fn ignored(&self, peer: Rank) -> u64 {
        self.peers[peer as usize].ignored
    }

    fn in_space(&self, seq: u32) -> bool {
        self.space.add(seq, 0) == seq
    }

    /// Host side of Figure 3: stores queued fragments into idle slots (IDLE -> READY).
    fn fill(&mut self, to: Rank) {
        let mp = self.c.max_payload[to as usize].max(1);
        let w = self.cfg.window as usize;
        let p = &mut self.peers[to as usize];
        while p.slots.len() < w {
            let Some(f) = p.out.next_fragment(mp) else {
                break;
            };
            p.slots.push_back(Slot {
                state: SlotState::Ready,
                msg: f.msg,
                offset: f.offset,
                total: f.total,
                payload: f.payload,
                first: f.first,
                last: f.last,
                notify: f.notify,
                attempts: 0,
                sent_at: 0,
                first_at: 0,
            });
        }
    }

    /// Puts `to` on the ready list if it has a slot to transmit or one to fill.
    fn wake(&mut self, to: Rank) {
        let p = &self.peers[to as usize];
        let n = p.slots.len();
        let sendable = p.cursor < n && p.cc.allows(p.cursor);
        if sendable || (!p.out.is_empty() && n < self.cfg.window as usize) {
            self.ready.insert(to);
        }
    }

    /// Go-back-N: every INTRANSIT slot becomes RETRANSMIT and transmission restarts at the
    /// first unacknowledged one.
    fn go_back(&mut self, to: Rank) {
        let p = &mut self.peers[to as usize];
        for s in p.slots.iter_mut().take(p.cursor) {
            debug_assert_eq!(s.state, SlotState::InTransit);
            s.state = SlotState::Retransmit;
        }
        p.cursor = 0;
        self.wake(to);
    }

    /// Releases the `n` oldest slots (ACK: -> IDLE), reporting messages fully sent.
    fn release(&mut self, now: Time, to: Rank, n: usize) {
        let p = &mut self.peers[to as usize];
        for s in p.slots.drain(..n) {
            // INTRANSIT (or RETRANSMIT) -> IDLE: the slot and its payload reference go.
            if s.last && s.notify {
                self.events.push_back(Event::Sent { to, id: s.msg });
            }
            p.stats.acked += 1;
        }
        p.una = self.space.add(p.una, n as u32);
        p.cursor = p.cursor.saturating_sub(n);
        p.cc.on_ack(n as u32);
        p.silent_timeouts = 0;
        // The timer covers the oldest packet in transit; RETRANSMIT and READY slots re-arm
        // it when they are sent.
        if p.cursor > 0 {
            self.timers.set(to, now + p.rtt.rto());
            p.heard = false;
        } else {
            self.timers.clear(to);
        }
        self.fill(to);
        self.wake(to);
    }

    /// Queues an ACK or NACK answering the DATA `d` from `to`.
    fn answer(&mut self, kind: Kind, to: Rank, d: &Header) {
        if self.ctl.len() >= CTL_QUEUE_MAX {
            return;
        }
        let mut h = Header::new(kind);
        h.dst = to;
        h.seq = d.seq;
        h.msg = d.msg;
        h.offset = d.offset;
        h.aux = d.aux;
        h.ack = self.peers[to as usize].rcv_nxt;
        self.ctl.push_back(h);
    }

    fn on_data(&mut self, from: Rank, hdr: &Header, payload: &[u8]) {
        // No correct sender makes these, at any position or time: report it before its
        // fragment is placed (or anything allocated for it).
        if hdr.total > self.c.message_limit() {
            let what = announced_too_large(hdr.total, self.c.max_message, self.c.peer_budget);
            return self.misbehave(from, what);
        }
        let len = payload.len() as u64;
        if hdr.offset.checked_add(len).is_none_or(|e| e > hdr.total) {
            let what = format!(
                "sent {len} bytes at offset {} of a message of {} bytes",
                hdr.offset, hdr.total
            );
            return self.misbehave(from, what);
        }
        let window = self.cfg.window;
        let in_space = self.in_space(hdr.seq);
        let p = &mut self.peers[from as usize];
        p.stats.data_received += 1;
        match cmp_pos(hdr.msg, hdr.offset, p.rcv_msg, p.rcv_off) {
            Ordering::Less => {
                // Already accepted: our ACK was lost or is late. Answer it again if the
                // sequence number is one the sender may still be waiting on.
                p.stats.drop_duplicate += 1;
                let back = self.space.dist(hdr.seq, p.rcv_nxt);
                if in_space && (1..=window).contains(&back) {
                    self.answer(Kind::Ack, from, hdr);
                }
            }
            Ordering::Greater => {
                // Ahead of sequence: an earlier packet was lost. No selective repeat.
                p.stats.drop_out_of_window += 1;
                let ahead = self.space.dist(p.rcv_nxt, hdr.seq);
                if in_space && (1..window).contains(&ahead) {
                    self.answer(Kind::Nack, from, hdr);
                }
            }
            Ordering::Equal => self.on_expected(from, hdr, payload),
        }
    }

    /// DATA at the expected position: the "=" row of Table 1.
    fn on_expected(&mut self, from: Rank, hdr: &Header, payload: &[u8]) {
        let p = &mut self.peers[from as usize];
        let len = payload.len() as u64;
        let end = hdr.offset.checked_add(len);
        // Messages go in order, whole, one after the other: the packet at the expected
        // position belongs to the message under way (one partial message at most).
        let sane = hdr.seq == p.rcv_nxt
            && end.is_some_and(|e| e <= hdr.total)
            && hdr.msg == p.rcv_msg
            && (len > 0 || hdr.total == 0)
            && (p.rcv_off == 0 || hdr.total == p.rcv_total);
        if !sane {
            // The right position under another sequence number, or a fragment that does
            // not fit its message: not something a correct peer sends.
            p.stats.drop_out_of_window += 1;
            return;
        }
        if self.rx_used + 1 >= self.cfg.rx_slots {
            // It would take the last free slot: refuse it, so one slot stays free.
            p.stats.drop_no_buffer += 1;
            self.answer(Kind::Nack, from, hdr);
            return;
        }
        match p.reasm.add(hdr.msg, hdr.offset, hdr.total, payload) {
            Added::Rejected => {
                p.stats.drop_out_of_window += 1;
                return;
            }
            Added::Misbehaved(what) => return self.misbehave(from, what),
            Added::Stored | Added::Ready => {}
        }
        self.rx_used += 1;
        p.stats.bytes_received += len;
        p.rcv_nxt = self.space.add(p.rcv_nxt, 1);
        let end = hdr.offset + len;
        if end == hdr.total {
            p.rcv_msg = p.rcv_msg.wrapping_add(1);
            p.rcv_off = 0;
            p.rcv_total = 0;
        } else {
            p.rcv_off = end;
            p.rcv_total = hdr.total;
        }
        while let Some((id, data)) = p.reasm.pop() {
            p.stats.messages_delivered += 1;
            self.events.push_back(Event::Message { from, id, data });
        }
        self.answer(Kind::Ack, from, hdr);
    }

    fn on_ack(&mut self, now: Time, from: Rank, hdr: &Header) {
        let in_space = self.in_space(hdr.seq);
        let p = &mut self.peers[from as usize];
        p.stats.control_received += 1;
        p.stats.acks_received += 1;
        let i = self.space.dist(p.una, hdr.seq) as usize;
        if !in_space || i >= p.slots.len() {
            // "<": a duplicate ACK for a slot already released (or an ACK for nothing).
            return;
        }
        if i > 0 && !self.cfg.cumulative_acks {
            // ">": the ACK for an older slot was lost. The paper ignores this one; the
            // older slot times out, is resent, and both get acknowledged again.
            return;
        }
        let s = &p.slots[i];
        if s.state == SlotState::Ready || s.msg != hdr.msg || s.offset != hdr.offset {
            // Not what this slot holds: a stale ACK from an earlier lap of the space.
            return;
        }
        if s.attempts == 1 {
            // Karn: only a packet sent once gives an unambiguous round trip.
            p.rtt.sample(now.saturating_sub(s.sent_at));
        } else if p.cc.on() && hdr.aux == 1 {
            // The ACK echoes the first transmission (`aux`): the retransmission was
            // spurious, the timer fired while the packet was queued. The echo makes the
            // round trip unambiguous (as TCP's timestamps do), and the estimate learns the
            // queue it missed; the window goes back to what it was (Eifel).
            p.rtt.sample(now.saturating_sub(s.first_at));
            p.cc.undo();
        } else {
            // New data acknowledged: the path works again, so the timeout returns to the
            // estimate (RFC 6298 section 5), even without a sample; otherwise a run of
            // losses recovered only by retransmissions would keep the longest back-off.
            p.rtt.reset_backoff();
        }
        self.release(now, from, i + 1);
    }

    fn on_nack(&mut self, now: Time, from: Rank, hdr: &Header) {
        let in_space = self.in_space(hdr.seq);
        let p = &mut self.peers[from as usize];
        p.stats.control_received += 1;
        p.stats.nacks_received += 1;
        let i = self.space.dist(p.una, hdr.seq) as usize;
        if !in_space || i >= p.slots.len() {
            return;
        }
        let s = &p.slots[i];
        if s.state == SlotState::InTransit
            && s.attempts == hdr.aux
            && s.msg == hdr.msg
            && s.offset == hdr.offset
        {
            // A loss (or a full receive ring): one decrease per round trip, and the
            // go-back resends only what the smaller window holds.
            p.cc.on_loss(now, &p.rtt);
            self.go_back(from);
        }
        // Otherwise the slot is already marked RETRANSMIT, or was resent since the
        // rejected transmission: ignore.
    }

    /// Transmits the next slot of `to` (READY or RETRANSMIT -> INTRANSIT), if any.
    fn next_data(&mut self, now: Time, to: Rank) -> Option<Transmit> {
        self.fill(to);
        let p = &mut self.peers[to as usize];
        if p.closed.is_some() || p.cursor >= p.slots.len() || !p.cc.allows(p.cursor) {
            return None;
        }
        let k = p.cursor;
        let seq = self.space.add(p.una, k as u32);
        let rto = p.rtt.rto();
        let s = &mut p.slots[k];
        debug_assert!(matches!(s.state, SlotState::Ready | SlotState::Retransmit));
        s.attempts = s.attempts.saturating_add(1);
        s.state = SlotState::InTransit;
        s.sent_at = now;
        if s.attempts == 1 {
            s.first_at = now;
        }
        let mut hdr = Header::new(Kind::Data);
        hdr.dst = to;
        hdr.seq = seq;
        hdr.msg = s.msg;
        hdr.offset = s.offset;
        hdr.total = s.total;
        hdr.len = s.payload.len() as u32;
        hdr.aux = s.attempts;
        hdr.flags = if s.first { flags::FIRST } else { 0 } | if s.last { flags::LAST } else { 0 };
        if s.attempts > 1 {
            hdr.flags |= flags::RETRANSMIT;
            p.stats.retransmits += 1;
        }
        p.stats.data_sent += 1;
        p.stats.bytes_sent += s.payload.len() as u64;
        let payload = s.payload.clone();
        p.cursor += 1;
        // The timer runs for the oldest packet in transit: (re)arm it when that one leaves.
        if k == 0 || self.timers.get(to).is_none() {
            self.timers.set(to, now + rto);
            self.peers[to as usize].heard = false;
        }
        Some(Transmit { hdr, payload })
    }
}

impl Gbn {
    /// Records that `peer` sent what no correct member sends ([`PeerMisbehaved`]); the
    /// first such peer is reported, and its packets are ignored from then on.
    fn misbehave(&mut self, peer: Rank, what: String) {
        self.misbehaved.get_or_insert(PeerMisbehaved { peer, what });
    }
}

impl Protocol for Gbn {
    fn misbehaving(&self) -> Option<&PeerMisbehaved> {
        self.misbehaved.as_ref()
    }

    fn name(&self) -> &'static str {
        "gbn"
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
        self.fill(to);
        self.wake(to);
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
        if from >= self.c.nprocs
            || from == self.c.rank
            || self.peers[from as usize].closed.is_some()
            || self.misbehaved.as_ref().is_some_and(|m| m.peer == from)
        {
            return;
        }
        self.peers[from as usize].heard = true;
        match hdr.kind {
            Kind::Data => self.on_data(from, hdr, payload),
            Kind::Ack => self.on_ack(now, from, hdr),
            Kind::Nack => self.on_nack(now, from, hdr),
            _ => self.peers[from as usize].ignored += 1,
        }
    }

    fn poll_transmit(&mut self, now: Time, out: &mut Vec<Transmit>, max: usize) {
        let mut n = 0;
        // Control first: it is small and it unblocks the peer's window.
        while n < max {
            let Some(hdr) = self.ctl.pop_front() else {
                break;
            };
            let s = &mut self.peers[hdr.dst as usize].stats;
            s.control_sent += 1;
            if hdr.kind == Kind::Ack {
                s.acks_sent += 1;
            } else {
                s.nacks_sent += 1;
            }
            out.push(Transmit {
                hdr,
                payload: Bytes::new(),
            });
            n += 1;
        }
        // Then one data packet per peer in turn, so no peer starves another.
        while n < max {
            let Some(to) = self.ready.pop() else {
                break;
            };
            if let Some(t) = self.next_data(now, to) {
                out.push(t);
                n += 1;
            }
            if self.peers[to as usize].closed.is_none() {
                self.wake(to);
            }
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        // The host polls: it copies every accepted packet out of the ring.
        self.rx_used = 0;
        self.events.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        self.timers.earliest()
    }

    fn handle_timeout(&mut self, now: Time) {
        while let Some(to) = self.timers.pop_expired(now) {
            let p = &mut self.peers[to as usize];
            if p.closed.is_some() || p.cursor == 0 {
                continue;
            }
            p.stats.timeouts += 1;
            // Back off only for a peer silent since the timer started (stopped, slow, or
            // a congested path), and only once `backoff_after` such timeouts came in a
            // row. A peer that still talks lost packets at random, and one or two losses
            // in a row are what random loss does: backing off there makes each further
            // loss cost twice the time before (with a quarter of the packets lost, a tail
            // loss waited about six timeouts instead of one and a half).
            if std::mem::take(&mut p.heard) {
                p.silent_timeouts = 0;
            } else {
                p.silent_timeouts += 1;
                if p.silent_timeouts > self.cfg.backoff_after {
                    p.rtt.back_off();
                }
            }
            p.cc.on_timeout(now, &p.rtt);
            self.go_back(to);
        }
    }

    fn outstanding(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        !p.slots.is_empty() || !p.out.is_empty()
    }

    fn queued_bytes(&self, peer: Rank) -> u64 {
        self.peers
            .get(peer as usize)
            .map_or(0, |p| p.out.pending_bytes())
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
        let p = &mut self.peers[peer as usize];
        p.closed = Some(Box::new(dead));
        p.out.clear();
        p.slots = VecDeque::new();
        p.cursor = 0;
        // Half-received messages can never complete; completed ones stay queued.
        p.reasm = Reassembler::new(self.c.max_message, self.c.peer_budget);
        self.timers.clear(peer);
        self.ctl.retain(|h| h.dst != peer);
    }

    /// Nothing depends on whether the upper layer waits.
    fn expect(&mut self, _now: Time, _peer: Rank, _waiting: bool) {}
}

#[cfg(test)]
mod tests {
    /// `peer` declared dead after 5 s of silence.
    fn dead(peer: Rank) -> PeerDead {
        PeerDead {
            peer,
            silent_for: 5 * crate::SEC,
        }
    }
    use super::*;
    use crate::testkit::{Duo, common, deref_duo, events, exchange, pattern, rx, rx_all, tx};
    use crate::{MS, US};
    use proptest::prelude::*;
    use rand::RngExt;
    use rand_chacha::ChaCha8Rng;

    const MP: usize = 100;

    fn cfg(window: u32, seq_bits: u32, rx_slots: u32) -> GbnConfig {
        GbnConfig {
            window,
            seq_bits,
            rx_slots,
            cumulative_acks: false,
            backoff_after: 0,
            max_backoff: 20,
        }
    }

    fn pair(cfg: GbnConfig, mp: usize) -> (Gbn, Gbn) {
        (
            Gbn::new(common(0, mp), cfg).unwrap(),
            Gbn::new(common(1, mp), cfg).unwrap(),
        )
    }

    /// The paper's protocol alone, without congestion control (`BULKWIRE_CC=off`): what
    /// the tests of its figures and tables count.
    fn paper_pair(cfg: GbnConfig, mp: usize) -> (Gbn, Gbn) {
        (
            Gbn::new(common(0, mp).with_cc(false), cfg).unwrap(),
            Gbn::new(common(1, mp).with_cc(false), cfg).unwrap(),
        )
    }

    /// (kind, seq) of each packet, for compact assertions.
    fn ks(ts: &[Transmit]) -> Vec<(Kind, u32)> {
        ts.iter().map(|t| (t.hdr.kind, t.hdr.seq)).collect()
    }

    fn messages(g: &mut Gbn) -> Vec<(MsgId, Vec<u8>)> {
        events(g)
            .into_iter()
            .filter_map(|e| match e {
                Event::Message { id, data, .. } => Some((id, data)),
                _ => None,
            })
            .collect()
    }

    use SlotState::{Idle, InTransit, Ready, Retransmit};

    /// One lossy, duplicating, reordering network between two gbn endpoints, in virtual
    /// time. `fate` decides how many copies of each packet arrive (0: lost).
    struct Net {
        d: Duo<Gbn>,
        poll_prob: f64,
        #[allow(clippy::type_complexity)]
        fate: Box<dyn FnMut(&mut ChaCha8Rng, usize, &Transmit) -> usize>,
        /// Every (sender, seq) put on the wire, to check wrap-around really happened.
        seqs: [Vec<u32>; 2],
        steps: u64,
    }

    deref_duo!(Net => Gbn);

    impl Net {
        fn new(cfg: GbnConfig, mp: usize, seed: u64) -> Net {
            let (a, b) = pair(cfg, mp);
            Net {
                d: Duo::new([a, b], seed),
                poll_prob: 1.0,
                fate: Box::new(|_, _, _| 1),
                seqs: [Vec::new(), Vec::new()],
                steps: 0,
            }
        }

        fn poll(&mut self, i: usize) {
            let d = &mut self.d;
            while let Some(e) = d.g[i].poll_event() {
                match e {
                    Event::Message { from, id, data } => {
                        assert_eq!(from as usize, 1 - i);
                        d.got[i].push((id, data));
                    }
                    Event::Sent { to, id } => {
                        assert_eq!(to as usize, 1 - i);
                        // Reported only once the receiver has taken in the whole message.
                        let r = &d.g[1 - i].peers[i];
                        assert_eq!(cmp_pos(id, 0, r.rcv_msg, 0), Ordering::Less);
                        d.sent[i].push(id);
                    }
                    Event::Announce { .. } => panic!("gbn never announces"),
                    Event::PeerDead { .. } => panic!("deaths are the engine's to report"),
                }
            }
        }

        /// Runs until everything is delivered and acknowledged, or `limit` of virtual
        /// time passes; returns the virtual time taken.
        fn run(&mut self, limit: Time) -> Time {
            let start = self.d.now;
            while !self.d.done() {
                self.d.assert_within(start, limit);
                self.step();
            }
            self.poll(0);
            self.poll(1);
            self.d.now - start
        }

        fn step(&mut self) {
            self.steps += 1;
            for i in 0..2 {
                for t in tx(&mut self.d.g[i], self.d.now) {
                    if t.hdr.kind == Kind::Data {
                        self.seqs[i].push(t.hdr.seq);
                    }
                    let copies = (self.fate)(&mut self.d.rng, i, &t);
                    self.d.put(i, &t, copies);
                }
            }
            for i in 0..2 {
                if self.d.rng.random_bool(self.poll_prob) {
                    self.poll(i);
                }
            }
            let Some(next) = self.d.next([]) else {
                // Nothing in flight and no timer: only the hosts' polls are missing.
                self.poll(0);
                self.poll(1);
                return;
            };
            self.d.advance(next);
            for g in &self.d.g {
                assert!(g.rx_free() >= 1, "the last receive slot was taken");
            }
            self.d.fire_timers();
        }

        /// Everything arrived exactly once, intact, in order; each notify was reported
        /// once, in order.
        fn check(&self) {
            self.d.check(true);
        }
    }

    #[test]
    fn config_defaults_are_the_papers_and_are_validated() {
        let d = GbnConfig::default();
        assert_eq!((d.window, d.seq_bits, d.cumulative_acks), (8, 8, false));
        assert!(d.validate().is_ok());
        assert_eq!(
            cfg(8, 3, 4).validate(),
            Err(GbnConfigError::WindowTooLarge {
                window: 8,
                seq_bits: 3,
                space: 8
            })
        );
        assert!(cfg(7, 3, 4).validate().is_ok());
        assert!(cfg(1, 1, 2).validate().is_ok());
        assert!(cfg(u32::MAX, 32, 2).validate().is_ok());
        assert_eq!(cfg(0, 8, 4).validate(), Err(GbnConfigError::ZeroWindow));
        assert_eq!(cfg(1, 0, 4).validate(), Err(GbnConfigError::SeqBits(0)));
        assert_eq!(cfg(1, 33, 4).validate(), Err(GbnConfigError::SeqBits(33)));
        assert_eq!(cfg(1, 8, 1).validate(), Err(GbnConfigError::RxSlots(1)));
        let e = Gbn::new(common(0, MP), cfg(16, 4, 8)).err().unwrap();
        assert!(
            e.to_string().contains("smaller than the sequence space"),
            "{e}"
        );
    }

    /// Jobs run the paper's protocol with cumulative ACKs.
    #[test]
    fn jobs_run_cumulative_acks_unless_told_otherwise() {
        let r = GbnConfig::recommended();
        assert_eq!(
            r,
            GbnConfig {
                cumulative_acks: true,
                backoff_after: 2,
                max_backoff: 4,
                ..GbnConfig::default()
            }
        );
        let paper_timers = r.with_backoff(0, 20);
        assert_eq!(
            paper_timers,
            GbnConfig {
                cumulative_acks: true,
                ..GbnConfig::default()
            }
        );
    }

    /// The job's floor of the timeout: 200 us by default (`Common::new`), under the
    /// initial timeout of 1 ms that applies until a round trip is measured.
    #[test]
    fn timeout_follows_the_round_trip_down_to_the_jobs_floor() {
        let (mut a, mut b) = (
            Gbn::new(Common::new(0, 2, MP), GbnConfig::recommended()).unwrap(),
            Gbn::new(Common::new(1, 2, MP), GbnConfig::recommended()).unwrap(),
        );
        a.send(0, 1, pattern(5, 0), false).unwrap();
        rx_all(&mut b, 10 * US, &tx(&mut a, 0));
        assert_eq!(a.poll_timeout(), Some(MS), "the initial timeout");
        rx_all(&mut a, 20 * US, &tx(&mut b, 10 * US));
        a.send(20 * US, 1, pattern(5, 1), false).unwrap();
        tx(&mut a, 20 * US);
        assert_eq!(a.poll_timeout(), Some(20 * US + 200 * US), "the floor");
    }

    /// A peer that still talks is losing packets at random, not gone: the timeout stays
    /// put. Toward a silent one it stays put twice more, then doubles.
    #[test]
    fn timeouts_back_off_only_for_a_silent_peer() {
        let (mut a, mut b) = pair(GbnConfig::recommended(), MP);
        a.send(0, 1, pattern(5, 0), false).unwrap();
        tx(&mut a, 0); // lost, and every resend too
        let mut now = 0;
        let mut gaps = Vec::new();
        for i in 0..9 {
            let t = a.poll_timeout().unwrap();
            gaps.push(t - now);
            now = t;
            if i < 4 {
                // The peer sends a message of its own meanwhile: it is alive.
                b.send(now, 0, pattern(1, i), false).unwrap();
                rx_all(&mut a, now, &tx(&mut b, now));
            }
            a.handle_timeout(now);
            tx(&mut a, now);
        }
        let rto = gaps[0];
        assert_eq!(gaps[..5], [rto; 5], "{gaps:?}");
        assert_eq!(gaps[5..], [rto, rto, 2 * rto, 4 * rto], "{gaps:?}");
    }

    #[test]
    fn registered_by_name() {
        assert!(crate::PROTOCOLS.contains(&"gbn"));
        let p = crate::by_name("gbn", Common::new(0, 2, MP), &Default::default()).unwrap();
        assert_eq!(p.name(), "gbn");
    }

    #[test]
    fn send_slots_follow_figure_3() {
        let (mut a, mut b) = paper_pair(cfg(4, 8, 16), MP);
        assert_eq!(a.send_slots(1), [Idle; 4]);
        for i in 0..3 {
            a.send(0, 1, pattern(10, i), i == 2).unwrap();
        }
        // IDLE -> READY: the host stored the packets.
        assert_eq!(a.send_slots(1), [Ready, Ready, Ready, Idle]);
        // READY -> INTRANSIT.
        let d = tx(&mut a, 0);
        assert_eq!(ks(&d), [(Kind::Data, 0), (Kind::Data, 1), (Kind::Data, 2)]);
        assert!(
            d.iter()
                .all(|t| t.hdr.aux == 1 && !t.hdr.has(flags::RETRANSMIT))
        );
        assert_eq!(a.send_slots(1), [InTransit, InTransit, InTransit, Idle]);
        // INTRANSIT -> IDLE on its ACK.
        rx(&mut b, 0, &d[0]);
        let ack0 = tx(&mut b, 0);
        assert_eq!(ks(&ack0), [(Kind::Ack, 0)]);
        rx_all(&mut a, 0, &ack0);
        assert_eq!(a.send_slots(1), [InTransit, InTransit, Idle, Idle]);
        // INTRANSIT -> RETRANSMIT on a NACK (packet 1 lost, so 2 is NACKed); go back N.
        rx(&mut b, 0, &d[2]);
        let nack2 = tx(&mut b, 0);
        assert_eq!(ks(&nack2), [(Kind::Nack, 2)]);
        rx_all(&mut a, 0, &nack2);
        assert_eq!(a.send_slots(1), [Retransmit, Retransmit, Idle, Idle]);
        // A NACK for a RETRANSMIT slot is ignored.
        rx_all(&mut a, 0, &nack2);
        assert_eq!(a.send_slots(1), [Retransmit, Retransmit, Idle, Idle]);
        // RETRANSMIT -> INTRANSIT, oldest first, marked as second attempts.
        let r = tx(&mut a, MS);
        assert_eq!(ks(&r), [(Kind::Data, 1), (Kind::Data, 2)]);
        assert!(
            r.iter()
                .all(|t| t.hdr.aux == 2 && t.hdr.has(flags::RETRANSMIT))
        );
        assert_eq!(a.send_slots(1), [InTransit, InTransit, Idle, Idle]);
        // The old NACK (for attempt 1) concerns a superseded transmission: ignored.
        rx_all(&mut a, MS, &nack2);
        assert_eq!(a.send_slots(1), [InTransit, InTransit, Idle, Idle]);
        // INTRANSIT -> RETRANSMIT on timeout.
        let t = a.poll_timeout().unwrap();
        // Re-armed when the oldest packet was resent at 1 ms; the RTO is rto_min after
        // the 0 ns round trip of packet 0.
        assert_eq!(t, MS + MS);
        a.handle_timeout(t - 1);
        assert_eq!(a.send_slots(1)[0], InTransit, "not before its time");
        a.handle_timeout(t);
        assert_eq!(a.send_slots(1), [Retransmit, Retransmit, Idle, Idle]);
        let r = tx(&mut a, t);
        assert!(r.iter().all(|t| t.hdr.aux == 3));
        rx_all(&mut b, t, &r);
        let acks = tx(&mut b, t);
        assert_eq!(ks(&acks), [(Kind::Ack, 1), (Kind::Ack, 2)]);
        rx_all(&mut a, t, &acks);
        assert_eq!(a.send_slots(1), [Idle; 4]);
        assert!(!a.outstanding(1));
        assert_eq!(a.poll_timeout(), None);
        let ev = events(&mut a);
        assert!(matches!(ev[..], [Event::Sent { to: 1, id: 2 }]), "{ev:?}");
        let got = messages(&mut b);
        assert_eq!(got.len(), 3);
        let s = a.peer_stats(1);
        assert_eq!((s.data_sent, s.retransmits, s.timeouts), (7, 4, 1));
        assert_eq!((s.acks_received, s.nacks_received), (3, 3));
        assert_eq!((s.control_received, s.control_sent, s.acked), (6, 0, 3));
        let s = b.peer_stats(0);
        assert_eq!((s.data_received, s.acks_sent, s.nacks_sent), (4, 3, 1));
        assert_eq!((s.control_sent, s.drop_out_of_window), (4, 1));
        assert_eq!((s.messages_delivered, s.bytes_received), (3, 30));
    }

    /// Table 1, DATA "<": a duplicate (its ACK was lost) is answered with the ACK again.
    #[test]
    fn duplicate_data_resends_the_ack() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(5, 0), false).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 0, &d);
        assert_eq!(ks(&tx(&mut b, 0)), [(Kind::Ack, 0)]); // lost
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
        let r = tx(&mut a, t);
        assert_eq!(ks(&r), [(Kind::Data, 0)]);
        rx_all(&mut b, t, &r);
        let ack = tx(&mut b, t);
        assert_eq!(ks(&ack), [(Kind::Ack, 0)]);
        rx_all(&mut a, t, &ack);
        assert!(!a.outstanding(1));
        assert_eq!(messages(&mut b).len(), 1, "delivered once");
        let s = b.peer_stats(0);
        assert_eq!((s.data_received, s.drop_duplicate, s.acks_sent), (2, 1, 2));
    }

    /// With congestion control the NACKs are one loss: the window (10, grown to 12 by
    /// the two ACKs before them) halves once, to 6, and the go-back resends only the six
    /// slots in transit, not the new message the paper's protocol sends with them
    /// (`lost_data_is_nacked_and_go_back_n_resends_in_order`); the ACKs reopen it.
    #[test]
    fn congestion_window_halves_once_and_bounds_the_go_back() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        // A first message measures the bare path: 100 us.
        a.send(0, 1, pattern(1, 9), false).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 50 * US, &d);
        rx_all(&mut a, 100 * US, &tx(&mut b, 50 * US));
        a.send(MS, 1, pattern(8 * MP, 7), false).unwrap();
        a.send(MS, 1, pattern(3, 1), false).unwrap();
        let d = tx(&mut a, MS);
        assert_eq!(d.len(), 8, "the ring's 8 slots, under the window of 11");
        for (i, t) in d.iter().enumerate() {
            if i != 2 {
                rx(&mut b, MS, t);
            }
        }
        // The answers come through a queue (2 ms): the loss is congestion.
        rx_all(&mut a, 3 * MS, &tx(&mut b, MS));
        let r = tx(&mut a, 3 * MS);
        assert_eq!(
            r.iter().map(|t| t.hdr.seq).collect::<Vec<_>>(),
            [3, 4, 5, 6, 7, 8],
            "five NACKs, one halving (13 to 6)"
        );
        rx_all(&mut b, 3 * MS, &r);
        rx_all(&mut a, 3 * MS, &tx(&mut b, 3 * MS));
        let r = tx(&mut a, 3 * MS);
        assert_eq!(r.iter().map(|t| t.hdr.seq).collect::<Vec<_>>(), [9]);
        rx_all(&mut b, 3 * MS, &r);
        rx_all(&mut a, 3 * MS, &tx(&mut b, 3 * MS));
        assert!(!a.outstanding(1));
        assert_eq!(messages(&mut b).len(), 3);
    }

    /// A loss on a path whose round trip never left its floor is the link's: the window
    /// stays, and the go-back resends everything after the loss, as the paper's.
    #[test]
    fn a_loss_without_a_queue_is_not_congestion() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(8 * MP, 7), false).unwrap();
        a.send(0, 1, pattern(3, 1), false).unwrap();
        let d = tx(&mut a, 0);
        for (i, t) in d.iter().enumerate() {
            if i != 2 {
                rx(&mut b, 50 * US, t);
            }
        }
        rx_all(&mut a, 100 * US, &tx(&mut b, 50 * US));
        let r = tx(&mut a, 100 * US);
        assert_eq!(r.len(), 7, "six slots back and the new message");
        assert_eq!(a.peer_cc(1), 12 * 16);
    }

    /// Under congestion control a timeout through a queue leaves a quarter of the window;
    /// when the ACK then echoes the first transmission, the timeout was spurious (the
    /// packet was queued): the window comes back and the round trip it took is a sample.
    #[test]
    fn a_late_ack_of_the_first_transmission_undoes_the_timeout() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        // Two messages: the bare path (100 us), then a queue (2 ms).
        for (k, rtt) in [(0, 100 * US), (1, 2 * MS)] {
            let t0 = k * 10 * MS;
            a.send(t0, 1, pattern(1, k as u32), false).unwrap();
            let d = tx(&mut a, t0);
            rx_all(&mut b, t0, &d);
            rx_all(&mut a, t0 + rtt, &tx(&mut b, t0));
        }
        let t0 = 20 * MS;
        a.send(t0, 1, pattern(8 * MP, 1), false).unwrap();
        let d = tx(&mut a, t0);
        assert_eq!(d.len(), 8);
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
        assert_eq!(tx(&mut a, t).len(), 3, "a quarter of the window of 12");
        // The first transmissions were only queued: their ACKs come, echoing attempt 1.
        rx_all(&mut b, t + MS, &d);
        rx_all(&mut a, t + MS, &tx(&mut b, t + MS));
        assert!(!a.outstanding(1));
        assert!(
            a.peer_stats(1).srtt_ns > 200 * US,
            "the late ACK was a sample"
        );
        assert_eq!(
            a.peer_cc(1),
            20 * 16,
            "the window before the timeout (12), and 8 ACKs"
        );
    }

    /// Table 1, DATA ">": a packet ahead of sequence is dropped and NACKed, and the
    /// sender goes back to the first unacknowledged packet, resending it and all after it
    /// in order.
    #[test]
    fn lost_data_is_nacked_and_go_back_n_resends_in_order() {
        let (mut a, mut b) = paper_pair(GbnConfig::default(), MP);
        let msg = pattern(8 * MP, 7);
        a.send(0, 1, msg.clone(), false).unwrap();
        a.send(0, 1, pattern(3, 1), false).unwrap(); // waits for a free slot
        let d = tx(&mut a, 0);
        assert_eq!(d.len(), 8);
        for (i, t) in d.iter().enumerate() {
            if i != 2 {
                rx(&mut b, 0, t);
            }
        }
        let ans = tx(&mut b, 0);
        assert_eq!(
            ks(&ans),
            [
                (Kind::Ack, 0),
                (Kind::Ack, 1),
                (Kind::Nack, 3),
                (Kind::Nack, 4),
                (Kind::Nack, 5),
                (Kind::Nack, 6),
                (Kind::Nack, 7)
            ]
        );
        let s = b.peer_stats(0);
        assert_eq!((s.drop_out_of_window, s.nacks_sent, s.acks_sent), (5, 5, 2));
        rx_all(&mut a, 0, &ans);
        // A slot freed by the ACKs took the second message (READY); the rest go back.
        assert_eq!(
            a.send_slots(1),
            [
                Retransmit, Retransmit, Retransmit, Retransmit, Retransmit, Retransmit, Ready, Idle
            ]
        );
        let r = tx(&mut a, MS);
        assert_eq!(
            r.iter().map(|t| t.hdr.seq).collect::<Vec<_>>(),
            [2, 3, 4, 5, 6, 7, 8],
            "go-back-N order: first unacknowledged, all after it, then new data"
        );
        assert_eq!(a.peer_stats(1).retransmits, 6);
        rx_all(&mut b, MS, &r);
        rx_all(&mut a, MS, &tx(&mut b, MS));
        assert!(!a.outstanding(1));
        let got = messages(&mut b);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, msg.to_vec());
    }

    /// Table 1, ACK rows: "<" (duplicate) and ">" (an earlier ACK lost) are ignored, "="
    /// releases. With ">" ignored, the unreleased packet times out and is resent.
    #[test]
    fn ack_rules_of_table_1() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(2 * MP, 3), false).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 0, &d);
        let acks = tx(&mut b, 0);
        assert_eq!(ks(&acks), [(Kind::Ack, 0), (Kind::Ack, 1)]);
        // ACK ahead of the expected one: ignored.
        rx(&mut a, 0, &acks[1]);
        assert_eq!(a.send_slots(1)[..2], [InTransit, InTransit]);
        // The expected ACK releases.
        rx(&mut a, 0, &acks[0]);
        assert_eq!(a.send_slots(1)[..2], [InTransit, Idle]);
        // A duplicate ACK: ignored.
        rx(&mut a, 0, &acks[0]);
        assert_eq!(a.send_slots(1)[..2], [InTransit, Idle]);
        assert_eq!(a.peer_stats(1).acked, 1);
        // The early ACK is not replayed: the slot times out, is resent, and the
        // receiver's duplicate rule answers it.
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
        let r = tx(&mut a, t);
        assert_eq!(ks(&r), [(Kind::Data, 1)]);
        rx_all(&mut b, t, &r);
        rx_all(&mut a, t, &tx(&mut b, t));
        assert!(!a.outstanding(1));
        let s = a.peer_stats(1);
        assert_eq!(
            (s.acks_received, s.acked, s.timeouts, s.retransmits),
            (4, 2, 1, 1)
        );
        assert_eq!(messages(&mut b).len(), 1);
    }

    /// The opt-in improvement: an ACK ahead of the expected one releases both.
    #[test]
    fn cumulative_ack_releases_older_slots() {
        let c = GbnConfig {
            cumulative_acks: true,
            ..GbnConfig::default()
        };
        let (mut a, mut b) = pair(c, MP);
        a.send(0, 1, pattern(3 * MP, 3), true).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        let acks = tx(&mut b, 0);
        rx(&mut a, 5 * MS, &acks[1]);
        assert_eq!(a.send_slots(1)[..3], [InTransit, Idle, Idle]);
        rx(&mut a, 5 * MS, &acks[0]); // now a duplicate
        rx(&mut a, 5 * MS, &acks[2]);
        assert!(!a.outstanding(1));
        assert!(matches!(events(&mut a)[..], [Event::Sent { to: 1, id: 0 }]));
        let s = a.peer_stats(1);
        assert_eq!((s.acked, s.timeouts, s.srtt_ns), (3, 0, 5 * MS));
    }

    /// Table 1, DATA "=" without space: a packet that would take the last free receive
    /// slot is NACKed and dropped; the sender succeeds once the host has polled.
    #[test]
    fn one_receive_slot_always_stays_free() {
        let (mut a, mut b) = pair(cfg(8, 8, 4), MP);
        for i in 0..6 {
            a.send(0, 1, pattern(MP, i), false).unwrap();
        }
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert_eq!(b.rx_free(), 1, "three accepted, the fourth slot kept free");
        let ans = tx(&mut b, 0);
        assert_eq!(
            ks(&ans),
            [
                (Kind::Ack, 0),
                (Kind::Ack, 1),
                (Kind::Ack, 2),
                (Kind::Nack, 3), // no buffer
                (Kind::Nack, 4), // ahead of sequence
                (Kind::Nack, 5),
            ]
        );
        let s = b.peer_stats(0);
        assert_eq!((s.drop_no_buffer, s.drop_out_of_window), (1, 2));
        rx_all(&mut a, 0, &ans);
        assert_eq!(a.send_slots(1)[..3], [Retransmit; 3]);
        // The host has not polled yet: refused again.
        let r = tx(&mut a, MS);
        assert_eq!(ks(&r), [(Kind::Data, 3), (Kind::Data, 4), (Kind::Data, 5)]);
        rx_all(&mut b, MS, &r);
        assert_eq!(ks(&tx(&mut b, MS))[0], (Kind::Nack, 3));
        assert_eq!(b.peer_stats(0).drop_no_buffer, 2);
        // The host polls: the ring drains, and the resend gets through.
        assert_eq!(messages(&mut b).len(), 3);
        assert_eq!(b.rx_free(), 4);
        rx_all(&mut b, MS, &r);
        assert_eq!(b.rx_free(), 1);
        let ans = tx(&mut b, MS);
        assert_eq!(ks(&ans), [(Kind::Ack, 3), (Kind::Ack, 4), (Kind::Ack, 5)]);
        rx_all(&mut a, MS, &ans);
        assert!(!a.outstanding(1));
        assert_eq!(messages(&mut b).len(), 3);
    }

    /// Receive slots are per packet, not per message: a message many times larger than
    /// the ring gets through a receiver that drains it between bursts.
    #[test]
    fn message_larger_than_the_ring_gets_through() {
        let mut net = Net::new(cfg(8, 8, 2), MP, 1);
        net.send(0, pattern(40 * MP + 7, 9), true);
        net.send(1, pattern(33 * MP, 4), false);
        net.run(10 * crate::SEC);
        net.check();
        assert!(net.g[1].peer_stats(0).drop_no_buffer > 0);
    }

    /// Nothing is lost when the host polls rarely: NACKs throttle the sender, and it
    /// completes once the ring drains.
    #[test]
    fn rarely_polling_receiver_does_not_deadlock() {
        let mut net = Net::new(cfg(8, 8, 3), MP, 2);
        net.poll_prob = 0.05;
        for i in 0..30 {
            net.send(0, pattern(i * 37 % (4 * MP), i as u32), i % 3 == 0);
        }
        net.run(60 * crate::SEC);
        net.check();
    }

    #[test]
    fn zero_byte_and_multi_fragment_messages() {
        let sizes = [0, 1, MP - 1, MP, MP + 1, 5 * MP, 0, 0, 17 * MP + 3, 0];
        let mut net = Net::new(GbnConfig::default(), MP, 3);
        for (i, &n) in sizes.iter().enumerate() {
            net.send(0, pattern(n, i as u32), true);
        }
        net.run(crate::SEC);
        net.check();
        let frags: usize = sizes.iter().map(|&n| n.div_ceil(MP).max(1)).sum();
        let s = net.g[0].peer_stats(1);
        assert_eq!((s.data_sent, s.retransmits), (frags as u64, 0));
        assert_eq!(s.bytes_sent, sizes.iter().sum::<usize>() as u64);
        let r = net.g[1].peer_stats(0);
        assert_eq!((r.acks_sent, r.control_sent), (frags as u64, frags as u64));
        assert_eq!(r.messages_delivered, sizes.len() as u64);
        assert!(net.g[0].peer_stats(1).srtt_ns >= 20 * US);
    }

    #[test]
    fn one_gib_message() {
        let mp = 64 * 1024 - crate::wire::HEADER_LEN;
        let n = (1usize << 30) + 1;
        let mut v = vec![0u8; n];
        for (i, x) in v.iter_mut().enumerate().step_by(4093) {
            *x = (i / 4093) as u8 | 1;
        }
        let msg = Bytes::from(v);
        // Above the default budget: a job raises BULKWIRE_PEER_BUDGET for such messages.
        let big = |r| Common {
            peer_budget: 2 << 30,
            ..common(r, mp)
        };
        let mut a = Gbn::new(big(0), GbnConfig::default()).unwrap();
        let mut b = Gbn::new(big(1), GbnConfig::default()).unwrap();
        a.send(0, 1, msg.clone(), true).unwrap();
        let mut now = 0;
        let mut got = Vec::new();
        while a.outstanding(1) {
            now += 10 * US;
            rx_all(&mut b, now, &tx(&mut a, now));
            rx_all(&mut a, now, &tx(&mut b, now));
            got.extend(messages(&mut b));
        }
        assert_eq!(got.len(), 1);
        assert!(got[0].1 == msg[..]);
        assert!(matches!(events(&mut a)[..], [Event::Sent { to: 1, id: 0 }]));
        let s = a.peer_stats(1);
        assert_eq!(s.data_sent, n.div_ceil(mp) as u64);
        assert_eq!(s.retransmits, 0);
    }

    /// 8-bit sequence numbers wrap several times, with periodic losses in both
    /// directions.
    #[test]
    fn wraps_around_8_bit_sequence_space() {
        let mut net = Net::new(GbnConfig::default(), MP, 4);
        let mut k = 0u64;
        net.fate = Box::new(move |_, _, _| {
            k += 1;
            usize::from(!k.is_multiple_of(23))
        });
        for i in 0..100 {
            net.send(0, pattern(7 * MP + i, i as u32), false);
            net.send(1, pattern(i * 3, i as u32), false);
        }
        net.run(60 * crate::SEC);
        net.check();
        let wraps = net.seqs[0].windows(2).filter(|w| w[1] < w[0]).count();
        assert!(wraps >= 2, "sequence wrapped {wraps} times");
        assert!(net.g[0].peer_stats(1).retransmits > 0);
    }

    /// Tiny sequence spaces: 3 bits with the largest legal window, and 2 bits with
    /// reordering and duplication that hand the receiver packets from earlier laps.
    #[test]
    fn wraps_around_small_sequence_spaces() {
        for (window, bits) in [(7, 3), (4, 3), (3, 2), (1, 1)] {
            let mut net = Net::new(cfg(window, bits, 6), MP, bits as u64);
            net.jitter = 100 * US;
            net.fate = Box::new(|rng, _, _| {
                if rng.random_bool(0.1) {
                    0
                } else if rng.random_bool(0.2) {
                    2
                } else {
                    1
                }
            });
            for i in 0..60 {
                net.send(0, pattern(i * 13 % (3 * MP), i as u32), i % 5 == 0);
                net.send(1, pattern(i, i as u32), false);
            }
            net.run(120 * crate::SEC);
            net.check();
            let wraps = net.seqs[0].windows(2).filter(|w| w[1] < w[0]).count();
            assert!(wraps >= 10, "{bits} bits wrapped {wraps} times");
        }
    }

    /// A packet or ACK delayed past a full lap of a 2-bit space carries a current
    /// sequence number; its position tells it apart.
    #[test]
    fn stale_packets_from_an_earlier_lap_are_recognised() {
        let (mut a, mut b) = pair(cfg(3, 2, 16), MP);
        a.send(0, 1, pattern(10, 0), false).unwrap();
        let old = tx(&mut a, 0);
        rx_all(&mut b, 0, &old);
        let old_ack = tx(&mut b, 0);
        rx_all(&mut a, 0, &old_ack);
        for i in 1..4 {
            a.send(0, 1, pattern(10, i), false).unwrap();
        }
        rx_all(&mut b, 0, &tx(&mut a, 0));
        rx_all(&mut a, 0, &tx(&mut b, 0));
        assert_eq!(messages(&mut b).len(), 4);
        // Both sides are back at sequence 0; message 4 goes out as seq 0.
        a.send(0, 1, pattern(10, 4), false).unwrap();
        let cur = tx(&mut a, 0);
        assert_eq!((cur[0].hdr.seq, old[0].hdr.seq), (0, 0));
        // The stale DATA is a duplicate, not message 4; no ACK answers it (an ACK for
        // seq 0 now would name the wrong packet).
        rx_all(&mut b, 0, &old);
        assert!(messages(&mut b).is_empty());
        assert!(tx(&mut b, 0).is_empty());
        assert_eq!(b.peer_stats(0).drop_duplicate, 1);
        // The stale ACK does not release message 4's slot.
        rx_all(&mut a, 0, &old_ack);
        assert_eq!(a.send_slots(1)[0], InTransit);
        rx_all(&mut b, 0, &cur);
        rx_all(&mut a, 0, &tx(&mut b, 0));
        assert!(!a.outstanding(1));
        assert_eq!(messages(&mut b)[0].1, pattern(10, 4).to_vec());
    }

    /// Timeouts back off exponentially up to `rto_max`; round trips are sampled only
    /// from packets sent once (Karn). (Under congestion control the ACK's echo of the
    /// first transmission is a sample too: `a_late_ack_of_the_first_transmission_undoes_the_timeout`.)
    #[test]
    fn timeouts_back_off_and_karn_rule_holds() {
        let (mut a, mut b) = paper_pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(1, 0), false).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 2 * MS, &d);
        rx_all(&mut a, 4 * MS, &tx(&mut b, 2 * MS));
        assert_eq!(a.peer_stats(1).srtt_ns, 4 * MS);
        // Now everything is lost: the deadlines double until capped.
        a.send(4 * MS, 1, pattern(1, 1), false).unwrap();
        let mut now = 4 * MS;
        let d = tx(&mut a, now);
        let mut gaps = Vec::new();
        for _ in 0..6 {
            let t = a.poll_timeout().unwrap();
            gaps.push(t - now);
            now = t;
            a.handle_timeout(now);
            assert_eq!(ks(&tx(&mut a, now)), [(Kind::Data, 1)]);
        }
        let rto = gaps[0];
        assert_eq!(rto, 12 * MS, "srtt + 4 * rttvar after one sample of 4 ms");
        assert_eq!(gaps, [rto, 2 * rto, 4 * rto, 80 * MS, 80 * MS, 80 * MS]);
        assert_eq!(a.peer_stats(1).timeouts, 6);
        // The ACK of a retransmitted packet is not a sample (Karn).
        rx_all(&mut b, now, &d);
        rx_all(&mut a, now + MS, &tx(&mut b, now));
        assert!(!a.outstanding(1));
        assert_eq!(a.peer_stats(1).srtt_ns, 4 * MS);
        // New data acknowledged clears the back-off (RFC 6298 section 5): the timeout is
        // the estimate again, not the capped 80 ms that a run of losses would keep.
        a.send(now, 1, pattern(1, 2), false).unwrap();
        tx(&mut a, now);
        assert_eq!(a.poll_timeout().unwrap() - now, rto);
    }

    /// A huge window is legal with 32-bit sequence numbers; memory follows the packets
    /// actually in flight, not the window.
    #[test]
    fn huge_window_costs_only_what_is_in_flight() {
        let mut net = Net::new(cfg(1 << 30, 32, 1 << 20), MP, 6);
        net.send(0, pattern(300 * MP, 1), true);
        assert_eq!(net.g[0].peers[1].slots.len(), 300);
        net.run(crate::SEC);
        net.check();
        assert_eq!(net.g[0].peer_stats(1).data_sent, 300);
    }

    #[test]
    fn sent_only_once_every_fragment_is_acknowledged() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(3 * MP, 0), true).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 0, &d);
        let acks = tx(&mut b, 0);
        rx_all(&mut a, 0, &acks[..2]);
        assert!(events(&mut a).is_empty());
        rx_all(&mut a, 0, &acks[2..]);
        assert!(matches!(events(&mut a)[..], [Event::Sent { to: 1, id: 0 }]));
    }

    /// A fragment at the expected position that no correct sender makes (beyond its
    /// message, or of a message above the limit) reports its sender, allocates nothing,
    /// and its later packets are ignored.
    #[test]
    fn impossible_fragments_report_their_sender() {
        for (offset, total, len, want) in [
            (
                u64::MAX,
                3,
                3,
                "sent 3 bytes at offset 18446744073709551615 of a message of 3 bytes",
            ),
            (0, 2, 3, "sent 3 bytes at offset 0 of a message of 2 bytes"),
            (
                0,
                1 << 50,
                3,
                "announced a message of 1125899906842624 bytes, more than the largest message this job accepts (1000 bytes)",
            ),
        ] {
            let mut c = Common::new(1, 2, MP);
            c.max_message = 1000;
            let mut b = Gbn::new(c, cfg(4, 3, 16)).unwrap();
            let mut h = Header::new(Kind::Data);
            (h.src, h.dst, h.offset, h.total) = (0, 1, offset, total);
            b.handle(0, &h, &vec![1; len]);
            let m = b.misbehaving().expect("reported").clone();
            assert_eq!((m.peer, m.what.as_str()), (0, want));
            assert_eq!(b.peer_stats(0).held_bytes, 0);
            // Nothing from it is taken any more, not even a correct packet.
            (h.offset, h.total) = (0, 1);
            b.handle(0, &h, &[1]);
            assert!(messages(&mut b).is_empty());
            assert!(
                ProtoError::Misbehaved(Box::new(m))
                    .to_string()
                    .starts_with(&format!("rank 0 {want}; "))
            );
        }
    }

    /// Whatever a peer may send that passed the CRC and that a correct sender could
    /// send at another time: no panic, counted, and the protocol still works afterwards.
    #[test]
    fn nonsense_headers_are_ignored_and_counted() {
        let (mut a, mut b) = pair(cfg(4, 3, 16), MP);
        let mut c = Common::new(1, 2, MP);
        c.max_message = 1000;
        let mut small = Gbn::new(c, cfg(4, 3, 16)).unwrap();
        let base = |kind| {
            let mut h = Header::new(kind);
            h.src = 0;
            h.dst = 1;
            h
        };
        let mut junk = Vec::new();
        for kind in [
            Kind::Prod,
            Kind::Rts,
            Kind::Cts,
            Kind::Resend,
            Kind::Fin,
            Kind::Close,
            Kind::Ping,
            Kind::Pong,
        ] {
            junk.push((base(kind), vec![]));
        }
        for seq in [1, 3, 7, 8, 1000, u32::MAX] {
            for kind in [Kind::Data, Kind::Ack, Kind::Nack] {
                let mut h = base(kind);
                h.seq = seq;
                h.total = 5;
                junk.push((h, vec![1; 5]));
            }
        }
        let mut h = base(Kind::Data);
        h.total = 10;
        junk.push((h, vec![])); // empty fragment of a non-empty message
        let mut h = base(Kind::Data);
        h.src = 7; // outside the job
        junk.push((h, vec![]));
        let mut h = base(Kind::Data);
        h.src = 1; // ourselves
        junk.push((h, vec![]));
        for (h, p) in &junk {
            b.handle(0, h, p);
            small.handle(0, h, p);
            // The same, mirrored, at the other end (except what no source could send).
            if h.src == 0 {
                let m = Header {
                    src: 1,
                    dst: 0,
                    ..*h
                };
                a.handle(0, &m, p);
            }
        }
        assert_eq!(b.ignored(0), 8);
        assert!(messages(&mut b).is_empty());
        let s = b.peer_stats(0);
        assert_eq!(s.messages_delivered, 0);
        assert!(s.drop_out_of_window >= 5, "{s:?}");
        assert!(!a.outstanding(1) && a.send_slots(1) == [Idle; 4]);
        // None of it was accepted or answered, and the protocol still works.
        let (ta, tb) = (tx(&mut a, 0), tx(&mut b, 0));
        assert!(
            ta.is_empty() && tb.is_empty(),
            "{:?} {:?}",
            ks(&ta),
            ks(&tb)
        );
        assert_eq!(small.peer_stats(0).messages_delivered, 0);
        a.send(0, 1, pattern(250, 1), false).unwrap();
        for _ in 0..4 {
            rx_all(&mut b, 0, &tx(&mut a, 0));
            rx_all(&mut a, 0, &tx(&mut b, 0));
        }
        assert_eq!(messages(&mut b)[0].1, pattern(250, 1).to_vec());
    }

    #[test]
    fn close_peer_forgets_it() {
        let (mut a, mut b) = pair(GbnConfig::default(), MP);
        a.send(0, 1, pattern(5 * MP, 0), true).unwrap();
        let d = tx(&mut a, 0);
        rx_all(&mut b, 0, &d[..2]);
        a.close_peer(dead(1));
        b.close_peer(dead(0));
        assert!(!a.outstanding(1));
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(
            a.send(0, 1, Bytes::new(), false),
            Err(ProtoError::PeerDead(dead(1)))
        );
        assert!(tx(&mut b, 0).is_empty(), "queued ACKs dropped");
        rx_all(&mut b, 0, &d[2..]);
        assert!(tx(&mut b, 0).is_empty() && events(&mut b).is_empty());
        assert!(tx(&mut a, 0).is_empty() && events(&mut a).is_empty());
    }

    #[test]
    fn send_checks_its_arguments() {
        let mut c = common(0, MP);
        c.max_message = 10;
        let mut a = Gbn::new(c, GbnConfig::default()).unwrap();
        assert!(matches!(
            a.send(0, 0, Bytes::new(), false),
            Err(ProtoError::SelfSend { .. })
        ));
        assert!(matches!(
            a.send(0, 2, Bytes::new(), false),
            Err(ProtoError::NoSuchPeer { .. })
        ));
        assert!(matches!(
            a.send(0, 1, pattern(11, 0), false),
            Err(ProtoError::TooLarge { .. })
        ));
    }

    /// Several peers share the receive ring and the transmitter; each pair keeps its own
    /// sequence and order.
    #[test]
    fn peers_are_independent_and_served_in_turn() {
        let n = 4;
        let mk = |r| Gbn::new(Common::new(r, n, MP), GbnConfig::default()).unwrap();
        let mut g: Vec<Gbn> = (0..n).map(mk).collect();
        for from in 1..n {
            for i in 0..5 {
                g[from as usize]
                    .send(0, 0, pattern(2 * MP, from * 10 + i), false)
                    .unwrap();
            }
        }
        for i in 1..n {
            g[0].send(0, i, pattern(3 * MP, i), false).unwrap();
        }
        let first = tx(&mut g[0], 0);
        let dsts: Vec<Rank> = first.iter().map(|t| t.hdr.dst).collect();
        assert_eq!(&dsts[..6], [1, 2, 3, 1, 2, 3], "round-robin over peers");
        let mut got: Vec<Vec<(MsgId, Vec<u8>)>> = vec![Vec::new(); n as usize];
        let mut back = 0;
        let mut pending: Vec<(Rank, Transmit)> = first.into_iter().map(|t| (0, t)).collect();
        for _ in 0..100 {
            for r in 1..n {
                pending.extend(tx(&mut g[r as usize], 0).into_iter().map(|t| (r, t)));
            }
            pending.extend(tx(&mut g[0], 0).into_iter().map(|t| (0, t)));
            for (from, t) in pending.drain(..) {
                let mut h = t.hdr;
                h.src = from;
                g[h.dst as usize].handle(0, &h, &t.payload);
            }
            for r in 0..n {
                for e in events(&mut g[r as usize]) {
                    if let Event::Message { from, id, data } = e {
                        if r == 0 {
                            got[from as usize].push((id, data));
                        } else {
                            assert_eq!((from, id, data), (0, 0, pattern(3 * MP, r).to_vec()));
                            back += 1;
                        }
                    }
                }
            }
        }
        for from in 1..n {
            let want: Vec<(MsgId, Vec<u8>)> = (0..5)
                .map(|i| (i, pattern(2 * MP, from * 10 + i).to_vec()))
                .collect();
            assert_eq!(got[from as usize], want);
            assert!(!g[from as usize].outstanding(0));
        }
        assert!((1..n).all(|r| !g[0].outstanding(r)));
        assert_eq!(back, n - 1);
    }

    /// Measures the opt-in cumulative ACKs against the paper's rule when a quarter of
    /// the ACKs are lost (printed with --nocapture).
    #[test]
    fn cumulative_acks_help_when_acks_are_lost() {
        let run = |cumulative| {
            let c = GbnConfig {
                cumulative_acks: cumulative,
                ..GbnConfig::default()
            };
            let mut net = Net::new(c, MP, 5);
            net.fate =
                Box::new(|rng, _, t| usize::from(t.hdr.kind != Kind::Ack || rng.random_bool(0.75)));
            for i in 0..200 {
                net.send(0, pattern(MP, i), false);
            }
            let time = net.run(600 * crate::SEC);
            net.check();
            let s = net.g[0].peer_stats(1);
            eprintln!(
                "cumulative_acks={cumulative}: {} us, {} data packets, {} retransmits, {} timeouts",
                time / US,
                s.data_sent,
                s.retransmits,
                s.timeouts
            );
            (time, s.retransmits, s.timeouts)
        };
        let paper = run(false);
        let cumulative = run(true);
        assert!(cumulative.0 * 4 < paper.0, "{cumulative:?} vs {paper:?}");
        assert!(cumulative.1 * 4 < paper.1 && cumulative.2 * 4 < paper.2);
    }

    #[derive(Clone, Debug)]
    struct Schedule {
        window: u32,
        seq_bits: u32,
        rx_slots: u32,
        cumulative: bool,
        mp: usize,
        drop: f64,
        dup: f64,
        jitter: Time,
        poll_prob: f64,
        seed: u64,
        sizes: [Vec<usize>; 2],
    }

    fn schedule() -> impl Strategy<Value = Schedule> {
        (
            prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(8), Just(16)],
            1u32..=8,
            2u32..12,
            any::<bool>(),
            1usize..64,
            0.0f64..0.3,
            0.0f64..0.2,
            0u64..200,
            0.2f64..1.0,
            any::<u64>(),
            proptest::collection::vec(0usize..200, 0..25),
            proptest::collection::vec(0usize..200, 0..25),
        )
            .prop_map(
                |(
                    bits,
                    w,
                    rx_slots,
                    cumulative,
                    mp,
                    drop,
                    dup,
                    jitter,
                    poll_prob,
                    seed,
                    s0,
                    s1,
                )| {
                    Schedule {
                        window: w.min((1u32 << bits) - 1),
                        seq_bits: bits,
                        rx_slots,
                        cumulative,
                        mp,
                        drop,
                        dup,
                        jitter: jitter * US,
                        poll_prob,
                        seed,
                        sizes: [s0, s1],
                    }
                },
            )
    }

    /// Any header a peer could send that passes the engine's checks, biased towards
    /// values near the live state.
    fn any_header() -> impl Strategy<Value = (Header, Vec<u8>)> {
        let small = || prop_oneof![0u32..20, any::<u32>()];
        let off = || prop_oneof![0u64..2000, any::<u64>()];
        (
            (1u8..=11, any::<u8>(), small(), small(), small()),
            (off(), off(), 0u32..4),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |((kind, fl, seq, ack, msg), (offset, total, aux), payload)| {
                    let mut h = Header::new(Kind::from_u8(kind).unwrap());
                    h.flags = fl & flags::KNOWN;
                    h.src = 0;
                    h.dst = 1;
                    h.seq = seq;
                    h.ack = ack;
                    h.msg = msg;
                    h.offset = offset;
                    h.total = total;
                    h.aux = aux;
                    h.len = payload.len() as u32;
                    (h, payload)
                },
            )
    }

    proptest! {

        /// Over random loss, duplication and reordering, in both directions at once:
        /// every message is delivered exactly once, intact and in order, every notify is
        /// reported once, and it all ends within a bounded virtual time.
        #[test]
        fn delivers_exactly_once_in_order_over_any_schedule(s in schedule()) {
            let c = GbnConfig {
                window: s.window,
                seq_bits: s.seq_bits,
                rx_slots: s.rx_slots,
                cumulative_acks: s.cumulative,
                backoff_after: 0,
                max_backoff: 20,
            };
            let mut net = Net::new(c, s.mp, s.seed);
            net.jitter = s.jitter;
            net.poll_prob = s.poll_prob;
            let (drop, dup) = (s.drop, s.dup);
            net.fate = Box::new(move |rng, _, _| {
                if rng.random_bool(drop) {
                    0
                } else if rng.random_bool(dup) {
                    2
                } else {
                    1
                }
            });
            net.send_sizes(&s.sizes);
            net.run(3_600 * crate::SEC);
            net.check();
            for i in 0..2 {
                prop_assert_eq!(net.g[i].send_slots(1 - i as Rank).iter().filter(|&&s| s != Idle).count(), 0);
                prop_assert_eq!(net.g[i].poll_timeout(), None);
            }
        }

        /// Arbitrary headers, in both directions, in the middle of a transfer with a tiny
        /// sequence space: nothing panics and every invariant of the slot ring holds.
        #[test]
        fn arbitrary_headers_never_panic(
            junk in proptest::collection::vec(any_header(), 1..60),
            bits in 1u32..=8,
        ) {
            let (mut a, mut b) = pair(cfg((1u32 << bits) - 1, bits, 4), 50);
            for i in 0..4 {
                a.send(0, 1, pattern(120, i), true).unwrap();
                b.send(0, 0, pattern(30, i), false).unwrap();
            }
            let mut now = 0;
            for (k, (h, p)) in junk.iter().enumerate() {
                now += 100 * US;
                b.handle(now, h, p);
                a.handle(now, &Header { src: 1, dst: 0, ..*h }, p);
                if k % 3 == 0 {
                    exchange(&mut a, &mut b, now);
                }
                if k % 7 == 0 {
                    a.handle_timeout(now + crate::SEC);
                    b.handle_timeout(now + crate::SEC);
                }
                for (g, peer) in [(&a, 1), (&b, 0)] {
                    let p = &g.peers[peer];
                    let n = p.slots.len();
                    prop_assert!(p.cursor <= n && n <= g.cfg.window as usize);
                    let st = g.send_slots(peer as Rank);
                    for (i, s) in st.iter().enumerate() {
                        let want = if i < p.cursor {
                            *s == InTransit
                        } else if i < n {
                            matches!(s, Ready | Retransmit)
                        } else {
                            *s == Idle
                        };
                        prop_assert!(want, "slot {} is {:?}: {:?}", i, s, st);
                    }
                    prop_assert!(g.rx_free() >= 1);
                }
            }
        }
    }
}
