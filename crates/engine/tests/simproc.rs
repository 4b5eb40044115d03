//! Blocking programs on simulated ranks: each rank a thread, one at a time, in virtual
//! time; the same seed gives the same run.

use std::time::Duration;

use bulkwire_engine::simproc::{self, SimSetup};
use bulkwire_engine::{Event, Transport};
use bulkwire_link::sim::SimConfig;
use bytes::Bytes;

/// Every rank sends `rounds` messages around a ring and checks what it receives.
fn ring(p: u32, size: usize, seed: u64) -> simproc::SimOutcome<u64> {
    let mut net = SimConfig::new(p);
    net.seed = seed;
    net.loss = 0.01;
    let setup = SimSetup::new(net, "holefill");
    simproc::run(&setup, |mut t| {
        let me = t.rank();
        let right = (me + 1) % p;
        let left = (me + p - 1) % p;
        let mut sum = 0u64;
        for round in 0..3u8 {
            let msg = vec![round ^ me as u8; size];
            t.send(right, Bytes::from(msg), false).unwrap();
            let ev = t.recv_wait(left);
            match ev {
                Event::Message { from, data, .. } => {
                    assert_eq!(from, left);
                    assert_eq!(data.len(), size);
                    assert!(data.iter().all(|&b| b == round ^ left as u8));
                    sum += data.len() as u64;
                }
                e => panic!("unexpected {e:?}"),
            }
        }
        t.flush(Some(Duration::from_secs(60))).unwrap();
        sum
    })
    .unwrap()
}

trait RecvWait {
    fn recv_wait(&mut self, from: u32) -> Event;
}

impl<T: Transport> RecvWait for T {
    fn recv_wait(&mut self, from: u32) -> Event {
        self.expect(from, true);
        let e = self.next_event(Some(Duration::from_secs(60))).unwrap();
        self.expect(from, false);
        e
    }
}

#[test]
fn a_ring_of_blocking_programs_is_deterministic() {
    let a = ring(64, 20_000, 3);
    let b = ring(64, 20_000, 3);
    assert!(a.results.iter().all(|&s| s == 60_000));
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.finish, b.finish);
    assert_eq!(a.net, b.net);
    assert!(a.net.lost > 0, "the loss rate must have hit some packets");
    assert!(a.peers.retransmits > 0);
    let c = ring(64, 20_000, 4);
    assert_ne!(a.trace, c.trace);
}

/// Ranks that wait for what never comes make the run fail, naming the stall, instead of
/// hanging; so does a rank whose program panics.
#[test]
fn stalls_and_panics_end_the_run_with_an_error() {
    let setup = SimSetup::new(SimConfig::new(8), "holefill");
    let stalled = simproc::run(&setup, |mut t| {
        if t.rank() != 3 {
            let r = t.wait_for(None, |_| None::<()>);
            assert!(r.is_err(), "the wait ends with the run's failure");
        }
    });
    let e = stalled.unwrap_err().to_string();
    assert!(
        e.contains("nothing left to happen") && e.contains("0, 1, 2, 4"),
        "{e}"
    );
    let panicked = simproc::run(&setup, |mut t| {
        if t.rank() == 5 {
            panic!("rank 5 gives up");
        }
        let _ = t.wait_for(None, |_| None::<()>);
    });
    assert!(
        panicked
            .unwrap_err()
            .to_string()
            .contains("rank 5's program panicked"),
        "a panic is reported as such"
    );
}
