//! utopia has no recovery, so it must not hang when the link loses: on the simulated
//! network a loss in the middle of the traffic fails the job at the next packet, a loss
//! at its very end fails it through the liveness pings' counts, and a clean run never
//! fails, however long it stays idle.

use bulkwire_engine::sim::{SimCluster, SimError};
use bulkwire_engine::{EndpointConfig, Event};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::{MS, SEC, Time};
use bytes::Bytes;

const DEAD_AFTER: Time = 2 * SEC;
/// The endpoint's ping interval for that deadline (a tenth of it).
const PING: Time = DEAD_AFTER / 10;

fn cluster(p: u32, f: impl FnOnce(&mut SimConfig)) -> SimCluster {
    let mut cfg = SimConfig::new(p);
    f(&mut cfg);
    SimCluster::with_protocol(cfg, EndpointConfig::with_deadline(5, DEAD_AFTER), "utopia")
}

/// The failure a run ended with: the node and its message.
fn failure(r: Result<Time, SimError>) -> (u32, String) {
    match r {
        Err(SimError::Node { rank, msg }) => (rank, msg),
        other => panic!("expected a node to fail, got {other:?}"),
    }
}

#[test]
fn loss_amid_traffic_fails_at_the_next_packet() {
    let lost = "were lost";
    let again = "arrived again or out of order";
    for (seed, loss, dup, what) in [
        (1, 0.01, 0.0, &[lost][..]),
        (2, 0.0, 0.01, &[again]),
        (3, 0.05, 0.05, &[lost, again]),
    ] {
        let mut sim = cluster(4, |c| {
            c.seed = seed;
            c.loss = loss;
            c.dup = dup;
        });
        for i in 0..400u32 {
            let (src, dst) = (i % 4, (i / 4 + i + 1) % 4);
            if src != dst {
                sim.send(src, dst, Bytes::from(vec![i as u8; 100 + 97 * i as usize]))
                    .unwrap();
            }
        }
        let (rank, msg) = failure(sim.run_until(10 * SEC, |_| false));
        assert!(
            sim.now() < 50 * MS,
            "seed {seed}: failed only at {} ns",
            sim.now()
        );
        assert!(msg.contains("utopia has no recovery"), "{msg}");
        assert!(msg.contains("holefill, gbn, rmpp"), "{msg}");
        let named = (0..4).any(|q| q != rank && msg.contains(&format!("from rank {q} ")));
        assert!(named, "the message names the sender: {msg}");
        assert!(what.iter().any(|w| msg.contains(w)), "{msg}");
    }
}

/// The last message is lost and nothing follows it: nobody waits on anybody, yet the
/// sender's unconfirmed packets make it ping, and its counts tell the receiver.
#[test]
fn a_lost_tail_is_found_by_the_pings() {
    let mut sim = cluster(2, |_| {});
    for i in 0..10u8 {
        sim.send(0, 1, Bytes::from(vec![i; 3000])).unwrap();
    }
    sim.run_to_quiescence(SEC).unwrap();
    assert_eq!(sim.take_events(1).len(), 10);
    sim.net().set_faults(|c| c.loss = 1.0);
    sim.send(0, 1, Bytes::from_static(b"the tail")).unwrap();
    let lost_at = sim.now();
    sim.advance_to(lost_at + MS).unwrap();
    sim.net().set_faults(|c| c.loss = 0.0);
    assert_eq!(sim.net().stats(1).lost, 1);
    let (rank, msg) = failure(sim.run_until(lost_at + 60 * SEC, |_| false));
    let took = sim.now() - lost_at;
    assert_eq!(rank, 1, "{msg}");
    assert!(
        msg.contains("rank 0 sent 11 packets and 10 arrived: packets 10 to 10 were lost"),
        "{msg}"
    );
    assert!(took <= 3 * PING, "found after {took} ns");
}

/// Clean traffic with long idle gaps: the pings confirm delivery and then stop; nothing
/// fails and nobody is declared dead.
#[test]
fn clean_traffic_never_fails_and_pings_stop_once_confirmed() {
    let mut sim = cluster(3, |_| {});
    let mut t = 0;
    for round in 0..5u8 {
        for (s, d) in [(0, 1), (1, 2), (2, 0), (0, 2)] {
            sim.send(s, d, Bytes::from(vec![round; 20_000])).unwrap();
        }
        t += 3 * PING;
        sim.run_until(t, |_| false).unwrap_err();
    }
    let pings = |sim: &mut SimCluster| (0..3).map(|r| sim.endpoint(r).pings_sent()).sum::<u64>();
    let before = pings(&mut sim);
    sim.run_until(t + 20 * PING, |_| false).unwrap_err();
    assert_eq!(pings(&mut sim), before, "confirmed: no more pings");
    let mut got = 0;
    for r in 0..3 {
        for e in sim.take_events(r) {
            match e {
                Event::Message { .. } => got += 1,
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
    assert_eq!(got, 20);
    // A sender pings a silent receiver to have its packets confirmed: about once per
    // pair and round.
    assert!((4..=24).contains(&before), "{before} pings");
}
