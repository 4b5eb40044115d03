//! Utopia (seed 000): sends and trusts. No sequence check, no acknowledgement, no
//! retransmission: the ceiling for every other protocol's bandwidth and latency, and the
//! floor for its reliability. A message that loses a fragment is simply never delivered.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::common::{FillBuf, Fragment, OutQueue};
use crate::wire::{Header, Kind, flags};
use crate::{Common, Event, MsgId, PeerStats, ProtoError, Protocol, Rank, Time, Transmit};

struct Partial {
    msg: MsgId,
    buf: FillBuf,
    got: u64,
}

struct Peer {
    out: OutQueue,
    partial: Option<Partial>,
    stats: PeerStats,
}

/// The Utopia protocol.
pub struct Utopia {
    c: Common,
    peers: Vec<Peer>,
    ready: VecDeque<Rank>,
    events: VecDeque<Event>,
}

impl Utopia {
    pub fn new(c: Common) -> Utopia {
        let peers = (0..c.nprocs)
            .map(|_| Peer {
                out: OutQueue::default(),
                partial: None,
                stats: PeerStats::default(),
            })
            .collect();
        Utopia {
            c,
            peers,
            ready: VecDeque::new(),
            events: VecDeque::new(),
        }
    }
}

impl Utopia {
    /// The packet of fragment `f` to `to`, counted; its message's `Sent` event when it is
    /// the last fragment and the sender asked.
    fn packet(&mut self, to: Rank, f: Fragment) -> Transmit {
        let mut hdr = Header::new(Kind::Data);
        hdr.dst = to;
        hdr.msg = f.msg;
        hdr.offset = f.offset;
        hdr.total = f.total;
        hdr.flags = if f.first { flags::FIRST } else { 0 } | if f.last { flags::LAST } else { 0 };
        let stats = &mut self.peers[to as usize].stats;
        stats.data_sent += 1;
        stats.bytes_sent += f.payload.len() as u64;
        if f.last && f.notify {
            // Nothing will ever acknowledge it: "sent" is as good as it gets.
            self.events.push_back(Event::Sent { to, id: f.msg });
        }
        Transmit {
            hdr,
            payload: f.payload,
        }
    }
}

impl Protocol for Utopia {
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
        self.c.check_send(to, data.len(), || false)?;
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
        self.c.check_send(to, data.len(), || false)?;
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
        if hdr.kind != Kind::Data {
            return;
        }
        let from = hdr.src;
        let p = &mut self.peers[from as usize];
        p.stats.data_received += 1;
        p.stats.bytes_received += payload.len() as u64;
        if hdr.total > self.c.max_message {
            p.stats.drop_no_buffer += 1;
            return;
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
        let q = p.partial.as_mut().unwrap();
        if q.buf.total() as u64 != hdr.total || !q.buf.write(hdr.offset as usize, payload) {
            p.stats.drop_out_of_window += 1;
            return;
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

    fn poll_timeout(&mut self) -> Option<Time> {
        None
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
        self.peers[peer as usize].stats
    }

    fn close_peer(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        p.out.clear();
        p.partial = None;
        self.ready.retain(|&r| r != peer);
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
