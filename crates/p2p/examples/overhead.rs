//! p2p's own cost per message, apart from any network: two ranks in one thread over the
//! in-memory loopback transport, no progress thread. Prints nanoseconds per message for
//! the transport alone and for p2p's paths on top of it.
//!
//! `cargo run --release -p bulkwire-p2p --example overhead [ITERS]`

use std::time::Instant;

use bulkwire_engine::{Event, Transport};
use bulkwire_p2p::loopback::{self, Delivery};
use bulkwire_p2p::{Comm, Config, SingleCopy};
use bytes::Bytes;

fn main() {
    let iters: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let size = 8;
    let report = |what: &str, t: Instant| {
        let ns = t.elapsed().as_nanos() as f64 / iters as f64;
        println!("{what:<52} {ns:8.1} ns/message");
    };

    // The transport alone: send 8 bytes, step, take the event.
    let mut ts = loopback::network(2, Delivery::Whole);
    let (mut b, mut a) = (ts.pop().unwrap(), ts.pop().unwrap());
    let payload = Bytes::from(vec![7u8; size]);
    let t = Instant::now();
    for _ in 0..iters {
        a.send(1, payload.clone(), false).unwrap();
        b.step().unwrap();
        match b.poll_event() {
            Some(Event::Message { data, .. }) => assert_eq!(data.len(), size),
            e => panic!("{e:?}"),
        }
    }
    report("loopback transport: send + step + event", t);

    let cfg = Config {
        eager: 32 << 10,
        eager_local: 32 << 10,
        single_copy: SingleCopy::Off,
        split: usize::MAX,
        progress: None,
        job: Default::default(),
    };
    let mut comms: Vec<Comm> = loopback::network(2, Delivery::Whole)
        .into_iter()
        .map(|t| Comm::from_transport(Box::new(t), &cfg))
        .collect();
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let data = [7u8; 8];
    let mut buf = [0u8; 8];

    // Unexpected path: the message arrives before the receive is posted.
    let t = Instant::now();
    for _ in 0..iters {
        c0.send(1, 5, &data).unwrap();
        c1.recv(0, 5, &mut buf).unwrap();
    }
    report("p2p send + recv (message first: unexpected queue)", t);

    // Posted path: receive posted first, then the send, then the wait.
    let t = Instant::now();
    for _ in 0..iters {
        // SAFETY: `buf` outlives the receive, which is waited for below.
        let id = unsafe { c1.irecv_raw(0.into(), 5.into(), buf.as_mut_ptr(), buf.len()) }.unwrap();
        c0.send(1, 5, &data).unwrap();
        c1.wait_raw(id).unwrap();
    }
    report("p2p irecv + send + wait (receive first: posted)", t);

    // Wildcard receive, many posted receives for other tags in the way.
    let mut others: Vec<_> = (100..164)
        .map(|tag| c1.irecv_vec(0, tag, 8).unwrap())
        .collect();
    let t = Instant::now();
    for _ in 0..iters {
        c0.send(1, 5, &data).unwrap();
        c1.recv(bulkwire_p2p::ANY_SOURCE, bulkwire_p2p::ANY_TAG, &mut buf)
            .unwrap();
    }
    report("p2p send + recv(ANY, ANY), 64 other receives posted", t);
    for (i, r) in others.iter_mut().enumerate() {
        c0.send(1, 100 + i as i32, &data).unwrap();
        r.wait().unwrap();
    }
    drop(others);

    // The Shared fast path: an empty call (lock, nothing).
    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(c0.queues());
    }
    report("an empty call into the library (enter, lock, unlock)", t);
}
