//! gbn over the in-process link, driven on the real clock by three threads. The link's
//! queues are kept shallow, so it drops datagrams on overflow and gbn must recover them.

use std::time::Duration;

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, Event, Transport, WaitPolicy};
use bulkwire_link::inproc;
use bulkwire_protocol::{Common, wire::HEADER_LEN};
use bytes::Bytes;

fn body(n: usize, from: u32, i: usize) -> Vec<u8> {
    (0..n)
        .map(|j| (j * 7 + i + 31 * from as usize) as u8)
        .collect()
}

#[test]
fn gbn_delivers_in_order_from_two_senders_over_a_lossy_queue() {
    let mtu = 9000;
    let nprocs = 3;
    let links = inproc::network(nprocs, mtu, 6);
    let sizes = [0usize, 1, 8, 8935, 8936, 8937, 100_000, 1 << 20];
    let mut engines: Vec<Engine> = links
        .into_iter()
        .map(|l| {
            let c = Common::new(bulkwire_link::Link::rank(&l), nprocs, mtu - HEADER_LEN);
            let p = bulkwire_protocol::by_name("gbn", c, &Default::default()).unwrap();
            Engine::new(
                Endpoint::new(Box::new(l), p, EndpointConfig::new(7)),
                WaitPolicy::default(),
            )
        })
        .collect();
    let senders: Vec<_> = engines
        .drain(1..)
        .map(|mut e| {
            std::thread::spawn(move || {
                let me = e.rank();
                for (i, &n) in sizes.iter().enumerate() {
                    e.send(0, Bytes::from(body(n, me, i)), false).unwrap();
                }
                e.flush(Some(Duration::from_secs(30))).unwrap();
                e.endpoint().peer_stats(0)
            })
        })
        .collect();
    let mut r = engines.pop().unwrap();
    let mut next = [0usize; 3];
    while next[1] < sizes.len() || next[2] < sizes.len() {
        match r.next_event(Some(Duration::from_secs(30))).unwrap() {
            Event::Message { from, id, data } => {
                let i = next[from as usize];
                assert_eq!((id as usize, data.len()), (i, sizes[i]));
                assert!(data == body(sizes[i], from, i), "message {i} from {from}");
                next[from as usize] += 1;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    // Keep answering until the senders have everything acknowledged: a last ACK may be
    // dropped by the shallow queue, and only a receiver that still runs can resend it.
    while senders.iter().any(|s| !s.is_finished()) {
        r.step().unwrap();
        std::thread::yield_now();
    }
    for s in senders {
        let st = s.join().unwrap();
        let mp = mtu - HEADER_LEN;
        let packets: usize = sizes.iter().map(|&n| n.div_ceil(mp).max(1)).sum();
        assert_eq!(st.messages_sent, sizes.len() as u64);
        // Every packet released exactly once, however often it was sent.
        assert_eq!(st.acked, packets as u64, "{st:?}");
        assert_eq!(st.data_sent, packets as u64 + st.retransmits);
        eprintln!("{st:?}");
    }
    // Let the last ACKs leave before the receiver goes away.
    r.flush(Some(Duration::from_secs(5))).unwrap();
}
