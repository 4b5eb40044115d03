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
