//! Utopia over the in-process link, driven on the real clock by two threads.

use std::time::Duration;

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, Event, Transport, WaitPolicy};
use bulkwire_link::inproc;
use bulkwire_protocol::{Common, wire::HEADER_LEN};
use bytes::Bytes;

#[test]
fn utopia_moves_messages_of_every_size_in_order() {
    let mtu = 9000;
    let links = inproc::network(2, mtu, 1 << 16);
    let mut engines: Vec<Engine> = links
        .into_iter()
        .map(|l| {
            let c = Common::new(bulkwire_link::Link::rank(&l), 2, mtu - HEADER_LEN);
            let p = bulkwire_protocol::by_name("utopia", c, &Default::default()).unwrap();
            Engine::new(
                Endpoint::new(Box::new(l), p, EndpointConfig::new(7)),
                WaitPolicy::default(),
            )
        })
        .collect();
    let mut b = engines.pop().unwrap();
    let mut a = engines.pop().unwrap();
    let sizes = [0usize, 1, 8, 8935, 8936, 8937, 100_000, 1 << 20];
    let sender = std::thread::spawn(move || {
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
            a.send(1, Bytes::from(data), false).unwrap();
        }
        a.flush(Some(Duration::from_secs(10))).unwrap();
    });
    for (i, &n) in sizes.iter().enumerate() {
        match b.recv_from(0, Some(Duration::from_secs(10))).unwrap() {
            Event::Message { from, id, data } => {
                assert_eq!((from, id as usize, data.len()), (0, i, n));
                assert!(
                    data.iter()
                        .enumerate()
                        .all(|(j, &x)| x == (j * 7 + i) as u8)
                );
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    sender.join().unwrap();
}
