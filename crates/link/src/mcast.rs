//! The job's multicast group: one UDP socket joined to an IPv4 group that only this job
//! uses, for the reliable multicast of `bulkwire_protocol::mcast` (the RTFC paper's
//! network cache across hosts: a datagram written once reaches every host, as a switch,
//! or a Linux bridge, forwards a multicast frame to every port).
//!
//! - **The group** ([`group_for`]): an address in the organisation-local scope
//!   239.192.0.0/14 and a port, both from 32 bytes the caller derives from the job's
//!   secret, so two jobs meet in one group only by a 1-in-2^32 chance; and even then each
//!   drops the other's datagrams, which fail its MAC.
//! - **The socket** ([`McastLink::open`]): bound to the group's address and port (so it
//!   receives the group's datagrams and no unicast), joined on the interface the job's
//!   hosts share (`IP_ADD_MEMBERSHIP`, `IP_MULTICAST_IF`), TTL 1 unless configured (the
//!   group stays on the hosts' own segment). Loopback is on, because processes of one
//!   host are members too and hear each other only that way; each member then drops its
//!   own datagrams by their source rank ([`McastLink`] counts them apart).
//! - **Every datagram goes to the group**, whatever its destination rank: the socket has no
//!   unicast path, and the protocol's receivers drop what is addressed to another rank.
//! - **Detection** ([`McastLink::probe`], [`decide`]): every member sends probes to the
//!   group and notes whom it hears; the members then compare notes, and multicast is used
//!   only if every member heard every other (some networks and cloud VPCs drop it).
//!
//! Datagrams are kept within one Ethernet frame: a multicast datagram fragmented by IP
//! is lost whole when one of its fragments is, and a hole then costs many frames.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::{Link, LinkCaps, Rank, RxBatch, Tx};

/// Whether a job uses IP multicast for its collectives (`BULKWIRE_MCAST`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum McastMode {
    /// Used when the job spans hosts and detection finds that it reaches every member (the
    /// default).
    #[default]
    Auto,
    /// Used whenever the job has two members or more; the job fails if it does not work.
    On,
    /// Never used: no collective sends over the group.
    Off,
}

impl McastMode {
    pub fn name(self) -> &'static str {
        match self {
            McastMode::Auto => "auto",
            McastMode::On => "on",
            McastMode::Off => "off",
        }
    }
}

/// Settings of a job's multicast group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McastSettings {
    pub mode: McastMode,
    /// Hops a datagram may cross: 1 keeps it on the hosts' segment.
    pub ttl: u32,
    /// Ethernet MTU the datagrams fit in (their size is this less IP and UDP headers).
    pub mtu: usize,
    /// `SO_RCVBUF` / `SO_SNDBUF` request, bytes.
    pub sockbuf: usize,
    /// How long detection probes the group at most.
    pub probe_for: Duration,
    /// The group, instead of the one derived from the job's secret ([`group_for`]): for a
    /// network whose switches pass only some groups.
    pub group: Option<SocketAddrV4>,
}

impl Default for McastSettings {
    fn default() -> McastSettings {
        McastSettings {
            mode: McastMode::Auto,
            ttl: 1,
            mtu: 1500,
            sockbuf: crate::udp::DEFAULT_SOCKBUF,
            probe_for: Duration::from_secs(2),
            group: None,
        }
    }
}

/// The group of a job whose secret gave `seed` (32 bytes derived from it for this use
/// alone): an address in 239.192.0.0/14 (organisation-local scope, RFC 2365) and a port
/// from 20000 to 59999, away from the usual ephemeral range's start.
pub fn group_for(seed: &[u8; 32]) -> SocketAddrV4 {
    let a = u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]);
    // 18 bits of host part under 239.192.0.0/14; .0 and .255 endings avoided, which some
    // switches treat specially.
    let host = (a & 0x3_ffff).clamp(1, 0x3_fffe);
    let ip = Ipv4Addr::from(0xefc0_0000u32 | host);
    let p = u16::from_le_bytes([seed[4], seed[5]]);
    SocketAddrV4::new(ip, 20_000 + p % 40_000)
}

/// Counters of a [`McastLink`], monotonic since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastStats {
    /// Datagrams and bytes sent to the group.
    pub tx_datagrams: u64,
    pub tx_bytes: u64,
    /// Sends refused because the socket's buffer was full (`EAGAIN`, `ENOBUFS`).
    pub tx_full: u64,
    /// Datagrams and bytes received from other members (or anyone: not yet checked).
    pub rx_datagrams: u64,
    pub rx_bytes: u64,
    /// Our own datagrams, looped back by the host and dropped.
    pub looped: u64,
}

/// A job's multicast socket (see the module's documentation). As a [`Link`], every
/// datagram goes to the group whatever its `dst`, and what arrives is every member's.
pub struct McastLink {
    sock: Socket,
    group: SocketAddrV4,
    iface: Ipv4Addr,
    rank: Rank,
    nprocs: u32,
    max: usize,
    stats: McastStats,
}

impl std::fmt::Debug for McastLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McastLink")
            .field("group", &self.group)
            .field("iface", &self.iface)
            .field("rank", &self.rank)
            .finish()
    }
}

/// Where a rank's number sits in a datagram (the wire header's `src`), for dropping our
/// own datagrams before anyone decodes them.
const SRC_AT: usize = 12;

impl McastLink {
    /// Joins `group` on the interface with address `iface` as member `rank` of `nprocs`.
    pub fn open(
        group: SocketAddrV4,
        iface: Ipv4Addr,
        rank: Rank,
        nprocs: u32,
        s: &McastSettings,
    ) -> io::Result<McastLink> {
        if !group.ip().is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a multicast address", group.ip()),
            ));
        }
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        // Every member on this host binds the same group and port.
        sock.set_reuse_address(true)?;
        sock.bind(&SocketAddr::V4(group).into())?;
        sock.join_multicast_v4(group.ip(), &iface)?;
        sock.set_multicast_if_v4(&iface)?;
        sock.set_multicast_ttl_v4(s.ttl)?;
        sock.set_multicast_loop_v4(true)?;
        sock.set_nonblocking(true)?;
        // Best effort: the kernel caps the request at net.core.[rw]mem_max.
        let _ = sock.set_recv_buffer_size(s.sockbuf);
        let _ = sock.set_send_buffer_size(s.sockbuf);
        Ok(McastLink {
            sock,
            group,
            iface,
            rank,
            nprocs,
            max: s.mtu.saturating_sub(28).max(576 - 28),
            stats: McastStats::default(),
        })
    }

    pub fn group(&self) -> SocketAddrV4 {
        self.group
    }

    pub fn iface(&self) -> Ipv4Addr {
        self.iface
    }

    pub fn stats(&self) -> McastStats {
        self.stats
    }

    /// Largest datagram sent.
    pub fn max_datagram(&self) -> usize {
        self.max
    }

    /// Sends one datagram, `head` then `body`, to the group; false when the socket is full.
    pub fn send_one(&mut self, head: &[u8], body: &[u8]) -> io::Result<bool> {
        let to = SocketAddr::V4(self.group).into();
        match self
            .sock
            .send_to_vectored(&[IoSlice::new(head), IoSlice::new(body)], &to)
        {
            Ok(n) => {
                self.stats.tx_datagrams += 1;
                self.stats.tx_bytes += n as u64;
                Ok(true)
            }
            Err(e) if full(&e) => {
                self.stats.tx_full += 1;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Receives one datagram from another member into `buf`, if one is waiting: its
    /// length. Our own, looped back, are dropped on the way.
    pub fn recv_one(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the kernel only writes
            // initialised bytes into the buffer, which is already initialised anyway.
            let raw = unsafe {
                std::slice::from_raw_parts_mut(
                    buf.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                    buf.len(),
                )
            };
            let n = match self.sock.recv(raw) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n >= SRC_AT + 4
                && u32::from_le_bytes([
                    buf[SRC_AT],
                    buf[SRC_AT + 1],
                    buf[SRC_AT + 2],
                    buf[SRC_AT + 3],
                ]) == self.rank
            {
                self.stats.looped += 1;
                continue;
            }
            self.stats.rx_datagrams += 1;
            self.stats.rx_bytes += n as u64;
            return Ok(Some(n));
        }
    }

    /// Detection: sends `hello` (this member's probe, which `who` recognises) to the group
    /// every few milliseconds for `for_`, and notes whom it hears meanwhile: `who` says
    /// which member a datagram is a probe of, `None` for anything else (including what
    /// fails the job's MAC). Returns, per rank, whether it was heard (ourselves included).
    /// Every member must have opened its socket before any probes (a rendezvous between
    /// the two): probes then wait in the socket's buffer for a member that starts late.
    pub fn probe(
        &mut self,
        hello: &[u8],
        who: &mut dyn FnMut(&[u8]) -> Option<Rank>,
        for_: Duration,
    ) -> io::Result<Vec<bool>> {
        let mut heard = vec![false; self.nprocs as usize];
        if let Some(me) = heard.get_mut(self.rank as usize) {
            *me = true;
        }
        let mut buf = vec![0u8; 65536];
        let start = Instant::now();
        let every = Duration::from_millis(5);
        let mut next = start;
        while start.elapsed() < for_ {
            if Instant::now() >= next {
                self.send_one(hello, &[])?;
                next += every;
            }
            while let Some(n) = self.recv_one(&mut buf)? {
                if let Some(r) = who(&buf[..n])
                    && let Some(h) = heard.get_mut(r as usize)
                {
                    *h = true;
                }
            }
            if heard.iter().all(|&h| h) && next > start + 2 * every {
                // Everyone heard; our own probes, sent after every member had joined,
                // wait in theirs sockets.
                break;
            }
            crate::poll_readable(self.sock.as_raw_fd(), Some(every / 2))?;
        }
        Ok(heard)
    }
}

fn full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// What the members' notes from [`McastLink::probe`] (`heard[i][j]`: member `i` heard
/// member `j`) say: `Ok` when every member heard every other, else why not, in one line.
pub fn decide(heard: &[Vec<bool>], group: SocketAddrV4) -> Result<(), String> {
    let n = heard.len();
    let mut deaf = Vec::new();
    for (i, h) in heard.iter().enumerate() {
        let missed: Vec<String> = (0..n)
            .filter(|&j| j != i && !h.get(j).copied().unwrap_or(false))
            .map(|j| j.to_string())
            .collect();
        if !missed.is_empty() {
            deaf.push(format!("rank {i} heard nothing from {}", missed.join(", ")));
        }
    }
    if deaf.is_empty() {
        return Ok(());
    }
    let shown = deaf.len().min(3);
    let more = if deaf.len() > shown {
        format!(" and {} more", deaf.len() - shown)
    } else {
        String::new()
    };
    Err(format!(
        "multicast group {group} does not reach every member ({}{more}): the network drops \
         IP multicast",
        deaf[..shown].join("; ")
    ))
}

impl Link for McastLink {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    fn capabilities(&self) -> LinkCaps {
        LinkCaps::lossy(self.nprocs, self.max)
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        for (i, t) in batch.iter().enumerate() {
            if !self.send_one(t.head, t.body)? {
                return Ok(i);
            }
        }
        Ok(batch.len())
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        while !batch.is_full() {
            let slot = batch.len();
            let Some(n) = self.recv_one(batch.slot_mut(slot))? else {
                break;
            };
            batch.push_slot(slot, n);
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        crate::poll_readable(self.sock.as_raw_fd(), timeout)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.sock.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_organisation_local_and_spread() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000u32 {
            let mut seed = [0u8; 32];
            seed[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            seed[4..8].copy_from_slice(&i.wrapping_mul(40_503).to_le_bytes());
            let g = group_for(&seed);
            let o = g.ip().octets();
            assert_eq!((o[0], o[1] & 0xfc), (239, 192), "{g}");
            assert!((20_000..60_000).contains(&g.port()));
            seen.insert(g);
        }
        assert!(seen.len() > 990);
        assert_eq!(group_for(&[0; 32]).ip(), &Ipv4Addr::new(239, 192, 0, 1));
        assert_eq!(
            group_for(&[0xff; 32]).ip(),
            &Ipv4Addr::new(239, 195, 255, 254)
        );
    }

    #[test]
    fn decide_names_who_heard_whom() {
        let g = SocketAddrV4::new(Ipv4Addr::new(239, 192, 0, 9), 30000);
        assert_eq!(
            decide(&[vec![true; 3], vec![true; 3], vec![true; 3]], g),
            Ok(())
        );
        let e = decide(
            &[
                vec![true, false, false],
                vec![true, true, true],
                vec![true, true, true],
            ],
            g,
        )
        .unwrap_err();
        assert!(e.contains("rank 0 heard nothing from 1, 2"), "{e}");
        assert!(!e.contains('\n'));
    }

    /// Three members on the loopback interface: each hears the others' datagrams once
    /// and never its own; probing finds that the group works.
    #[test]
    fn members_on_loopback_hear_each_other_but_not_themselves() {
        let lo = Ipv4Addr::LOCALHOST;
        let mut seed = [7u8; 32];
        seed[0] = std::process::id() as u8;
        seed[4] = (std::process::id() >> 8) as u8;
        let g = group_for(&seed);
        let s = McastSettings::default();
        let mut m: Vec<McastLink> = match (0..3)
            .map(|r| McastLink::open(g, lo, r, 3, &s))
            .collect::<io::Result<_>>()
        {
            Ok(m) => m,
            Err(e) => {
                eprintln!("skipped: no multicast on loopback here ({e})");
                return;
            }
        };
        let mut head = [0u8; 64];
        head[SRC_AT..SRC_AT + 4].copy_from_slice(&1u32.to_le_bytes());
        assert!(m[1].send_one(&head, b"payload").unwrap());
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got = [0; 3];
        while Instant::now() < deadline && got != [1, 0, 1] {
            for (i, l) in m.iter_mut().enumerate() {
                if let Some(n) = l.recv_one(&mut buf).unwrap() {
                    assert_eq!(&buf[64..n], b"payload");
                    got[i] += 1;
                }
            }
        }
        assert_eq!(got, [1, 0, 1]);
        assert_eq!(m[1].stats().looped, 1);
        assert_eq!(m[0].stats().rx_datagrams, 1);

        // Probing, each member on its own thread as in a job.
        let notes: Vec<Vec<bool>> = std::thread::scope(|sc| {
            let hs: Vec<_> = m
                .iter_mut()
                .enumerate()
                .map(|(r, l)| {
                    sc.spawn(move || {
                        let mut hello = [0u8; 64];
                        hello[..4].copy_from_slice(b"PRB!");
                        hello[SRC_AT..SRC_AT + 4].copy_from_slice(&(r as u32).to_le_bytes());
                        let mut who = |d: &[u8]| {
                            (d.len() == 64 && &d[..4] == b"PRB!").then(|| {
                                u32::from_le_bytes(d[SRC_AT..SRC_AT + 4].try_into().unwrap())
                            })
                        };
                        l.probe(&hello, &mut who, Duration::from_millis(300))
                            .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(decide(&notes, g), Ok(()), "{notes:?}");
    }
}
