//! Shared memory between the processes of a job on one host (the Southampton paper's user-level path):
//! one single-producer/single-consumer ring per ordered pair of processes, in one segment
//! ([`crate::segment`]), with no system call on the fast path.
//!
//! # Layout (the caller's region of the segment; `n` processes, rings of `cap` bytes)
//!
//! ```text
//! n x 128 B        per process: its "sleeping" flag (own 128-byte block)
//! n*n rings        ring(s -> d) at procs_end + (s*n + d) * (128 + cap):
//!   +0    head     bytes ever consumed by d (u64; only d writes it)
//!   +128  data     cap bytes, cap a power of two
//! ```
//!
//! The head is a free-running byte counter (2^64 bytes never wrap); positions in `data` are
//! `counter & (cap - 1)`.
//!
//! A record is an 8-byte header (`len` in the low 32 bits, a marker in the high 32) and the
//! datagram, padded to a multiple of 64 bytes, so every record starts on a cache line.
//! Records wrap around the end of `data` (a split record costs the consumer a second
//! `memcpy`, not a wasted gap); the header never splits.
//!
//! # The header is the signal
//!
//! There is no shared tail counter: the consumer polls the header word at its head, and a
//! record is there when that word is not zero. The producer keeps the word at its own tail
//! zero: the header slot just past a record (the next record's) is zero before the
//! record's header is stored with release ordering. The consumer loads it with acquire
//! ordering, so it sees the datagram and the zeroed slot after it. The region starts
//! zeroed (a fresh `memfd`), and the producer never fills the ring to the last byte, so
//! the slot past its tail is always free.
//!
//! Why: a small message then moves between the cores in the lines the consumer was already
//! polling, where a shared tail counter was one more line to fetch, before the record,
//! for every message. Open MPI's vader signals with the header too, in its "fast boxes".
//!
//! The producer zeroes the slots ahead of time when it has nothing else to do: it keeps
//! every 64-byte slot start from its tail to `zeroed` at zero, and once less than 1 KiB
//! of them is left, the next receive that finds nothing twice in a row with no send
//! between (a wait, not a stream) zeroes them up to 2 KiB past the tail, within the free
//! space only. A small message's header store then waits for no other line. Zeroing the
//! next slot just before the header, as a record that runs past `zeroed` (in a stream, or
//! a large one) still does, costs a transfer of that line from the consumer's cache, in
//! order before the header: 13 % of an 8-byte round trip here. In a stream the next
//! slot is still zeroed just before the header: zeroing ahead on every send made
//! 128-byte messages 13 % slower, and so did leaving slots that were already zero.
//!
//! # Fast path
//!
//! `send`: compare against a cached head (re-read from shared memory only when the cached
//! value says "full"), write datagram (and the next slot unless zeroed ahead) and header.
//! `recv`: read records while headers are set, publish the head once per batch. Loads,
//! stores and `memcpy`: no system call, no locked instruction per datagram. Each side
//! keeps its own counter privately and never reads it back from shared memory.
//!
//! # Sleeping and the doorbell
//!
//! A receiver about to block sets its flag in the segment, issues a full fence, and re-checks
//! every incoming ring ([`Link::prepare_sleep`]); a sender, after storing headers, issues a
//! full fence and reads the flags of the processes it wrote to. This is Dekker's pattern:
//! either the sender sees the flag or the receiver sees the data, so no wake-up is lost. A
//! sender that sees the flag clears it with a swap (only the one that wins rings, so a burst
//! of senders costs one system call) and rings the receiver's doorbell: a byte to its UNIX
//! datagram socket, which is the link's [`Link::poll_fd`].
//!
//! The doorbell sockets are **autobound** in the abstract namespace (the kernel picks a
//! unique name; no file to clean up, no collision between jobs, nothing derived from a
//! cookie that another job could share) and the names travel in the segment's second
//! rendezvous round. An eventfd would have to be passed with SCM_RIGHTS over a connection we
//! do not have (and cannot be reopened through /proc). A stray datagram from another process
//! on the host can only cause a spurious wake-up, which [`Link::wait`] allows.
//!
//! # Trust
//!
//! Offsets come from the layout each process computes itself. Counters and record headers
//! read from the segment are validated (a head beyond our tail or more than `cap` behind it,
//! a record longer than the largest datagram, a bad marker): the ring is then marked broken and
//! abandoned (its datagrams count as lost, as on a dead network path), never used to index
//! memory. Every index is masked into the ring.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

use crate::segment::{HostGroup, LINE, Rendezvous, Segment};
use crate::{Link, LinkCaps, Rank, RxBatch, Tx};

/// Name of the link's segment (tells it apart from other segments of the job).
const SEGMENT_NAME: &str = "shm-link";
/// High 32 bits of every record header.
const MARK: u32 = u32::from_le_bytes(*b"bwrc");
/// Bytes of a record header.
const REC_HDR: usize = 8;
/// Records start on a cache line (see the module docs).
const REC_ALIGN: usize = 64;
/// The producer zeroes the header slots this far past its tail ahead of time, when it is
/// idle, once fewer than [`ZERO_LOW`] bytes of them are left (see the module docs).
const ZERO_AHEAD: u64 = 2048;
const ZERO_LOW: u64 = 1024;

/// Ring bytes a record of `len` datagram bytes takes.
#[inline(always)]
fn record_bytes(len: usize) -> u64 {
    (REC_HDR + len).next_multiple_of(REC_ALIGN) as u64
}
/// Smallest and largest ring.
pub const MIN_RING: usize = 4096;
/// Smallest datagram: a packet is the protocols' 64-byte header and at least one byte of
/// data (every message, barriers and other control messages included, is cut into
/// packets of what a datagram leaves after the header, so one byte is enough; a smaller
/// datagram could carry no packet at all).
pub const MIN_DATAGRAM: usize = 65;
pub const MAX_RING: usize = 1 << 30;

/// Sizes of a [`ShmLink`]. Every process of a host must use the same (checked at creation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each ring's data area (a power of two).
    pub ring_bytes: usize,
    /// Largest datagram (at most a quarter of the ring, so several are in flight).
    pub max_datagram: usize,
}

impl ShmConfig {
    /// The default for `n` processes on the host: rings of 1 MiB, smaller when there are
    /// many processes (all rings together stay within 256 MiB, at least 64 KiB each), and
    /// datagrams of 64 KiB or a quarter of the ring.
    pub fn for_procs(n: usize) -> ShmConfig {
        let n2 = n.max(1).saturating_mul(n.max(1));
        let budget = (256usize << 20) / n2;
        let ring = if budget >= 1 << 20 {
            1 << 20
        } else {
            // Largest power of two within the budget, at least 64 KiB.
            (1usize << (usize::BITS - 1 - budget.max(1).leading_zeros())).max(64 << 10)
        };
        ShmConfig {
            ring_bytes: ring,
            max_datagram: (64 << 10).min(ring / 4),
        }
    }

    /// Checks the sizes: ring a power of two in [4 KiB, 1 GiB], datagram in
    /// [[`MIN_DATAGRAM`], ring/4].
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if !self.ring_bytes.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&self.ring_bytes) {
            return bad(format!(
                "shared-memory ring of {} bytes: must be a power of two from {MIN_RING} to {MAX_RING}",
                self.ring_bytes
            ));
        }
        if self.max_datagram < MIN_DATAGRAM || self.max_datagram > self.ring_bytes / 4 {
            return bad(format!(
                "shared-memory datagram of {} bytes: must be from {MIN_DATAGRAM} to a quarter \
                 of the ring ({})",
                self.max_datagram,
                self.ring_bytes / 4
            ));
        }
        Ok(())
    }
}

/// Sizes the user asked for, before the number of processes on the host is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmSizes {
    pub ring_bytes: Option<usize>,
    pub max_datagram: Option<usize>,
}

impl ShmSizes {
    /// The configuration for `n` processes on the host: the defaults of
    /// [`ShmConfig::for_procs`] with these overrides, validated.
    pub fn resolve(&self, n: usize) -> io::Result<ShmConfig> {
        let mut c = ShmConfig::for_procs(n);
        if let Some(r) = self.ring_bytes {
            c.ring_bytes = r;
            c.max_datagram = c.max_datagram.min(r / 4);
        }
        if let Some(d) = self.max_datagram {
            c.max_datagram = d;
        }
        c.validate()?;
        Ok(c)
    }
}

/// Where everything is in the caller's region of the segment (offsets from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmLayout {
    /// Processes on the host.
    pub n: usize,
    /// Bytes of each ring's data area.
    pub cap: usize,
}

/// Offsets of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingOffsets {
    pub head: usize,
    pub data: usize,
}

impl ShmLayout {
    fn procs_bytes(&self) -> usize {
        self.n * LINE
    }

    fn ring_stride(&self) -> usize {
        LINE + self.cap
    }

    /// Offset of process `i`'s sleeping flag.
    pub fn sleep_flag(&self, i: usize) -> usize {
        assert!(i < self.n);
        i * LINE
    }

    /// Offsets of the ring from process `s` to process `d` (indices in the host group).
    pub fn ring(&self, s: usize, d: usize) -> RingOffsets {
        assert!(s < self.n && d < self.n);
        let base = self.procs_bytes() + (s * self.n + d) * self.ring_stride();
        RingOffsets {
            head: base,
            data: base + LINE,
        }
    }

    /// Bytes of the whole region, or `None` on overflow.
    pub fn total(&self) -> Option<usize> {
        self.n
            .checked_mul(self.n)?
            .checked_mul(self.ring_stride())?
            .checked_add(self.procs_bytes())
    }
}

/// Counters of a [`ShmLink`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmStats {
    pub tx_datagrams: u64,
    pub rx_datagrams: u64,
    /// `send` calls that stopped early on a full ring.
    pub tx_full: u64,
    /// Doorbells rung (system calls on the send side).
    pub doorbells: u64,
    /// Times this process advertised that it sleeps.
    pub sleeps: u64,
    /// Datagrams larger than the caller's receive slot, dropped.
    pub rx_oversize: u64,
    /// Datagrams sent into a broken ring (lost).
    pub tx_lost: u64,
    /// Rings found corrupt and abandoned.
    pub broken_rings: u64,
}

/// The producer's end of a ring, with its private tail.
struct TxRing {
    head_word: *const AtomicU64,
    data: *mut u8,
    tail: u64,
    /// Last head read from the consumer: free space is at least `cap - (tail - head)`.
    head_cache: u64,
    /// Every header slot from `tail` up to here is zero.
    zeroed: u64,
    /// Listed in `ShmLink::to_zero`.
    zero_due: bool,
    broken: bool,
    touched: bool,
}

/// The consumer's end of a ring, with its private copy of the head.
struct RxRing {
    head_word: *const AtomicU64,
    data: *const u8,
    head: u64,
    broken: bool,
}

impl RxRing {
    /// Asks for the cache line at byte counter `pos` of the ring.
    #[inline(always)]
    fn prefetch(&self, pos: u64, mask: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint and cannot fault; the address is within the ring.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(self.data.add((pos & mask) as usize).cast());
        }
    }

    /// The header word at the head: zero until the producer has written a record there.
    #[inline(always)]
    fn header(&self, mask: u64) -> u64 {
        // A record with the 64-byte wire header spans two lines. Asking for the second one
        // with the header fetches both from the producer's core at once, instead of one
        // after the other once the header has been seen.
        self.prefetch(self.head + REC_ALIGN as u64, mask);
        // SAFETY: `data` is this ring's. Acquire pairs with the producer's release store of
        // the header: the record's bytes are visible once the header is.
        unsafe { header_word(self.data, mask, self.head) }.load(Ordering::Acquire)
    }
}

/// The header word of the record at byte counter `pos`.
///
/// # Safety
/// `data` points to a ring of `mask + 1` bytes, a multiple of [`REC_ALIGN`], that lives as
/// long as the reference is used.
#[inline(always)]
unsafe fn header_word<'a>(data: *const u8, mask: u64, pos: u64) -> &'a AtomicU64 {
    // SAFETY: positions are multiples of 64, so the word is 8-aligned and within the ring.
    unsafe { &*data.add((pos & mask) as usize).cast::<AtomicU64>() }
}

/// A UNIX datagram socket in the abstract namespace, and the peers' addresses.
struct Doorbell {
    sock: OwnedFd,
    peers: Vec<Option<(libc::sockaddr_un, libc::socklen_t)>>,
}

impl Doorbell {
    /// An autobound socket and its name (the bytes of `sun_path` the kernel chose).
    fn bind() -> io::Result<(OwnedFd, Vec<u8>)> {
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: all-zero is a valid sockaddr_un.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let fam = std::mem::size_of::<libc::sa_family_t>() as libc::socklen_t;
        // SAFETY: binding with only the family asks the kernel to autobind an abstract name.
        let r = unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), fam) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: addr is writable for len bytes.
        let r = unsafe {
            libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_un).cast(), &mut len)
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let path_len = (len as usize).saturating_sub(fam as usize);
        let name = addr.sun_path[..path_len.min(addr.sun_path.len())]
            .iter()
            .map(|&c| c as u8)
            .collect();
        Ok((sock, name))
    }

    /// The socket address of a peer's doorbell name; `None` unless it is a plausible
    /// abstract name.
    fn address(name: &[u8]) -> Option<(libc::sockaddr_un, libc::socklen_t)> {
        // SAFETY: all-zero is a valid sockaddr_un.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if name.len() < 2 || name.len() > addr.sun_path.len() || name[0] != 0 {
            return None;
        }
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, &s) in addr.sun_path.iter_mut().zip(name) {
            *d = s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + name.len();
        Some((addr, len as libc::socklen_t))
    }

    fn ring(&self, peer: usize) {
        if let Some(Some((addr, len))) = self.peers.get(peer) {
            let b = [1u8];
            // SAFETY: a valid buffer of one byte and a valid address of `len` bytes. A full
            // queue (EAGAIN) means the peer has wake-ups pending anyway; a vanished peer
            // (ECONNREFUSED) cannot be woken; either way there is nothing to do.
            unsafe {
                libc::sendto(
                    self.sock.as_raw_fd(),
                    b.as_ptr().cast(),
                    1,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    (addr as *const libc::sockaddr_un).cast(),
                    *len,
                )
            };
        }
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        for _ in 0..1024 {
            // SAFETY: receives into a valid 64-byte buffer without blocking.
            let r = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                break;
            }
        }
    }
}

/// Datagrams between the processes of a job on this host through shared-memory rings.
/// See the module documentation.
pub struct ShmLink {
    seg: Segment,
    layout: ShmLayout,
    cfg: ShmConfig,
    rank: Rank,
    nprocs: u32,
    /// Job rank -> index in the host group, `u32::MAX` when not on this host.
    local: Vec<u32>,
    me: usize,
    mask: u64,
    /// Rings to each process of the host, by group index.
    tx: Vec<TxRing>,
    /// Rings from each process of the host, by group index.
    rx: Vec<RxRing>,
    /// Sleeping flags of the host's processes, by group index.
    flags: Vec<*const AtomicU32>,
    /// Group indices written to in the current `send`.
    touched: Vec<usize>,
    /// Rings whose slots ahead of the tail are to be zeroed when idle.
    to_zero: Vec<usize>,
    /// Something was sent since the last empty receive.
    sent_lately: bool,
    /// Where the next `recv` starts, so no ring is always served first.
    rx_next: usize,
    doorbell: Doorbell,
    stats: ShmStats,
}

// SAFETY: the raw pointers all point into `seg`, which the link owns and which stays mapped
// as long as it lives; the words they reach are shared with other processes through atomics
// and the ring protocol, never through references tied to a thread.
unsafe impl Send for ShmLink {}

impl std::fmt::Debug for ShmLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmLink")
            .field("rank", &self.rank)
            .field("group", &self.seg.group().ranks)
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish()
    }
}

/// The second-round blob: sizes (checked equal on the host) and the doorbell's name.
fn encode_extra(cfg: &ShmConfig, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(17 + name.len());
    v.extend_from_slice(&(cfg.ring_bytes as u64).to_le_bytes());
    v.extend_from_slice(&(cfg.max_datagram as u64).to_le_bytes());
    v.push(name.len() as u8);
    v.extend_from_slice(name);
    v
}

fn decode_extra(b: &[u8]) -> Option<(u64, u64, &[u8])> {
    let ring = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
    let dgram = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    let n = *b.get(16)? as usize;
    let name = b.get(17..17 + n)?;
    (b.len() == 17 + n).then_some((ring, dgram, name))
}

impl ShmLink {
    /// Builds this process's end of the host's shared-memory network. `local[r]` tells
    /// whether rank `r` runs on this host. Collective over the whole job (two rendezvous
    /// rounds, see [`Segment::create`]); every process of a host must pass the same `cfg`.
    pub fn create(
        rank: Rank,
        local: &[bool],
        cfg: &ShmConfig,
        rv: &mut dyn Rendezvous,
    ) -> io::Result<ShmLink> {
        cfg.validate()?;
        let group = HostGroup::new(rank, local)?;
        let layout = ShmLayout {
            n: group.len(),
            cap: cfg.ring_bytes,
        };
        let total = layout.total().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared-memory rings too large for this job",
            )
        })?;
        let (sock, name) = Doorbell::bind()?;
        let (seg, extras) =
            Segment::create(&group, SEGMENT_NAME, total, &encode_extra(cfg, &name), rv)?;
        let mut peers = Vec::with_capacity(group.len());
        for (i, e) in extras.iter().enumerate() {
            let r = group.ranks[i];
            let (ring, dgram, name) = decode_extra(e).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("rank {r} sent a malformed shared-memory description"),
                )
            })?;
            if ring != cfg.ring_bytes as u64 || dgram != cfg.max_datagram as u64 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "rank {r} uses shared-memory rings of {ring} bytes and datagrams of \
                         {dgram}, this rank {} and {}: set BULKWIRE_SHM_RING and \
                         BULKWIRE_SHM_DGRAM alike on every process",
                        cfg.ring_bytes, cfg.max_datagram
                    ),
                ));
            }
            peers.push(Doorbell::address(name));
        }
        Ok(ShmLink::from_parts(
            seg,
            layout,
            *cfg,
            Doorbell { sock, peers },
        ))
    }

    /// The links of all `n` processes of a host, made in this process by one thread each
    /// (tests, examples and benchmarks that play every process from one program).
    pub fn in_threads(n: usize, cfg: &ShmConfig) -> io::Result<Vec<ShmLink>> {
        let local = vec![true; n];
        let cfg = *cfg;
        // Creation is collective: every thread must be running before any is joined.
        let makers: Vec<_> = crate::thread_rendezvous(n)
            .into_iter()
            .enumerate()
            .map(|(r, mut rv)| {
                let local = local.clone();
                std::thread::spawn(move || ShmLink::create(r as Rank, &local, &cfg, &mut rv))
            })
            .collect();
        makers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a link's creator panicked")))
            })
            .collect()
    }

    fn from_parts(seg: Segment, layout: ShmLayout, cfg: ShmConfig, doorbell: Doorbell) -> ShmLink {
        let group = seg.group().clone();
        let me = group.me;
        let n = layout.n;
        let base = seg.data();
        assert!(layout.total().is_some_and(|t| t <= seg.data_len()));
        // Every offset below comes from `layout`, whose total fits in the region (asserted
        // above); all are multiples of 8 from a 128-aligned base.
        let at = |off: usize| {
            // SAFETY: `off` is within the region, as said above.
            unsafe { base.add(off) }
        };
        let tx = (0..n)
            .map(|d| {
                let o = layout.ring(me, d);
                TxRing {
                    head_word: at(o.head).cast(),
                    data: at(o.data),
                    tail: 0,
                    head_cache: 0,
                    // A fresh segment is zero throughout, but the first lap runs as
                    // the others do: in a stream, zeroing each next slot before its
                    // header measured faster than skipping it (128-byte messages, 10 %).
                    zeroed: 0,
                    broken: false,
                    zero_due: false,
                    touched: false,
                }
            })
            .collect();
        let rx = (0..n)
            .map(|s| {
                let o = layout.ring(s, me);
                RxRing {
                    head_word: at(o.head).cast(),
                    data: at(o.data),
                    head: 0,
                    broken: false,
                }
            })
            .collect();
        let flags = (0..n)
            .map(|i| at(layout.sleep_flag(i)).cast_const().cast())
            .collect();
        let mut local = vec![u32::MAX; group.nprocs as usize];
        for (i, &r) in group.ranks.iter().enumerate() {
            local[r as usize] = i as u32;
        }
        ShmLink {
            layout,
            cfg,
            rank: group.rank,
            nprocs: group.nprocs,
            local,
            me,
            mask: layout.cap as u64 - 1,
            tx,
            rx,
            flags,
            touched: Vec::with_capacity(n),
            to_zero: Vec::with_capacity(n),
            sent_lately: false,
            rx_next: 0,
            doorbell,
            stats: ShmStats::default(),
            seg,
        }
    }

    /// Counters.
    pub fn stats(&self) -> ShmStats {
        self.stats
    }

    /// The sizes in use.
    pub fn config(&self) -> ShmConfig {
        self.cfg
    }

    /// The processes on this host.
    pub fn group(&self) -> &HostGroup {
        self.seg.group()
    }

    /// The segment and its layout (tests play hostile peers through them).
    pub fn segment(&self) -> (&Segment, ShmLayout) {
        (&self.seg, self.layout)
    }

    #[inline]
    fn local_index(&self, r: Rank) -> Option<usize> {
        match self.local.get(r as usize) {
            Some(&i) if i != u32::MAX => Some(i as usize),
            _ => None,
        }
    }

    #[inline]
    fn flag(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the flag lies in the segment, which lives as long as &self.
        unsafe { &*self.flags[i] }
    }

    /// Wakes the receivers written to since the last call that advertised sleep.
    #[inline]
    fn ring_bells(&mut self) {
        // Pairs with the fence in prepare_sleep: either we see the flag or the sleeper sees
        // the headers we stored.
        fence(Ordering::SeqCst);
        for k in 0..self.touched.len() {
            let d = self.touched[k];
            self.tx[d].touched = false;
            let f = self.flag(d);
            if f.load(Ordering::Relaxed) != 0 && f.swap(0, Ordering::AcqRel) != 0 {
                self.doorbell.ring(d);
                self.stats.doorbells += 1;
            }
        }
        self.touched.clear();
    }

    fn broke(&mut self, what: &str, peer: usize) {
        self.stats.broken_rings += 1;
        tracing::warn!(
            rank = self.rank,
            peer = self.seg.group().ranks[peer],
            "shared-memory ring abandoned: {what}"
        );
    }
}

/// Copies `src` into the ring at byte counter `pos`, wrapping at the end.
///
/// # Safety
/// `data` points to a ring of `mask + 1` bytes and `src.len() <= mask + 1`.
#[inline(always)]
unsafe fn copy_in(data: *mut u8, mask: u64, pos: u64, src: &[u8]) {
    let off = (pos & mask) as usize;
    let first = src.len().min(mask as usize + 1 - off);
    // SAFETY: off + first <= cap and src.len() - first <= cap (caller's contract); private
    // source, shared destination that only this producer writes in this range.
    unsafe {
        ptr::copy_nonoverlapping(src.as_ptr(), data.add(off), first);
        ptr::copy_nonoverlapping(src.as_ptr().add(first), data, src.len() - first);
    }
}

/// Copies from the ring at byte counter `pos` into `dst`, wrapping at the end.
///
/// # Safety
/// `data` points to a ring of `mask + 1` bytes and `dst.len() <= mask + 1`.
#[inline(always)]
unsafe fn copy_out(data: *const u8, mask: u64, pos: u64, dst: &mut [u8]) {
    let off = (pos & mask) as usize;
    let first = dst.len().min(mask as usize + 1 - off);
    // SAFETY: bounds as in copy_in. The producer may (if hostile) write these bytes
    // concurrently: that can only change the values copied, which the layers above check.
    unsafe {
        ptr::copy_nonoverlapping(data.add(off), dst.as_mut_ptr(), first);
        ptr::copy_nonoverlapping(data, dst.as_mut_ptr().add(first), dst.len() - first);
    }
}

/// A caller's handler of datagrams read in place.
type Visit<'a> = &'a mut dyn FnMut(&[u8]);

impl ShmLink {
    /// Takes up to `batch.slots()` waiting records (of at most a slot's size; longer ones
    /// are counted and skipped), fairly across the rings, and releases their space.
    /// Without `visit`, each is copied into `batch`. With it, each is handed to `visit`
    /// where it lies in the ring, unless it wraps around the ring's end: then it goes
    /// through the batch's first slot.
    fn drain(&mut self, batch: &mut RxBatch, mut visit: Option<Visit<'_>>) -> usize {
        let max = batch.slots();
        let slot_size = batch.slot_size();
        let n = self.rx.len();
        let start = self.rx_next;
        self.rx_next = if start + 1 == n { 0 } else { start + 1 };
        let max_datagram = self.cfg.max_datagram;
        let ring_bytes = self.mask as usize + 1;
        let mut count = 0;
        for k in 0..n {
            if count >= max {
                break;
            }
            let s = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            let ring = &mut self.rx[s];
            if ring.broken {
                continue;
            }
            let old = ring.head;
            let mut bad = None;
            while count < max {
                let hdr = ring.header(self.mask);
                if hdr == 0 {
                    break;
                }
                let pos = ring.head;
                let len = hdr as u32 as usize;
                let need = record_bytes(len);
                // The slot past this record is read next, to learn whether more follow.
                // The producer wrote it (zeroed it) with this record, so it sits in the
                // producer's cache: ask for it now, and it arrives while this record is
                // handled, instead of costing a transfer between cores after it (~50 ns
                // on every message's critical path here).
                ring.prefetch(pos + need, self.mask);
                if (hdr >> 32) as u32 != MARK {
                    bad = Some("a record header without the marker");
                    break;
                }
                if len > max_datagram {
                    bad = Some("a record longer than the largest datagram");
                    break;
                }
                if len > slot_size {
                    self.stats.rx_oversize += 1;
                } else {
                    let off = ((pos + REC_HDR as u64) & self.mask) as usize;
                    match visit.as_deref_mut() {
                        Some(f) if off + len <= ring_bytes => {
                            // SAFETY: len <= max_datagram < cap, checked above, and the
                            // record does not wrap, so off..off+len lies in the ring.
                            // The producer writes none of it before we publish a head past
                            // it, below (a hostile one could only change the values, which
                            // the layers above check, as with a copy).
                            f(unsafe { std::slice::from_raw_parts(ring.data.add(off), len) });
                        }
                        visit => {
                            let slot = if visit.is_some() { 0 } else { batch.len() };
                            // SAFETY: len <= max_datagram < cap, checked above.
                            unsafe {
                                copy_out(
                                    ring.data,
                                    self.mask,
                                    pos + REC_HDR as u64,
                                    &mut batch.slot_mut(slot)[..len],
                                )
                            };
                            match visit {
                                Some(f) => f(&batch.slot_mut(0)[..len]),
                                None => batch.push_slot(slot, len),
                            }
                        }
                    }
                    count += 1;
                }
                ring.head = pos + need;
            }
            if ring.head != old {
                // Release: we are done reading the bytes before the producer may reuse them.
                // SAFETY: the word lies in the segment.
                unsafe { (*ring.head_word).store(ring.head, Ordering::Release) };
            }
            if let Some(what) = bad {
                ring.broken = true;
                self.broke(what, s);
            }
        }
        self.stats.rx_datagrams += count as u64;
        if count == 0 {
            self.idle();
        }
        count
    }

    /// A receive found nothing. On the second one in a row with no send between them (a
    /// wait, not a stream), zeroes the slots ahead of the tails written lately.
    fn idle(&mut self) {
        if std::mem::take(&mut self.sent_lately) {
            return;
        }
        let cap = self.layout.cap as u64;
        while let Some(d) = self.to_zero.pop() {
            let ring = &mut self.tx[d];
            ring.zero_due = false;
            if ring.broken {
                continue;
            }
            // Only free space: the consumer is done with everything before `head + cap`.
            let to = (ring.tail + ZERO_AHEAD).min(ring.head_cache + cap);
            let mut z = ring.zeroed.max(ring.tail);
            while z < to {
                // SAFETY: `z` is a multiple of 64 in the free space of this ring, which
                // only this producer writes.
                unsafe { header_word(ring.data, self.mask, z).store(0, Ordering::Relaxed) };
                z += REC_ALIGN as u64;
            }
            ring.zeroed = ring.zeroed.max(z);
        }
    }
}

impl Link for ShmLink {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn nprocs(&self) -> u32 {
        self.nprocs
    }

    /// The configured datagram size for processes on this host; 0 for the others (this
    /// link cannot reach them).
    fn capabilities(&self) -> LinkCaps {
        let max = self.cfg.max_datagram;
        LinkCaps {
            max_datagram: (0..self.nprocs())
                .map(|p| {
                    if self.local_index(p).is_some() {
                        max
                    } else {
                        0
                    }
                })
                .collect(),
            recv_slot: max,
            reliable: true,
            intact: true,
            private: true,
        }
    }

    fn send(&mut self, batch: &[Tx<'_>]) -> io::Result<usize> {
        let cap = self.layout.cap as u64;
        let mut sent = 0;
        for t in batch {
            let len = t.len();
            let d = match self.local_index(t.dst) {
                Some(d) if len <= self.cfg.max_datagram => d,
                _ if sent > 0 => break, // the error comes with the next call
                Some(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "datagram of {len} bytes exceeds the shared-memory limit of {}",
                            self.cfg.max_datagram
                        ),
                    ));
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "rank {} is not on this host: shared memory cannot reach it",
                            t.dst
                        ),
                    ));
                }
            };
            let ring = &mut self.tx[d];
            if ring.broken {
                self.stats.tx_lost += 1;
                sent += 1;
                continue;
            }
            let need = record_bytes(len);
            // Strictly less than the ring: the header slot past the record stays free.
            if ring.tail - ring.head_cache + need >= cap {
                // SAFETY: the word lies in the segment, which lives as long as self.
                let h = unsafe { (*ring.head_word).load(Ordering::Acquire) };
                if h > ring.tail || ring.tail - h > cap {
                    ring.broken = true;
                    self.broke("consumer published an impossible head", d);
                    self.stats.tx_lost += 1;
                    sent += 1;
                    continue;
                }
                ring.head_cache = h;
                if ring.tail - h + need >= cap {
                    self.stats.tx_full += 1;
                    break;
                }
            }
            let hdr = (len as u64) | ((MARK as u64) << 32);
            let pos = ring.tail;
            let next = pos + need;
            // SAFETY: header slots are 8-aligned and within the ring (positions are multiples
            // of 64, cap is a multiple of 64); the space from `pos` to `pos + need` and the
            // next header slot are free (checked against the consumer's head above), so only
            // we write them.
            unsafe {
                copy_in(ring.data, self.mask, pos + REC_HDR as u64, t.head);
                copy_in(
                    ring.data,
                    self.mask,
                    pos + (REC_HDR + t.head.len()) as u64,
                    t.body,
                );
                if next >= ring.zeroed {
                    header_word(ring.data, self.mask, next).store(0, Ordering::Relaxed);
                    ring.zeroed = next + REC_ALIGN as u64;
                }
                // Release: the datagram and the zeroed next slot are visible before the
                // header that announces them.
                header_word(ring.data, self.mask, pos).store(hdr, Ordering::Release);
            }
            ring.tail = next;
            if ring.zeroed - next < ZERO_LOW && !ring.zero_due {
                ring.zero_due = true;
                self.to_zero.push(d);
            }
            if !ring.touched {
                ring.touched = true;
                self.touched.push(d);
            }
            sent += 1;
        }
        if !self.touched.is_empty() {
            self.sent_lately = true;
            self.ring_bells();
        }
        self.stats.tx_datagrams += sent as u64;
        Ok(sent)
    }

    fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        Ok(self.drain(batch, None))
    }

    /// Datagrams are read where they lie in the ring, saving the copy into a batch: for
    /// large messages the copy out of the ring into the message is then the only one on
    /// this side. A record that wraps around the ring's end goes through `batch`.
    fn recv_each(&mut self, batch: &mut RxBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        batch.clear();
        Ok(self.drain(batch, Some(f)))
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let r = if self.prepare_sleep() {
            crate::poll_readable(self.doorbell.sock.as_raw_fd(), timeout)
        } else {
            Ok(())
        };
        self.end_sleep();
        r
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.doorbell.sock.as_raw_fd())
    }

    fn prepare_sleep(&mut self) -> bool {
        let f = self.flag(self.me);
        f.store(1, Ordering::SeqCst);
        // Pairs with the fence in ring_bells (see the module docs).
        fence(Ordering::SeqCst);
        for ring in &self.rx {
            if !ring.broken && ring.header(self.mask) != 0 {
                self.flag(self.me).store(0, Ordering::Relaxed);
                return false;
            }
        }
        self.stats.sleeps += 1;
        true
    }

    fn end_sleep(&mut self) {
        self.flag(self.me).store(0, Ordering::Relaxed);
        self.doorbell.drain();
    }
}
