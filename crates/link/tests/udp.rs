//! UdpLink over loopback (and, as root, inside a private network namespace).

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_link::udp::{MAX_UDP_PAYLOAD_V4, MAX_UDP_PAYLOAD_V6, UdpConfig, UdpLink};
use bulkwire_link::{FaultConfig, Faulty, Link, RxBatch, Tx};

const DEADLINE: Duration = Duration::from_secs(10);

fn cfg(gso: bool, gro: bool) -> UdpConfig {
    UdpConfig {
        gso,
        gro,
        ..UdpConfig::default()
    }
}

/// A job of `n` links on `ip`, one config per rank.
fn job(ip: &str, cfgs: &[UdpConfig]) -> Vec<UdpLink> {
    let bound: Vec<_> = cfgs
        .iter()
        .map(|c| UdpLink::bind(format!("{ip}:0").parse().unwrap(), c).unwrap())
        .collect();
    let table: Vec<SocketAddr> = bound.iter().map(|b| b.local_addr()).collect();
    bound
        .into_iter()
        .enumerate()
        .map(|(r, b)| b.into_link(r as u32, table.clone()).unwrap())
        .collect()
}

/// Datagram `i` of a test stream: a 64-byte header naming it, then a patterned body.
fn datagram(i: u32, len: usize) -> (Vec<u8>, Vec<u8>) {
    let hl = len.min(64);
    let mut head = vec![0xa5u8; hl];
    if hl >= 8 {
        head[..4].copy_from_slice(&i.to_le_bytes());
        head[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    }
    let body = (0..len - hl)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8)
        .collect();
    (head, body)
}

/// A destination rank and a datagram's head and body.
type Addressed = (u32, (Vec<u8>, Vec<u8>));

fn joined(h: &[u8], b: &[u8]) -> Vec<u8> {
    [h, b].concat()
}

/// Sends everything, retrying while the socket is full.
fn send_all(link: &mut UdpLink, txs: &[Tx<'_>]) {
    let mut done = 0;
    let t0 = Instant::now();
    while done < txs.len() {
        done += link.send(&txs[done..]).unwrap();
        assert!(
            t0.elapsed() < DEADLINE,
            "send stuck at {done}/{}",
            txs.len()
        );
    }
}

/// Receives until `want` datagrams arrived (or the deadline passes).
fn recv_n(link: &mut UdpLink, rx: &mut RxBatch, want: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let t0 = Instant::now();
    while out.len() < want && t0.elapsed() < DEADLINE {
        if link.recv(rx).unwrap() == 0 {
            link.wait(Some(Duration::from_millis(20))).unwrap();
        }
        out.extend(rx.iter().map(<[u8]>::to_vec));
    }
    out
}

fn roundtrip(ip: &str) {
    let mut links = job(ip, &[cfg(true, true), cfg(true, true), cfg(true, true)]);
    // Mixed sizes and destinations (rank 0 sends to itself too), head+body gathered.
    let sizes = [
        0usize, 1, 63, 64, 65, 200, 1472, 1472, 1472, 900, 9000, 30000, 64,
    ];
    let msgs: Vec<Addressed> = (0..120u32)
        .map(|i| (i % 3, datagram(i, sizes[i as usize % sizes.len()])))
        .collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(d, (h, b))| Tx {
            dst: *d,
            head: h,
            body: b,
        })
        .collect();
    send_all(&mut links[0], &txs);
    let mut rx = RxBatch::new(32, 65536);
    for r in 0..3u32 {
        let want: Vec<Vec<u8>> = msgs
            .iter()
            .filter(|(d, _)| *d == r)
            .map(|(_, (h, b))| joined(h, b))
            .collect();
        let got = recv_n(&mut links[r as usize], &mut rx, want.len());
        assert_eq!(got.len(), want.len(), "rank {r}");
        assert!(got == want, "rank {r}: datagrams differ or reordered");
    }
    let s = links[0].stats();
    assert_eq!(s.tx_datagrams, 120);
    assert_eq!(
        s.tx_bytes,
        msgs.iter()
            .map(|(_, (h, b))| (h.len() + b.len()) as u64)
            .sum::<u64>()
    );
    assert_eq!(links[1].stats().rx_datagrams, 40);
}

#[test]
fn roundtrip_ipv4() {
    roundtrip("127.0.0.1");
}

#[test]
fn roundtrip_ipv6() {
    roundtrip("[::1]");
}

#[test]
fn largest_datagrams() {
    for (ip, max) in [
        ("127.0.0.1", MAX_UDP_PAYLOAD_V4),
        ("[::1]", MAX_UDP_PAYLOAD_V6),
    ] {
        let mut l = job(ip, &[cfg(true, true), cfg(true, true)]);
        assert_eq!(l[0].capabilities().max_to(1), max, "{ip}");
        assert_eq!(l[1].capabilities().max_to(0), max, "{ip}");
        let (h, b) = datagram(7, max);
        let (h2, b2) = datagram(8, max - 1);
        let txs = [
            Tx {
                dst: 1,
                head: &h,
                body: &b,
            },
            Tx {
                dst: 1,
                head: &h2,
                body: &b2,
            },
        ];
        send_all(&mut l[0], &txs);
        let mut rx = RxBatch::new(4, 65536);
        let got = recv_n(&mut l[1], &mut rx, 2);
        assert_eq!(got, vec![joined(&h, &b), joined(&h2, &b2)], "{ip}");
        let (h, b) = datagram(9, max + 1);
        let err = l[0]
            .send(&[Tx {
                dst: 1,
                head: &h,
                body: &b,
            }])
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}

#[test]
fn mtu_override() {
    let c = UdpConfig {
        mtu: Some(1500),
        ..UdpConfig::default()
    };
    let l = job("127.0.0.1", &[c.clone(), c.clone()]);
    assert_eq!(l[0].capabilities().max_to(1), 1472);
    let l = job("[::1]", &[c.clone(), c]);
    assert_eq!(l[0].capabilities().max_to(1), 1452);
    assert_eq!(l[0].capabilities().max_to(5), 0);
}

/// A stream that exercises GSO grouping: runs of equal sizes to one peer, a shorter last
/// one, peer changes, and sizes that cannot group.
fn gso_stream() -> Vec<Addressed> {
    let mut v = Vec::new();
    let mut i = 0;
    let mut push = |dst, len| {
        v.push((dst, datagram(i, len)));
        i += 1;
    };
    for _ in 0..100 {
        push(1, 1472);
    }
    push(1, 1000); // ends the group
    for _ in 0..10 {
        push(2, 1472);
    }
    for _ in 0..5 {
        push(1, 8000);
    }
    push(1, 2000); // shorter: must end the group, or the kernel would cut at 8000
    for _ in 0..3 {
        push(1, 8000);
    }
    push(1, 8001); // larger: starts a new group
    for _ in 0..3 {
        push(1, 64);
    }
    push(1, 0);
    for _ in 0..50 {
        push(1, 1200);
    }
    v
}

#[test]
fn gso_and_plain_sends_deliver_identical_datagrams() {
    let msgs = gso_stream();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(d, (h, b))| Tx {
            dst: *d,
            head: h,
            body: b,
        })
        .collect();
    let mut results = Vec::new();
    for gso in [true, false] {
        let mut l = job(
            "127.0.0.1",
            &[cfg(gso, false), cfg(false, false), cfg(false, false)],
        );
        send_all(&mut l[0], &txs);
        let st = l[0].stats();
        assert_eq!(st.tx_datagrams, msgs.len() as u64);
        if gso {
            assert!(l[0].gso_active());
            assert!(st.gso_sends >= 6, "{st:?}");
            assert!(st.gso_datagrams >= 150, "{st:?}");
            assert!(st.tx_syscalls < 10, "{st:?}");
        } else {
            assert_eq!(st.gso_sends, 0);
        }
        let mut rx = RxBatch::new(64, 65536);
        let n1 = msgs.iter().filter(|(d, _)| *d == 1).count();
        let got1 = recv_n(&mut l[1], &mut rx, n1);
        let got2 = recv_n(&mut l[2], &mut rx, 10);
        assert_eq!(l[1].stats().gro_buffers, 0);
        results.push((got1, got2));
    }
    let want1: Vec<Vec<u8>> = msgs
        .iter()
        .filter(|(d, _)| *d == 1)
        .map(|(_, (h, b))| joined(h, b))
        .collect();
    assert!(results[0].0 == want1, "GSO path damaged datagrams");
    assert_eq!(results[0], results[1]);
}

#[test]
fn gro_splits_coalesced_buffers() {
    for ip in ["127.0.0.1", "[::1]"] {
        let msgs = gso_stream();
        let txs: Vec<Tx> = msgs
            .iter()
            .map(|(d, (h, b))| Tx {
                dst: *d,
                head: h,
                body: b,
            })
            .collect();
        let mut l = job(ip, &[cfg(true, false), cfg(false, true), cfg(false, true)]);
        assert!(l[1].gro_active(), "loopback max_datagram fills a GRO slot");
        send_all(&mut l[0], &txs);
        let mut rx = RxBatch::new(8, l[1].capabilities().max_to(0));
        let n1 = msgs.iter().filter(|(d, _)| *d == 1).count();
        let got = recv_n(&mut l[1], &mut rx, n1);
        let want: Vec<Vec<u8>> = msgs
            .iter()
            .filter(|(d, _)| *d == 1)
            .map(|(_, (h, b))| joined(h, b))
            .collect();
        assert!(got == want, "{ip}: GRO split damaged datagrams");
        let st = l[1].stats();
        assert!(st.gro_buffers >= 4, "{ip}: {st:?}");
        assert!(st.gro_datagrams >= 150, "{ip}: {st:?}");
        assert_eq!(st.rx_datagrams, n1 as u64);
        assert_eq!(st.truncated, 0);
        // Fewer syscalls than datagrams: coalesced buffers arrived whole.
        assert!(st.rx_syscalls < 60, "{ip}: {st:?}");
    }
}

#[test]
fn gro_turned_off_for_small_slots() {
    let mut l = job("127.0.0.1", &[cfg(true, true), cfg(true, true)]);
    assert!(l[1].gro_active());
    let mut rx = RxBatch::new(64, 2048);
    // The first receive with small slots switches GRO off before anything is queued.
    assert_eq!(l[1].recv(&mut rx).unwrap(), 0);
    assert!(!l[1].gro_active());
    let msgs: Vec<_> = (0..40).map(|i| datagram(i, 1472)).collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(h, b)| Tx {
            dst: 1,
            head: h,
            body: b,
        })
        .collect();
    send_all(&mut l[0], &txs);
    assert!(l[0].stats().gso_sends >= 1);
    let got = recv_n(&mut l[1], &mut rx, 40);
    assert_eq!(got.len(), 40);
    assert_eq!(l[1].stats().truncated, 0);
    assert_eq!(l[1].stats().gro_buffers, 0);
    // And back on with large slots.
    let mut big = RxBatch::new(4, 65536);
    l[1].recv(&mut big).unwrap();
    assert!(l[1].gro_active());
}

#[test]
fn truncated_datagrams_are_dropped_and_counted() {
    let mut l = job("127.0.0.1", &[cfg(false, false), cfg(false, false)]);
    let (h1, b1) = datagram(1, 3000);
    let (h2, b2) = datagram(2, 100);
    let (h3, b3) = datagram(3, 1500);
    let txs = [(&h1, &b1), (&h2, &b2), (&h3, &b3)].map(|(h, b)| Tx {
        dst: 1,
        head: h,
        body: b,
    });
    send_all(&mut l[0], &txs);
    let mut rx = RxBatch::new(8, 1500);
    let got = recv_n(&mut l[1], &mut rx, 2);
    assert_eq!(got, vec![joined(&h2, &b2), joined(&h3, &b3)]);
    assert_eq!(l[1].stats().truncated, 1);
    assert_eq!(l[1].stats().rx_datagrams, 2);
}

#[test]
fn garbage_and_empty_datagrams_are_harmless() {
    let mut l = job("127.0.0.1", &[UdpConfig::default(), UdpConfig::default()]);
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dst = l[1].local_addr();
    let mut x = 0x1234_5678u32;
    let mut sent = Vec::new();
    for i in 0..50usize {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let d: Vec<u8> = (0..(x as usize % 3000))
            .map(|k| (x >> (k % 24)) as u8)
            .collect();
        let d = if i % 10 == 0 { Vec::new() } else { d };
        raw.send_to(&d, dst).unwrap();
        sent.push(d);
    }
    let mut rx = RxBatch::new(16, 65536);
    assert_eq!(recv_n(&mut l[1], &mut rx, sent.len()), sent);
    // An empty datagram through the link itself.
    assert_eq!(
        l[0].send(&[Tx {
            dst: 1,
            head: &[],
            body: &[]
        }])
        .unwrap(),
        1
    );
    assert_eq!(recv_n(&mut l[1], &mut rx, 1), vec![Vec::<u8>::new()]);
}

#[test]
fn rank_table_and_batch_validation() {
    let c = UdpConfig::default();
    let v4 = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
    let me = v4.local_addr();
    assert!(
        v4.into_link(0, vec![me, "[::1]:9".parse().unwrap()])
            .is_err(),
        "IPv6 peer on an IPv4 socket"
    );
    let v4 = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
    assert!(v4.into_link(2, vec![me, me]).is_err(), "rank outside table");
    let v6 = UdpLink::bind("[::1]:0".parse().unwrap(), &c).unwrap();
    let me6 = v6.local_addr();
    assert!(
        v6.into_link(0, vec![me6, "127.0.0.1:9".parse().unwrap()])
            .is_err(),
        "IPv4 peer on a v6-only-bound socket"
    );
    let v4 = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
    let me = v4.local_addr();
    let mut l = v4.into_link(0, vec![me]).unwrap();
    let err = l
        .send(&[Tx {
            dst: 1,
            head: b"x",
            body: &[],
        }])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn intact_only_when_every_peer_is_on_this_host() {
    // The engine skips the CRC on an intact link, so a peer that may sit behind a wire
    // must make the link not intact.
    let c = UdpConfig::default();
    let local = |peers: &dyn Fn(SocketAddr) -> Vec<SocketAddr>| {
        let b = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
        let me = b.local_addr();
        b.into_link(0, peers(me)).unwrap().capabilities().intact
    };
    assert!(local(&|me| vec![me, "127.0.0.1:9".parse().unwrap()]));
    assert!(local(&|me| vec![me, "127.1.2.3:9".parse().unwrap()]));
    assert!(!local(&|me| vec![me, "192.0.2.7:9".parse().unwrap()]));
    let v6 = UdpLink::bind("[::1]:0".parse().unwrap(), &c).unwrap();
    let me6 = v6.local_addr();
    assert!(
        v6.into_link(0, vec![me6, "[::1]:9".parse().unwrap()])
            .unwrap()
            .capabilities()
            .intact
    );
    let any = UdpLink::bind("[::]:0".parse().unwrap(), &c).unwrap();
    let me = any.local_addr();
    let l = any
        .into_link(0, vec![me, "[2001:db8::1]:9".parse().unwrap()])
        .unwrap();
    assert!(!l.capabilities().intact);
}

#[test]
fn dual_stack_socket_reaches_ipv4_peers() {
    let c = UdpConfig::default();
    let a = UdpLink::bind("[::]:0".parse().unwrap(), &c).unwrap();
    let b = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
    let a_port = a.local_addr().port();
    let table: Vec<SocketAddr> = vec![
        format!("127.0.0.1:{a_port}").parse().unwrap(),
        b.local_addr(),
    ];
    // Rank 0 names rank 1 by its IPv4-mapped IPv6 form; the path is still IPv4's.
    let table_a = vec![
        table[0],
        format!("[::ffff:127.0.0.1]:{}", b.local_addr().port())
            .parse()
            .unwrap(),
    ];
    let mut a = a.into_link(0, table_a).unwrap();
    let mut b = b.into_link(1, table).unwrap();
    assert_eq!(a.capabilities().max_to(1), MAX_UDP_PAYLOAD_V4);
    assert_eq!(a.capabilities().max_to(0), MAX_UDP_PAYLOAD_V4);
    let msgs: Vec<_> = (0..20).map(|i| datagram(i, 1400)).collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(h, b)| Tx {
            dst: 1,
            head: h,
            body: b,
        })
        .collect();
    send_all(&mut a, &txs);
    let mut rx = RxBatch::new(32, 65536);
    assert_eq!(recv_n(&mut b, &mut rx, 20).len(), 20);
    send_all(
        &mut b,
        &[Tx {
            dst: 0,
            head: b"back",
            body: b"!",
        }],
    );
    assert_eq!(recv_n(&mut a, &mut rx, 1), vec![b"back!".to_vec()]);
}

#[test]
fn wait_blocks_until_data_or_timeout() {
    let mut l = job("127.0.0.1", &[UdpConfig::default(), UdpConfig::default()]);
    let t0 = Instant::now();
    l[1].wait(Some(Duration::from_millis(30))).unwrap();
    let e = t0.elapsed();
    assert!(
        e >= Duration::from_millis(29) && e < Duration::from_secs(2),
        "{e:?}"
    );
    let mut sender = l.remove(0);
    let mut receiver = l.remove(0);
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        sender
            .send(&[Tx {
                dst: 1,
                head: b"wake",
                body: &[],
            }])
            .unwrap();
    });
    let t0 = Instant::now();
    receiver.wait(Some(Duration::from_secs(5))).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(4));
    let mut rx = RxBatch::new(4, 64);
    assert_eq!(receiver.recv(&mut rx).unwrap(), 1);
    assert_eq!(rx.get(0), b"wake");
    h.join().unwrap();
    assert!(receiver.poll_fd().is_some());
}

#[test]
fn socket_buffers_are_raised() {
    let c = UdpConfig {
        sockbuf: 2 << 20,
        ..UdpConfig::default()
    };
    let b = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
    // As root the FORCE options ignore net.core.[rw]mem_max; otherwise we get at least
    // the kernel's default.
    assert!(b.sndbuf() >= 4096 && b.rcvbuf() >= 4096);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(b.sndbuf(), 4 << 20, "kernel reports twice the request");
        assert_eq!(b.rcvbuf(), 4 << 20);
    }
}

#[test]
fn faults_over_udp() {
    let l = job("127.0.0.1", &[UdpConfig::default(), UdpConfig::default()]);
    let mut it = l.into_iter();
    let mut a = it.next().unwrap();
    let mut b = Faulty::new(
        it.next().unwrap(),
        FaultConfig::parse("loss=0.2,dup=0.1,seed=11").unwrap(),
    );
    let msgs: Vec<_> = (0..500).map(|i| datagram(i, 100)).collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(h, b)| Tx {
            dst: 1,
            head: h,
            body: b,
        })
        .collect();
    send_all(&mut a, &txs);
    let mut rx = RxBatch::new(32, 65536);
    let t0 = Instant::now();
    let mut got = 0u64;
    while (b.stats().seen < 500 || b.held() > 0) && t0.elapsed() < DEADLINE {
        if b.recv(&mut rx).unwrap() == 0 {
            b.wait(Some(Duration::from_millis(20))).unwrap();
        }
        got += rx.len() as u64;
    }
    let st = b.stats();
    assert_eq!(st.seen, 500);
    assert_eq!(got, 500 - st.lost + st.duplicated);
    assert!(st.lost > 50 && st.lost < 150, "{st:?}");
    assert!(st.duplicated > 15 && st.duplicated < 90, "{st:?}");
}

/// Runs `f` on a thread inside a fresh network namespace with `setup` shell commands
/// applied there; returns false (and says why) when that is not possible (not root, no
/// `ip`/`tc`), so the caller can skip.
fn in_netns(setup: &[&str], f: impl FnOnce() + Send + 'static) -> bool {
    let setup: Vec<String> = setup.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            eprintln!(
                "skipping: unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            return false;
        }
        for cmd in &setup {
            let mut words = cmd.split_whitespace();
            let prog = words.next().unwrap();
            match Command::new(prog).args(words).status() {
                Ok(s) if s.success() => {}
                other => {
                    eprintln!("skipping: `{cmd}` failed: {other:?}");
                    return false;
                }
            }
        }
        f();
        true
    })
    .join()
    .unwrap()
}

#[test]
fn partial_send_when_socket_buffer_is_full() {
    // On loopback a tiny SO_SNDBUF never fills: loopback_xmit orphans each skb at once, so
    // the kernel never reports EAGAIN. A slow token-bucket qdisc on a private namespace's
    // loopback holds the skbs (charged to the sender) like a busy NIC would.
    for gso in [false, true] {
        let ran = in_netns(
            &[
                "ip link set lo up",
                "tc qdisc add dev lo root tbf rate 20mbit burst 4k limit 4m",
            ],
            move || {
                let small = UdpConfig {
                    gso,
                    sockbuf: 1, // the kernel's minimum, about 4.5 KiB
                    ..UdpConfig::default()
                };
                let mut l = job("127.0.0.1", &[small, UdpConfig::default()]);
                assert!(l[0].sndbuf() < 10_000, "{}", l[0].sndbuf());
                let msgs: Vec<_> = (0..300).map(|i| datagram(i, 1000)).collect();
                let txs: Vec<Tx> = msgs
                    .iter()
                    .map(|(h, b)| Tx {
                        dst: 1,
                        head: h,
                        body: b,
                    })
                    .collect();
                let n = l[0].send(&txs).unwrap();
                assert!(n > 0 && n < txs.len(), "gso={gso}: sent {n}");
                let st = l[0].stats();
                assert_eq!(st.tx_datagrams, n as u64);
                assert!(st.tx_full >= 1, "{st:?}");
                // The rest goes as the qdisc drains (the engine's retry), and exactly what
                // was reported sent arrives, in order.
                send_all(&mut l[0], &txs[n..]);
                let mut rx = RxBatch::new(64, 65536);
                let got = recv_n(&mut l[1], &mut rx, txs.len());
                let want: Vec<Vec<u8>> = msgs.iter().map(|(h, b)| joined(h, b)).collect();
                assert!(
                    got == want,
                    "gso={gso}: {} of {} arrived",
                    got.len(),
                    want.len()
                );
            },
        );
        if !ran {
            return;
        }
    }
}

#[test]
fn unreachable_peers_count_as_sent_and_lost() {
    in_netns(&["ip link set lo up"], || {
        let c = UdpConfig::default();
        let a = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
        let b = UdpLink::bind("127.0.0.1:0".parse().unwrap(), &c).unwrap();
        // Rank 1 sits behind no route at all in this namespace.
        let table: Vec<SocketAddr> = vec![
            a.local_addr(),
            "10.9.9.9:9".parse().unwrap(),
            b.local_addr(),
        ];
        let mut a = a.into_link(0, table.clone()).unwrap();
        let mut b = b.into_link(2, table).unwrap();
        assert_eq!(
            a.capabilities().max_to(1),
            1472,
            "unknown path: Ethernet MTU assumed"
        );
        let msgs: Vec<_> = (0..30).map(|i| datagram(i, 1000)).collect();
        let txs: Vec<Tx> = msgs
            .iter()
            .enumerate()
            .map(|(i, (h, b))| Tx {
                dst: if i % 3 == 0 { 2 } else { 1 },
                head: h,
                body: b,
            })
            .collect();
        assert_eq!(a.send(&txs).unwrap(), 30);
        let st = a.stats();
        assert_eq!(st.unreachable, 20, "{st:?}");
        assert_eq!(st.tx_datagrams, 10);
        let mut rx = RxBatch::new(32, 65536);
        assert_eq!(recv_n(&mut b, &mut rx, 10).len(), 10);
    });
}

#[test]
fn ipv6_segments_above_path_mtu_are_not_grouped() {
    // On IPv6 loopback a 65500-byte datagram exceeds the 65536-byte MTU once headers are
    // added (the kernel fragments it), so it cannot lead a GSO send; grouping it would
    // make the kernel refuse GSO to that peer.
    let mut l = job("[::1]", &[cfg(true, false), cfg(false, false)]);
    let big = datagram(1, 65500);
    let small = datagram(2, 27);
    let runs: Vec<_> = (3..10).map(|i| datagram(i, 1472)).collect();
    let mut all = vec![&big, &small];
    all.extend(runs.iter());
    let txs: Vec<Tx> = all
        .iter()
        .map(|(h, b)| Tx {
            dst: 1,
            head: h,
            body: b,
        })
        .collect();
    send_all(&mut l[0], &txs);
    assert_eq!(l[0].stats().gso_sends, 1, "{:?}", l[0].stats());
    assert_eq!(l[0].stats().gso_datagrams, 7);
    let mut rx = RxBatch::new(16, 65536);
    let want: Vec<Vec<u8>> = all.iter().map(|(h, b)| joined(h, b)).collect();
    assert!(recv_n(&mut l[1], &mut rx, want.len()) == want);
}

#[test]
fn gso_refused_falls_back_for_good() {
    let mut l = job("127.0.0.1", &[cfg(true, false), cfg(false, false)]);
    // Without UDP checksums the kernel refuses GSO (EINVAL), as it does (EIO) on devices
    // that cannot offload them.
    let one: libc::c_int = 1;
    // SAFETY: sets an int option on a live socket.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(l[0].socket()),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            4,
        )
    };
    assert_eq!(r, 0);
    let msgs: Vec<_> = (0..30).map(|i| datagram(i, 1200)).collect();
    let txs: Vec<Tx> = msgs
        .iter()
        .map(|(h, b)| Tx {
            dst: 1,
            head: h,
            body: b,
        })
        .collect();
    assert_eq!(
        l[0].send(&txs).unwrap(),
        30,
        "the failed GSO send is resent plainly"
    );
    assert!(!l[0].gso_active());
    assert_eq!(l[0].stats().gso_sends, 0);
    let mut rx = RxBatch::new(64, 65536);
    let want: Vec<Vec<u8>> = msgs.iter().map(|(h, b)| joined(h, b)).collect();
    assert!(recv_n(&mut l[1], &mut rx, 30) == want);
}

#[test]
fn gso_too_large_for_path_is_split() {
    // A path MTU of 1500 with the link told 9000: each GSO segment would exceed the path,
    // so the kernel refuses GSO to that peer (EMSGSIZE); plain sends are fragmented.
    in_netns(&["ip link set lo up", "ip link set lo mtu 1500"], || {
        let c = UdpConfig {
            mtu: Some(9000),
            ..UdpConfig::default()
        };
        let mut l = job("127.0.0.1", &[c.clone(), c]);
        assert_eq!(l[0].capabilities().max_to(1), 8972);
        let msgs: Vec<_> = (0..6).map(|i| datagram(i, 8000)).collect();
        let txs: Vec<Tx> = msgs
            .iter()
            .map(|(h, b)| Tx {
                dst: 1,
                head: h,
                body: b,
            })
            .collect();
        assert_eq!(l[0].send(&txs).unwrap(), 6);
        assert!(l[0].gso_active(), "only that peer loses GSO");
        assert_eq!(l[0].stats().gso_sends, 0);
        let mut rx = RxBatch::new(8, 65536);
        let want: Vec<Vec<u8>> = msgs.iter().map(|(h, b)| joined(h, b)).collect();
        assert!(recv_n(&mut l[1], &mut rx, 6) == want);
    });
}
