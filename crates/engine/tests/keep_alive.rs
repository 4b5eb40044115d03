//! With the progress thread off, a process that computes for longer than the dead-peer
//! deadline is still answered for: the keep-alive thread steps its transport (and only
//! its transport) often enough that the peer waiting on it never declares it dead. Without
//! it, the same run ends in a false death: the control case shows the test can fail.
//! Two ranks as threads over the in-process link, bounded in time.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_engine::progress::{Service, Shared};
use bulkwire_engine::{Endpoint, EndpointConfig, Engine, Event, Transport, WaitPolicy};
use bulkwire_link::{Link, inproc};
use bulkwire_protocol::{Common, MS, wire::HEADER_LEN};
use bytes::Bytes;

const DEAD_AFTER: u64 = 1000 * MS;
const COMPUTE: Duration = Duration::from_millis(3000);

/// An upper layer as small as it gets: its state is the messages the user has taken.
struct Rank {
    t: Engine,
    inbox: VecDeque<Event>,
    /// Whether to ask for a keep-alive thread (off: the control case).
    keep_alive: bool,
}

impl Service for Rank {
    fn progress(&mut self) -> bool {
        let moved = self.t.step().map(|p| p.any()).unwrap_or(false);
        let before = self.inbox.len();
        self.inbox
            .extend(std::iter::from_fn(|| self.t.poll_event()));
        moved || self.inbox.len() > before
    }
    fn block(&mut self, timeout: Duration) {
        let _ = self.t.block(Some(timeout));
    }
    fn busy(&self) -> bool {
        self.t.busy()
    }
    fn keep_alive(&mut self) {
        // The transport only: the inbox (the user's state) is not touched.
        let _ = self.t.step();
    }
    fn keep_alive_interval(&self) -> Option<Duration> {
        self.keep_alive
            .then(|| self.t.liveness_interval())
            .flatten()
    }
}

fn ranks(protocol: &str, keep_alive: bool) -> Vec<Shared<Rank>> {
    inproc::network(2, 9000, 1 << 12)
        .into_iter()
        .map(|l| {
            let c = Common::new(l.rank(), 2, 9000 - HEADER_LEN);
            let p = bulkwire_protocol::by_name(protocol, c, &Default::default()).unwrap();
            let ep = Endpoint::new(Box::new(l), p, EndpointConfig::with_deadline(3, DEAD_AFTER));
            let mut t = Engine::new(ep, WaitPolicy::default());
            let now = t.now();
            if let Some(a) = t.endpoint().protocol().announcing() {
                a.set_auto_accept(now, true);
            }
            let waker = t.waker();
            let state = Rank {
                t,
                inbox: VecDeque::new(),
                keep_alive,
            };
            // No progress thread.
            Shared::new(state, waker, None)
        })
        .collect()
}

/// Rank 0 sends a request and waits for the answer; rank 1 takes the request, computes
/// for COMPUTE without calling in, then answers. What rank 0 saw first, and how many
/// keep-alive steps rank 1 made.
fn exchange(protocol: &str, keep_alive: bool) -> (Event, u64) {
    let mut r = ranks(protocol, keep_alive);
    let r1 = Arc::new(r.pop().unwrap());
    let r0 = r.pop().unwrap();
    let worker = {
        let r1 = r1.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let req = loop {
                let mut g = r1.lock();
                g.progress();
                if let Some(e) = g.inbox.pop_front() {
                    break e;
                }
                drop(g);
                assert!(t0.elapsed() < Duration::from_secs(30), "no request");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(matches!(req, Event::Message { from: 0, .. }), "{req:?}");
            // Computing: the library is not called.
            std::thread::sleep(COMPUTE);
            let mut g = r1.lock();
            let _ = g.t.send(0, Bytes::from_static(b"answer"), false);
            g.progress();
        })
    };
    let first = {
        let mut g = r0.lock();
        g.t.send(1, Bytes::from_static(b"request"), false).unwrap();
        g.t.expect(1, true);
        drop(g);
        let t0 = Instant::now();
        loop {
            let mut g = r0.lock();
            g.progress();
            if let Some(e) = g.inbox.pop_front() {
                break e;
            }
            g.block(Duration::from_millis(5));
            drop(g);
            assert!(t0.elapsed() < COMPUTE * 4, "rank 0 saw nothing");
        }
    };
    worker.join().unwrap();
    // Rank 1's reply must reach rank 0 before rank 0 goes away when it did not die.
    if matches!(first, Event::Message { .. }) {
        let mut g = r1.lock();
        let _ = g.t.flush(Some(Duration::from_secs(5)));
    }
    let steps = r1.keep_alives();
    (first, steps)
}

#[test]
fn a_computing_peer_is_answered_for_without_a_progress_thread() {
    // The protocols side by side: each run is mostly waiting.
    let runs: Vec<_> = ["holefill", "gbn", "rmpp", "utopia"]
        .into_iter()
        .map(|p| (p, std::thread::spawn(move || exchange(p, true))))
        .collect();
    for (protocol, run) in runs {
        let (first, steps) = run.join().unwrap();
        assert!(
            matches!(&first, Event::Message { from: 1, data, .. } if data == b"answer"),
            "{protocol}: rank 0 saw {first:?}"
        );
        // Every 50 ms (half the 100 ms ping interval) while the user computed.
        assert!(steps >= 10, "{protocol}: {steps} keep-alive steps");
    }
}

#[test]
fn without_keep_alive_the_same_computation_is_a_false_death() {
    let (first, steps) = exchange("holefill", false);
    assert!(
        matches!(first, Event::PeerDead { peer: 1, .. }),
        "rank 0 saw {first:?}"
    );
    assert_eq!(steps, 0);
}
