//! The delivery test of `udp_faults.rs` over shared memory and over the composite link
//! (two fake hosts of two ranks: shared memory inside a host, UDP across): four ranks as
//! threads, random traffic of 0 B to 4 MiB, every message exactly once, intact and in
//! per-pair order, within a time bound, with faults injected on receive.

mod common;

use std::time::{Duration, Instant};

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::route::{Route, RouteLink};
use bulkwire_link::{
    FaultConfig, Faulty, Link, ShmConfig, ShmLink, UdpConfig, UdpLink, thread_rendezvous,
};
use bulkwire_protocol::{Common, SEC, wire::HEADER_LEN};
use common::{plan, run_plan};

const P: u32 = 4;
const LIMIT: Duration = Duration::from_secs(120);

/// Every rank's link: shared memory among ranks of the same `hosts` entry, UDP across.
fn links(hosts: [u8; P as usize]) -> Vec<Box<dyn Link>> {
    let udp_cfg = UdpConfig::default();
    let bound: Vec<_> = (0..P)
        .map(|_| UdpLink::bind("127.0.0.1:0".parse().unwrap(), &udp_cfg).unwrap())
        .collect();
    let addrs: Vec<_> = bound.iter().map(|b| b.local_addr()).collect();
    let hs: Vec<_> = bound
        .into_iter()
        .zip(thread_rendezvous(P as usize))
        .enumerate()
        .map(|(r, (b, mut rv))| {
            let addrs = addrs.clone();
            std::thread::spawn(move || -> Box<dyn Link> {
                let local: Vec<bool> = hosts.iter().map(|&h| h == hosts[r]).collect();
                let n = local.iter().filter(|&&l| l).count();
                let shm =
                    ShmLink::create(r as u32, &local, &ShmConfig::for_procs(n), &mut rv).unwrap();
                if n == P as usize {
                    return Box::new(shm);
                }
                let udp = b.into_link(r as u32, addrs).unwrap();
                let routes = local
                    .iter()
                    .map(|&l| if l { Route::Near } else { Route::Far })
                    .collect();
                Box::new(RouteLink::new(shm, udp, routes).unwrap())
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn engines(protocol: &str, faults: &str, hosts: [u8; P as usize]) -> Vec<Engine> {
    links(hosts)
        .into_iter()
        .enumerate()
        .map(|(r, link)| {
            let mut fc = FaultConfig::parse(faults).unwrap();
            fc.seed += r as u64;
            let link: Box<dyn Link> = if fc.is_active() {
                Box::new(Faulty::new(link, fc))
            } else {
                link
            };
            let mut common = Common::new(r as u32, P, 1);
            common.max_payload = (0..P)
                .map(|p| {
                    link.capabilities()
                        .max_to(p)
                        .saturating_sub(HEADER_LEN)
                        .max(1)
                })
                .collect();
            let proto = bulkwire_protocol::by_name(protocol, common, &Default::default()).unwrap();
            let ep = Endpoint::new(link, proto, EndpointConfig::with_deadline(0xFEED, 60 * SEC));
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

fn run(protocol: &str, faults: &str, hosts: [u8; P as usize], seed: u64) {
    let msgs = plan(seed, P, 240, 4 << 20, 40 << 20, 0);
    let deadline = Instant::now() + LIMIT;
    let (c, drops) = run_plan(
        engines(protocol, faults, hosts),
        &msgs,
        deadline,
        |mut e| e.endpoint().drops().total(),
    );
    let corrupt_drops: u64 = drops.into_iter().sum();
    assert!(c.complete(), "{protocol}: missing {}", c.missing());
    if faults.contains("corrupt") {
        assert!(
            corrupt_drops > 0,
            "{protocol}: corrupted datagrams were counted"
        );
    }
}

const FAULTS: &str = "loss=0.05,corrupt=0.01,dup=0.01,reorder=0.01,seed=3";
const ONE_HOST: [u8; 4] = [0, 0, 0, 0];
const TWO_HOSTS: [u8; 4] = [0, 1, 0, 1];

#[test]
fn utopia_over_clean_shm() {
    run("utopia", "", ONE_HOST, 4);
}

#[test]
fn reliable_protocols_over_lossy_shm() {
    for p in ["gbn", "holefill"] {
        run(p, FAULTS, ONE_HOST, 5);
    }
}

#[test]
fn reliable_protocols_over_lossy_composite() {
    for p in ["gbn", "holefill"] {
        run(p, FAULTS, TWO_HOSTS, 6);
    }
}

#[test]
fn holefill_over_clean_composite() {
    run("holefill", "", TWO_HOSTS, 7);
}

/// A thread that sleeps on the transport without holding it (the progress thread's way,
/// `Transport::wait_handle`) is woken by a message over shared memory: the wait handle
/// announces the sleep, so the sender rings the doorbell. Without the announcement the
/// descriptor would stay quiet and the sleep would run to its 10 s limit.
#[test]
fn a_sleep_without_the_state_is_woken_by_shared_memory() {
    use bulkwire_engine::Transport;
    let mut es = engines("utopia", "", [0; P as usize]).into_iter();
    let (mut e0, mut e1) = (es.next().unwrap(), es.next().unwrap());
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let sleeper = std::thread::spawn(move || {
        let h = e0.wait_handle().expect("shared memory has a descriptor");
        ready_tx.send(()).unwrap();
        let t0 = Instant::now();
        let mut fds = [libc::pollfd {
            fd: h.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        bulkwire_link::poll_fds(&mut fds, Some(Duration::from_secs(10))).unwrap();
        let slept = t0.elapsed();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            e0.step().unwrap();
            if let Some(bulkwire_engine::Event::Message { from, data, .. }) = e0.poll_event() {
                break (from, data);
            }
            assert!(Instant::now() < deadline, "the message never arrived");
        };
        (slept, got)
    });
    ready.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    e1.send(0, bytes::Bytes::from_static(b"wake up"), false)
        .unwrap();
    let (slept, (from, data)) = sleeper.join().unwrap();
    assert!(
        slept < Duration::from_secs(5),
        "slept {slept:?}: no doorbell"
    );
    assert!(
        slept >= Duration::from_millis(20),
        "did not sleep: {slept:?}"
    );
    assert_eq!((from, data.as_slice()), (1, &b"wake up"[..]));
}

/// Small messages sent faster than a small ring takes them: each goes straight to the
/// link while the ring has room (the engine's direct send); the one the full ring refuses
/// waits in the engine and those after it queue behind it. All arrive once, in order.
#[test]
fn a_full_ring_keeps_small_messages_in_order() {
    use bulkwire_engine::{Event, Transport};
    const N: u32 = 200;
    let cfg = ShmConfig {
        ring_bytes: 4096,
        max_datagram: 1024,
    };
    let mut es: Vec<Engine> = ShmLink::in_threads(2, &cfg)
        .unwrap()
        .into_iter()
        .map(|link| {
            let r = link.rank();
            let common = Common::new(r, 2, 1024 - HEADER_LEN);
            let proto = bulkwire_protocol::by_name("utopia", common, &Default::default()).unwrap();
            let ep = Endpoint::new(Box::new(link), proto, EndpointConfig::new(0xFEED));
            Engine::new(ep, WaitPolicy::default())
        })
        .collect();
    let (mut b, mut a) = (es.pop().unwrap(), es.remove(0));
    for i in 0..N {
        let id = a.send(1, bytes::Bytes::from(i.to_le_bytes().to_vec()), false);
        assert_eq!(id.unwrap(), i);
    }
    // A record takes 128 bytes of the ring: about 30 fit, the rest must wait.
    assert!(a.has_unsent(), "the ring never refused a packet");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < N as usize {
        assert!(Instant::now() < deadline, "{} of {N} arrived", got.len());
        a.step().unwrap();
        b.step().unwrap();
        while let Some(e) = b.poll_event() {
            match e {
                Event::Message { from, id, data } => got.push((from, id, data)),
                e => panic!("unexpected {e:?}"),
            }
        }
    }
    for (i, (from, id, data)) in got.into_iter().enumerate() {
        assert_eq!((from, id), (0, i as u32));
        assert_eq!(data, (i as u32).to_le_bytes());
    }
    assert!(!a.has_unsent());
    assert!(b.poll_event().is_none());
}
