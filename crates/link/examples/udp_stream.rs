//! One-way UDP stream between two `UdpLink`s on loopback, to measure what GSO and GRO buy.
//!
//! ```text
//! cargo run --release -p bulkwire-link --example udp_stream -- [size] [gso 0|1] [gro 0|1] [secs] [window] [ip]
//! ```
//!
//! A sender thread pushes batches of 64 datagrams of `size` bytes; a receiver thread spins
//! on `recv` with slots of the link's `max_datagram` (as the engine sizes them). The sender
//! keeps at most `window` bytes in flight (default 2 MiB, well inside the receive buffer),
//! so the stream is loss-free and the rate is what both ends sustain; `window` 0 sends
//! unpaced (the receiver then drops, and results swing with scheduling). Prints the
//! receiver's goodput, the loss, and the CPU time spent inside `send` and inside `recv`
//! calls that returned data, per datagram (spinning excluded, so the figure holds on a
//! loaded machine; on loopback the sender's `send` also runs the kernel's delivery into
//! the receiving socket, segmentation included when the receiver has no GRO).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bulkwire_link::udp::{UdpConfig, UdpLink};
use bulkwire_link::{Link, RxBatch, Tx};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let size: usize = arg(0, "1472").parse().expect("size");
    let gso = arg(1, "1") == "1";
    let gro = arg(2, "1") == "1";
    let secs: f64 = arg(3, "2").parse().expect("secs");
    let window: u64 = arg(4, "2097152").parse().expect("window");
    let ip = arg(5, "127.0.0.1");

    let mk = |gso, gro| UdpConfig {
        gso,
        gro,
        ..UdpConfig::default()
    };
    let addr = format!("{ip}:0").parse().unwrap();
    let a = UdpLink::bind(addr, &mk(gso, false)).unwrap();
    let b = UdpLink::bind(addr, &mk(false, gro)).unwrap();
    let table = vec![a.local_addr(), b.local_addr()];
    let mut tx = a.into_link(0, table.clone()).unwrap();
    let mut rx = b.into_link(1, table).unwrap();
    assert!(
        size <= tx.capabilities().max_to(1),
        "size above max_datagram"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let received = Arc::new(AtomicU64::new(0));
    let received2 = received.clone();
    let receiver = std::thread::spawn(move || {
        let mut batch = RxBatch::new(32, rx.capabilities().max_to(0));
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut t0 = None;
        let mut idle = 0u32;
        let mut busy = 0.0;
        while !stop2.load(Ordering::Relaxed) {
            let c = thread_cpu();
            let got = rx.recv(&mut batch).unwrap();
            if got > 0 {
                busy += thread_cpu() - c;
            }
            if got == 0 {
                idle += 1;
                if idle > 1000 {
                    rx.wait(Some(Duration::from_millis(1))).unwrap();
                }
                continue;
            }
            idle = 0;
            t0.get_or_insert_with(Instant::now);
            n += got as u64;
            received2.store(n, Ordering::Release);
            bytes += batch.iter().map(|d| d.len() as u64).sum::<u64>();
        }
        let el = t0.map_or(1e-9, |t| t.elapsed().as_secs_f64());
        (n, bytes, el, busy, rx.stats(), rx.gro_active())
    });

    let head = vec![0x42u8; size.min(64)];
    let body = vec![0x17u8; size - head.len()];
    let batch: Vec<Tx> = (0..64)
        .map(|_| Tx {
            dst: 1,
            head: &head,
            body: &body,
        })
        .collect();
    let window_dgrams = if window == 0 {
        u64::MAX
    } else {
        (window / size.max(1) as u64).max(64)
    };
    let t0 = Instant::now();
    let mut send_cpu = 0.0;
    let dur = Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    while t0.elapsed() < dur {
        let room = window_dgrams.saturating_sub(sent - received.load(Ordering::Acquire));
        if room < 64 {
            std::hint::spin_loop();
            continue;
        }
        let c = thread_cpu();
        sent += tx.send(&batch).unwrap() as u64;
        send_cpu += thread_cpu() - c;
    }
    let send_el = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (n, bytes, el, recv_cpu, rst, gro_on) = receiver.join().unwrap();
    let tst = tx.stats();
    println!(
        "size={size} gso={} gro={} | recv {:.3} GB/s {:.0} kdgram/s | sent {:.3} GB/s | loss {:.1}% | cpu/dgram tx {:.0} ns rx {:.0} ns | gso sends {} gro buffers {}",
        tx.gso_active() as u8,
        gro_on as u8,
        bytes as f64 / el / 1e9,
        n as f64 / el / 1e3,
        tst.tx_bytes as f64 / send_el / 1e9,
        100.0 * (1.0 - n as f64 / sent.max(1) as f64),
        send_cpu * 1e9 / sent.max(1) as f64,
        recv_cpu * 1e9 / n.max(1) as f64,
        tst.gso_sends,
        rst.gro_buffers,
    );
}

/// CPU time of the calling thread, seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
