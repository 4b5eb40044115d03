//! The delivery test over real UDP sockets on loopback, made lossy by the fault wrapper:
//! four ranks as threads, random traffic of 0 B to 4 MiB, every message exactly once,
//! intact and in per-pair order, within a time bound.

mod common;

use std::time::{Duration, Instant};

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{FaultConfig, Faulty, Link, UdpConfig, UdpLink};
use bulkwire_protocol::{Common, SEC, wire::HEADER_LEN};
use common::{plan, run_plan};

const P: u32 = 4;
const LIMIT: Duration = Duration::from_secs(120);

fn engines(protocol: &str, faults: &str) -> Vec<Engine> {
    let cfg = UdpConfig::default();
    let bound: Vec<_> = (0..P)
        .map(|_| UdpLink::bind("127.0.0.1:0".parse().unwrap(), &cfg).unwrap())
        .collect();
    let addrs: Vec<_> = bound.iter().map(|b| b.local_addr()).collect();
    bound
        .into_iter()
        .enumerate()
        .map(|(r, b)| {
            let udp = b.into_link(r as u32, addrs.clone()).unwrap();
            let mut fc = FaultConfig::parse(faults).unwrap();
            fc.seed += r as u64;
            let link = Faulty::new(udp, fc);
            let common = Common::new(
                r as u32,
                P,
                link.capabilities().max_to((r as u32 + 1) % P) - HEADER_LEN,
            );
            let proto = bulkwire_protocol::by_name(protocol, common, &Default::default()).unwrap();
            let ep = Endpoint::new(
                Box::new(link),
                proto,
                EndpointConfig::with_deadline(0xFEED, 60 * SEC),
            );
            Engine::new(
                ep,
                WaitPolicy {
                    spin: Duration::from_micros(50),
                    yield_cpu: true,
                    own_cpus: false,
                },
            )
        })
        .collect()
}

fn run(protocol: &str, faults: &str, seed: u64) {
    let msgs = plan(seed, P, 240, 4 << 20, 40 << 20, 0);
    let deadline = Instant::now() + LIMIT;
    let (c, drops) = run_plan(engines(protocol, faults), &msgs, deadline, |mut e| {
        e.endpoint().drops().total()
    });
    let corrupt_drops: u64 = drops.into_iter().sum();
    assert!(c.complete(), "{protocol}: missing {}", c.missing());
    if faults.contains("corrupt") {
        assert!(
            corrupt_drops > 0,
            "{protocol}: corrupted datagrams were caught and counted"
        );
    }
}

#[test]
fn reliable_protocols_over_lossy_udp() {
    for protocol in bulkwire_protocol::PROTOCOLS
        .iter()
        .filter(|p| **p != "utopia")
    {
        run(
            protocol,
            "loss=0.05,corrupt=0.01,dup=0.01,reorder=0.01,seed=3",
            3,
        );
    }
}

#[test]
fn utopia_over_clean_udp() {
    run("utopia", "", 4);
}
