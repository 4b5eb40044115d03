//! The shared-memory link alone, below the engine: ping-pong half round trip of small
//! datagrams and one-way streaming of large ones between two threads (one per core; the
//! rings and cache-line traffic are the same as between processes).
//!
//! `cargo run --release -p bulkwire-link --example shm_pingpong [SIZE] [ITERS]`

use std::time::Instant;

use bulkwire_link::{Link, RxBatch, ShmConfig, ShmLink, Tx, thread_rendezvous};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let size = args.first().copied().unwrap_or(8);
    let iters = args.get(1).copied().unwrap_or(200_000);
    let cfg = ShmConfig::for_procs(2);
    let hs: Vec<_> = thread_rendezvous(2)
        .into_iter()
        .enumerate()
        .map(|(r, mut rv)| {
            std::thread::spawn(move || {
                let mut l = ShmLink::create(r as u32, &[true, true], &cfg, &mut rv).unwrap();
                let peer = 1 - r as u32;
                let msg = vec![0x5au8; size];
                let mut rx = RxBatch::new(32, cfg.max_datagram);
                let tx = [Tx {
                    dst: peer,
                    head: &msg,
                    body: &[],
                }];
                let recv1 = |l: &mut ShmLink, rx: &mut RxBatch| while l.recv(rx).unwrap() == 0 {};
                // Ping-pong, timed in chunks of 1000 round trips: the median chunk is robust
                // to the preemptions of a shared machine, and the clock is read rarely.
                let chunk = 1000;
                let mut halves = Vec::new();
                for c in 0..(iters / chunk).max(1) + 10 {
                    let t0 = Instant::now();
                    for _ in 0..chunk {
                        if r == 0 {
                            while l.send(&tx).unwrap() == 0 {}
                            recv1(&mut l, &mut rx);
                        } else {
                            recv1(&mut l, &mut rx);
                            while l.send(&tx).unwrap() == 0 {}
                        }
                    }
                    if c >= 10 {
                        halves.push(t0.elapsed().as_secs_f64() / chunk as f64 / 2.0);
                    }
                }
                halves.sort_by(f64::total_cmp);
                let half = halves[halves.len() / 2];
                // Streaming 64 KiB datagrams (the link's default maximum) one way.
                let big = vec![0xa5u8; cfg.max_datagram];
                let n = 20_000usize;
                let t1 = Instant::now();
                if r == 0 {
                    let btx = [Tx {
                        dst: 1,
                        head: &big,
                        body: &[],
                    }];
                    let mut sent = 0;
                    while sent < n {
                        sent += l.send(&btx).unwrap();
                    }
                    recv1(&mut l, &mut rx);
                } else {
                    let mut got = 0;
                    while got < n {
                        got += l.recv(&mut rx).unwrap();
                    }
                    while l.send(&tx).unwrap() == 0 {}
                }
                let bw = (n * big.len()) as f64 / t1.elapsed().as_secs_f64();
                (half, bw)
            })
        })
        .collect();
    let (half, bw) = hs.into_iter().map(|h| h.join().unwrap()).next().unwrap();
    println!(
        "shm link: {size} B half round trip {:.3} us (median of 1000-round-trip chunks); {} B datagrams stream {:.2} GB/s",
        half * 1e6,
        cfg.max_datagram,
        bw / 1e9
    );
}
