//! rmpp: Sandia's Reliable Message Passing Protocol (the RMPP paper; Riesen's thesis).
//!
//! Message-based: every message opens its own short connection, and the receiver's upper
//! layer decides when data may flow, so data only ever flows into a posted receive buffer
//! (end-to-end flow control, and the reason RMPP overlaps computation and communication).
//! There is no congestion control in the paper; here, with [`Common::cc`], the receiver
//! grants data in bounded amounts (below).
//!
//! # One message's connection
//!
//! ```text
//!  sender                                         receiver
//!  Rts(id, total, head) ───────────────────────▶  new: Event::Announce{head}
//!                                                 ... upper layer posts a receive:
//!                                                 Announcing::accept(from, id)
//!                      ◀───────────────────────  Cts(id)
//!  Data ... Data(ACK_REQ on the last) ─────────▶  holes? Resend(ranges)
//!                      ◀───────────────────────  or, complete: Fin(id), deliver in order
//!  Close(id) ──────────────────────────────────▶  forget the connection
//! ```
//!
//! - **Rts** carries the message's first packet of bytes (the upper layer's envelope:
//!   tag, communicator...) and its total length; the receiver keeps that head, reports
//!   it in [`Event::Announce`] and answers nothing until the upper layer calls
//!   [`Announcing::accept`]. A receiver without posted receives (BSP, collectives) sets
//!   [`RmppConfig::auto_accept`] (or calls [`Announcing::set_auto_accept`]): every Rts is
//!   then accepted on arrival and no Announce is reported.
//! - **Single-packet messages** (0 bytes up to one packet) travel whole in the Rts. On
//!   accept they are complete: the receiver delivers at once and answers `Fin`, so the
//!   data pays one one-way trip and no handshake; `Fin` and `Close` only tear down (they
//!   free the sender's buffer and the receiver's record) and are off the critical path.
//!   A longer message pays Rts -> Cts -> data: 1.5 round trips before its tail arrives,
//!   the per-message setup the RMPP paper's Table 1 shows.
//! - **Cts** is sent on accept; the sender then streams every remaining byte, the last
//!   packet asking for an answer (`ACK_REQ`).
//! - **Resend** lists missing byte ranges: the first one in the header (`offset..total`),
//!   more in the payload as (start, end) pairs of little-endian u64, as many as one packet
//!   holds. The receiver sends it when a packet asking for an answer finds holes, and on
//!   its timer. The sender streams the union of what it is asked for, again ending with
//!   `ACK_REQ`, so recovery goes hole by hole without waiting for a timer.
//! - **Fin** acknowledges the whole message; the sender reports [`Event::Sent`], frees its
//!   copy and answers **Close**. A `Fin` for a message the sender already finished (our
//!   `Close` was lost) is answered with `Close` again, statelessly.
//!
//! # Timers (every stage recovers)
//!
//! | lost | who notices | recovery |
//! |------|-------------|----------|
//! | Rts | sender, no Cts/Fin within RTO | resend Rts (back-off); a duplicate Rts is answered from the receiver's state: nothing while unaccepted, Cts/Resend while receiving, Fin once complete |
//! | Cts | receiver, no data within RTO | resend Cts (back-off) |
//! | data | receiver: the packet asking for an answer shows holes, or no data from the peer within RTO | Resend of the holes |
//! | Resend | receiver, no progress within RTO | Resend again |
//! | Fin | receiver, no Close within RTO | resend Fin; the sender answers Close |
//! | Close | receiver, its Fin timer | resend Fin; answered statelessly with Close |
//!
//! After Cts the receiver drives recovery, because only it knows what is missing; the
//! sender keeps a timer only while it waits for its Rts to be answered. A dead peer is the
//! engine's business (liveness pings): [`Protocol::outstanding`] is true while we wait on
//! the peer in any stage, so its silence counts.
//!
//! # Order, windows and memory
//!
//! Messages of a pair are numbered by the sender (`msg`) and delivered strictly in that
//! order: a message completed before an earlier one waits for it. Announcements keep that
//! order too (an upper layer matches heads in the order sent): an Rts that overtook a lost
//! one is held, unreported, until the earlier one is announced. So an upper layer must
//! accept every announced message eventually (buffering it if it has no matching receive
//! yet, as MPI does with unexpected messages); a message never accepted holds back all
//! later ones of its pair. Up to [`RmppConfig::window`] messages per pair are open at
//! once (`msg` within `window` of the oldest the sender has not finished), which pipelines
//! small messages; the receiver refuses an Rts outside `[next to deliver, + window)`, or
//! while `window` finished connections wait for their Close, or while unaccepted heads of
//! all peers would exceed [`RmppConfig::announce_bytes`] (the sender's Rts timer retries),
//! unless it is the next to announce and later heads wait for it.
//! A receive buffer is allocated when a message is accepted: it is the posted receive.
//!
//! # Receiver grants ([`Common::cc`], `BULKWIRE_CC=on`)
//!
//! Seven senders that each stream a whole message into one switch port overflow it (on
//! the simulated switch of docs/performance.md, 89 % of the packets lost). So a receiver
//! lets its accepted messages have [`GRANT_PACKETS`] in flight in all beyond the highest
//! byte each received, granted in the order accepted (Homa's receiver-driven grants; the
//! paper's Cts is already the receiver's permission). The Cts's `offset` is how far the
//! sender may go; a message not yet granted gets a Cts for its head alone, which stops
//! the sender's Rts timer; the grant is extended by further Cts as data arrives. Every
//! process of a job agrees on the setting, so a Cts means the same at both ends.
//!
//! A grant is not held forever by a sender that does not use it (a forged Rts, a stopped
//! process): after [`GRANT_STALL`] requests without any of its data (or
//! [`GRANT_STALL_STARTED`] without new data, once some came), what it was granted stops
//! counting against the budget and the messages behind it get theirs. It keeps its grant
//! and its place, so a slow sender's message counts again, and is extended in its turn,
//! as soon as its data arrives. The receiver's timers wait out data queued behind other
//! grants: the round trip of each grant's extension (Cts to the first data beyond the
//! old grant) is sampled, and a request repeats the grant [`GRANT_PATIENCE`] times before
//! it asks for all of it, unless packets are being lost ([`LOSSY`]).
//!
//! Those timers do not count at all before granted data can have arrived
//! ([`Rmpp::queue_wait`]): a grant's Cts queues in its sender's port behind about a
//! budget of data and an Rts head from every other process, and its data in ours behind
//! what is granted here and as many heads; the receiver measures the rate its port
//! delivers at when busy ([`Rmpp::note_rate`]) and waits that long at that rate. Without
//! the wait the timer followed round trips measured on an idle network (0.2 ms at 100
//! Mb/s) while a Cts waited 1.6 ms behind data: at 16 nodes the silence counted as a
//! stall, its share of the budget went to others while its data was still coming, the
//! port overflowed, and the losses made every timer ask for whole grants again (52 % of
//! the packets lost, 4.60x the links' bound; 0.42 % and 1.12x with it). The wait scales
//! with the link and the job instead of a tuned constant.
//!
//! Round trips are measured with Karn's rule: Cts -> first data and Fin -> Close at the
//! receiver; Rts -> Cts/Fin at the sender, less the time the Rts waited for acceptance,
//! which Cts and Fin report in `aux` (64 ns units).
//!
//! Header use: Rts: `msg`, `total`, payload = head, flags FIRST (and LAST when the head is
//! the whole message). Data: `msg`, `offset`, `total`, flags LAST / ACK_REQ / RETRANSMIT.
//! Cts, Fin: `msg`, `total`, `aux` = time held; Cts `offset` = bytes granted (0: all).
//! Resend: `msg`, `offset..total` = first
//! range, payload = further ranges. Close: `msg`.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use crate::common::{FillBuf, OutQueue, ReadySet, Rtt, Timers, announced_too_large};
use crate::congestion::{MAX_WINDOW, Window};
use crate::wire::{Header, Kind, flags};
use crate::{
    Announcing, Common, Event, MsgId, PeerDead, PeerMisbehaved, PeerStats, ProtoError, Protocol,
    Rank, Time, Transmit,
};

/// Settings of [`Rmpp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RmppConfig {
    /// Most messages open at once per pair (sender), and how far beyond the next message
    /// to deliver the receiver accepts an Rts; both sides must agree. Default 64, the OSU
    /// bandwidth window.
    pub window: u32,
    /// Most data packets sent to one peer before the next peer's turn in one
    /// [`Protocol::poll_transmit`]. Default 32.
    pub burst: usize,
    /// Accept every message on arrival, without [`Event::Announce`], for upper layers that
    /// do not post receives. Default off: the paper's protocol.
    pub auto_accept: bool,
    /// Most bytes of heads held for announced, unaccepted messages, all peers together.
    /// Default 16 MiB.
    pub announce_bytes: u64,
    /// Retransmissions toward a silent peer before a timeout doubles (it never does while
    /// the peer is heard from). 0 in [`RmppConfig::default`] (doubling at every
    /// retransmission); 2 in [`RmppConfig::recommended`]: under random loss one or two
    /// losses in a row are common, and doubling at once makes each further loss cost
    /// twice as much (with a quarter of the packets lost, about six timeouts a loss
    /// instead of one and a half); a stopped peer still makes the timeouts double.
    pub backoff_after: u32,
    /// Most doublings of a timeout: 16 in [`RmppConfig::default`], 4 in
    /// [`RmppConfig::recommended`] (a run of random losses then costs at most 16 base
    /// timeouts per further loss instead of climbing toward a second; what rmpp resends on
    /// a timer is one control packet or an Rts).
    pub max_backoff: u32,
}

impl Default for RmppConfig {
    fn default() -> Self {
        RmppConfig {
            window: 64,
            burst: 32,
            auto_accept: false,
            announce_bytes: 16 << 20,
            backoff_after: 0,
            max_backoff: MAX_BACKOFF,
        }
    }
}

/// Why an [`RmppConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RmppConfigError {
    #[error("window {0} is not in 1..=2^30 (message ids are compared within half their space)")]
    Window(u32),
    #[error("burst must be at least 1")]
    Burst,
    #[error("announce_bytes must be positive")]
    AnnounceBytes,
}

impl RmppConfig {
    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<(), RmppConfigError> {
        if self.window == 0 || self.window > 1 << 30 {
            return Err(RmppConfigError::Window(self.window));
        }
        if self.burst == 0 {
            return Err(RmppConfigError::Burst);
        }
        if self.announce_bytes == 0 {
            return Err(RmppConfigError::AnnounceBytes);
        }
        Ok(())
    }

    /// What a job runs unless told otherwise: the defaults with timers that back off only
    /// toward a silent peer, and not far (`backoff_after` 2, `max_backoff` 4).
    pub fn recommended() -> RmppConfig {
        RmppConfig {
            backoff_after: 2,
            max_backoff: 4,
            ..RmppConfig::default()
        }
    }

    /// These settings with timeouts doubling from the `after + 1`th retransmission toward
    /// a silent peer, at most `max` times.
    pub fn with_backoff(self, after: u32, max: u32) -> RmppConfig {
        RmppConfig {
            backoff_after: after,
            max_backoff: max,
            ..self
        }
    }
}

/// Disjoint, non-adjacent byte ranges `[start, end)`: what a receiver holds of a message,
/// or what a sender still has to (re)send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    m: BTreeMap<u64, u64>,
    len: u64,
}

impl RangeSet {
    /// Bytes covered.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.m.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn ranges(&self) -> usize {
        self.m.len()
    }

    /// Adds `[a, b)`; returns how many bytes were not covered before.
    pub fn insert(&mut self, a: u64, b: u64) -> u64 {
        if a >= b {
            return 0;
        }
        let (mut lo, mut hi, mut had) = (a, b, 0);
        // Ranges overlapping or touching [a, b), from the one starting last: once one ends
        // before `lo`, every earlier one does too.
        while let Some((&s, &e)) = self.m.range(..=hi).next_back() {
            if e < lo {
                break;
            }
            self.m.remove(&s);
            had += e - s;
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.m.insert(lo, hi);
        let added = (hi - lo) - had;
        self.len += added;
        added
    }

    /// Where the first range starts.
    pub fn first(&self) -> Option<u64> {
        self.m.keys().next().copied()
    }

    /// Where the last range ends (0 when empty).
    pub fn end(&self) -> u64 {
        self.m.values().next_back().copied().unwrap_or(0)
    }

    /// Takes up to `max` bytes from the start of the first range.
    pub fn pop_front(&mut self, max: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self.m.iter().next()?;
        self.m.remove(&s);
        let cut = e.min(s.saturating_add(max.max(1)));
        if cut < e {
            self.m.insert(cut, e);
        }
        self.len -= cut - s;
        Some((s, cut))
    }

    /// The first `limit` ranges of `[0, total)` not covered.
    pub fn gaps(&self, total: u64, limit: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.m {
            if out.len() >= limit || at >= total {
                return out;
            }
            if s > at {
                out.push((at, s.min(total)));
            }
            at = at.max(e);
        }
        if at < total && out.len() < limit {
            out.push((at, total));
        }
        out
    }
}

/// Round-trip measurements in `aux` count units of 2^6 ns (a u32 spans 275 s).
const TS_SHIFT: u32 = 6;

/// Control packets waiting beyond this many are dropped, as a full NIC queue would; the
/// timers recover. Bounds memory under a flood.
const CTL_QUEUE_MAX: usize = 1 << 14;

/// Most doublings of a timeout in [`RmppConfig::default`].
const MAX_BACKOFF: u32 = 16;

/// Most ranges one Resend lists.
const MAX_RANGES: usize = 64;

/// Receiver grants (with `BULKWIRE_CC=on`): packets a receiver lets one message have in
/// flight beyond the highest byte it received: a share of a 64 KiB switch port (43
/// full frames) that leaves room for the heads of the other senders' Rts.
const GRANT_PACKETS: u64 = 20;

/// Receiver grants: bytes of data over which the delivery rate is measured (a few dozen
/// packets, so that one packet's queueing does not make the rate).
const RATE_BYTES: u64 = 16 << 10;

/// Receiver grants: requests without progress that ask only for the holes below the
/// highest byte received (and repeat the grant) before one asks for all of the grant.
/// At 100 Mb/s a grant of 20 packets queues for 2.4 ms, ten times the timeout's floor,
/// and the grant's Cts may wait as long behind data in the sender's port: asking for
/// the grant again at the first timeout resent what was only queued (5x the links'
/// bound on the simulated switch). 5, on the simulated switch of docs/performance.md:
/// with 3 or 4 rmpp lost half its packets and took 4-5x the bound; with 6 it held the
/// bound too, but a first loss cost 6 timeouts (BSP at 5 % loss 5.8x its lossless
/// time in `sim_recovery.rs`, whose bound is 5x). Where packets are being lost it is 1
/// ([`LOSSY`]).
const GRANT_PATIENCE: u32 = 5;

/// Receiver grants: requests of a message without any of its data arriving after which
/// what it was granted stops counting against the budget, so that the messages behind
/// it get theirs. A sender that never sends (a forged Rts, a stopped process) would
/// otherwise hold the budget forever. The message keeps its grant and its place: once
/// its data arrives it counts again and is granted more in its turn, so a slow sender is
/// only passed over while it sends nothing. As many as [`GRANT_PATIENCE`]: the timers
/// also fire on a grant whose Cts is still queued behind data in the sender's port (on
/// the simulated switch, passing over after 3 requests took 1.25x the links' bound,
/// against 1.06x).
const GRANT_STALL: u32 = GRANT_PATIENCE;

/// Receiver grants: requests without progress after which a message that has received
/// data stops counting against the budget, as [`GRANT_STALL`] for one that has not. Its
/// sender started and is silent again although a Resend for all of its grant went after
/// [`GRANT_PATIENCE`] requests, which a running sender answers. Higher, because a
/// grant's data and its extensions queue behind the others' (10 took 1.47x the bound on
/// the simulated switch, 14 and more 1.06x).
const GRANT_STALL_STARTED: u32 = 3 * GRANT_PATIENCE;

/// Receiver grants: the share of new packets that show a loss (data arriving above a
/// hole, a resent packet or Rts), in 1/65536, above which this receiver takes a silence
/// for a loss rather than for data queued behind other grants, and asks for it at its
/// first timeout as without grants. On a switch that the grants keep from dropping the
/// silences are queues; under random loss the patience made rmpp's BSP supersteps on the
/// simulated network 6-16x their lossless time at 5 % loss and 28-37x at 20 %, against
/// 2.5-4x and 5-12x without it (`sim_recovery.rs`).
const LOSSY: u32 = 65536 / 1000;

/// A message of ours with an open connection.
struct TxMsg {
    id: MsgId,
    data: Bytes,
    notify: bool,
    /// Bytes carried by the Rts.
    head: usize,
    /// The receiver has answered (Cts, Resend or Fin): its buffer is posted.
    open: bool,
    /// An Rts is to go out (first transmission or timer retransmission).
    rts_due: bool,
    rts_sends: u32,
    rts_at: Time,
    /// Rts retransmission deadline, while not open.
    deadline: Option<Time>,
    /// Byte ranges to send now.
    todo: RangeSet,
    /// End of the first pass so far: anything below it sent again is a retransmission.
    sent_hi: u64,
    /// Time of the latest data packet sent.
    last_tx: Time,
    /// Bytes below which the receiver lets us send (receiver grants; the whole message
    /// without them).
    granted: u64,
}

enum RxState {
    /// Rts arrived; waiting for [`Announcing::accept`].
    Announced { head: Vec<u8> },
    /// Accepted, Cts sent, data arriving into the posted buffer.
    Receiving {
        buf: FillBuf,
        have: RangeSet,
        got_data: bool,
        /// Bytes granted to the sender (the whole message without receiver grants).
        granted: u64,
    },
    /// Fin sent. `data` until delivered; `closed` once the Close came.
    Complete { data: Option<Vec<u8>>, closed: bool },
}

/// A connection of a message coming to us.
struct RxConn {
    total: u64,
    /// When its Rts first arrived (time held before accept is reported back).
    arrived: Time,
    state: RxState,
    /// Transmissions of the current request (Cts/Resend) or Fin without progress.
    sends: u32,
    sent_at: Time,
    deadline: Option<Time>,
    /// Receiver grants: when a grant's extension went and the grant before it, until
    /// data beyond that arrives (a round-trip sample) or a request makes it ambiguous.
    extended: Option<(Time, u64)>,
    /// Receiver grants: when the grant was last extended (its data cannot be late before
    /// [`Rmpp::queue_wait`] has passed since).
    grant_at: Time,
}

struct Peer {
    out: OutQueue,
    /// Open outgoing connections, by increasing id.
    tx: VecDeque<TxMsg>,
    /// Id of the next message to open (all before it have had an Rts).
    next_open: MsgId,
    rx: HashMap<MsgId, RxConn>,
    /// Next message id to deliver.
    next_deliver: MsgId,
    /// Next message id to announce: heads are reported in id order, as the upper layer
    /// matches them in the order they were sent.
    next_announce: MsgId,
    /// Delivered connections still waiting for their Close.
    lingering: u32,
    rtt: Rtt,
    /// Congestion window, as a rate: rmpp streams a pass without acknowledgements, so
    /// its data leaves paced at the window per round trip.
    cc: Window,
    /// The death the engine told of ([`Protocol::close_peer`]), boxed so that a live
    /// peer's state stays as small as with a flag.
    closed: Option<Box<PeerDead>>,
    /// Cts/Resend ignored because a pass was under way.
    ignored_requests: u64,
    /// Latest arrival of new data from this peer, for any message.
    last_data: Time,
    /// The pacing gap this peer's data says it keeps (`credit`, microseconds): its data
    /// still flows while packets come this far apart.
    peer_gap: Time,
    /// Latest arrival of anything from this peer.
    last_heard: Time,
    /// Bytes of the buffers of this peer's accepted messages not yet delivered (at most
    /// [`Common::peer_budget`]).
    held: u64,
    stats: PeerStats,
}

impl Peer {
    /// The next id to announce: never behind the next to deliver (a message delivered
    /// without an announcement, by auto-accept, is past).
    fn next_to_announce(&mut self) -> MsgId {
        if before(self.next_announce, self.next_deliver) {
            self.next_announce = self.next_deliver;
        }
        self.next_announce
    }
}

/// Whether message `a` comes before `b` (ids wrap; compared within half the space).
fn before(a: MsgId, b: MsgId) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The RMPP protocol, for all peers of one endpoint.
pub struct Rmpp {
    c: Common,
    cfg: RmppConfig,
    peers: Vec<Peer>,
    timers: Timers,
    ready: ReadySet,
    ctl: VecDeque<Transmit>,
    events: VecDeque<Event>,
    /// The first peer found to send what no correct member sends.
    misbehaved: Option<PeerMisbehaved>,
    /// Bytes of heads held by announced, unaccepted connections.
    announced_bytes: u64,
    /// A peer died holding grants: the next messages get theirs at the next poll.
    regrant_due: bool,
    /// Latest arrival of new data from any peer.
    last_data: Time,
    /// Moving average of the share of new packets that show a loss (data above a hole,
    /// a resend), in 1/65536: see [`LOSSY`].
    gap_share: u32,
    /// Receiver grants: this host's measured delivery rate, as the time 1 KiB of data
    /// takes to arrive while data flows (nanoseconds; the least of recent measurements,
    /// 0 before the first). See [`Rmpp::queue_wait`].
    ns_per_kib: Time,
    /// Start and bytes of the current delivery-rate measurement.
    rate_mark: Option<(Time, u64)>,
    /// The shortest round trip measured to any peer (the bare path), for telling a busy
    /// port's arrivals from an idle one's.
    bare_rtt: Time,
    /// Receiver grants on ([`Common::cc`]): accepted messages still receiving, in the
    /// order accepted, granted data in that order within [`GRANT_PACKETS`] in flight.
    grants: Option<VecDeque<(Rank, MsgId)>>,
}

impl Rmpp {
    /// An rmpp endpoint with settings `cfg`.
    pub fn new(c: Common, cfg: RmppConfig) -> Result<Rmpp, RmppConfigError> {
        cfg.validate()?;
        let peers = (0..c.nprocs)
            .map(|_| Peer {
                out: OutQueue::default(),
                tx: VecDeque::new(),
                next_open: 0,
                rx: HashMap::new(),
                next_deliver: 0,
                next_announce: 0,
                lingering: 0,
                // Paced only with `BULKWIRE_CC=all` ([`Common::cc_all`]): on the simulated
                // switch of docs/performance.md pacing at the window per round trip lost as
                // many packets as streaming (rmpp learns of losses once per pass, and a
                // pass's first window still leaves as a burst) and took longer; its timers
                // following the queue alone made it slower still (3.8x the links' bound
                // against 3.4x). With receiver grants ([`Common::cc`]) they follow it: a
                // grant's data may queue behind others' for milliseconds.
                rtt: Rtt::new(c.rto_initial, c.rto_min, c.rto_max).following_queue(c.cc),
                cc: Window::new(c.cc_all),
                closed: None,
                ignored_requests: 0,
                last_data: 0,
                peer_gap: 0,
                last_heard: 0,
                held: 0,
                stats: PeerStats::default(),
            })
            .collect();
        Ok(Rmpp {
            timers: Timers::new(c.nprocs),
            ready: ReadySet::new(c.nprocs),
            peers,
            ctl: VecDeque::new(),
            events: VecDeque::new(),
            misbehaved: None,
            announced_bytes: 0,
            regrant_due: false,
            last_data: 0,
            gap_share: 0,
            ns_per_kib: 0,
            rate_mark: None,
            bare_rtt: 0,
            grants: c.cc.then(VecDeque::new),
            c,
            cfg,
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &RmppConfig {
        &self.cfg
    }

    /// Open outgoing connections to `peer` (diagnostics and tests).
    pub fn open_to(&self, peer: Rank) -> usize {
        self.peers[peer as usize].tx.len()
    }

    /// Connection records kept for messages from `peer` (diagnostics and tests).
    pub fn records_from(&self, peer: Rank) -> usize {
        self.peers[peer as usize].rx.len()
    }

    /// Requests from `peer` ignored because a pass was under way (diagnostics).
    pub fn ignored_requests(&self, peer: Rank) -> u64 {
        self.peers[peer as usize].ignored_requests
    }

    /// Bytes of heads held for announced, unaccepted messages.
    pub fn announced_bytes(&self) -> u64 {
        self.announced_bytes
    }

    fn valid_peer(&self, p: Rank) -> bool {
        p < self.c.nprocs && p != self.c.rank && self.peers[p as usize].closed.is_none()
    }

    /// Timeout after `sends` transmissions without progress.
    fn rto(&self, peer: Rank, sends: u32) -> Time {
        let base = self.peers[peer as usize].rtt.rto();
        (base << sends.saturating_sub(1).min(self.cfg.max_backoff)).min(self.c.rto_max.max(base))
    }

    /// The transmission count to back off by for the `sends`th transmission of something
    /// whose previous one left at `prev` (see [`RmppConfig::backoff_after`]): 1 (no
    /// back-off) when the peer has been heard from since, and for the first
    /// `backoff_after` retransmissions; then doubling. With `backoff_after` 0: `sends`,
    /// doubling at every retransmission.
    fn backoff_sends(&self, peer: Rank, sends: u32, prev: Time) -> u32 {
        if self.cfg.backoff_after > 0 && self.peers[peer as usize].last_heard > prev {
            1
        } else {
            sends.saturating_sub(self.cfg.backoff_after).max(1)
        }
    }

    /// An answer came to the Rts of `tx[k]`: every earlier message whose Rts left before
    /// that one and is still unanswered was lost (or its answer was), since the link
    /// mostly keeps a pair's order and the receiver answers in arrival order. Resend those
    /// now instead of waiting out their timers (a duplicate Rts is answered from the
    /// receiver's state). Rts go out in message order, so an earlier message's Rts sent
    /// in the same instant left first.
    fn resend_overtaken(&mut self, to: Rank, k: usize) {
        let p = &mut self.peers[to as usize];
        let answered = p.tx[k].rts_at;
        let mut any = false;
        for m in p.tx.iter_mut().take(k) {
            if !m.open && !m.rts_due && m.rts_sends > 0 && m.rts_at <= answered {
                m.rts_due = true;
                m.deadline = None;
                any = true;
            }
        }
        if any {
            self.ready.insert(to);
        }
    }

    /// Queues a control packet for `to`.
    fn push_ctl(&mut self, kind: Kind, to: Rank, id: MsgId, f: impl FnOnce(&mut Header)) {
        self.push_ctl_payload(kind, to, id, Bytes::new(), f);
    }

    fn push_ctl_payload(
        &mut self,
        kind: Kind,
        to: Rank,
        id: MsgId,
        payload: Bytes,
        f: impl FnOnce(&mut Header),
    ) {
        if self.ctl.len() >= CTL_QUEUE_MAX {
            return;
        }
        let mut h = Header::new(kind);
        h.dst = to;
        h.msg = id;
        f(&mut h);
        h.len = payload.len() as u32;
        let s = &mut self.peers[to as usize].stats;
        s.control_sent += 1;
        match kind {
            Kind::Fin => s.acks_sent += 1,
            Kind::Resend => s.nacks_sent += 1,
            _ => {}
        }
        self.ctl.push_back(Transmit { hdr: h, payload });
    }

    fn hold(now: Time, arrived: Time) -> u32 {
        (now.saturating_sub(arrived) >> TS_SHIFT).min(u32::MAX as u64) as u32
    }

    // ----- receiver side -----

    /// Asks the sender of `id` for what is missing: Cts if only the head is here, Resend
    /// of the holes otherwise.
    fn request(&mut self, now: Time, from: Rank, id: MsgId) {
        let mp = self.c.max_payload[from as usize].max(1);
        if let Some(c) = self.peers[from as usize].rx.get_mut(&id) {
            // Karn: data beyond the grant may now answer this request instead.
            c.extended = None;
        }
        let Some(conn) = self.peers[from as usize].rx.get(&id) else {
            return;
        };
        let RxState::Receiving {
            have,
            got_data,
            granted,
            ..
        } = &conn.state
        else {
            return;
        };
        let (total, hold, granted) = (conn.total, Self::hold(now, conn.arrived), *granted);
        // With grants the Cts says how far the sender may go (`offset`, above the head);
        // without, `offset` 0: the whole message.
        let grant = if self.grants.is_some() { granted } else { 0 };
        let cts = |h: &mut Header| {
            h.total = total;
            h.aux = hold;
            h.offset = grant;
        };
        // With grants, a Cts again until patience runs out (the sender may have got it
        // and sent data that is lost, which only a Resend brings back).
        let patience = self.patience();
        if !got_data && (self.grants.is_none() || conn.sends < patience) {
            self.push_ctl(Kind::Cts, from, id, cts);
            return;
        }
        // Holes only within the grant: beyond it the sender has sent nothing. While other
        // messages hold grants too, at first only below the highest byte received (the
        // path keeps a pair's order): above it the data may still be queued behind what
        // was granted to the others ([`GRANT_PATIENCE`]).
        let shared = self.grants.as_ref().is_some_and(|q| q.len() > 1);
        let upto = if shared && conn.sends < patience {
            have.end().min(granted)
        } else {
            granted
        };
        let gaps = have.gaps(upto, 1 + (mp / 16).min(MAX_RANGES));
        let Some(&(a, b)) = gaps.first() else {
            if granted < total || upto < granted {
                // All granted data is here and the grant's extension was lost, or what
                // was granted may still be on its way.
                self.push_ctl(Kind::Cts, from, id, cts);
            }
            return;
        };
        let mut p = Vec::with_capacity((gaps.len() - 1) * 16);
        for &(s, e) in &gaps[1..] {
            p.extend_from_slice(&s.to_le_bytes());
            p.extend_from_slice(&e.to_le_bytes());
        }
        let n = gaps.len() as u32;
        self.push_ctl_payload(Kind::Resend, from, id, p.into(), |h| {
            h.offset = a;
            h.total = b;
            h.aux = n;
        });
    }

    fn send_fin(&mut self, now: Time, from: Rank, id: MsgId) {
        let (total, hold) = self.peers[from as usize]
            .rx
            .get(&id)
            .map_or((0, 0), |c| (c.total, Self::hold(now, c.arrived)));
        self.push_ctl(Kind::Fin, from, id, |h| {
            h.total = total;
            h.aux = hold;
        });
    }

    /// Starts (or restarts) `conn`'s timer after a transmission, its `sends`th without
    /// progress (the timeout backs off by [`Rmpp::backoff_sends`] of it).
    fn arm_rx(&mut self, now: Time, from: Rank, id: MsgId, sends: u32) {
        let prev = self.peers[from as usize]
            .rx
            .get(&id)
            .map_or(now, |c| c.sent_at);
        let t = now + self.rto(from, self.backoff_sends(from, sends, prev));
        if let Some(c) = self.peers[from as usize].rx.get_mut(&id) {
            c.sends = sends;
            c.sent_at = now;
            c.deadline = Some(t);
            self.timers.set_earlier(from, t);
        }
    }

    fn on_rts(&mut self, now: Time, from: Rank, hdr: &Header, payload: &[u8]) {
        let id = hdr.msg;
        let window = self.cfg.window;
        let p = &mut self.peers[from as usize];
        p.stats.data_received += 1;
        let len = payload.len() as u64;
        if hdr.total > self.c.message_limit() {
            let what = announced_too_large(hdr.total, self.c.max_message, self.c.peer_budget);
            return self.misbehave(from, what);
        }
        if hdr.offset != 0 || len > hdr.total {
            let what = format!(
                "sent an Rts of {len} bytes at offset {} of a message of {} bytes",
                hdr.offset, hdr.total
            );
            return self.misbehave(from, what);
        }
        if len == 0 && hdr.total > 0 {
            p.stats.bogus += 1;
            return;
        }
        if let Some(conn) = p.rx.get(&id) {
            // The sender has no answer yet: ours was lost, or we have not accepted.
            p.stats.drop_duplicate += 1;
            if conn.total != hdr.total {
                p.stats.bogus += 1;
                return;
            }
            let (receiving, complete) = (
                matches!(conn.state, RxState::Receiving { .. }),
                matches!(conn.state, RxState::Complete { .. }),
            );
            if receiving {
                self.request(now, from, id);
            } else if complete {
                self.send_fin(now, from, id);
            }
            return;
        }
        let d = id.wrapping_sub(p.next_deliver) as i32;
        if d < 0 {
            // Delivered and closed long ago: the Fin is what it still wants.
            p.stats.drop_duplicate += 1;
            self.push_ctl(Kind::Fin, from, id, |h| h.total = hdr.total);
            return;
        }
        if d as u32 >= window {
            p.stats.drop_out_of_window += 1;
            return;
        }
        let next = p.next_to_announce();
        // The next head to announce is taken even over the limit if later ones wait for
        // it: refusing it could leave the memory full of heads nobody can accept.
        let over = self.announced_bytes + len > self.cfg.announce_bytes
            && !(id == next && p.rx.keys().any(|&k| before(id, k)));
        if p.lingering >= window || over {
            // Out of connection records or head memory: the Rts timer retries.
            p.stats.drop_no_buffer += 1;
            return;
        }
        p.stats.bytes_received += len;
        self.announced_bytes += len;
        Self::note_arrival(&mut self.gap_share, hdr.has(flags::RETRANSMIT));
        p.rx.insert(
            id,
            RxConn {
                total: hdr.total,
                arrived: now,
                state: RxState::Announced {
                    head: payload.to_vec(),
                },
                sends: 0,
                sent_at: now,
                deadline: None,
                extended: None,
                grant_at: now,
            },
        );
        if self.cfg.auto_accept {
            self.accept(now, from, id);
        } else if before(id, next) {
            // Announced before and refused in accept: announce again.
            self.events.push_back(Event::Announce {
                from,
                id,
                total: hdr.total,
                head: payload.to_vec(),
            });
        } else {
            self.announce(from);
        }
    }

    /// Announces, in id order, the heads of `from` whose predecessors all were (an Rts
    /// lost and resent must not let later messages overtake it in matching).
    fn announce(&mut self, from: Rank) {
        let p = &mut self.peers[from as usize];
        p.next_to_announce();
        while let Some(c) = p.rx.get(&p.next_announce) {
            let id = p.next_announce;
            if let RxState::Announced { head } = &c.state {
                self.events.push_back(Event::Announce {
                    from,
                    id,
                    total: c.total,
                    head: head.clone(),
                });
            }
            p.next_announce = id.wrapping_add(1);
        }
    }

    fn on_data(&mut self, now: Time, from: Rank, hdr: &Header, payload: &[u8]) {
        let id = hdr.msg;
        let p = &mut self.peers[from as usize];
        p.stats.data_received += 1;
        p.peer_gap = hdr.credit as Time * crate::US;
        let len = payload.len() as u64;
        let Some(end) = hdr.offset.checked_add(len).filter(|&e| e <= hdr.total) else {
            let what = format!(
                "sent {len} bytes at offset {} of a message of {} bytes",
                hdr.offset, hdr.total
            );
            return self.misbehave(from, what);
        };
        let Some(conn) = p.rx.get_mut(&id) else {
            if before(id, p.next_deliver) {
                p.stats.drop_duplicate += 1;
            } else {
                // Data is only sent after our Cts: nothing a correct sender does.
                p.stats.bogus += 1;
            }
            return;
        };
        if conn.total != hdr.total || len == 0 {
            p.stats.bogus += 1;
            return;
        }
        /// What to do once the connection is no longer borrowed.
        enum Then {
            Nothing,
            Fin,
            Request,
            Progress,
            Complete,
        }
        let then = match &mut conn.state {
            RxState::Announced { .. } => {
                p.stats.bogus += 1;
                Then::Nothing
            }
            RxState::Complete { closed, .. } => {
                p.stats.drop_duplicate += 1;
                // The sender is still sending: our Fin may have been lost.
                if hdr.has(flags::ACK_REQ) && !*closed {
                    Then::Fin
                } else {
                    Then::Nothing
                }
            }
            RxState::Receiving {
                buf,
                have,
                got_data,
                ..
            } => {
                let above_hole = hdr.offset > have.end();
                let added = have.insert(hdr.offset, end);
                if added == 0 {
                    p.stats.drop_duplicate += 1;
                    if hdr.has(flags::ACK_REQ) {
                        Then::Request
                    } else {
                        Then::Nothing
                    }
                } else {
                    // Reserved whole at accept: within the budget already.
                    buf.write(hdr.offset as usize, payload);
                    p.stats.bytes_received += added;
                    p.last_data = now;
                    let prev = std::mem::replace(&mut self.last_data, now);
                    let floor = p.rtt.floor();
                    if floor > 0 && (self.bare_rtt == 0 || floor < self.bare_rtt) {
                        self.bare_rtt = floor;
                    }
                    // A port fed without pause delivers full packets one serialization
                    // apart, less than two bare round trips at any rate the grants are
                    // for (above 70 Mb/s with 20 us hops); a longer gap is an idle
                    // link or a program computing.
                    let busy = self.bare_rtt > 0 && now.saturating_sub(prev) <= 2 * self.bare_rtt;
                    Self::note_rate(&mut self.ns_per_kib, &mut self.rate_mark, now, busy, added);
                    Self::note_arrival(
                        &mut self.gap_share,
                        above_hole || hdr.has(flags::RETRANSMIT),
                    );
                    if !*got_data && conn.sends == 1 {
                        // Karn: the Cts went once, and the sender answers it at once.
                        p.rtt.sample(now.saturating_sub(conn.sent_at));
                    }
                    if let Some((at, before)) = conn.extended
                        && hdr.offset >= before
                        && !hdr.has(flags::RETRANSMIT)
                    {
                        // A grant's extension answered: its round trip, with the queues
                        // the Cts and the data waited in, is what the timers must wait.
                        p.rtt.sample(now.saturating_sub(at));
                        conn.extended = None;
                    }
                    *got_data = true;
                    if have.len() == conn.total {
                        let data = std::mem::take(buf).into_vec();
                        conn.state = RxState::Complete {
                            data: Some(data),
                            closed: false,
                        };
                        Then::Complete
                    } else if hdr.has(flags::ACK_REQ) {
                        Then::Request
                    } else {
                        Then::Progress
                    }
                }
            }
        };
        match then {
            Then::Nothing => {}
            Then::Fin => self.send_fin(now, from, id),
            Then::Request => {
                self.request(now, from, id);
                self.arm_rx(now, from, id, 1);
                self.regrant(now);
            }
            // The timer runs from the latest arrival, back-off cleared.
            Then::Progress => {
                self.arm_rx(now, from, id, 1);
                self.regrant(now);
            }
            Then::Complete => {
                self.send_fin(now, from, id);
                self.arm_rx(now, from, id, 1);
                self.deliver(from);
                self.regrant(now);
            }
        }
    }

    /// Receiver grants: lets the accepted messages have [`GRANT_PACKETS`] in flight in
    /// all, beyond the highest byte each received (a loss below it does not hold the
    /// budget), granted in the order accepted, so that one or two senders at a time send
    /// into this host's port and the rest wait their turn. A grant grows by at least a
    /// quarter of the budget, or to the message's end, so that a Cts goes out every few
    /// data packets, not for each.
    fn regrant(&mut self, now: Time) {
        let Some(mut q) = self.grants.take() else {
            return;
        };
        q.retain(|&(from, id)| {
            self.peers[from as usize].closed.is_none()
                && matches!(
                    self.peers[from as usize].rx.get(&id).map(|c| &c.state),
                    Some(RxState::Receiving { .. })
                )
        });
        let mut outstanding = 0;
        let mut more = Vec::new();
        for &(from, id) in &q {
            if let Some(c) = self.peers[from as usize].rx.get(&id) {
                outstanding += Self::owed(c);
            }
        }
        for &(from, id) in &q {
            let budget = self.c.max_payload[from as usize].max(1) as u64 * GRANT_PACKETS;
            let room = budget.saturating_sub(outstanding);
            let Some(conn) = self.peers[from as usize].rx.get_mut(&id) else {
                continue;
            };
            let total = conn.total;
            let stalled = Self::stalled(conn);
            let RxState::Receiving {
                granted, got_data, ..
            } = &mut conn.state
            else {
                continue;
            };
            if *granted >= total || stalled {
                // A stalled message is passed over, not dropped: its turn comes again
                // once its data arrives ([`GRANT_STALL`]).
                continue;
            }
            let want = (*granted + room).min(total);
            if want < total && room < budget / 4 {
                break;
            }
            outstanding += want - *granted;
            if *got_data && conn.extended.is_none() {
                conn.extended = Some((now, *granted));
            }
            *granted = want;
            conn.grant_at = now;
            more.push((from, id));
        }
        self.grants = Some(q);
        for (from, id) in more {
            self.send_grant(now, from, id);
            self.arm_rx(now, from, id, 1);
        }
    }

    /// Measures this host's delivery rate ([`Rmpp::ns_per_kib`]) from `bytes` of new
    /// data arriving at `now`, `busy` when it came soon after the previous arrival (an
    /// idle gap restarts the measurement): over [`RATE_BYTES`] at a time, each
    /// measurement moving the average a quarter of the way, as the rate the port drains
    /// at when it is busy.
    fn note_rate(
        ns_per_kib: &mut Time,
        mark: &mut Option<(Time, u64)>,
        now: Time,
        busy: bool,
        bytes: u64,
    ) {
        match mark {
            Some((t0, n)) if busy => {
                *n += bytes;
                if *n >= RATE_BYTES {
                    let sample = (now.saturating_sub(*t0) << 10) / *n;
                    *ns_per_kib = if *ns_per_kib == 0 {
                        sample
                    } else {
                        (3 * *ns_per_kib + sample) / 4
                    };
                    *mark = Some((now, 0));
                }
            }
            // The first packet of a measurement only starts its clock.
            _ => *mark = Some((now, 0)),
        }
    }

    /// Receiver grants: how long granted data may take to arrive without being late, at
    /// the measured delivery rate (0 before a measurement): a grant's Cts may wait in
    /// the sender's port behind about a budget of data and an Rts head from every other
    /// process, and its data in ours behind what is granted here and as many heads.
    fn queue_wait(&self, peer: Rank) -> Time {
        let mp = self.c.max_payload[peer as usize].max(1) as u64;
        let heads = mp * u64::from(self.c.nprocs.saturating_sub(1));
        let owed: u64 = self
            .grants
            .iter()
            .flatten()
            .filter_map(|&(from, id)| self.peers[from as usize].rx.get(&id).map(Self::owed))
            .sum();
        let bytes = mp * GRANT_PACKETS + heads + owed + heads;
        (bytes * self.ns_per_kib) >> 10
    }

    /// Counts a new packet of data (or an Rts) in [`Rmpp::gap_share`]: `lost` when it
    /// shows that something was lost (it arrived above a hole, or it is a resend).
    fn note_arrival(gap_share: &mut u32, lost: bool) {
        // Weight 1/64: a few dozen packets' memory.
        *gap_share -= *gap_share / 64;
        if lost {
            *gap_share += 65536 / 64;
        }
    }

    /// Requests without progress that wait for granted data before asking for it:
    /// [`GRANT_PATIENCE`], or 1 where packets are being lost ([`LOSSY`]).
    fn patience(&self) -> u32 {
        if self.gap_share > LOSSY {
            1
        } else {
            GRANT_PATIENCE
        }
    }

    /// Whether `c` is owed granted data that does not come: none of it after
    /// [`GRANT_STALL`] requests, or none new after [`GRANT_STALL_STARTED`].
    fn stalled(c: &RxConn) -> bool {
        match &c.state {
            RxState::Receiving {
                have,
                granted,
                got_data,
                ..
            } if *granted > have.end() => {
                c.sends
                    >= if *got_data {
                        GRANT_STALL_STARTED
                    } else {
                        GRANT_STALL
                    }
            }
            _ => false,
        }
    }

    /// Granted data that `c` counts against the receiver's budget: what it may still
    /// send beyond the highest byte received, unless it is stalled.
    fn owed(c: &RxConn) -> u64 {
        match &c.state {
            RxState::Receiving { have, granted, .. } if !Self::stalled(c) => {
                granted.saturating_sub(have.end())
            }
            _ => 0,
        }
    }

    /// A Cts that carries the grant (`offset`: the sender may send below it).
    fn send_grant(&mut self, now: Time, from: Rank, id: MsgId) {
        let Some(conn) = self.peers[from as usize].rx.get(&id) else {
            return;
        };
        let RxState::Receiving { granted, .. } = conn.state else {
            return;
        };
        let (total, hold) = (conn.total, Self::hold(now, conn.arrived));
        self.push_ctl(Kind::Cts, from, id, |h| {
            h.total = total;
            h.aux = hold;
            h.offset = granted;
        });
    }

    fn on_close(&mut self, now: Time, from: Rank, id: MsgId) {
        let p = &mut self.peers[from as usize];
        let Some(conn) = p.rx.get_mut(&id) else {
            return;
        };
        let RxState::Complete { data, closed } = &mut conn.state else {
            p.stats.bogus += 1;
            return;
        };
        if *closed {
            return;
        }
        *closed = true;
        conn.deadline = None;
        if conn.sends == 1 {
            p.rtt.sample(now.saturating_sub(conn.sent_at));
        }
        if data.is_none() {
            p.rx.remove(&id);
            p.lingering -= 1;
        }
    }

    /// Delivers, in order, every complete message of `from` that is next.
    fn deliver(&mut self, from: Rank) {
        let p = &mut self.peers[from as usize];
        loop {
            let id = p.next_deliver;
            let Some(conn) = p.rx.get_mut(&id) else {
                break;
            };
            let RxState::Complete { data, closed } = &mut conn.state else {
                break;
            };
            let Some(data) = data.take() else {
                break;
            };
            p.held -= conn.total;
            let closed = *closed;
            if closed {
                p.rx.remove(&id);
            } else {
                p.lingering += 1;
            }
            p.next_deliver = id.wrapping_add(1);
            p.stats.messages_delivered += 1;
            self.events.push_back(Event::Message { from, id, data });
        }
    }

    // ----- sender side -----

    /// Finds an open outgoing connection by id.
    fn tx_index(&self, to: Rank, id: MsgId) -> Option<usize> {
        self.peers[to as usize].tx.iter().position(|m| m.id == id)
    }

    /// Takes a round-trip sample from an answer to an Rts sent once.
    fn sample_rts(&mut self, now: Time, to: Rank, k: usize, aux: u32) {
        let p = &mut self.peers[to as usize];
        let m = &p.tx[k];
        if !m.open && m.rts_sends == 1 {
            let held = (aux as u64) << TS_SHIFT;
            let rtt = now.saturating_sub(m.rts_at);
            if held < rtt {
                p.rtt.sample(rtt - held);
            }
        }
    }

    /// Cts or Resend: the receiver wants `ranges` (already validated).
    fn on_request(&mut self, now: Time, to: Rank, hdr: &Header, ranges: &[(u64, u64)]) {
        let grants = self.grants.is_some();
        let Some(k) = self.tx_index(to, hdr.msg) else {
            // A late answer for a connection already finished.
            return;
        };
        self.sample_rts(now, to, k, hdr.aux);
        if !self.peers[to as usize].tx[k].open {
            self.resend_overtaken(to, k);
        }
        let p = &mut self.peers[to as usize];
        // Through a queue (congestion control follows its peak), the pass's last packets
        // take up to the longest recent round trip to arrive.
        let half_rtt = p.rtt.srtt().max(p.rtt.peak()) / 2;
        let m = &mut p.tx[k];
        let len = m.data.len() as u64;
        if ranges.iter().any(|&(a, b)| a >= b || b > len) {
            p.stats.bogus += 1;
            return;
        }
        let granted_todo = m.todo.first().is_some_and(|a| a < m.granted);
        if m.open && (granted_todo || now.saturating_sub(m.last_tx) < half_rtt) {
            // A pass is under way, or just ended: this request was written before the
            // receiver saw it (its timer fired while we were busy with other messages).
            // The pass ends with ACK_REQ, whose answer lists exactly what is missing;
            // acting on this one would resend what is already on its way.
            p.ignored_requests += 1;
            return;
        }
        if m.open && hdr.kind == Kind::Resend {
            // A pass ended with holes, or the receiver's timer asked again: a loss, in
            // proportion to what is still missing of what was sent.
            let missing: u64 = ranges
                .iter()
                .map(|&(a, b)| b.min(m.sent_hi).saturating_sub(a))
                .sum();
            p.cc.on_loss_share(now, &p.rtt, m.sent_hi.saturating_sub(missing), m.sent_hi);
        }
        if !m.open {
            // Nothing beyond the head was sent yet: all of it is to go, as far as granted.
            m.todo.insert(m.head as u64, len);
            m.granted = if grants { 0 } else { len };
        }
        m.open = true;
        m.rts_due = false;
        m.deadline = None;
        for &(a, b) in ranges {
            m.todo.insert(a, b);
            // What the receiver asks for again it has room for.
            m.granted = m.granted.max(b);
        }
        if grants && hdr.kind == Kind::Cts {
            m.granted = m.granted.max(hdr.offset.min(len));
        }
        if m.todo.first().is_some_and(|a| a < m.granted) {
            self.ready.insert(to);
        }
    }

    fn on_cts(&mut self, now: Time, to: Rank, hdr: &Header) {
        let Some(k) = self.tx_index(to, hdr.msg) else {
            return;
        };
        let m = &self.peers[to as usize].tx[k];
        let (head, len, open) = (m.head as u64, m.data.len() as u64, m.open);
        if head == len {
            // Nothing beyond the head to send: only Fin answers a single-packet message.
            self.peers[to as usize].stats.bogus += 1;
            return;
        }
        if self.grants.is_some() && open {
            // A grant's extension: more of the message may go, nothing to resend.
            let m = &mut self.peers[to as usize].tx[k];
            m.granted = m.granted.max(hdr.offset.min(len));
            if m.todo.first().is_some_and(|a| a < m.granted) {
                self.ready.insert(to);
            }
            return;
        }
        if self.grants.is_some() {
            // The first Cts: how far it grants is in `offset`.
            self.on_request(now, to, hdr, &[]);
        } else {
            self.on_request(now, to, hdr, &[(head, len)]);
        }
    }

    fn on_resend(&mut self, now: Time, to: Rank, hdr: &Header, payload: &[u8]) {
        if !payload.len().is_multiple_of(16) {
            self.peers[to as usize].stats.bogus += 1;
            return;
        }
        let mut ranges = Vec::with_capacity(1 + payload.len() / 16);
        ranges.push((hdr.offset, hdr.total));
        for c in payload.chunks_exact(16) {
            let a = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
            let b = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
            ranges.push((a, b));
        }
        self.on_request(now, to, hdr, &ranges);
    }

    fn on_fin(&mut self, now: Time, to: Rank, hdr: &Header) {
        let id = hdr.msg;
        match self.tx_index(to, id) {
            Some(k) => {
                self.sample_rts(now, to, k, hdr.aux);
                self.resend_overtaken(to, k);
                let p = &mut self.peers[to as usize];
                let m = p.tx.remove(k).expect("index just found");
                let mp = self.c.max_payload[to as usize].max(1);
                p.cc.on_ack(m.data.len().div_ceil(mp).max(1) as u32);
                if m.notify {
                    self.events.push_back(Event::Sent { to, id });
                }
                p.stats.acked += 1;
                self.push_ctl(Kind::Close, to, id, |_| {});
                // Its slot in the window is free: more messages may open.
                if self.has_work(to) {
                    self.ready.insert(to);
                }
            }
            None if before(id, self.peers[to as usize].next_open) => {
                // Finished here already: our Close was lost.
                self.push_ctl(Kind::Close, to, id, |_| {});
            }
            None => self.peers[to as usize].stats.bogus += 1,
        }
    }

    fn can_open(&self, to: Rank) -> bool {
        let p = &self.peers[to as usize];
        let oldest = p.tx.front().map_or(p.next_open, |m| m.id);
        !p.out.is_empty() && p.next_open.wrapping_sub(oldest) < self.cfg.window
    }

    fn has_work(&self, to: Rank) -> bool {
        let p = &self.peers[to as usize];
        p.closed.is_none()
            && (self.can_open(to)
                || p.tx
                    .iter()
                    .any(|m| m.rts_due || m.todo.first().is_some_and(|a| a < m.granted)))
    }

    /// Opens connections for queued messages while the window allows.
    fn open(&mut self, to: Rank) {
        let mp = self.c.max_payload[to as usize].max(1);
        while self.can_open(to) {
            let p = &mut self.peers[to as usize];
            let Some((id, data, notify)) = p.out.pop_message() else {
                break;
            };
            p.next_open = id.wrapping_add(1);
            p.tx.push_back(TxMsg {
                id,
                head: data.len().min(mp),
                data,
                notify,
                open: false,
                rts_due: true,
                rts_sends: 0,
                rts_at: 0,
                deadline: None,
                todo: RangeSet::default(),
                sent_hi: 0,
                last_tx: 0,
                granted: 0,
            });
        }
    }

    /// Appends up to `budget` packets for `to`: Rts first (they open connections and
    /// carry whole small messages), then data in message order.
    fn send_some(&mut self, now: Time, to: Rank, out: &mut Vec<Transmit>, budget: usize) -> usize {
        self.open(to);
        let mp = self.c.max_payload[to as usize].max(1) as u64;
        let mut n = 0;
        for k in 0..self.peers[to as usize].tx.len() {
            if n >= budget {
                return n;
            }
            if !self.peers[to as usize].tx[k].rts_due {
                continue;
            }
            let (sends, prev) = {
                let m = &self.peers[to as usize].tx[k];
                (m.rts_sends + 1, m.rts_at)
            };
            let deadline = now + self.rto(to, self.backoff_sends(to, sends, prev));
            let p = &mut self.peers[to as usize];
            let m = &mut p.tx[k];
            m.rts_due = false;
            m.rts_sends = sends;
            m.rts_at = now;
            m.deadline = Some(deadline);
            let mut h = Header::new(Kind::Rts);
            h.dst = to;
            h.msg = m.id;
            h.total = m.data.len() as u64;
            h.len = m.head as u32;
            h.aux = sends;
            h.flags = flags::FIRST;
            if m.head == m.data.len() {
                h.flags |= flags::LAST;
            }
            if sends > 1 {
                h.flags |= flags::RETRANSMIT;
                p.stats.retransmits += 1;
            }
            p.stats.data_sent += 1;
            p.stats.bytes_sent += m.head as u64;
            out.push(Transmit {
                hdr: h,
                payload: m.data.slice(..m.head),
            });
            self.timers.set_earlier(to, deadline);
            n += 1;
        }
        let p = &mut self.peers[to as usize];
        // The window per round trip through the queue: the bare path's round trip (a
        // small Rts and its Cts) would set a rate far above what a shared port drains.
        let gap = p.cc.pace_gap(p.rtt.srtt().max(p.rtt.peak()), MAX_WINDOW);
        let burst = p.cc.packets();
        let mut paced = false;
        'msgs: for m in p.tx.iter_mut() {
            while n < budget {
                if !p.cc.may_send(now) {
                    paced = true;
                    break 'msgs;
                }
                // Only what the receiver granted (all of it without grants).
                let Some(first) = m.todo.first().filter(|&a| a < m.granted) else {
                    break;
                };
                let Some((a, b)) = m.todo.pop_front(mp.min(m.granted - first)) else {
                    break;
                };
                p.cc.sent(now, gap, burst);
                let mut h = Header::new(Kind::Data);
                h.dst = to;
                h.msg = m.id;
                h.offset = a;
                // The pacing gap, so that the receiver's timer does not take a paced
                // stream for a stalled one.
                h.credit = (gap / crate::US).min(u16::MAX as Time) as u16;
                h.total = m.data.len() as u64;
                h.len = (b - a) as u32;
                if b == h.total {
                    h.flags |= flags::LAST;
                }
                if m.todo.is_empty() {
                    // End of this pass: the receiver answers with Fin or the holes.
                    h.flags |= flags::ACK_REQ;
                }
                if b <= m.sent_hi {
                    h.flags |= flags::RETRANSMIT;
                    p.stats.retransmits += 1;
                }
                m.sent_hi = m.sent_hi.max(b);
                m.last_tx = now;
                p.stats.data_sent += 1;
                p.stats.bytes_sent += b - a;
                out.push(Transmit {
                    hdr: h,
                    payload: m.data.slice(a as usize..b as usize),
                });
                n += 1;
            }
        }
        if paced {
            // The pacing timer: `peer_timeout` puts the peer back on the ready list.
            self.timers.set_earlier(to, p.cc.next_send());
        }
        n
    }

    /// Runs `peer`'s due timers and re-arms its earliest remaining deadline.
    fn peer_timeout(&mut self, now: Time, peer: Rank) {
        let mut due_rx = Vec::new();
        // While new data from the peer keeps coming, it is working through its messages
        // to us, in order: a request for a later one would only duplicate what is queued.
        // With grants every peer's data shares this host's port, queued behind what was
        // granted to others: while any of it arrives, the queue drains.
        let last_data = if self.grants.is_some() {
            self.last_data
        } else {
            self.peers[peer as usize].last_data
        };
        let flowing_until = last_data + self.rto(peer, 1) + 2 * self.peers[peer as usize].peer_gap;
        let queue_wait = if self.grants.is_some() {
            self.queue_wait(peer)
        } else {
            0
        };
        let p = &mut self.peers[peer as usize];
        if p.closed.is_some() {
            return;
        }
        let mut next: Option<Time> = None;
        let mut wake = false;
        for m in p.tx.iter_mut() {
            match m.deadline {
                Some(t) if t <= now && !m.open => {
                    // No answer to the Rts: send it again.
                    m.deadline = None;
                    m.rts_due = true;
                    p.stats.timeouts += 1;
                    // One packet lost (or its answer): a loss, not an empty path.
                    p.cc.on_loss(now, &p.rtt);
                    wake = true;
                }
                Some(t) => next = Some(next.map_or(t, |n: Time| n.min(t))),
                None => {}
            }
        }
        for (&id, c) in p.rx.iter_mut() {
            match c.deadline {
                Some(t)
                    if t <= now
                        && flowing_until > now
                        && matches!(c.state, RxState::Receiving { .. }) =>
                {
                    c.deadline = Some(flowing_until);
                    next = Some(next.map_or(flowing_until, |n: Time| n.min(flowing_until)));
                }
                Some(t)
                    if t <= now
                        && c.grant_at + queue_wait > now
                        && matches!(&c.state, RxState::Receiving { have, granted, .. } if *granted > have.end()) =>
                {
                    // Granted data that may still be queued is not late: asking for it
                    // again would send it twice into full ports, and counting the
                    // silence as a stall would grant its share to others meanwhile.
                    let until = c.grant_at + queue_wait;
                    c.deadline = Some(until);
                    next = Some(next.map_or(until, |n: Time| n.min(until)));
                }
                Some(t) if t <= now => {
                    c.deadline = None;
                    due_rx.push((id, c.sends));
                }
                Some(t) => next = Some(next.map_or(t, |n: Time| n.min(t))),
                None => {}
            }
        }
        if p.cc.on() && p.tx.iter().any(|m| !m.todo.is_empty()) {
            if p.cc.may_send(now) {
                wake = true;
            } else {
                let t = p.cc.next_send();
                next = Some(next.map_or(t, |n: Time| n.min(t)));
            }
        }
        // Deterministic order, whatever the hash map's.
        due_rx.sort_unstable_by_key(|&(id, _)| id.wrapping_sub(p.next_deliver));
        if wake {
            self.ready.insert(peer);
        }
        let mut asked = false;
        for (id, sends) in due_rx {
            self.peers[peer as usize].stats.timeouts += 1;
            let state = self.peers[peer as usize].rx.get(&id).map(|c| &c.state);
            match state {
                Some(RxState::Receiving { .. }) => {
                    self.request(now, peer, id);
                    asked = true;
                }
                Some(RxState::Complete { closed: false, .. }) => self.send_fin(now, peer, id),
                _ => continue,
            }
            self.arm_rx(now, peer, id, sends.saturating_add(1));
        }
        if asked {
            // A message may have stalled: its share of the budget goes to the next ones.
            self.regrant(now);
        }
        if let Some(t) = next {
            self.timers.set_earlier(peer, t);
        }
    }
}

impl Rmpp {
    /// Records that `peer` sent what no correct member sends ([`PeerMisbehaved`]); the
    /// first such peer is reported, and its packets are ignored from then on.
    fn misbehave(&mut self, peer: Rank, what: String) {
        self.misbehaved.get_or_insert(PeerMisbehaved { peer, what });
    }
}

impl Protocol for Rmpp {
    fn misbehaving(&self) -> Option<&PeerMisbehaved> {
        self.misbehaved.as_ref()
    }

    fn name(&self) -> &'static str {
        "rmpp"
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
        if self.can_open(to) {
            self.ready.insert(to);
        }
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
        if !self.valid_peer(from) || self.misbehaved.as_ref().is_some_and(|m| m.peer == from) {
            return;
        }
        self.peers[from as usize].last_heard = now;
        let s = &mut self.peers[from as usize].stats;
        match hdr.kind {
            Kind::Cts | Kind::Resend | Kind::Fin | Kind::Close => {
                s.control_received += 1;
                match hdr.kind {
                    Kind::Fin => s.acks_received += 1,
                    Kind::Resend => s.nacks_received += 1,
                    _ => {}
                }
            }
            _ => {}
        }
        match hdr.kind {
            Kind::Rts => self.on_rts(now, from, hdr, payload),
            Kind::Data => self.on_data(now, from, hdr, payload),
            Kind::Cts => self.on_cts(now, from, hdr),
            Kind::Resend => self.on_resend(now, from, hdr, payload),
            Kind::Fin => self.on_fin(now, from, hdr),
            Kind::Close => self.on_close(now, from, hdr.msg),
            _ => self.peers[from as usize].stats.bogus += 1,
        }
    }

    fn poll_transmit(&mut self, now: Time, out: &mut Vec<Transmit>, max: usize) {
        if std::mem::take(&mut self.regrant_due) {
            self.regrant(now);
        }
        let mut n = 0;
        // Control first: small, and each one unblocks a connection.
        while n < max {
            let Some(t) = self.ctl.pop_front() else {
                break;
            };
            out.push(t);
            n += 1;
        }
        while n < max {
            let Some(to) = self.ready.pop() else {
                break;
            };
            if self.peers[to as usize].closed.is_some() {
                continue;
            }
            let budget = (max - n).min(self.cfg.burst);
            let sent = self.send_some(now, to, out, budget);
            n += sent;
            if sent > 0 && self.has_work(to) {
                self.ready.insert(to);
            }
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
            self.peer_timeout(now, peer);
        }
    }

    fn outstanding(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        !p.out.is_empty()
            || !p.tx.is_empty()
            || p.rx.values().any(|c| match c.state {
                RxState::Announced { .. } => false,
                RxState::Receiving { .. } => true,
                RxState::Complete { closed, .. } => !closed,
            })
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        let p = &self.peers[peer as usize];
        PeerStats {
            srtt_ns: p.rtt.srtt(),
            held_bytes: p.held,
            ..p.stats
        }
    }

    fn close_peer(&mut self, dead: PeerDead) {
        let peer = dead.peer;
        let p = &mut self.peers[peer as usize];
        p.closed = Some(Box::new(dead));
        p.out.clear();
        p.tx = VecDeque::new();
        for c in p.rx.values() {
            if let RxState::Announced { head } = &c.state {
                self.announced_bytes -= head.len() as u64;
            }
        }
        // Messages complete but held for order can never be delivered now.
        p.rx = HashMap::new();
        p.held = 0;
        p.lingering = 0;
        self.timers.clear(peer);
        self.ctl.retain(|t| t.hdr.dst != peer);
        self.regrant_due = self.grants.is_some();
    }

    /// Nothing depends on whether the upper layer waits.
    fn expect(&mut self, _now: Time, _peer: Rank, _waiting: bool) {}

    fn announcing(&mut self) -> Option<&mut dyn Announcing> {
        Some(self)
    }
}

impl Announcing for Rmpp {
    fn accept(&mut self, now: Time, from: Rank, id: MsgId) {
        if !self.valid_peer(from) {
            return;
        }
        let p = &mut self.peers[from as usize];
        let Some(conn) = p.rx.get_mut(&id) else {
            return;
        };
        let RxState::Announced { head } = &mut conn.state else {
            return;
        };
        let total = conn.total;
        // The posted receive buffer, charged whole to the peer's budget: a correct sender
        // opens at most `window` messages, which may together exceed the budget; one
        // that does not fit now is refused as for want of memory, and the sender's Rts
        // timer asks again once earlier messages were delivered. A total the allocator
        // cannot meet is refused the same way rather than aborting the process.
        let mut buf = FillBuf::new(total as usize);
        let fits = p.held + total <= self.c.peer_budget;
        if !fits || buf.write_within(0, head, total).is_err() {
            self.announced_bytes -= head.len() as u64;
            p.rx.remove(&id);
            p.stats.drop_no_buffer += 1;
            return;
        }
        p.held += total;
        let head = std::mem::take(head);
        self.announced_bytes -= head.len() as u64;
        let mut have = RangeSet::default();
        have.insert(0, head.len() as u64);
        if head.len() as u64 == total {
            conn.state = RxState::Complete {
                data: Some(buf.into_vec()),
                closed: false,
            };
            self.send_fin(now, from, id);
            self.arm_rx(now, from, id, 1);
            self.deliver(from);
        } else {
            // With grants the Cts grants nothing beyond the head (it stops the sender's
            // Rts timer) until the message's turn comes; no timer runs while it waits.
            let granted = if self.grants.is_some() {
                head.len() as u64
            } else {
                total
            };
            conn.state = RxState::Receiving {
                buf,
                have,
                got_data: false,
                granted,
            };
            match &mut self.grants {
                Some(q) => {
                    q.push_back((from, id));
                    self.regrant(now);
                    if self.peers[from as usize]
                        .rx
                        .get(&id)
                        .is_some_and(|c| c.sends == 0)
                    {
                        // Not its turn: a Cts for the head alone.
                        self.request(now, from, id);
                    }
                }
                None => {
                    self.request(now, from, id);
                    self.arm_rx(now, from, id, 1);
                }
            }
        }
    }

    fn set_auto_accept(&mut self, now: Time, on: bool) {
        self.cfg.auto_accept = on;
        if !on {
            return;
        }
        // Whatever was announced and not yet accepted is accepted now, in order.
        for from in 0..self.c.nprocs {
            if !self.valid_peer(from) {
                continue;
            }
            let p = &self.peers[from as usize];
            let mut ids: Vec<MsgId> =
                p.rx.iter()
                    .filter(|(_, c)| matches!(c.state, RxState::Announced { .. }))
                    .map(|(&id, _)| id)
                    .collect();
            ids.sort_unstable_by_key(|id| id.wrapping_sub(p.next_deliver));
            for id in ids {
                self.accept(now, from, id);
            }
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
    use super::*;
    use crate::testkit::{Duo, common, deref_duo, events, exchange, pattern, rx, rx_all, tx};
    use crate::{MS, SEC, US};
    use proptest::prelude::*;
    use rand::RngExt;

    const MP: usize = 100;

    fn cfg(window: u32, auto: bool) -> RmppConfig {
        RmppConfig {
            window,
            auto_accept: auto,
            ..RmppConfig::default()
        }
    }

    fn pair(c: RmppConfig, mp: usize) -> (Rmpp, Rmpp) {
        (
            Rmpp::new(common(0, mp), c.clone()).unwrap(),
            Rmpp::new(common(1, mp), c).unwrap(),
        )
    }

    fn kinds(ts: &[Transmit]) -> Vec<Kind> {
        ts.iter().map(|t| t.hdr.kind).collect()
    }

    /// (id, head length) of each Announce, and the messages, in `evs`.
    type Split = (Vec<(MsgId, usize)>, Vec<(MsgId, Vec<u8>)>, Vec<MsgId>);

    fn split(evs: Vec<Event>) -> Split {
        let (mut ann, mut msg, mut sent) = (Vec::new(), Vec::new(), Vec::new());
        for e in evs {
            match e {
                Event::Announce { id, head, .. } => ann.push((id, head.len())),
                Event::Message { id, data, .. } => msg.push((id, data)),
                Event::Sent { id, .. } => sent.push(id),
                Event::PeerDead { .. } => panic!("deaths are the engine's to report"),
            }
        }
        (ann, msg, sent)
    }

    /// The delivery rate the grants' wait uses: measured over busy arrivals, an idle gap
    /// restarting the measurement instead of slowing it.
    #[test]
    fn delivery_rate_is_measured_over_busy_arrivals() {
        let us = crate::US;
        let (mut ns, mut mark) = (0, None);
        // 1 KiB every 10 us: 10 us per KiB once 16 KiB came after the first packet.
        for k in 0..16u64 {
            Rmpp::note_rate(&mut ns, &mut mark, k * 10 * us, true, 1024);
            assert_eq!(ns, 0, "not measured yet");
        }
        Rmpp::note_rate(&mut ns, &mut mark, 160 * us, true, 1024);
        assert_eq!(ns, 10 * us);
        Rmpp::note_rate(&mut ns, &mut mark, crate::SEC, false, 1024);
        for k in 1..=16u64 {
            Rmpp::note_rate(&mut ns, &mut mark, crate::SEC + k * 10 * us, true, 1024);
        }
        assert_eq!(ns, 10 * us, "the idle second is not in the rate");
    }

    #[test]
    fn range_set() {
        let mut r = RangeSet::default();
        assert_eq!(r.insert(10, 20), 10);
        assert_eq!(r.insert(30, 40), 10);
        assert_eq!(r.insert(15, 35), 10);
        assert_eq!((r.len(), r.ranges()), (30, 1));
        assert_eq!(r.insert(0, 10), 10, "adjacent ranges merge");
        assert_eq!(r.ranges(), 1);
        assert_eq!(r.insert(5, 6), 0);
        assert_eq!(r.gaps(50, 10), vec![(40, 50)]);
        r.insert(45, 47);
        assert_eq!(r.gaps(50, 10), vec![(40, 45), (47, 50)]);
        assert_eq!(r.gaps(50, 1), vec![(40, 45)]);
        assert_eq!(r.pop_front(25), Some((0, 25)));
        assert_eq!(r.pop_front(100), Some((25, 40)));
        assert_eq!(r.pop_front(100), Some((45, 47)));
        assert_eq!(r.pop_front(1), None);
        assert!(r.is_empty());
        assert_eq!(r.len(), 0);
        assert_eq!(RangeSet::default().gaps(7, 3), vec![(0, 7)]);
        assert_eq!(r.insert(3, 3), 0);
    }

    #[test]
    fn config_defaults_and_registration() {
        let d = RmppConfig::default();
        assert!(d.validate().is_ok() && !d.auto_accept);
        assert!(crate::PROTOCOLS.contains(&"rmpp"));
        assert_eq!(
            crate::by_name("rmpp", Common::new(0, 2, MP), &Default::default())
                .unwrap()
                .name(),
            "rmpp"
        );
    }

    /// A message that fits in one packet travels whole in the Rts: no Cts, delivered on
    /// accept; Fin and Close tear down; nothing remains on either side.
    #[test]
    fn single_packet_message_needs_no_handshake() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        a.send(0, 1, pattern(MP, 1), true).unwrap();
        let rts = tx(&mut a, 0);
        assert_eq!(kinds(&rts), [Kind::Rts]);
        assert!(rts[0].hdr.has(flags::FIRST) && rts[0].hdr.has(flags::LAST));
        assert_eq!(rts[0].payload.len(), MP);
        rx_all(&mut b, 10 * US, &rts);
        let (ann, msg, _) = split(events(&mut b));
        assert_eq!((ann, msg.len()), (vec![(0, MP)], 0));
        // Nothing is answered before the receive is posted.
        assert!(tx(&mut b, 10 * US).is_empty());
        b.accept(20 * US, 0, 0);
        let (_, msg, _) = split(events(&mut b));
        assert_eq!(msg, vec![(0, pattern(MP, 1).to_vec())]);
        let fin = tx(&mut b, 20 * US);
        assert_eq!(kinds(&fin), [Kind::Fin]);
        assert!(b.outstanding(0), "waits for the Close");
        rx_all(&mut a, 30 * US, &fin);
        let (_, _, sent) = split(events(&mut a));
        assert_eq!(sent, [0]);
        // The round trip excludes the 10 us the Rts waited for acceptance (reported in
        // 64 ns units).
        assert!(a.peer_stats(1).srtt_ns.abs_diff(20 * US) < 64);
        let close = tx(&mut a, 30 * US);
        assert_eq!(kinds(&close), [Kind::Close]);
        rx_all(&mut b, 40 * US, &close);
        assert_eq!(b.peer_stats(0).srtt_ns, 20 * US, "Fin -> Close");
        assert!(!a.outstanding(1) && !b.outstanding(0));
        assert_eq!((a.open_to(1), b.records_from(0)), (0, 0));
        assert_eq!(
            a.poll_timeout().map(|_| ()),
            Some(()),
            "stale deadline only"
        );
        a.handle_timeout(SEC);
        b.handle_timeout(SEC);
        assert!(tx(&mut a, SEC).is_empty() && tx(&mut b, SEC).is_empty());
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(b.poll_timeout(), None);
        let (sa, sb) = (a.peer_stats(1), b.peer_stats(0));
        assert_eq!(
            (sa.data_sent, sa.control_sent, sa.control_received),
            (1, 1, 1)
        );
        assert_eq!(
            (sb.data_received, sb.acks_sent, sb.messages_delivered),
            (1, 1, 1)
        );
    }

    #[test]
    fn zero_byte_message() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        a.send(0, 1, Bytes::new(), false).unwrap();
        let rts = tx(&mut a, 0);
        assert_eq!(rts[0].hdr.total, 0);
        rx_all(&mut b, 0, &rts);
        let (ann, msg, _) = split(events(&mut b));
        assert!(ann.is_empty(), "auto_accept announces nothing");
        assert_eq!(msg, vec![(0, vec![])]);
    }

    /// The whole handshake of a long message, stage by stage.
    #[test]
    fn multi_packet_message_stages() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        let data = pattern(5 * MP + 7, 2);
        a.send(0, 1, data.clone(), true).unwrap();
        let rts = tx(&mut a, 0);
        assert_eq!(kinds(&rts), [Kind::Rts]);
        assert_eq!(
            (rts[0].hdr.total, rts[0].payload.len()),
            (data.len() as u64, MP)
        );
        assert!(!rts[0].hdr.has(flags::LAST));
        // Flow control: no data leaves before the Cts, however long that takes.
        assert!(tx(&mut a, MS).is_empty());
        rx_all(&mut b, 0, &rts);
        assert_eq!(split(events(&mut b)).0, vec![(0, MP)]);
        b.accept(0, 0, 0);
        let cts = tx(&mut b, 0);
        assert_eq!(kinds(&cts), [Kind::Cts]);
        rx_all(&mut a, 0, &cts);
        let d = tx(&mut a, 0);
        assert_eq!(kinds(&d), [Kind::Data; 5]);
        assert_eq!(d[0].hdr.offset, MP as u64);
        assert!(d[..4].iter().all(|t| !t.hdr.has(flags::ACK_REQ)));
        assert!(d[4].hdr.has(flags::ACK_REQ) && d[4].hdr.has(flags::LAST));
        assert_eq!(d[4].payload.len(), 7);
        rx_all(&mut b, 0, &d);
        let (_, msg, _) = split(events(&mut b));
        assert_eq!(msg, vec![(0, data.to_vec())]);
        let fin = tx(&mut b, 0);
        assert_eq!(kinds(&fin), [Kind::Fin]);
        rx_all(&mut a, 0, &fin);
        assert_eq!(split(events(&mut a)).2, [0]);
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert!(!a.outstanding(1) && !b.outstanding(0) && b.records_from(0) == 0);
    }

    #[test]
    fn lost_rts_is_resent_with_back_off_until_accepted() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        a.send(0, 1, pattern(3 * MP, 3), false).unwrap();
        assert_eq!(kinds(&tx(&mut a, 0)), [Kind::Rts]); // lost
        let t1 = a.poll_timeout().unwrap();
        assert_eq!(t1, 10 * MS, "initial RTO");
        a.handle_timeout(t1);
        let r = tx(&mut a, t1);
        assert_eq!(kinds(&r), [Kind::Rts]);
        assert!(r[0].hdr.has(flags::RETRANSMIT));
        let t2 = a.poll_timeout().unwrap();
        assert_eq!(t2 - t1, 20 * MS, "backed off");
        // Arrives, but nobody accepts: duplicates are not answered.
        rx_all(&mut b, t1, &r);
        a.handle_timeout(t2);
        rx_all(&mut b, t2, &tx(&mut a, t2));
        assert!(tx(&mut b, t2).is_empty());
        assert_eq!(split(events(&mut b)).0.len(), 1, "announced once");
        assert_eq!(a.peer_stats(1).timeouts, 2);
        b.accept(t2, 0, 0);
        rx_all(&mut a, t2, &tx(&mut b, t2));
        // Karn: the Rts went three times, so no sample.
        assert_eq!(a.peer_stats(1).srtt_ns, 0);
        assert_eq!(kinds(&tx(&mut a, t2)), [Kind::Data, Kind::Data]);
    }

    /// An answer to a later Rts shows an earlier one, sent before it and unanswered, was
    /// lost: it goes again at once, not at its timeout.
    #[test]
    fn an_overtaken_rts_is_resent_at_once() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        a.send(0, 1, pattern(10, 0), false).unwrap();
        a.send(0, 1, pattern(10, 1), false).unwrap();
        let rts = tx(&mut a, 0);
        assert_eq!(kinds(&rts), [Kind::Rts, Kind::Rts]);
        rx_all(&mut b, 0, &rts[1..]); // the first is lost
        let fin = tx(&mut b, 0);
        assert_eq!(kinds(&fin), [Kind::Fin]);
        rx_all(&mut a, 10 * US, &fin);
        let again = tx(&mut a, 10 * US);
        assert_eq!(kinds(&again), [Kind::Close, Kind::Rts]);
        assert_eq!((again[1].hdr.msg, again[1].hdr.aux), (0, 2));
        assert_eq!(a.peer_stats(1).timeouts, 0, "no timer was waited for");
        rx_all(&mut b, 10 * US, &again);
        let got = split(events(&mut b)).1;
        assert_eq!(got.len(), 2, "both delivered, in order");
    }

    /// Jobs' settings: timers back off only toward a silent peer, and only after two
    /// retransmissions in a row.
    #[test]
    fn recommended_timers_back_off_only_toward_a_silent_peer() {
        let c = RmppConfig {
            auto_accept: true,
            ..RmppConfig::recommended()
        };
        let mut a = Rmpp::new(common(0, MP), c.clone()).unwrap();
        a.send(0, 1, pattern(10, 0), false).unwrap();
        tx(&mut a, 0); // lost, and every resend too
        let mut now = 0;
        let mut gaps = Vec::new();
        for _ in 0..5 {
            let t = a.poll_timeout().unwrap();
            gaps.push(t - now);
            now = t;
            a.handle_timeout(now);
            tx(&mut a, now);
        }
        // No round trip measured yet: the base is the initial timeout (10 ms here).
        let rto = 10 * MS;
        assert_eq!(gaps, [rto, rto, rto, 2 * rto, 4 * rto], "{gaps:?}");
        // The paper's default doubles at once.
        assert_eq!(
            RmppConfig::recommended().with_backoff(0, MAX_BACKOFF),
            RmppConfig::default()
        );
        let mut a = Rmpp::new(common(0, MP), cfg(8, true)).unwrap();
        a.send(0, 1, pattern(10, 0), false).unwrap();
        tx(&mut a, 0);
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
        tx(&mut a, t);
        assert_eq!(a.poll_timeout().unwrap() - t, 2 * rto);
    }

    #[test]
    fn lost_cts_is_resent_by_the_receiver() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        a.send(0, 1, pattern(3 * MP, 4), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert_eq!(kinds(&tx(&mut b, 0)), [Kind::Cts]); // lost
        let t = b.poll_timeout().unwrap();
        b.handle_timeout(t);
        let cts = tx(&mut b, t);
        assert_eq!(kinds(&cts), [Kind::Cts]);
        assert_eq!(b.peer_stats(0).timeouts, 1);
        rx_all(&mut a, t, &cts);
        rx_all(&mut b, t, &tx(&mut a, t));
        assert_eq!(split(events(&mut b)).1.len(), 1);
        // A duplicate Rts is answered with the Cts too (tested with a fresh message).
        a.send(0, 1, pattern(3 * MP, 5), false).unwrap();
        let rts = tx(&mut a, t);
        rx_all(&mut b, t, &rts);
        tx(&mut b, t); // Cts lost
        rx_all(&mut b, t, &rts);
        assert!(kinds(&tx(&mut b, t)).contains(&Kind::Cts));
    }

    #[test]
    fn lost_data_is_asked_for_by_range() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        let data = pattern(10 * MP, 6);
        a.send(0, 1, data.clone(), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        rx_all(&mut a, 0, &tx(&mut b, 0));
        let d = tx(&mut a, 0);
        assert_eq!(d.len(), 9);
        // Packets 2, 3 and 6 of the data lost; the last (ACK_REQ) arrives.
        for (i, t) in d.iter().enumerate() {
            if ![2, 3, 6].contains(&i) {
                rx(&mut b, 0, t);
            }
        }
        let rs = tx(&mut b, 0);
        assert_eq!(kinds(&rs), [Kind::Resend]);
        let h = rs[0].hdr;
        assert_eq!(
            (h.offset, h.total, h.aux),
            (3 * MP as u64, 5 * MP as u64, 2)
        );
        assert_eq!(rs[0].payload.len(), 16);
        rx_all(&mut a, 0, &rs);
        let r = tx(&mut a, 0);
        let offs: Vec<u64> = r.iter().map(|t| t.hdr.offset).collect();
        assert_eq!(offs, [3 * MP as u64, 4 * MP as u64, 7 * MP as u64]);
        assert!(r.iter().all(|t| t.hdr.has(flags::RETRANSMIT)));
        assert!(r[2].hdr.has(flags::ACK_REQ) && !r[1].hdr.has(flags::ACK_REQ));
        assert_eq!(a.peer_stats(1).retransmits, 3);
        rx_all(&mut b, 0, &r);
        assert_eq!(split(events(&mut b)).1, vec![(0, data.to_vec())]);
        assert_eq!(kinds(&tx(&mut b, 0)), [Kind::Fin]);
    }

    #[test]
    fn lost_tail_is_found_by_the_receiver_timer() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        a.send(0, 1, pattern(4 * MP, 7), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        rx_all(&mut a, 0, &tx(&mut b, 0));
        let d = tx(&mut a, 0);
        rx_all(&mut b, 10 * US, &d[..2]); // the last, asking for an answer, is lost
        assert!(tx(&mut b, 10 * US).is_empty());
        let t = b.poll_timeout().unwrap();
        b.handle_timeout(t);
        let rs = tx(&mut b, t);
        assert_eq!(kinds(&rs), [Kind::Resend]);
        assert_eq!(
            (rs[0].hdr.offset, rs[0].hdr.total),
            (3 * MP as u64, 4 * MP as u64)
        );
        rx_all(&mut a, t, &rs);
        rx_all(&mut b, t, &tx(&mut a, t));
        assert_eq!(split(events(&mut b)).1.len(), 1);
    }

    #[test]
    fn lost_fin_and_lost_close_are_recovered_by_the_fin_timer() {
        let (mut a, mut b) = pair(cfg(8, true), MP);
        a.send(0, 1, pattern(10, 8), true).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert_eq!(kinds(&tx(&mut b, 0)), [Kind::Fin]); // lost
        assert!(a.outstanding(1));
        let t = b.poll_timeout().unwrap();
        b.handle_timeout(t);
        let fin = tx(&mut b, t);
        assert_eq!(kinds(&fin), [Kind::Fin]);
        rx_all(&mut a, t, &fin);
        assert_eq!(split(events(&mut a)).2, [0]);
        assert!(!a.outstanding(1));
        assert_eq!(kinds(&tx(&mut a, t)), [Kind::Close]); // lost
        let t2 = b.poll_timeout().unwrap();
        assert!(t2 - t >= 2 * MS, "backed off");
        b.handle_timeout(t2);
        let fin = tx(&mut b, t2);
        rx_all(&mut a, t2, &fin);
        assert!(split(events(&mut a)).2.is_empty(), "Sent reported once");
        let close = tx(&mut a, t2);
        assert_eq!(kinds(&close), [Kind::Close], "answered statelessly");
        rx_all(&mut b, t2, &close);
        assert!(!b.outstanding(0) && b.records_from(0) == 0);
    }

    /// Per-pair order holds whatever order the upper layer accepts in.
    #[test]
    fn delivery_in_order_whatever_the_acceptance_order() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        for i in 0..3 {
            a.send(0, 1, pattern(2 * MP, i), false).unwrap();
        }
        let rts = tx(&mut a, 0);
        assert_eq!(kinds(&rts), [Kind::Rts; 3], "pipelined");
        rx_all(&mut b, 0, &rts);
        assert_eq!(split(events(&mut b)).0.len(), 3);
        for id in [2, 1] {
            b.accept(0, 0, id);
        }
        let mut now = 0;
        for _ in 0..4 {
            now += 10 * US;
            rx_all(&mut a, now, &tx(&mut b, now));
            rx_all(&mut b, now, &tx(&mut a, now));
        }
        assert!(split(events(&mut b)).1.is_empty(), "held for message 0");
        assert_eq!(a.open_to(1), 1, "1 and 2 finished");
        b.accept(now, 0, 0);
        for _ in 0..4 {
            now += 10 * US;
            rx_all(&mut a, now, &tx(&mut b, now));
            rx_all(&mut b, now, &tx(&mut a, now));
        }
        let ids: Vec<MsgId> = split(events(&mut b)).1.iter().map(|m| m.0).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert!(!a.outstanding(1) && !b.outstanding(0) && b.records_from(0) == 0);
    }

    #[test]
    fn window_bounds_open_connections() {
        let (mut a, mut b) = pair(cfg(4, false), MP);
        for i in 0..10 {
            a.send(0, 1, pattern(5, i), false).unwrap();
        }
        assert_eq!(tx(&mut a, 0).len(), 4);
        assert_eq!(a.open_to(1), 4);
        // A receiver refuses an Rts beyond its window (a confused sender).
        let mut h = Header::new(Kind::Rts);
        h.src = 0;
        h.dst = 1;
        h.msg = 4;
        h.total = 1;
        h.len = 1;
        b.handle(0, &h, &[1]);
        assert_eq!(b.peer_stats(0).drop_out_of_window, 1);
        assert_eq!(b.records_from(0), 0);
    }

    /// A lost Rts holds back the announcement of later messages until its resend: the
    /// upper layer matches heads in the order sent (p2p binds a rendezvous body to the
    /// next head it sees).
    #[test]
    fn lost_rts_holds_later_announcements() {
        let c = RmppConfig {
            announce_bytes: 150,
            ..cfg(8, false)
        };
        let (mut a, mut b) = pair(c, MP);
        for i in 0..3 {
            a.send(0, 1, pattern(MP, i), false).unwrap();
        }
        let rts = tx(&mut a, 0);
        assert_eq!(kinds(&rts), [Kind::Rts; 3]);
        // Rts 0 is lost; 1 arrives, and 2 finds the head memory full.
        rx_all(&mut b, 10 * US, &rts[1..]);
        assert!(
            events(&mut b).is_empty(),
            "nothing announced ahead of message 0"
        );
        assert_eq!(b.peer_stats(0).drop_no_buffer, 1);
        // The resent Rts 0 is the next to announce: taken although the memory is full.
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
        let again = tx(&mut a, t);
        assert_eq!(kinds(&again), [Kind::Rts; 3]);
        rx(&mut b, t, &again[0]);
        assert_eq!(split(events(&mut b)).0, vec![(0, MP), (1, MP)]);
        for id in 0..2 {
            b.accept(t, 0, id);
        }
        rx_all(&mut b, t, &again[1..]);
        let (ann, msg, _) = split(events(&mut b));
        assert_eq!(ann, vec![(2, MP)]);
        assert_eq!(msg.iter().map(|m| m.0).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn announced_heads_are_bounded() {
        let c = RmppConfig {
            announce_bytes: 250,
            ..cfg(8, false)
        };
        let (mut a, mut b) = pair(c, MP);
        for i in 0..4 {
            a.send(0, 1, pattern(MP, i), false).unwrap();
        }
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert_eq!(split(events(&mut b)).0.len(), 2);
        assert_eq!(b.announced_bytes(), 200);
        assert_eq!(b.peer_stats(0).drop_no_buffer, 2);
        b.accept(0, 0, 0);
        assert_eq!(b.announced_bytes(), 100);
    }

    #[test]
    fn set_auto_accept_accepts_what_is_announced() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        a.send(0, 1, pattern(10, 1), false).unwrap();
        a.send(0, 1, pattern(10, 2), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert_eq!(split(events(&mut b)).0.len(), 2);
        b.set_auto_accept(5, true);
        assert_eq!(split(events(&mut b)).1.len(), 2);
        a.send(0, 1, pattern(10, 3), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        let (ann, msg, _) = split(events(&mut b));
        assert!(ann.is_empty() && msg.len() == 1);
    }

    #[test]
    fn close_peer_forgets_it() {
        let (mut a, mut b) = pair(cfg(8, false), MP);
        a.send(0, 1, pattern(300, 1), false).unwrap();
        rx_all(&mut b, 0, &tx(&mut a, 0));
        assert!(b.announced_bytes() > 0);
        a.close_peer(dead(1));
        b.close_peer(dead(0));
        assert_eq!(b.announced_bytes(), 0);
        assert!(!a.outstanding(1) && a.poll_timeout().is_none() || a.open_to(1) == 0);
        assert_eq!(
            a.send(0, 1, Bytes::new(), false),
            Err(ProtoError::PeerDead(dead(1)))
        );
        a.handle_timeout(SEC);
        assert!(tx(&mut a, SEC).is_empty());
    }

    /// Receiver grants with a sender that does not send what it was granted: rank 1's
    /// message is accepted first and takes the receiver's whole budget, then stays
    /// silent (a forged Rts, or a stalled process). Rank 0's message behind it gets its
    /// grant after [`GRANT_STALL`] requests without progress and completes; rank 1's
    /// data, arriving late, still completes its message (passed over, not starved).
    #[test]
    fn a_silent_grant_passes_the_budget_on() {
        let c = |rank| {
            let mut c = Common::new(rank, 3, MP);
            (c.rto_initial, c.rto_min, c.rto_max) = (10 * MS, MS, 80 * MS);
            c
        };
        let mut g: Vec<Rmpp> = (0..3)
            .map(|r| Rmpp::new(c(r), cfg(8, true)).unwrap())
            .collect();
        let (d0, d1) = (pattern(60 * MP, 0), pattern(60 * MP, 1));
        // What rank 1 sends is held back while it is silent.
        let mut held: Vec<Transmit> = Vec::new();
        let mut silent = true;
        let mut got: Vec<(Rank, Vec<u8>)> = Vec::new();
        // Everything sent until the network is quiet (rank 1's held while silent).
        fn route(g: &mut [Rmpp], now: Time, held: &mut Vec<Transmit>, silent: bool) {
            let mut moved = true;
            while moved {
                moved = false;
                for from in 0..3u32 {
                    for t in tx(&mut g[from as usize], now) {
                        moved = true;
                        if from == 1 && silent {
                            held.push(t);
                            continue;
                        }
                        let mut h = t.hdr;
                        (h.src, h.len) = (from, t.payload.len() as u32);
                        g[h.dst as usize].handle(now, &h, &t.payload);
                    }
                }
            }
        }
        g[1].send(0, 2, d1.clone(), false).unwrap();
        // Rank 1's Rts reaches the receiver, and its grant reaches rank 1.
        let rts = tx(&mut g[1], 0);
        rx_from(&mut g[2], 0, 1, &rts);
        let cts = tx(&mut g[2], 0);
        assert_eq!(kinds(&cts), [Kind::Cts]);
        assert_eq!(cts[0].hdr.offset, (MP as u64) * (1 + GRANT_PACKETS));
        rx_from(&mut g[1], 0, 2, &cts);
        g[0].send(0, 2, d0.clone(), false).unwrap();
        route(&mut g, 0, &mut held, silent);
        assert_eq!(held.len() as u64, GRANT_PACKETS, "rank 1 sent its grant");
        // Rank 0's message waits behind rank 1's grant: nothing beyond its head yet.
        assert_eq!(g[2].peer_stats(0).bytes_received, MP as u64);
        let mut now = 0;
        while got.iter().all(|(from, _)| *from != 0) {
            now = g.iter_mut().filter_map(|p| p.poll_timeout()).min().unwrap();
            assert!(now < SEC, "rank 0's message never got a grant");
            for p in g.iter_mut() {
                p.handle_timeout(now);
            }
            route(&mut g, now, &mut held, silent);
            got.extend(events(&mut g[2]).into_iter().filter_map(|e| match e {
                Event::Message { from, data, .. } => Some((from, data)),
                _ => None,
            }));
        }
        assert!(g[2].peer_stats(1).timeouts >= u64::from(GRANT_STALL - 1));
        // Rank 1 wakes up: what it sent arrives, and the rest follows.
        silent = false;
        for t in std::mem::take(&mut held) {
            rx_from(&mut g[2], now, 1, &[t]);
        }
        let start = now;
        while got.len() < 2 {
            route(&mut g, now, &mut held, silent);
            got.extend(events(&mut g[2]).into_iter().filter_map(|e| match e {
                Event::Message { from, data, .. } => Some((from, data)),
                _ => None,
            }));
            if got.len() == 2 {
                break;
            }
            now = g.iter_mut().filter_map(|p| p.poll_timeout()).min().unwrap();
            assert!(now < start + SEC, "rank 1's message never completed");
            for p in g.iter_mut() {
                p.handle_timeout(now);
            }
        }
        assert_eq!(got, vec![(0, d0.to_vec()), (1, d1.to_vec())]);
    }

    /// Hands `ts` to `g` as sent by `from`.
    fn rx_from(g: &mut Rmpp, now: Time, from: Rank, ts: &[Transmit]) {
        for t in ts {
            let mut h = t.hdr;
            (h.src, h.len) = (from, t.payload.len() as u32);
            g.handle(now, &h, &t.payload);
        }
    }

    #[test]
    fn send_checks_its_arguments() {
        let (mut a, _) = pair(cfg(8, false), MP);
        assert_eq!(
            a.send(0, 0, Bytes::new(), false),
            Err(ProtoError::SelfSend { peer: 0 })
        );
        assert_eq!(
            a.send(0, 2, Bytes::new(), false),
            Err(ProtoError::NoSuchPeer { peer: 2, nprocs: 2 })
        );
    }

    /// Tiny payloads (a Resend then carries one range, in its header) still work.
    #[test]
    fn one_byte_packets() {
        let mut net = Net::new(cfg(3, false), 1, 5);
        net.drop = 0.2;
        for i in 0..5 {
            net.send(0, pattern(i * 7, i as u32), i % 2 == 0);
            net.send(1, pattern(20, i as u32), false);
        }
        net.run(600 * SEC);
        net.check();
    }

    /// One lossy, duplicating, reordering network between two rmpp endpoints in virtual
    /// time, whose receivers accept each announced message after a random delay.
    struct Net {
        d: Duo<Rmpp>,
        drop: f64,
        dup: f64,
        /// Longest wait before an announced message is accepted.
        accept_delay: Time,
        pending_accept: Vec<(Time, usize, MsgId)>,
        /// Next id each side expects announced: once each, in order.
        announced: [MsgId; 2],
    }

    deref_duo!(Net => Rmpp);

    impl Net {
        fn new(c: RmppConfig, mp: usize, seed: u64) -> Net {
            let (a, b) = pair(c, mp);
            Net {
                d: Duo::new([a, b], seed),
                drop: 0.0,
                dup: 0.0,
                accept_delay: 0,
                pending_accept: Vec::new(),
                announced: [0; 2],
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
                        // Only once the receiver has the whole message.
                        let r = &d.g[1 - i].peers[i];
                        assert!(
                            before(id, r.next_deliver)
                                || matches!(
                                    r.rx.get(&id).map(|c| &c.state),
                                    Some(RxState::Complete { .. })
                                )
                        );
                        d.sent[i].push(id);
                    }
                    Event::Announce {
                        from,
                        id,
                        total,
                        head,
                    } => {
                        assert_eq!(from as usize, 1 - i);
                        assert_eq!(id, self.announced[i], "announced once each, in order");
                        self.announced[i] += 1;
                        let w = &d.want[1 - i][id as usize];
                        assert_eq!(total, w.len() as u64);
                        assert_eq!(head[..], w[..head.len()]);
                        let at = d.now + d.rng.random_range(0..=self.accept_delay);
                        self.pending_accept.push((at, i, id));
                    }
                    Event::PeerDead { .. } => panic!("deaths are the engine's to report"),
                }
            }
        }

        fn run(&mut self, limit: Time) -> Time {
            let start = self.d.now;
            while !self.d.done() {
                self.d.assert_within(start, limit);
                self.step();
            }
            self.d.now - start
        }

        fn step(&mut self) {
            for i in 0..2 {
                for t in tx(&mut self.d.g[i], self.d.now) {
                    let copies = if self.d.rng.random_bool(self.drop) {
                        0
                    } else if self.d.rng.random_bool(self.dup) {
                        2
                    } else {
                        1
                    };
                    self.d.put(i, &t, copies);
                }
                self.poll(i);
            }
            let accepts = self.pending_accept.iter().map(|p| p.0);
            let Some(next) = self.d.next(accepts) else {
                return;
            };
            self.d.advance(next);
            let now = self.d.now;
            let due: Vec<_> = self
                .pending_accept
                .iter()
                .filter(|p| p.0 <= now)
                .cloned()
                .collect();
            self.pending_accept.retain(|p| p.0 > now);
            for (_, i, id) in due {
                self.d.g[i].accept(now, 1 - i as Rank, id);
            }
            self.d.fire_timers();
        }

        /// Everything arrived exactly once, intact, in order; each notify was reported
        /// once (in any order); nothing is left open on either side.
        fn check(&self) {
            self.d.check(false);
            for i in 0..2 {
                assert_eq!(self.g[i].records_from(1 - i as Rank), 0);
                assert_eq!(self.g[i].open_to(1 - i as Rank), 0);
                assert_eq!(self.g[i].announced_bytes(), 0);
            }
        }
    }

    #[test]
    fn heavy_loss_both_ways() {
        let mut net = Net::new(cfg(8, false), MP, 11);
        net.drop = 0.3;
        net.dup = 0.1;
        net.jitter = 30 * US;
        net.accept_delay = 2 * MS;
        for i in 0..40 {
            net.send(i % 2, pattern((i * 97) % 2000, i as u32), i % 3 == 0);
        }
        net.run(3600 * SEC);
        net.check();
    }

    #[derive(Debug, Clone)]
    struct Schedule {
        window: u32,
        auto: bool,
        mp: usize,
        drop: f64,
        dup: f64,
        jitter: Time,
        accept_delay: Time,
        seed: u64,
        sizes: [Vec<usize>; 2],
    }

    fn schedule() -> impl Strategy<Value = Schedule> {
        (
            1u32..=8,
            any::<bool>(),
            1usize..64,
            0.0f64..0.35,
            0.0f64..0.2,
            0u64..200,
            prop_oneof![Just(0u64), 0u64..5_000],
            any::<u64>(),
            proptest::collection::vec(0usize..300, 0..20),
            proptest::collection::vec(0usize..300, 0..20),
        )
            .prop_map(
                |(window, auto, mp, drop, dup, jitter, accept_delay, seed, s0, s1)| Schedule {
                    window,
                    auto,
                    mp,
                    drop,
                    dup,
                    jitter: jitter * US,
                    accept_delay: accept_delay * US,
                    seed,
                    sizes: [s0, s1],
                },
            )
    }

    /// Any header a peer could send, biased towards values near the live state.
    fn any_header() -> impl Strategy<Value = (Header, Vec<u8>)> {
        let small = || prop_oneof![0u32..12, any::<u32>()];
        let off = || prop_oneof![0u64..600, any::<u64>()];
        (
            (1u8..=11, any::<u8>(), small()),
            (off(), off(), 0u32..4),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..80),
                proptest::collection::vec(0u8..3, 16..=16),
            ],
        )
            .prop_map(|((kind, fl, msg), (offset, total, aux), payload)| {
                let mut h = Header::new(Kind::from_u8(kind).unwrap());
                h.flags = fl & flags::KNOWN;
                h.src = 0;
                h.dst = 1;
                h.msg = msg;
                h.offset = offset;
                h.total = total;
                h.aux = aux;
                h.len = payload.len() as u32;
                (h, payload)
            })
    }

    proptest! {
        /// Over random loss, duplication, reordering and acceptance delays, in both
        /// directions at once: every message is delivered exactly once, intact and in
        /// order, every notify is reported once, every connection record is freed, and
        /// it all ends within a bounded virtual time.
        #[test]
        fn delivers_exactly_once_in_order_over_any_schedule(s in schedule()) {
            let mut net = Net::new(cfg(s.window, s.auto), s.mp, s.seed);
            net.drop = s.drop;
            net.dup = s.dup;
            net.jitter = s.jitter;
            net.accept_delay = s.accept_delay;
            net.send_sizes(&s.sizes);
            net.run(3_600 * SEC);
            net.check();
            for g in &mut net.g {
                g.handle_timeout(u64::MAX / 2);
                prop_assert!(tx(g, u64::MAX / 2).is_empty());
                prop_assert_eq!(g.poll_timeout(), None);
            }
        }

        /// Arbitrary headers in the middle of transfers both ways: nothing panics, memory
        /// stays within the window, and afterwards real traffic still gets through.
        #[test]
        fn arbitrary_headers_never_panic(
            junk in proptest::collection::vec(any_header(), 1..60),
            auto in any::<bool>(),
        ) {
            let (mut a, mut b) = pair(cfg(4, auto), 50);
            for i in 0..4 {
                a.send(0, 1, pattern(120, i), true).unwrap();
                b.send(0, 0, pattern(30, i), false).unwrap();
            }
            let mut now = 0;
            for (k, (h, p)) in junk.iter().enumerate() {
                now += 100 * US;
                b.handle(now, h, p);
                a.handle(now, &Header { src: 1, dst: 0, ..*h }, p);
                if k % 2 == 0 {
                    b.accept(now, 0, h.msg);
                    a.accept(now, 1, h.msg);
                }
                if k % 3 == 0 {
                    exchange(&mut a, &mut b, now);
                }
                if k % 7 == 0 {
                    a.handle_timeout(now + SEC);
                    b.handle_timeout(now + SEC);
                }
                for (g, peer) in [(&a, 1), (&b, 0)] {
                    prop_assert!(g.open_to(peer) <= 4);
                    prop_assert!(g.records_from(peer) <= 8);
                }
            }
        }
    }
}
