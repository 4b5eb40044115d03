//! Recovery at heavy loss: half of all datagrams lost (both ways), 600 messages of up to
//! 16 KiB among 2 or 4 ranks, in virtual time.

mod common;

use bulkwire_engine::EndpointConfig;
use bulkwire_engine::sim::SimCluster;
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{MS, SEC, Time};
use common::{Checker, bytes_of, plan};

/// Virtual time to deliver the plan under `loss`, every delivery checked; `waiting`: every
/// rank waits on every peer ((`Protocol::expect`), which makes holefill prod).
fn finish(protocol: &str, p: u32, loss: f64, seed: u64, count: usize, waiting: bool) -> Time {
    let mut cfg = SimConfig::new(p);
    cfg.loss = loss;
    cfg.seed = seed;
    let ep = EndpointConfig::with_deadline(0xC0FFEE, 3600 * SEC);
    let mut sim = SimCluster::with_protocol(cfg, ep, protocol);
    for r in 0..p {
        for q in (0..p).filter(|&q| q != r) {
            sim.expect(r, q, waiting);
        }
    }
    let msgs = plan(seed, p, count, 16 << 10, 64 << 20, 5 * MS);
    let mut chk = Checker::new(p, &msgs);
    for m in &msgs {
        sim.advance_to(m.at).unwrap();
        sim.send(m.src, m.dst, bytes_of(m)).unwrap();
    }
    let res = sim.run_until(600 * SEC, |c| {
        for r in 0..p {
            for e in c.take_events(r) {
                chk.check(r, &e);
            }
        }
        chk.complete()
    });
    if let Err(e) = res {
        panic!(
            "{protocol} p={p} loss={loss} seed={seed}: {e}; delivered {}/{}",
            chk.delivered,
            chk.total()
        );
    }
    let t = sim.now();
    let mut tot = bulkwire_protocol::PeerStats::default();
    for r in 0..p {
        for q in (0..p).filter(|&q| q != r) {
            tot += &sim.endpoint(r).peer_stats(q);
        }
    }
    eprintln!(
        "{protocol:8} p={p} loss={loss} seed={seed} waiting={waiting}: {:.3} s, {} timeouts, \
         {} retransmits, {} prods",
        t as f64 / 1e9,
        tot.timeouts,
        tot.retransmits,
        tot.prods_sent
    );
    t
}

/// Receivers not waiting (no prods): recovery rests on the senders' retransmission
/// timers. With a timer that doubled at every timeout up to a second, holefill took
/// 3.5-25 s of virtual time here where gbn takes 0.02-0.12 s; it takes under 0.3 s.
#[test]
fn holefill_recovers_at_half_loss_by_its_timers() {
    for p in [2, 4] {
        for seed in 1..=4 {
            let t = finish("holefill", p, 0.5, seed, 600, false);
            assert!(t < SEC, "p={p} seed={seed}: {:.3} s", t as f64 / 1e9);
        }
    }
}

/// Receivers waiting on their peers (a program blocked in a receive): holefill within
/// twice gbn's time on the same plan. Unanswered prods backed off at each one, to
/// 100 ms, however lively the peer.
#[test]
fn holefill_within_twice_gbn_at_half_loss_when_receivers_wait() {
    for p in [2, 4] {
        for seed in 1..=3 {
            let g = finish("gbn", p, 0.5, seed, 600, true);
            let h = finish("holefill", p, 0.5, seed, 600, true);
            assert!(
                h <= 2 * g,
                "p={p} seed={seed}: holefill {:.3} s, gbn {:.3} s",
                h as f64 / 1e9,
                g as f64 / 1e9
            );
        }
    }
}
