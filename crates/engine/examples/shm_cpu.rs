//! The CPU that the engine and a protocol spend per small message over shared memory:
//! both ends of a ping-pong driven by one thread, so there is no traffic between cores
//! and no waiting, only the work of sending and receiving.
//!
//!     cargo run --release -p bulkwire-engine --example shm_cpu [protocol] [round trips]
//!
//! A two-process round trip costs this plus two cache-line transfers between cores.
use std::time::Instant;

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, Event, Transport, WaitPolicy};
use bulkwire_link::{Link, ShmConfig, ShmLink};
use bulkwire_protocol::wire::HEADER_LEN;
use bulkwire_protocol::{Common, by_name};
use bytes::Bytes;

fn main() {
    let mut args = std::env::args().skip(1);
    let proto = args.next().unwrap_or_else(|| "utopia".into());
    let iters: usize = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("round trips"));
    let cfg = ShmConfig::for_procs(2);
    let links = ShmLink::in_threads(2, &cfg).expect("shared-memory links");
    let mut ends: Vec<Engine> = links
        .into_iter()
        .map(|l| {
            let payload = l.capabilities().max_to(1 - l.rank()) - HEADER_LEN;
            let p = by_name(
                &proto,
                Common::new(l.rank(), 2, payload),
                &Default::default(),
            )
            .expect("protocol");
            let ep = Endpoint::new(Box::new(l), p, EndpointConfig::new(7));
            Engine::new(ep, WaitPolicy::for_host(2))
        })
        .collect();
    let msg = Bytes::from(vec![1u8; 8]);
    let round_trip = |ends: &mut [Engine]| {
        for (a, b) in [(0, 1), (1, 0)] {
            ends[a].send(b as u32, msg.clone(), false).unwrap();
            let got = ends[b]
                .wait_for(None, |t| match t.poll_event() {
                    Some(Event::Message { data, .. }) => Some(data),
                    _ => None,
                })
                .unwrap();
            assert_eq!(got.len(), 8);
        }
    };
    for _ in 0..iters / 10 {
        round_trip(&mut ends);
    }
    let t = Instant::now();
    for _ in 0..iters {
        round_trip(&mut ends);
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / iters as f64;
    println!("{proto}: {ns:.0} ns of CPU per round trip of 8 bytes (both ends, one thread)");
}
