//! The deterministic core of the engine: one protocol over one link, stepped at a time the
//! caller supplies.

use std::collections::VecDeque;

use bulkwire_link::{Link, Rank, RxBatch, Tx};
pub use bulkwire_protocol::Event;
use bulkwire_protocol::wire::{
    Cover, DropCounts, Filter, HEADER_LEN, Header, Integrity, Kind, PacketKey,
};
use bulkwire_protocol::{MsgId, PeerDead, PeerStats, ProtoError, Protocol, SEC, Time, Transmit};
use bytes::Bytes;

use crate::Error;

/// Settings of an [`Endpoint`].
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// The job's cookie: packets carrying another are foreign and dropped.
    pub cookie: u32,
    /// A peer we wait on (or have unacknowledged data for) that stays silent this long is
    /// declared dead.
    pub dead_after: Time,
    /// How often a silent peer we wait on is pinged; default `dead_after / 10`, bounded.
    pub ping_interval: Time,
    /// Receive batch: most datagrams per `recv` call (fewer where slots are large:
    /// [`RxBatch::cache_sized`]).
    pub rx_slots: usize,
    /// Most packets taken from the protocol per step.
    pub tx_batch: usize,
    /// Most receive batches drained per step, so transmitting is never starved.
    pub rx_rounds: usize,
    /// CRC every datagram even on a link that cannot alter bytes ([`bulkwire_link::LinkCaps::intact`]).
    pub always_checksum: bool,
    /// The job's packet key: where set, every datagram over a link that others can write
    /// to ([`bulkwire_link::LinkCaps::private`]), or that is checked at all, carries a MAC
    /// instead of cookie and CRC, so that nobody without the job's secret can make one.
    pub mac: Option<PacketKey>,
    /// Where bytes could change or be read on the way, the MAC covers the payload (true,
    /// the default); false: the header and a CRC32C of the payload ([`Cover::HeaderCrc`]),
    /// for a network where no one else can listen.
    pub mac_payload: bool,
}

impl EndpointConfig {
    pub fn new(cookie: u32) -> EndpointConfig {
        EndpointConfig::with_deadline(cookie, 30 * SEC)
    }

    /// Settings with a dead-peer deadline of `dead_after` nanoseconds.
    pub fn with_deadline(cookie: u32, dead_after: Time) -> EndpointConfig {
        EndpointConfig {
            cookie,
            dead_after,
            ping_interval: (dead_after / 10).clamp(SEC / 100, SEC),
            rx_slots: 32,
            tx_batch: 64,
            rx_rounds: 8,
            always_checksum: false,
            mac: None,
            mac_payload: true,
        }
    }
}

/// A packet ready for the link: header encoded (CRC included) once, payload borrowed.
struct Encoded {
    dst: Rank,
    head: [u8; HEADER_LEN],
    payload: Bytes,
}

#[derive(Clone, Copy, Default)]
struct Live {
    last_heard: Time,
    /// When we started depending on the peer (silence is counted from the later of this
    /// and `last_heard`).
    interest_since: Option<Time>,
    last_ping: Time,
    waiting: bool,
    dead: bool,
}

/// What one [`Endpoint::step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub received: usize,
    pub sent: usize,
}

impl Progress {
    /// Whether anything moved.
    pub fn any(&self) -> bool {
        self.received + self.sent > 0
    }
}

/// One protocol over one link, for all peers of this process.
pub struct Endpoint {
    link: Box<dyn Link>,
    proto: Box<dyn Protocol>,
    cfg: EndpointConfig,
    filter: Filter,
    /// How datagrams are checked: not at all on a link that never alters bytes
    /// ([`bulkwire_link::LinkCaps::intact`]) unless the configuration insists; else by the
    /// job's MAC where it has a key, by CRC where not.
    integrity: Integrity,
    rx: RxBatch,
    /// Packets taken from the protocol, encoded, that the link has not accepted yet.
    pending: VecDeque<Encoded>,
    scratch: Vec<Transmit>,
    /// The encoded headers of `scratch`'s packets.
    heads: Vec<[u8; HEADER_LEN]>,
    /// The allocation of the batch handed to the link, kept between steps.
    txbuf: Vec<Tx<'static>>,
    /// Engine-level control packets (pings and pongs), sent before protocol traffic.
    control: VecDeque<(Rank, Header)>,
    /// The endpoint's own events (deaths), behind the protocol's events that preceded
    /// them; the protocol's other events stay with it until polled.
    events: VecDeque<Event>,
    live: Vec<Live>,
    next_live_check: Time,
    /// Packets went out since the last liveness check: the next one must run even if no
    /// peer was of interest then (a protocol without timers has nothing else to wake it,
    /// and its packets may need confirming: [`bulkwire_protocol::Unrecovering::unconfirmed`]).
    sent_unchecked: bool,
    drops: DropCounts,
    pings_sent: u64,
}

impl Endpoint {
    /// Joins `proto` to `link`. The protocol must have been built for the link's rank and
    /// job size.
    pub fn new(link: Box<dyn Link>, proto: Box<dyn Protocol>, cfg: EndpointConfig) -> Endpoint {
        let rank = link.rank();
        let nprocs = link.nprocs();
        let caps = link.capabilities();
        let slot = caps.recv_slot.max(HEADER_LEN);
        Endpoint {
            filter: Filter {
                cookie: cfg.cookie,
                me: rank,
                nprocs,
            },
            integrity: integrity(&cfg, &caps),
            rx: RxBatch::cache_sized(cfg.rx_slots, slot),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            heads: Vec::new(),
            txbuf: Vec::new(),
            control: VecDeque::new(),
            events: VecDeque::new(),
            live: vec![Live::default(); nprocs as usize],
            next_live_check: 0,
            sent_unchecked: false,
            drops: DropCounts::default(),
            pings_sent: 0,
            link,
            proto,
            cfg,
        }
    }

    pub fn rank(&self) -> Rank {
        self.filter.me
    }

    pub fn nprocs(&self) -> u32 {
        self.filter.nprocs
    }

    /// Whether datagrams carry and are checked against a CRC or MAC (not on an intact link
    /// unless configured: [`EndpointConfig::always_checksum`]).
    pub fn checksums(&self) -> bool {
        !matches!(self.integrity, Integrity::None)
    }

    /// How datagrams are checked: `none`, `crc` or `mac`.
    pub fn integrity(&self) -> &'static str {
        self.integrity.name()
    }

    /// The protocol's name.
    pub fn protocol_name(&self) -> &'static str {
        self.proto.name()
    }

    /// The protocol, for its per-protocol hooks.
    pub fn protocol(&mut self) -> &mut dyn Protocol {
        &mut *self.proto
    }

    /// The link (to wait on it).
    pub fn link(&mut self) -> &mut dyn Link {
        &mut *self.link
    }

    /// Queues a message for `to`.
    pub fn send(&mut self, now: Time, to: Rank, data: Bytes, notify: bool) -> Result<MsgId, Error> {
        self.check_alive(now, to)?;
        Ok(self.proto.send(now, to, data, notify)?)
    }

    /// An error if `to` has been declared dead.
    fn check_alive(&self, now: Time, to: Rank) -> Result<(), Error> {
        match self.live.get(to as usize) {
            Some(l) if l.dead => Err(Error::PeerDead(PeerDead {
                peer: to,
                silent_for: now.saturating_sub(l.last_heard),
            })),
            _ => Ok(()),
        }
    }

    /// Queues a message for `to` and hands the link what the protocol has to send now,
    /// without receiving first (an extra receive call on the path of a fresh send would
    /// only add latency). A message the protocol lets go out at once
    /// ([`Protocol::send_now`]) goes straight to the link when nothing waits before it
    /// here either: its packet skips the protocol's queues and the engine's batch, about
    /// a fifth of the CPU of a small message's round trip over shared memory.
    pub fn send_push(
        &mut self,
        now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<MsgId, Error> {
        if !self.pending.is_empty() || !self.control.is_empty() {
            let id = self.send(now, to, data, notify)?;
            self.transmit(now)?;
            return Ok(id);
        }
        self.check_alive(now, to)?;
        let (id, direct) = self.proto.send_now(now, to, data, notify)?;
        let Some(mut t) = direct else {
            self.transmit(now)?;
            return Ok(id);
        };
        let head = self.head(&mut t.hdr, &t.payload);
        let r = self.link.send(&[Tx {
            dst: t.hdr.dst,
            head: &head,
            body: &t.payload,
        }]);
        self.sent_unchecked = true;
        if !matches!(r, Ok(1)) {
            // Refused (full) or failed: it waits, as in `transmit`.
            self.pending.push_back(Encoded {
                dst: t.hdr.dst,
                head,
                payload: t.payload,
            });
        }
        r?;
        Ok(id)
    }

    /// Tells the engine (and the protocol) that the caller is, or no longer is, waiting
    /// for data from `peer`: silence from a peer one waits on counts toward its death.
    pub fn expect(&mut self, now: Time, peer: Rank, waiting: bool) {
        let l = &mut self.live[peer as usize];
        if l.waiting != waiting {
            l.waiting = waiting;
            if waiting && l.interest_since.is_none() {
                l.interest_since = Some(now);
            }
            self.proto.expect(now, peer, waiting);
        }
    }

    /// The next event, if any. The protocol's events are taken from it here rather than
    /// moved into a queue of ours on every step (a message's event then moves once).
    pub fn poll_event(&mut self) -> Option<Event> {
        match self.events.pop_front() {
            Some(e) => Some(e),
            None => self.proto.poll_event(),
        }
    }

    /// Whether `peer` has been declared dead.
    pub fn is_dead(&self, peer: Rank) -> bool {
        self.live[peer as usize].dead
    }

    /// Whether anything sent to `peer` is still unacknowledged, queued or unsent.
    pub fn outstanding(&self, peer: Rank) -> bool {
        self.proto.outstanding(peer) || self.pending.iter().any(|t| t.dst == peer)
    }

    /// Bytes for `peer` not yet handed to the link: queued in the protocol and not cut
    /// into packets, or cut and waiting for room in the link.
    pub fn queued_bytes(&self, peer: Rank) -> u64 {
        self.proto.queued_bytes(peer)
            + self
                .pending
                .iter()
                .filter(|t| t.dst == peer)
                .map(|t| t.payload.len() as u64)
                .sum::<u64>()
    }

    /// Whether packets are waiting for room in the link.
    pub fn has_unsent(&self) -> bool {
        !self.pending.is_empty() || !self.control.is_empty()
    }

    /// Whether anything at all remains to be sent or acknowledged.
    pub fn busy(&self) -> bool {
        !self.pending.is_empty() || (0..self.nprocs()).any(|p| self.proto.outstanding(p))
    }

    /// Protocol statistics for `peer`.
    pub fn peer_stats(&self, peer: Rank) -> PeerStats {
        self.proto.peer_stats(peer)
    }

    /// Datagrams dropped before reaching the protocol, by reason.
    pub fn drops(&self) -> DropCounts {
        self.drops
    }

    /// Liveness pings sent.
    pub fn pings_sent(&self) -> u64 {
        self.pings_sent
    }

    /// How long a silent peer we depend on goes unpinged ([`EndpointConfig::ping_interval`]).
    pub fn ping_interval(&self) -> Time {
        self.cfg.ping_interval
    }

    /// The earliest time at which [`Endpoint::step`] has timer work.
    pub fn next_deadline(&mut self) -> Option<Time> {
        let p = self.proto.poll_timeout();
        let l = if self.sent_unchecked
            || self
                .live
                .iter()
                .any(|l| l.waiting || l.interest_since.is_some())
        {
            Some(self.next_live_check)
        } else {
            None
        };
        match (p, l) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the protocol needs the current time to send (see
    /// [`bulkwire_protocol::Protocol::clocked`]).
    pub fn clocked(&self) -> bool {
        self.proto.clocked()
    }

    /// Does all the work that can be done at `now` without waiting.
    pub fn step(&mut self, now: Time) -> Result<Progress, Error> {
        let mut prog = Progress::default();
        for _ in 0..self.cfg.rx_rounds {
            let mut sink = Sink {
                filter: &self.filter,
                integrity: &self.integrity,
                drops: &mut self.drops,
                live: &mut self.live,
                control: &mut self.control,
                proto: &mut *self.proto,
                now,
            };
            let n = self.link.recv_each(&mut self.rx, &mut |d| sink.absorb(d))?;
            if n == 0 {
                break;
            }
            prog.received += n;
            if n < self.rx.slots() {
                break;
            }
        }
        // A peer that sent what no correct member sends fails the job, naming it, on this
        // and every later step (one check per step, not per packet).
        if let Some(m) = self.proto.misbehaving() {
            return Err(Error::Protocol(ProtoError::Misbehaved(Box::new(m.clone()))));
        }
        if self.proto.poll_timeout().is_some_and(|t| t <= now) {
            self.proto.handle_timeout(now);
            if let Some(e) = self.proto.unrecovering().and_then(|u| u.failure()) {
                return Err(Error::Protocol(e.clone()));
            }
        }
        if now >= self.next_live_check {
            self.check_liveness(now);
        }
        prog.sent = self.transmit(now)?;
        self.sent_unchecked |= prog.sent > 0;
        Ok(prog)
    }

    fn check_liveness(&mut self, now: Time) {
        self.next_live_check = now + self.cfg.ping_interval / 2;
        self.sent_unchecked = false;
        for peer in 0..self.nprocs() {
            if peer == self.rank() {
                continue;
            }
            let interested = {
                let l = &self.live[peer as usize];
                !l.dead
                    && (l.waiting
                        || self.proto.outstanding(peer)
                        || self
                            .proto
                            .unrecovering()
                            .is_some_and(|u| u.unconfirmed(peer)))
            };
            let l = &mut self.live[peer as usize];
            if !interested {
                l.interest_since = None;
                continue;
            }
            let since = *l.interest_since.get_or_insert(now);
            let silent_from = since.max(l.last_heard);
            let silent = now.saturating_sub(silent_from);
            if silent >= self.cfg.dead_after {
                l.dead = true;
                self.proto.close_peer(PeerDead {
                    peer,
                    silent_for: silent,
                });
                self.pending.retain(|t| t.dst != peer);
                // What the protocol delivered before the death comes before its notice.
                while let Some(e) = self.proto.poll_event() {
                    self.events.push_back(e);
                }
                self.events.push_back(Event::PeerDead {
                    peer,
                    silent_for: silent,
                });
            } else if silent >= self.cfg.ping_interval
                && now.saturating_sub(l.last_ping) >= self.cfg.ping_interval
            {
                l.last_ping = now;
                let mut h = Header::new(Kind::Ping);
                h.seq = (now / 1000) as u32;
                self.control.push_back((peer, h));
                self.pings_sent += 1;
            }
        }
    }

    /// Encodes and hands packets to the link until it is full or nothing is left.
    fn transmit(&mut self, now: Time) -> Result<usize, Error> {
        let mut sent = 0;
        while let Some((dst, mut hdr)) = self.control.pop_back() {
            hdr.dst = dst;
            self.mark(&mut hdr);
            self.pending.push_front(self.encode(hdr, Bytes::new()));
        }
        loop {
            // First what the link refused before, and control packets, in order.
            if !self.pending.is_empty() {
                let mut batch = recycle(std::mem::take(&mut self.txbuf));
                batch.extend(self.pending.iter().map(|e| Tx {
                    dst: e.dst,
                    head: &e.head,
                    body: &e.payload,
                }));
                let r = self.link.send(&batch);
                self.txbuf = recycle(batch);
                let n = r?;
                self.pending.drain(..n);
                sent += n;
                if !self.pending.is_empty() {
                    return Ok(sent);
                }
            }
            // The protocol's packets go to the link from the scratch vector, with their
            // headers beside it; only what the link refuses stops in `pending`. A small
            // message's send is then a few moves shorter (~0.1 us less CPU per round trip
            // over shared memory).
            let want = self.cfg.tx_batch;
            let mut got = std::mem::take(&mut self.scratch);
            self.proto.poll_transmit(now, &mut got, want);
            if got.is_empty() {
                self.scratch = got;
                return Ok(sent);
            }
            let mut heads = std::mem::take(&mut self.heads);
            heads.clear();
            heads.extend(got.iter_mut().map(|t| self.head(&mut t.hdr, &t.payload)));
            let mut batch = recycle(std::mem::take(&mut self.txbuf));
            batch.extend(got.iter().zip(&heads).map(|(t, head)| Tx {
                dst: t.hdr.dst,
                head,
                body: &t.payload,
            }));
            let r = self.link.send(&batch);
            self.txbuf = recycle(batch);
            // On an error nothing was sent: everything waits in `pending`.
            let n = *r.as_ref().unwrap_or(&0);
            let full = got.len() == want;
            for (t, head) in got.drain(..).zip(&heads).skip(n) {
                self.pending.push_back(Encoded {
                    dst: t.hdr.dst,
                    head: *head,
                    payload: t.payload,
                });
            }
            self.scratch = got;
            self.heads = heads;
            sent += r?;
            if !full || !self.pending.is_empty() {
                return Ok(sent);
            }
        }
    }

    /// Puts the protocol's liveness marks ([`bulkwire_protocol::Unrecovering::marks`]) in a ping or pong
    /// to `hdr.dst`: `msg` packets sent to it, `ack` packets received from it, flagged by
    /// `aux`. Only when every packet the protocol made for that peer is in the link
    /// already, so that the counts never run ahead of what the peer can have received.
    fn mark(&mut self, hdr: &mut Header) {
        let dst = hdr.dst;
        if let Some((sent, received)) = self.proto.unrecovering().and_then(|u| u.marks(dst))
            && !self.pending.iter().any(|e| e.dst == dst)
        {
            (hdr.msg, hdr.ack, hdr.aux) = (sent, received, MARKED);
        }
    }

    /// Stamps `hdr` with this endpoint's cookie and rank and encodes it.
    #[inline]
    fn head(&self, hdr: &mut Header, payload: &[u8]) -> [u8; HEADER_LEN] {
        hdr.cookie = self.filter.cookie;
        hdr.src = self.filter.me;
        self.integrity.encode(hdr, payload)
    }

    #[inline]
    fn encode(&self, mut hdr: Header, payload: Bytes) -> Encoded {
        let head = self.head(&mut hdr, &payload);
        Encoded {
            dst: hdr.dst,
            head,
            payload,
        }
    }
}

/// How an endpoint checks datagrams. With the job's key: over header and payload (or the
/// payload's CRC, as configured) where bytes could change or be read on the way (a wire),
/// over the header alone where others can only write to the link (UDP within one host:
/// see [`Cover::Header`]), not at all on a private, intact link. Without it: CRC where
/// bytes could change.
fn integrity(cfg: &EndpointConfig, caps: &bulkwire_link::LinkCaps) -> Integrity {
    let altered = !caps.intact || cfg.always_checksum;
    let wire = if cfg.mac_payload {
        Cover::Payload
    } else {
        Cover::HeaderCrc
    };
    match &cfg.mac {
        Some(k) if altered => Integrity::Mac(k.clone(), wire),
        Some(k) if !caps.private => Integrity::Mac(k.clone(), Cover::Header),
        _ if altered => Integrity::Crc,
        _ => Integrity::None,
    }
}

/// What handles one received datagram: the parts of an [`Endpoint`] it touches, apart
/// from the link that lends the datagram.
struct Sink<'a> {
    filter: &'a Filter,
    integrity: &'a Integrity,
    drops: &'a mut DropCounts,
    live: &'a mut [Live],
    control: &'a mut VecDeque<(Rank, Header)>,
    proto: &'a mut dyn Protocol,
    now: Time,
}

impl Sink<'_> {
    /// Verifies and decodes `d`, answers pings, hands the rest to the protocol.
    fn absorb(&mut self, d: &[u8]) {
        match self.integrity.decode(d, self.filter) {
            Err(r) => self.drops.count(r),
            Ok((hdr, payload)) => {
                self.live[hdr.src as usize].last_heard = self.now;
                match hdr.kind {
                    Kind::Ping | Kind::Pong => self.liveness(&hdr),
                    _ => self.proto.handle(self.now, &hdr, payload),
                }
            }
        }
    }
}

impl Sink<'_> {
    /// A ping (answered with a pong) or a pong: their liveness marks go to the protocol.
    fn liveness(&mut self, hdr: &Header) {
        if hdr.aux == MARKED
            && let Some(u) = self.proto.unrecovering()
        {
            u.on_marks(self.now, hdr.src, hdr.msg, hdr.ack);
        }
        if hdr.kind == Kind::Ping {
            let mut h = Header::new(Kind::Pong);
            h.seq = hdr.seq;
            self.control.push_back((hdr.src, h));
        }
    }
}

/// `aux` of a ping or pong that carries liveness marks ([`Endpoint::mark`]).
const MARKED: u32 = 1;

/// Empties a vector and gives its allocation back with another lifetime for its elements,
/// so that the per-step batch of borrowed datagrams costs no allocation (the in-place
/// `collect` of an empty vector keeps the buffer).
fn recycle<'b>(mut v: Vec<Tx<'_>>) -> Vec<Tx<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}
