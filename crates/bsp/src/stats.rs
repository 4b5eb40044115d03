//! The statistics `bsp_end` prints with `BULKWIRE_STATS=1`: the BSPlib paper's Table 5 (packets
//! received, explicit acknowledgements, drops, duplicates, implicit acknowledgements) per
//! process and in total, with the supersteps and bytes the BSP layer moved.

use bulkwire_protocol::wire::DropReason;
use bulkwire_protocol::{PeerStats, Stats};

use crate::core::{Core, Counters, Net};

/// One process's figures, as pid 0 gathers them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub pid: u32,
    /// Protocol counters summed over peers.
    pub proto: PeerStats,
    /// Datagrams the engine dropped before the protocol (corrupt, malformed...), less
    /// those counted in `rejected`.
    pub link_drops: u64,
    /// Datagrams from outside the job: failed the packet MAC, or carried another job's
    /// cookie.
    pub rejected: u64,
    pub bsp: Counters,
}

impl Snapshot {
    pub fn of(c: &Core, n: &Net) -> Snapshot {
        let t = n.transport();
        let peers: Vec<PeerStats> = (0..t.nprocs())
            .filter(|&r| r != t.rank())
            .map(|r| t.peer_stats(r))
            .collect();
        let d = t.drops();
        let rejected = d.get(DropReason::Mac) + d.get(DropReason::Foreign);
        Snapshot {
            pid: c.pid(),
            proto: Stats::sum(&peers).total,
            link_drops: d.total() - rejected,
            rejected,
            bsp: c.counters,
        }
    }

    fn fields(&self) -> [u64; 13] {
        let s = &self.proto;
        [
            self.pid as u64,
            s.data_received,
            s.data_sent,
            s.acks_sent,
            s.drop_out_of_window + s.drop_no_buffer + self.link_drops,
            s.drop_duplicate,
            s.implicit_acks,
            s.retransmits,
            self.bsp.supersteps,
            self.bsp.bytes_out,
            self.bsp.bytes_in,
            self.bsp.bytes_local,
            self.rejected,
        ]
    }

    pub fn encode(&self) -> Vec<u8> {
        self.fields().iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    pub fn decode(b: &[u8]) -> Option<Snapshot> {
        if b.len() != 13 * 8 {
            return None;
        }
        let v: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Some(Snapshot {
            pid: u32::try_from(v[0]).ok()?,
            proto: PeerStats {
                data_received: v[1],
                data_sent: v[2],
                acks_sent: v[3],
                drop_out_of_window: v[4],
                drop_duplicate: v[5],
                implicit_acks: v[6],
                retransmits: v[7],
                ..PeerStats::default()
            },
            link_drops: 0,
            rejected: v[12],
            bsp: Counters {
                supersteps: v[8],
                bytes_out: v[9],
                bytes_in: v[10],
                bytes_local: v[11],
                ..Counters::default()
            },
        })
    }
}

/// The table, one line per process and a total; `links`: those of pid 0 (`shm+udp`...).
pub fn table(protocol: &str, links: &str, snaps: &[Snapshot]) -> String {
    let over = if links.is_empty() {
        String::new()
    } else {
        format!(" over {links}")
    };
    let mut out = format!(
        "bulkwire BSP statistics ({protocol}{over}, p={}, {} supersteps)\n\
         {:>5} {:>10} {:>8} {:>8} {:>8} {:>7} {:>8} {:>10} {:>8} {:>12} {:>12}\n",
        snaps.len(),
        snaps.first().map_or(0, |s| s.bsp.supersteps),
        "pid",
        "Recvd",
        "ExplAck",
        "Drops",
        "Rejected",
        "Dups",
        "ImplAck",
        "Sent",
        "Retrans",
        "BytesOut",
        "BytesIn",
    );
    let mut total = Snapshot::default();
    for s in snaps {
        out += &line(&s.pid.to_string(), s);
        let t = &mut total;
        t.proto += &s.proto;
        t.bsp.bytes_out += s.bsp.bytes_out;
        t.bsp.bytes_in += s.bsp.bytes_in;
        t.bsp.bytes_local += s.bsp.bytes_local;
        t.rejected += s.rejected;
    }
    out += &line("total", &total);
    out
}

fn line(name: &str, s: &Snapshot) -> String {
    let st = Stats { total: s.proto };
    format!(
        "{:>5} {:>10} {:>7.2}% {:>8} {:>8} {:>7} {:>7.2}% {:>10} {:>8} {:>12} {:>12}\n",
        name,
        s.proto.data_received,
        st.explicit_ack_pct(),
        s.proto.drop_out_of_window + s.proto.drop_no_buffer,
        s.rejected,
        s.proto.drop_duplicate,
        st.implicit_ack_pct(),
        s.proto.data_sent,
        s.proto.retransmits,
        s.bsp.bytes_out,
        s.bsp.bytes_in,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_tabulate() {
        let s = Snapshot {
            pid: 3,
            proto: PeerStats {
                data_received: 1000,
                data_sent: 900,
                acks_sent: 5,
                drop_duplicate: 2,
                implicit_acks: 90,
                ..PeerStats::default()
            },
            link_drops: 0,
            rejected: 4,
            bsp: Counters {
                supersteps: 7,
                bytes_out: 123,
                bytes_in: 456,
                bytes_local: 8,
                ..Counters::default()
            },
        };
        let d = Snapshot::decode(&s.encode()).unwrap();
        assert_eq!(d, s);
        assert_eq!(Snapshot::decode(&[1, 2, 3]), None);
        let t = table("holefill", "udp", &[s, d]);
        assert!(t.contains("p=2, 7 supersteps"), "{t}");
        assert!(t.contains("0.50%"), "explicit acks of received: {t}");
        assert!(t.contains("10.00%"), "implicit acks of sent: {t}");
        let total: Vec<&str> = t.lines().last().unwrap().split_whitespace().collect();
        assert_eq!(
            (total[1], total[4]),
            ("2000", "8"),
            "received, rejected: {t}"
        );
    }
}
