//! UDP transport: one non-blocking socket per rank, batched with `sendmmsg`/`recvmmsg`,
//! with UDP GSO on send and UDP GRO on receive where the kernel supports them.
//!
//! Construction takes two steps because a launcher must learn every process's bound address
//! before anyone knows its peers:
//!
//! ```no_run
//! use bulkwire_link::udp::{UdpConfig, UdpLink};
//! # fn exchange(_: std::net::SocketAddr) -> Vec<std::net::SocketAddr> { vec![] }
//! let cfg = UdpConfig::default();
//! let bound = UdpLink::bind("10.0.0.5:0".parse().unwrap(), &cfg)?;
//! let peers = exchange(bound.local_addr()); // the launcher's job: everyone's address by rank
//! let link = bound.into_link(3, peers)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Bind to a concrete address rather than a wildcard when the bound address is what peers
//! will be told: `local_addr()` of a wildcard socket is `0.0.0.0:port`.
//!
//! Why not `quinn-udp`: it sends each datagram from one contiguous buffer, while a [`Tx`]
//! is a header and a body gathered by the kernel (two iovecs), which is what lets payloads
//! leave without a copy. So `sendmmsg`/`recvmmsg` and the cmsgs are driven here with `libc`.
//!
//! Receive-side GRO caveat: the kernel hands a GRO-coalesced buffer to one receive slot and
//! truncates it if the slot is smaller. The link therefore turns the socket's `UDP_GRO` on
//! only while the caller's [`RxBatch`] slots can hold any coalesced buffer (at least the
//! largest UDP payload, 65507 bytes for IPv4 and 65527 for IPv6), and off otherwise.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::time::Duration;

use libc::c_int;
use socket2::{Domain, Socket, Type};

use crate::{Link, LinkCaps, Rank, RxBatch, Tx};

/// `setsockopt`/cmsg: segment size of a GSO send (`linux/udp.h`).
const UDP_SEGMENT: c_int = 103;
/// `setsockopt`: accept coalesced buffers; cmsg: their segment size (`linux/udp.h`).
const UDP_GRO: c_int = 104;

// Not exported by `libc` for every Linux target; values from `asm-generic/socket.h` and the
// architectures that differ.
#[cfg(any(target_arch = "mips", target_arch = "mips64"))]
const SO_SNDBUFFORCE: c_int = 31;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_SNDBUFFORCE: c_int = 0x100a;
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const SO_SNDBUFFORCE: c_int = 32;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_RCVBUFFORCE: c_int = 0x100b;
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_RCVBUFFORCE: c_int = 33;

/// Largest UDP payload over IPv4: 65535 - 20 (IP) - 8 (UDP).
pub const MAX_UDP_PAYLOAD_V4: usize = 65507;
/// Largest UDP payload over IPv6: 65535 - 8 (the payload length excludes the IPv6 header).
pub const MAX_UDP_PAYLOAD_V6: usize = 65527;
const HEADERS_V4: usize = 20 + 8;
const HEADERS_V6: usize = 40 + 8;
/// Ethernet MTU assumed when the path MTU cannot be learnt.
const FALLBACK_MTU: usize = 1500;
/// Segments per GSO send: `UDP_MAX_SEGMENTS` was 64 until Linux 6.9 (128 since); use the
/// smaller so that old kernels never see `EINVAL` for it.
const GSO_MAX_SEGMENTS: usize = 64;
/// iovecs per `sendmmsg` call (two per datagram); bounds the scratch array.
const TX_IOV_CAP: usize = 1024;
/// Room for one `UDP_SEGMENT` (u16) or `UDP_GRO` (int) cmsg.
const CMSG_BUF: usize = 32;

/// Default socket buffer request, bytes (the kernel reports double, for its bookkeeping).
pub const DEFAULT_SOCKBUF: usize = 4 << 20;
/// Default messages per `sendmmsg`/`recvmmsg`.
pub const DEFAULT_BATCH: usize = 64;

/// Settings of a [`UdpLink`]; [`UdpConfig::default`] is the built-in defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Group consecutive equal-size datagrams to one peer into one GSO send
    ///. Falls back permanently if the kernel refuses.
    pub gso: bool,
    /// Accept GRO-coalesced buffers and split them. Used only while
    /// receive slots are large enough (see the module docs).
    pub gro: bool,
    /// `SO_SNDBUF` and `SO_RCVBUF` request in bytes.
    /// As root the `*FORCE` variants lift the `net.core.[rw]mem_max` cap.
    pub sockbuf: usize,
    /// Ethernet MTU to assume for every peer instead of asking the kernel for the path MTU
    /// (e.g. 1500 or 9000). `max_datagram` is this minus IP and UDP headers.
    pub mtu: Option<usize>,
    /// Messages per `sendmmsg`/`recvmmsg` call (size of the scratch arrays).
    pub batch: usize,
}

impl Default for UdpConfig {
    fn default() -> UdpConfig {
        UdpConfig {
            // Measured on loopback with the `udp_stream` example (2 vCPUs): at 1472-byte
            // datagrams GSO+GRO cut CPU per datagram from ~1.7 us (send) / ~0.7 us (receive)
            // to ~0.35 / ~0.22 us, GSO alone to ~0.9 / ~0.75; GRO alone changes nothing
            // (loopback coalesces only GSO sends). At 64 KiB nothing can be grouped under the
            // 64 KiB IP limit, and on or off measured the same. So both default on.
            gso: true,
            gro: true,
            sockbuf: DEFAULT_SOCKBUF,
            mtu: None,
            batch: DEFAULT_BATCH,
        }
    }
}

/// Counters of a [`UdpLink`], monotonic since construction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams accepted by the kernel (a GSO send counts each segment).
    pub tx_datagrams: u64,
    /// Payload bytes accepted by the kernel.
    pub tx_bytes: u64,
    /// `sendmmsg` calls.
    pub tx_syscalls: u64,
    /// Times a send stopped early because the socket was full (`EAGAIN`/`ENOBUFS`).
    pub tx_full: u64,
    /// GSO sends (messages carrying two or more datagrams).
    pub gso_sends: u64,
    /// Datagrams that left inside GSO sends.
    pub gso_datagrams: u64,
    /// Datagrams dropped because their peer is unreachable (`ENETUNREACH`, `EHOSTUNREACH`,
    /// `ECONNREFUSED`, `EPERM` from a firewall...): counted as sent, as the network would.
    pub unreachable: u64,
    /// Datagrams the kernel refused as too large for the path (`EMSGSIZE`), dropped.
    pub oversize: u64,
    /// Datagrams received and handed to the caller.
    pub rx_datagrams: u64,
    /// Payload bytes received and handed to the caller.
    pub rx_bytes: u64,
    /// `recvmmsg` calls.
    pub rx_syscalls: u64,
    /// Received buffers that held two or more coalesced datagrams.
    pub gro_buffers: u64,
    /// Datagrams found inside such buffers.
    pub gro_datagrams: u64,
    /// Buffers dropped because they did not fit a receive slot (`MSG_TRUNC`).
    pub truncated: u64,
}

/// A peer address in the form `sendmmsg` wants, kept for the link's lifetime.
#[derive(Clone, Copy)]
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

/// One planned `sendmmsg` message: a datagram, or a GSO group of them to one peer.
#[derive(Clone, Copy, Default)]
struct Plan {
    dst: usize,
    iov_start: usize,
    iov_len: usize,
    count: usize,
    bytes: usize,
    seg: usize,
}

/// `sendmmsg`/`recvmmsg` scratch arrays, allocated once so the per-packet path does not
/// allocate. The raw pointers inside are rebuilt at every call and point into the caller's
/// buffers only for the duration of that call.
struct Scratch {
    tx_hdrs: Vec<libc::mmsghdr>,
    tx_iov: Vec<libc::iovec>,
    tx_cmsg: Vec<CmsgBuf>,
    tx_plan: Vec<Plan>,
    rx_hdrs: Vec<libc::mmsghdr>,
    rx_iov: Vec<libc::iovec>,
    rx_cmsg: Vec<CmsgBuf>,
    /// The receive headers already describe this storage, slot size, count and GRO
    /// setting; only the entries the kernel filled last time need resetting. An idle spin
    /// then costs the system call alone, not 64 headers rebuilt.
    rx_layout: Option<(usize, usize, usize, bool)>,
    rx_filled: usize,
}

// SAFETY: the raw pointers in the mmsghdr/iovec arrays are only dereferenced (by the kernel)
// inside a `send`/`recv` call that set them from borrows valid for that call; between calls
// they are dead values, so moving the link to another thread is sound.
unsafe impl Send for Scratch {}

#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_BUF]);

/// A bound UDP socket whose peers are not known yet: step one of building a [`UdpLink`].
pub struct UdpBinding {
    socket: Socket,
    local: SocketAddr,
    cfg: UdpConfig,
    sndbuf: usize,
    rcvbuf: usize,
}

impl fmt::Debug for UdpBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpBinding")
            .field("local", &self.local)
            .field("sndbuf", &self.sndbuf)
            .field("rcvbuf", &self.rcvbuf)
            .finish()
    }
}

impl UdpBinding {
    /// The address the socket is bound to (the port is the real one when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `SO_SNDBUF` obtained, as the kernel reports it (twice the usable payload room).
    pub fn sndbuf(&self) -> usize {
        self.sndbuf
    }

    /// `SO_RCVBUF` obtained, as the kernel reports it.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// Step two: installs the rank table (`peers[r]` is rank `r`'s bound address, our own
    /// included) and returns the link for rank `rank`. Learns each peer's path MTU.
    ///
    /// Fails when `rank` is outside the table, or when a peer's address family cannot be
    /// reached from this socket (an IPv6 peer from an IPv4 socket, or an IPv4 peer from an
    /// IPv6 socket bound to a specific address; a wildcard `[::]` socket reaches IPv4 peers
    /// through mapped addresses).
    pub fn into_link(self, rank: Rank, peers: Vec<SocketAddr>) -> io::Result<UdpLink> {
        if peers.len() > u32::MAX as usize || rank as usize >= peers.len() {
            return Err(invalid(format!(
                "rank {rank} outside a rank table of {} entries",
                peers.len()
            )));
        }
        let v6_socket = self.local.is_ipv6();
        let dual_stack = match self.local.ip() {
            IpAddr::V6(ip) => ip.is_unspecified() && !self.socket.only_v6().unwrap_or(true),
            IpAddr::V4(_) => false,
        };
        let mut raw = Vec::with_capacity(peers.len());
        let mut max_dgram = Vec::with_capacity(peers.len());
        let mut gso_limit = Vec::with_capacity(peers.len());
        let mut gso_seg = Vec::with_capacity(peers.len());
        let mut mtu_cache: HashMap<IpAddr, usize> = HashMap::new();
        let mut gro_min_slot = 0;
        for (r, &peer) in peers.iter().enumerate() {
            let (target, v4_path) = match (v6_socket, peer) {
                (false, SocketAddr::V4(_)) => (peer, true),
                (true, SocketAddr::V6(a)) => match a.ip().to_ipv4_mapped() {
                    Some(_) if !dual_stack => {
                        return Err(invalid(format!(
                            "rank {r}: IPv4-mapped address {peer} is unreachable from {}",
                            self.local
                        )));
                    }
                    Some(_) => (peer, true),
                    None => (peer, false),
                },
                (true, SocketAddr::V4(a)) if dual_stack => (
                    SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port()),
                    true,
                ),
                _ => {
                    return Err(invalid(format!(
                        "rank {r}: address {peer} is unreachable from a socket bound to {}",
                        self.local
                    )));
                }
            };
            raw.push(raw_addr(target));
            let (hdrs, max) = if v4_path {
                (HEADERS_V4, MAX_UDP_PAYLOAD_V4)
            } else {
                (HEADERS_V6, MAX_UDP_PAYLOAD_V6)
            };
            let pmtu = match self.cfg.mtu {
                Some(mtu) => mtu,
                None => {
                    // Probe IPv4 paths (mapped addresses included) with IP_MTU.
                    let probe = match peer {
                        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
                            None => peer,
                        },
                        SocketAddr::V4(_) => peer,
                    };
                    *mtu_cache
                        .entry(probe.ip())
                        .or_insert_with(|| path_mtu(probe).unwrap_or(FALLBACK_MTU))
                }
            };
            // What fits the path unfragmented; also the largest GSO segment the kernel
            // accepts (segment + headers must not exceed the path MTU).
            let unfragmented = pmtu.saturating_sub(hdrs).min(max);
            // A path that takes whole 64 KiB IP packets is local (loopback, or our own
            // address): any UDP datagram fits, IPv6 ones fragmented by the kernel.
            let m = if self.cfg.mtu.is_none() && pmtu >= 65535 {
                max
            } else {
                unfragmented
            };
            max_dgram.push(m);
            gso_seg.push(unfragmented);
            gso_limit.push(max);
            gro_min_slot = gro_min_slot.max(max);
        }

        let fd = self.socket.as_raw_fd();
        // GSO: kernels before 4.18 reject the option outright.
        let gso = self.cfg.gso && getsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
        let gro_supported = self.cfg.gro && setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok();
        // Turn GRO on now only if the receive slots an engine sizes from max_datagram will
        // hold any coalesced buffer; otherwise wait until a batch with big slots shows up.
        let largest = max_dgram.iter().copied().max().unwrap_or(0);
        let gro_on = gro_supported && largest >= gro_min_slot;
        if gro_supported && !gro_on {
            setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 0)?;
        }

        let batch = self.cfg.batch.clamp(1, 1024);
        // SAFETY: mmsghdr and iovec are plain C structs for which all-zero is valid.
        let zero_hdr: libc::mmsghdr = unsafe { mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        };
        let scratch = Scratch {
            tx_hdrs: vec![zero_hdr; batch],
            tx_iov: Vec::with_capacity(TX_IOV_CAP),
            tx_cmsg: vec![CmsgBuf([0; CMSG_BUF]); batch],
            tx_plan: Vec::with_capacity(batch),
            rx_hdrs: vec![zero_hdr; batch],
            rx_iov: vec![zero_iov; batch],
            rx_cmsg: vec![CmsgBuf([0; CMSG_BUF]); batch],
            rx_layout: None,
            rx_filled: 0,
        };
        Ok(UdpLink {
            fd,
            socket: self.socket,
            rank,
            local: self.local,
            peers,
            raw,
            max_dgram,
            gso_limit,
            gso_seg,
            gso,
            gro_supported,
            gro_on,
            gro_min_slot,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            batch,
            stats: UdpStats::default(),
            scratch,
        })
    }
}

/// The UDP link of one rank. Built with [`UdpLink::bind`] then [`UdpBinding::into_link`].
pub struct UdpLink {
    socket: Socket,
    fd: RawFd,
    rank: Rank,
    local: SocketAddr,
    peers: Vec<SocketAddr>,
    raw: Vec<RawAddr>,
    max_dgram: Vec<usize>,
    /// Per peer: most payload bytes in one GSO send; 0 once the kernel refused GSO to it.
    gso_limit: Vec<usize>,
    /// Per peer: largest datagram that may lead a GSO send.
    gso_seg: Vec<usize>,
    /// GSO in use (configured, supported, and not given up on).
    gso: bool,
    gro_supported: bool,
    /// Current state of the socket's `UDP_GRO` option.
    gro_on: bool,
    /// Receive slots at least this large can hold any coalesced buffer.
    gro_min_slot: usize,
    sndbuf: usize,
    rcvbuf: usize,
    batch: usize,
    stats: UdpStats,
    scratch: Scratch,
}

impl fmt::Debug for UdpLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpLink")
            .field("rank", &self.rank)
            .field("local", &self.local)
            .field("nprocs", &self.peers.len())
            .field("gso", &self.gso)
            .field("gro_on", &self.gro_on)
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpLink {
    /// Step one: binds a non-blocking UDP socket to `addr` (port 0 picks a free port) with
    /// the socket buffers of `cfg`. IPv6 wildcard sockets are dual-stack.
    pub fn bind(addr: SocketAddr, cfg: &UdpConfig) -> io::Result<UdpBinding> {
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::DGRAM.nonblocking(),
            Some(socket2::Protocol::UDP),
        )?;
        if let SocketAddr::V6(a) = addr
            && a.ip().is_unspecified()
        {
            socket.set_only_v6(false)?;
        }
        let fd = socket.as_raw_fd();
        let want = cfg.sockbuf.min(i32::MAX as usize / 2) as c_int;
        let sndbuf = set_buf(fd, SO_SNDBUFFORCE, libc::SO_SNDBUF, want)?;
        let rcvbuf = set_buf(fd, SO_RCVBUFFORCE, libc::SO_RCVBUF, want)?;
        socket.bind(&addr.into())?;
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| invalid("bound socket has no IP address".into()))?;
        Ok(UdpBinding {
            socket,
            local,
            cfg: cfg.clone(),
            sndbuf,
            rcvbuf,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Counters since construction.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// `SO_SNDBUF` obtained, as the kernel reports it (twice the usable payload room).
    pub fn sndbuf(&self) -> usize {
        self.sndbuf
    }

    /// `SO_RCVBUF` obtained, as the kernel reports it.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// Whether sends are grouped into GSO sends (false if disabled, unsupported, or
    /// abandoned after the kernel refused one).
    pub fn gso_active(&self) -> bool {
        self.gso
    }

    /// Whether the socket currently accepts GRO-coalesced buffers.
    pub fn gro_active(&self) -> bool {
        self.gro_on
    }

    /// The underlying socket (for extra options; do not make it blocking).
    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    /// Fills the tx scratch arrays with messages for the head of `batch` and returns how
    /// many. Consecutive datagrams to one peer whose sizes equal the first's (the last may
    /// be shorter) share one GSO message; the kernel splits the gathered iovec stream at
    /// the segment size, so head+body gather still works.
    fn plan_tx(&mut self, batch: &[Tx<'_>]) -> usize {
        let s = &mut self.scratch;
        s.tx_plan.clear();
        s.tx_iov.clear();
        let push_iov = |iov: &mut Vec<libc::iovec>, t: &Tx<'_>| {
            for part in [t.head, t.body] {
                if !part.is_empty() {
                    iov.push(libc::iovec {
                        iov_base: part.as_ptr() as *mut libc::c_void,
                        iov_len: part.len(),
                    });
                }
            }
        };
        let mut i = 0;
        while i < batch.len() && s.tx_plan.len() < self.batch && s.tx_iov.len() + 2 <= TX_IOV_CAP {
            let first = &batch[i];
            let dst = first.dst as usize;
            let seg = first.len();
            let limit = if self.gso && seg > 0 && seg <= self.gso_seg[dst] {
                self.gso_limit[dst]
            } else {
                0
            };
            let iov_start = s.tx_iov.len();
            push_iov(&mut s.tx_iov, first);
            let (mut count, mut bytes) = (1, seg);
            while limit > 0
                && i + count < batch.len()
                && count < GSO_MAX_SEGMENTS
                && s.tx_iov.len() + 2 <= TX_IOV_CAP
            {
                let t = &batch[i + count];
                let n = t.len();
                if t.dst as usize != dst || n == 0 || n > seg || bytes + n > limit {
                    break;
                }
                push_iov(&mut s.tx_iov, t);
                count += 1;
                bytes += n;
                if n < seg {
                    break; // a shorter datagram can only end a GSO group
                }
            }
            s.tx_plan.push(Plan {
                dst,
                iov_start,
                iov_len: s.tx_iov.len() - iov_start,
                count,
                bytes,
                seg,
            });
            i += count;
        }
        // The iovec array is complete: its pointers are stable from here on.
        let iov_base = s.tx_iov.as_mut_ptr();
        for (k, p) in s.tx_plan.iter().enumerate() {
            let h = &mut s.tx_hdrs[k].msg_hdr;
            h.msg_name = (&self.raw[p.dst].storage as *const libc::sockaddr_storage)
                .cast_mut()
                .cast();
            h.msg_namelen = self.raw[p.dst].len;
            // SAFETY: iov_start + iov_len <= tx_iov.len().
            h.msg_iov = unsafe { iov_base.add(p.iov_start) };
            h.msg_iovlen = p.iov_len as _;
            h.msg_flags = 0;
            if p.count > 1 {
                let buf = &mut s.tx_cmsg[k];
                h.msg_control = buf.0.as_mut_ptr().cast();
                // SAFETY: pure size arithmetic.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                // SAFETY: the control buffer is CMSG_BUF >= CMSG_SPACE(2) bytes, aligned
                // for cmsghdr, and described by msg_control/msg_controllen.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), p.seg as u16);
                }
            } else {
                h.msg_control = ptr::null_mut();
                h.msg_controllen = 0;
            }
            s.tx_hdrs[k].msg_len = 0;
        }
        s.tx_plan.len()
    }

    /// Sets the socket's `UDP_GRO` to suit receive slots of `slot` bytes.
    ///
    /// Switching off is not clean if coalesced buffers are already queued: the kernel then
    /// hands them over without the segment-size cmsg, so one that fits the slot arrives as
    /// one datagram with the others appended (the wire CRC rejects it) and a larger one is
    /// dropped as truncated. Only a caller that shrinks its slots mid-stream sees this; the
    /// engine sizes its slots once, from `max_datagram`, which `into_link` anticipates.
    fn tune_gro(&mut self, slot: usize) {
        let want = self.gro_supported && slot >= self.gro_min_slot;
        if want != self.gro_on {
            if setsockopt_int(self.fd, libc::SOL_UDP, UDP_GRO, want as c_int).is_ok() {
                self.gro_on = want;
            } else {
                self.gro_supported = false;
                self.gro_on = false;
            }
        }
    }
}

impl Link for UdpLink {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.peers.len() as u32
    }

    /// Intact when every peer is on this host (a loopback address, or our own): the kernel
    /// then hands datagrams over in memory, as it does shared memory, and skips the UDP
    /// checksum itself. Slots big enough for any GRO-coalesced buffer while GRO is
    /// available, so that callers who size their batches from this get its receive-side
    /// savings.
    fn capabilities(&self) -> LinkCaps {
        let me = self.local.ip();
        let largest = self.max_dgram.iter().copied().max().unwrap_or(0);
        LinkCaps {
            max_datagram: self.max_dgram.clone(),
            recv_slot: if self.gro_supported {
                largest.max(self.gro_min_slot)
            } else {
                largest
            },
            reliable: false,
            intact: (self.peers.iter()).all(|p| p.ip().is_loopback() || p.ip() == me),
            private: false,
        }
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        for t in batch {
            let Some(&max) = self.max_dgram.get(t.dst as usize) else {
                return Err(invalid(format!(
                    "destination rank {} outside a job of {}",
                    t.dst,
                    self.peers.len()
                )));
            };
            if t.len() > max {
                return Err(invalid(format!(
                    "datagram of {} bytes exceeds the {} bytes rank {} can take",
                    t.len(),
                    max,
                    t.dst
                )));
            }
        }
        let mut pos = 0;
        while pos < batch.len() {
            let n = self.plan_tx(&batch[pos..]);
            // SAFETY: the first n headers were just filled and point at live borrows of
            // `batch` and at the link's own arrays.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd,
                    self.scratch.tx_hdrs.as_mut_ptr(),
                    n as _,
                    libc::MSG_DONTWAIT,
                )
            };
            self.stats.tx_syscalls += 1;
            if r > 0 {
                for p in &self.scratch.tx_plan[..r as usize] {
                    pos += p.count;
                    self.stats.tx_datagrams += p.count as u64;
                    self.stats.tx_bytes += p.bytes as u64;
                    if p.count > 1 {
                        self.stats.gso_sends += 1;
                        self.stats.gso_datagrams += p.count as u64;
                    }
                }
                continue;
            }
            let err = io::Error::last_os_error();
            let failed = self.scratch.tx_plan[0];
            match err.raw_os_error().unwrap_or(0) {
                libc::EINTR => {}
                libc::EAGAIN | libc::ENOBUFS => {
                    self.stats.tx_full += 1;
                    break;
                }
                // The device or path cannot segment (no checksum offload, IPsec...): give
                // up on GSO for good and re-plan from the message that failed.
                libc::EIO | libc::EINVAL if failed.count > 1 => {
                    tracing::debug!(%err, "UDP GSO refused; falling back to plain sends");
                    self.gso = false;
                }
                // The segment size does not fit this peer's path MTU: no GSO to it.
                libc::EMSGSIZE if failed.count > 1 => self.gso_limit[failed.dst] = 0,
                libc::EMSGSIZE => {
                    self.stats.oversize += 1;
                    pos += 1;
                }
                e if is_unreachable(e) => {
                    self.stats.unreachable += failed.count as u64;
                    pos += failed.count;
                }
                _ if pos > 0 => break, // report what went; the error recurs on the next call
                _ => return Err(err),
            }
        }
        Ok(pos)
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        let slot = batch.slot_size();
        self.tune_gro(slot);
        let n = batch.slots().min(self.batch);
        let base = batch.storage_mut().as_mut_ptr();
        let s = &mut self.scratch;
        let layout = (base as usize, slot, n, self.gro_on);
        let rebuild = if s.rx_layout == Some(layout) {
            s.rx_filled.min(n)
        } else {
            s.rx_layout = Some(layout);
            n
        };
        for k in 0..rebuild {
            s.rx_iov[k] = libc::iovec {
                // SAFETY: slot k lies within the storage (slots * slot_size bytes).
                iov_base: unsafe { base.add(k * slot) }.cast(),
                iov_len: slot,
            };
            let h = &mut s.rx_hdrs[k].msg_hdr;
            h.msg_name = ptr::null_mut(); // the wire header names the sender
            h.msg_namelen = 0;
            h.msg_iov = &mut s.rx_iov[k];
            h.msg_iovlen = 1;
            if self.gro_on {
                h.msg_control = s.rx_cmsg[k].0.as_mut_ptr().cast();
                h.msg_controllen = CMSG_BUF as _;
            } else {
                h.msg_control = ptr::null_mut();
                h.msg_controllen = 0;
            }
            h.msg_flags = 0;
            s.rx_hdrs[k].msg_len = 0;
        }
        s.rx_filled = 0;
        let mut tries = 0;
        let got = loop {
            // SAFETY: n headers describe n disjoint slots of the batch's storage. The raw
            // system call skips glibc's cancellation-point bookkeeping, a measurable part
            // of an idle spin; this thread is never cancelled.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_recvmmsg,
                    self.fd,
                    s.rx_hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut::<libc::timespec>(),
                )
            };
            self.stats.rx_syscalls += 1;
            if r >= 0 {
                s.rx_filled = r as usize;
                break r as usize;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error().unwrap_or(0) {
                libc::EAGAIN => return Ok(0),
                libc::EINTR => {}
                // A pending ICMP error reported on the socket: it names no datagram of ours
                // to drop, so count it and read on.
                e if is_unreachable(e) => self.stats.unreachable += 1,
                _ => return Err(err),
            }
            tries += 1;
            if tries > 8 {
                return Ok(0);
            }
        };
        for k in 0..got {
            let h = &s.rx_hdrs[k];
            let len = h.msg_len as usize;
            let flags = h.msg_hdr.msg_flags;
            if flags & libc::MSG_TRUNC != 0 || (self.gro_on && flags & libc::MSG_CTRUNC != 0) {
                self.stats.truncated += 1;
                continue;
            }
            let start = k * slot;
            let seg = if self.gro_on {
                gro_segment(&h.msg_hdr)
            } else {
                0
            };
            self.stats.rx_bytes += len as u64;
            if seg == 0 || seg >= len {
                batch.push_range(start, len);
                self.stats.rx_datagrams += 1;
            } else {
                let mut off = 0;
                while off < len {
                    let l = seg.min(len - off);
                    batch.push_range(start + off, l);
                    off += l;
                }
                let pieces = len.div_ceil(seg) as u64;
                self.stats.rx_datagrams += pieces;
                self.stats.gro_buffers += 1;
                self.stats.gro_datagrams += pieces;
            }
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        crate::poll_readable(self.fd, timeout)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }
}

/// Errors that mean "this datagram's destination cannot be reached": the datagram is lost,
/// the link goes on.
fn is_unreachable(e: c_int) -> bool {
    matches!(
        e,
        libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::ENONET
            | libc::EADDRNOTAVAIL
            | libc::EPERM
            | libc::EACCES
    )
}

/// The `UDP_GRO` segment size in a received message's control data, or 0.
fn gro_segment(h: &libc::msghdr) -> usize {
    // SAFETY: walks the control data the kernel just wrote, bounded by msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>());
                return v.max(0) as usize;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

fn raw_addr(a: SocketAddr) -> RawAddr {
    let sa = socket2::SockAddr::from(a);
    // SAFETY: sockaddr_storage is plain data; we copy `sa.len()` bytes of a valid address
    // into it.
    unsafe {
        let mut storage: libc::sockaddr_storage = mem::zeroed();
        ptr::copy_nonoverlapping(
            sa.as_ptr().cast::<u8>(),
            (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
            sa.len() as usize,
        );
        RawAddr {
            storage,
            len: sa.len(),
        }
    }
}

/// The path MTU towards `peer` as the kernel's routing sees it: a connected probe socket's
/// `IP_MTU`/`IPV6_MTU` (route MTU, or the interface's).
fn path_mtu(peer: SocketAddr) -> io::Result<usize> {
    let probe = Socket::new(Domain::for_address(peer), Type::DGRAM, None)?;
    probe.connect(&peer.into())?;
    let (level, opt) = match peer {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU),
    };
    Ok(getsockopt_int(probe.as_raw_fd(), level, opt)?.max(0) as usize)
}

/// Asks for `want` bytes with the privileged option first (which ignores the sysctl cap),
/// then the ordinary one; returns what the kernel granted.
fn set_buf(fd: RawFd, force: c_int, normal: c_int, want: c_int) -> io::Result<usize> {
    if setsockopt_int(fd, libc::SOL_SOCKET, force, want).is_err() {
        setsockopt_int(fd, libc::SOL_SOCKET, normal, want)?;
    }
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, normal)?.max(0) as usize)
}

fn setsockopt_int(fd: RawFd, level: c_int, opt: c_int, v: c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const c_int).cast(),
            mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: RawFd, level: c_int, opt: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live int and its size.
    let r = unsafe { libc::getsockopt(fd, level, opt, (&mut v as *mut c_int).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}
