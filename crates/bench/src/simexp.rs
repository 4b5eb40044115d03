//! Experiments on the simulated network (virtual time, a 10 Gb/s switch with finite
//! buffers): what loopback cannot show, such as switch contention at p = 64, measured
//! deterministically. Reports label these figures "simulated".

use bulkwire_engine::sim::SimCluster;
use bulkwire_engine::{EndpointConfig, Event};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::SEC;
use bytes::Bytes;

use crate::group::Schedule;

/// One simulated all-to-all: per-round virtual seconds and packet counts.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimRounds {
    pub protocol: String,
    pub nprocs: u32,
    pub size: usize,
    pub schedule: Schedule,
    pub seconds: Vec<f64>,
    pub data_packets: u64,
    pub control_packets: u64,
    pub retransmits: u64,
    /// Datagrams the network dropped (switch and receiver overflow, loss).
    pub drops: u64,
}

impl SimRounds {
    /// Per-process bandwidth of the median round, bytes per (virtual) second.
    pub fn per_process_bandwidth(&self) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        let med = s.get(s.len() / 2).copied().unwrap_or(f64::NAN);
        (self.size * (self.nprocs as usize - 1)) as f64 / med
    }
}

/// `rounds` rounds of every process sending `size` bytes to every other in `schedule`
/// order, each round starting when the previous one is fully delivered.
pub fn alltoall(
    protocol: &str,
    nprocs: u32,
    size: usize,
    schedule: Schedule,
    rounds: usize,
    seed: u64,
) -> Result<SimRounds, String> {
    let mut cfg = SimConfig::new(nprocs);
    cfg.seed = seed;
    // A commodity switch: 256 KiB of buffer per output port.
    cfg.switch_buffer = 256 << 10;
    let mut sim = SimCluster::with_protocol(cfg, EndpointConfig::new(7), protocol);
    let msg = Bytes::from(vec![1u8; size]);
    let mut seconds = Vec::new();
    for _ in 0..rounds {
        let t0 = sim.now();
        // Within a round every process's sends are queued in order; the protocol sends
        // them in that order, so the order is the schedule.
        for me in 0..nprocs {
            for k in 1..nprocs {
                sim.send(me, schedule.dest(me, k, nprocs), msg.clone())
                    .map_err(|e| e.to_string())?;
            }
        }
        let want = (nprocs * (nprocs - 1)) as usize;
        let mut got = 0usize;
        sim.run_until(t0 + 3600 * SEC, |c| {
            for r in 0..nprocs {
                for e in c.take_events(r) {
                    match e {
                        Event::Message { .. } => got += 1,
                        Event::Announce { from, id, .. } => {
                            let now = c.now();
                            if let Some(a) = c.endpoint(r).protocol().announcing() {
                                a.accept(now, from, id);
                            }
                        }
                        _ => {}
                    }
                }
            }
            got == want
        })
        .map_err(|e| e.to_string())?;
        seconds.push((sim.now() - t0) as f64 / 1e9);
    }
    let (mut data, mut control, mut retrans) = (0, 0, 0);
    for r in 0..nprocs {
        for q in (0..nprocs).filter(|&q| q != r) {
            let s = sim.endpoint(r).peer_stats(q);
            data += s.data_sent;
            control += s.control_sent;
            retrans += s.retransmits;
        }
    }
    let net = sim.net().total_stats();
    Ok(SimRounds {
        protocol: protocol.into(),
        nprocs,
        size,
        schedule,
        seconds,
        data_packets: data,
        control_packets: control,
        retransmits: retrans,
        drops: net.switch_overflow + net.recv_overflow + net.lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alltoall_counts_and_is_deterministic() {
        let a = alltoall("holefill", 8, 60 << 10, Schedule::Latin, 2, 3).unwrap();
        let b = alltoall("holefill", 8, 60 << 10, Schedule::Latin, 2, 3).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.seconds.len(), 2);
        // 56 messages of 60 KiB in jumbo frames: at least 7 packets each.
        assert!(a.data_packets >= 56 * 7);
        let bw = a.per_process_bandwidth();
        // Bounded by the 10 Gb/s link.
        assert!(bw > 1e8 && bw < 1.25e9, "{bw}");
    }
}
