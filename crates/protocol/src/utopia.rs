//! Utopia (seed 000): sends and trusts. No sequence check, no acknowledgement, no
//! retransmission: the ceiling for every other protocol's bandwidth and latency, and the
//! floor for its reliability. A message that loses a fragment is simply never delivered.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::common::{FillBuf, OutQueue};
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
            let p = &mut self.peers[to as usize];
            let Some(f) = p.out.next_fragment(mp) else {
                self.ready.pop_front();
                continue;
            };
            let mut hdr = Header::new(Kind::Data);
            hdr.dst = to;
            hdr.msg = f.msg;
            hdr.offset = f.offset;
            hdr.total = f.total;
            hdr.flags =
                if f.first { flags::FIRST } else { 0 } | if f.last { flags::LAST } else { 0 };
            p.stats.data_sent += 1;
            p.stats.bytes_sent += f.payload.len() as u64;
            if f.last && f.notify {
                // Nothing will ever acknowledge it: "sent" is as good as it gets.
                self.events.push_back(Event::Sent { to, id: f.msg });
            }
            out.push(Transmit {
                hdr,
                payload: f.payload,
            });
            n += 1;
            if p.out.is_empty() {
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
