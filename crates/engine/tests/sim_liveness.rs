//! Dead-peer detection on the simulated network: a peer we wait on that dies is reported
//! within the deadline; a peer that is alive but has nothing to say is never reported.

use bulkwire_engine::sim::SimCluster;
use bulkwire_engine::{EndpointConfig, Event};
use bulkwire_link::sim::SimConfig;
use bulkwire_protocol::SEC;
use bytes::Bytes;

#[test]
fn dead_peer_reported_within_deadline_live_one_never() {
    let deadline = 2 * SEC;
    for protocol in bulkwire_protocol::PROTOCOLS {
        let mut sim = SimCluster::with_protocol(
            SimConfig::new(3),
            EndpointConfig::with_deadline(9, deadline),
            protocol,
        );
        // Rank 0 waits on 1 (which dies) and on 2 (alive, silent).
        sim.expect(0, 1, true);
        sim.expect(0, 2, true);
        sim.kill(1);
        let start = sim.now();
        let t = sim
            .run_until(60 * SEC, |c| {
                c.events(0)
                    .iter()
                    .any(|e| matches!(e, Event::PeerDead { peer: 1, .. }))
            })
            .unwrap_or_else(|e| panic!("{protocol}: {e}"));
        let took = t - start;
        assert!(
            took >= deadline && took <= deadline + deadline / 5,
            "{protocol}: death reported after {took} ns, deadline {deadline}"
        );
        // Keep going well past the deadline: rank 2 answers pings, so it stays alive.
        sim.run_until(t + 5 * deadline, |_| false).unwrap_err();
        let evs = sim.take_events(0);
        assert_eq!(
            evs.iter()
                .filter(|e| matches!(e, Event::PeerDead { .. }))
                .count(),
            1,
            "{protocol}: {evs:?}"
        );
        assert!(sim.endpoint(0).is_dead(1) && !sim.endpoint(0).is_dead(2));
        // Sending to the dead peer is an error naming it.
        let err = sim.send(0, 1, Bytes::from_static(b"x")).unwrap_err();
        assert!(err.to_string().contains("rank 1"), "{err}");
        assert!(sim.endpoint(0).pings_sent() > 0);
    }
}

/// A paused node (a stopped process) is silent but not dead: paused for less than the
/// deadline it is waited for, and what was sent to it meanwhile arrives once it resumes;
/// paused past the deadline it is declared dead by those waiting on it.
#[test]
fn a_paused_peer_is_waited_for_until_the_deadline() {
    let deadline = 2 * SEC;
    for protocol in bulkwire_protocol::PROTOCOLS {
        for (pause, dies) in [(deadline / 2, false), (2 * deadline, true)] {
            let mut sim = SimCluster::with_protocol(
                SimConfig::new(2),
                EndpointConfig::with_deadline(9, deadline),
                protocol,
            );
            sim.expect(0, 1, true);
            sim.pause(1, pause);
            assert!(sim.is_paused(1));
            sim.send(0, 1, Bytes::from(vec![5u8; 20_000])).unwrap();
            let t = sim
                .run_until(10 * deadline, |c| {
                    c.events(0)
                        .iter()
                        .any(|e| matches!(e, Event::PeerDead { .. }))
                        || !c.events(1).is_empty()
                })
                .unwrap_or_else(|e| panic!("{protocol}: {e}"));
            let dead: Vec<_> = sim.take_events(0);
            if dies {
                assert!(
                    matches!(dead[..], [Event::PeerDead { peer: 1, .. }]),
                    "{protocol}: {dead:?}"
                );
                assert!((deadline..=deadline + deadline / 5).contains(&t), "{t}");
            } else {
                assert!(dead.is_empty(), "{protocol}: {dead:?}");
                assert!(t >= pause && !sim.is_paused(1), "{protocol}: at {t}");
                let got = sim.take_events(1);
                assert!(
                    matches!(&got[..], [Event::Message { from: 0, data, .. }] if data.len() == 20_000),
                    "{protocol}: {got:?}"
                );
            }
        }
    }
}
