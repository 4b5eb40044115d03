//! Every protocol, on the simulated network, for p in {2, 4, 16, 256}: random traffic of
//! 0 B to 4 MiB messages is delivered exactly once, intact and in per-pair order, under
//! loss, corruption, duplication and reordering (utopia without faults only).

mod common;

use bulkwire_engine::EndpointConfig;
use bulkwire_engine::sim::SimCluster;
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{MS, SEC, Time};
use common::{Checker, bytes_of, plan};

#[derive(Clone, Copy, Debug)]
struct Faults {
    loss: f64,
    ber: f64,
    dup: f64,
    reorder: f64,
}

const CLEAN: Faults = Faults {
    loss: 0.0,
    ber: 0.0,
    dup: 0.0,
    reorder: 0.0,
};

struct Outcome {
    finished_at: Time,
    delivered: usize,
    control_sent: u64,
    data_sent: u64,
}

/// Sends a random plan through a simulated cluster and checks every delivery.
fn run(protocol: &str, p: u32, f: Faults, seed: u64, count: usize, budget: usize) -> Outcome {
    let mut cfg = SimConfig::new(p);
    cfg.loss = f.loss;
    cfg.ber = f.ber;
    cfg.dup = f.dup;
    cfg.reorder = f.reorder;
    cfg.seed = seed;
    if protocol == "utopia" {
        // Utopia cannot recover from anything, overflow included.
        cfg.switch_buffer = usize::MAX / 4;
        cfg.recv_buffer = usize::MAX / 4;
    }
    let ep = EndpointConfig::with_deadline(0xC0FFEE, 3600 * SEC);
    let mut sim = SimCluster::with_protocol(cfg, ep, protocol);
    let msgs = plan(seed, p, count, 4 << 20, budget, 20 * MS);
    let mut chk = Checker::new(p, &msgs);
    for m in &msgs {
        sim.advance_to(m.at).unwrap();
        sim.send(m.src, m.dst, bytes_of(m)).unwrap();
    }
    let limit = 3600 * SEC;
    let res = sim.run_until(limit, |c| {
        for r in 0..p {
            for e in c.take_events(r) {
                chk.check(r, &e);
            }
        }
        chk.complete()
    });
    if let Err(e) = res {
        panic!(
            "{protocol} p={p} {f:?} seed={seed}: {e}; delivered {}/{}; missing {}",
            chk.delivered,
            chk.total(),
            chk.missing()
        );
    }
    let finished_at = sim.now();
    // Let acknowledgements settle, then count the protocol's packets.
    sim.run_to_quiescence(limit).unwrap();
    let (mut control_sent, mut data_sent) = (0, 0);
    for r in 0..p {
        for q in 0..p {
            if q != r {
                let s = sim.endpoint(r).peer_stats(q);
                control_sent += s.control_sent;
                data_sent += s.data_sent;
            }
        }
    }
    Outcome {
        finished_at,
        delivered: chk.delivered,
        control_sent,
        data_sent,
    }
}

fn sizes_for(p: u32) -> (usize, usize) {
    // (messages, byte budget): enough to mix every size class, small enough for CI.
    match p {
        2 => (300, 48 << 20),
        4 => (400, 48 << 20),
        16 => (800, 48 << 20),
        _ => (3000, 32 << 20),
    }
}

#[test]
fn utopia_delivers_without_faults() {
    for p in [2, 4, 16, 256] {
        let (n, budget) = sizes_for(p);
        let o = run("utopia", p, CLEAN, 11 + p as u64, n, budget);
        assert_eq!(o.delivered, n);
        assert_eq!(o.control_sent, 0, "utopia sends no control packets");
        assert!(o.data_sent as usize >= n);
        assert!(o.finished_at > 0);
    }
}
