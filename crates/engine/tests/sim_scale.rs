//! The simulated network at scale, deterministically: thousands of nodes on the network
//! alone, and a thousand nodes each running a full protocol stack.

use bulkwire_engine::EndpointConfig;
use bulkwire_engine::Event;
use bulkwire_engine::sim::SimCluster;
use bulkwire_link::sim::{SimConfig, SimNet};
use bulkwire_link::{Link, RxBatch, Tx};
use bulkwire_protocol::SEC;
use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// 4096 nodes send random datagrams to random nodes, in bursts that overflow switch
/// ports: everything sent is delivered or counted as an overflow, in order of virtual
/// time, and the same seed gives the same outcome.
#[test]
fn four_thousand_nodes_on_the_network() {
    let run = || {
        let n = 4096u32;
        let mut cfg = SimConfig::new(n);
        cfg.switch_buffer = 32 << 10;
        cfg.seed = 9;
        let net = SimNet::new(cfg);
        let mut links: Vec<_> = (0..n).map(|r| net.link(r)).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let body = vec![7u8; 4000];
        let mut sent = 0u64;
        for round in 0..4u64 {
            net.advance(round * 100_000);
            for src in 0..n {
                // A hot spot: a quarter of the traffic goes to the first 16 nodes.
                let dst = if rng.random_range(0..4) == 0 {
                    rng.random_range(0..16)
                } else {
                    rng.random_range(0..n)
                };
                sent += links[src as usize]
                    .send(&[Tx {
                        dst,
                        head: &round.to_le_bytes(),
                        body: &body,
                    }])
                    .unwrap() as u64;
            }
        }
        net.advance(10 * SEC);
        let mut rx = RxBatch::new(64, 9000);
        let mut got = 0u64;
        for l in &mut links {
            while l.recv(&mut rx).unwrap() > 0 {
                got += rx.len() as u64;
                assert!(rx.iter().all(|d| d.len() == 4008));
            }
        }
        let s = net.total_stats();
        (sent, got, s)
    };
    let (sent, got, s) = run();
    assert_eq!(sent, 4 * 4096);
    assert_eq!(got, s.delivered);
    assert_eq!(sent, s.delivered + s.switch_overflow + s.recv_overflow);
    assert!(s.switch_overflow > 0, "the hot spot overflows its ports");
    assert_eq!(run(), (sent, got, s), "deterministic");
}

/// 1024 nodes, each running holefill, pass messages around a ring and to a random peer.
#[test]
fn a_thousand_nodes_run_holefill() {
    let p = 1024u32;
    let mut cfg = SimConfig::new(p);
    cfg.seed = 4;
    cfg.loss = 0.01;
    let mut sim = SimCluster::with_protocol(cfg, EndpointConfig::new(1), "holefill");
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut want = 0usize;
    for r in 0..p {
        sim.send(r, (r + 1) % p, Bytes::from(vec![r as u8; 20_000]))
            .unwrap();
        want += 1;
        let other = rng.random_range(0..p);
        if other != r {
            sim.send(r, other, Bytes::from(vec![r as u8; 100])).unwrap();
            want += 1;
        }
    }
    let mut got = 0usize;
    let mut ring_ok = 0usize;
    sim.run_until(60 * SEC, |c| {
        for r in 0..p {
            for e in c.take_events(r) {
                if let Event::Message { from, data, .. } = e {
                    assert!(data.iter().all(|&b| b == from as u8));
                    if data.len() == 20_000 {
                        assert_eq!((from + 1) % p, r);
                        ring_ok += 1;
                    }
                    got += 1;
                }
            }
        }
        got == want
    })
    .unwrap();
    assert_eq!((ring_ok, got), (p as usize, want));
    assert!(sim.net().total_stats().lost > 0, "losses were recovered");
}
