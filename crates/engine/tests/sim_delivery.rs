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
    /// Small switch and receive buffers, so bursts overflow them.
    tight: bool,
}

const CLEAN: Faults = Faults {
    loss: 0.0,
    ber: 0.0,
    dup: 0.0,
    reorder: 0.0,
    tight: false,
};

struct Outcome {
    finished_at: Time,
    delivered: usize,
    control_sent: u64,
    data_sent: u64,
}

/// Sends a random plan through a simulated cluster and checks every delivery.
fn run(protocol: &str, p: u32, f: Faults, seed: u64, count: usize, budget: usize) -> Outcome {
    run_cc(protocol, p, f, seed, count, budget, true)
}

/// [`run`] with congestion control on or off (`BULKWIRE_CC`).
fn run_cc(
    protocol: &str,
    p: u32,
    f: Faults,
    seed: u64,
    count: usize,
    budget: usize,
    cc: bool,
) -> Outcome {
    let mut cfg = SimConfig::new(p);
    cfg.loss = f.loss;
    cfg.ber = f.ber;
    cfg.dup = f.dup;
    cfg.reorder = f.reorder;
    cfg.seed = seed;
    if f.tight {
        cfg.switch_buffer = 48 << 10;
        cfg.recv_buffer = 64 << 10;
    }
    if protocol == "utopia" {
        // Utopia cannot recover from anything, overflow included.
        cfg.switch_buffer = usize::MAX / 4;
        cfg.recv_buffer = usize::MAX / 4;
    }
    let ep = EndpointConfig::with_deadline(0xC0FFEE, 3600 * SEC);
    let protocols = bulkwire_protocol::ProtocolConfigs::default();
    let mut sim = SimCluster::new(cfg, ep, |c| {
        bulkwire_protocol::by_name(protocol, c.with_cc(cc), &protocols).expect("known protocol")
    });
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
    let net = sim.net().total_stats();
    let retrans: u64 = (0..p)
        .flat_map(|r| (0..p).filter(move |&q| q != r).map(move |q| (r, q)))
        .map(|(r, q)| sim.endpoint(r).peer_stats(q).retransmits)
        .sum();
    eprintln!(
        "{protocol:8} p={p:3} loss={:.2} tight={} msgs={} bytes={} virt={:.3}s data={data_sent} ctl={control_sent} \
         retrans={retrans} lost={} ovf_sw={} ovf_rx={} corrupt={} steps={}",
        f.loss,
        f.tight,
        chk.delivered,
        chk.bytes,
        finished_at as f64 / 1e9,
        net.lost,
        net.switch_overflow,
        net.recv_overflow,
        net.corrupted,
        sim.steps()
    );
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

/// The matrix a reliable protocol must pass: every p at loss 0, 1, 5 and 20 %, then loss
/// with corruption, duplication and reordering together, then buffers so small that
/// bursts overflow them.
fn reliable(protocol: &str) {
    let mut configs: Vec<Faults> = [0.0, 0.01, 0.05, 0.20]
        .iter()
        .map(|&loss| Faults { loss, ..CLEAN })
        .collect();
    configs.push(Faults {
        loss: 0.05,
        ber: 1e-6,
        dup: 0.02,
        reorder: 0.05,
        tight: false,
    });
    configs.push(Faults {
        tight: true,
        ..CLEAN
    });
    for p in [2, 4, 16, 256] {
        let (n, budget) = sizes_for(p);
        // The biggest cluster carries less under heavy loss, to keep CI quick.
        for (i, f) in configs.iter().enumerate() {
            let (n, budget) = if p == 256 && f.loss >= 0.05 {
                (n / 3, budget / 4)
            } else {
                (n, budget)
            };
            let seed = 1000 * p as u64 + i as u64;
            let o = run(protocol, p, *f, seed, n, budget);
            assert_eq!(o.delivered, n);
            assert!(o.data_sent as usize >= n);
            if f.loss > 0.0 || f.tight {
                assert!(o.control_sent > 0);
            }
        }
    }
}

#[test]
fn gbn_delivers_under_faults() {
    reliable("gbn");
}

#[test]
fn holefill_delivers_under_faults() {
    reliable("holefill");
}

#[test]
fn rmpp_delivers_under_faults() {
    reliable("rmpp");
}

/// The BSPlib paper's point against the ParaStation2 paper's protocol: acknowledging every packet costs a
/// control packet per data packet; piggybacking and acks only on demand cost far fewer.
/// Between the papers' protocols (`BULKWIRE_CC=off`): with congestion control, random
/// loss keeps holefill's window small and it asks for an acknowledgement every half
/// window (a third of gbn's control packets at 5 % loss and p = 16, not a fifth).
#[test]
fn holefill_sends_far_fewer_control_packets_than_gbn() {
    for (p, loss) in [(2, 0.0), (4, 0.01), (16, 0.05)] {
        let f = Faults { loss, ..CLEAN };
        let (n, budget) = sizes_for(p);
        let seed = 77 + p as u64;
        let g = run_cc("gbn", p, f, seed, n, budget, false);
        let h = run_cc("holefill", p, f, seed, n, budget, false);
        assert!(
            h.control_sent * 5 < g.control_sent,
            "p={p} loss={loss}: holefill {} control packets, gbn {}",
            h.control_sent,
            g.control_sent
        );
        // gbn acknowledges every data packet it accepts.
        assert!(g.control_sent * 10 >= g.data_sent * 9);
    }
}
