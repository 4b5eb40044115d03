//! Reliable multicast: one root sends a message to every other member of a group once
//! per datagram, as the RTFC paper's network cache writes once for every node; receivers
//! ask for what they miss, and the root repairs it. A sans-IO state machine like the
//! point-to-point protocols, and in this crate for the same reasons: it never touches a
//! socket or a clock, it shares their wire format ([`Header`], the MAC of
//! [`crate::wire::PacketKey`], the drop counts of [`crate::wire::decode_group`]), and its
//! tests run on a simulated network from a seed. The multicast socket that carries it is
//! in `bulkwire-link`, the collectives that use it above.
//!
//! # The protocol
//!
//! One [`Mcast`] per process serves every transfer of the group, as root of its own and
//! receiver of the others'. A transfer is `(root, id)`; a root numbers its transfers in
//! increasing order and sends them one at a time (the next starts when the last is
//! delivered), so a receiver tells a stale packet from a new transfer by the id alone.
//!
//! - **Data**: packet `seq` holds bytes `seq * frag ..` of the message; `aux` carries
//!   `frag`, `total` the length, so a receiver that missed the first packet still knows
//!   the transfer. The root sends each packet once to [`GROUP`].
//! - **Holes, aggregated NACKs.** A receiver that sees packet `s` after `h` knows that
//!   `h..s` are missing (a hole with its end, as the BSPlib paper's end-of-hole marks). It
//!   waits a delay drawn per rank and packet from `0..nack_delay` and then NACKs the hole
//!   (`seq..eoh`) to the whole group. Every receiver that hears the NACK for a hole it
//!   also has keeps quiet about it for `repair_wait` (suppression, as in SRM), so a hole
//!   that all receivers share costs about one NACK, not p - 1. A hole still open after
//!   `repair_wait` is asked for again.
//! - **Repair.** The root resends a NACKed packet to the group, or to the asker alone when
//!   every other receiver has acknowledged it (it knows each receiver's cumulative
//!   acknowledgement), and ignores NACKs for a packet it repaired less than
//!   `repair_wait / 2` ago (they crossed the repair).
//! - **Flow control: NACK with polling**, one of the schemes Lane, Daniels and Yuan
//!   compare for reliable multicast on switched Ethernet. The root may send packet `s`
//!   only when every live receiver has acknowledged `s - window`; it asks for cumulative
//!   acknowledgements by setting [`flags::ACK_REQ`] every `window / 4` packets and on the
//!   last one, and every receiver answers. Acknowledgements are thus a few per window
//!   (not one per packet, the ACK scheme's implosion), the root always knows the slowest
//!   receiver's progress (a rotating acknowledger would tell it one receiver at a time),
//!   and no receiver depends on another's forwarding (a ring or tree turns one slow or dead
//!   node into everyone's delay). The root never has more than `window` packets beyond
//!   the slowest receiver's acknowledgement, so sized to its receive buffer, it never
//!   outruns it.
//! - **Polls and liveness.** While a transfer is unacknowledged and nothing new goes out,
//!   the root sends a Prod to the group every `poll_interval`, carrying how far it has
//!   sent: receivers learn of a lost tail and answer with their acknowledgement. A live
//!   receiver answers however slow it is; one silent for `dead_after` is reported by rank
//!   ([`McastEvent::PeerDead`]) and the transfer completes without it. A receiver waiting
//!   ([`Mcast::expect`]) on a root it has not heard for `dead_after` reports the root.
//! - **Completion**: the root knows it when every live receiver's cumulative
//!   acknowledgement covers the message ([`McastEvent::Delivered`]) and tells the group
//!   (Fin); each receiver knows its own when it holds every packet
//!   ([`McastEvent::Received`]). A receiver that hears a Fin, or a later transfer of the
//!   same root, for a transfer it has not completed was given up on by the root
//!   ([`McastEvent::Abandoned`]).
//!
//! Nothing a packet says can make this panic or allocate beyond `max_message` per
//! transfer and `max_transfers` transfers: packets that contradict their transfer or the
//! protocol are counted ([`McastStats::bogus`]) and ignored.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::wire::{GROUP, Header, Kind, flags};
use crate::{MS, PeerDead, Rank, SEC, Time, Transmit, US};

/// Settings of a group's reliable multicast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McastConfig {
    /// Payload bytes per data packet (the link's datagram less the header).
    pub frag: usize,
    /// Packets the root may send beyond the slowest live receiver's acknowledgement: at
    /// most what a receiver's socket buffer holds.
    pub window: u32,
    /// A receiver NACKs a new hole after a delay drawn from `0..nack_delay`, so that the
    /// first NACK of a shared hole reaches the others before they send theirs.
    pub nack_delay: Time,
    /// After a NACK for a hole (its own or another's), how long a receiver waits for the
    /// repair before asking again.
    pub repair_wait: Time,
    /// The root's poll interval while nothing new goes out and a receiver is behind.
    pub poll_interval: Time,
    /// Silence after which a member we wait on is reported dead.
    pub dead_after: Time,
    /// Largest message received.
    pub max_message: u64,
    /// Most transfers held at once as receiver.
    pub max_transfers: usize,
}

impl McastConfig {
    /// Defaults for `frag` bytes per packet: a window of 64 packets, NACKs within 200 us,
    /// repairs awaited 2 ms, polls every 2 ms, death after 10 s.
    pub fn new(frag: usize) -> McastConfig {
        McastConfig {
            frag,
            window: 64,
            nack_delay: 200 * US,
            repair_wait: 2 * MS,
            poll_interval: 2 * MS,
            dead_after: 10 * SEC,
            max_message: 1 << 30,
            max_transfers: 64,
        }
    }

    /// Checks the settings, saying what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.frag == 0 || self.frag > u32::MAX as usize {
            return Err(format!(
                "{} bytes per packet: must be 1 to {}",
                self.frag,
                u32::MAX
            ));
        }
        if self.window < 4 {
            return Err(format!(
                "window of {} packets: must be at least 4",
                self.window
            ));
        }
        if self.repair_wait == 0 || self.poll_interval == 0 || self.dead_after == 0 {
            return Err("repair wait, poll interval and dead deadline must be above 0".into());
        }
        Ok(())
    }
}

/// What a group's multicast reports.
#[derive(Debug, PartialEq, Eq)]
pub enum McastEvent {
    /// This process holds the whole message `id` of `root`.
    Received { root: Rank, id: u32, data: Vec<u8> },
    /// Every receiver of this root's message `id` holds it, but those in `dead`, declared
    /// dead during the transfer.
    Delivered { id: u32, dead: Vec<Rank> },
    /// A member we waited on in transfer `(root, id)` stayed silent past the deadline.
    PeerDead { root: Rank, id: u32, dead: PeerDead },
    /// The root of transfer `id`, which this process has received, told the group that
    /// every receiver has it: nothing more is owed to it.
    Finished { root: Rank, id: u32 },
    /// The root ended transfer `id` before this process had all of it (it declared this
    /// process dead): the rest will not come.
    Abandoned { root: Rank, id: u32 },
}

/// Why [`Mcast::send`] refused a message.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum McastError {
    #[error("message of {len} bytes exceeds the multicast limit of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error("multicast transfer {id} is not after this root's last one ({last})")]
    StaleId { id: u32, last: u32 },
}

/// Counters of one process's multicast.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastStats {
    /// Data packets multicast first time, and their payload bytes.
    pub data_sent: u64,
    pub bytes_sent: u64,
    /// Repairs sent to the group and to one receiver.
    pub repairs_group: u64,
    pub repairs_unicast: u64,
    /// NACKs received by a root that it ignored (a repair was on its way).
    pub nacks_ignored: u64,
    /// Polls (prods) sent by a root.
    pub prods_sent: u64,
    /// Acknowledgements and NACKs sent by a receiver.
    pub acks_sent: u64,
    pub nacks_sent: u64,
    /// NACKs a receiver did not send because another receiver's NACK for the hole came
    /// first (one per packet kept quiet).
    pub nacks_suppressed: u64,
    /// Data packets received, and the duplicates among them.
    pub data_received: u64,
    pub duplicates: u64,
    /// Packets that contradict their transfer or the protocol, ignored.
    pub bogus: u64,
    /// Packets for another rank, or our own looped back, ignored.
    pub filtered: u64,
    /// Receivers declared dead.
    pub dead: u64,
}

/// A 64-bit mix (SplitMix64's finaliser): the NACK delays, spread by rank and packet
/// without a random number generator, so a run is the same from the same input.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The delay before `me` NACKs packet `s` of transfer `id`: drawn from `0..range`, a
/// different draw for each receiver, so that one NACK usually goes first and silences the
/// others.
fn spread(me: Rank, id: u32, s: u32, range: Time) -> Time {
    mix(((me as u64) << 32) ^ (s as u64) ^ ((id as u64) << 48)) % range.max(1)
}

/// Whether id `a` comes after `b` in a root's sequence (wrapping).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Packets of a message of `total` bytes in `frag`-byte pieces (one for an empty one).
fn packets(total: u64, frag: u64) -> Option<u32> {
    if frag == 0 {
        return None;
    }
    u32::try_from(total.div_ceil(frag).max(1)).ok()
}

struct Sending {
    id: u32,
    data: Bytes,
    npkts: u32,
    /// Next packet never sent.
    next: u32,
    /// Per rank: cumulative acknowledgement (packets below it held), last heard, dead.
    acked: Vec<u32>,
    heard: Vec<Time>,
    dead: Vec<bool>,
    /// When each packet was last repaired (0: never).
    sent_at: Vec<Time>,
    /// Repairs to send: packet and destination.
    repairs: VecDeque<(u32, Rank)>,
    /// When to poll next, unless something goes out before, and polls since progress.
    prod_at: Time,
    polls: u32,
}

struct Receiving {
    total: u64,
    frag: u64,
    npkts: u32,
    buf: Vec<u8>,
    have: Vec<bool>,
    count: u32,
    /// Cumulative: every packet below is held.
    next: u32,
    /// One past the highest packet known to have been sent.
    high: u32,
    /// Per packet: no NACK for it before this time.
    quiet: Vec<Time>,
    /// An acknowledgement is owed to the root.
    ack: bool,
    /// The cumulative point when we last NACKed, and how often since it has not moved.
    asked: u32,
    backoff: u32,
    /// Earliest NACK due, when known (recomputed after `quiet` changes).
    nack_at: Option<Option<Time>>,
}

impl Receiving {
    fn new(total: u64, frag: u64, npkts: u32) -> Receiving {
        Receiving {
            total,
            frag,
            npkts,
            buf: vec![0; total as usize],
            have: vec![false; npkts as usize],
            count: 0,
            next: 0,
            high: 0,
            quiet: vec![0; npkts as usize],
            ack: false,
            asked: u32::MAX,
            backoff: 0,
            nack_at: None,
        }
    }

    /// Packets up to `to` are known to have been sent: those beyond what was known become
    /// holes, NACKed after their delays.
    fn extend(&mut self, to: u32, now: Time, me: Rank, id: u32, nack_delay: Time) {
        let to = to.min(self.npkts);
        for s in self.high..to {
            self.quiet[s as usize] = now + spread(me, id, s, nack_delay);
        }
        if to > self.high {
            self.high = to;
            self.nack_at = None;
        }
    }

    fn nack_due(&mut self) -> Option<Time> {
        if self.nack_at.is_none() {
            self.nack_at = Some(
                (self.next..self.high)
                    .filter(|&s| !self.have[s as usize])
                    .map(|s| self.quiet[s as usize])
                    .min(),
            );
        }
        self.nack_at.flatten()
    }
}

/// One process's reliable multicast in its group (see the module's documentation).
pub struct Mcast {
    cfg: McastConfig,
    me: Rank,
    nprocs: u32,
    /// Our transfers as root: the one going, then those waiting their turn.
    sending: Option<Sending>,
    queued: VecDeque<(u32, Bytes)>,
    last_id: Option<u32>,
    /// Transfers we receive, by root and id.
    receiving: BTreeMap<(Rank, u32), Receiving>,
    /// Per root: the last transfer completed here (later packets of it or before are stale).
    done_upto: Vec<Option<u32>>,
    /// Transfers the layer above waits for, since when.
    waits: BTreeMap<(Rank, u32), Time>,
    /// Per rank: when we last heard from it.
    heard: Vec<Time>,
    /// Acknowledgements of completed transfers owed: root, id, packets.
    reacks: VecDeque<(Rank, u32, u32)>,
    /// Control packets ready to go.
    ctl: VecDeque<Transmit>,
    events: VecDeque<McastEvent>,
    stats: McastStats,
}

impl Mcast {
    /// Process `me` of a group of ranks `0..nprocs`.
    pub fn new(cfg: McastConfig, me: Rank, nprocs: u32) -> Result<Mcast, String> {
        cfg.validate()?;
        if me >= nprocs || nprocs == GROUP {
            return Err(format!("rank {me} is not in a group of {nprocs}"));
        }
        Ok(Mcast {
            cfg,
            me,
            nprocs,
            sending: None,
            queued: VecDeque::new(),
            last_id: None,
            receiving: BTreeMap::new(),
            done_upto: vec![None; nprocs as usize],
            waits: BTreeMap::new(),
            heard: vec![0; nprocs as usize],
            reacks: VecDeque::new(),
            ctl: VecDeque::new(),
            events: VecDeque::new(),
            stats: McastStats::default(),
        })
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    pub fn stats(&self) -> McastStats {
        self.stats
    }

    pub fn config(&self) -> &McastConfig {
        &self.cfg
    }

    /// Sends `data` to every other member as transfer `id`, which must come after this
    /// root's previous one. It starts when the transfers before it are delivered.
    pub fn send(&mut self, now: Time, id: u32, data: Bytes) -> Result<(), McastError> {
        if data.len() as u64 > self.cfg.max_message
            || packets(data.len() as u64, self.cfg.frag as u64).is_none()
        {
            return Err(McastError::TooLarge {
                len: data.len() as u64,
                max: self.cfg.max_message,
            });
        }
        if let Some(last) = self.last_id
            && !after(id, last)
        {
            return Err(McastError::StaleId { id, last });
        }
        self.last_id = Some(id);
        self.queued.push_back((id, data));
        self.start_next(now);
        Ok(())
    }

    fn start_next(&mut self, now: Time) {
        while self.sending.is_none() {
            let Some((id, data)) = self.queued.pop_front() else {
                return;
            };
            self.start(now, id, data);
            // A group of one has no one to wait for.
            self.finish_if_delivered();
        }
    }

    fn start(&mut self, now: Time, id: u32, data: Bytes) {
        let n = self.nprocs as usize;
        let npkts = packets(data.len() as u64, self.cfg.frag as u64).unwrap_or(1);
        let mut acked = vec![0; n];
        acked[self.me as usize] = npkts;
        let s = Sending {
            id,
            data,
            npkts,
            next: 0,
            acked,
            heard: vec![now; n],
            dead: vec![false; n],
            sent_at: vec![0; npkts as usize],
            repairs: VecDeque::new(),
            prod_at: now + self.cfg.poll_interval,
            polls: 0,
        };
        self.sending = Some(s);
    }

    /// The layer above waits for transfer `id` of `root`: from now, a silent root is
    /// reported dead after the deadline. Ends with its Received, PeerDead or Abandoned.
    pub fn expect(&mut self, now: Time, root: Rank, id: u32) {
        if root >= self.nprocs || root == self.me {
            return;
        }
        if self.done_upto[root as usize].is_some_and(|d| !after(id, d)) {
            return;
        }
        self.waits.entry((root, id)).or_insert(now);
    }

    /// Whether this process still sends or holds a transfer as root.
    pub fn sending(&self) -> bool {
        self.sending.is_some() || !self.queued.is_empty()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<McastEvent> {
        self.events.pop_front()
    }

    /// Takes in one verified packet of the group (the MAC checked, addressed to this rank
    /// or the group).
    pub fn handle(&mut self, now: Time, hdr: &Header, payload: &[u8]) {
        if hdr.src == self.me || hdr.src >= self.nprocs || (hdr.dst != GROUP && hdr.dst != self.me)
        {
            self.stats.filtered += 1;
            return;
        }
        self.heard[hdr.src as usize] = now;
        match hdr.kind {
            Kind::Data => self.on_data(now, hdr, payload),
            Kind::Prod => self.on_prod(now, hdr),
            Kind::Ack | Kind::Nack => self.on_feedback(now, hdr),
            Kind::Fin => self.on_fin(hdr),
            _ => self.stats.bogus += 1,
        }
    }

    /// The receiving transfer `(root, id)` a packet describing a message of `total` bytes
    /// in `frag`-byte pieces belongs to, created if new; `None` when the packet is stale
    /// (an acknowledgement is queued if `ack`) or contradicts what is known.
    fn transfer(
        &mut self,
        root: Rank,
        id: u32,
        total: u64,
        frag: u64,
        ack: bool,
    ) -> Option<&mut Receiving> {
        let Some(npkts) = packets(total, frag) else {
            self.stats.bogus += 1;
            return None;
        };
        if self.done_upto[root as usize].is_some_and(|d| !after(id, d)) {
            if ack && self.reacks.len() < self.nprocs as usize * 4 {
                self.reacks.push_back((root, id, npkts));
            }
            return None;
        }
        if !self.receiving.contains_key(&(root, id)) {
            if total > self.cfg.max_message || frag != self.cfg.frag as u64 {
                self.stats.bogus += 1;
                return None;
            }
            // A root sends one transfer at a time: an older one it left unfinished here
            // was given up on.
            let older: Vec<(Rank, u32)> = self
                .receiving
                .range((root, 0)..=(root, u32::MAX))
                .map(|(k, _)| *k)
                .filter(|k| after(id, k.1))
                .collect();
            for k in older {
                self.abandon(k.0, k.1);
            }
            if self.receiving.len() >= self.cfg.max_transfers {
                self.stats.bogus += 1;
                return None;
            }
            self.receiving
                .insert((root, id), Receiving::new(total, frag, npkts));
        }
        let r = self.receiving.get_mut(&(root, id))?;
        if r.total != total || r.frag != frag {
            self.stats.bogus += 1;
            return None;
        }
        Some(r)
    }

    fn abandon(&mut self, root: Rank, id: u32) {
        if self.receiving.remove(&(root, id)).is_some() || self.waits.contains_key(&(root, id)) {
            self.waits.remove(&(root, id));
            self.events.push_back(McastEvent::Abandoned { root, id });
        }
    }

    fn on_data(&mut self, now: Time, hdr: &Header, payload: &[u8]) {
        self.stats.data_received += 1;
        let (me, nack_delay) = (self.me, self.cfg.nack_delay);
        let ack = hdr.has(flags::ACK_REQ);
        let Some(r) = self.transfer(hdr.src, hdr.msg, hdr.total, hdr.aux as u64, ack) else {
            return;
        };
        let s = hdr.seq;
        let start = (s as u64).saturating_mul(r.frag);
        let want = r.total.saturating_sub(start).min(r.frag);
        if s >= r.npkts || hdr.offset != start || payload.len() as u64 != want {
            self.stats.bogus += 1;
            return;
        }
        r.extend(s, now, me, hdr.msg, nack_delay);
        r.high = r.high.max(s + 1);
        if ack {
            r.ack = true;
        }
        if r.have[s as usize] {
            self.stats.duplicates += 1;
            return;
        }
        r.have[s as usize] = true;
        r.buf[start as usize..start as usize + payload.len()].copy_from_slice(payload);
        r.count += 1;
        while r.next < r.npkts && r.have[r.next as usize] {
            r.next += 1;
        }
        r.nack_at = None;
        if r.count == r.npkts {
            self.complete(hdr.src, hdr.msg);
        }
    }

    fn complete(&mut self, root: Rank, id: u32) {
        let Some(r) = self.receiving.remove(&(root, id)) else {
            return;
        };
        self.done_upto[root as usize] = Some(id);
        self.waits.remove(&(root, id));
        self.reacks.push_back((root, id, r.npkts));
        self.events.push_back(McastEvent::Received {
            root,
            id,
            data: r.buf,
        });
    }

    fn on_prod(&mut self, now: Time, hdr: &Header) {
        let (me, nack_delay) = (self.me, self.cfg.nack_delay);
        let Some(r) = self.transfer(hdr.src, hdr.msg, hdr.total, hdr.aux as u64, true) else {
            return;
        };
        if hdr.seq > r.npkts {
            self.stats.bogus += 1;
            return;
        }
        r.extend(hdr.seq, now, me, hdr.msg, nack_delay);
        r.ack = true;
    }

    fn on_fin(&mut self, hdr: &Header) {
        let (root, id) = (hdr.src, hdr.msg);
        if self.receiving.contains_key(&(root, id)) {
            self.abandon(root, id);
            self.done_upto[root as usize] = Some(id);
        } else if self.done_upto[root as usize] == Some(id) {
            self.events.push_back(McastEvent::Finished { root, id });
        }
    }

    /// An Ack or a NACK: for the root when it names us, else a NACK another receiver sent
    /// for a hole we may share.
    fn on_feedback(&mut self, now: Time, hdr: &Header) {
        let root = hdr.aux;
        if root == self.me {
            self.on_feedback_as_root(now, hdr);
            return;
        }
        if hdr.kind != Kind::Nack || root >= self.nprocs {
            if hdr.kind == Kind::Ack {
                // An acknowledgement to another root, over the group: not ours.
                self.stats.filtered += 1;
            } else {
                self.stats.bogus += 1;
            }
            return;
        }
        let wait = self.cfg.repair_wait;
        let Some(r) = self.receiving.get_mut(&(root, hdr.msg)) else {
            return;
        };
        let end = hdr.eoh.min(r.high);
        let mut quieted = 0;
        for s in hdr.seq.max(r.next)..end {
            if !r.have[s as usize] && r.quiet[s as usize] < now + wait {
                if r.quiet[s as usize] > now {
                    quieted += 1;
                }
                r.quiet[s as usize] = now + wait;
            }
        }
        r.nack_at = None;
        self.stats.nacks_suppressed += quieted;
    }

    fn on_feedback_as_root(&mut self, now: Time, hdr: &Header) {
        let r = hdr.src as usize;
        let wait = self.cfg.repair_wait;
        let Some(t) = self.sending.as_mut().filter(|t| t.id == hdr.msg) else {
            return;
        };
        t.heard[r] = now;
        if hdr.ack > t.next {
            self.stats.bogus += 1;
            return;
        }
        if hdr.ack > t.acked[r] {
            t.acked[r] = hdr.ack;
            t.polls = 0;
        }
        if hdr.kind == Kind::Nack {
            if hdr.seq >= hdr.eoh || hdr.eoh > t.next {
                self.stats.bogus += 1;
                return;
            }
            // At most a window's worth per NACK: more is never outstanding.
            let end = hdr.eoh.min(hdr.seq.saturating_add(self.cfg.window));
            for s in hdr.seq.max(t.acked[r])..end {
                // Zero for a packet sent once: a NACK for it is never early.
                let last = t.sent_at[s as usize];
                if last != 0 && last + wait / 2 > now {
                    self.stats.nacks_ignored += 1;
                    continue;
                }
                let alone = (0..t.acked.len())
                    .filter(|&o| o != r && !t.dead[o])
                    .all(|o| t.acked[o] > s);
                if t.repairs.iter().any(|&(q, _)| q == s) {
                    continue;
                }
                t.repairs
                    .push_back((s, if alone { hdr.src } else { GROUP }));
                t.sent_at[s as usize] = now.max(1);
            }
        }
        if self.finish_if_delivered() {
            self.start_next(now);
        }
    }

    /// Ends the transfer going when every live receiver holds it; whether it did.
    fn finish_if_delivered(&mut self) -> bool {
        let Some(t) = &self.sending else {
            return false;
        };
        let done = (0..t.acked.len()).all(|r| t.dead[r] || t.acked[r] >= t.npkts);
        if !done {
            return false;
        }
        let t = self.sending.take().expect("checked above");
        let dead = (0..t.dead.len() as Rank)
            .filter(|&r| t.dead[r as usize])
            .collect();
        let mut fin = Header::new(Kind::Fin);
        fin.src = self.me;
        fin.dst = GROUP;
        fin.msg = t.id;
        if self.nprocs > 1 {
            self.ctl.push_back(Transmit {
                hdr: fin,
                payload: Bytes::new(),
            });
        }
        self.events
            .push_back(McastEvent::Delivered { id: t.id, dead });
        true
    }

    /// Appends packets to send now to `out`, at most `max`: control packets first, then
    /// NACKs and acknowledgements, then repairs, then new data within the window.
    pub fn poll_transmit(&mut self, now: Time, out: &mut Vec<Transmit>, max: usize) {
        let limit = out.len().saturating_add(max);
        while out.len() < limit {
            let Some(t) = self.ctl.pop_front() else { break };
            out.push(t);
        }
        self.feedback(now, out, limit);
        let me = self.me;
        let (frag, window) = (self.cfg.frag as u64, self.cfg.window);
        let poll_every = (window / 4).max(1);
        let Some(t) = self.sending.as_mut() else {
            return;
        };
        let data_packet = |t: &Sending, s: u32, dst: Rank, again: bool| {
            let start = s as u64 * frag;
            let end = (start + frag).min(t.data.len() as u64);
            let mut h = Header::new(Kind::Data);
            h.src = me;
            h.dst = dst;
            h.msg = t.id;
            h.seq = s;
            h.offset = start;
            h.total = t.data.len() as u64;
            h.aux = frag as u32;
            if s == 0 {
                h.flags |= flags::FIRST;
            }
            if s + 1 == t.npkts {
                h.flags |= flags::LAST | flags::ACK_REQ;
            }
            if (s + 1).is_multiple_of(poll_every) {
                h.flags |= flags::ACK_REQ;
            }
            if again {
                h.flags |= flags::RETRANSMIT;
            }
            Transmit {
                hdr: h,
                payload: t.data.slice(start as usize..end as usize),
            }
        };
        let mut sent = false;
        while out.len() < limit {
            let Some((s, dst)) = t.repairs.pop_front() else {
                break;
            };
            out.push(data_packet(t, s, dst, true));
            if dst == GROUP {
                self.stats.repairs_group += 1;
                sent = true;
            } else {
                self.stats.repairs_unicast += 1;
            }
        }
        let floor = (0..t.acked.len())
            .filter(|&r| !t.dead[r])
            .map(|r| t.acked[r])
            .min()
            .unwrap_or(t.npkts);
        let until = t.npkts.min(floor.saturating_add(window));
        while out.len() < limit && t.next < until {
            let s = t.next;
            out.push(data_packet(t, s, GROUP, false));
            t.next += 1;
            self.stats.data_sent += 1;
            self.stats.bytes_sent += out.last().map_or(0, |p| p.payload.len() as u64);
            sent = true;
        }
        if sent {
            t.prod_at = now + self.cfg.poll_interval;
            t.polls = 0;
        }
    }

    /// A receiver's acknowledgements and due NACKs.
    fn feedback(&mut self, now: Time, out: &mut Vec<Transmit>, limit: usize) {
        let me = self.me;
        while out.len() < limit {
            let Some((root, id, n)) = self.reacks.pop_front() else {
                break;
            };
            out.push(ack_packet(me, root, id, n, n));
            self.stats.acks_sent += 1;
        }
        let (wait, nack_delay) = (self.cfg.repair_wait, self.cfg.nack_delay);
        for (&(root, id), r) in self.receiving.iter_mut() {
            if out.len() >= limit {
                break;
            }
            if r.nack_due().is_some_and(|t| t <= now) {
                // Each run of missing packets due for a NACK, as one hole.
                let mut s = r.next;
                while s < r.high && out.len() < limit {
                    let due =
                        |r: &Receiving, s: u32| !r.have[s as usize] && r.quiet[s as usize] <= now;
                    if !due(r, s) {
                        s += 1;
                        continue;
                    }
                    let a = s;
                    // Each NACK that did not bring the hole's start doubles the next
                    // wait (up to 64 times): a receiver whose buffer holds many packets
                    // sees repairs late and must not ask again and again meanwhile.
                    if r.quiet[a as usize] != 0 && r.asked == r.next {
                        r.backoff = (r.backoff + 1).min(6);
                    } else {
                        r.backoff = 0;
                    }
                    r.asked = r.next;
                    while s < r.high && due(r, s) {
                        r.quiet[s as usize] =
                            now + (wait << r.backoff) + spread(me, id, s, nack_delay);
                        s += 1;
                    }
                    let mut h = ack_packet(me, root, id, r.next, r.high).hdr;
                    h.kind = Kind::Nack;
                    h.dst = GROUP;
                    h.seq = a;
                    h.eoh = s;
                    out.push(Transmit {
                        hdr: h,
                        payload: Bytes::new(),
                    });
                    self.stats.nacks_sent += 1;
                    r.ack = false;
                }
                r.nack_at = None;
            }
            if r.ack && out.len() < limit {
                out.push(ack_packet(me, root, id, r.next, r.high));
                self.stats.acks_sent += 1;
                r.ack = false;
            }
        }
    }

    /// The earliest time at which [`Mcast::handle_timeout`] has work to do.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        let dead = self.cfg.dead_after;
        let mut t = self.sending.as_ref().map(|s| {
            let silent = (0..s.acked.len())
                .filter(|&r| !s.dead[r] && s.acked[r] < s.npkts)
                .map(|r| s.heard[r] + dead)
                .min();
            silent.map_or(s.prod_at, |d| d.min(s.prod_at))
        });
        let mut at = |x: Time| t = Some(t.map_or(x, |t: Time| t.min(x)));
        for r in self.receiving.values_mut() {
            if let Some(n) = r.nack_due() {
                at(n);
            }
        }
        for (&(root, _), &since) in &self.waits {
            at(self.heard[root as usize].max(since) + dead);
        }
        t
    }

    /// Runs the timers due at `now`: polls, deaths. (NACKs that are due go out on the
    /// next [`Mcast::poll_transmit`].)
    pub fn handle_timeout(&mut self, now: Time) {
        let dead_after = self.cfg.dead_after;
        let me = self.me;
        if let Some(t) = self.sending.as_mut() {
            for r in 0..t.acked.len() {
                if !t.dead[r] && t.acked[r] < t.npkts && t.heard[r] + dead_after <= now {
                    t.dead[r] = true;
                    self.stats.dead += 1;
                    self.events.push_back(McastEvent::PeerDead {
                        root: me,
                        id: t.id,
                        dead: PeerDead {
                            peer: r as Rank,
                            silent_for: now - t.heard[r],
                        },
                    });
                }
            }
            if t.prod_at <= now {
                let mut h = Header::new(Kind::Prod);
                h.src = me;
                h.dst = GROUP;
                h.msg = t.id;
                h.seq = t.next;
                h.total = t.data.len() as u64;
                h.aux = self.cfg.frag as u32;
                h.flags = flags::ACK_REQ;
                self.ctl.push_back(Transmit {
                    hdr: h,
                    payload: Bytes::new(),
                });
                self.stats.prods_sent += 1;
                // Back off while no one answers with progress, up to an eighth of the
                // deadline: a live receiver still hears eight polls before it, and a
                // slow one is not buried in them.
                t.polls += 1;
                let back = self.cfg.poll_interval << t.polls.min(16);
                t.prod_at = now
                    + back
                        .min(self.cfg.dead_after / 8)
                        .max(self.cfg.poll_interval);
            }
            if self.finish_if_delivered() {
                self.start_next(now);
            }
        }
        let late: Vec<((Rank, u32), Time)> = self
            .waits
            .iter()
            .map(|(&k, &since)| (k, self.heard[k.0 as usize].max(since)))
            .filter(|&(_, last)| last + dead_after <= now)
            .collect();
        for ((root, id), last) in late {
            self.waits.remove(&(root, id));
            self.receiving.remove(&(root, id));
            self.events.push_back(McastEvent::PeerDead {
                root,
                id,
                dead: PeerDead {
                    peer: root,
                    silent_for: now - last,
                },
            });
        }
    }
}

/// A receiver's cumulative acknowledgement of `root`'s transfer `id`.
fn ack_packet(me: Rank, root: Rank, id: u32, next: u32, high: u32) -> Transmit {
    let mut h = Header::new(Kind::Ack);
    h.src = me;
    h.dst = root;
    h.msg = id;
    h.ack = next;
    h.eoh = high;
    h.aux = root;
    Transmit {
        hdr: h,
        payload: Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Cover, DropCounts, DropReason, Filter, PacketKey, decode_group};
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const COOKIE: u32 = 0x5eed;

    /// A receiver that takes one packet every `service` ns from a queue of `capacity`,
    /// as a process reading its socket buffer slowly; what overflows is lost.
    struct Slow {
        service: Time,
        capacity: usize,
        queue: VecDeque<Vec<u8>>,
        next_at: Time,
        overflow: u64,
    }

    /// A group on a simulated switch: every datagram is encoded with the job's MAC, copied
    /// to each member it is for (all others for [`GROUP`]), each copy lost, corrupted and
    /// delayed on its own; forged datagrams are mixed in.
    struct Net {
        g: Vec<Mcast>,
        now: Time,
        wire: Vec<(Time, u64, usize, Vec<u8>)>,
        n: u64,
        rng: ChaCha8Rng,
        key: PacketKey,
        latency: Time,
        jitter: Time,
        /// Each copy is lost with this chance; or the packet, for all, at the sender.
        loss: f64,
        source_loss: f64,
        corrupt: f64,
        forge: f64,
        /// Copies damaged or forged on the way, that decoding must refuse.
        injected: u64,
        drops: DropCounts,
        /// A member that stops at the time given: sends and hears nothing more.
        dead: Option<(usize, Time)>,
        slow: Option<(usize, Slow)>,
        events: Vec<Vec<McastEvent>>,
        /// Payload bytes that crossed the wire, and packets.
        wire_bytes: u64,
        packets: u64,
    }

    fn cfg() -> McastConfig {
        let mut c = McastConfig::new(1000);
        c.window = 32;
        c.nack_delay = 100 * US;
        c.repair_wait = MS;
        c.poll_interval = MS;
        c.dead_after = 200 * MS;
        c
    }

    impl Net {
        fn new(p: u32, c: McastConfig, seed: u64) -> Net {
            Net {
                g: (0..p)
                    .map(|r| Mcast::new(c.clone(), r, p).unwrap())
                    .collect(),
                now: 0,
                wire: Vec::new(),
                n: 0,
                rng: ChaCha8Rng::seed_from_u64(seed),
                key: PacketKey::new([9; 32]),
                latency: 20 * US,
                jitter: 0,
                loss: 0.0,
                source_loss: 0.0,
                corrupt: 0.0,
                forge: 0.0,
                injected: 0,
                drops: DropCounts::default(),
                dead: None,
                slow: None,
                events: (0..p).map(|_| Vec::new()).collect(),
                wire_bytes: 0,
                packets: 0,
            }
        }

        fn alive(&self, i: usize) -> bool {
            self.dead.is_none_or(|(d, t)| d != i || self.now < t)
        }

        fn put(&mut self, to: usize, d: Vec<u8>) {
            let at = self.now + self.latency + self.rng.random_range(0..=self.jitter);
            self.wire.push((at, self.n, to, d));
            self.n += 1;
        }

        fn transmit(&mut self, from: usize) {
            if !self.alive(from) {
                return;
            }
            let mut out = Vec::new();
            self.g[from].poll_transmit(self.now, &mut out, usize::MAX);
            for t in out {
                let mut h = t.hdr;
                h.cookie = COOKIE;
                let mut d = h.encode_mac(&t.payload, &self.key, Cover::Payload).to_vec();
                d.extend_from_slice(&t.payload);
                self.packets += 1;
                self.wire_bytes += t.payload.len() as u64;
                if self.rng.random_bool(self.source_loss) {
                    continue;
                }
                let to: Vec<usize> = if h.dst == GROUP {
                    (0..self.g.len()).filter(|&i| i != from).collect()
                } else {
                    vec![h.dst as usize]
                };
                for i in to {
                    if self.rng.random_bool(self.loss) {
                        continue;
                    }
                    let mut c = d.clone();
                    if self.rng.random_bool(self.corrupt) {
                        let bit = self.rng.random_range(0..c.len() * 8);
                        c[bit / 8] ^= 1 << (bit % 8);
                        self.injected += 1;
                    }
                    self.put(i, c);
                    if self.rng.random_bool(self.forge) {
                        // Another key's packet, a spliced payload, or noise.
                        let f = match self.rng.random_range(0..3) {
                            0 => {
                                let k = PacketKey::new([1; 32]);
                                let mut f = h.encode_mac(&t.payload, &k, Cover::Payload).to_vec();
                                f.extend_from_slice(&t.payload);
                                f
                            }
                            1 => {
                                let mut f = d.clone();
                                f.extend_from_slice(b"x");
                                let n = f.len();
                                f[36..40].copy_from_slice(&((n - 64) as u32).to_le_bytes());
                                f
                            }
                            _ => (0..self.rng.random_range(0..200))
                                .map(|_| self.rng.random())
                                .collect(),
                        };
                        self.injected += 1;
                        self.put(i, f);
                    }
                }
            }
        }

        fn deliver(&mut self, to: usize, d: &[u8]) {
            let f = Filter {
                cookie: COOKIE,
                me: to as Rank,
                nprocs: self.g.len() as u32,
            };
            match decode_group(d, &f, &self.key) {
                Ok((h, p)) => self.g[to].handle(self.now, &h, p),
                Err(r) => self.drops.count(r),
            }
        }

        fn next(&mut self) -> Option<Time> {
            let mut t: Option<Time> = self.wire.iter().map(|w| w.0).min();
            for i in 0..self.g.len() {
                if self.alive(i)
                    && let Some(x) = self.g[i].poll_timeout()
                {
                    t = Some(t.map_or(x, |t| t.min(x)));
                }
            }
            if let Some((_, s)) = &self.slow
                && !s.queue.is_empty()
            {
                t = Some(t.map_or(s.next_at, |t| t.min(s.next_at)));
            }
            t
        }

        /// One step: time moves to the next thing to happen.
        fn step(&mut self) -> bool {
            let Some(t) = self.next() else { return false };
            self.now = self.now.max(t);
            self.wire.sort_by_key(|w| (w.0, w.1));
            let k = self.wire.partition_point(|w| w.0 <= self.now);
            for (_, _, to, d) in self.wire.drain(..k).collect::<Vec<_>>() {
                if !self.alive(to) {
                    continue;
                }
                match &mut self.slow {
                    Some((i, s)) if *i == to => {
                        if s.queue.len() >= s.capacity {
                            s.overflow += 1;
                        } else {
                            if s.queue.is_empty() {
                                s.next_at = s.next_at.max(self.now);
                            }
                            s.queue.push_back(d);
                        }
                    }
                    _ => self.deliver(to, &d),
                }
            }
            if let Some((i, s)) = &mut self.slow
                && s.next_at <= self.now
                && let Some(d) = s.queue.pop_front()
            {
                s.next_at = self.now + s.service;
                let i = *i;
                self.deliver(i, &d);
            }
            for i in 0..self.g.len() {
                if !self.alive(i) {
                    continue;
                }
                if self.g[i].poll_timeout().is_some_and(|x| x <= self.now) {
                    self.g[i].handle_timeout(self.now);
                }
                self.transmit(i);
                while let Some(e) = self.g[i].poll_event() {
                    self.events[i].push(e);
                }
            }
            true
        }

        /// Runs until `done` or `limit` of virtual time has passed; panics if nothing
        /// more can happen first (a hang).
        fn run(&mut self, limit: Time, done: impl Fn(&Net) -> bool) {
            let start = self.now;
            while !done(self) {
                assert!(
                    self.step(),
                    "nothing left to happen at {} us",
                    self.now / US
                );
                assert!(
                    self.now - start <= limit,
                    "not done after {} ms: {:?}",
                    limit / MS,
                    self.g.iter().map(|g| g.stats()).collect::<Vec<_>>()
                );
            }
        }

        fn received(&self, i: usize, root: Rank, id: u32) -> Option<&Vec<u8>> {
            self.events[i].iter().find_map(|e| match e {
                McastEvent::Received {
                    root: r,
                    id: d,
                    data,
                } if *r == root && *d == id => Some(data),
                _ => None,
            })
        }

        fn delivered(&self, root: usize, id: u32) -> Option<&Vec<Rank>> {
            self.events[root].iter().find_map(|e| match e {
                McastEvent::Delivered { id: d, dead } if *d == id => Some(dead),
                _ => None,
            })
        }

        fn total_stats(&self) -> McastStats {
            let mut s = McastStats::default();
            for g in &self.g {
                let x = g.stats();
                s.data_sent += x.data_sent;
                s.repairs_group += x.repairs_group;
                s.repairs_unicast += x.repairs_unicast;
                s.nacks_sent += x.nacks_sent;
                s.nacks_suppressed += x.nacks_suppressed;
                s.acks_sent += x.acks_sent;
                s.prods_sent += x.prods_sent;
                s.bogus += x.bogus;
                s.dead += x.dead;
            }
            s
        }
    }

    fn message(n: usize, salt: u8) -> Bytes {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect::<Vec<_>>()
            .into()
    }

    /// Broadcasts a message of `n` bytes from `root` and checks that everyone got it whole
    /// and the root knows it; returns the stats.
    fn broadcast(net: &mut Net, root: usize, id: u32, n: usize, limit: Time) -> McastStats {
        let data = message(n, id as u8);
        let now = net.now;
        net.g[root].send(now, id, data.clone()).unwrap();
        for i in 0..net.g.len() {
            if i != root {
                net.g[i].expect(now, root as Rank, id);
            }
        }
        net.run(limit, |net| net.delivered(root, id).is_some());
        // The root knows only once every receiver has acknowledged everything.
        for i in (0..net.g.len()).filter(|&i| i != root) {
            let got = net.received(i, root as Rank, id).unwrap_or_else(|| {
                panic!(
                    "rank {i} lacks {id}: {:?} {:?}",
                    net.events[root],
                    net.g[i].stats()
                )
            });
            assert!(got[..] == data[..], "rank {i}: message {id} corrupted");
        }
        assert_eq!(net.delivered(root, id), Some(&vec![]));
        net.total_stats()
    }

    #[test]
    fn lossless_broadcast_sends_each_packet_once() {
        let mut net = Net::new(8, cfg(), 1);
        let s = broadcast(&mut net, 3, 1, 100_500, 100 * MS);
        assert_eq!(s.data_sent, 101);
        assert_eq!(
            (s.repairs_group, s.repairs_unicast, s.nacks_sent),
            (0, 0, 0)
        );
        assert_eq!(net.wire_bytes, 100_500, "one transmission of the message");
        // Acknowledgements: a few per window from each receiver, not one per packet.
        assert!(s.acks_sent <= 7 * (101 / 8 + 2), "{} acks", s.acks_sent);
        // Every receiver knows its completion; the group learns the root's by the Fin.
        assert_eq!(net.drops.total(), 0);
    }

    #[test]
    fn empty_and_one_byte_messages_and_a_group_of_one() {
        let mut net = Net::new(4, cfg(), 2);
        broadcast(&mut net, 0, 1, 0, 100 * MS);
        broadcast(&mut net, 0, 2, 1, 100 * MS);
        broadcast(&mut net, 2, 1, 1000, 100 * MS);
        let mut one = Mcast::new(cfg(), 0, 1).unwrap();
        one.send(0, 7, message(5000, 1)).unwrap();
        assert_eq!(
            one.poll_event(),
            Some(McastEvent::Delivered {
                id: 7,
                dead: vec![]
            })
        );
        assert!(!one.sending());
    }

    #[test]
    fn one_percent_loss_is_repaired() {
        for seed in 0..4 {
            let mut net = Net::new(8, cfg(), 10 + seed);
            net.loss = 0.01;
            let s = broadcast(&mut net, 0, 1, 1 << 20, 2 * SEC);
            assert!(
                s.repairs_group + s.repairs_unicast > 0,
                "seed {seed}: no loss?"
            );
            // Repairs stay a few percent of the message.
            let pkts = (1u64 << 20).div_ceil(1000);
            assert!(
                s.repairs_group + s.repairs_unicast < pkts / 10,
                "seed {seed}: {s:?}"
            );
        }
    }

    #[test]
    fn ten_percent_loss_with_reordering() {
        for seed in 0..3 {
            let mut net = Net::new(6, cfg(), 20 + seed);
            net.loss = 0.10;
            net.jitter = 300 * US;
            broadcast(&mut net, 5, 1, 300_000, 5 * SEC);
            broadcast(&mut net, 5, 2, 50_000, 5 * SEC);
            broadcast(&mut net, 1, 1, 80_000, 5 * SEC);
        }
    }

    #[test]
    fn a_hole_shared_by_every_receiver_is_nacked_about_once() {
        // Packets lost at the root's port: every receiver has the same holes.
        let mut net = Net::new(9, cfg(), 30);
        net.source_loss = 0.02;
        let s = broadcast(&mut net, 0, 1, 1 << 20, 2 * SEC);
        let holes = s.repairs_group + s.repairs_unicast;
        assert!(holes > 5, "{s:?}");
        // Without suppression, 8 receivers would NACK each hole 8 times.
        assert!(
            s.nacks_sent * 2 <= holes * 8,
            "{} NACKs for {holes} repairs: {s:?}",
            s.nacks_sent
        );
        assert!(s.nacks_suppressed > 0, "{s:?}");
        // A hole all share is repaired once, to the group.
        assert!(s.repairs_group >= s.repairs_unicast, "{s:?}");
    }

    #[test]
    fn a_hole_of_one_receiver_is_repaired_to_it_alone() {
        let mut net = Net::new(4, cfg(), 31);
        // Loss on one receiver's port only.
        let data = message(200_000, 3);
        net.g[0].send(0, 1, data.clone()).unwrap();
        let mut n = 0;
        while net.delivered(0, 1).is_none() {
            // Drop every 17th copy bound for rank 2.
            net.wire.retain(|w| {
                if w.2 == 2 && w.3.len() > 1000 {
                    n += 1;
                    n % 17 != 0
                } else {
                    true
                }
            });
            assert!(net.step());
            assert!(net.now < SEC);
        }
        for i in 1..4 {
            assert_eq!(net.received(i, 0, 1).unwrap()[..], data[..]);
        }
        let s = net.g[0].stats();
        assert!(s.repairs_unicast > 0, "{s:?}");
        assert!(s.repairs_unicast > s.repairs_group, "{s:?}");
    }

    #[test]
    fn forged_and_corrupt_packets_are_counted_and_dropped() {
        let mut net = Net::new(5, cfg(), 40);
        net.corrupt = 0.02;
        net.forge = 0.02;
        net.loss = 0.01;
        broadcast(&mut net, 2, 1, 500_000, 2 * SEC);
        while !net.wire.is_empty() {
            net.step();
        }
        assert!(net.injected > 50);
        assert_eq!(net.drops.total(), net.injected, "{:?}", net.drops);
        assert!(net.drops.get(DropReason::Mac) > 0);
    }

    #[test]
    fn the_root_never_outruns_a_slow_receiver() {
        let c = cfg();
        let mut net = Net::new(6, c.clone(), 50);
        // Rank 4 reads a packet every 100 us (10 MB/s), from a buffer of a window and a
        // few more.
        net.slow = Some((
            4,
            Slow {
                service: 100 * US,
                capacity: c.window as usize + 4,
                queue: VecDeque::new(),
                next_at: 0,
                overflow: 0,
            },
        ));
        broadcast(&mut net, 0, 1, 400_000, 2 * SEC);
        let slow = &net.slow.as_ref().unwrap().1;
        assert_eq!(slow.overflow, 0, "the slow receiver's buffer overflowed");
        assert!(net.now >= 400 * 100 * US, "paced by the slow receiver");
        assert_eq!(net.g[0].stats().dead, 0, "a slow receiver is alive");
    }

    #[test]
    fn a_very_slow_receiver_is_never_called_dead() {
        let mut c = cfg();
        c.dead_after = 50 * MS;
        let mut net = Net::new(3, c.clone(), 51);
        net.loss = 0.01;
        // A packet every 1 ms: the message takes four times the dead deadline.
        net.slow = Some((
            1,
            Slow {
                service: MS,
                capacity: c.window as usize + 8,
                queue: VecDeque::new(),
                next_at: 0,
                overflow: 0,
            },
        ));
        broadcast(&mut net, 0, 1, 100_000, 5 * SEC);
        assert_eq!(net.g[0].stats().dead, 0);
    }

    #[test]
    fn a_dead_receiver_is_named_and_the_rest_complete() {
        let mut net = Net::new(5, cfg(), 60);
        net.loss = 0.01;
        net.dead = Some((3, 2 * MS));
        let data = message(1 << 20, 1);
        net.g[1].send(0, 9, data.clone()).unwrap();
        net.run(SEC, |net| net.delivered(1, 9).is_some());
        assert_eq!(net.delivered(1, 9), Some(&vec![3]));
        let dead: Vec<&McastEvent> = net.events[1]
            .iter()
            .filter(|e| matches!(e, McastEvent::PeerDead { .. }))
            .collect();
        assert!(
            matches!(dead[..], [McastEvent::PeerDead { root: 1, id: 9, dead: PeerDead { peer: 3, silent_for } }] if *silent_for >= 200 * MS),
            "{dead:?}"
        );
        for i in [0, 2, 4] {
            assert_eq!(net.received(i, 1, 9).unwrap()[..], data[..]);
        }
        // The deadline bounds it: declared within the deadline and a poll of it.
        assert!(net.now < 2 * MS + 200 * MS + 50 * MS, "{} ms", net.now / MS);
        // The next transfer goes on without it.
        net.dead = Some((3, 0));
        net.g[1].send(net.now, 10, message(1000, 2)).unwrap();
        net.run(SEC, |net| net.delivered(1, 10).is_some());
        assert_eq!(net.delivered(1, 10), Some(&vec![3]));
    }

    #[test]
    fn a_dead_root_is_named_by_its_receivers() {
        let mut net = Net::new(4, cfg(), 61);
        net.dead = Some((0, MS));
        net.g[0].send(0, 1, message(1 << 20, 1)).unwrap();
        for i in 1..4 {
            net.g[i].expect(0, 0, 1);
        }
        net.run(SEC, |net| {
            (1..4).all(|i| {
                net.events[i]
                    .iter()
                    .any(|e| matches!(e, McastEvent::PeerDead { root: 0, id: 1, dead } if dead.peer == 0))
            })
        });
    }

    #[test]
    fn a_receiver_given_up_on_is_told() {
        let mut net = Net::new(3, cfg(), 62);
        // Rank 2 hears the root but the root does not hear it: it is declared dead.
        net.g[0].send(0, 1, message(20_000, 1)).unwrap();
        net.g[2].expect(0, 0, 1);
        net.run(SEC, |net| net.delivered(0, 1).is_some());
        // It had everything by then but the root never heard: drop its packets and go on.
        net.g[0].send(net.now, 2, message(20_000, 2)).unwrap();
        while net.delivered(0, 2).is_none() {
            net.wire
                .retain(|w| !(w.2 == 0 && w.3.len() >= 64 && w.3[12] == 2));
            assert!(net.step());
            assert!(net.now < 2 * SEC);
        }
        assert_eq!(net.delivered(0, 2), Some(&vec![2]));
        // Rank 2 received it whole (data flows), or was told it was abandoned.
        assert!(
            net.received(2, 0, 2).is_some()
                || net.events[2]
                    .iter()
                    .any(|e| matches!(e, McastEvent::Abandoned { root: 0, id: 2 }))
        );
    }

    #[test]
    fn every_member_broadcasts_in_turn_and_at_once() {
        // Allgather's shape: p concurrent transfers, one per root.
        let mut net = Net::new(6, cfg(), 70);
        net.loss = 0.02;
        net.jitter = 50 * US;
        for r in 0..6 {
            net.g[r].send(0, 1, message(60_000 + r, r as u8)).unwrap();
        }
        net.run(3 * SEC, |net| (0..6).all(|r| net.delivered(r, 1).is_some()));
        for r in 0..6 {
            for i in (0..6).filter(|&i| i != r) {
                assert_eq!(
                    net.received(i, r as Rank, 1).unwrap()[..],
                    message(60_000 + r, r as u8)[..]
                );
            }
        }
    }

    #[test]
    fn ids_must_increase_and_sizes_are_bounded() {
        let mut m = Mcast::new(cfg(), 0, 3).unwrap();
        m.send(0, 5, message(10, 0)).unwrap();
        assert!(matches!(
            m.send(0, 5, message(10, 0)),
            Err(McastError::StaleId { id: 5, last: 5 })
        ));
        let mut c = cfg();
        c.max_message = 100;
        let mut m = Mcast::new(c, 0, 3).unwrap();
        assert!(matches!(
            m.send(0, 1, message(101, 0)),
            Err(McastError::TooLarge { len: 101, max: 100 })
        ));
        assert!(Mcast::new(cfg(), 3, 3).is_err());
        let mut c = cfg();
        c.window = 1;
        assert!(c.validate().is_err());
    }

    #[test]
    fn a_group_datagram_is_refused_by_point_to_point_decoding() {
        let key = PacketKey::new([9; 32]);
        let mut h = Header::new(Kind::Prod);
        h.src = 1;
        h.dst = GROUP;
        let d = h.encode_mac(&[], &key, Cover::Payload);
        let f = Filter {
            cookie: COOKIE,
            me: 0,
            nprocs: 3,
        };
        assert_eq!(
            crate::wire::decode_mac(&d, &f, &key),
            Err(DropReason::Misaddressed)
        );
        assert!(decode_group(&d, &f, &key).is_ok());
        // Our own packet, looped back by the host, is no one's to take.
        let me = Filter { me: 1, ..f };
        assert_eq!(decode_group(&d, &me, &key), Err(DropReason::Misaddressed));
    }

    fn arb_header() -> impl proptest::strategy::Strategy<Value = Header> {
        use proptest::prelude::*;
        (
            0usize..6,
            any::<u8>(),
            (0u32..5, prop_oneof![0u32..5, Just(GROUP)]),
            (0u32..4, prop_oneof![0u32..300, any::<u32>()]),
            (any::<u32>(), any::<u32>(), any::<u32>()),
            (0u64..400_000, prop_oneof![0u64..400_000, any::<u64>()]),
            prop_oneof![Just(1000u32), any::<u32>(), 0u32..5],
        )
            .prop_map(
                |(k, fl, (src, dst), (msg, seq), (ack, eoh, ackb), (offset, total), aux)| {
                    let kinds = [
                        Kind::Data,
                        Kind::Ack,
                        Kind::Nack,
                        Kind::Prod,
                        Kind::Fin,
                        Kind::Ping,
                    ];
                    let mut h = Header::new(kinds[k]);
                    h.flags = fl & flags::KNOWN;
                    h.src = src;
                    h.dst = dst;
                    h.msg = msg;
                    h.seq = seq;
                    h.ack = ack % 500 + (ackb & 1) * ack;
                    h.eoh = eoh % 500;
                    h.offset = offset;
                    h.total = total;
                    h.aux = aux;
                    h
                },
            )
    }

    proptest::proptest! {
        /// No input panics: random bytes through decoding, and arbitrary well-formed
        /// headers with arbitrary payloads straight into every role, among real traffic.
        #[test]
        fn network_input_never_panics(
            noise in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), 0..20),
            hdrs in proptest::collection::vec((arb_header(), 0usize..1500, 0usize..3), 0..60),
        ) {
            let key = PacketKey::new([9; 32]);
            let f = Filter { cookie: COOKIE, me: 1, nprocs: 4 };
            let mut c = cfg();
            c.max_message = 1 << 20;
            let mut g: Vec<Mcast> = (0..4).map(|r| Mcast::new(c.clone(), r, 4).unwrap()).collect();
            g[1].send(0, 1, message(50_000, 1)).unwrap();
            g[1].expect(0, 0, 0);
            let mut now = 0;
            let mut out = Vec::new();
            for n in &noise {
                if let Ok((h, p)) = decode_group(n, &f, &key) {
                    g[1].handle(now, &h, p);
                }
            }
            for (h, len, who) in &hdrs {
                now += 10 * US;
                let p = vec![7u8; *len];
                g[*who].handle(now, h, &p);
                for m in g.iter_mut() {
                    if m.poll_timeout().is_some_and(|t| t <= now) {
                        m.handle_timeout(now);
                    }
                    out.clear();
                    m.poll_transmit(now, &mut out, 100);
                    while m.poll_event().is_some() {}
                }
            }
        }
    }
}
