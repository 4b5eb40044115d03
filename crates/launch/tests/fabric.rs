//! The emulated switch of `testing::Fabric`, for real: three hosts on 100 Mb/s ports with a
//! small buffer. A TCP stream between two hosts is held to about the link rate; two hosts
//! flooding a third with UDP overflow its port, whose drop counter rises; and dropping the
//! fabric leaves no namespace and no process. Needs root, `ip`, `tc` and `ethtool`; says
//! so and skips otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_launch::testing::{Fabric, FabricSpec, in_netns};

const RATE: u64 = 100_000_000;
const BUFFER: u32 = 32 * 1024;

fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("network namespaces need root".into());
    }
    for (tool, arg) in [("ip", "-V"), ("tc", "-V"), ("ethtool", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Some(format!("no `{tool}`"));
        }
    }
    None
}

#[test]
fn a_switch_port_holds_a_flow_to_its_rate_and_drops_an_overload() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let f = Fabric::new(FabricSpec::shaped(3, 1500, RATE, BUFFER)).expect("the fabric");
    let names = f.names.clone();
    let switch = f.switch.clone();
    let b: SocketAddr = format!("{}:5001", f.addrs[1]).parse().unwrap();

    // A TCP stream from host 0 to host 1 for 2 s: the rate the receiver sees.
    let listener = in_netns(&names[1], move || TcpListener::bind(b).unwrap())
        .join()
        .unwrap();
    let rx = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        let t0 = Instant::now();
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        n as f64 * 8.0 / t0.elapsed().as_secs_f64()
    });
    in_netns(&names[0], move || {
        let mut s = TcpStream::connect_timeout(&b, Duration::from_secs(5)).unwrap();
        let buf = vec![7u8; 1 << 16];
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            s.write_all(&buf).unwrap();
        }
    })
    .join()
    .unwrap();
    let bits = rx.join().unwrap();
    assert!(
        (0.5 * RATE as f64..1.1 * RATE as f64).contains(&bits),
        "TCP through a {RATE} bit/s port: {bits:.0} bit/s"
    );

    // Hosts 0 and 2 flood host 1 with UDP: 200 Mb/s into a 100 Mb/s port.
    let before = f.port(1).unwrap();
    let u: SocketAddr = format!("{}:5002", f.addrs[1]).parse().unwrap();
    let sink = in_netns(&names[1], move || UdpSocket::bind(u).unwrap())
        .join()
        .unwrap();
    let floods: Vec<_> = [0, 2]
        .into_iter()
        .map(|i| {
            in_netns(&names[i], move || {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                let d = [1u8; 1400];
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(1) {
                    // A full socket buffer makes send fail now and then: keep sending.
                    let _ = s.send_to(&d, u);
                }
            })
        })
        .collect();
    for h in floods {
        h.join().unwrap();
    }
    drop(sink);
    let after = f.port(1).unwrap().since(&before);
    let sent = f.ports().unwrap();
    eprintln!("TCP {bits:.0} bit/s; the overloaded port: {after:?}");
    assert!(
        after.drops > 100,
        "an overloaded port should drop: {after:?}"
    );
    assert!(after.packets > 1000, "{after:?}");
    // The host queues held their senders back instead of dropping.
    for i in [0, 2] {
        assert_eq!(f.host_queue(i).unwrap().drops, 0, "host {i}");
    }
    assert!(sent.iter().map(|p| p.packets).sum::<u64>() >= after.packets);

    // A process left running in a host goes with the fabric.
    let mut sleeper = f.command(2, "sleep").arg("600").spawn().unwrap();
    let t0 = Instant::now();
    while f.pids(2).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(f.pids(2).len(), 1);
    drop(f);
    let status = sleeper.wait().unwrap();
    assert!(!status.success(), "the sleeper was killed: {status:?}");
    let left: Vec<String> = bulkwire_launch::testing::namespaces()
        .into_iter()
        .filter(|n| *n == switch || names.contains(n))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}

/// `drop_on_arrival` loses about the share asked of the datagrams reaching a host, and
/// counts them; without `iptables` it says so and the test skips.
#[test]
fn frames_are_dropped_on_arrival_at_the_share_asked() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let f = Fabric::new(FabricSpec::unshaped(2, 1500)).expect("the fabric");
    if let Err(e) = f.drop_on_arrival(0.2) {
        eprintln!("skipped: {e}");
        return;
    }
    assert!(f.drop_on_arrival(1.5).is_err());
    let u: SocketAddr = format!("{}:5003", f.addrs[1]).parse().unwrap();
    let sink = in_netns(&f.names[1], move || UdpSocket::bind(u).unwrap())
        .join()
        .unwrap();
    sink.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    const N: u64 = 2000;
    let rx = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut got = 0u64;
        while sink.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    in_netns(&f.names[0], move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..N {
            s.send_to(&[1u8; 32], u).unwrap();
            // Slowly enough that the receiver's socket buffer never overflows.
            std::thread::sleep(Duration::from_micros(50));
        }
    })
    .join()
    .unwrap();
    let got = rx.join().unwrap();
    let dropped = f.dropped_on_arrival().unwrap();
    // 20 % of 2000: 400, with a standard deviation of 18.
    assert!((300..500).contains(&dropped), "dropped {dropped}");
    assert_eq!(got + dropped, N, "received {got}, dropped {dropped}");
}
