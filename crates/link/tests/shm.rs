//! The shared-memory link: rings (wrap-around, full and empty, sizes), concurrent producers
//! and consumers, sleeping receivers woken without loss, hostile segment contents, the
//! composite link, and the network cache.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bulkwire_link::netcache::NetCache;
use bulkwire_link::route::{Route, RouteLink};
use bulkwire_link::segment::{HostGroup, Segment};
use bulkwire_link::{
    Link, Rendezvous, RxBatch, ShmConfig, ShmLink, Tx, UdpConfig, UdpLink, thread_rendezvous,
};

/// `n` links (all on this host), created collectively by `n` threads.
fn links(n: usize, cfg: ShmConfig) -> Vec<ShmLink> {
    ShmLink::in_threads(n, &cfg).unwrap()
}

fn small() -> ShmConfig {
    ShmConfig {
        ring_bytes: 4096,
        max_datagram: 1024,
    }
}

/// Datagram `k` of a test stream: length and contents fixed by k.
fn dgram(k: u64, max: usize) -> Vec<u8> {
    let len = ((k.wrapping_mul(2_654_435_761) >> 7) as usize) % (max + 1);
    let mut v: Vec<u8> = (0..len).map(|i| (k as usize + i * 7) as u8).collect();
    if len >= 8 {
        v[..8].copy_from_slice(&k.to_le_bytes());
    }
    v
}

fn send_one(l: &mut ShmLink, dst: u32, d: &[u8]) -> usize {
    let split = d.len() / 3;
    l.send(&[Tx {
        dst,
        head: &d[..split],
        body: &d[split..],
    }])
    .unwrap()
}

/// Many laps of a 4 KiB ring with sizes 0..=1024, so every alignment of the wrap point
/// comes up, received with `recv` or (`in_place`) with `recv_each`, which reads records
/// in the ring and bounces only those that wrap.
fn laps(in_place: bool) {
    let mut v = links(2, small());
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let mut rx = RxBatch::new(8, 1024);
    let (mut next_tx, mut next_rx) = (0u64, 0u64);
    while next_rx < 20_000 {
        while send_one(&mut a, 1, &dgram(next_tx, 1024)) == 1 {
            next_tx += 1;
        }
        let mut check = |d: &[u8]| {
            assert_eq!(d, &dgram(next_rx, 1024)[..], "datagram {next_rx}");
            next_rx += 1;
        };
        let n = if in_place {
            b.recv_each(&mut rx, &mut check).unwrap()
        } else {
            let n = b.recv(&mut rx).unwrap();
            rx.iter().for_each(check);
            n
        };
        assert!(
            n > 0 && n <= 8,
            "a full ring yields up to a batch of datagrams"
        );
    }
    assert_eq!(b.recv(&mut rx).unwrap(), (next_tx - next_rx) as usize);
    assert!(a.stats().tx_full > 0);
    assert_eq!(a.stats().broken_rings + b.stats().broken_rings, 0);
}

#[test]
fn wraps_around_and_keeps_order() {
    laps(false);
}

#[test]
fn read_in_place_wraps_around_and_keeps_order() {
    laps(true);
}

#[test]
fn full_and_empty() {
    let mut v = links(2, small());
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let mut rx = RxBatch::new(64, 1024);
    assert_eq!(b.recv(&mut rx).unwrap(), 0, "empty at first");
    // Records of 248 bytes take 256 (8-byte header, padded to 64), and 4096 bytes hold 15
    // of them: the producer never fills the last byte (the next header slot stays free).
    let d = vec![7u8; 248];
    let txs: Vec<Tx> = (0..20)
        .map(|_| Tx {
            dst: 1,
            head: &d,
            body: &[],
        })
        .collect();
    assert_eq!(a.send(&txs).unwrap(), 15, "a full ring takes a prefix");
    assert_eq!(a.send(&txs).unwrap(), 0, "and then nothing");
    assert_eq!(b.recv(&mut rx).unwrap(), 15);
    assert_eq!(b.recv(&mut rx).unwrap(), 0, "empty again");
    assert_eq!(a.send(&txs).unwrap(), 15, "room again once read");
    // A batch smaller than what waits takes what fits; the rest stays.
    let mut small_rx = RxBatch::new(5, 1024);
    assert_eq!(b.recv(&mut small_rx).unwrap(), 5);
    assert_eq!(b.recv(&mut rx).unwrap(), 10);
    // Too large, and not on this host: errors, nothing sent.
    let big = vec![0u8; 1025];
    assert!(
        a.send(&[Tx {
            dst: 1,
            head: &big,
            body: &[]
        }])
        .is_err()
    );
    assert!(
        a.send(&[Tx {
            dst: 5,
            head: &d,
            body: &[]
        }])
        .is_err()
    );
    // Zero-length datagrams and datagrams to oneself.
    assert_eq!(
        a.send(&[Tx {
            dst: 0,
            head: &[],
            body: &[]
        }])
        .unwrap(),
        1
    );
    assert_eq!(a.recv(&mut rx).unwrap(), 1);
    assert!(rx.get(0).is_empty());
    // A receiver whose slots are smaller than a datagram drops it (as UDP truncation).
    assert_eq!(
        a.send(&[Tx {
            dst: 1,
            head: &d,
            body: &d
        }])
        .unwrap(),
        1
    );
    let mut tiny = RxBatch::new(4, 100);
    assert_eq!(b.recv(&mut tiny).unwrap(), 0);
    assert_eq!(b.stats().rx_oversize, 1);
}

/// The producer waits between short bursts, as in a ping-pong: each wait zeroes header
/// slots ahead of its tail (in a 4 KiB ring, right up to the consumer's unread records).
/// Every datagram still arrives intact and in order, over many laps.
#[test]
fn a_producer_that_waits_between_bursts_keeps_order() {
    let mut v = links(2, small());
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let mut rx = RxBatch::new(8, 1024);
    let (mut next_tx, mut next_rx) = (0u64, 0u64);
    let mut burst = 0u64;
    while next_rx < 20_000 {
        burst += 1;
        assert!(burst < 100_000, "stuck at datagram {next_rx}");
        for _ in 0..burst % 6 {
            if send_one(&mut a, 1, &dgram(next_tx, 1024)) != 1 {
                break;
            }
            next_tx += 1;
        }
        // Two empty receives in a row: a wait.
        assert_eq!(a.recv(&mut rx).unwrap(), 0);
        assert_eq!(a.recv(&mut rx).unwrap(), 0);
        // The consumer lags behind now and then, so the ring fills.
        if !burst.is_multiple_of(4) {
            b.recv_each(&mut rx, &mut |d: &[u8]| {
                assert_eq!(d, &dgram(next_rx, 1024)[..], "datagram {next_rx}");
                next_rx += 1;
            })
            .unwrap();
        }
    }
    assert!(a.stats().tx_full > 0);
    assert_eq!(a.stats().broken_rings + b.stats().broken_rings, 0);
}

#[test]
fn many_small_and_few_large() {
    let cfg = ShmConfig {
        ring_bytes: 1 << 20,
        max_datagram: 256 << 10,
    };
    let mut v = links(3, cfg);
    let mut c = v.pop().unwrap();
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let mut rx = RxBatch::new(32, 256 << 10);
    // 10 000 datagrams of 8 bytes from a, 3 of 256 KiB from b, all to c, interleaved.
    let big: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 256 << 10]).collect();
    let (mut small_sent, mut big_sent, mut small_got, mut big_got) = (0u64, 0, 0u64, 0);
    while small_got < 10_000 || big_got < 3 {
        for _ in 0..100 {
            if small_sent < 10_000 && send_one(&mut a, 2, &small_sent.to_le_bytes()) == 1 {
                small_sent += 1;
            }
        }
        if big_sent < 3 && send_one(&mut b, 2, &big[big_sent]) == 1 {
            big_sent += 1;
        }
        c.recv(&mut rx).unwrap();
        for d in rx.iter() {
            if d.len() == 8 {
                assert_eq!(u64::from_le_bytes(d.try_into().unwrap()), small_got);
                small_got += 1;
            } else {
                assert_eq!(d, &big[big_got][..]);
                big_got += 1;
            }
        }
    }
}

#[test]
fn concurrent_producer_and_consumer_threads() {
    let mut v = links(3, small());
    let c = v.pop().unwrap();
    // Enough for the ring (small()) to wrap and fill many times over.
    const N: u64 = 50_000;
    // Datagram k of sender s starts with the number 2k + s: with untagged test datagrams,
    // two senders' empty (or equal short) ones could not be told apart.
    let tagged = |s: u64, k: u64| {
        let mut d = (2 * k + s).to_le_bytes().to_vec();
        d.extend(dgram(2 * k + s, 592));
        d
    };
    let mut senders = Vec::new();
    for (s, mut l) in v.into_iter().enumerate() {
        senders.push(std::thread::spawn(move || {
            let mut k = 0;
            let deadline = Instant::now() + Duration::from_secs(120);
            while k < N {
                assert!(Instant::now() < deadline);
                if send_one(&mut l, 2, &tagged(s as u64, k)) == 1 {
                    k += 1;
                } else {
                    // Three threads may share fewer cores: let the reader run.
                    std::thread::yield_now();
                }
            }
            l
        }));
    }
    let mut c = c;
    let mut rx = RxBatch::new(16, 1024);
    let mut next = [0u64; 2];
    let deadline = Instant::now() + Duration::from_secs(120);
    while next.iter().sum::<u64>() < 2 * N {
        assert!(Instant::now() < deadline, "got {next:?}");
        if c.recv(&mut rx).unwrap() == 0 {
            std::thread::yield_now();
        }
        for d in rx.iter() {
            let from = (u64::from_le_bytes(d[..8].try_into().unwrap()) & 1) as usize;
            assert_eq!(
                d,
                &tagged(from as u64, next[from])[..],
                "out of order or damaged"
            );
            next[from] += 1;
        }
    }
    for s in senders {
        s.join().unwrap();
    }
}

/// Both sides sleep in `wait` between every message: a lost wake-up shows as a wait that
/// runs into its long timeout.
#[test]
fn sleeping_receivers_are_always_woken() {
    let mut v = links(2, small());
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    const ROUNDS: u32 = 3000;
    let long = Duration::from_secs(5);
    fn serve(l: &mut ShmLink, peer: u32, first: bool, rounds: u32, long: Duration) -> u64 {
        let mut rx = RxBatch::new(4, 1024);
        let mut worst = Duration::ZERO;
        for i in 0..rounds {
            if first {
                assert_eq!(send_one(l, peer, &i.to_le_bytes()), 1);
            }
            loop {
                if l.recv(&mut rx).unwrap() > 0 {
                    break;
                }
                // Vary the timing so the sender's publish lands at every point of the
                // sleeper's advertise / fence / re-check / poll sequence.
                if i % 3 == 0 {
                    for _ in 0..(i % 200) {
                        std::hint::spin_loop();
                    }
                }
                let t = Instant::now();
                l.wait(Some(long)).unwrap();
                worst = worst.max(t.elapsed());
                assert!(t.elapsed() < long, "round {i}: a wake-up was lost");
            }
            assert_eq!(rx.get(0), &i.to_le_bytes());
            if !first {
                assert_eq!(send_one(l, peer, &i.to_le_bytes()), 1);
            }
        }
        worst.as_micros() as u64
    }
    let h = std::thread::spawn(move || {
        serve(&mut b, 0, false, ROUNDS, long);
        b
    });
    serve(&mut a, 1, true, ROUNDS, long);
    let b = h.join().unwrap();
    let s = a.stats();
    assert!(s.sleeps > 0 && b.stats().sleeps > 0, "the test did sleep");
    assert!(s.doorbells + b.stats().doorbells > 0, "doorbells were rung");
}

/// Writes `v` at `off` of the link's region, as a hostile peer sharing it would.
fn poke(l: &ShmLink, off: usize, v: u64) {
    l.segment()
        .0
        .u64_at(off)
        .unwrap()
        .store(v, Ordering::SeqCst);
}

#[test]
fn hostile_counters_and_records_break_only_the_ring() {
    let mut v = links(2, small());
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let mut rx = RxBatch::new(8, 1024);
    let layout = a.segment().1;
    let r01 = layout.ring(0, 1);
    let r10 = layout.ring(1, 0);
    // A header without the marker: b abandons the ring, reads nothing out of bounds.
    poke(&a, r01.data, u64::MAX / 2);
    assert_eq!(b.recv(&mut rx).unwrap(), 0);
    assert_eq!(b.stats().broken_rings, 1);
    // The other direction: a record whose header claims more than the largest datagram.
    assert_eq!(send_one(&mut b, 0, b"hello"), 1);
    poke(&b, r10.data, u64::from_le_bytes(*b"\xff\xff\x00\x00bwrc"));
    assert_eq!(a.recv(&mut rx).unwrap(), 0);
    assert_eq!(a.stats().broken_rings, 1);
    // A head beyond the tail: the sender abandons the ring; sends count as lost.
    poke(&b, r01.head, 1 << 40);
    for _ in 0..100 {
        assert_eq!(send_one(&mut a, 1, &[1; 200]), 1);
    }
    assert_eq!(a.stats().broken_rings, 2);
    assert!(a.stats().tx_lost > 0);
    // Garbage everywhere in the region, between every operation: nothing panics, nothing
    // is read or written out of bounds.
    let mut v = links(2, small());
    let mut d = v.pop().unwrap();
    let mut c = v.pop().unwrap();
    let len = c.segment().0.data_len();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..50u64 {
        for off in (0..len).step_by(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Plausible-looking values as well as wild ones.
            let v = if round % 2 == 0 { x % 8192 } else { x };
            poke(&d, off, v);
        }
        for _ in 0..4 {
            let _ = c.recv(&mut rx);
            let _ = d.recv(&mut rx);
            let _ = send_one(&mut c, 1, &[3; 300]);
            let _ = send_one(&mut d, 0, &[4; 300]);
            let _ = c.prepare_sleep();
            c.end_sleep();
        }
    }
}

/// A rendezvous that lets a test rewrite the leader's round-one offer.
struct Tamper<R> {
    inner: R,
    round: u32,
    f: fn(&mut Vec<u8>),
}

impl<R: Rendezvous> Rendezvous for Tamper<R> {
    fn allgather(&mut self, blob: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        let mut all = self.inner.allgather(blob)?;
        if self.round == 0 {
            (self.f)(&mut all[0]);
        }
        self.round += 1;
        Ok(all)
    }
}

fn attach_with(f: fn(&mut Vec<u8>)) -> String {
    let mut rvs = thread_rendezvous(2);
    let rv1 = rvs.pop().unwrap();
    let mut rv0 = rvs.pop().unwrap();
    let h = std::thread::spawn(move || {
        let g = HostGroup::new(1, &[true, true]).unwrap();
        let mut t = Tamper {
            inner: rv1,
            round: 0,
            f,
        };
        Segment::create(&g, "t", 4096, &[], &mut t).map(|_| ())
    });
    let g = HostGroup::new(0, &[true, true]).unwrap();
    let leader = Segment::create(&g, "t", 4096, &[], &mut rv0);
    let follower = h.join().unwrap();
    let e = follower.expect_err("tampered offer refused");
    // Every member learns of the failure.
    let le = leader.expect_err("the leader hears of it");
    assert!(le.to_string().contains("rank 1 could not attach"), "{le}");
    e.to_string()
}

#[test]
fn bad_offers_are_refused() {
    // Wrong size.
    let e = attach_with(|b| b[12] ^= 1);
    assert!(e.contains("bytes"), "{e}");
    // Wrong nonce: the header check catches a reused pid/fd.
    let e = attach_with(|b| b[20] ^= 1);
    assert!(e.contains("header mismatch"), "{e}");
    // A descriptor that is not ours (stdin): not a sealed memfd, or not openable.
    let e = attach_with(|b| b[8..12].copy_from_slice(&0i32.to_le_bytes()));
    assert!(!e.is_empty());
    // Garbage.
    let e = attach_with(|b| b.truncate(3));
    assert!(e.contains("no usable segment"), "{e}");
}

#[test]
fn mismatched_sizes_are_an_error() {
    let local = [true, true];
    let hs: Vec<_> = thread_rendezvous(2)
        .into_iter()
        .enumerate()
        .map(|(r, mut rv)| {
            std::thread::spawn(move || {
                let mut cfg = small();
                if r == 1 {
                    cfg.max_datagram = 512;
                }
                ShmLink::create(r as u32, &local, &cfg, &mut rv).map(|_| ())
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("BULKWIRE_SHM_DGRAM"), "{e}");
    }
}

#[test]
fn config_sizes() {
    assert_eq!(ShmConfig::for_procs(2).ring_bytes, 1 << 20);
    assert_eq!(ShmConfig::for_procs(2).max_datagram, 64 << 10);
    assert_eq!(ShmConfig::for_procs(64).ring_bytes, 64 << 10);
    assert_eq!(ShmConfig::for_procs(64).max_datagram, 16 << 10);
    for n in 1..200 {
        ShmConfig::for_procs(n).validate().unwrap();
    }
    assert!(
        ShmConfig {
            ring_bytes: 5000,
            max_datagram: 100
        }
        .validate()
        .is_err()
    );
}

/// Ranks 0, 1 share a "host" (shared memory), rank 2 is elsewhere (UDP only): the composite
/// routes per peer and delivers both ways.
#[test]
fn composite_routes_per_peer() {
    let udp_cfg = UdpConfig::default();
    let bound: Vec<_> = (0..3)
        .map(|_| UdpLink::bind("127.0.0.1:0".parse().unwrap(), &udp_cfg).unwrap())
        .collect();
    let addrs: Vec<_> = bound.iter().map(|b| b.local_addr()).collect();
    let hosts = [0, 0, 1];
    let rvs = thread_rendezvous(3);
    let hs: Vec<_> = bound
        .into_iter()
        .zip(rvs)
        .enumerate()
        .map(|(r, (b, mut rv))| {
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                let local: Vec<bool> = hosts.iter().map(|&h| h == hosts[r]).collect();
                let shm = ShmLink::create(r as u32, &local, &small(), &mut rv).unwrap();
                let udp = b.into_link(r as u32, addrs).unwrap();
                let routes = local
                    .iter()
                    .map(|&l| if l { Route::Near } else { Route::Far })
                    .collect();
                RouteLink::new(shm, udp, routes).unwrap()
            })
        })
        .collect();
    let mut ls: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(ls[0].capabilities().max_to(1), 1024);
    assert!(ls[0].capabilities().max_to(2) > 1024 || ls[0].capabilities().max_to(2) != 1024);
    assert!(!ls[0].capabilities().reliable, "UDP in the mix");
    // Rank 0 sends to 1 (shm) and 2 (udp), interleaved in one batch.
    let msgs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 100 + i as usize]).collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| Tx {
            dst: 1 + (i % 2) as u32,
            head: m,
            body: &[],
        })
        .collect();
    assert_eq!(ls[0].send(&txs).unwrap(), 6);
    let mut rx = RxBatch::new(8, ls[0].capabilities().recv_slot);
    for (r, want) in [(1usize, [0u8, 2, 4]), (2, [1, 3, 5])] {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 3 && Instant::now() < deadline {
            ls[r].recv(&mut rx).unwrap();
            got.extend(rx.iter().map(|d| d[0]));
            if got.len() < 3 {
                ls[r].wait(Some(Duration::from_millis(50))).unwrap();
            }
        }
        assert_eq!(got, want, "rank {r}");
    }
    // The epoll descriptor wakes a sleeper for either route.
    for from in [1usize, 2] {
        let t = Instant::now();
        let m = [9u8; 10];
        assert_eq!(
            ls[from]
                .send(&[Tx {
                    dst: 0,
                    head: &m,
                    body: &[]
                }])
                .unwrap(),
            1
        );
        loop {
            if ls[0].recv(&mut rx).unwrap() > 0 {
                break;
            }
            ls[0].wait(Some(Duration::from_secs(5))).unwrap();
            assert!(
                t.elapsed() < Duration::from_secs(4),
                "no wake-up from {from}"
            );
        }
    }
}

#[test]
fn netcache_allgather_and_barrier() {
    const N: usize = 4;
    const PART: usize = 10_000;
    let local = [true; N];
    let hs: Vec<_> = thread_rendezvous(N)
        .into_iter()
        .enumerate()
        .map(|(r, mut rv)| {
            std::thread::spawn(move || {
                let g = HostGroup::new(r as u32, &local).unwrap();
                let mut nc = NetCache::create(&g, PART, &mut rv).unwrap();
                let mut ok = || Ok(());
                let all: Vec<usize> = (0..N).collect();
                // 50 allgathers through the same parts: write once, all read, reuse only
                // after everyone completed.
                for round in 1..=50u64 {
                    nc.wait_complete(&all, round - 1, &mut ok).unwrap();
                    let len = 1000 * (r + 1);
                    let mine = vec![(r as u64 * 31 + round) as u8; len];
                    nc.write(0, &mine).unwrap();
                    assert_eq!(nc.publish(len).unwrap(), round);
                    for w in 0..N {
                        let got = nc.wait_published(w, round, &mut ok).unwrap();
                        assert_eq!(got, 1000 * (w + 1));
                        let mut buf = vec![0u8; got];
                        nc.read(w, 0, &mut buf).unwrap();
                        assert!(
                            buf.iter().all(|&b| b == (w as u64 * 31 + round) as u8),
                            "round {round}: part {w} overwritten before we read it"
                        );
                        nc.complete(w, round).unwrap();
                    }
                    nc.barrier(&mut ok).unwrap();
                }
                // Bounds are checked, lengths from peers are clamped.
                assert!(nc.write(PART - 1, &[0, 0]).is_err());
                let mut b = [0u8; 2];
                assert!(nc.read(0, PART - 1, &mut b).is_err());
                assert!(nc.read(N, 0, &mut b).is_err());
                nc.barrier(&mut ok).unwrap();
                if r == 0 {
                    let off = nc.len_word_offset(1);
                    nc.segment()
                        .u64_at(off)
                        .unwrap()
                        .store(u64::MAX, Ordering::SeqCst);
                }
                nc.barrier(&mut ok).unwrap();
                assert_eq!(nc.wait_published(1, 1, &mut ok).unwrap(), PART);
                // A wait that never ends by itself ends with the caller's check.
                let mut n = 0;
                let mut stop = || {
                    n += 1;
                    if n > 3 {
                        Err(std::io::Error::other("job failed"))
                    } else {
                        Ok(())
                    }
                };
                let e = nc.wait_published(0, 1000, &mut stop).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    "job failed (waiting for part 0 to publish generation 1000)"
                );
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}
