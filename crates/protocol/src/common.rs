//! Pieces every protocol needs, written once: sequence arithmetic, cutting messages into
//! fragments, reassembling them, round-trip estimation, per-peer timers, a fair
//! ready-list of peers with work.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use bytes::{Buf, Bytes};

use crate::{MsgId, Rank, Time};

/// Sequence numbers of `bits` bits (1..=32), compared modulo 2^bits. Two sequence numbers
/// are comparable when they are less than half the space apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqSpace {
    mask: u32,
}

impl SeqSpace {
    /// A space of `bits` bits.
    pub fn new(bits: u32) -> SeqSpace {
        assert!(
            (1..=32).contains(&bits),
            "sequence width {bits} not in 1..=32"
        );
        SeqSpace {
            mask: if bits == 32 {
                u32::MAX
            } else {
                (1 << bits) - 1
            },
        }
    }

    /// Number of distinct sequence numbers.
    pub fn size(self) -> u64 {
        self.mask as u64 + 1
    }

    /// `a + n`, wrapped.
    #[inline]
    pub fn add(self, a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & self.mask
    }

    /// `a - b` as a distance forward from `b` to `a`, in 0..size.
    #[inline]
    pub fn dist(self, b: u32, a: u32) -> u32 {
        a.wrapping_sub(b) & self.mask
    }

    /// `a < b` in the circular order.
    #[inline]
    pub fn lt(self, a: u32, b: u32) -> bool {
        let d = self.dist(a, b);
        d != 0 && (d as u64) < self.size() / 2
    }

    /// Whether `x` lies in `[lo, lo + n)`.
    #[inline]
    pub fn in_window(self, x: u32, lo: u32, n: u32) -> bool {
        self.dist(lo, x) < n
    }
}

/// One fragment cut from a queued message.
#[derive(Clone, Debug)]
pub struct Fragment {
    pub msg: MsgId,
    pub offset: u64,
    pub total: u64,
    pub payload: Bytes,
    pub first: bool,
    pub last: bool,
    /// The sender asked to be told when this message is acknowledged.
    pub notify: bool,
}

struct Queued {
    id: MsgId,
    data: Bytes,
    sent: usize,
    notify: bool,
}

/// Messages waiting to be cut into packets for one peer, in order.
#[derive(Default)]
pub struct OutQueue {
    q: VecDeque<Queued>,
    next_id: MsgId,
    bytes: u64,
}

impl OutQueue {
    /// Queues a message and returns its id.
    pub fn push(&mut self, data: Bytes, notify: bool) -> MsgId {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.bytes += data.len() as u64;
        self.q.push_back(Queued {
            id,
            data,
            sent: 0,
            notify,
        });
        id
    }

    /// Numbers a message that goes out at once, without being queued (the queue must be
    /// empty, so that ids stay in sending order).
    pub fn bypass(&mut self) -> MsgId {
        debug_assert!(self.q.is_empty());
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// Whether no fragment remains to be cut.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Bytes not yet cut into fragments.
    pub fn pending_bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of packets still to cut at `max_payload` bytes each.
    pub fn pending_packets(&self, max_payload: usize) -> u64 {
        self.q
            .iter()
            .map(|m| {
                let left = m.data.len() - m.sent;
                if m.sent > 0 && left == 0 {
                    0
                } else {
                    (left.max(1)).div_ceil(max_payload) as u64
                }
            })
            .sum()
    }

    /// Id of the last message queued, if any is still queued.
    pub fn last_id(&self) -> Option<MsgId> {
        self.q.back().map(|m| m.id)
    }

    /// Cuts the next fragment of at most `max_payload` bytes (a 0-byte message yields one
    /// empty fragment).
    pub fn next_fragment(&mut self, max_payload: usize) -> Option<Fragment> {
        assert!(max_payload > 0);
        let m = self.q.front_mut()?;
        let total = m.data.len();
        let start = m.sent;
        let n = (total - start).min(max_payload);
        m.sent += n;
        self.bytes -= n as u64;
        let last = m.sent == total;
        let (msg, notify) = (m.id, m.notify);
        let payload = if last {
            // The last fragment takes the message's own handle: no reference count to bump
            // and drop again (two atomic operations per small message).
            let mut data = self.q.pop_front()?.data;
            data.advance(start);
            data
        } else {
            m.data.slice(start..start + n)
        };
        Some(Fragment {
            msg,
            offset: start as u64,
            total: total as u64,
            payload,
            first: start == 0,
            last,
            notify,
        })
    }

    /// Takes the next message whole, if none of it has been cut into fragments yet
    /// (message-based protocols such as rmpp send each message on its own connection).
    pub fn pop_message(&mut self) -> Option<(MsgId, Bytes, bool)> {
        if self.q.front()?.sent > 0 {
            return None;
        }
        let m = self.q.pop_front()?;
        self.bytes -= m.data.len() as u64;
        Some((m.id, m.data, m.notify))
    }

    /// Number of messages queued.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        self.q.clear();
        self.bytes = 0;
    }
}

/// A message being rebuilt from fragments. Its length so far is the end of the furthest
/// fragment, and only gaps before that are zero-filled (to be overwritten when their
/// fragments come), so a message whose fragments arrive in order is written once and never
/// cleared: clearing a 1 MiB buffer costs about as much as filling it.
///
/// Memory is never reserved on a size announced by the network alone: a buffer starts
/// empty, and [`FillBuf::write_within`] grows it only within the room its caller grants
/// (the sending peer's budget, [`Common::peer_budget`]): to the whole message at once when
/// the room holds it (one allocation, no copy, for the usual message), otherwise doubling
/// with the bytes actually written.
#[derive(Debug, Default)]
pub struct FillBuf {
    buf: Vec<u8>,
    total: usize,
}

/// Why [`FillBuf::write_within`] wrote nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// The fragment ends beyond the message.
    Outside,
    /// Holding the fragment would take `need` more bytes than the room granted.
    OverBudget { need: u64 },
    /// The allocator refused the memory.
    NoMemory,
}

impl FillBuf {
    /// A buffer for a message of `total` bytes; nothing is allocated yet.
    pub fn new(total: usize) -> FillBuf {
        FillBuf {
            buf: Vec::new(),
            total,
        }
    }

    /// The message's size.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes allocated: what this buffer costs its peer's budget.
    pub fn charge(&self) -> u64 {
        self.buf.capacity() as u64
    }

    /// Copies `data` to `offset`, allocating at most `room` more bytes; returns how many
    /// were allocated (the growth of [`FillBuf::charge`]). Nothing is written on an error.
    pub fn write_within(&mut self, offset: u64, data: &[u8], room: u64) -> Result<u64, WriteError> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.total as u64)
            .ok_or(WriteError::Outside)?;
        let cap = self.buf.capacity() as u64;
        let need = end.max(self.buf.len() as u64);
        if need > cap {
            let total = self.total as u64;
            // The whole message when the room allows (the usual case: one allocation);
            // else double, as the bytes arrive, within the room.
            let want = if total - cap <= room {
                total
            } else {
                need.max(cap.saturating_mul(2).min(total)).min(cap + room)
            };
            if want < need {
                return Err(WriteError::OverBudget { need: need - cap });
            }
            self.buf
                .try_reserve_exact((want - self.buf.len() as u64) as usize)
                .map_err(|_| WriteError::NoMemory)?;
        }
        let grown = self.buf.capacity() as u64 - cap;
        let offset = offset as usize;
        if offset > self.buf.len() {
            self.buf.resize(offset, 0);
        }
        let overlap = (self.buf.len() - offset).min(data.len());
        self.buf[offset..offset + overlap].copy_from_slice(&data[..overlap]);
        self.buf.extend_from_slice(&data[overlap..]);
        Ok(grown)
    }

    /// [`FillBuf::write_within`] without a bound (for a buffer the caller has already
    /// accounted for); false, and nothing written, if `data` would not fit the message.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> bool {
        self.write_within(offset as u64, data, u64::MAX).is_ok()
    }

    /// The whole message (zeros wherever nothing was written).
    pub fn into_vec(mut self) -> Vec<u8> {
        self.buf.resize(self.total, 0);
        self.buf
    }
}

/// What a peer did that no correct member of the job does, for the protocol to report
/// ([`crate::PeerMisbehaved`]): the text completes "rank N ...".
pub fn announced_too_large(total: u64, max_message: u64, budget: u64) -> String {
    if total > max_message {
        format!(
            "announced a message of {total} bytes, more than the largest message this job \
             accepts ({max_message} bytes)"
        )
    } else {
        format!(
            "announced a message of {total} bytes, more than the {budget} bytes a peer may \
             hold in incomplete messages (BULKWIRE_PEER_BUDGET)"
        )
    }
}

/// The text for a peer whose incomplete messages would hold more than its budget.
pub fn over_budget(held: u64, need: u64, budget: u64) -> String {
    format!(
        "sent data that would hold {} bytes in its incomplete messages, more than its budget \
         of {budget} bytes (BULKWIRE_PEER_BUDGET)",
        held.saturating_add(need)
    )
}

struct Partial {
    buf: FillBuf,
    got: u64,
}

/// What [`Reassembler::add`] made of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// Stored; its message is not complete (or an earlier one is not).
    Stored,
    /// Messages are ready in [`Reassembler::pop`].
    Ready,
    /// Inconsistent with what was seen of its message (a stale id, another total for the
    /// same message); ignored.
    Rejected,
    /// Something no correct sender does: a message over the size limit, a fragment beyond
    /// its message, a message id far ahead, or more held than the budget. The text
    /// completes "rank N ..." ([`crate::PeerMisbehaved`]); the fragment was ignored.
    Misbehaved(String),
}

/// Most incomplete messages held for one peer by default ([`Reassembler::with_records`]).
/// Every protocol's window bounds a correct sender below it (gbn holds one, holefill at
/// most its window, which sets it higher when larger); it bounds the records of empty or
/// tiny messages, which the byte budget does not.
pub const MAX_PARTIAL: usize = 4096;

/// Rebuilds messages from fragments that arrive in any order, each exactly once (the
/// protocol discards duplicates first), and releases them in message order.
///
/// Memory: the buffers of one peer's incomplete messages hold at most `budget` bytes in
/// all ([`Reassembler::held_bytes`]); a fragment that would need more, a total above
/// `max_message`, or an offset beyond its message is reported as
/// [`Added::Misbehaved`] before anything is allocated for it.
pub struct Reassembler {
    next: MsgId,
    partial: BTreeMap<MsgId, Partial>,
    done: VecDeque<(MsgId, Vec<u8>)>,
    max_message: u64,
    budget: u64,
    /// Most entries of `partial`.
    records: usize,
    /// Bytes allocated to the buffers in `partial`.
    held: u64,
    /// Messages released so far.
    pub delivered: u64,
}

impl Reassembler {
    /// Messages of at most `max_message` bytes, at most `budget` bytes held in the
    /// incomplete ones.
    pub fn new(max_message: u64, budget: u64) -> Reassembler {
        Reassembler {
            next: 0,
            partial: BTreeMap::new(),
            done: VecDeque::new(),
            max_message,
            budget,
            records: MAX_PARTIAL,
            held: 0,
            delivered: 0,
        }
    }

    /// This reassembler keeping up to `n` incomplete messages ([`MAX_PARTIAL`] by default).
    pub fn with_records(self, n: usize) -> Reassembler {
        Reassembler { records: n, ..self }
    }

    /// Id of the next message to release.
    pub fn next_id(&self) -> MsgId {
        self.next
    }

    /// Bytes allocated to partly received messages (at most the budget).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Adds one fragment.
    pub fn add(&mut self, msg: MsgId, offset: u64, total: u64, payload: &[u8]) -> Added {
        if total > self.max_message || total > self.budget {
            return Added::Misbehaved(announced_too_large(total, self.max_message, self.budget));
        }
        let Some(end) = offset
            .checked_add(payload.len() as u64)
            .filter(|&e| e <= total)
        else {
            return Added::Misbehaved(format!(
                "sent {} bytes at offset {offset} of a message of {total} bytes",
                payload.len()
            ));
        };
        // Message ids more than half the space behind are stale: already delivered.
        if (msg.wrapping_sub(self.next) as i32) < 0 {
            return Added::Rejected;
        }
        if msg == self.next && offset == 0 && end == total && !self.partial.contains_key(&msg) {
            // Whole message in one fragment, in order: the common small-message path.
            self.done.push_back((msg, payload.to_vec()));
            self.advance();
            return Added::Ready;
        }
        let room = self.budget - self.held;
        // One lookup per fragment: a new message takes a record only while there is one.
        let records = self.partial.len();
        let p = match self.partial.entry(msg) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(_) if records >= self.records => {
                return Added::Misbehaved(format!(
                    "sent fragments of more than {} incomplete messages at once",
                    self.records
                ));
            }
            std::collections::btree_map::Entry::Vacant(v) => v.insert(Partial {
                buf: FillBuf::new(total as usize),
                got: 0,
            }),
        };
        if p.buf.total() as u64 != total {
            return Added::Rejected;
        }
        match p.buf.write_within(offset, payload, room) {
            Ok(grown) => self.held += grown,
            Err(e) => {
                let held = self.held;
                if p.got == 0 && p.buf.charge() == 0 {
                    self.partial.remove(&msg);
                }
                return match e {
                    WriteError::Outside => Added::Rejected,
                    WriteError::OverBudget { need } => {
                        Added::Misbehaved(over_budget(held, need, self.budget))
                    }
                    WriteError::NoMemory => Added::Misbehaved(format!(
                        "sent a fragment of a message of {total} bytes that this process \
                         could not allocate"
                    )),
                };
            }
        }
        p.got += payload.len() as u64;
        if msg == self.next && p.got >= total {
            self.advance();
        }
        if self.done.is_empty() {
            Added::Stored
        } else {
            Added::Ready
        }
    }

    /// Releases, in order, every message that is complete.
    fn advance(&mut self) {
        loop {
            if self.done.back().is_some_and(|(id, _)| *id == self.next) {
                self.next = self.next.wrapping_add(1);
                self.delivered += 1;
                continue;
            }
            match self.partial.first_key_value() {
                Some((&id, p)) if id == self.next && p.got >= p.buf.total() as u64 => {
                    let p = self.partial.remove(&id).expect("first key");
                    self.held -= p.buf.charge();
                    self.done.push_back((id, p.buf.into_vec()));
                }
                _ => break,
            }
        }
    }

    /// The next complete message, in order.
    pub fn pop(&mut self) -> Option<(MsgId, Vec<u8>)> {
        self.done.pop_front()
    }
}

/// Round-trip estimation and retransmission timeout, after RFC 6298 (Jacobson/Karels),
/// with exponential back-off. Samples come only from packets sent once (Karn's rule).
#[derive(Clone, Debug)]
pub struct Rtt {
    srtt: Time,
    rttvar: Time,
    rto: Time,
    backoff: u32,
    /// Most doublings of the timeout.
    max_backoff: u32,
    min: Time,
    max: Time,
    /// The longest recent sample, decaying by 1/8 per sample, when the timeout follows
    /// the queue ([`Rtt::following_queue`]); 0 otherwise.
    peak: Time,
    follow: bool,
    /// The shortest sample: the path without queues.
    floor: Time,
}

impl Rtt {
    pub fn new(initial: Time, min: Time, max: Time) -> Rtt {
        Rtt {
            srtt: 0,
            rttvar: 0,
            rto: initial.clamp(min, max),
            backoff: 0,
            max_backoff: 20,
            min,
            max,
            peak: 0,
            follow: false,
            floor: 0,
        }
    }

    /// This estimator with the timeout at least 5/4 of the longest recent sample (when
    /// `on`; congestion control turns it on). Through a switch port whose buffer fills
    /// and drains, the round trip swings between the bare path and the full queue (0.3
    /// to 10 ms through two 64 KiB ports at 100 Mb/s) faster than the smoothed
    /// estimate and its mean deviation follow, and a timeout between the two fires on
    /// packets that are only queued; the go-back or resend it triggers then fills the
    /// queue further. The peak keeps the timeout above the queue the path showed lately.
    pub fn following_queue(self, on: bool) -> Rtt {
        Rtt { follow: on, ..self }
    }

    /// This estimator with the timeout doubling at most `n` times (20 by default).
    pub fn with_max_backoff(self, n: u32) -> Rtt {
        Rtt {
            max_backoff: n.min(20),
            ..self
        }
    }

    /// Smoothed round trip (0 before any sample).
    pub fn srtt(&self) -> Time {
        self.srtt
    }

    /// Mean deviation of the round trip (0 before any sample).
    pub fn rttvar(&self) -> Time {
        self.rttvar
    }

    /// The shortest sample so far (0 before any): the round trip of the path without
    /// queues.
    pub fn floor(&self) -> Time {
        self.floor
    }

    /// Whether the smoothed round trip shows a queue: over twice the shortest sample, or
    /// nothing measured yet (assume so). A loss with a queue is congestion; a loss on a
    /// path whose round trip stays at its floor is the link's (noise, a flaky cable,
    /// injected faults), which no smaller window relieves.
    pub fn queued(&self) -> bool {
        self.srtt == 0 || self.srtt > 2 * self.floor
    }

    /// The longest recent sample when the timeout follows the queue (0 otherwise).
    pub fn peak(&self) -> Time {
        self.peak
    }

    /// A round-trip estimate for pacing decisions: the smoothed value, or the initial
    /// timeout before any sample.
    pub fn estimate(&self) -> Time {
        if self.srtt == 0 { self.rto } else { self.srtt }
    }

    /// Records one measured round trip and clears the back-off. A sample over eight times
    /// the smoothed round trip (the first: eight initial timeouts) counts as eight times
    /// it: such a sample measured a peer that stopped (a stopped process, a long page-in),
    /// not the network, and taken whole it kept every timeout long for many round trips
    /// after the peer came back (one of 0.7 s made a simulated collective take 5 s for
    /// what took 2 ms). A real change of the round trip still comes through, nearly
    /// doubling the estimate per sample.
    pub fn sample(&mut self, rtt: Time) {
        let cap = if self.srtt == 0 { self.rto } else { self.srtt };
        let rtt = rtt.clamp(1, cap.saturating_mul(8).max(self.min));
        if self.srtt == 0 {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
        } else {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + rtt) / 8;
        }
        if self.follow {
            self.peak = rtt.max(self.peak - self.peak / 8);
        }
        if self.floor == 0 || rtt < self.floor {
            self.floor = rtt;
        }
        self.rto = (self.srtt + 4 * self.rttvar)
            .max(self.peak + self.peak / 4)
            .clamp(self.min, self.max);
        self.backoff = 0;
    }

    /// The current timeout, back-off included.
    pub fn rto(&self) -> Time {
        (self.rto << self.backoff.min(self.max_backoff)).min(self.max)
    }

    /// The timeout with `floor` instead of this estimator's own floor (below it or not),
    /// back-off included: for a wait on an answer the peer sends at once, where the
    /// estimator's floor covers answers it delays.
    pub fn rto_floored(&self, floor: Time) -> Time {
        if self.srtt == 0 {
            return self.rto();
        }
        let base = (self.srtt + 4 * self.rttvar)
            .max(self.peak + self.peak / 4)
            .clamp(floor.min(self.max), self.max);
        (base << self.backoff.min(self.max_backoff)).min(self.max)
    }

    /// Doubles the timeout after a timeout fired.
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(self.max_backoff);
    }

    /// Clears the back-off (progress was made).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }
}

/// One deadline per peer, with the earliest found in O(log n). Stale heap entries are
/// skipped lazily.
pub struct Timers {
    at: Vec<Option<Time>>,
    heap: BinaryHeap<Reverse<(Time, Rank)>>,
}

impl Timers {
    pub fn new(nprocs: u32) -> Timers {
        Timers {
            at: vec![None; nprocs as usize],
            heap: BinaryHeap::new(),
        }
    }

    /// Sets `peer`'s deadline (replacing any earlier one).
    pub fn set(&mut self, peer: Rank, t: Time) {
        if self.at[peer as usize] != Some(t) {
            self.at[peer as usize] = Some(t);
            self.heap.push(Reverse((t, peer)));
        }
    }

    /// Sets `peer`'s deadline unless an earlier one is already set.
    pub fn set_earlier(&mut self, peer: Rank, t: Time) {
        match self.at[peer as usize] {
            Some(old) if old <= t => {}
            _ => self.set(peer, t),
        }
    }

    /// Removes `peer`'s deadline.
    pub fn clear(&mut self, peer: Rank) {
        self.at[peer as usize] = None;
    }

    /// `peer`'s deadline.
    pub fn get(&self, peer: Rank) -> Option<Time> {
        self.at[peer as usize]
    }

    /// The earliest deadline.
    pub fn earliest(&mut self) -> Option<Time> {
        while let Some(&Reverse((t, p))) = self.heap.peek() {
            if self.at[p as usize] == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes and returns a peer whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Time) -> Option<Rank> {
        while let Some(&Reverse((t, p))) = self.heap.peek() {
            if self.at[p as usize] != Some(t) {
                self.heap.pop();
                continue;
            }
            if t > now {
                return None;
            }
            self.heap.pop();
            self.at[p as usize] = None;
            return Some(p);
        }
        None
    }
}

/// Peers with something to transmit, served round-robin so that no peer starves.
pub struct ReadySet {
    q: VecDeque<Rank>,
    queued: Vec<bool>,
}

impl ReadySet {
    pub fn new(nprocs: u32) -> ReadySet {
        ReadySet {
            q: VecDeque::new(),
            queued: vec![false; nprocs as usize],
        }
    }

    /// Marks `peer` as having work (no effect if already marked).
    pub fn insert(&mut self, peer: Rank) {
        if !self.queued[peer as usize] {
            self.queued[peer as usize] = true;
            self.q.push_back(peer);
        }
    }

    /// Takes the next peer with work.
    pub fn pop(&mut self) -> Option<Rank> {
        let p = self.q.pop_front()?;
        self.queued[p as usize] = false;
        Some(p)
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn contains(&self, peer: Rank) -> bool {
        self.queued[peer as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_space_wraps() {
        let s = SeqSpace::new(8);
        assert_eq!(s.add(255, 1), 0);
        assert!(s.lt(250, 3));
        assert!(!s.lt(3, 250));
        assert!(!s.lt(7, 7));
        assert_eq!(s.dist(250, 3), 9);
        assert!(s.in_window(2, 250, 9));
        assert!(!s.in_window(3, 250, 9));
        let w = SeqSpace::new(32);
        assert!(w.lt(u32::MAX, 0));
        assert_eq!(w.add(u32::MAX, 2), 1);
    }

    #[test]
    fn fragments_and_reassembles_out_of_order() {
        let mut q = OutQueue::default();
        let a: Bytes = (0..1000u32).map(|i| i as u8).collect::<Vec<_>>().into();
        q.push(a.clone(), false);
        q.push(Bytes::new(), true);
        q.push(Bytes::from_static(b"xyz"), false);
        assert_eq!(q.pending_packets(300), 4 + 1 + 1);
        let mut frags = Vec::new();
        while let Some(f) = q.next_fragment(300) {
            frags.push(f);
        }
        assert_eq!(frags.len(), 6);
        assert!(frags[4].first && frags[4].last && frags[4].notify);
        frags.reverse();
        let mut r = Reassembler::new(1 << 20, 1 << 20);
        let mut out = Vec::new();
        for f in &frags {
            r.add(f.msg, f.offset, f.total, &f.payload);
            while let Some(m) = r.pop() {
                out.push(m);
            }
        }
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], (0, a.to_vec()));
        assert_eq!(out[1], (1, vec![]));
        assert_eq!(out[2], (2, b"xyz".to_vec()));
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn reassembles_every_arrival_order_byte_for_byte() {
        // Gaps are zero-filled before their fragments arrive and then overwritten: any
        // order must give back the exact bytes.
        let msg: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let cuts = [0usize, 130, 131, 400, 777, 1000];
        let n = cuts.len() - 1;
        let mut seed = 12345u64;
        for _ in 0..200 {
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                order.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let mut r = Reassembler::new(1 << 20, 1 << 20);
            for (k, &i) in order.iter().enumerate() {
                let got = r.add(0, cuts[i] as u64, 1000, &msg[cuts[i]..cuts[i + 1]]);
                let want = if k + 1 == n {
                    Added::Ready
                } else {
                    Added::Stored
                };
                assert_eq!(got, want, "order {order:?}");
            }
            assert_eq!(r.pop(), Some((0, msg.clone())), "order {order:?}");
        }
    }

    #[test]
    fn reassembler_rejects_nonsense() {
        let mut r = Reassembler::new(100, 1000);
        assert!(matches!(r.add(0, 0, 101, &[]), Added::Misbehaved(m)
            if m == "announced a message of 101 bytes, more than the largest message this job accepts (100 bytes)"));
        assert!(matches!(r.add(0, 90, 95, &[0; 10]), Added::Misbehaved(m)
            if m == "sent 10 bytes at offset 90 of a message of 95 bytes"));
        assert!(matches!(
            r.add(0, u64::MAX, 95, &[0; 10]),
            Added::Misbehaved(_)
        ));
        assert_eq!(r.held_bytes(), 0, "nothing allocated for what was refused");
        assert_eq!(r.add(0, 0, 20, &[1; 10]), Added::Stored);
        assert_eq!(r.add(0, 10, 30, &[1; 10]), Added::Rejected);
        assert_eq!(r.add(0, 10, 20, &[2; 10]), Added::Ready);
        assert_eq!(r.pop().unwrap().1.len(), 20);
        assert_eq!(r.add(0, 0, 5, &[0; 5]), Added::Rejected, "stale id");
    }

    /// Fragments at the far end of large messages allocate only within the budget: the
    /// buffers follow what arrived when the whole message would not fit, and a fragment
    /// that would take the peer past its budget is reported before any allocation.
    #[test]
    fn reassembler_holds_at_most_its_budget() {
        let budget = 1 << 20;
        let mut r = Reassembler::new(1 << 40, budget);
        assert!(matches!(r.add(0, 0, 1 << 40, &[1]), Added::Misbehaved(m)
            if m.contains("more than the 1048576 bytes a peer may hold")));
        // Whole messages that fit are reserved at once.
        assert_eq!(r.add(1, 0, 300_000, &[1; 1000]), Added::Stored);
        assert_eq!(r.held_bytes(), 300_000);
        assert_eq!(r.add(2, 0, 300_000, &[2; 1000]), Added::Stored);
        assert_eq!(r.add(3, 0, 300_000, &[3; 1000]), Added::Stored);
        // The fourth would not fit whole: it grows with its bytes.
        assert_eq!(r.add(4, 0, 300_000, &[4; 1000]), Added::Stored);
        assert_eq!(r.held_bytes(), 901_000);
        // Its last byte would take the peer past the budget.
        let got = r.add(4, 299_999, 300_000, &[4]);
        assert!(
            matches!(&got, Added::Misbehaved(m) if m.contains("more than its budget of 1048576 bytes")),
            "{got:?}"
        );
        assert_eq!(r.held_bytes(), 901_000);
        // Message 0 completes and everything is released, in order, freeing the budget.
        assert_eq!(r.add(0, 0, 1, &[0]), Added::Ready);
        for id in 1..=3u8 {
            assert_eq!(
                r.add(id as MsgId, 1000, 300_000, &vec![id; 299_000]),
                Added::Ready
            );
        }
        assert_eq!(r.add(4, 1000, 300_000, &[4; 299_000]), Added::Ready);
        let mut n = 0;
        while let Some((id, m)) = r.pop() {
            assert_eq!(m.len(), if id == 0 { 1 } else { 300_000 });
            assert!(m.iter().all(|&b| b == id as u8));
            n += 1;
        }
        assert_eq!(n, 5);
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn reassembler_bounds_its_records() {
        let mut r = Reassembler::new(1 << 20, 1 << 20);
        for id in 1..=MAX_PARTIAL as MsgId {
            assert_eq!(r.add(id, 0, 0, &[]), Added::Stored);
        }
        assert!(matches!(
            r.add(MAX_PARTIAL as MsgId + 1, 0, 0, &[]),
            Added::Misbehaved(_)
        ));
    }

    #[test]
    fn rtt_converges_and_backs_off() {
        let mut r = Rtt::new(10_000, 100, 1_000_000);
        assert_eq!(r.rto(), 10_000);
        for _ in 0..50 {
            r.sample(1_000);
        }
        assert!(r.srtt() >= 990 && r.srtt() <= 1_010);
        let base = r.rto();
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(), (base * 4).min(1_000_000));
    }

    /// A peer that stopped for a while gives one huge sample: it counts as eight times
    /// the estimate, so the timeout is back near the round trip after a few samples; a
    /// real change of the round trip still comes through within a few samples.
    #[test]
    fn rtt_samples_of_a_stopped_peer_are_capped() {
        let mut r = Rtt::new(10_000, 100, 1_000_000_000);
        r.sample(700_000_000); // the first sample: at most eight initial timeouts
        assert_eq!(r.srtt(), 80_000);
        let mut r = Rtt::new(10_000, 100, 1_000_000_000);
        for _ in 0..20 {
            r.sample(1_000);
        }
        r.sample(700_000_000);
        assert!(r.srtt() < 2_000, "{}", r.srtt());
        for _ in 0..8 {
            r.sample(1_000);
        }
        assert!(r.rto() < 10_000, "{}", r.rto());
        // The round trip really grew a hundredfold: half followed within ten samples.
        for _ in 0..10 {
            r.sample(100_000);
        }
        assert!(r.srtt() > 50_000, "{}", r.srtt());
        let mut b = Rtt::new(10_000, 100, 1_000_000).with_max_backoff(2);
        for _ in 0..5 {
            b.back_off();
        }
        assert_eq!(b.rto(), 40_000, "at most two doublings");
    }

    /// A wait on an answer sent at once may follow the round trip below the estimator's
    /// floor; back-off still applies, and before any sample it is the initial timeout.
    #[test]
    fn rto_floored_replaces_the_floor() {
        use crate::{MS, SEC, US};
        let mut r = Rtt::new(MS, MS, SEC).with_max_backoff(4);
        assert_eq!(r.rto_floored(200 * US), MS, "no sample yet");
        for _ in 0..20 {
            r.sample(50 * US);
        }
        assert_eq!(r.rto(), MS);
        let quick = r.rto_floored(200 * US);
        assert!((200 * US..MS).contains(&quick), "{quick}");
        for _ in 0..10 {
            r.back_off();
        }
        assert_eq!(r.rto_floored(200 * US), quick * 16);
    }

    #[test]
    fn timers_give_earliest() {
        let mut t = Timers::new(4);
        t.set(1, 50);
        t.set(2, 20);
        t.set(1, 10);
        assert_eq!(t.earliest(), Some(10));
        assert_eq!(t.pop_expired(15), Some(1));
        assert_eq!(t.pop_expired(15), None);
        t.clear(2);
        assert_eq!(t.earliest(), None);
    }
}
