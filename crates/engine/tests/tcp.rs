//! The kernel-TCP stack over loopback, ranks as threads: random traffic of 0 B to 4 MiB
//! arrives exactly once, intact and in per-pair order; notify, statistics, a closed or
//! garbled connection, and waking a blocked wait.

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_engine::{Event, TcpConfig, TcpTransport, Transport, WaitPolicy};
use bulkwire_launch::{Failure, JobState};
use bytes::Bytes;
use common::{plan, run_plan};

const LIMIT: Duration = Duration::from_secs(60);

fn policy() -> WaitPolicy {
    WaitPolicy {
        spin: Duration::from_micros(50),
        yield_cpu: true,
        own_cpus: false,
    }
}

fn mesh(n: u32) -> Vec<TcpTransport> {
    TcpTransport::loopback(n, TcpConfig::default(), policy()).unwrap()
}

#[test]
fn delivers_random_traffic_exactly_once_in_order() {
    const P: u32 = 4;
    let msgs = plan(21, P, 300, 4 << 20, 40 << 20, 0);
    let deadline = Instant::now() + LIMIT;
    let ts = mesh(P);
    for t in &ts {
        assert_eq!(t.protocol_name(), "tcp");
    }
    // Each rank returns its transport, so every connection stays open until all are done.
    let (c, ts) = run_plan(ts, &msgs, deadline, |t| t);
    assert!(c.complete(), "missing {}", c.missing());
    // Byte and message statistics agree with the plan.
    for (r, t) in ts.iter().enumerate() {
        for q in 0..P {
            if q as usize == r {
                continue;
            }
            let s = t.peer_stats(q);
            let sent: Vec<_> = msgs
                .iter()
                .filter(|m| m.src == r as u32 && m.dst == q)
                .collect();
            assert_eq!(s.messages_sent, sent.len() as u64);
            assert_eq!(s.bytes_sent, sent.iter().map(|m| m.len as u64).sum::<u64>());
            if !sent.is_empty() {
                assert!(s.data_sent > 0, "segments counted from TCP_INFO");
            }
        }
    }
}

#[test]
fn notify_is_reported_once_written_and_ids_count_per_peer() {
    let mut v = mesh(3);
    let mut c = v.pop().unwrap();
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let big = Bytes::from(vec![7u8; 8 << 20]);
    assert_eq!(a.send(1, big.clone(), true).unwrap(), 0);
    assert_eq!(a.send(1, Bytes::from_static(b"x"), true).unwrap(), 1);
    assert_eq!(a.send(2, Bytes::from_static(b"y"), false).unwrap(), 0);
    let h = std::thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < 2 {
            if let Event::Message { from, id, data } = b.next_event(Some(LIMIT)).unwrap() {
                got.push((from, id, data.len()));
            }
        }
        got
    });
    let mut sent = Vec::new();
    while sent.len() < 2 {
        match a.next_event(Some(LIMIT)).unwrap() {
            Event::Sent { to, id } => sent.push((to, id)),
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(sent, [(1, 0), (1, 1)]);
    assert_eq!(h.join().unwrap(), [(0, 0, 8 << 20), (0, 1, 1)]);
    match c.next_event(Some(LIMIT)).unwrap() {
        Event::Message {
            from: 0,
            id: 0,
            data,
        } => assert_eq!(data, b"y"),
        e => panic!("unexpected {e:?}"),
    }
    a.flush(Some(LIMIT)).unwrap();
    assert!(!a.busy());
    let s = a.peer_stats(1);
    assert_eq!((s.messages_sent, s.bytes_sent), (2, (8 << 20) + 1));
}

#[test]
fn closed_connection_is_a_dead_peer() {
    let mut v = mesh(3);
    drop(v.pop()); // rank 2 goes away
    let mut a = v.remove(0);
    match a.next_event(Some(LIMIT)).unwrap() {
        Event::PeerDead { peer: 2, .. } => {}
        e => panic!("unexpected {e:?}"),
    }
    assert!(a.is_dead(2));
    let err = a.send(2, Bytes::from_static(b"x"), false).unwrap_err();
    assert!(err.to_string().contains("rank 2"), "{err}");
    // The other peer is unaffected.
    a.send(1, Bytes::from_static(b"still here"), false).unwrap();
    // Rank 1 learns both, in either order (they concern different peers).
    let (mut dead, mut msg) = (false, false);
    while !(dead && msg) {
        match v[0].next_event(Some(LIMIT)).unwrap() {
            Event::PeerDead { peer: 2, .. } => dead = true,
            Event::Message { from: 0, data, .. } => {
                assert_eq!(data, b"still here");
                msg = true;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
}

/// A transport for rank 0 of 2 whose peer is a raw socket the test writes into.
fn raw_pair() -> (TcpTransport, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    let t = TcpTransport::new(0, vec![None, Some(s)], TcpConfig::default(), policy()).unwrap();
    (t, raw)
}

#[test]
fn garbled_stream_is_a_dead_peer_not_a_panic() {
    let frame = |len: u64, id: u32, magic: &[u8; 4]| {
        let mut f = len.to_le_bytes().to_vec();
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(magic);
        f
    };
    let cases: Vec<Vec<u8>> = vec![
        frame(3, 0, b"XXXX"),
        frame(u64::MAX, 0, b"BWTF"),
        frame((1 << 40) + 1, 0, b"BWTF"),
        [frame(2, 0, b"BWTF"), b"ok".to_vec(), vec![0xFF; 16]].concat(),
    ];
    for (k, junk) in cases.into_iter().enumerate() {
        let (mut t, mut raw) = raw_pair();
        raw.write_all(&junk).unwrap();
        let mut evs = Vec::new();
        loop {
            let e = t.next_event(Some(LIMIT)).unwrap();
            let dead = matches!(e, Event::PeerDead { peer: 1, .. });
            evs.push(e);
            if dead {
                break;
            }
        }
        if k == 3 {
            assert!(matches!(&evs[0], Event::Message { data, .. } if data == b"ok"));
        }
    }
    // A frame cut short by the peer closing is a dead peer too.
    let (mut t, mut raw) = raw_pair();
    raw.write_all(&frame(100, 0, b"BWTF")[..16]).unwrap();
    raw.write_all(b"partial").unwrap();
    drop(raw);
    assert!(matches!(
        t.next_event(Some(LIMIT)).unwrap(),
        Event::PeerDead { peer: 1, .. }
    ));
}

#[test]
fn waker_and_job_failure_end_a_block() {
    let (mut t, _raw) = raw_pair();
    let w = t.waker();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        w();
    });
    let t0 = Instant::now();
    t.block(Some(Duration::from_secs(20))).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    h.join().unwrap();

    let job = Arc::new(JobState::new());
    t.set_job(job.clone());
    assert!(t.check().is_ok());
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        job.record(Failure::Other {
            rank: Some(1),
            message: "boom".into(),
        });
    });
    let t0 = Instant::now();
    let r = t.next_event(Some(Duration::from_secs(20)));
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(matches!(r, Err(bulkwire_engine::Error::JobFailed(m)) if m.contains("boom")));
    h.join().unwrap();
}

/// A peer whose process does not answer (never stepped, as if stopped: its kernel keeps
/// the connection and acknowledges) is declared dead once we have waited on it for
/// `dead_after`; a peer that is stepped answers the pings and stays alive, however long
/// it sends nothing of its own.
#[test]
fn a_silent_peer_we_wait_on_is_dead_after_the_deadline_and_a_live_one_is_not() {
    let cfg = TcpConfig {
        dead_after: Duration::from_millis(300),
        ..TcpConfig::default()
    };
    let mut v = TcpTransport::loopback(3, cfg, policy()).unwrap();
    let (mut live, silent) = (v.pop().unwrap(), v.pop().unwrap());
    let mut a = v.pop().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answering = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                live.step().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            live
        })
    };
    // Waiting on the live peer for three deadlines: no death.
    a.expect(2, true);
    let t0 = Instant::now();
    let r = a.next_event(Some(Duration::from_millis(900)));
    assert!(
        matches!(r, Err(bulkwire_engine::Error::Timeout(_))),
        "{r:?}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(900));
    assert!(!a.is_dead(2));
    a.expect(2, false);
    // Waiting on the silent one: dead after about the deadline, naming it.
    a.expect(1, true);
    let t0 = Instant::now();
    match a.next_event(Some(LIMIT)).unwrap() {
        Event::PeerDead {
            peer: 1,
            silent_for,
        } => {
            assert!(silent_for >= 300_000_000, "{silent_for}");
        }
        e => panic!("unexpected {e:?}"),
    }
    let took = t0.elapsed();
    assert!(
        (Duration::from_millis(290)..Duration::from_secs(3)).contains(&took),
        "{took:?}"
    );
    assert!(a.is_dead(1) && !a.is_dead(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(answering.join().unwrap());
    drop(silent);
}
