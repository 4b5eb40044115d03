//! Kernel TCP in Riesen & Maccabe's error-rate experiment. Two network namespaces, each
//! with a TUN device, are joined by a relay of this process: two threads move every IP
//! packet from one device to the other, and drop it with the probability that an
//! Ethernet frame of its length holds at least one bit error at the given rate (a
//! corrupted frame fails its checksum and is lost, which is all a bit error can do to
//! TCP). The devices offer no segmentation offload, so every packet the relay sees is one
//! frame of at most the MTU (9000 bytes, as on the simulated network).
//!
//! The namespaces are made with `unshare` by threads of this process and held by file
//! descriptors, so nothing outlives the experiment and no tool (`ip`, `iptables`) is
//! needed: only the right to make namespaces and devices (root, or `CAP_SYS_ADMIN` and
//! `CAP_NET_ADMIN`) and the kernel's TUN driver (`/dev/net/tun`). [`tcp_error_rate`] says
//! which is missing.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bulkwire_engine::tcp::establish;
use bulkwire_engine::{Event, TcpConfig, TcpTransport, Transport, WaitPolicy};
use bytes::Bytes;

use crate::errors::{ErrorCurve, ErrorPoint, ErrorRateConfig};
use crate::stats::Summary;

/// MTU of the devices: jumbo frames, like the simulated network's.
const MTU: i32 = 9000;
/// Bytes an Ethernet frame adds to its IP packet (header and frame check sequence).
const FRAME_OVERHEAD: usize = 18;

/// The probability that a frame carrying an IP packet of `len` bytes holds a bit error
/// at bit-error rate `ber`.
pub fn frame_error(ber: f64, len: usize) -> f64 {
    if ber <= 0.0 {
        return 0.0;
    }
    let bits = 8.0 * (len + FRAME_OVERHEAD) as f64;
    (1.0 - (1.0 - ber).powf(bits)).clamp(0.0, 1.0)
}

/// What the relay shares with its owner.
struct Shared {
    /// The bit-error rate, as `f64` bits.
    ber: AtomicU64,
    dropped: AtomicU64,
    stop: AtomicBool,
}

/// Two namespaces joined by the dropping relay; everything is removed on drop.
pub struct NetnsPair {
    pub addrs: [Ipv4Addr; 2],
    /// Each namespace, held open so that threads can enter it.
    ns: [File; 2],
    shared: Arc<Shared>,
    relays: Vec<JoinHandle<()>>,
}

/// `Err` with what failed and the OS error.
fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// An `ifreq` naming `name`.
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data (a name and a union of plain fields): all zeros is valid.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    r
}

/// Runs the interface ioctl `req` on `r` through `sock`.
fn ioctl(
    sock: &OwnedFd,
    req: libc::c_ulong,
    r: &mut libc::ifreq,
    what: &str,
) -> Result<(), String> {
    // SAFETY: `req` is an interface request taking a `struct ifreq`, which `r` is, valid
    // and exclusively borrowed for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), req as _, r as *mut libc::ifreq) } < 0 {
        return Err(os_err(what));
    }
    Ok(())
}

/// Sets `name`'s flags to up and running.
fn up(sock: &OwnedFd, name: &str) -> Result<(), String> {
    let mut r = ifreq(name);
    r.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    ioctl(
        sock,
        libc::SIOCSIFFLAGS,
        &mut r,
        &format!("bringing {name} up"),
    )
}

/// `addr` as the `sockaddr` of an `ifreq`.
fn sockaddr(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux, and an AF_INET
    // sockaddr is read as a sockaddr_in by the kernel.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Makes a network namespace for the calling thread, with `lo` up and a TUN device
/// `bw0` holding `addr`/24 (MTU 9000, no offloads): the device's file and the namespace.
fn make_namespace(addr: Ipv4Addr) -> Result<(File, File), String> {
    // SAFETY: unshare has no memory preconditions; CLONE_NEWNET moves only this thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "{} (making network namespaces needs root, or CAP_SYS_ADMIN and CAP_NET_ADMIN)",
            os_err("unshare(CLONE_NEWNET)")
        ));
    }
    let ns = File::open("/proc/thread-self/ns/net").map_err(|e| format!("its namespace: {e}"))?;
    let tun = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| format!("/dev/net/tun: {e} (the kernel's TUN driver is needed)"))?;
    let mut r = ifreq("bw0");
    r.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF takes a `struct ifreq`, which `r` is, on a descriptor of
    // /dev/net/tun we own.
    if unsafe {
        libc::ioctl(
            tun.as_raw_fd(),
            libc::TUNSETIFF as _,
            &mut r as *mut libc::ifreq,
        )
    } < 0
    {
        return Err(os_err("TUNSETIFF on /dev/net/tun"));
    }
    // SAFETY: socket has no memory preconditions; the descriptor is owned at once.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(os_err("socket for interface requests"));
    }
    // SAFETY: `raw` is a descriptor we just opened and nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    up(&sock, "lo")?;
    let mut r = ifreq("bw0");
    r.ifr_ifru.ifru_addr = sockaddr(addr);
    ioctl(&sock, libc::SIOCSIFADDR, &mut r, "setting bw0's address")?;
    let mut r = ifreq("bw0");
    r.ifr_ifru.ifru_netmask = sockaddr(Ipv4Addr::new(255, 255, 255, 0));
    ioctl(&sock, libc::SIOCSIFNETMASK, &mut r, "setting bw0's netmask")?;
    let mut r = ifreq("bw0");
    r.ifr_ifru.ifru_mtu = MTU;
    ioctl(&sock, libc::SIOCSIFMTU, &mut r, "setting bw0's MTU")?;
    up(&sock, "bw0")?;
    Ok((tun, ns))
}

/// A small deterministic generator (splitmix64) for the relay's drops.
struct Draw(u64);

impl Draw {
    /// Uniform in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / 2f64.powi(64)
    }
}

/// Waits up to 100 ms for `f` to be readable.
fn readable(f: &File) -> bool {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, exclusively borrowed for the call.
    unsafe { libc::poll(&mut p, 1, 100) > 0 }
}

/// Moves packets from `from` to `to` until told to stop, dropping as `shared` says.
fn relay(mut from: File, mut to: File, shared: Arc<Shared>, seed: u64) {
    let mut buf = vec![0u8; 65536];
    let mut draw = Draw(seed);
    while !shared.stop.load(Ordering::Relaxed) {
        if !readable(&from) {
            continue;
        }
        let Ok(n) = from.read(&mut buf) else { continue };
        let ber = f64::from_bits(shared.ber.load(Ordering::Relaxed));
        if draw.next() < frame_error(ber, n) {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // A packet the other side cannot take is lost, as on a wire.
        let _ = to.write(&buf[..n]);
    }
}

impl NetnsPair {
    /// Creates the two namespaces and starts the relay (no errors injected yet).
    pub fn create() -> Result<NetnsPair, String> {
        let net = 16 + std::process::id() % 200;
        let addrs = [
            Ipv4Addr::new(10, 201, net as u8, 1),
            Ipv4Addr::new(10, 201, net as u8, 2),
        ];
        let mut tuns = Vec::new();
        let mut nss = Vec::new();
        for a in addrs {
            let (tun, ns) = std::thread::spawn(move || make_namespace(a))
                .join()
                .map_err(|_| "namespace thread panicked".to_string())??;
            tuns.push(tun);
            nss.push(ns);
        }
        let shared = Arc::new(Shared {
            ber: AtomicU64::new(0f64.to_bits()),
            dropped: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let dup = |f: &File| f.try_clone().map_err(|e| format!("the TUN device: {e}"));
        let (a, b) = (tuns.remove(0), tuns.remove(0));
        let mut relays = Vec::new();
        for (i, (from, to)) in [(dup(&a)?, dup(&b)?), (b, a)].into_iter().enumerate() {
            let s = shared.clone();
            relays.push(std::thread::spawn(move || {
                relay(from, to, s, 0xB17E + i as u64)
            }));
        }
        let (n0, n1) = (nss.remove(0), nss.remove(0));
        Ok(NetnsPair {
            addrs,
            ns: [n0, n1],
            shared,
            relays,
        })
    }

    /// Drops packets from now on as bit errors at `ber` would.
    pub fn set_ber(&self, ber: f64) {
        self.shared.ber.store(ber.to_bits(), Ordering::Relaxed);
    }

    /// Packets dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Runs `f` on a new thread inside namespace `i`: sockets it creates belong there.
    fn within<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> Result<JoinHandle<std::io::Result<T>>, String> {
        let ns = self.ns[i]
            .try_clone()
            .map_err(|e| format!("namespace {i}: {e}"))?;
        Ok(std::thread::spawn(move || {
            // SAFETY: setns on a namespace descriptor we hold; it moves only this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        }))
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for r in self.relays.drain(..) {
            let _ = r.join();
        }
    }
}

/// What a thread in a namespace returned.
fn joined<T>(h: JoinHandle<std::io::Result<T>>) -> Result<T, String> {
    h.join()
        .map_err(|_| "namespace thread panicked".to_string())?
        .map_err(|e| e.to_string())
}

/// Two TCP ranks, rank 0 in the pair's first namespace and rank 1 in the second.
fn connect(pair: &NetnsPair) -> Result<(TcpTransport, TcpTransport), String> {
    let e = |e: std::io::Error| e.to_string();
    let mut listeners = Vec::new();
    for (i, ip) in pair.addrs.into_iter().enumerate() {
        listeners.push(joined(pair.within(i, move || TcpListener::bind((ip, 0)))?)?);
    }
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr().map_err(e))
        .collect::<Result<_, _>>()?;
    let mut hs = Vec::new();
    let secret = bulkwire_launch::Secret::generate();
    for (i, l) in listeners.into_iter().enumerate() {
        let (addrs, secret) = (addrs.clone(), secret.clone());
        hs.push(pair.within(i, move || {
            establish(i as u32, l, &addrs, &secret, Duration::from_secs(20))
        })?);
    }
    let mut ts = Vec::new();
    for (i, h) in hs.into_iter().enumerate() {
        let streams = joined(h)?;
        let policy = WaitPolicy::for_host(2);
        ts.push(TcpTransport::new(i as u32, streams, TcpConfig::default(), policy).map_err(e)?);
    }
    let b = ts.pop().ok_or("no transport")?;
    let a = ts.pop().ok_or("no transport")?;
    Ok((a, b))
}

/// Riesen & Maccabe's client/server experiment over kernel TCP between two namespaces
/// (see the module). `cfg.limit` bounds each request in real time; `cfg.net` is not used.
pub fn tcp_error_rate(cfg: &ErrorRateConfig) -> Result<ErrorCurve, String> {
    let pair = NetnsPair::create()?;
    let (mut client, server) = connect(&pair)?;
    let limit = Duration::from_nanos(cfg.limit);
    let reply = Bytes::from(vec![0x22u8; cfg.reply_size]);
    // The server answers every request until it receives an empty message.
    let srv = std::thread::spawn(move || {
        let mut t = server;
        loop {
            match t.next_event(Some(Duration::from_secs(3600))) {
                Ok(Event::Message { data, .. }) if data.is_empty() => return,
                Ok(Event::Message { .. }) => {
                    if t.send(0, reply.clone(), false).is_err() {
                        return;
                    }
                }
                Ok(Event::PeerDead { .. }) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let req = Bytes::from(vec![0x11u8; cfg.request_size]);
    let mut points = Vec::new();
    for &ber in &cfg.bers {
        pair.set_ber(ber);
        let (r0, d0) = (client.peer_stats(1).retransmits, pair.dropped());
        let mut waits = Vec::new();
        let mut unanswered = 0;
        for _ in 0..cfg.requests {
            let t0 = Instant::now();
            client
                .send(1, req.clone(), false)
                .map_err(|e| e.to_string())?;
            let r = client.wait_for(Some(limit), |t| match t.poll_event() {
                Some(Event::Message { .. }) => Some(true),
                Some(Event::PeerDead { .. }) => Some(false),
                _ => None,
            });
            match r {
                Ok(true) => waits.push(t0.elapsed().as_secs_f64()),
                _ => {
                    unanswered += 1;
                    break;
                }
            }
        }
        points.push(ErrorPoint {
            ber,
            wait: (!waits.is_empty()).then(|| Summary::of(&waits)),
            answered: waits.len(),
            unanswered,
            retransmits: client.peer_stats(1).retransmits - r0,
            timeouts: 0,
            damaged: pair.dropped() - d0,
        });
        // The connection is stuck behind an unanswered request: later rates would
        // measure the backlog, not the rate.
        if unanswered > 0 {
            break;
        }
    }
    pair.set_ber(0.0);
    let _ = client.send(1, Bytes::new(), false);
    let _ = client.flush(Some(Duration::from_secs(5)));
    drop(client);
    let _ = srv.join();
    Ok(ErrorCurve {
        stack: "tcp".into(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_fail_with_the_probability_of_a_bit_error() {
        assert_eq!(frame_error(0.0, 9000), 0.0);
        // One bit error expected per 1e6 bits: a 9018-byte frame fails about 7 % of the
        // time, a 100-byte one about 0.1 %.
        let big = frame_error(1e-6, 9000);
        assert!((big - (1.0 - (-0.072144f64).exp())).abs() < 1e-4, "{big}");
        let small = frame_error(1e-6, 100 - FRAME_OVERHEAD);
        assert!((small - 8e-4).abs() < 1e-6, "{small}");
        assert_eq!(frame_error(1.0, 1), 1.0);
    }

    #[test]
    fn draws_are_uniform_enough() {
        let mut d = Draw(1);
        let n = 100_000;
        let below = (0..n).filter(|_| d.next() < 0.1).count();
        assert!((9_000..11_000).contains(&below), "{below}");
    }
}
