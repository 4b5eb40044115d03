//! Per-peer packet statistics, as in the BSPlib paper's Table 5 and more.

use std::ops::AddAssign;

/// Counters for one peer, from this endpoint's point of view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Data packets sent (first transmissions and retransmissions).
    pub data_sent: u64,
    /// Payload bytes in data packets sent, retransmissions included.
    pub bytes_sent: u64,
    /// Data packets retransmitted (included in `data_sent`).
    pub retransmits: u64,
    /// Data packets received (every arrival, duplicates included).
    pub data_received: u64,
    /// Payload bytes of data packets accepted (duplicates excluded).
    pub bytes_received: u64,
    /// Control packets sent / received (acks, nacks, prods, rmpp control).
    pub control_sent: u64,
    pub control_received: u64,
    /// Explicit (stand-alone) acknowledgements sent / received.
    pub acks_sent: u64,
    pub acks_received: u64,
    /// Acknowledgements that rode on a data packet and advanced the window.
    pub piggybacked_acks: u64,
    /// Sent packets freed by the superstep-colour rule, not by any acknowledgement.
    pub implicit_acks: u64,
    /// Sent packets freed by an acknowledgement of any kind.
    pub acked: u64,
    /// Negative acknowledgements sent / received.
    pub nacks_sent: u64,
    pub nacks_received: u64,
    /// Prods sent / received (holefill).
    pub prods_sent: u64,
    pub prods_received: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Data packets dropped: already received.
    pub drop_duplicate: u64,
    /// Data packets dropped: outside the receive window.
    pub drop_out_of_window: u64,
    /// Data packets dropped: no receive buffer free.
    pub drop_no_buffer: u64,
    /// Packets ignored as nonsense that passed the CRC: acknowledgements of nothing sent,
    /// inverted holes, sequence numbers outside the space, kinds the protocol does not use.
    pub bogus: u64,
    /// Messages queued to / delivered from this peer.
    pub messages_sent: u64,
    pub messages_delivered: u64,
    /// Smoothed round trip, nanoseconds (0 before the first sample).
    pub srtt_ns: u64,
    /// Bytes held now in this peer's incomplete messages (at most [`crate::Common::peer_budget`]).
    pub held_bytes: u64,
}

impl PeerStats {
    /// All drops this peer's packets suffered at the protocol level.
    pub fn drops(&self) -> u64 {
        self.drop_duplicate + self.drop_out_of_window + self.drop_no_buffer
    }
}

impl AddAssign<&PeerStats> for PeerStats {
    fn add_assign(&mut self, o: &PeerStats) {
        self.data_sent += o.data_sent;
        self.bytes_sent += o.bytes_sent;
        self.retransmits += o.retransmits;
        self.data_received += o.data_received;
        self.bytes_received += o.bytes_received;
        self.control_sent += o.control_sent;
        self.control_received += o.control_received;
        self.acks_sent += o.acks_sent;
        self.acks_received += o.acks_received;
        self.piggybacked_acks += o.piggybacked_acks;
        self.implicit_acks += o.implicit_acks;
        self.acked += o.acked;
        self.nacks_sent += o.nacks_sent;
        self.nacks_received += o.nacks_received;
        self.prods_sent += o.prods_sent;
        self.prods_received += o.prods_received;
        self.timeouts += o.timeouts;
        self.drop_duplicate += o.drop_duplicate;
        self.drop_out_of_window += o.drop_out_of_window;
        self.drop_no_buffer += o.drop_no_buffer;
        self.bogus += o.bogus;
        self.messages_sent += o.messages_sent;
        self.messages_delivered += o.messages_delivered;
        // A sum of round trips means nothing; keep the larger.
        self.srtt_ns = self.srtt_ns.max(o.srtt_ns);
        self.held_bytes += o.held_bytes;
    }
}

/// Totals over peers, with the percentages of the BSPlib paper's Table 5.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub total: PeerStats,
}

impl Stats {
    /// Sums per-peer statistics.
    pub fn sum<'a>(peers: impl IntoIterator<Item = &'a PeerStats>) -> Stats {
        let mut total = PeerStats::default();
        for p in peers {
            total += p;
        }
        Stats { total }
    }

    /// Explicit acknowledgements sent, as a percentage of data packets received.
    pub fn explicit_ack_pct(&self) -> f64 {
        pct(self.total.acks_sent, self.total.data_received)
    }

    /// Packets freed implicitly, as a percentage of data packets sent.
    pub fn implicit_ack_pct(&self) -> f64 {
        pct(self.total.implicit_acks, self.total.data_sent)
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}
