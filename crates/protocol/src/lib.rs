//! bulkwire protocols: each turns unreliable datagrams into reliable, per-pair ordered
//! message delivery, as a sans-IO state machine. A protocol never
//! touches a socket, a thread or a clock: the engine hands it decoded packets and the
//! current time, and takes back packets to transmit, delivered messages and its next
//! timer deadline. That is what lets the same code run over UDP, shared memory and a
//! simulated network of thousands of nodes, deterministically.
//!
//! - [`wire`]: the packet format shared by all protocols;
//! - [`utopia`]: no recovery at all (the RMPP paper's ceiling);
//! - [`gbn`]: ParaStation2's ACK/NACK go-back-N (the ParaStation2 paper);
//! - [`holefill`]: BSPlib's hole-filling selective retransmission (the BSPlib paper);
//! - [`mcast`]: reliable multicast from one root to a group (the RTFC paper's network
//!   cache across hosts);
//! - [`rmpp`]: Sandia's message-based protocol, one short connection per message (the RMPP paper);
//! - [`common`]: what they share: fragmenting, reassembly, round-trip estimation;
//! - [`congestion`]: the congestion window every recovering protocol sends under.

#![forbid(unsafe_code)]

pub mod common;
pub mod congestion;
pub mod gbn;
pub mod holefill;
pub mod mcast;
pub mod rmpp;
pub mod stats;
#[cfg(test)]
pub(crate) mod testkit;
pub mod utopia;
pub mod wire;

pub use stats::{PeerStats, Stats};
pub use wire::{Header, Kind};

use bytes::Bytes;

/// A process's index in its job.
pub type Rank = u32;

/// Time in nanoseconds on the engine's clock (monotonic, or virtual in simulation).
pub type Time = u64;

/// Nanoseconds per microsecond / millisecond / second.
pub const US: Time = 1_000;
pub const MS: Time = 1_000_000;
pub const SEC: Time = 1_000_000_000;

/// Identifies a message within its ordered (sender, receiver) pair.
pub type MsgId = u32;

/// A packet for the engine to transmit. The engine fills in cookie and source, encodes the
/// header with its CRC and hands header and payload to the link as one gathered datagram.
#[derive(Clone, Debug)]
pub struct Transmit {
    pub hdr: Header,
    /// The payload: a cheap slice of the message being sent (no copy).
    pub payload: Bytes,
}

/// What a protocol, and the engine that drives it, report to the layer above: the one
/// event type of every layer from the protocols up.
#[derive(Debug)]
pub enum Event {
    /// A whole message from `from`, delivered exactly once and in per-pair order.
    Message {
        from: Rank,
        id: MsgId,
        data: Vec<u8>,
    },
    /// A message sent with `notify` has been acknowledged by its receiver.
    Sent { to: Rank, id: MsgId },
    /// RMPP only: a message from `from` waits for the receiver to [`Announcing::accept`] it.
    /// `head` holds its first bytes (the upper layer's envelope). Reported in the order
    /// `from` sent them, once (again only after an accept refused for want of memory).
    Announce {
        from: Rank,
        id: MsgId,
        total: u64,
        head: Vec<u8>,
    },
    /// A peer stayed silent for `silent_for` nanoseconds, past the deadline, while we
    /// depended on it. Liveness is the engine's: it reports this, protocols never do.
    PeerDead { peer: Rank, silent_for: Time },
}

/// Errors a protocol reports to its caller.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProtoError {
    #[error("rank {peer} is not in this job of {nprocs} processes")]
    NoSuchPeer { peer: Rank, nprocs: u32 },
    #[error("rank {peer} is this process; a protocol does not send to itself")]
    SelfSend { peer: Rank },
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error(transparent)]
    PeerDead(PeerDead),
    /// The protocol lost what it cannot get back: the job cannot go on correctly.
    #[error("{0}")]
    Unrecoverable(Box<Unrecoverable>),
    /// A peer sent what no correct member sends (see [`PeerMisbehaved`]).
    #[error("{0}")]
    Misbehaved(Box<PeerMisbehaved>),
}

/// A peer sent packets that no correct member of the job sends: a message larger than the
/// job accepts, a fragment beyond its message, a message id far outside the window, or more
/// data in incomplete messages than its budget ([`Common::peer_budget`]). The protocol
/// ignores the packet (nothing is allocated for it) and reports the peer once; the engine
/// then fails every step with it, so the job stops naming the peer instead of running out
/// of memory or waiting for a message that will never complete.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error(
    "rank {peer} {what}; a correct member never does, so the job stops (a faulty or hostile process holds the job's key)"
)]
pub struct PeerMisbehaved {
    pub peer: Rank,
    /// What it did, completing "rank N ...".
    pub what: String,
}

/// A peer declared dead, and how long it had been silent when it was: the one error for
/// it in every layer, from the protocol's refusal to send to it up to the messages of
/// point-to-point and BSP. The engine declares deaths; a protocol learns of them through
/// [`Protocol::close_peer`].
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[error(
    "rank {peer} is dead: nothing heard from it for {:.1} s while waiting on it",
    *silent_for as f64 / 1e9
)]
pub struct PeerDead {
    pub peer: Rank,
    /// Nanoseconds of silence.
    pub silent_for: Time,
}

/// What a protocol without recovery lost (boxed in [`ProtoError`], which every send
/// returns: it stays two words).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error(
    "{protocol} has no recovery: {what}; choose a protocol that recovers \
     (BULKWIRE_PROTOCOL={}) to run over a link that loses, corrupts, duplicates or \
     reorders datagrams",
    RECOVERING.join(", ")
)]
pub struct Unrecoverable {
    pub protocol: &'static str,
    /// The peer whose traffic was lost.
    pub peer: Rank,
    /// What was lost, with the peer and the sequence numbers.
    pub what: String,
}

/// Settings every protocol shares.
#[derive(Clone, Debug)]
pub struct Common {
    pub rank: Rank,
    pub nprocs: u32,
    /// Largest payload per packet, for each peer (link datagram size minus the header).
    pub max_payload: Vec<usize>,
    /// Largest message accepted, sent or received.
    pub max_message: u64,
    /// Most bytes the incomplete messages of one peer may hold here (reassembly buffers,
    /// rmpp's accepted messages, out-of-order data), so that no input, even from a member
    /// that holds the job's key, makes a process allocate more than this per peer. A
    /// message must fit in it whole, so it also caps the size of a message
    /// ([`Common::check_send`]). Default [`DEFAULT_PEER_BUDGET`]; jobs set it from
    /// `BULKWIRE_PEER_BUDGET`.
    pub peer_budget: u64,
    /// First retransmission timeout, before any round trip has been measured. 1 ms: a
    /// cluster's round trips are microseconds, and a first packet lost (at the start of
    /// every connection) waits this long, then doubles (5 ms made a lost first packet
    /// cost more than a whole small collective).
    pub rto_initial: Time,
    /// Floor of the retransmission timeout. 200 us: gbn and rmpp answer every packet or
    /// stage at once, so their timers may follow the round trip closely, and a packet lost
    /// at the end of a burst (nothing after it to reveal the loss) waits for this timer;
    /// at 1 ms, 50-100 round trips here, a superstep or a small collective with a quarter
    /// of its packets lost took 50-260 times its lossless time. holefill keeps at least
    /// 1 ms (its acknowledgements are delayed on purpose).
    pub rto_min: Time,
    /// Ceiling of the retransmission timeout.
    pub rto_max: Time,
    /// Congestion control ([`congestion::Window`]) on top of each protocol's own flow
    /// control. Off: the papers' protocols, which send as fast as their windows allow
    /// whatever the network drops. Jobs set it from `BULKWIRE_CC`; every process must
    /// agree: one sender without it takes a
    /// shared port's buffer from those with it.
    pub cc: bool,
    /// With [`Common::cc`], also holefill's window and rmpp's pacing, which the
    /// simulated switch measured slower than without (docs/protocols.md, "Congestion
    /// control"): reachable for experiments (`BULKWIRE_CC=all`), not the default.
    pub cc_all: bool,
}

/// [`Common::peer_budget`] by default: 1 GiB. Memory a peer can make a process hold is
/// bounded by it, and the largest message the job can receive is too (a message is held
/// whole until it is complete); above the few hundred MiB of the largest messages the
/// benchmarks and programs send in one piece, and far below a node's memory.
pub const DEFAULT_PEER_BUDGET: u64 = 1 << 30;

impl Common {
    /// The largest message that can be sent or received: `max_message`, or the budget a
    /// receiver holds an incomplete message in, whichever is smaller.
    pub fn message_limit(&self) -> u64 {
        self.max_message.min(self.peer_budget)
    }

    /// Defaults for a job of `nprocs` with the same payload size to every peer.
    pub fn new(rank: Rank, nprocs: u32, max_payload: usize) -> Common {
        Common {
            rank,
            nprocs,
            max_payload: vec![max_payload; nprocs as usize],
            max_message: 1 << 40,
            peer_budget: DEFAULT_PEER_BUDGET,
            rto_initial: MS,
            rto_min: 200 * US,
            rto_max: SEC,
            cc: true,
            cc_all: false,
        }
    }

    /// This setting with congestion control `on` or off.
    pub fn with_cc(self, on: bool) -> Common {
        Common {
            cc: on,
            cc_all: on && self.cc_all,
            ..self
        }
    }

    /// Checks that `peer` may be sent to.
    pub fn check_peer(&self, peer: Rank) -> Result<(), ProtoError> {
        if peer >= self.nprocs {
            Err(ProtoError::NoSuchPeer {
                peer,
                nprocs: self.nprocs,
            })
        } else if peer == self.rank {
            Err(ProtoError::SelfSend { peer })
        } else {
            Ok(())
        }
    }

    /// The checks every [`Protocol::send`] makes before queueing `len` bytes for `to`, in
    /// this order: `to` may be sent to ([`Common::check_peer`]), the message is within
    /// `max_message`, and `to` has not been declared dead. `closed` tells the last (the
    /// protocol's own per-peer state, so it is asked only once `to` is known to be valid):
    /// the death [`Protocol::close_peer`] told of, if any; a protocol that keeps no such
    /// state passes `|| None`.
    pub fn check_send(
        &self,
        to: Rank,
        len: usize,
        closed: impl FnOnce() -> Option<PeerDead>,
    ) -> Result<(), ProtoError> {
        self.check_peer(to)?;
        if len as u64 > self.message_limit() {
            return Err(ProtoError::TooLarge {
                len: len as u64,
                max: self.message_limit(),
            });
        }
        if let Some(dead) = closed() {
            return Err(ProtoError::PeerDead(dead));
        }
        Ok(())
    }
}

/// A reliable-delivery protocol as a sans-IO state machine, for all the peers of one
/// endpoint. The engine calls, in a loop: [`Protocol::handle`] for each packet received,
/// [`Protocol::handle_timeout`] when [`Protocol::poll_timeout`] has passed,
/// [`Protocol::poll_transmit`] to collect packets, [`Protocol::poll_event`] to collect
/// deliveries.
///
/// What only some protocols do is offered through one accessor per extension:
/// [`Protocol::coloured`] (BSP's colours and phase ends: holefill),
/// [`Protocol::announcing`] (messages that wait to be accepted: rmpp) and
/// [`Protocol::unrecovering`] (a protocol without recovery, checked through the
/// engine's liveness marks: utopia).
pub trait Protocol: Send {
    /// The protocol's name, as [`by_name`] takes it.
    fn name(&self) -> &'static str;

    /// Whether [`Protocol::send`] and [`Protocol::poll_transmit`] use the time they are
    /// given (timers, round trips). When not, the engine passes its last clock reading
    /// instead of reading the clock for every message (~40 ns here, on the critical path
    /// of a 0.7 us round trip over shared memory).
    fn clocked(&self) -> bool;

    /// Queues `data` for `to`. With `notify`, an [`Event::Sent`] follows once the receiver
    /// has acknowledged the whole message (the caller may then reuse what `data` borrowed).
    fn send(&mut self, now: Time, to: Rank, data: Bytes, notify: bool)
    -> Result<MsgId, ProtoError>;

    /// [`Protocol::send`], and the message's packet when it may go out at once as one
    /// packet with nothing queued before it anywhere in the protocol: the engine then
    /// hands it to the link without a round through the queues. `None`: queued as by
    /// `send`, for [`Protocol::poll_transmit`] (what a protocol that keeps every message
    /// until it is acknowledged always answers).
    fn send_now(
        &mut self,
        now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<(MsgId, Option<Transmit>), ProtoError>;

    /// Takes in one verified packet (the engine has checked CRC, cookie and addressing).
    fn handle(&mut self, now: Time, hdr: &Header, payload: &[u8]);

    /// Appends packets to transmit now to `out`, at most `max`. Piggybacked state (acks,
    /// end of hole) is filled in here, at the last moment, so it is never stale.
    fn poll_transmit(&mut self, now: Time, out: &mut Vec<Transmit>, max: usize);

    /// The next event for the layer above, if any.
    fn poll_event(&mut self) -> Option<Event>;

    /// The earliest time at which [`Protocol::handle_timeout`] has work to do.
    fn poll_timeout(&mut self) -> Option<Time>;

    /// Runs the timers that are due at `now`.
    fn handle_timeout(&mut self, now: Time);

    /// Whether anything sent to `peer` is still unacknowledged (or queued).
    fn outstanding(&self, peer: Rank) -> bool;

    /// Bytes queued for `peer` that have not been cut into packets yet (0 when the
    /// protocol does not know). BSP pacing feeds one destination at a time with it.
    fn queued_bytes(&self, _peer: Rank) -> u64 {
        0
    }

    /// Statistics for `peer`.
    fn peer_stats(&self, peer: Rank) -> PeerStats;

    /// Forgets `dead.peer` (declared dead): drops its queues and stops its timers; a
    /// later send to it fails with `dead`.
    fn close_peer(&mut self, dead: PeerDead);

    /// The upper layer is waiting for data from `peer` (or has stopped waiting). A
    /// protocol may use this to prod a silent sender (holefill); others ignore it.
    fn expect(&mut self, now: Time, peer: Rank, waiting: bool);

    /// BSP's colours and phase ends, for a protocol that implements them.
    fn coloured(&mut self) -> Option<&mut dyn Coloured> {
        None
    }

    /// Acceptance of announced messages, for a protocol that announces them
    /// ([`Event::Announce`]).
    fn announcing(&mut self) -> Option<&mut dyn Announcing> {
        None
    }

    /// The liveness marks and the failure of a protocol without recovery.
    fn unrecovering(&mut self) -> Option<&mut dyn Unrecovering> {
        None
    }

    /// The first peer found to misbehave ([`PeerMisbehaved`]), once one has: the engine
    /// then fails every step with it.
    fn misbehaving(&self) -> Option<&PeerMisbehaved> {
        None
    }
}

/// BSP's colouring scheme, from the BSPlib paper (Donaldson, Hill & Skillicorn, section
/// 4.4): packets carry the count of barriers passed, and a packet received with a later
/// colour acknowledges implicitly everything sent under earlier ones. Offered by
/// [`Protocol::coloured`].
pub trait Coloured {
    /// Outgoing packets carry `colour` (the count of barriers passed, mod 256); also
    /// resets the hold ([`Coloured::hold_colour`]) to it.
    fn set_colour(&mut self, colour: u8);

    /// Packets first sent from now on are acknowledged implicitly only by a packet whose
    /// colour is ahead of `hold`, which may be ahead of the colour they carry. A BSP layer
    /// sends the messages of a barrier before it has passed it: they carry the honest
    /// colour (barriers passed) but must outlive the packets of the superstep before them
    /// (docs/bsp.md).
    fn hold_colour(&mut self, hold: u8);

    /// The message most recently queued for `peer` ends this phase; its last packet asks
    /// for an acknowledgement.
    fn end_phase(&mut self, peer: Rank);
}

/// A protocol whose messages wait for the receiver ([`Event::Announce`]) before their data
/// flows (rmpp). Offered by [`Protocol::announcing`].
pub trait Announcing {
    /// The upper layer has a receive posted for the announced message `id` from `from`.
    fn accept(&mut self, now: Time, from: Rank, id: MsgId);

    /// Accept every message on arrival (and whatever is announced now), for upper layers
    /// that post no receives (BSP, collectives).
    fn set_auto_accept(&mut self, now: Time, on: bool);
}

/// A protocol without recovery (utopia): it cannot confirm by itself that its packets
/// arrived, so the engine pings a silent peer it sent to and carries the protocol's
/// counts of packets (its liveness marks) in pings and pongs; a loss they reveal is a
/// failure the engine then reports on every step. Offered by [`Protocol::unrecovering`].
pub trait Unrecovering {
    /// How many packets the protocol has sent to `peer` and received from it (`None` for
    /// a rank not in the job).
    fn marks(&self, peer: Rank) -> Option<(u32, u32)>;

    /// `peer`'s [`Unrecovering::marks`] arrived: it had sent `sent` packets to us and
    /// received `received` from us when it wrote them (it writes them only once every
    /// packet before is on the wire, and the link keeps a pair's order).
    fn on_marks(&mut self, now: Time, peer: Rank, sent: u32, received: u32);

    /// Whether packets sent to `peer` are not yet known to have arrived: the engine then
    /// pings `peer` when it falls silent, as it does for a peer it waits on.
    fn unconfirmed(&self, peer: Rank) -> bool;

    /// What the protocol could not recover from, once it happened: the engine then fails
    /// every step with it. A protocol that fails makes [`Protocol::poll_timeout`] due at
    /// once, which is when the engine asks (so the question costs nothing per packet).
    fn failure(&self) -> Option<&ProtoError>;
}

/// The settings of every protocol of a job, one struct each ([`by_name`] uses the one it
/// builds), and the retransmission timers and peer budget they share
/// ([`ProtocolConfigs::timers`] puts them in a [`Common`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolConfigs {
    pub gbn: gbn::GbnConfig,
    pub holefill: holefill::HolefillConfig,
    pub rmpp: rmpp::RmppConfig,
    /// [`Common::rto_initial`].
    pub rto_initial: Time,
    /// [`Common::rto_min`].
    pub rto_min: Time,
    /// [`Common::peer_budget`].
    pub peer_budget: u64,
    /// [`Common::cc`].
    pub cc: bool,
    /// [`Common::cc_all`].
    pub cc_all: bool,
}

impl Default for ProtocolConfigs {
    /// What a job runs: gbn and rmpp with their recommended settings (the papers'
    /// protocols with cumulative ACKs and back-off only toward a silent peer), holefill
    /// with its defaults, the timers of [`Common::new`], congestion control on.
    fn default() -> ProtocolConfigs {
        let c = Common::new(0, 1, 1);
        ProtocolConfigs {
            gbn: gbn::GbnConfig::recommended(),
            holefill: holefill::HolefillConfig::default(),
            rmpp: rmpp::RmppConfig::recommended(),
            rto_initial: c.rto_initial,
            rto_min: c.rto_min,
            peer_budget: c.peer_budget,
            cc: c.cc,
            cc_all: c.cc_all,
        }
    }
}

impl ProtocolConfigs {
    /// `c` with these timers and this peer budget.
    pub fn timers(&self, mut c: Common) -> Common {
        c.rto_initial = self.rto_initial;
        c.rto_min = self.rto_min;
        c.peer_budget = self.peer_budget;
        c.cc = self.cc;
        c.cc_all = self.cc && self.cc_all;
        c
    }
}

/// Builds the protocol named `name` (one of [`PROTOCOLS`]) with its settings from `cfg`.
pub fn by_name(
    name: &str,
    common: Common,
    cfg: &ProtocolConfigs,
) -> Result<Box<dyn Protocol>, ConfigError> {
    match name {
        "utopia" => Ok(Box::new(utopia::Utopia::new(common))),
        "gbn" => Ok(Box::new(
            gbn::Gbn::new(common, cfg.gbn).map_err(|e| ConfigError::invalid("gbn", e))?,
        )),
        "holefill" => Ok(Box::new(
            holefill::Holefill::new(common, cfg.holefill.clone())
                .map_err(|e| ConfigError::invalid("holefill", e))?,
        )),
        "rmpp" => Ok(Box::new(
            rmpp::Rmpp::new(common, cfg.rmpp.clone())
                .map_err(|e| ConfigError::invalid("rmpp", e))?,
        )),
        other => Err(ConfigError::Unknown(other.to_string())),
    }
}

/// The names [`by_name`] knows.
pub const PROTOCOLS: &[&str] = &["utopia", "gbn", "holefill", "rmpp"];

/// The protocols that recover from lost, corrupted, duplicated and reordered datagrams
/// (all but utopia).
pub const RECOVERING: &[&str] = &["holefill", "gbn", "rmpp"];

/// Whether the protocol `name` recovers from faults of the link ([`RECOVERING`]); false
/// for utopia and for names [`by_name`] does not know.
pub fn recovers(name: &str) -> bool {
    RECOVERING.contains(&name)
}

/// Why [`by_name`] could not build a protocol.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown protocol {0:?}; known: {list}", list = PROTOCOLS.join(", "))]
    Unknown(String),
    #[error("bad {protocol} setting: {msg}")]
    Invalid { protocol: &'static str, msg: String },
}

impl ConfigError {
    fn invalid(protocol: &'static str, e: impl std::fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            protocol,
            msg: e.to_string(),
        }
    }
}
