//! p2p semantics with ranks as threads over the in-process link and a real protocol:
//! wildcards, non-overtaking order across eager and rendezvous messages, truncation,
//! zero-size and self messages, thousands of outstanding requests, waitany/testany,
//! probes, scopes. Each test is bounded by a watchdog.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bulkwire_engine::{Endpoint, EndpointConfig, Engine, WaitPolicy};
use bulkwire_link::{Link, inproc};
use bulkwire_p2p::{ANY_SOURCE, ANY_TAG, Comm, Config, Error, SingleCopy, Source, Tag};
use bulkwire_protocol::{Common, wire::HEADER_LEN};

const LIMIT: Duration = Duration::from_secs(20);

fn config(eager: usize) -> Config {
    Config {
        eager,
        eager_local: eager,
        single_copy: SingleCopy::Off,
        split: usize::MAX,
        progress: Some(Duration::from_millis(1)),
        job: Default::default(),
    }
}

/// `n` ranks over an in-process network with `protocol`.
fn world(n: u32, protocol: &str, cfg: &Config) -> Vec<Comm> {
    let mtu = 9000;
    inproc::network(n, mtu, 1 << 12)
        .into_iter()
        .map(|l| {
            let c = Common::new(l.rank(), n, mtu - HEADER_LEN);
            let p = bulkwire_protocol::by_name(protocol, c, &Default::default()).unwrap();
            let e = Engine::new(
                Endpoint::new(Box::new(l), p, EndpointConfig::new(7)),
                WaitPolicy {
                    spin: Duration::from_micros(50),
                    yield_cpu: true,
                    own_cpus: false,
                },
            );
            Comm::from_transport(Box::new(e), cfg)
        })
        .collect()
}

/// Runs `f(comm)` on a thread per rank; every rank flushes, then all meet before their
/// communicators go away (so nobody leaves while a peer still needs acknowledgements).
fn run<F>(n: u32, protocol: &str, cfg: Config, f: F)
where
    F: Fn(&Comm) + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let meet = Arc::new(Barrier::new(n as usize));
    let start = Instant::now();
    let comms: Vec<Arc<Comm>> = world(n, protocol, &cfg).into_iter().map(Arc::new).collect();
    let phase: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
    let hs: Vec<_> = comms
        .iter()
        .map(|c| {
            let (f, meet, c, ph) = (f.clone(), meet.clone(), c.clone(), phase.clone());
            std::thread::spawn(move || {
                let me = c.rank() as usize;
                f(&c);
                ph[me].store(1, SeqCst);
                c.flush().unwrap();
                ph[me].store(2, SeqCst);
                meet.wait();
                ph[me].store(3, SeqCst);
            })
        })
        .collect();
    // The watchdog: a hang fails the test (with the state of every rank) instead of
    // stalling the run.
    for h in hs {
        while !h.is_finished() {
            if start.elapsed() > LIMIT {
                for c in &comms {
                    let ph = ["working", "flushing", "meeting", "done"]
                        [phase[c.rank() as usize].load(SeqCst) as usize];
                    eprintln!("rank {} {ph}: {:?} {:?}", c.rank(), c.queues(), c.stats());
                }
                panic!("test hung");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    // The last reference finalizes each communicator.
    drop(comms);
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

#[test]
fn wildcards_match_in_mpi_order() {
    run(3, "holefill", config(1024), |c| {
        let me = c.rank();
        if me == 0 {
            // Wait until all six messages are here (unexpected), then match with wildcards.
            let t0 = Instant::now();
            while c.queues().unexpected < 6 {
                assert!(t0.elapsed() < LIMIT);
                c.iprobe(ANY_SOURCE, ANY_TAG).unwrap();
            }
            let mut b = [0u8; 64];
            // Any tag from 2: its first message.
            let st = c.recv(2, ANY_TAG, &mut b).unwrap();
            assert_eq!((st.source, st.tag, &b[..st.len]), (2, 5, &b"2:5a"[..]));
            // Tag 9 from anyone: 1's (sent before 2's? arrival order decides; both exist).
            let st = c.recv(ANY_SOURCE, 9, &mut b).unwrap();
            assert_eq!(st.tag, 9);
            let first9 = st.source;
            let st = c.recv(ANY_SOURCE, 9, &mut b).unwrap();
            assert_eq!(st.source, 3 - first9, "the other tag-9 message");
            // Exact.
            let st = c.recv(1, 5, &mut b).unwrap();
            assert_eq!(&b[..st.len], b"1:5a");
            // The rest with both wildcards, per-source order kept.
            let mut rest: Vec<(u32, i32, Vec<u8>)> = (0..2)
                .map(|_| {
                    let st = c.recv(ANY_SOURCE, ANY_TAG, &mut b).unwrap();
                    (st.source, st.tag, b[..st.len].to_vec())
                })
                .collect();
            rest.sort();
            assert_eq!(
                rest,
                vec![(1, 5, b"1:5b".to_vec()), (2, 5, b"2:5b".to_vec())]
            );
            // Posted before arrival: the earliest posted matching receive wins.
            let mut x = [0u8; 8];
            let mut y = [0u8; 8];
            let mut z = [0u8; 8];
            c.scope(|s| {
                let mut ra = s.irecv(ANY_SOURCE, 7, &mut x).unwrap();
                let mut rb = s.irecv(1, ANY_TAG, &mut y).unwrap();
                let mut rc = s.irecv(ANY_SOURCE, ANY_TAG, &mut z).unwrap();
                c.send(1, 100, b"go").unwrap();
                assert_eq!(ra.wait().unwrap().source, 1, "1's tag 7 takes the first");
                assert_eq!(rb.wait().unwrap().tag, 8, "then 1's tag 8 the second");
                assert_eq!(
                    rc.wait().unwrap().tag,
                    7,
                    "and the third takes what is left"
                );
            });
            assert_eq!(&x[..2], b"p0");
            assert_eq!(&y[..2], b"p1");
            assert_eq!(&z[..2], b"p2");
        } else {
            let name = |t: i32, v: &str| format!("{me}:{t}{v}").into_bytes();
            c.send(0, 5, &name(5, "a")).unwrap();
            c.send(0, 9, &name(9, "a")).unwrap();
            c.send(0, 5, &name(5, "b")).unwrap();
            if me == 1 {
                let mut g = [0u8; 2];
                c.recv(0, 100, &mut g).unwrap();
                c.send(0, 7, b"p0").unwrap();
                c.send(0, 8, b"p1").unwrap();
                c.send(0, 7, b"p2").unwrap();
            }
        }
    });
}

/// 600 messages from each of two senders, sizes straddling the eager limit so that eager
/// and rendezvous messages interleave, tags from a small set: each (source, tag) stream
/// arrives in order, whether received by exact source and tag or with wildcards.
#[test]
fn no_overtaking_per_source_and_tag_across_protocols() {
    let eager = 4096;
    let count = 600u32;
    let size =
        move |i: u32| [4usize, 5, eager - 1, eager, eager + 1, 3 * eager, 20_000][(i % 7) as usize];
    run(3, "holefill", config(eager), move |c| {
        if c.rank() == 0 {
            // remaining[s][t]: messages of sender s with tag t not received yet.
            let mut remaining = [[0u32; 3]; 3];
            for row in remaining.iter_mut().skip(1) {
                for i in 0..count {
                    row[(i % 3) as usize] += 1;
                }
            }
            let mut next = [[0u32, 1, 2]; 3];
            let mut buf = vec![0u8; 20_000];
            let mut x: u64 = 77;
            for _ in 0..2 * count {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let (s, t) = ((1 + (x >> 33) % 2) as usize, ((x >> 40) % 3) as usize);
                let by_s = remaining[s].iter().sum::<u32>() > 0;
                let by_t = remaining[1][t] + remaining[2][t] > 0;
                let (src, tag) = match (x >> 50) % 4 {
                    0 if remaining[s][t] > 0 => (Source::Rank(s as u32), Tag::Is(t as i32)),
                    1 if by_s => (Source::Rank(s as u32), Tag::Any),
                    2 if by_t => (Source::Any, Tag::Is(t as i32)),
                    _ => (ANY_SOURCE, ANY_TAG),
                };
                let st = c.recv(src, tag, &mut buf).unwrap();
                let (s, t) = (st.source as usize, st.tag as usize);
                // Message i of a sender has tag i % 3 and its number in its first 4 bytes.
                let i = next[s][t];
                let got = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                assert_eq!(got, i, "from {s} tag {t}: overtaken");
                assert_eq!(st.len, size(i));
                assert!(buf[4..st.len] == pattern(st.len, i)[4..]);
                next[s][t] += 3;
                remaining[s][t] -= 1;
            }
            assert_eq!(remaining, [[0; 3]; 3]);
        } else {
            let reqs: Vec<_> = (0..count)
                .map(|i| {
                    let mut b = pattern(size(i), i);
                    b[..4].copy_from_slice(&i.to_le_bytes());
                    c.isend(0, (i % 3) as i32, b).unwrap()
                })
                .collect();
            let mut reqs = reqs;
            c.wait_all(&mut reqs).unwrap();
        }
    });
}

#[test]
fn truncation_is_an_error_on_the_request_eager_and_rendezvous() {
    run(2, "holefill", config(1000), |c| {
        if c.rank() == 0 {
            let mut small = [0u8; 10];
            let e = c.recv(1, 1, &mut small).unwrap_err();
            assert_eq!(
                e,
                Error::Truncated {
                    peer: 1,
                    tag: 1,
                    len: 100,
                    cap: 10
                }
            );
            assert_eq!(
                &small[..],
                &pattern(100, 1)[..10],
                "eager: the prefix that fits"
            );
            let mut mid = vec![0u8; 5000];
            let e = c.recv(1, 2, &mut mid).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Truncated {
                        peer: 1,
                        tag: 2,
                        len: 8000,
                        cap: 5000
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("rank 1"), "{e}");
            // The stream goes on: the next message is fine.
            let st = c.recv(1, 3, &mut mid).unwrap();
            assert!(st.len == 3000 && mid[..st.len] == pattern(3000, 3)[..]);
            let e = c.recv_vec(1, 4, 100).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Truncated {
                        len: 5000,
                        cap: 100,
                        ..
                    }
                ),
                "{e}"
            );
            assert!(c.stats().truncated >= 2);
        } else {
            c.send(0, 1, &pattern(100, 1)).unwrap();
            // The rendezvous send completes normally: the receiver refused the body.
            c.send(0, 2, &pattern(8000, 2)).unwrap();
            c.send(0, 3, &pattern(3000, 3)).unwrap();
            c.send(0, 4, &pattern(5000, 4)).unwrap();
        }
    });
}

#[test]
fn zero_size_self_and_boundary_sizes() {
    let eager = 2048;
    run(2, "gbn", config(eager), move |c| {
        let me = c.rank();
        let other = 1 - me;
        // Zero bytes, to a peer and to oneself, with an empty (dangling) buffer.
        let mut empty: [u8; 0] = [];
        c.send(other, 0, &[]).unwrap();
        let st = c.recv(other, 0, &mut empty).unwrap();
        assert_eq!((st.source, st.tag, st.len), (other, 0, 0));
        let mut r = c.isend(me, 0, Vec::new()).unwrap();
        let st = c.recv(me, 0, &mut empty).unwrap();
        assert_eq!((st.source, st.len), (me, 0));
        r.wait().unwrap();
        // Self, both protocols, receive posted after the send.
        for n in [10, eager + 10] {
            let mut s = c.isend(me, 1, pattern(n, 9)).unwrap();
            let (v, st) = c.recv_vec(me, 1, 1 << 20).unwrap();
            assert!(st.len == n && v == pattern(n, 9));
            s.wait().unwrap();
        }
        // Sizes around the eager limit, both directions at once.
        let sizes = [eager - 1, eager, eager + 1, 2 * eager, 1];
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0; n]).collect();
        c.scope(|s| {
            let mut rs: Vec<_> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| s.irecv(other, i as i32, b).unwrap())
                .collect();
            let data: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| pattern(n, i as u32))
                .collect();
            for (i, d) in data.iter().enumerate() {
                c.send(other, i as i32, d).unwrap();
            }
            let sts = c.wait_all(&mut rs).unwrap();
            for (i, st) in sts.iter().enumerate() {
                assert_eq!((st.source, st.tag, st.len), (other, i as i32, sizes[i]));
            }
        });
        for (i, b) in bufs.iter().enumerate() {
            assert!(*b == pattern(sizes[i], i as u32), "size {}", sizes[i]);
        }
    });
}

/// Thousands of receives posted at once, with distinct tags, matched by sends in reverse
/// order; thousands of sends outstanding at once; waitany drains them.
#[test]
fn thousands_of_outstanding_requests() {
    let n = 3000usize;
    run(2, "holefill", config(256), move |c| {
        let me = c.rank();
        if me == 0 {
            let mut reqs: Vec<_> = (0..n)
                .map(|t| c.irecv_vec(1, t as i32, 1024).unwrap())
                .collect();
            assert_eq!(c.queues().posted, n);
            c.send(1, 0, b"posted").unwrap();
            let mut seen = vec![false; n];
            let mut got = 0;
            while let Some((i, r)) = c.wait_any(&mut reqs) {
                let st = r.unwrap();
                assert_eq!(st.tag as usize, i);
                assert!(reqs[i].take_data().unwrap() == pattern(i % 700, i as u32));
                assert!(!seen[i]);
                seen[i] = true;
                got += 1;
            }
            assert_eq!(got, n);
            assert!(c.test_any(&mut reqs).is_none());
            assert_eq!(c.queues().posted, 0);
        } else {
            let mut go = [0u8; 6];
            c.recv(0, 0, &mut go).unwrap();
            let mut reqs: Vec<_> = (0..n)
                .rev()
                .map(|t| c.isend(0, t as i32, pattern(t % 700, t as u32)).unwrap())
                .collect();
            // Poll with test_any until everything went.
            let t0 = Instant::now();
            let mut left = n;
            while left > 0 {
                assert!(t0.elapsed() < LIMIT);
                if let Some((_, r)) = c.test_any(&mut reqs) {
                    r.unwrap();
                    left -= 1;
                }
            }
        }
    });
}

#[test]
fn probe_then_receive_exactly_that() {
    run(2, "holefill", config(100), |c| {
        if c.rank() == 0 {
            let st = c.probe(ANY_SOURCE, ANY_TAG).unwrap();
            assert_eq!((st.source, st.tag, st.len), (1, 3, 5000));
            let (v, st2) = c.recv_vec(st.source, st.tag, st.len).unwrap();
            assert!(st2 == st && v == pattern(5000, 3));
            let st = c.probe(1, 4).unwrap();
            assert_eq!(st.len, 7);
            let mut b = vec![0u8; st.len];
            c.recv(1, 4, &mut b).unwrap();
            assert_eq!(b, pattern(7, 4));
            assert!(c.iprobe(1, ANY_TAG).unwrap().is_none());
        } else {
            c.send(0, 3, &pattern(5000, 3)).unwrap();
            c.send(0, 4, &pattern(7, 4)).unwrap();
        }
    });
}

/// A scope ends only when its requests have completed, even those dropped or leaked;
/// receives nothing matched are cancelled; a panic inside still waits, then propagates.
#[test]
fn scopes_wait_for_dropped_and_leaked_requests() {
    run(2, "holefill", config(64), |c| {
        if c.rank() == 0 {
            let mut a = vec![0u8; 10_000];
            let mut never = vec![0u8; 16];
            c.scope(|s| {
                let r = s.irecv(1, 1, &mut a).unwrap();
                std::mem::forget(r);
                let r = s.irecv(1, 99, &mut never).unwrap();
                drop(r); // never matched: cancelled at once
                c.send(1, 0, b"go").unwrap();
                // Once the leaked receive has matched, leaving the scope waits for its body.
                let t0 = Instant::now();
                while c.queues().posted > 0 {
                    assert!(t0.elapsed() < LIMIT);
                    let _ = c.iprobe(ANY_SOURCE, ANY_TAG);
                }
            });
            // The leaked receive completed before the scope ended: the data is all there.
            assert!(a == pattern(10_000, 1));
            assert_eq!(c.queues().posted, 0, "the unmatched receive was cancelled");
            let mut b = vec![0u8; 10_000];
            let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                c.scope(|s| {
                    let _r = s.irecv(1, 2, &mut b).unwrap();
                    c.send(1, 0, b"go").unwrap();
                    // Matched (the RTS is in), body maybe not: unwinding drops the request,
                    // which lets it finish in the background; the scope waits for it.
                    let t0 = Instant::now();
                    while c.queues().posted > 0 {
                        assert!(t0.elapsed() < LIMIT);
                        let _ = c.iprobe(ANY_SOURCE, ANY_TAG);
                    }
                    panic!("user code panics");
                })
            }));
            assert!(p.is_err());
            assert!(b == pattern(10_000, 2), "the matched receive finished");
        } else {
            let mut g = [0u8; 2];
            c.recv(0, 0, &mut g).unwrap();
            let data = pattern(10_000, 1);
            c.scope(|s| {
                let r = s.isend(0, 1, &data).unwrap();
                drop(r); // completes in the background; the scope waits for it
            });
            c.recv(0, 0, &mut g).unwrap();
            c.send(0, 2, &pattern(10_000, 2)).unwrap();
        }
    });
}

#[test]
fn bad_arguments_are_errors() {
    run(2, "utopia", config(64), |c| {
        let mut b = [0u8; 4];
        assert!(matches!(
            c.send(2, 0, b"x"),
            Err(Error::InvalidRank { rank: 2, size: 2 })
        ));
        assert!(matches!(c.send(0, -3, b"x"), Err(Error::InvalidTag(-3))));
        assert!(matches!(
            c.recv(7, 0, &mut b),
            Err(Error::InvalidRank { .. })
        ));
        assert!(matches!(
            c.recv(0, Tag::Is(-1), &mut b),
            Err(Error::InvalidTag(-1))
        ));
        assert!(matches!(
            c.wait_raw(0xdead_0000_0001),
            Err(Error::InvalidRequest)
        ));
        let mut r = c.isend(c.rank(), 1, vec![1u8]).unwrap();
        c.recv(c.rank(), 1, &mut b).unwrap();
        r.wait().unwrap();
        assert_eq!(r.wait(), Err(Error::InvalidRequest), "already waited for");
    });
}

/// With the progress thread off (`progress: None`, `BULKWIRE_PROGRESS_US=0`), a rank that
/// computes for three dead-peer deadlines without calling in is not declared dead by the
/// rank waiting on it: the keep-alive thread answers for it, and its answer arrives.
#[test]
fn a_computing_rank_without_progress_thread_is_not_declared_dead() {
    let dead_after = Duration::from_millis(700);
    let cfg = Config {
        progress: None,
        ..config(1024)
    };
    let comms: Vec<Comm> = inproc::network(2, 9000, 1 << 12)
        .into_iter()
        .map(|l| {
            let c = Common::new(l.rank(), 2, 9000 - HEADER_LEN);
            let p = bulkwire_protocol::by_name("holefill", c, &Default::default()).unwrap();
            let ep = EndpointConfig::with_deadline(7, dead_after.as_nanos() as u64);
            let e = Engine::new(Endpoint::new(Box::new(l), p, ep), WaitPolicy::default());
            Comm::from_transport(Box::new(e), &cfg)
        })
        .collect();
    let [c0, c1]: [Comm; 2] = comms.try_into().ok().unwrap();
    let worker = std::thread::spawn(move || {
        let mut b = [0u8; 8];
        c1.recv(0, 1, &mut b).unwrap();
        std::thread::sleep(dead_after * 3);
        c1.send(0, 2, b"answer").unwrap();
        c1.flush().unwrap();
        c1
    });
    c0.send(1, 1, b"request").unwrap();
    let t0 = Instant::now();
    let mut b = [0u8; 8];
    let st = c0
        .recv(1, 2, &mut b)
        .unwrap_or_else(|e| panic!("after {:?}: {e}", t0.elapsed()));
    assert_eq!(&b[..st.len], b"answer");
    assert!(t0.elapsed() >= dead_after * 3, "{:?}", t0.elapsed());
    let c1 = worker.join().unwrap();
    c0.flush().unwrap();
    drop((c0, c1));
}
