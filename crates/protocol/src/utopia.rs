//! Utopia (the RMPP paper): sends and trusts. No acknowledgement, no retransmission: the
//! ceiling for every other protocol's bandwidth and latency, and the floor for its
//! reliability.
//!
//! What it cannot recover it at least detects, so that a job over a link that loses (a
//! kernel that drops UDP datagrams, injected faults) fails with a message instead of
//! waiting forever. Each pair numbers its packets (`seq`, 32 bits); a packet that is not
//! the next one means packets were lost (ahead), or duplicated or reordered (behind), and
//! utopia fails ([`Unrecovering::failure`]) naming the peer and the sequence numbers. Packets
//! lost at the end of the traffic have no successor to reveal them: the engine's liveness
//! pings and pongs carry each side's counts of packets sent and received
//! ([`Unrecovering::marks`]), so the receiver compares what the sender says it sent
//! with what arrived, and a sender whose packets are not yet confirmed pings its silent
//! peer ([`Unrecovering::unconfirmed`]) as it would a peer it waits on. A loss is thus found
//! at the next packet, or at the latest about one ping interval after the traffic stops.
//! None of this touches the fast path beyond a counter on each side.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::common::{FillBuf, Fragment, OutQueue, WriteError, announced_too_large, over_budget};
use crate::wire::{Header, Kind, flags};
use crate::{
    Common, Event, MsgId, PeerDead, PeerMisbehaved, PeerStats, ProtoError, Protocol, Rank, Time,
    Transmit, Unrecoverable, Unrecovering,
};

struct Partial {
    msg: MsgId,
    buf: FillBuf,
    got: u64,
}

struct Peer {
    out: OutQueue,
    partial: Option<Partial>,
    /// Packets sent to this peer (the next one's `seq`).
    sent: u32,
    /// Packets received from this peer in order (the next expected `seq`).
    received: u32,
    /// Of `sent`, how many the peer said it received.
    confirmed: u32,
    stats: PeerStats,
}

/// The Utopia protocol.
pub struct Utopia {
    c: Common,
    peers: Vec<Peer>,
    ready: VecDeque<Rank>,
    events: VecDeque<Event>,
    /// The first peer found to send what no correct member sends.
    misbehaved: Option<PeerMisbehaved>,
    failed: Option<ProtoError>,
}

impl Utopia {
    pub fn new(c: Common) -> Utopia {
        let peers = (0..c.nprocs)
            .map(|_| Peer {
                out: OutQueue::default(),
                partial: None,
                sent: 0,
                received: 0,
                confirmed: 0,
                stats: PeerStats::default(),
            })
            .collect();
        Utopia {
            c,
            peers,
            ready: VecDeque::new(),
            events: VecDeque::new(),
            misbehaved: None,
            failed: None,
        }
    }
}

/// Whether sequence number `a` is ahead of `b` (within half the 32-bit space).
fn ahead(a: u32, b: u32) -> bool {
    (1..1 << 31).contains(&a.wrapping_sub(b))
}

impl Utopia {
    /// The packet of fragment `f` to `to`, numbered and counted; its message's `Sent`
    /// event when it is the last fragment and the sender asked.
    fn packet(&mut self, to: Rank, f: Fragment) -> Transmit {
        let mut hdr = Header::new(Kind::Data);
        hdr.dst = to;
        hdr.msg = f.msg;
        hdr.offset = f.offset;
        hdr.total = f.total;
        hdr.flags = if f.first { flags::FIRST } else { 0 } | if f.last { flags::LAST } else { 0 };
        let p = &mut self.peers[to as usize];
        hdr.seq = p.sent;
        p.sent = p.sent.wrapping_add(1);
        p.stats.data_sent += 1;
        p.stats.bytes_sent += f.payload.len() as u64;
        if f.last && f.notify {
            // Nothing will ever acknowledge it: "sent" is as good as it gets.
            self.events.push_back(Event::Sent { to, id: f.msg });
        }
        Transmit {
            hdr,
            payload: f.payload,
        }
    }

    /// Records the first thing utopia could not recover from.
    fn fail(&mut self, peer: Rank, what: String) {
        self.failed
            .get_or_insert(ProtoError::Unrecoverable(Box::new(Unrecoverable {
                protocol: "utopia",
                peer,
                what,
            })));
    }

    /// The failure for packet `seq` from `from` when `expected` was due.
    fn out_of_sequence(&mut self, from: Rank, seq: u32, expected: u32) {
        let what = if ahead(seq, expected) {
            format!(
                "packets {expected} to {} from rank {from} were lost ({} packets; packet \
                 {seq} came next)",
                seq.wrapping_sub(1),
                seq.wrapping_sub(expected)
            )
        } else {
            format!(
                "packet {seq} from rank {from} arrived again or out of order (packet \
                 {expected} was due)"
            )
        };
        self.fail(from, what);
    }
}

impl Utopia {
    /// Records that `peer` sent what no correct member sends ([`PeerMisbehaved`]); the
    /// first such peer is reported, and its packets are ignored from then on.
    fn misbehave(&mut self, peer: Rank, what: String) {
        self.misbehaved.get_or_insert(PeerMisbehaved { peer, what });
    }
}

impl Protocol for Utopia {
    fn misbehaving(&self) -> Option<&PeerMisbehaved> {
        self.misbehaved.as_ref()
    }

    fn name(&self) -> &'static str {
        "utopia"
    }

    fn send(
        &mut self,
        _now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<MsgId, ProtoError> {
        // Utopia keeps no dead-peer state: it never refuses a peer as dead.
        self.c.check_send(to, data.len(), || None)?;
        let p = &mut self.peers[to as usize];
        if p.out.is_empty() {
            self.ready.push_back(to);
        }
        p.stats.messages_sent += 1;
        Ok(p.out.push(data, notify))
    }

    fn send_now(
        &mut self,
        now: Time,
        to: Rank,
        data: Bytes,
        notify: bool,
    ) -> Result<(MsgId, Option<Transmit>), ProtoError> {
        let mp = self.c.max_payload.get(to as usize).copied().unwrap_or(0);
        if !self.ready.is_empty() || data.len() > mp {
            return self.send(now, to, data, notify).map(|id| (id, None));
        }
        self.c.check_send(to, data.len(), || None)?;
        let p = &mut self.peers[to as usize];
        let id = p.out.bypass();
        p.stats.messages_sent += 1;
        let whole = Fragment {
            msg: id,
            offset: 0,
            total: data.len() as u64,
            payload: data,
            first: true,
            last: true,
            notify,
        };
        Ok((id, Some(self.packet(to, whole))))
    }

    fn handle(&mut self, _now: Time, hdr: &Header, payload: &[u8]) {
        let from = hdr.src;
        if hdr.kind != Kind::Data
            || from as usize >= self.peers.len()
            || self.misbehaved.as_ref().is_some_and(|m| m.peer == from)
        {
            return;
        }
        let p = &mut self.peers[from as usize];
        if hdr.seq != p.received {
            let expected = p.received;
            return self.out_of_sequence(from, hdr.seq, expected);
        }
        p.received = p.received.wrapping_add(1);
        p.stats.data_received += 1;
        p.stats.bytes_received += payload.len() as u64;
        if hdr.total > self.c.message_limit() {
            let what = announced_too_large(hdr.total, self.c.max_message, self.c.peer_budget);
            return self.misbehave(from, what);
        }
        if hdr.offset == 0 && payload.len() as u64 == hdr.total {
            p.partial = None;
            p.stats.messages_delivered += 1;
            self.events.push_back(Event::Message {
                from,
                id: hdr.msg,
                data: payload.to_vec(),
            });
            return;
        }
        if p.partial.as_ref().is_none_or(|q| q.msg != hdr.msg) {
            // A new message: whatever was half-received is lost for good.
            p.partial = Some(Partial {
                msg: hdr.msg,
                buf: FillBuf::new(hdr.total as usize),
                got: 0,
            });
        }
        let q = p.partial.as_mut().expect("set above");
        if q.buf.total() as u64 != hdr.total {
            p.stats.drop_out_of_window += 1;
            return;
        }
        // One message at a time per peer, within the peer's budget (the message limit
        // already keeps its total below it; this bounds the allocator's answer too).
        let room = self.c.peer_budget.saturating_sub(q.buf.charge());
        if let Err(e) = q.buf.write_within(hdr.offset, payload, room) {
            let what = match e {
                WriteError::Outside => format!(
                    "sent {} bytes at offset {} of a message of {} bytes",
                    payload.len(),
                    hdr.offset,
                    hdr.total
                ),
                WriteError::OverBudget { need } => {
                    over_budget(q.buf.charge(), need, self.c.peer_budget)
                }
                WriteError::NoMemory => format!(
                    "sent a fragment of a message of {} bytes that this process could not \
                     allocate",
                    hdr.total
                ),
            };
            return self.misbehave(from, what);
        }
        q.got += payload.len() as u64;
        if q.got >= hdr.total {
            let q = p.partial.take().unwrap();
            p.stats.messages_delivered += 1;
            self.events.push_back(Event::Message {
                from,
                id: q.msg,
                data: q.buf.into_vec(),
            });
        }
    }

    fn poll_transmit(&mut self, _now: Time, out: &mut Vec<Transmit>, max: usize) {
        let mut n = 0;
        while n < max {
            let Some(&to) = self.ready.front() else { break };
            let mp = self.c.max_payload[to as usize];
            let Some(f) = self.peers[to as usize].out.next_fragment(mp) else {
                self.ready.pop_front();
                continue;
            };
            let t = self.packet(to, f);
            out.push(t);
            n += 1;
            if self.peers[to as usize].out.is_empty() {
                self.ready.pop_front();
            }
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// No timers: due at once only when failed, so that the engine asks for the failure.
    fn poll_timeout(&mut self) -> Option<Time> {
        self.failed.as_ref().map(|_| 0)
    }

    /// Utopia has no timers and measures nothing.
    fn clocked(&self) -> bool {
        false
    }

    fn handle_timeout(&mut self, _now: Time) {}

    fn outstanding(&self, peer: Rank) -> bool {
        !self.peers[peer as usize].out.is_empty()
    }

    fn queued_bytes(&self, peer: Rank) -> u64 {
        self.peers
            .get(peer as usize)
            .map_or(0, |p| p.out.pending_bytes())
    }

    fn peer_stats(&self, peer: Rank) -> PeerStats {
        let p = &self.peers[peer as usize];
        PeerStats {
            held_bytes: p.partial.as_ref().map_or(0, |q| q.buf.charge()),
            ..p.stats
        }
    }

    fn close_peer(&mut self, dead: PeerDead) {
        let peer = dead.peer;
        let p = &mut self.peers[peer as usize];
        p.out.clear();
        p.partial = None;
        p.confirmed = p.sent;
        self.ready.retain(|&r| r != peer);
    }

    fn expect(&mut self, _now: Time, _peer: Rank, _waiting: bool) {}

    fn unrecovering(&mut self) -> Option<&mut dyn Unrecovering> {
        Some(self)
    }
}

impl Unrecovering for Utopia {
    fn failure(&self) -> Option<&ProtoError> {
        self.failed.as_ref()
    }

    fn marks(&self, peer: Rank) -> Option<(u32, u32)> {
        self.peers.get(peer as usize).map(|p| (p.sent, p.received))
    }

    fn on_marks(&mut self, _now: Time, peer: Rank, sent: u32, received: u32) {
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return;
        };
        if received == p.sent {
            p.confirmed = p.sent;
        }
        if ahead(sent, p.received) && self.failed.is_none() {
            let what = format!(
                "rank {peer} sent {sent} packets and {} arrived: packets {} to {} were lost",
                p.received,
                p.received,
                sent.wrapping_sub(1)
            );
            self.fail(peer, what);
        }
    }

    fn unconfirmed(&self, peer: Rank) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| p.confirmed != p.sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utopia() -> Utopia {
        Utopia::new(Common::new(0, 2, 100))
    }

    fn drain(u: &mut Utopia) -> Vec<Transmit> {
        let mut out = Vec::new();
        u.poll_transmit(0, &mut out, usize::MAX);
        out
    }

    /// A one-packet message with nothing queued goes out at once, numbered in line with
    /// the queued ones; anything else is queued, so the packets leave in sending order.
    #[test]
    fn send_now_bypasses_the_queue_only_when_nothing_waits() {
        let mut u = utopia();
        let (id0, t) = u
            .send_now(0, 1, Bytes::from_static(b"small"), true)
            .unwrap();
        let t = t.expect("an empty queue lets a one-packet message go at once");
        assert_eq!((id0, t.hdr.dst, t.hdr.msg, t.hdr.total), (0, 1, 0, 5));
        assert_eq!(t.hdr.flags, flags::FIRST | flags::LAST);
        assert_eq!(&t.payload[..], b"small");
        assert!(matches!(u.poll_event(), Some(Event::Sent { to: 1, id: 0 })));
        assert!(!u.outstanding(1));

        // Two packets' worth: queued, and cut by poll_transmit.
        let (id1, t) = u
            .send_now(0, 1, Bytes::from(vec![7u8; 150]), false)
            .unwrap();
        assert!(t.is_none());
        // Something is queued now: a small message waits behind it.
        let (id2, t) = u
            .send_now(0, 1, Bytes::from_static(b"after"), false)
            .unwrap();
        assert!(t.is_none());
        assert_eq!((id1, id2), (1, 2));
        let out = drain(&mut u);
        let seen: Vec<_> = out.iter().map(|t| (t.hdr.msg, t.hdr.offset)).collect();
        assert_eq!(seen, [(1, 0), (1, 100), (2, 0)]);
        assert_eq!(u.peer_stats(1).messages_sent, 3);
        assert_eq!(u.peer_stats(1).data_sent, 4);

        // Empty again: direct, and the next id.
        let (id3, t) = u.send_now(0, 1, Bytes::new(), false).unwrap();
        assert_eq!((id3, t.map(|t| t.payload.len())), (3, Some(0)));
    }

    /// Hands every packet of `from`'s output to `to` except those `lose` names (by
    /// position), with the sender's rank filled in as the engine would.
    fn deliver(from: &mut Utopia, to: &mut Utopia, lose: &[usize]) {
        for (i, mut t) in drain(from).into_iter().enumerate() {
            if !lose.contains(&i) {
                t.hdr.src = from.c.rank;
                to.handle(0, &t.hdr, &t.payload);
            }
        }
    }

    fn pair() -> (Utopia, Utopia) {
        (utopia(), Utopia::new(Common::new(1, 2, 100)))
    }

    fn messages(u: &mut Utopia) -> usize {
        std::iter::from_fn(|| u.poll_event())
            .filter(|e| matches!(e, Event::Message { .. }))
            .count()
    }

    #[test]
    fn packets_are_numbered_per_pair_and_arrive_in_sequence() {
        let (mut a, mut b) = pair();
        for n in [5, 250, 0, 7] {
            a.send(0, 1, Bytes::from(vec![1u8; n]), false).unwrap();
        }
        let out = drain(&mut a);
        let seqs: Vec<u32> = out.iter().map(|t| t.hdr.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4, 5]);
        for mut t in out {
            t.hdr.src = 0;
            b.handle(0, &t.hdr, &t.payload);
        }
        assert_eq!(messages(&mut b), 4);
        assert!(b.failure().is_none());
        assert_eq!(b.poll_timeout(), None, "no timer while all is well");
        assert_eq!(a.marks(1), Some((6, 0)));
        assert_eq!(b.marks(0), Some((0, 6)));
    }

    /// A gap in the sequence is a loss utopia cannot repair: it fails, naming the peer,
    /// the packets lost and the protocols that recover, and makes its timer due.
    #[test]
    fn a_gap_fails_naming_the_peer_and_the_lost_packets() {
        let (mut a, mut b) = pair();
        a.send(0, 1, Bytes::from(vec![2u8; 350]), false).unwrap();
        a.send(0, 1, Bytes::from_static(b"next"), false).unwrap();
        // Fragments 1 and 2 of the first message are lost.
        deliver(&mut a, &mut b, &[1, 2]);
        assert_eq!(messages(&mut b), 0);
        let e = b.failure().expect("the gap is detected").clone();
        assert!(
            matches!(&e, ProtoError::Unrecoverable(u) if u.protocol == "utopia" && u.peer == 0),
            "{e:?}"
        );
        let m = e.to_string();
        for part in [
            "utopia has no recovery",
            "packets 1 to 2 from rank 0 were lost (2 packets; packet 3 came next)",
            "BULKWIRE_PROTOCOL=holefill, gbn, rmpp",
        ] {
            assert!(m.contains(part), "{m}");
        }
        assert_eq!(b.poll_timeout(), Some(0));
    }

    #[test]
    fn a_duplicate_or_reordered_packet_fails() {
        let (mut a, mut b) = pair();
        a.send(0, 1, Bytes::from_static(b"one"), false).unwrap();
        let t = drain(&mut a).remove(0);
        let mut h = t.hdr;
        h.src = 0;
        b.handle(0, &h, &t.payload);
        assert!(b.failure().is_none());
        b.handle(0, &h, &t.payload);
        let m = b.failure().expect("a duplicate is detected").to_string();
        assert!(
            m.contains("packet 0 from rank 0 arrived again or out of order (packet 1 was due)"),
            "{m}"
        );
        assert_eq!(messages(&mut b), 1, "the first copy was delivered, once");
    }

    /// A lost tail has no successor to reveal it: the peer's liveness marks do. A sender
    /// is unconfirmed until the receiver's marks show everything arrived.
    #[test]
    fn liveness_marks_reveal_a_lost_tail_and_confirm_delivery() {
        let (mut a, mut b) = pair();
        a.send(0, 1, Bytes::from_static(b"kept"), false).unwrap();
        a.send(0, 1, Bytes::from_static(b"lost"), false).unwrap();
        assert!(!a.unconfirmed(1), "nothing is on the wire yet");
        deliver(&mut a, &mut b, &[1]);
        assert!(a.unconfirmed(1) && !b.unconfirmed(0));
        // b's marks (nothing sent, one received) do not confirm a's two packets.
        let (bs, br) = b.marks(0).unwrap();
        a.on_marks(0, 1, bs, br);
        assert!(a.unconfirmed(1) && a.failure().is_none());
        // a's marks tell b of the packet that never came.
        let (s, r) = a.marks(1).unwrap();
        b.on_marks(0, 0, s, r);
        let m = b.failure().expect("the lost tail is detected").to_string();
        assert!(
            m.contains("rank 0 sent 2 packets and 1 arrived: packets 1 to 1 were lost"),
            "{m}"
        );
        // Marks that match confirm, and marks behind (written before later packets
        // arrived) are no loss.
        let (mut a, mut b) = pair();
        a.send(0, 1, Bytes::from_static(b"x"), false).unwrap();
        deliver(&mut a, &mut b, &[]);
        b.on_marks(0, 0, 0, 0);
        assert!(b.failure().is_none());
        let (bs, br) = b.marks(0).unwrap();
        a.on_marks(0, 1, bs, br);
        assert!(!a.unconfirmed(1));
    }

    #[test]
    fn recovering_protocols_are_named() {
        assert!(!crate::recovers("utopia"));
        assert!(!crate::recovers("nonsense"));
        for p in crate::RECOVERING {
            assert!(crate::recovers(p) && crate::PROTOCOLS.contains(p));
        }
        assert_eq!(crate::RECOVERING.len() + 1, crate::PROTOCOLS.len());
    }

    #[test]
    fn send_now_refuses_what_send_refuses() {
        let mut u = utopia();
        u.c.max_message = 1000;
        let x = || Bytes::from_static(b"x");
        assert!(matches!(
            u.send_now(0, 5, x(), false),
            Err(ProtoError::NoSuchPeer { peer: 5, nprocs: 2 })
        ));
        assert!(matches!(
            u.send_now(0, 0, x(), false),
            Err(ProtoError::SelfSend { peer: 0 })
        ));
        assert!(matches!(
            u.send_now(0, 1, Bytes::from(vec![0u8; 1001]), false),
            Err(ProtoError::TooLarge {
                len: 1001,
                max: 1000
            })
        ));
        // Nothing was numbered or counted for the refused ones.
        assert_eq!(u.send_now(0, 1, x(), false).unwrap().0, 0);
        assert_eq!(u.peer_stats(1).messages_sent, 1);
    }
}
